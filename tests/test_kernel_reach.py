"""What a graded kernel may read (course.kernel_reach): nothing that differs between the simulator and a
GPU, and none of the course's kernels, through whatever route; honest kernels and the course's own pass.

Kernels are defined here as a notebook cell would define them (a file name of IPython's), launched on
the simulator with the grading gate, and walked by value. The clean room's constant screen
(``ConstantScreen``) is tested on sources; ``grader.launch_refusals`` on the errors a refused launch
leaves in an executed notebook.
"""

import ast
import json
import linecache
import math
import os
import sys

import numpy as np
import pytest

import course
from course import kernel_reach
from course.kernel_reach import ConstantScreen, CourseKernelUsed, SimulatorDependent, check_reach, findings, reach
from grader.hidden import PROJECT_ROOT

pytestmark = pytest.mark.skipif(not course.on_simulator(), reason="the walk judges the simulator's values")

CELL_FILE = "/tmp/ipykernel_0/kernel_reach_cell.py"


def _cell(source: str, **extra) -> dict:
    """Define the functions of ``source`` as a notebook cell would, with the release's usual names."""
    import numba
    from numba import cuda, float32, int32

    import kernels

    linecache.cache[CELL_FILE] = (len(source), None, source.splitlines(keepends=True), CELL_FILE)
    namespace = {"cuda": cuda, "float32": float32, "int32": int32, "np": np, "math": math, "numba": numba,
                 "kernels": kernels, "TILE": 4, **extra}
    exec(compile(source, CELL_FILE, "exec"), namespace)
    return namespace


# ---------------------------------------------------------------------------------------------
# What differs between the simulator and a GPU: every route is refused
# ---------------------------------------------------------------------------------------------

SIMULATOR_ROUTES = {
    "a module attribute chain": ("""
@cuda.jit
def k(x):
    if numba.config.ENABLE_CUDASIM:
        x[0] = 1.0
""", "numba.config.ENABLE_CUDASIM", "numba's configuration numba.core.config"),
    "an alias of the configuration module": ("""
import numba.core.config as c

@cuda.jit
def k(x):
    if c.ENABLE_CUDASIM:
        x[0] = 1.0
""", "c.ENABLE_CUDASIM", "numba's configuration"),
    "from numba import config": ("""
from numba import config as settings

@cuda.jit
def k(x):
    x[0] = settings.ENABLE_CUDASIM
""", "settings.ENABLE_CUDASIM", "numba's configuration"),
    "numba.cuda's own config": ("""
@cuda.jit
def k(x):
    x[0] = cuda.config.ENABLE_CUDASIM
""", "cuda.config.ENABLE_CUDASIM", "numba's configuration"),
    "a device function": ("""
@cuda.jit(device=True)
def on_simulator():
    return numba.config.ENABLE_CUDASIM

@cuda.jit(device=True)
def middle():
    return on_simulator()

@cuda.jit
def k(x):
    if middle():
        x[0] = 1.0
""", "numba.config.ENABLE_CUDASIM", "read in device function on_simulator"),
    "a device function in a tuple": ("""
@cuda.jit(device=True)
def on_simulator():
    return numba.config.ENABLE_CUDASIM

HELPERS = (on_simulator, 3)

@cuda.jit
def k(x):
    x[0] = HELPERS[0]()
""", "numba.config.ENABLE_CUDASIM", "device function on_simulator"),
    "a default argument": ("""
@cuda.jit
def k(x, cfg=numba.config):
    x[0] = cfg.ENABLE_CUDASIM
""", "the default of cfg", "numba's configuration"),
    "a closure": ("""
def make():
    cfg = numba.config

    @cuda.jit
    def k(x):
        x[0] = cfg.ENABLE_CUDASIM
    return k

k = make()
""", "cfg.ENABLE_CUDASIM", "numba's configuration"),
    "a closure over a device function": ("""
def make():
    @cuda.jit(device=True)
    def on_simulator():
        return numba.config.ENABLE_CUDASIM

    @cuda.jit
    def k(x):
        x[0] = on_simulator()
    return k

k = make()
""", "numba.config.ENABLE_CUDASIM", "on_simulator"),
    "getattr on a module": ("""
@cuda.jit
def k(x):
    x[0] = getattr(numba, 'config').ENABLE_CUDASIM
""", "getattr", "Python's getattr()"),
    "getattr under another name": ("""
look = getattr

@cuda.jit
def k(x):
    x[0] = look(numba, 'config').ENABLE_CUDASIM
""", "look", "Python's getattr()"),
    "hasattr of the simulator's collective": ("""
@cuda.jit
def k(x):
    if hasattr(cuda, 'simulator_collective_sync'):
        x[0] = 1.0
""", "hasattr", "Python's hasattr()"),
    "the simulator's collective itself": ("""
@cuda.jit
def k(x):
    x[0] = cuda.simulator_collective_sync is None
""", "cuda.simulator_collective_sync", "course.simulator"),
    "the simulator's module": ("""
@cuda.jit
def k(x):
    x[0] = cuda.simulator.kernel.FakeCUDAKernel is None
""", "cuda.simulator.kernel.FakeCUDAKernel", "the simulator's module numba.cuda.simulator"),
    "numba.cuda outside its kernel API": ("""
@cuda.jit
def k(x):
    x[0] = cuda.is_available()
""", "cuda.is_available", "simulator"),
    "os.environ": ("""
@cuda.jit
def k(x):
    if os.environ.get('NUMBA_ENABLE_CUDASIM') == '1':
        x[0] = 1.0
""", "os.environ.get", "the module os"),
    "os reached through numba's configuration": ("""
@cuda.jit
def k(x):
    x[0] = len(numba.core.config.os.environ)
""", "numba.core.config.os.environ", "numba's configuration"),
    "sys.modules": ("""
@cuda.jit
def k(x):
    x[0] = 'numba.cuda.simulator' in sys.modules
""", "sys.modules", "the module sys"),
    "a type's module": ("""
@cuda.jit
def k(x):
    x[0] = type(x).__module__ == 'numba.cuda.simulator.cudadrv.devicearray'
""", "type", "Python's type()"),
    "a dunder attribute": ("""
@cuda.jit
def k(x):
    x[0] = len(x.__class__.__name__)
""", "x.__class__.__name__", "__class__ is Python's own"),
    "isinstance": ("""
@cuda.jit
def k(x):
    if isinstance(x, np.ndarray):
        x[0] = 1.0
""", "isinstance", "Python's isinstance()"),
    "a local that holds a module": ("""
@cuda.jit
def k(x):
    m = numba
    x[0] = m.config.ENABLE_CUDASIM
""", "m.config.ENABLE_CUDASIM", "config is a member"),
    "an import inside the body": ("""
@cuda.jit
def k(x):
    import os
    x[0] = len(os.environ)
""", "import os", "an import inside a kernel"),
    "the builtins": ("""
@cuda.jit
def k(x):
    x[0] = __builtins__ is None
""", "__builtins__", "Python's own"),
    "the course's tools": ("""
@cuda.jit
def k(x):
    if course.on_simulator():
        x[0] = 1.0
""", "course.on_simulator", "the course's own module course"),
}


@pytest.mark.parametrize("route", sorted(SIMULATOR_ROUTES))
def test_a_kernel_that_can_tell_the_simulator_from_a_gpu_is_refused(route):
    source, name, why = SIMULATOR_ROUTES[route]
    kernel = _cell(source, os=os, sys=sys, course=course)["k"]
    found = findings(kernel)
    assert found and found[0].kind == "simulator", found
    with pytest.raises(SimulatorDependent) as refused:
        check_reach(kernel)
    message = str(refused.value)
    assert f"k reads what differs between the simulator and a GPU: {name}" in message, message
    assert why in message, message


# ---------------------------------------------------------------------------------------------
# The course's kernels: every route is course_kernel
# ---------------------------------------------------------------------------------------------

COURSE_ROUTES = {
    "an attribute chain from the kernels package": ("""
@cuda.jit
def k(out, partial_max, partial_sum, partial_acc):
    out[0] = kernels.paged_attention._merge_partitions(partial_max, partial_sum, partial_acc, 0, 0, 0)
""", "kernels.paged_attention._merge_partitions", "kernels/paged_attention.py: _merge_partitions"),
    "the package under another name": ("""
engine = kernels

@cuda.jit
def k(out, partial_max, partial_sum, partial_acc):
    out[0] = engine.paged_attention._merge_partitions(partial_max, partial_sum, partial_acc, 0, 0, 0)
""", "engine.paged_attention._merge_partitions", "kernels/paged_attention.py: _merge_partitions"),
    "a module alias": ("""
import kernels.gqa_attention.decode as gd

@cuda.jit
def k(scores, lane):
    gd.exchange_halves(scores, 1, 2, lane)
""", "gd.exchange_halves", "kernels/gqa_attention/decode.py: exchange_halves"),
    "the device function under another name": ("""
from kernels.gqa_attention.decode import exchange_halves as swap

@cuda.jit
def k(scores, lane):
    swap(scores, 1, 2, lane)
""", "swap", "kernels/gqa_attention/decode.py: exchange_halves"),
    "a device function of the student's that calls it": ("""
from kernels.paged_attention import _merge_partitions as merge

@cuda.jit(device=True)
def mine(a, b, c):
    return merge(a, b, c, 0, 0, 0)

@cuda.jit
def k(out, partial_max, partial_sum, partial_acc):
    out[0] = mine(partial_max, partial_sum, partial_acc)
""", "merge", "read in device function mine"),
    "re-jitted from its Python function": ("""
merge = cuda.jit(device=True)(kernels.paged_attention._merge_partitions.py_func)

@cuda.jit
def k(out, partial_max, partial_sum, partial_acc):
    out[0] = merge(partial_max, partial_sum, partial_acc, 0, 0, 0)
""", "merge", "kernels/paged_attention.py: _merge_partitions"),
    "a closure": ("""
def make():
    helper = kernels.paged_attention._merge_partitions

    @cuda.jit
    def k(out, partial_max, partial_sum, partial_acc):
        out[0] = helper(partial_max, partial_sum, partial_acc, 0, 0, 0)
    return k

k = make()
""", "helper", "kernels/paged_attention.py: _merge_partitions"),
    "a default argument": ("""
@cuda.jit
def k(out, partial_max, partial_sum, partial_acc, merge=kernels.paged_attention._merge_partitions):
    out[0] = merge(partial_max, partial_sum, partial_acc, 0, 0, 0)
""", "the default of merge", "kernels/paged_attention.py: _merge_partitions"),
    "an intrinsic's simulator twin (a plain function)": ("""
from kernels.intrinsics import four_halves

@cuda.jit
def k(x, words):
    a, b, c, d = four_halves(words[0])
    x[0] = a
""", "four_halves", "kernels/intrinsics/numbers.py"),
    "a constant of a course module": ("""
@cuda.jit
def k(x):
    x[0] = kernels.launching.FULL_MASK
""", "kernels.launching.FULL_MASK", "the course's module kernels"),
}


@pytest.mark.parametrize("route", sorted(COURSE_ROUTES))
def test_a_kernel_that_reaches_the_courses_kernels_is_course_kernel(route):
    import kernels.gqa_attention.decode  # noqa: F401 - the modules the routes name
    import kernels.intrinsics  # noqa: F401
    import kernels.paged_attention  # noqa: F401

    source, name, why = COURSE_ROUTES[route]
    kernel = _cell(source)["k"]
    with pytest.raises(CourseKernelUsed) as refused:
        check_reach(kernel)
    message = str(refused.value)
    assert f"k uses the course's kernels: {name}" in message, message
    assert why in message, message


def test_a_course_kernel_found_beside_a_simulator_read_is_reported_first():
    kernel = _cell("""
@cuda.jit
def k(out, partial_max, partial_sum, partial_acc):
    if numba.config.ENABLE_CUDASIM:
        out[0] = kernels.paged_attention._merge_partitions(partial_max, partial_sum, partial_acc, 0, 0, 0)
""")["k"]
    with pytest.raises(CourseKernelUsed) as refused:
        check_reach(kernel)
    assert [f.kind for f in refused.value.findings] == ["course_kernel", "simulator"]


# ---------------------------------------------------------------------------------------------
# What passes: honest kernels, the course's own, every solution and correct sample
# ---------------------------------------------------------------------------------------------

HONEST = """
import numba.types
from numba import int32 as i32, uint32
from numba.core import types as nbtypes

WARPS = 4
FULL_MASK = 0xFFFFFFFF
NEG = float32(-math.inf)
SHAPE = (4, 2 * 8)
F32 = numba.float32

@cuda.jit(device=True)
def twice(v):
    return v * 2

PAIR = (twice, 2)

@cuda.jit
def k(x, y, out, scale=1.0):
    i = cuda.grid(1)
    tile = cuda.shared.array(SHAPE, float32)
    regs = cuda.local.array(WARPS, nbtypes.float32)
    lane = cuda.threadIdx.x % 32
    if i < x.size:
        v = x[i] * scale + np.float32(TILE) + F32(1) + numba.types.float32(0) + i32(cuda.blockIdx.x)
        v += cuda.shfl_down_sync(FULL_MASK, v, 16) + math.exp(float32(0)) + np.float32(math.pi)
        regs[0] = twice(v) + PAIR[0](v) + uint32(cuda.blockDim.x) + cuda.laneid + min(len(x.shape), 2)
        tile[0, 0] = max(abs(regs[0]), NEG)
        cuda.syncthreads()
        cuda.atomic.add(out, 0, tile[0, 0] + lane + cuda.gridDim.x + cuda.gridsize(1))
        y[i] = regs[0] if x.shape[0] > 0 else float32(0.0)
"""


def test_an_honest_kernel_passes_and_its_device_functions_are_walked():
    cell = _cell(HONEST)
    walked = reach(cell["k"])
    assert walked.findings == []
    assert [f.__name__ for f in walked.functions] == ["k", "twice"]


def test_the_course_kernels_read_nothing_that_differs_and_the_gate_leaves_them_alone():
    """Every kernel and device function of ``kernels/``, walked with the course's package as its own:
    the idioms a student copies from them all pass. And the grading gate does not check them at all."""
    import importlib
    import pkgutil

    import kernels
    from course import gates

    walked = 0
    for info in pkgutil.walk_packages(kernels.__path__, "kernels."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if kernel_reach.is_dispatcher(value):
                walked += 1
                assert reach(value, own=True).findings == [], f"{info.name}.{name}"
    assert walked > 50
    from kernels.paged_attention import paged_attention_v2_merge_kernel

    assert gates._gate(paged_attention_v2_merge_kernel, ()) is None


def _released_namespace(assignment: str) -> dict:
    release = json.loads((PROJECT_ROOT / "exercises" / assignment / f"{assignment}.ipynb").read_text())
    namespace: dict = {}
    for cell in release["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
        if cell["cell_type"] == "code" and (gid.startswith("setup") or gid.endswith("constants")):
            exec("".join(cell["source"]).replace("course.use_device()", ""), namespace)
    return namespace


def test_every_solution_and_correct_sample_passes():
    """Their kernels pass the walk, and the screen refuses none of their top-level statements."""
    from grader.sample_cases import find_cases

    checked = 0
    for folder in sorted((PROJECT_ROOT / "solutions").iterdir()):
        assignment = folder.name
        base = _released_namespace(assignment)
        screen = ConstantScreen()
        release = json.loads((PROJECT_ROOT / "exercises" / assignment / f"{assignment}.ipynb").read_text())
        for cell in release["cells"]:
            if cell["cell_type"] == "code" and not cell["metadata"].get("nbgrader", {}).get("solution"):
                for node in ast.parse("".join(cell["source"])).body:
                    screen.learn(node)
        solution = json.loads((folder / f"{assignment}.ipynb").read_text())
        cells = ["".join(c["source"]) for c in solution["cells"] if c["cell_type"] == "code"
                 and c["metadata"].get("nbgrader", {}).get("solution")
                 and not c["metadata"].get("course", {}).get("host_answer")]
        cells += [source for case in find_cases(assignment, course_wide=False)
                  if case.name.startswith("correct") for gid, source in case.cells.items()
                  if "class " not in source]
        for source in cells:
            trial = screen.copy()
            refused = [(ast.unparse(node)[:60], trial.refusal(node)) for node in ast.parse(source).body]
            assert [r for r in refused if r[1] is not None] == [], assignment
            namespace = dict(base)
            exec(compile(source, CELL_FILE, "exec"), namespace)
            for name, value in namespace.items():
                if kernel_reach.is_dispatcher(value) and base.get(name) is not value:
                    checked += 1
                    assert findings(value) == [], f"{assignment}: {name}"
    assert checked > 50


# ---------------------------------------------------------------------------------------------
# The launch gates
# ---------------------------------------------------------------------------------------------

def test_a_kernel_that_compiles_for_a_gpu_but_branches_on_the_simulator_never_runs_when_graded():
    """numba freezes numba.config.ENABLE_CUDASIM into the code, so the kernel compiles for a GPU (where it
    writes 2) and would write 1 here: the gate refuses it before it runs, output untouched."""
    from course import gates, simulator
    from course.checking import poison
    from course.gpu_compile import compile_errors

    kernel = _cell("""
@cuda.jit
def branches(x, y):
    i = cuda.grid(1)
    if i < x.size:
        if numba.config.ENABLE_CUDASIM:
            y[i] = 1.0
        else:
            y[i] = 2.0
""")["branches"]
    x = np.arange(4, dtype=np.float32)
    assert compile_errors(kernel, x, np.empty_like(x)) == []
    simulator.add_launch_gate(gates._gate)
    try:
        out = poison(np.empty_like(x))
        with pytest.raises(SimulatorDependent, match="branches reads what differs between the simulator and a "
                                                     "GPU: numba.config.ENABLE_CUDASIM"):
            kernel[1, 4](x, out)
        assert np.isnan(out).all(), "a refused kernel must not run"
    finally:
        simulator.remove_launch_gate(gates._gate)


def test_students_get_the_same_refusal_at_their_first_launch():
    from course import gates, simulator

    assert gates._notebook_gate in simulator.launch_gates()
    kernel = _cell("""
@cuda.jit
def k(x):
    x[0] = kernels.paged_attention._merge_partitions(x, x, x, 0, 0, 0)
""")["k"]
    with pytest.raises(CourseKernelUsed):
        kernel[1, 1](np.zeros(4, np.float32))


# ---------------------------------------------------------------------------------------------
# The constant screen: a constant computed from what differs is refused where it is written
# ---------------------------------------------------------------------------------------------

RELEASE = "import math\nimport numpy as np\nfrom numba import cuda, float32\nimport kernels.paged_attention\nimport course\n"


def _screen() -> ConstantScreen:
    screen = ConstantScreen()
    for node in ast.parse(RELEASE).body:
        screen.learn(node)
    return screen


def _refusals(source: str) -> list:
    screen = _screen()
    return [screen.refusal(node) for node in ast.parse(source).body]


@pytest.mark.parametrize("source, refused", [
    ("import numba.core.config as c", "numba.core.config"),
    ("from numba import config", "numba.config"),
    ("from numba.core.config import ENABLE_CUDASIM", "numba.core.config"),
    ("from numba.core.config import os", "numba.core.config"),
    ("from numba.cuda import simulator", "numba.cuda.simulator"),
    ("import numba.cuda.simulator", "numba.cuda.simulator"),
    ("from numba.cuda import is_available", "numba.cuda.is_available"),
    ("X = cuda.config", "numba.cuda.config"),
    ("SIM = cuda.simulator is not None", "numba.cuda.simulator"),
    ("import numba\nSIM = numba.config.ENABLE_CUDASIM", "numba.config.ENABLE_CUDASIM"),
    ("import numba\nN = numba\nSIM = N.config", "numba.config"),
    ("import numba.cuda as nc\nSIM = 1 if nc.simulator else 0", "numba.cuda.simulator"),
    ("import os", "os"),
    ("from os import environ", "os"),
    ("import sys as s", "sys"),
    ("X = np.__config__", "__config__"),
    ("import numba.cuda as nc\n@cuda.jit\ndef k(x, sim=nc.config.ENABLE_CUDASIM):\n    pass", "numba.cuda.config"),
])
def test_the_screen_refuses_a_statement_that_reads_what_differs(source, refused):
    found = [why for why in _refusals(source) if why is not None]
    assert len(found) == 1 and refused in found[0], found


@pytest.mark.parametrize("source", [
    "import numba", "import numba.cuda", "import numba.cuda as nc", "from numba import cuda, float32, int32, uint64",
    "from numba.cuda import float32, threadIdx", "from numba import types", "from numba.core import types",
    "from numba.cuda import jit", "from numba import cuda as gpu", "import numba.cuda as nc\nW = nc.grid",
    "from numba.types import int32", "import numpy as np", "from math import inf, sqrt",
    "NEG = float32(-math.inf)", "import numba\nT = numba.float32", "import numba.cuda as nc\nW = nc.float16",
    "X = np.float32(1)", "SHAPE = (16, 2 * 8)", "K = kernels", "C = course",
    "@cuda.jit\ndef k(x, y=4, z=-1.0):\n    pass",
])
def test_the_screen_lets_an_honest_statement_run(source):
    assert _refusals(source) == [None] * len(ast.parse(source).body)


def test_a_number_read_from_the_configuration_at_import_is_only_seen_where_it_is_written():
    """``from numba.core.config import ENABLE_CUDASIM`` gives the kernel a plain 1, which no walk can tell from a
    tile size: the launch check passes it, and the screen refuses the import where it is written."""
    kernel = _cell("""
@cuda.jit
def k(x):
    if ENABLE_CUDASIM:
        x[0] = 1.0
""", ENABLE_CUDASIM=1)["k"]
    assert findings(kernel) == []
    assert "numba.core.config" in _refusals("from numba.core.config import ENABLE_CUDASIM")[0]


def test_a_screen_copy_goes_on_alone():
    screen = _screen()
    trial = screen.copy()
    assert trial.refusal(ast.parse("import numba.cuda as nc").body[0]) is None
    assert "nc" in trial.paths and "nc" not in screen.paths


def test_the_screen_knows_the_numba_names_it_allows():
    """Every number type and kernel API name the screen allows exists in numba (so it allows no made-up
    path), and every number type numba has is allowed (so an honest import is never refused)."""
    import numba
    from numba import cuda
    from numba.core import types

    for name in kernel_reach.NUMBA_TYPE_NAMES:
        assert isinstance(getattr(types, name, None), types.Type) or name == "bfloat16" and hasattr(cuda, name), name
    for module in (numba, cuda):
        numbers = {n for n, v in vars(module).items()
                   if isinstance(v, (types.Number, types.Boolean, types.NoneType)) and not n.startswith("_")}
        assert numbers <= kernel_reach.NUMBA_TYPE_NAMES, numbers - kernel_reach.NUMBA_TYPE_NAMES


# ---------------------------------------------------------------------------------------------
# What the grading process reads back
# ---------------------------------------------------------------------------------------------

def test_the_grader_reads_the_refusals_back_from_the_executed_notebook():
    from grader.launch_refusals import launch_refusals

    messages = {}
    for label, source in (("sim", SIMULATOR_ROUTES["a device function"][0]),
                          ("course", COURSE_ROUTES["the package under another name"][0])):
        try:
            check_reach(_cell(source)["k"])
        except AssertionError as exc:
            messages[label] = exc
    notebook = {"cells": [
        {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "merge_traffic"}}, "outputs": [
            {"output_type": "error", "ename": type(messages["course"]).__name__, "evalue": str(messages["course"]),
             "traceback": ["\x1b[31mCourseKernelUsed\x1b[0m: " + str(messages["course"])]}]},
        {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "decode_traffic"}}, "outputs": [
            {"output_type": "stream", "name": "stdout", "text": SIMULATOR_ROUTES["a module attribute chain"][1]},
            {"output_type": "error", "ename": "AssertionError", "evalue": str(messages["sim"]), "traceback": []}]},
        {"cell_type": "markdown", "metadata": {}, "source": "reads what differs between the simulator and a GPU: x ("},
    ]}
    notebook["cells"].append(json.loads(json.dumps(notebook["cells"][0])))
    notebook["cells"][-1]["metadata"]["nbgrader"]["grade_id"] = "merge_matches_reference"
    used, differs = launch_refusals(notebook)
    assert used == ["engine.paged_attention._merge_partitions (in merge_traffic, merge_matches_reference)"]
    assert differs == ["numba.config.ENABLE_CUDASIM (in decode_traffic)"]
    assert launch_refusals({"cells": []}) == ([], [])
