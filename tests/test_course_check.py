"""``course check``: where it looks for a student's notebooks, what it prints for each exercise, and
a kernel that dies reported as a crash every time."""

import json
import pathlib

import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from course.checking import check
from course.cli import main
from grader import release
from grader.check import choose_notebooks, exercises_of, notebooks_in, run_notebook
from grader.toy import TOY, make_toy_course

PASSING = ("def answer():\n    return 42", "assert answer() == 42")


def write_exercise(path: pathlib.Path, exercises: dict[str, tuple[str, str]]) -> pathlib.Path:
    """An exercise notebook at ``path``: per exercise, an answer cell (nbgrader ``solution``) and a
    test cell after it, as the course's released exercises have."""
    cells = [new_markdown_cell("# An exercise"), new_code_cell("import os, time")]
    for name, (answer, test) in exercises.items():
        cells.append(new_code_cell(answer, metadata={"nbgrader": {"solution": True, "grade": False,
                                                                  "locked": False, "grade_id": name,
                                                                  "schema_version": 3}}))
        cells.append(new_code_cell(test, metadata={"nbgrader": {"solution": False, "grade": True, "points": 1,
                                                                "locked": True, "grade_id": f"{name}_tests",
                                                                "schema_version": 3}}))
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def statuses(results):
    return {e.name: e.status for e in results}


def test_each_outcome_is_reported_with_its_whole_message(tmp_path):
    all_zero = "check(np.zeros(6, np.float32), np.linspace(1, 2, 6), name='out')"
    try:
        eval(all_zero, {"check": check, "np": np})
    except AssertionError as exc:
        check_message = str(exc)
    else:
        raise AssertionError("check accepted zeros for a non-zero reference")
    # The kernel prints, then dies a moment later: the cell has been announced (and numbered) by the
    # kernel before it dies, which once made a crash read as a pass.
    dies_late = "print('about to exit', flush=True)\ntime.sleep(0.5)\nos._exit(1)"
    path = write_exercise(tmp_path / "day00_toy.ipynb", {
        "passes": PASSING,
        "wrong": ("import numpy as np\nfrom course.checking import check", all_zero),
        "bare_assert": ("def twice(x):\n    return x + 1", "assert twice(3) == 6"),
        "untouched": ("def answer():\n    raise NotImplementedError()", "answer()"),
        "dies": ("pass", dies_late),
    })
    results = exercises_of(run_notebook(path, timeout=60))
    assert statuses(results) == {"passes": "pass", "wrong": "FAIL", "bare_assert": "FAIL",
                                 "untouched": "not started", "dies": "CRASH"}
    by_name = {e.name: e for e in results}
    assert by_name["wrong"].message.startswith("wrong_tests: CheckFailure: ")
    for line in check_message.splitlines():
        assert line.strip() in by_name["wrong"].message, f"the check's message lost the line {line!r}"
    assert by_name["bare_assert"].message == "bare_assert_tests: AssertionError: failed at: assert twice(3) == 6"
    assert "dies_tests" in by_name["dies"].message and "kernel died" in by_name["dies"].message


def test_a_long_message_is_shown_whole_wrapped_to_the_width():
    """The advice at the end of a long line (here past character 200) is kept, every line fits the width."""
    from grader.check import Exercise, _error_message, format_table

    advice = ("wrong rescaling of a partition: " + "the running maximum of each partition differs, " * 5
              + "multiply both by exp(partial_max[p] - new_max) before adding")
    long_table = "\n".join(f"row {i}: mismatch" for i in range(70))
    message = _error_message({"ename": "CheckFailure", "evalue": advice + "\n" + long_table})
    assert advice in message and "row 58: mismatch" in message and "(11 more lines)" in message
    table = format_table({"day06_paged_attention": [Exercise("merge", "FAIL", message)]}, width=100)
    assert all(len(line) <= 100 for line in table.splitlines()), table
    words = " ".join(line.strip() for line in table.splitlines())
    assert "multiply both by exp(partial_max[p] - new_max) before adding" in words


@pytest.mark.parametrize("how", ["os._exit(3)", "import ctypes\nctypes.string_at(0)"], ids=["exit", "segfault"])
def test_a_dead_kernel_is_a_crash_and_later_exercises_did_not_run(tmp_path, how):
    path = write_exercise(tmp_path / "day00_toy.ipynb", {"first": PASSING, "dies": ("pass", how),
                                                         "after": PASSING})
    assert statuses(exercises_of(run_notebook(path, timeout=60))) == {
        "first": "pass", "dies": "CRASH", "after": "not run"}


def test_a_cell_past_the_timeout_is_interrupted_and_reported(tmp_path):
    path = write_exercise(tmp_path / "day00_toy.ipynb", {"loops": ("pass", "while True:\n    pass"),
                                                         "after": PASSING})
    results = exercises_of(run_notebook(path, timeout=3))
    assert statuses(results) == {"loops": "TIMEOUT", "after": "pass"}
    assert "longer than 3 s" in results[0].message


def test_notebooks_are_found_in_the_current_folder_first(tmp_path):
    here, course_exercises = tmp_path / "home", tmp_path / "course" / "exercises"
    write_exercise(here / "day01_gpu_model.ipynb", {"passes": PASSING})
    write_exercise(here / "day03_online_softmax" / "day03_online_softmax.ipynb", {"passes": PASSING})
    lesson = write_exercise(here / "day02_naive_attention.ipynb", {"passes": PASSING})
    nb = json.loads(lesson.read_text())
    for cell in nb["cells"]:
        cell["metadata"].pop("nbgrader", None)
    lesson.write_text(json.dumps(nb))                         # a lesson: no answer cells
    write_exercise(here / "notes" / "day04_tiled_gemm.ipynb", {"passes": PASSING})  # not a day's folder
    for day in ("day01_gpu_model", "day02_naive_attention", "day05_flash_attention"):
        write_exercise(course_exercises / day / f"{day}.ipynb", {"passes": PASSING})
    known = ["day01_gpu_model", "day02_naive_attention", "day03_online_softmax", "day05_flash_attention"]

    assert notebooks_in(here) == {"day01_gpu_model": here / "day01_gpu_model.ipynb",
                                  "day03_online_softmax": here / "day03_online_softmax" / "day03_online_softmax.ipynb"}
    chosen, missing = choose_notebooks([here, course_exercises], [], known)
    assert chosen == notebooks_in(here) and missing == []
    chosen, missing = choose_notebooks([tmp_path / "empty", course_exercises], [], known)
    assert sorted(chosen) == ["day01_gpu_model", "day02_naive_attention", "day05_flash_attention"]
    assert all(path.is_relative_to(course_exercises) for path in chosen.values())
    chosen, missing = choose_notebooks([here, course_exercises], ["day01", "day02", "day05"], known)
    assert chosen == {"day01_gpu_model": here / "day01_gpu_model.ipynb",
                      "day02_naive_attention": course_exercises / "day02_naive_attention" / "day02_naive_attention.ipynb",
                      "day05_flash_attention": course_exercises / "day05_flash_attention" / "day05_flash_attention.ipynb"}
    chosen, missing = choose_notebooks([here, course_exercises], ["day03"], known + ["day04_tiled_gemm"])
    assert list(chosen) == ["day03_online_softmax"] and missing == []
    chosen, missing = choose_notebooks([here], ["day05"], known)
    assert chosen == {} and missing == ["day05_flash_attention"]


def test_check_command_checks_the_current_folder_and_names_the_files(tmp_path, monkeypatch, capsys):
    write_exercise(tmp_path / "day01_gpu_model.ipynb", {"passes": PASSING})
    write_exercise(tmp_path / "day03_online_softmax" / "day03_online_softmax.ipynb",
                   {"wrong": ("def answer():\n    return 41", "assert answer() == 42, 'answer is off by one'")})
    monkeypatch.chdir(tmp_path)
    assert main(["check"]) == 1
    out = capsys.readouterr()
    table = out.out
    assert "day01_gpu_model                    1/1 exercises pass  (day01_gpu_model.ipynb)" in table
    assert "(day03_online_softmax/day03_online_softmax.ipynb)" in table
    assert "wrong_tests: AssertionError: answer is off by one" in table
    assert "checking day01_gpu_model.ipynb" in out.err
    assert main(["check", "day01"]) == 0
    assert "1/1 exercises pass" in capsys.readouterr().out


def test_check_command_on_the_toy_release_and_a_crashing_submission(tmp_path, monkeypatch, capsys):
    root = make_toy_course(tmp_path / "course")
    release.generate([TOY], root=root)
    monkeypatch.chdir(root)
    assert main(["check", "day00"]) == 1
    table = capsys.readouterr().out
    assert f"0/2 exercises pass  (exercises/{TOY}/{TOY}.ipynb)" in table
    assert "add_one_solution                 not started" in table
    mine = tmp_path / "mine"
    nb = json.loads((root / "exercises" / TOY / f"{TOY}.ipynb").read_text())
    answers = {"add_one_solution": "@cuda.jit\ndef add_one_kernel(x, out):\n    i = cuda.grid(1)\n"
                                   "    if i < x.size:\n        out[i] = x[i] + 1.0\n\n\ndef add_one(x):\n"
                                   "    out = np.full_like(x, np.nan)\n"
                                   "    add_one_kernel[(x.size + 31) // 32, 32](x, out)\n    return out",
               "square_solution": "import os\n\ndef square(x):\n    os._exit(1)"}
    for cell in nb["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell["source"] = answers[grade_id]
    mine.mkdir()
    (mine / f"{TOY}.ipynb").write_text(json.dumps(nb))
    assert main(["check", "--path", str(mine)]) == 1
    table = capsys.readouterr().out
    assert "1/2 exercises pass" in table and "add_one_solution                 pass" in table
    assert "square_solution                  CRASH" in table and "kernel died" in table


def test_bad_arguments_are_named(tmp_path, capsys):
    assert main(["check", "--path", str(tmp_path / "nowhere")]) == 2
    assert "--path" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["check", "--timeout", "0"])
    assert "--timeout" in capsys.readouterr().err
