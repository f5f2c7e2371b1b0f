"""A failed grade cell's feedback names the likely cause the course's diagnosis found, and nothing else.

``grader.feedback.likely_cause`` reads the failure's message (which holds the failing case: hidden sizes,
block tables, seeds, a hidden test's label) only to pick an entry of ``LIKELY_CAUSES`` by a fixed phrase
of the course's message; the feedback shows that entry's fixed text. These tests check the table against
the course's messages (every phrase is one of them, every diagnosis key has an entry), that real messages
of the course's checks name their cause, that what a cell shows is always one of the fixed texts whatever
its message holds (forged or real), that no fixed text holds a hidden-test line or string literal, and,
grading day 6's wrong samples, that their feedback names the cause and shows nothing of the hidden cases.
"""

import ast
import html
import json
import pathlib
import re

import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_output

from grader.feedback import (HIDDEN_OUTPUT_NOTE, LIKELY_CAUSES, LIKELY_CAUSES_BY_ERROR, NO_CAUSE, cause_line,
                             hidden_cell_ids, likely_cause, sanitize_notebook)
from grader.hidden import PROJECT_ROOT
from grader.markers import BEGIN_HIDDEN, END_HIDDEN, read_notebook, secret_lines
from test_grader_leaks import course_hidden_literals, leaked_lines

# Where the course writes the messages a signature may quote.
MESSAGE_SOURCES = (sorted((PROJECT_ROOT / "course" / "diagnoses").glob("*.py"))
                   + sorted((PROJECT_ROOT / "course" / "exercise_checks").glob("*.py"))
                   + [PROJECT_ROOT / "course" / name for name in ("checking.py", "gates.py", "gpu_compile.py")]
                   + sorted((PROJECT_ROOT / "course" / "kernel_reach").glob("*.py")))
# Diagnosis keys whose message is another key's, word for word (one entry serves both).
SAME_MESSAGE = {"paged_scale": "attention_scale", "gqa_kv_head_interleaved": "paged_kv_head_interleaved",
                "gqa_kv_head_wrong_group": "paged_kv_head_wrong_group"}
FIXED_TEXTS = [c.text for c in LIKELY_CAUSES] + [c.text for c in LIKELY_CAUSES_BY_ERROR.values()]


def _message_literals(path: pathlib.Path) -> list[str]:
    """The string literals of a module but its docstrings; in an f-string every replacement field is a NUL,
    so a phrase found in a literal is text the course wrote, not a value it formatted."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
                  and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}
    parts_of_fstrings = set()
    literals = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts_of_fstrings.update(id(v) for v in node.values)
            literals.append("".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                and id(node) not in parts_of_fstrings):
            literals.append(node.value)
    return literals


def test_every_signature_is_a_phrase_of_the_course_messages():
    literals = [lit for path in MESSAGE_SOURCES for lit in _message_literals(path)]
    missing = [(c.key, s) for c in LIKELY_CAUSES for s in c.signatures if not any(s in lit for lit in literals)]
    assert not missing, f"signatures the course's messages do not hold (reworded?): {missing}"
    assert all(c.signatures for c in LIKELY_CAUSES)


def test_every_diagnosis_key_has_a_likely_cause():
    from course.diagnoses import DETECTORS, gqa, paged, precision, quantized

    keys = set(DETECTORS) | set(paged.KEYS) | set(gqa.KEYS) | set(precision.KEYS) | set(quantized.KEYS)
    covered = {c.key for c in LIKELY_CAUSES}
    missing = sorted(k for k in keys if SAME_MESSAGE.get(k, k) not in covered)
    assert not missing, f"diagnoses the feedback cannot name: {missing}"


# The only numbers of three digits or more a fixed text may name: constants of the formats.
FORMAT_CONSTANTS = {"448", "2048", "65504", "127"}    # 127: Q8_0's d = amax / 127


def test_fixed_texts_hold_no_value_and_no_hidden_line_or_literal():
    for text in FIXED_TEXTS + [NO_CAUSE]:
        assert "\n" not in text and "\0" not in text, text
        assert set(re.findall(r"\d{3,}", text)) <= FORMAT_CONSTANTS, text
    secrets = []
    for path in sorted((PROJECT_ROOT / "solutions").glob("*/*.ipynb")):
        nb = read_notebook(path)
        secrets += secret_lines(nb, "hidden") + secret_lines(nb, "solution")
    secrets += course_hidden_literals()
    shown = "\n".join(FIXED_TEXTS + [NO_CAUSE.format(look="This cell opens with the visible check "
                                                     "exercise_checks.x: run the cell")])
    assert not leaked_lines(shown, list(dict.fromkeys(secrets)))


# --- real messages of the course's checks ---------------------------------------------------------------------

def _raised(call) -> nbformat.NotebookNode:
    """The error output nbgrader would store for what ``call()`` raises."""
    with pytest.raises(Exception) as info:
        call()
    return new_output("error", ename=type(info.value).__name__, evalue=str(info.value), traceback=[])


def _cache_written(case, page_of, offset_of):
    """The caches after a write that puts token t at page ``page_of(pos)``, slot ``offset_of(pos)``."""
    k, v = case["k_cache"].copy(), case["v_cache"].copy()
    block_size = k.shape[2]
    for t, (s, pos) in enumerate(zip(case["token_seqs"].tolist(), case["token_positions"].tolist())):
        page = min(page_of(pos, block_size), case["block_tables"].shape[1] - 1)
        block = case["block_tables"][s, page]
        k[block, :, offset_of(pos, block_size)] = case["k_new"][t]
        v[block, :, offset_of(pos, block_size)] = case["v_new"][t]
    return k, v


def _cache_write_error(page_of, offset_of):
    from course import exercise_checks as xc

    rng, seed = xc.random_inputs(1234)
    case = xc.cache_write_case(rng, [(0, 11)], kv_heads=2, head_dim=4, block_size=4)
    k, v = _cache_written(case, page_of, offset_of)
    return _raised(lambda: xc.check_cache_write(k, v, case, seed=seed, label="a label with hidden values 5, 7"))


def test_real_messages_name_their_cause():
    from course import exercise_checks as xc
    from course.checking import check, poison
    from course.diagnoses.paged import launch_error, merge_models

    def key(error):
        cause = likely_cause(error)
        return cause and cause.key

    assert key(_cache_write_error(lambda p, b: (p + 1) // b, lambda p, b: p % b)) == "slot_at_block_boundary"
    assert key(_cache_write_error(lambda p, b: p // b, lambda p, b: (p + 1) % b)) == "slot_offset"
    rng, seed = xc.random_inputs(99)
    case = xc.paged_inputs(rng, [13, 30], heads=2, kv_heads=1, head_dim=8, block_size=4)
    merged = merge_models(case, 3)
    for name in ("merge_not_rescaled", "merge_acc_not_rescaled", "merge_sum_not_rescaled"):
        out = merged[name].astype(np.float32)
        assert key(_raised(lambda: xc.check_paged(out, case, seed=seed, partition_size=3))) == name
    want = np.arange(1.0, 41.0).reshape(4, 10)
    half = poison(np.empty((4, 10), np.float32))
    half[:2] = want[:2]
    assert key(_raised(lambda: check(half, want, seed=seed))) == "unwritten"
    assert key(_raised(lambda: check((2 * want).astype(np.float32), want))) == "scale"
    bounds = "index {} is out of bounds for axis {} with size {}".format
    for exc, sizes, expected in ((IndexError(bounds(4, 2, 4)), {"block_size": 4}, "slot_past_block"),
                                 (IndexError(bounds(2, 1, 2)), {"kv_heads": 2, "heads": 4}, "kv_head_out_of_range"),
                                 (IndexError(bounds(9, 0, 9)), {}, "index_out_of_range"),
                                 (ZeroDivisionError("division by zero"), {}, "zero_division"),
                                 (OverflowError("math range error"), {}, "exp_overflow")):
        found_key, message = launch_error(exc, sizes)
        assert found_key == expected
        assert key(new_output("error", ename="KernelFailed", evalue=message, traceback=[])) == expected


# --- what a failed grade cell shows -----------------------------------------------------------------------------

def _grade_cell(error, source='"""Docstring."""\nexercise_checks.cache_write_matches_reference(kv_cache_write_kernel)',
                grade_id="slots"):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade_id": grade_id, "grade": True, "solution": False, "points": 2}
    cell.outputs = [error] if error is not None else []
    return cell


def _shown(cell, hidden=("slots",)) -> str:
    nb = sanitize_notebook(nbformat.v4.new_notebook(cells=[cell]), [], list(hidden), scores={cell.metadata[
        "nbgrader"]["grade_id"]: (0.0, 2.0)})
    [output] = nb.cells[0].outputs
    return "".join(output["text"])


def test_a_failed_cell_shows_the_fixed_text_of_its_cause_and_nothing_of_its_message():
    error = _cache_write_error(lambda p, b: (p + 1) // b, lambda p, b: p % b)
    shown = _shown(_grade_cell(error))
    cause = next(c for c in LIKELY_CAUSES if c.key == "slot_at_block_boundary")
    assert shown == f"failed: 0 of 2 points\nlikely cause: {cause.text}\n{HIDDEN_OUTPUT_NOTE}\n"
    message = error["evalue"]
    assert "seed 1234" in message and "hidden values 5, 7" in message      # the message holds the case ...
    pieces = {piece.strip() for line in message.splitlines() for piece in re.split(r"[:;,()=.]", line)}
    words = {p for p in pieces if len(p) >= 12 and p not in cause.text and p != "likely cause"}
    assert len(words) > 10 and not [p for p in words if p in shown]         # ... and none of it is shown
    assert not re.search(r"\d", shown.replace("0 of 2", ""))


def test_whatever_a_message_holds_the_cell_shows_one_of_the_fixed_texts():
    """Messages made of course phrases, secrets and noise, as a submission could forge them: the shown
    text is always one of a fixed set, so it can carry a choice among them and never text."""
    rng = np.random.default_rng(0)
    phrases = [s for c in LIKELY_CAUSES for s in c.signatures] + ["SECRET hidden line", "x" * 3000, "\x1b[31m"]
    allowed = {f"failed: 0 of 2 points\nlikely cause: {t}\n{HIDDEN_OUTPUT_NOTE}\n" for t in FIXED_TEXTS}
    allowed.add(f"failed: 0 of 2 points\n{cause_line(_grade_cell(None), [])}\n{HIDDEN_OUTPUT_NOTE}\n")
    for _ in range(300):
        lines = ["".join(rng.choice(phrases, size=rng.integers(1, 4))) for _ in range(rng.integers(1, 5))]
        ename = str(rng.choice(["AssertionError", "CheckFailure", "KernelFailed", "NotImplementedError", "NameError",
                                "SECRET hidden line"]))
        error = new_output("error", ename=ename, evalue="\n".join(lines), traceback=["SECRET hidden line"])
        shown = _shown(_grade_cell(error))
        assert shown in allowed and "SECRET" not in shown, shown


def test_without_a_named_cause_the_cell_points_to_its_visible_check():
    plain = new_output("error", ename="AssertionError", evalue="add_one is wrong for some hidden sizes", traceback=[])
    shown = _shown(_grade_cell(plain))
    assert "exercise_checks.cache_write_matches_reference" in shown and "hidden sizes" not in shown
    # a name in the hidden part of the cell is never quoted
    source = f'"""Docstring."""\nassert f(3) == 9\n{BEGIN_HIDDEN}\nexercise_checks.secret_check(f)\n{END_HIDDEN}'
    shown = _shown(_grade_cell(plain, source=source))
    assert "secret_check" not in shown and "Run the cell's visible part" in shown


def test_a_passed_or_stopped_cell_names_no_cause():
    passed = _grade_cell(None)
    nb = sanitize_notebook(nbformat.v4.new_notebook(cells=[passed]), [], ["slots"], scores={"slots": (2.0, 2.0)})
    assert "likely cause" not in nb.cells[0].outputs[0]["text"]
    stopped = new_output("error", ename="CellTimeoutError", evalue="wrong offset within the block: ", traceback=[])
    shown = _shown(_grade_cell(stopped))
    assert "time limit" in shown and "likely cause" not in shown and "no likely cause" not in shown


# --- day 6's wrong samples, graded ------------------------------------------------------------------------------

SAMPLES = {"wrong_slot_at_block_boundary": {"cache_write_slots": "slot_at_block_boundary"},
           "merge_missing_rescale": {"merge_matches_reference": "merge_not_rescaled",
                                     "merge_handles_empty_partitions": "merge_not_rescaled"}}
DAY06 = "day06_paged_attention"


@pytest.fixture(scope="module")
def graded_samples(tmp_path_factory):
    from grader.sample_cases import find_cases, run_cases

    cases = [c for c in find_cases() if c.assignment == DAY06 and c.name in SAMPLES]
    assert len(cases) == len(SAMPLES)
    workdir = tmp_path_factory.mktemp("causes")
    rows = run_cases(cases, workdir, root=PROJECT_ROOT, jobs=2)
    return {c.name: (c, rows[c.student]) for c in cases}, workdir / "out" / "run"


@pytest.mark.slow
@pytest.mark.day06
@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_day06_wrong_samples_get_their_cause_and_nothing_of_the_hidden_cases(graded_samples, sample):
    cases, out = graded_samples
    case, row = cases[sample]
    folder = out / "feedback" / case.student / DAY06
    handback = json.loads((folder / f"{DAY06}.ipynb").read_text(encoding="utf-8"))
    page = (folder / f"{DAY06}.html").read_text(encoding="utf-8")
    shown = {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["outputs"][0]["text"]) for c in handback["cells"]
             if c["metadata"].get("nbgrader", {}).get("grade")}
    by_key = {c.key: c for c in LIKELY_CAUSES}
    for grade_id, key in SAMPLES[sample].items():
        assert row["cells"][grade_id]["points"] == 0
        assert shown[grade_id].startswith("failed: 0 of ") and f"likely cause: {by_key[key].text}" in shown[grade_id]
        assert by_key[key].text in html.unescape(page)
    # What the hidden cases' messages held (the instructor's copy): none of it is handed back.
    autograded = json.loads((out / "autograded" / case.student / DAY06 / f"{DAY06}.ipynb").read_text(encoding="utf-8"))
    solution = read_notebook(PROJECT_ROOT / "solutions" / DAY06 / f"{DAY06}.ipynb")
    with_hidden = set(hidden_cell_ids(solution))
    messages = [o["evalue"] for c in autograded["cells"] for o in c.get("outputs", [])
                if o["output_type"] == "error" and c["metadata"].get("nbgrader", {}).get("grade_id") in with_hidden]
    assert any("likely cause:" in m for m in messages)
    released = (PROJECT_ROOT / "exercises" / DAY06 / f"{DAY06}.ipynb").read_text(encoding="utf-8")
    hidden = secret_lines(solution, "hidden") + [lit for lit in course_hidden_literals(DAY06) if lit not in released]
    case_lines = [line.strip() for m in messages for line in m.splitlines()
                  if len(line.strip()) >= 20 and line.strip() not in released and line.strip() not in FIXED_TEXTS]
    seeds = sorted({s for m in messages for s in re.findall(r"seed[= ](\d{4,})", m)})
    assert seeds
    # The page's words (its style sheet and scripts aside, whose numbers are no seeds) and the notebook's strings.
    words = re.sub(r"<(style|script)\b.*?</\1>", "", page, flags=re.S | re.I)
    words = html.unescape(re.sub(r"<[^>]+>", " ", words))
    for name, text in (("page", html.unescape(page)), ("notebook", json.dumps(handback, ensure_ascii=False))):
        assert not leaked_lines(text, hidden + case_lines), name
    for name, text in (("page", words), ("notebook", "\n".join(shown.values()))):
        assert not [s for s in seeds if re.search(rf"(?<!\d){s}(?!\d)", text)], name
