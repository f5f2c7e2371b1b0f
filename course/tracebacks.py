"""What a student sees when a cell fails inside the course's code: the cause first, then their own lines.

A check that fails deep inside ``course.checking`` would show, by IPython's default, a dozen frames of
the course and of numba with the clone's absolute paths, and the sentence that names the mistake last.
``install()`` (called by ``course.use_device()`` in a notebook's first cell) changes that for errors
raised through the course's own code (``course``, ``kernels``, ``grader``):

- the error output, which JupyterLab shows and nbgrader's Validate dialog quotes, is the message first
  (the course's checks put the likely cause there), then the lines of the student's cells the error went
  through, then one line saying how many frames of the course and its libraries were left out;
- the whole traceback stays one click away: a folded "full traceback" block under the error, with the
  course's files named relative to the course (never the clone's absolute paths); ``%tb`` prints it too.

An error that never went through the course's code (a typo in a student's cell) keeps IPython's own
traceback. Nothing changes when the grader runs a notebook (``NBGRADER_EXECUTION=autograde``): the
grader writes its own feedback.
"""

from __future__ import annotations

import html
import os
import pathlib
import re
import sys
import traceback

__all__ = ["install", "short_traceback", "course_file", "wrapped"]

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("course", "kernels", "grader", "inference")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RED, _BOLD, _RESET = "\x1b[31m", "\x1b[1m", "\x1b[0m"
_installed = False


def course_file(filename: str) -> str | None:
    """``filename`` relative to the course (``course/checking.py``) when it is one of the course's own
    modules, else None."""
    try:
        relative = pathlib.Path(os.path.realpath(filename)).relative_to(ROOT)
    except ValueError:
        return None
    return str(relative) if relative.parts and relative.parts[0] in PACKAGES else None


WIDTH = 100     # nbgrader's Validate dialog shows the error unwrapped, in a box about this wide


def wrapped(message: str, width: int = WIDTH) -> list[str]:
    """Every line of ``message`` wrapped to ``width`` columns, nothing dropped; a continuation keeps the
    line's indentation and two more spaces."""
    import textwrap

    out = []
    for line in message.splitlines():
        indent = line[:len(line) - len(line.lstrip())]
        out += textwrap.wrap(line, width=width, subsequent_indent=indent + "  ", break_long_words=False,
                             break_on_hyphens=False) or [""]
    return out


def _cell_name(shell, filename: str) -> str | None:
    """``In[3]`` for the file of a notebook cell, else None."""
    try:
        named = shell.compile.format_code_name(filename)
    except Exception:  # noqa: BLE001 - an older IPython: no cell names
        return None
    return named[1] if named else None


def short_traceback(shell, etype, value, tb) -> list[str] | None:
    """The lines of the short error output, or None when no frame of the traceback is the course's."""
    frames = traceback.extract_tb(tb)
    if not any(course_file(frame.filename) for frame in frames):
        return None
    message = "\n".join(wrapped(str(value).strip()))
    lines = [f"{_RED}{_BOLD}{etype.__name__}{_RESET}: {message}" if message else f"{_RED}{_BOLD}{etype.__name__}{_RESET}"]
    own = [(cell, frame) for frame in frames if (cell := _cell_name(shell, frame.filename))]
    if own:
        lines.append("")
        lines.append("in your cells:")
        for cell, frame in own:
            code = (frame.line or "").strip()
            lines.append(f"  Cell {cell}, line {frame.lineno}{': ' + code if code else ''}")
    hidden = len(frames) - len(own)
    if hidden:
        lines.append("")
        lines += wrapped(f"({hidden} frame{'s' if hidden != 1 else ''} inside the course and the libraries it "
                         f"uses left out; in the notebook, \"full traceback\" under the error lists them, and so "
                         f"does %tb)")
    return ["\n".join(lines)]


def _full_text(shell, etype, value, tb) -> str:
    """IPython's whole traceback as plain text, the course's files named relative to the course."""
    stb = shell.InteractiveTB.structured_traceback(etype, value, tb)
    text = _ANSI.sub("", shell.InteractiveTB.stb2text(stb))
    return text.replace(str(ROOT) + os.sep, "")


def _handler(shell, etype, value, tb, tb_offset=None):
    short = short_traceback(shell, etype, value, tb)
    if short is None:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return None
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb
    shell._showtraceback(etype, value, short)
    try:
        from IPython.display import HTML, display

        display(HTML("<details><summary>full traceback</summary><pre>"
                     + html.escape(_full_text(shell, etype, value, tb)) + "</pre></details>"))
    except Exception:  # noqa: BLE001 - the short output is already shown
        pass
    return None


def install() -> bool:
    """Show errors raised through the course's code cause first (an IPython kernel only; never when
    graded). Returns whether it is installed; calling it again is harmless."""
    global _installed
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return False
    if not _installed:
        shell.set_custom_exc((Exception,), _handler)
        _installed = True
    return True
