"""Hidden tests never leak through feedback, whatever a submission prints and however it encodes it.

The toy course's hidden test is given, as comments, every hidden line and every solution line of
the course's five days: a submission that reads IPython's input history once the hidden tests ran
holds all of them, and prints them whole, in pieces, reversed, base64-encoded, as an error
message, through an earlier display it rewrites, into files of its folder, or buried in megabytes of
output. Every feedback page and every handed-back file is then searched for every one of those
lines, as written, with whitespace removed and lines joined, reversed and base64-decoded. The same
search run over the instructor's executed notebooks must find the leaks: the attacks really ran.

Every string literal of the hidden tests is planted and searched for too, and the likely cause a failed
grade cell names (``grader.feedback.likely_cause``) is attacked: submissions raise messages that hold the
course's phrases for a cause next to the hidden lines, or an exception named like the course's, and honest
wrong answers fail hidden asserts whose messages are hidden literals or show a hidden input. Such a cell
shows one of the feedback's fixed sentences, never a word of the message.
"""

import ast
import base64
import binascii
import html
import json
import pathlib
import re
import textwrap

import nbformat
import pytest

from grader import release
from grader.autograde import MAX_FEEDBACK_PAGE_BYTES
from grader.feedback import HIDDEN_OUTPUT_NOTE, LIKELY_CAUSES, MAX_TOTAL_CHARS, TRUNCATED_NOTE
from grader.grade import grade
from grader.markers import BEGIN_HIDDEN, END_HIDDEN, MIN_SECRET_CHARS, read_notebook, secret_lines, split_blocks
from grader.nbgrader_api import PROJECT_ROOT
from grader.sample_cases import Case, build_submission
from grader.toy import ADD_ONE_SOLUTION, TOY, make_toy_course


def _strip_markers(source):
    return "\n".join(line for line in source.splitlines() if "### " not in line)


ADD_ONE = _strip_markers(ADD_ONE_SOLUTION)
OWN_OUTPUT = "my own output, printed before any hidden test ran"
# Runs after the first hidden test: IPython's input history then holds the hidden tests.
READ_HISTORY = "import base64, os\nseen = '\\n'.join(get_ipython().user_ns['In'])\n"
SQUARE = "def square(x):\n    return x * x\n"
LEAKS = {
    "plain": READ_HISTORY + "print(seen)\n" + SQUARE,
    "pieces": READ_HISTORY + "for start in range(0, len(seen), 7):\n    print(seen[start:start + 7])\n" + SQUARE,
    "reversed": READ_HISTORY + "print(seen[::-1])\n" + SQUARE,
    "base64": READ_HISTORY + "print(base64.b64encode(seen.encode()).decode())\n" + SQUARE,
    "stderr-and-result": READ_HISTORY + "import sys\nsys.stderr.write(seen[::-1])\n" + SQUARE + "seen\n",
    "error-message": READ_HISTORY + "def square(x):\n    raise AssertionError(seen[::-1])\n",
    "files": READ_HISTORY + SQUARE + (
        "for name in ('leak.txt', 'leak.html', 'day00_toy.txt', 'timestamp.txt', 'submission_secret.txt'):\n"
        "    open(name, 'w').write(seen)\n"
        "os.makedirs('more', exist_ok=True)\n"
        "open(os.path.join('more', 'leak.html'), 'w').write(base64.b64encode(seen.encode()).decode())\n"),
    "rewrites-a-display": READ_HISTORY + SQUARE
    + "from IPython.display import update_display\nupdate_display({'text/plain': seen[::-1]}, raw=True, display_id='mine')\n",
    "huge": READ_HISTORY + SQUARE + "for _ in range(20):\n    print('y' * 50_000)\nprint(seen[::-1])\n",
}
# The course's phrase for a cause (grader.feedback.LIKELY_CAUSES), raised next to the hidden lines.
FORGED = "wrong offset within the block: "
LEAKS.update({
    "forged-cause": READ_HISTORY + (
        "def square(x):\n"
        "    lines = seen.splitlines()\n"
        f"    raise AssertionError('likely cause:\\n' + '\\n'.join('  - {FORGED}' + line for line in lines))\n"),
    "forged-kernel-failed": READ_HISTORY + (
        "class KernelFailed(AssertionError):\n    pass\n\n"
        "def square(x):\n"
        "    raise KernelFailed('Axis 2 of the cache is the slot within a block: ' + ' '.join(seen.splitlines()))\n"),
})
# Honest wrong answers: a hidden assert fails with a message that is a hidden literal, or shows a hidden input.
HIDDEN_INPUT_SHOWN = "square got the hidden input -4"
WRONG = {
    "wrong-for-hidden-cases": "def square(x):\n    return x * abs(x)\n",
    "shows-a-hidden-input": ("def square(x):\n    if x < 0:\n"
                             "        raise ValueError(f'square got the hidden input {x}')\n    return x * x\n"),
}
WRONG_ADD_ONE = ADD_ONE.replace("out[i] = x[i] + 1.0", "out[i] = x[i] + (1.0 if i < 32 else 2.0)")
# The answer cell above the hidden tests: the student's own output, kept in feedback.
EARLY = {student: ADD_ONE + f"\nprint({OWN_OUTPUT!r})\n" for student in [*LEAKS, *WRONG]}
EARLY["wrong-for-hidden-cases"] = WRONG_ADD_ONE
EARLY["rewrites-a-display"] += "display('a display of mine', display_id='mine')\n"
EARLY["huge"] += "for _ in range(100):\n    print('x' * 50_000)\n"
HANDED_BACK = {f"{TOY}.html", f"{TOY}.ipynb", "timestamp.txt", "submission_secret.txt"}


def _course_secrets() -> list[str]:
    """Every secret hidden-test and solution line of the course's solution notebooks."""
    lines = []
    for path in sorted((PROJECT_ROOT / "solutions").glob("*/*.ipynb")):
        nb = read_notebook(path)
        lines += secret_lines(nb, "hidden") + secret_lines(nb, "solution")
    assert len(lines) > 100, "the course's solution notebooks must have hidden tests and solutions"
    literals = course_hidden_literals()
    assert len(literals) > 50, "the hidden tests must have string literals"
    return list(dict.fromkeys(lines + literals))


def _is_content(text: str) -> bool:
    return len(re.sub(r"[\s()\[\]{},:;'\"#]", "", text)) >= MIN_SECRET_CHARS


def _literal_lines(source: str) -> list[str]:
    """The lines of every string literal of ``source`` (of an f-string: its text between the fields)."""
    found = []
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if isinstance(node, ast.JoinedStr):
            found += [v.value for v in node.values if isinstance(v, ast.Constant)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
    return [line.strip() for text in found for line in text.splitlines()]


def course_hidden_literals(assignment: str | None = None) -> list[str]:
    """Every line of a string literal of the hidden tests (of one assignment, or of all) that carries
    content and that its released notebook does not show: messages, labels, names the tests use."""
    found = []
    for path in sorted((PROJECT_ROOT / "solutions").glob(f"{assignment or '*'}/*.ipynb")):
        released = (PROJECT_ROOT / "exercises" / path.parent.name / path.name).read_text(encoding="utf-8")
        for cell in read_notebook(path).cells:
            source = cell.source if isinstance(cell.source, str) else "".join(cell.source)
            hidden = "\n".join(split_blocks(source)["hidden"])
            if hidden.strip():
                found += [line for line in _literal_lines(hidden)
                          if _is_content(line) and line not in released and json.dumps(line)[1:-1] not in released]
    return list(dict.fromkeys(found))


def _plant_secrets(root: pathlib.Path, planted: list[str]) -> None:
    """Add ``planted`` as comments to the toy's hidden test (they run in the kernel with it)."""
    path = root / "solutions" / TOY / f"{TOY}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells if c.metadata["nbgrader"]["grade_id"] == "add_one_hidden")
    comments = "\n".join("# " + line for line in planted)
    cell.source = cell.source.replace(END_HIDDEN, comments + "\n" + END_HIDDEN)
    assert BEGIN_HIDDEN in cell.source
    nbformat.write(nb, str(path))


def _readable(path: pathlib.Path) -> str:
    """What a reader of a feedback file sees: HTML as text and as markup, JSON strings decoded."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        return html.unescape(re.sub(r"<[^>]+>", "", text)) + "\n" + html.unescape(text)
    if path.suffix == ".ipynb":
        strings = []

        def walk(node):
            if isinstance(node, str):
                strings.append(node)
            elif isinstance(node, dict):
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(json.loads(text))
        return "\n".join(strings)
    return text


_BASE64_RUN = re.compile(r"[A-Za-z0-9+/=]{40,}")


def _views(text: str) -> list[str]:
    """The text as written, with all whitespace removed, reversed, and base64 runs decoded."""
    decoded = []
    for run in _BASE64_RUN.findall(text):
        for offset in range(4):               # the run may start with a word that is not base64
            packed = run[offset:].rstrip("=")
            try:
                decoded.append(base64.b64decode(packed[: len(packed) // 4 * 4]).decode("utf-8", "replace"))
            except (binascii.Error, ValueError):
                continue
    views = []
    for view in [text] + decoded:
        squeezed = re.sub(r"\s", "", view)
        views += [view, squeezed, view[::-1], squeezed[::-1]]
    return views


def leaked_lines(text: str, secrets: list[str]) -> list[str]:
    views = _views(text)
    found = []
    for line in secrets:
        squeezed = re.sub(r"\s", "", line)
        if any(line in view or squeezed in view for view in views):
            found.append(line)
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("leaks")
    root = make_toy_course(base / "course")
    planted = _course_secrets()
    _plant_secrets(root, planted)
    release.generate([TOY], root=root)
    released = json.loads((root / "exercises" / TOY / f"{TOY}.ipynb").read_text())
    released_text = json.dumps(released)
    subs = base / "submissions"
    for student, code in {**LEAKS, **WRONG}.items():
        path = subs / student / TOY / f"{TOY}.ipynb"
        path.parent.mkdir(parents=True)
        cells = {"add_one_solution": EARLY[student], "square_solution": code}
        case = Case(student, TOY, path, "", {"status": "graded"}, cells)
        path.write_text(json.dumps(build_submission(case, released)))
        # nbgrader collect leaves these beside the notebook; a stray file of the student's too
        (path.parent / "timestamp.txt").write_text("2026-11-02 10:00:00.000000 UTC")
        (path.parent / "submission_secret.txt").write_text("0123456789abcdef")
        (path.parent / "notes.txt").write_text("my notes")
    out = base / "out"
    rows = grade(subs, out, jobs=2, timeout=30, root=root, progress=False)
    toy = read_notebook(root / "solutions" / TOY / f"{TOY}.ipynb")
    toy_hidden = secret_lines(toy, "hidden") + [
        line for cell in toy.cells for line in _literal_lines("\n".join(split_blocks(cell.source)["hidden"]))
        if _is_content(line)]
    # Lines the student sees anyway (the released notebook) or wrote (their answers) are no leaks.
    known = released_text + "\n".join(list(LEAKS.values()) + list(WRONG.values()) + list(EARLY.values()))
    secrets = [line for line in dict.fromkeys(planted + toy_hidden) if line not in known]
    assert {"square is wrong for a hidden negative input", "add_one is wrong for some hidden sizes"} <= set(secrets)
    return {"out": out, "rows": {r["student"]: r for r in rows}, "secrets": secrets}


def test_the_attacks_ran_and_the_search_finds_them(graded):
    """In the instructor's executed notebooks (hidden tests kept) the search finds what each
    submission printed: else a clean feedback would prove nothing."""
    for student in LEAKS:
        if student == "files":
            continue
        copy = graded["out"] / "autograded" / student / TOY / f"{TOY}.ipynb"
        outputs = json.dumps([c.get("outputs", []) for c in json.loads(copy.read_text())["cells"]])
        found = leaked_lines(_readable_outputs(outputs), graded["secrets"])
        # nbgrader keeps 1000 lines of an output: printed in pieces, only part of the lines survive
        assert len(found) >= 20, (student, len(found), graded["rows"][student]["details"])


def _readable_outputs(outputs_json: str) -> str:
    path_text = []

    def walk(node):
        if isinstance(node, str):
            path_text.append(node)
        elif isinstance(node, (list, dict)):
            for value in (node.values() if isinstance(node, dict) else node):
                walk(value)

    walk(json.loads(outputs_json))
    return "\n".join(path_text)


@pytest.mark.parametrize("student", sorted([*LEAKS, *WRONG]))
def test_no_feedback_file_shows_a_hidden_or_solution_line(graded, student):
    folder = graded["out"] / "feedback" / student / TOY
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    assert {p.name for p in files} == HANDED_BACK, [p.name for p in files]
    for path in files:
        found = leaked_lines(_readable(path), graded["secrets"] + [HIDDEN_INPUT_SHOWN])
        assert not found, f"{student}/{path.name} shows {len(found)} secret lines, e.g. {found[:3]}"


def _shown(graded, student: str, grade_id: str) -> str:
    handback = json.loads((graded["out"] / "feedback" / student / TOY / f"{TOY}.ipynb").read_text())
    cell = next(c for c in handback["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)
    assert [o["output_type"] for o in cell["outputs"]] == ["stream"]
    return "".join(cell["outputs"][0]["text"])


def test_a_forged_cause_shows_only_its_fixed_sentence(graded):
    """A message that holds the course's phrase for a cause next to the hidden lines selects that cause's
    fixed sentence: all the submission chose is which public sentence appears."""
    by_key = {c.key: c.text for c in LIKELY_CAUSES}
    for student, key in (("forged-cause", "slot_offset"), ("forged-kernel-failed", "slot_past_block")):
        assert _shown(graded, student, "square_tests") == (
            f"failed: 0 of 1 points\nlikely cause: {by_key[key]}\n{HIDDEN_OUTPUT_NOTE}\n"), student
        copy = (graded["out"] / "autograded" / student / TOY / f"{TOY}.ipynb").read_text()
        assert (FORGED if key == "slot_offset" else "Axis 2 of the cache") in copy      # the forgery ran


def test_honest_wrong_answers_get_no_hidden_message_or_input(graded):
    """The hidden asserts' messages (hidden literals) and a message showing a hidden input exist in the
    instructor's copy; the feedback says only that no cause could be named (the search above finds none)."""
    for student, grade_id, message in (
            ("wrong-for-hidden-cases", "add_one_hidden", "add_one is wrong for some hidden sizes"),
            ("wrong-for-hidden-cases", "square_tests", "square is wrong for a hidden negative input"),
            ("shows-a-hidden-input", "square_tests", HIDDEN_INPUT_SHOWN)):
        assert graded["rows"][student]["cells"][grade_id]["points"] == 0, (student, grade_id)
        shown = _shown(graded, student, grade_id)
        assert shown.startswith("failed: 0 of ") and "no likely cause could be named" in shown, shown
        assert message in (graded["out"] / "autograded" / student / TOY / f"{TOY}.ipynb").read_text()
        assert message not in shown


def test_feedback_keeps_early_output_and_grades_but_drops_the_rest(graded):
    handback = json.loads((graded["out"] / "feedback" / "plain" / TOY / f"{TOY}.ipynb").read_text())
    cells = {c["metadata"]["nbgrader"]["grade_id"]: c for c in handback["cells"]}
    assert OWN_OUTPUT in json.dumps(cells["add_one_solution"]["outputs"])
    assert cells["square_solution"]["outputs"] == []
    summary = "".join(cells["square_tests"]["outputs"][0]["text"])
    assert summary.startswith("passed: 1 of 1 points") and HIDDEN_OUTPUT_NOTE in summary
    failing = json.loads((graded["out"] / "feedback" / "error-message" / TOY / f"{TOY}.ipynb").read_text())
    square_tests = next(c for c in failing["cells"] if c["metadata"]["nbgrader"]["grade_id"] == "square_tests")
    assert [o["output_type"] for o in square_tests["outputs"]] == ["stream"]
    assert "".join(square_tests["outputs"][0]["text"]).startswith("failed: 0 of 1 points")
    assert graded["rows"]["error-message"]["cells"]["square_tests"]["points"] == 0


def test_exchange_files_come_from_the_collected_submission(graded):
    folder = graded["out"] / "feedback" / "files" / TOY
    assert (folder / "timestamp.txt").read_text() == "2026-11-02 10:00:00.000000 UTC"
    assert (folder / "submission_secret.txt").read_text() == "0123456789abcdef"


def test_feedback_size_is_capped(graded):
    folder = graded["out"] / "feedback" / "huge" / TOY
    page, handback = folder / f"{TOY}.html", folder / f"{TOY}.ipynb"
    assert page.stat().st_size <= MAX_FEEDBACK_PAGE_BYTES
    nb = json.loads(handback.read_text())
    shown = sum(len(json.dumps(c.get("outputs", []))) for c in nb["cells"])
    assert shown <= MAX_TOTAL_CHARS + 10_000
    assert TRUNCATED_NOTE.strip() in handback.read_text() and "output truncated" in page.read_text()
    # the instructor's copy shows the submission did print megabytes
    assert (graded["out"] / "autograded" / "huge" / TOY / f"{TOY}.ipynb").stat().st_size > 1_000_000


# --- sanitize_notebook alone (no grading) ---------------------------------------------------------

def _cell(grade_id, outputs, grade=False, points=0):
    cell = nbformat.v4.new_code_cell("pass")
    cell.metadata["nbgrader"] = {"grade_id": grade_id, "grade": grade, "solution": not grade, "points": points}
    cell.outputs = outputs
    cell.execution_count = 7
    return cell


def test_sanitize_keeps_early_streams_caps_them_and_drops_everything_later():
    from nbformat.v4 import new_output

    from grader.feedback import DISPLAY_NOTE, GRADER_STOPPED, MAX_OUTPUT_CHARS, sanitize_notebook

    nb = nbformat.v4.new_notebook(cells=[
        _cell("early", [new_output("stream", name="stdout", text="mine\n"),
                        new_output("stream", name="stdout", text="z" * (3 * MAX_OUTPUT_CHARS)),
                        new_output("display_data", data={"text/plain": "rewritable later"})]),
        _cell("hidden", [new_output("stream", name="stdout", text="secret text")], grade=True, points=2),
        _cell("answer", [new_output("stream", name="stdout", text="secret text")]),
        _cell("later", [new_output("error", ename="KernelCrashed", evalue="secret text", traceback=["secret"])],
              grade=True, points=1),
    ])
    sanitize_notebook(nb, [], ["hidden"], scores={"hidden": (2.0, 2.0), "later": (0.0, 1.0)})
    early, hidden, answer, later = nb.cells
    assert early.outputs[0].text == "mine\n"
    assert len(early.outputs[1].text) <= MAX_OUTPUT_CHARS + len(TRUNCATED_NOTE)
    assert early.outputs[1].text.endswith(TRUNCATED_NOTE) and early.outputs[2].text == DISPLAY_NOTE
    assert early.execution_count == 7 and hidden.execution_count is None
    assert [o.output_type for o in hidden.outputs] == ["stream"] and answer.outputs == []
    assert hidden.outputs[0].text.startswith("passed: 2 of 2 points\n")
    assert later.outputs[0].text.startswith(f"failed: 0 of 1 points\nKernelCrashed: {GRADER_STOPPED['KernelCrashed']}")
    assert "secret" not in json.dumps(nb)


def test_sanitize_caps_the_whole_notebook():
    from nbformat.v4 import new_output

    from grader.feedback import MAX_OUTPUT_CHARS, OMITTED_NOTE, sanitize_notebook

    cells = [_cell(f"c{i}", [new_output("stream", name="stdout", text="w" * MAX_OUTPUT_CHARS)]) for i in range(60)]
    nb = sanitize_notebook(nbformat.v4.new_notebook(cells=cells), [], [])
    assert sum(len(c.outputs[0].text) for c in nb.cells) <= MAX_TOTAL_CHARS + len(TRUNCATED_NOTE) + 60 * len(OMITTED_NOTE)
    assert nb.cells[-1].outputs[0].text == OMITTED_NOTE
