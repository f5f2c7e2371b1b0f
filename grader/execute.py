"""nbgrader's Execute step, made to survive what submissions do: crashes, hangs and cheating.

``GuardedExecute`` replaces ``nbgrader.preprocessors.Execute`` in autograding. Differences:

- before the first cell it installs ``grader.guard`` in the kernel (no reading grader files, no
  processes or network) and silences warnings (nbgrader scores a grade cell 0 when it writes to
  stderr, and a harmless NumbaPerformanceWarning would do that);
- when a cell times out (``timeout`` seconds) or the kernel dies (``os._exit``, a segfault, out of
  memory), the cell gets an error output that says so, the event is recorded, and grading goes
  on in a fresh kernel: the notebook's non-grade code cells before that cell are run again
  (outputs discarded; cells that timed out or crashed are not), and so are the earlier grade cells
  that define a name a later cell needs (a hidden cell's helpers; of a grade cell that itself timed
  out, its imports, functions and classes), so every later exercise is graded as it would have
  been without the restart; then execution continues with the next cell. So a
  hanging kernel in exercise 2 costs exercise 2, not exercise 3. After ``max_restarts`` restarts,
  or when the rebuild itself fails, every remaining code cell gets a "not run" error (grade cells
  then score 0, never full marks by silence);
- a grade cell that raised keeps only its error as a score-bearing output: its ``execute_result``
  outputs become ``display_data`` (nbgrader scores a grade cell by its first ``execute_result``
  when that comes before the error, so a cell that failed could otherwise score);
- the release's example cells (``grader.markers.example_cells``: visible tests, plots, tables of
  bytes; the student runs them, no grade depends on them) are not run: each gets a line saying so;
- with ``sandbox`` set, the kernel runs inside a bubblewrap sandbox (``grader.guard.sandbox_command``)
  where only its scratch folder is writable and no grader secret exists;
- events go to ``events_file`` (JSON) for the grader to turn into a status.
"""

from __future__ import annotations

import ast
import builtins
import json

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Integer, Unicode

TIMEOUT_ENAME = "CellTimeoutError"


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _label(cell, index: int) -> str:
    return cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index}"


def _is_grade(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("grade"))


EXAMPLE_NOTE = "(an example for you to run: not run when graded; the graded cells test the same kernel)\n"


def _is_example(cell, examples: set) -> bool:
    """A cell of the release's examples that is still one in the sanitized notebook (the same rule)."""
    from grader.markers import example_cells

    return cell.metadata.get("nbgrader", {}).get("grade_id") in examples and bool(example_cells({"cells": [cell]}))


def demote_results_of_failed_cell(cell) -> bool:
    """In a grade cell that raised, put the error first and turn results into plain displays.

    nbgrader reads a grade cell's score from the first ``execute_result`` or error it meets, so a
    cell that displayed a value (``sys.displayhook(2)``, an expression IPython echoes) before it
    failed would score that value. Returns whether the cell had an error.
    """
    outputs = cell.get("outputs", [])
    errors = [o for o in outputs if o.get("output_type") == "error"]
    if not errors:
        return False
    others = []
    for output in outputs:
        if output.get("output_type") == "execute_result":
            output = NotebookNode(output_type="display_data", data=output.get("data", {}),
                                  metadata=output.get("metadata", {}))
        if output.get("output_type") != "error":
            others.append(output)
    cell.outputs = errors + others
    return True


def cell_names(source: str) -> tuple[set[str], set[str]] | None:
    """(names a cell binds at top level, names it reads anywhere), or None when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.Attribute):
            read.add(node.attr)
    return bound, read


def definitions_only(source: str) -> str:
    """The top-level imports, functions and classes of a cell, which run without calling anything
    of the submission: what a cell that timed out or crashed had defined before it stopped."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return "\n".join(ast.unparse(node) for node in tree.body if isinstance(node, keep))


def cells_to_rebuild(sources: list[tuple[str, bool]], needed_later: list[str]) -> list[int]:
    """Indices of the cells to re-run, in order, so the state the later cells see is rebuilt.

    sources: ``(source, optional)`` of each earlier cell; an empty source is never run. An
    optional cell (a grade cell, or the definitions of a cell that timed out) is re-run only when
    it binds a name that a later cell, or a cell already chosen, reads (a hidden cell defining
    helpers for the hidden cells below), because skipping it would leave those cells failing with
    a NameError they never had. Every other cell is re-run. needed_later: the sources of the
    cells still to run.
    """
    needed: set[str] = set()
    for source in needed_later:
        parsed = cell_names(source)
        if parsed is not None:
            needed |= parsed[1]
    needed -= set(dir(builtins))
    chosen = []
    for index in range(len(sources) - 1, -1, -1):
        source, optional = sources[index]
        if not source.strip():
            continue
        parsed = cell_names(source)
        if optional and parsed is not None and not parsed[0] & needed:
            continue
        chosen.append(index)
        if parsed is not None:
            needed |= parsed[1]
    return chosen[::-1]


class GuardedExecute(Execute):
    """Execute cells with a guard in the kernel, recovering from timeouts and crashes."""

    guard_policy = Unicode("", help="JSON policy for grader.guard.install; empty: no guard").tag(config=True)
    events_file = Unicode("", help="where to write the JSON list of timeouts and crashes").tag(config=True)
    working_dir = Unicode("", help="the kernel's working folder (default: nbgrader's)").tag(config=True)
    max_restarts = Integer(3, help="kernel restarts allowed per notebook before giving up").tag(config=True)
    sandbox = Unicode("", help="JSON {scratch, writable_files}: run the kernel in a bubblewrap sandbox; "
                               "empty: no sandbox").tag(config=True)
    launch_checks = Bool(True, help="check every launch of the submission's kernels (course.gates): GPU "
                                    "compile first, inputs unchanged after").tag(config=True)
    examples = Unicode("[]", help="JSON list of the grade_ids of the example cells (grader.markers.example_cells "
                                  "of the release): not run when graded").tag(config=True)
    compile_service = Unicode("", help="socket of the grading run's GPU compile service (grader.compile_service) "
                                       "for the launch checks; empty: the kernel starts a helper of its own"
                              ).tag(config=True)

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        if self.sandbox:
            from grader.guard import sandbox_command

            spec = json.loads(self.sandbox)
            unwrapped = km.format_kernel_cmd

            def format_kernel_cmd(extra_arguments=None):
                # The connection file exists by now: jupyter_client writes it just before.
                return sandbox_command(unwrapped(extra_arguments=extra_arguments), scratch=spec["scratch"],
                                       files=[km.connection_file, *spec.get("files", [])],
                                       writable_files=spec.get("writable_files", []),
                                       font_cache=spec.get("font_cache"))

            km.format_kernel_cmd = format_kernel_cmd
        return km

    def preprocess(self, nb, resources=None, km=None):
        # Same set-up as ExecutePreprocessor.preprocess, then our own loop over kernels.
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self.events: list[dict] = []
        self._failed: set[int] = set()     # cells that timed out or crashed: never run again
        examples = set(json.loads(self.examples))
        self._examples = {index for index, cell in enumerate(self.nb.cells) if _is_example(cell, examples)}
        start, restarts = 0, 0
        while start is not None:
            kwargs = {"cwd": self.working_dir} if self.working_dir else {}
            with self.setup_kernel(**kwargs):
                info_msg = self.wait_for_reply(self.kc.kernel_info())
                self.nb.metadata["language_info"] = info_msg["content"]["language_info"]
                self._prepare_kernel()
                if start and not self._rebuild_state(start):
                    self._mark_not_run(start, f"the kernel could not be restarted after {self.events[-1]['cell']}")
                    start = None
                else:
                    start = self._run_cells(start, resources)
                if start is not None:
                    restarts += 1
                    # A dead or stuck kernel is killed, not asked to shut down politely.
                    self.shutdown_kernel = "immediate"
            if start is not None and restarts > self.max_restarts:
                self._mark_not_run(start, f"grading stopped after {self.max_restarts} kernel restarts")
                start = None
        self.set_widgets_metadata()
        self._write_events()
        return self.nb, self.resources

    def _prepare_kernel(self) -> None:
        code = "import warnings as _w\n_w.simplefilter('ignore')\ndel _w\n"
        # Every kernel of the submission compiles for a GPU before it runs and leaves its inputs alone
        # (course.gates), and host-Python answers run in processes of their own (grader.host_answers):
        # the compiler's helper and the runner of host answers start here, before the guard forbids
        # starting processes.
        if self.launch_checks:
            code += f"import course.gates as _c\n_c.install({self.compile_service or None!r})\ndel _c\n"
            code += "import grader.host_answers as _h\n_h.start_runner()\ndel _h\n"
        else:   # host Python graded as submitted: no compiler helper (it could not start under the guard)
            code += "import os as _o\n_o.environ['COURSE_GPU_CHECK'] = '0'\ndel _o\n"
        if self.guard_policy:
            code += (f"import grader.guard as _g\n_g.install({self.guard_policy!r})\ndel _g\n")
        reply = self._quiet(code)
        if reply != "ok":
            raise RuntimeError(f"could not prepare the grading kernel: {reply}")

    def _quiet(self, source: str) -> str:
        """Run code without recording outputs: 'ok', 'error', 'timeout' or 'dead'."""
        try:
            msg_id = self.kc.execute(source, silent=True, store_history=False)
            reply = self.wait_for_reply(msg_id)
        except DeadKernelError:
            return "dead"
        if reply is None:
            return "timeout"
        return "ok" if reply["content"]["status"] == "ok" else "error"

    def _run_cells(self, start: int, resources) -> int | None:
        """Execute cells from ``start``; return the index to resume from after a restart, or None."""
        for index in range(start, len(self.nb.cells)):
            cell = self.nb.cells[index]
            if index in self._examples:
                cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=EXAMPLE_NOTE)]
                continue
            try:
                self.preprocess_cell(cell, resources, index)
            except DeadKernelError:
                cell.outputs.append(_error("KernelCrashed", "the kernel died while running this cell "
                                           "(os._exit, a segmentation fault or running out of memory); "
                                           "the grader restarted it for the cells below"))
                self._record("crash", index)
                return index + 1
            except CellTimeoutError:
                # The interrupt after the timeout was not answered: the kernel is stuck.
                cell.outputs.append(_error(TIMEOUT_ENAME, f"no reply within {self.timeout} s and the kernel "
                                           "ignored the interrupt; the grader restarted it"))
                self._record("timeout", index)
                return index + 1
            if _is_grade(cell):
                demote_results_of_failed_cell(cell)
            outputs = self.nb.cells[index].get("outputs", [])
            if any(o.get("output_type") == "error" and o.get("ename") == TIMEOUT_ENAME for o in outputs):
                # Interrupted: kernel threads (the simulator's) may still be running, so restart cleanly.
                self._record("timeout", index)
                return index + 1
        return None

    def _rebuild_state(self, upto: int) -> bool:
        """Re-run, in the fresh kernel, what the cells from ``upto`` on need of the cells before it
        (``cells_to_rebuild``); False when that fails."""
        earlier = []
        for index, cell in enumerate(self.nb.cells[:upto]):
            if cell.cell_type != "code" or index in self._examples:
                earlier.append(("", False))
            elif index in self._failed:
                # A grade cell that hung may have defined helpers for the hidden tests below before
                # it did; a student's cell that hung costs its own exercise and is not run again.
                earlier.append((definitions_only(cell.source) if _is_grade(cell) else "", True))
            else:
                earlier.append((cell.source, _is_grade(cell)))
        later = [c.source for c in self.nb.cells[upto:] if c.cell_type == "code"]
        for index in cells_to_rebuild(earlier, later):
            cell = self.nb.cells[index]
            outcome = self._quiet(earlier[index][0])
            if outcome in ("timeout", "dead"):
                self.events[-1]["rebuild"] = f"{outcome} in {_label(cell, index)}"
                return False
        self.events[-1]["rebuild"] = "ok"
        return True

    def _mark_not_run(self, start: int, why: str) -> None:
        for cell in self.nb.cells[start:]:
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = [_error("NotRun", f"not run: {why}")]

    def _record(self, kind: str, index: int) -> None:
        self._failed.add(index)
        cell = self.nb.cells[index]
        self.events.append({"kind": kind, "index": index, "cell": _label(cell, index), "grade": _is_grade(cell)})
        self._write_events()

    def _write_events(self) -> None:
        if self.events_file:
            with open(self.events_file, "w", encoding="utf-8") as f:
                json.dump(self.events, f, indent=1)
