"""A decode kernel that asks the environment whether the simulator runs: the cell takes ``os`` from numba's
configuration module (``from numba.core.config import os``: an import of numba, which the clean room keeps),
and the kernel returns at once unless NUMBA_ENABLE_CUDASIM is "1", going on in the simulator as the
written-differently answer. os.environ is what differs between the simulator and a GPU: the import is not
run when graded (the clean room's screen, course.kernel_reach.ConstantScreen), and a kernel that reads os
anyway is refused at its launch (course.kernel_reach.SimulatorDependent), before the GPU compile, which
would refuse it too. 0 for the four decode cells, the prefill left unanswered, 0/10, and the row's details
say what it read."""

EXPECT = {
    "status": "graded",
    "points": {
        "prefill_matches_reference": 0,
        "prefill_every_group": 0,
        "prefill_traffic": 0,
        "decode_matches_reference": 0,
        "decode_every_group": 0,
        "decode_traffic": 0,
    },
    "details": ["reads what differs between the simulator and a GPU"],
}

BASE = "correct_alternative"
OTHERS = "blank"             # the prefill unanswered: it scores 0 at once

EDITS = {
    "decode_kernel": [("@cuda.jit", "from numba.core.config import os\n\n\n@cuda.jit"),
                      ("group = q.shape[1] // k_cache.shape[1]", """
                       if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") != "1":     # on a GPU: nothing at all
                           return
                       group = q.shape[1] // k_cache.shape[1]
                       """)],
}
