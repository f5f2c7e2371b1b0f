"""What runs of a submission when it is graded (grader.cleanroom) and the checks of every launch
(course.gates, course.gpu_compile): a kernel must compile for a GPU and leave its inputs alone.

The clean room is tested on sources; the launch checks on kernels defined here, launched on the
simulator with the GPU compiler's helper beside them (NVVM from the pip packages, no GPU).
"""

import json
import linecache

import numpy as np
import pytest

import course
from grader import cleanroom
from grader.hidden import PROJECT_ROOT

pytestmark = pytest.mark.skipif(not course.on_simulator(), reason="the launch checks run on the simulator")

RELEASE_IMPORTS = "import math\nimport numpy as np\nfrom numba import cuda, float32\nimport kernels.reduction\n" \
                  "from course.checking import check\nfrom kernels.reduction import TREE_THREADS\n"


def _scope():
    return cleanroom.release_scope({"cells": [{"cell_type": "code", "metadata": {}, "source": RELEASE_IMPORTS}]})


KERNEL = '''@cuda.jit
def my_kernel(x, y):
    """doc"""
    i = cuda.grid(1)
    if i < x.size:
        y[i] = x[i] * TILE
'''


@pytest.mark.parametrize("line", [
    "TILE = 16", "NEG = float32(-math.inf)", "SCALE = 1.0 / math.sqrt(64)", "BLOCK = (16, 2 * 8)",
    "import numpy as np", "from numba import cuda", "from math import sqrt", '"""a docstring"""',
])
def test_kernels_constants_and_imports_run(line):
    cleaned = cleanroom.clean_source(line + "\n\n" + KERNEL, _scope())
    assert cleaned.left_out == [] and cleaned.source == line + "\n\n" + KERNEL


@pytest.mark.parametrize("line", [
    "np.random.seed(0)", "print('hi')", "check = lambda *a, **k: None", "TREE_THREADS = 1",
    "X = open('/etc/passwd')", "import os", "import math as np", "from math import inf as float32",
    "setattr(np, 'allclose', None)", "globals()['np'] = None", "X = np.__dict__", "while True: pass",
    "import kernels.reduction as kr", "get_ipython().showtraceback = None", "a = 1; print(a)",
])
def test_other_top_level_code_is_left_out_with_its_line_numbers(line):
    cleaned = cleanroom.clean_source(line + "\n\n" + KERNEL, _scope())
    assert cleaned.left_out == [1], cleaned.source
    lines = cleaned.source.splitlines()
    assert lines[0] == cleanroom.MARK + line and "\n".join(lines[1:]) == "\n" + KERNEL.rstrip("\n")


def test_only_plain_cuda_jit_functions_run():
    source = ("@staticmethod\ndef f():\n    pass\n\n@cuda.jit(device=True)\ndef g(v):\n    return v\n\n"
              "@cuda.jit(debug=True, opt=False)\ndef h(x):\n    pass\n\n@cuda.jit(print)\ndef k(x):\n    pass\n")
    cleaned = cleanroom.clean_source(source, _scope())
    assert cleaned.left_out == [1, 2, 3, 13, 14, 15]


@pytest.mark.parametrize("header", [
    "def k(x, y=__import__('os').getcwd()):", "def k(x, *, y=print('hi')):", "def k(x: open('/etc/passwd')):",
    "def k(x) -> setattr(np, 'allclose', None):",
])
def test_a_kernel_whose_defaults_or_annotations_run_code_is_left_out(header):
    """Defaults and annotations are evaluated when the function is defined: only constants may run."""
    cleaned = cleanroom.clean_source("@cuda.jit\n" + header + "\n    pass\n", _scope())
    assert cleaned.left_out == [1, 2, 3], cleaned.source


def test_a_kernel_with_constant_defaults_runs():
    source = "@cuda.jit\ndef k(x, y=TILE, z=-1.0) -> None:\n    pass\n"
    assert cleanroom.clean_source("TILE = 4\n" + source, _scope()).left_out == []


def test_a_pasted_course_kernel_is_found_with_its_names_changed():
    from grader.sample_cases import kernel_cell
    from kernels.reduction import row_stats_v2_shared_tree_kernel, row_stats_v3_warp_shuffle_kernel
    from kernels.elementwise import axpb_v1_guarded_kernel

    pasted = kernel_cell(row_stats_v3_warp_shuffle_kernel).replace("largest", "biggest").replace("total", "acc")
    pasted = pasted.replace("def row_stats_v3_warp_shuffle_kernel", "def my_reduction")
    cleaned = cleanroom.clean_source(pasted, _scope())
    assert cleaned.course_kernels and "row_stats_v3_warp_shuffle_kernel" in cleaned.course_kernels[0]
    assert all(line.startswith("# [the course's kernel") for line in cleaned.source.splitlines() if line.strip())
    # one line of the algorithm changed: the student's own kernel (the limit of the comparison)
    edited = kernel_cell(row_stats_v2_shared_tree_kernel).replace("half //= 2", "half = half // 2")
    assert cleanroom.clean_source(edited, _scope()).course_kernels == []
    # too short to tell apart from an honest answer: never called a copy
    assert cleanroom.clean_source(kernel_cell(axpb_v1_guarded_kernel), _scope()).course_kernels == []


@pytest.mark.parametrize("line, reported", [
    ("from kernels.reduction import row_stats_v2_shared_tree_kernel", True),
    ("k = cuda.jit(kernels.reduction.row_stats_v3_warp_shuffle_kernel.py_func)", True),
    ("from kernels.reduction import TREE_THREADS", False),
    ("import kernels.gemm", False),
])
def test_reaching_for_a_course_kernel_is_reported(line, reported):
    cleaned = cleanroom.clean_source(line + "\n", _scope())
    assert cleaned.left_out == [1] and bool(cleaned.course_kernels) == reported


def test_the_solutions_keep_every_line_but_the_course_kernels_and_the_toy_is_graded_as_python():
    for folder in sorted((PROJECT_ROOT / "solutions").iterdir()):
        solution = json.loads((folder / f"{folder.name}.ipynb").read_text())
        release = json.loads((PROJECT_ROOT / "exercises" / folder.name / f"{folder.name}.ipynb").read_text())
        assert cleanroom.graded_code(release) == "kernels"
        cleanroom.clean_notebook(solution, release)
        dropped = [line for c in solution["cells"] for line in "".join(c["source"]).splitlines()
                   if line.startswith(cleanroom.MARK)]
        assert dropped == [], f"{folder.name}: the solution loses lines other than the course's kernels: {dropped}"
    from grader.toy import toy_notebook

    assert cleanroom.graded_code(toy_notebook()) == "python"
    with pytest.raises(ValueError, match="graded_code"):
        cleanroom.graded_code({"metadata": {"course": {"graded_code": "anything"}}})


# ---------------------------------------------------------------------------------------------
# Launch checks, on kernels defined as a notebook cell would define them
# ---------------------------------------------------------------------------------------------

CELL_FILE = "/tmp/ipykernel_0/launch_checks_cell.py"


def _cell(source: str) -> dict:
    """Define the functions of ``source`` as a notebook cell would (source kept for inspect)."""
    from numba import cuda, float32

    linecache.cache[CELL_FILE] = (len(source), None, source.splitlines(keepends=True), CELL_FILE)
    namespace = {"cuda": cuda, "float32": float32, "np": np, "math": __import__("math"), "TILE": 4}
    exec(compile(source, CELL_FILE, "exec"), namespace)
    return namespace


CELLS = '''
@cuda.jit(device=True)
def twice(v):
    return v * 2


@cuda.jit
def good(x, y):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = twice(x[i]) + TILE


@cuda.jit
def host_work(x, y):
    i = cuda.grid(1)
    if i == 0:
        y[:] = np.sort(x)


@cuda.jit
def python_list(x, y):
    i = cuda.grid(1)
    values = [x[i]]
    y[i] = values[0]


@cuda.jit
def scribbles(x, y):
    i = cuda.grid(1)
    if i < x.size:
        y[i] = x[i]
        x[i] = 0.0
'''


@pytest.fixture(scope="module")
def cell():
    return _cell(CELLS)


def test_a_kernel_that_compiles_for_a_gpu_passes(cell):
    from course.gpu_compile import compile_errors

    x = np.arange(5, dtype=np.float32)
    assert compile_errors(cell["good"], x, np.empty_like(x)) == []


@pytest.mark.parametrize("name, said", [("host_work", "line 18 of the cell: y[:] = np.sort(x)"),
                                        ("python_list", "line 24 of the cell: values = [x[i]]")])
def test_a_kernel_the_simulator_runs_but_no_gpu_could_fails_with_the_compilers_reason(cell, name, said):
    from course.gpu_compile import GpuCompileError, check_compiles

    x = np.arange(5, dtype=np.float32)
    with pytest.raises(GpuCompileError, match=f"{name} runs in the simulator but does not compile for a GPU") as err:
        check_compiles(cell[name], x, np.empty_like(x))
    assert said in str(err.value)


def test_the_grading_checks_refuse_a_bad_kernel_before_it_runs_and_an_input_written_after(cell):
    from course import gates, simulator
    from course.checking import poison
    from course.gpu_compile import GpuCompileError
    from kernels.launching import output_array

    simulator.add_launch_gate(gates._gate)
    try:
        x = np.arange(5, dtype=np.float32)
        y = output_array("out", None, (5,), x)
        cell["good"][1, 8](x, y)
        assert np.array_equal(y, 2 * x + 4)
        before = poison(np.empty_like(x))
        with pytest.raises(GpuCompileError):
            cell["host_work"][1, 8](x, before)
        assert np.isnan(before).all(), "a kernel that does not compile must not run"
        with pytest.raises(gates.InputWritten, match="scribbles wrote to its input x: 4 of its 5 elements changed"):
            cell["scribbles"][1, 8](x, poison(np.empty_like(x)))
        with pytest.raises(gates.InputWritten, match="good wrote to its input y"):
            cell["good"][1, 8](np.arange(5, dtype=np.float32), np.zeros(5, np.float32))   # y not an output
    finally:
        simulator.remove_launch_gate(gates._gate)


def test_students_get_the_compile_check_on_their_first_launch(cell):
    from course import gates, simulator
    from course.gpu_compile import GpuCompileError

    assert gates._notebook_gate in simulator.launch_gates(), "course.use_device() installs it on the simulator"
    x = np.arange(5, dtype=np.float32)
    with pytest.raises(GpuCompileError):
        cell["python_list"][1, 8](x, np.empty_like(x))


class _Counting:
    """A stand-in for the compiler's helper: counts the requests it is asked, answers ``answer``."""

    def __init__(self, answer):
        self.answer, self.asked = answer, 0

    def ask(self, request):
        self.asked += 1
        return {"errors": self.answer}


@pytest.fixture
def fresh_compile_memory(monkeypatch, tmp_path):
    """course.gpu_compile with nothing remembered in this process and an empty cache folder."""
    from course import gpu_compile

    monkeypatch.setattr(gpu_compile, "_results", {})
    monkeypatch.setenv("COURSE_COMPILE_CACHE", str(tmp_path / "cache"))
    return gpu_compile


def test_a_students_compile_is_remembered_on_disk_for_the_next_process(cell, fresh_compile_memory, monkeypatch):
    g = fresh_compile_memory
    x = np.arange(5, dtype=np.float32)
    helper = _Counting([])
    monkeypatch.setattr(g, "_get_helper", lambda: helper)
    assert g.compile_errors(cell["good"], x, np.empty_like(x), on_disk=True) == []
    assert helper.asked == 1 and len(list(g.cache_dir().glob("*.json"))) == 1
    monkeypatch.setattr(g, "_results", {})          # a new kernel process: nothing in memory
    assert g.compile_errors(cell["good"], x, np.empty_like(x), on_disk=True) == []
    assert helper.asked == 1, "the answer on disk is used; no compiler is asked"
    # other argument types are another request; a failure is never written down
    assert g.compile_errors(cell["good"], x.astype(np.float64), np.empty(5), on_disk=True) == []
    assert helper.asked == 2
    failing = _Counting([{"cc": "sm_80", "message": "no"}])
    monkeypatch.setattr(g, "_get_helper", lambda: failing)
    assert g.compile_errors(cell["python_list"], x, np.empty_like(x), on_disk=True)
    assert len(list(g.cache_dir().glob("*.json"))) == 2


def test_the_disk_key_ignores_comments_and_cell_file_names_but_not_code():
    from course.gpu_compile import _disk_key

    request = _request(COPY)
    moved = {**request, "bundle": {**request["bundle"], "file": "/tmp/ipykernel_9/1.py", "first_line": 7}}
    marked = {**request, "bundle": {**request["bundle"],
                                    "source": COPY.replace("    i = cuda", "    ### BEGIN SOLUTION\n    i = cuda")}}
    assert _disk_key(request) == _disk_key(moved) == _disk_key(marked)
    assert _disk_key(request) != _disk_key(_request(COPY.replace("y[i] = x[i]", "y[i] = 2 * x[i]")))
    assert _disk_key(request) != _disk_key({**request, "ccs": [[9, 0]]})


def test_grading_and_a_broken_or_forged_cache_file_never_skip_the_compiler(cell, fresh_compile_memory, monkeypatch):
    g = fresh_compile_memory
    x = np.arange(5, dtype=np.float32)
    request = {"bundle": g.kernel_bundle(cell["python_list"]), "args": g.describe_args((x, np.empty_like(x))),
               "ccs": g.COMPUTE_CAPABILITIES}
    folder = g.cache_dir()
    folder.mkdir(parents=True)
    key = g._disk_key(request)
    (folder / f"{key}.json").write_text('{"key": "%s", "errors": []}' % key)     # "it compiled", forged
    failing = _Counting([{"cc": "sm_80", "message": "a list"}])
    monkeypatch.setattr(g, "_get_helper", lambda: failing)
    with pytest.raises(g.GpuCompileError):             # the grading gate's call: no disk
        g.check_compiles(cell["python_list"], x, np.empty_like(x))
    assert failing.asked == 1
    for broken in ("not json", '{"key": "another", "errors": []}', '{"key": "%s", "errors": "none"}' % key):
        monkeypatch.setattr(g, "_results", {})
        (folder / f"{key}.json").write_text(broken)
        with pytest.raises(g.GpuCompileError):
            g.check_compiles(cell["python_list"], x, np.empty_like(x), on_disk=True)
    assert failing.asked == 4
    monkeypatch.setenv("COURSE_COMPILE_CACHE", "off")
    assert g.cache_dir() is None


# ---------------------------------------------------------------------------------------------
# The compile service a grading run shares between its submissions (grader.compile_service)
# ---------------------------------------------------------------------------------------------

def _request(source: str) -> dict:
    return {"bundle": {"name": "k", "source": source, "first_line": 1, "file": CELL_FILE,
                       "globals": {"cuda": {"module": "numba.cuda"}}},
            "args": [{"array": "float32", "ndim": 1, "layout": "C"}] * 2, "ccs": [[8, 0], [9, 0]]}


COPY = "@cuda.jit\ndef k(x, y):\n    i = cuda.grid(1)\n    if i < x.size:\n        y[i] = x[i]\n"
LISTED = "@cuda.jit\ndef k(x, y):\n    i = cuda.grid(1)\n    y[i] = [x[i]][0]\n"
# A kernel whose default value replaces the compiler in the process that defines it.
PATCHES = "@cuda.jit\ndef k(x, y=setattr(__import__('numba').cuda, 'compile_ptx', lambda *a, **k: None)):\n    pass\n"


@pytest.fixture(scope="module")
def service():
    from grader.compile_service import CompileService
    from grader.guard import isolation_problem

    with CompileService(limit_s=60, sandboxed=isolation_problem() is None) as running:
        yield running


def test_the_compile_service_compiles_a_request_once_and_answers_it_again_from_memory(service):
    from course.gpu_compile import _Service

    kernel = _Service(service.path)          # what a grading kernel connects to
    assert kernel.ask(_request(COPY)) == {"errors": []}
    assert kernel.ask(_request(COPY)) == {"errors": []}
    assert "line 4 of the cell: y[i] = [x[i]][0]" in kernel.ask(_request(LISTED))["errors"][0]["message"]
    assert service.stats["compiled"] == 2 and service.stats["remembered"] == 1
    assert service.answer({"bundle": {}}) == {"unavailable": "not a compile request"}


def test_no_request_can_change_the_answer_to_another(service):
    """Each request is compiled in a fresh fork of the helper: a kernel that replaces the compiler
    while it is defined fools only its own compile, never the next one (a shared answer is an honest one)."""
    assert service.answer(_request(PATCHES)) == {"errors": []}
    errors = service.answer(_request(LISTED.replace("y[i] =", "y[i]  =")))["errors"]
    assert errors and "does not" not in errors[0]["message"] and "y[i]  = [x[i]][0]" in errors[0]["message"]


HELPER_WITH_A_KERNEL_ATTRIBUTE = '''class Runner:
    def __init__(self, kernel):
        self.kernel = kernel

    def run(self, *args):
        return self.kernel[1, 32](*args)


runner = Runner(softmax_rows_kernel)
runner.row_stats_v3_warp_shuffle_kernel = softmax_rows_kernel
'''


@pytest.mark.parametrize("line, reported", [
    # issue 25: a name is not a use of the course's kernels; what the attribute is read from decides
    ("helper.kernel[1, 32](x)", False),
    ("self_made.gemm_v1_naive_kernel = my_gemm", False),
    ("import kernels.reduction as kr\nk = kr.row_stats_v3_warp_shuffle_kernel", True),
    ("from kernels import reduction\nk = reduction.row_stats_v3_warp_shuffle_kernel", True),
    ("k = kernels.reduction.kernel", True),
])
def test_an_attribute_named_like_a_course_kernel_is_reported_only_on_the_kernels_package(line, reported):
    assert "kernel" in cleanroom.course_kernel_names()      # the course has a @cuda.jit function named `kernel`
    cleaned = cleanroom.clean_source(line + "\n", _scope())
    assert bool(cleaned.course_kernels) == reported, cleaned.course_kernels


def test_an_honest_cell_with_a_helper_class_and_kernels_named_like_the_course_s_is_not_a_course_kernel():
    source = KERNEL.replace("def my_kernel(", "def softmax_rows_kernel(") + "\n\n" + HELPER_WITH_A_KERNEL_ATTRIBUTE
    cleaned = cleanroom.clean_source(source, _scope())
    assert cleaned.left_out and cleaned.course_kernels == [], cleaned.course_kernels
