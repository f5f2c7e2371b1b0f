"""Day 7 exercise: every grade cell's hidden tests fail a wrong kernel, and the visible checks name the
day's mistakes.

As for day 6 (``test_day06_exercise.py``): the answer cells of the solution notebook run with one mistake
written in, then only the hidden tests of one grade cell, which must fail; where the visible check cannot
see the mistake, that is asserted too. Then the feedback a student gets for each classic mistake of GQA.
"""

from __future__ import annotations

import pytest

from days import BY_NAME
from solution_cells import SolutionCells

NOTEBOOK = SolutionCells("day07_grouped_query_attention", (
    "setup_device", "prefill_constants", "prefill_kernel", "prefill_launcher", "decode_constants", "decode_kernel",
    "decode_launcher"))

# The wrong answer of tests/days.py, one mutation per answer cell: a group of 2 assumed in the prefill's
# head map, and the decode's K and V loaded again for every head.
_PREFILL_WRONG, _DECODE_WRONG = BY_NAME["day07_grouped_query_attention"].wrong
GROUP_OF_TWO = [(_PREFILL_WRONG.old, _PREFILL_WRONG.new)]
KV_PER_HEAD = [(_DECODE_WRONG.old, _DECODE_WRONG.new)]
TILE_PER_ROW = [("        for idx in range(t, n_tile * d, rows):", "        for idx in range(t, min(n_tile * d, rows), rows):")]
DECODE_GROUP_OF_TWO = [("first = kv_head * group + ", "first = kv_head * 2 + ")]

# grade cell -> (answer cell, edits, the mistake, whether the visible check misses it)
WRONG = {
    "prefill_matches_reference": (
        "prefill_kernel", GROUP_OF_TWO, "the query head of a row assumes a group of 2", True),
    "prefill_every_group": (
        "prefill_kernel", TILE_PER_ROW, "one pass of the rows loads the tile: 64 rows miss half a 16 x 8 tile",
        False),
    "prefill_traffic": (
        "prefill_kernel", [("score += q_row[c] * k_tile[j, c]", "score += q_row[c] * k[b, kv_head, kv_start + j, c]")],
        "every row reads its keys from global memory", False),
    "decode_matches_reference": (
        "decode_kernel", DECODE_GROUP_OF_TWO, "the block's first head assumes a group of 2", True),
    "decode_every_group": (
        "decode_kernel", [("subgroups = (group + GROUP_MAX - 1) // GROUP_MAX", "subgroups = 1")],
        "a group above GROUP_MAX is not split: heads past the first GROUP_MAX are never written", False),
    "decode_traffic": ("decode_kernel", KV_PER_HEAD, "K and V loaded again for every head", False),
}


def test_every_grade_cell_has_a_wrong_kernel():
    assert set(WRONG) == NOTEBOOK.graded


@pytest.mark.parametrize("grade_id", list(WRONG))
def test_hidden_tests_fail_a_wrong_kernel(grade_id):
    cell, edits, _, visible_misses_it = WRONG[grade_id]
    NOTEBOOK.hidden_tests_fail(grade_id, cell, edits, visible_misses_it)


# check name, answer cell, edits, words the feedback must contain
FEEDBACK = [
    pytest.param("gqa_prefill_handles_every_group", "prefill_kernel", GROUP_OF_TWO,
                 ["Axis 1 of q and o is the query head", "group = heads // kv_heads = 1"], id="prefill-group-of-two"),
    pytest.param("gqa_decode_handles_every_group", "decode_kernel", DECODE_GROUP_OF_TWO,
                 ["query head 1 of 2 was never written", "group = heads // kv_heads = 1"], id="decode-group-of-two"),
    pytest.param("gqa_prefill_handles_every_group", "prefill_kernel", TILE_PER_ROW,
                 ["a block has 64 rows (threads) and a K tile 16 x 8 = 128 elements"], id="prefill-tile-per-row"),
    pytest.param("gqa_prefill_traffic_fits", "prefill_kernel",
                 [("score += q_row[c] * k_tile[j, c]", "score += q_row[c] * k[b, kv_head, kv_start + j, c]")],
                 ["k was loaded", "the budget is"], id="prefill-keys-per-row"),
    pytest.param("gqa_decode_traffic_fits", "decode_kernel", KV_PER_HEAD,
                 ["k_cache was loaded", "once per query head of the group"], id="decode-kv-per-head"),
    pytest.param("gqa_prefill_matches_reference", "prefill_kernel",
                 [("    h = kv_head * group + head_in_group", "    h = head_in_group * k.shape[1] + kv_head")],
                 ["read KV head h % kv_heads"], id="prefill-interleaved"),
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("check, cell, edits, words", FEEDBACK)
def test_visible_checks_name_the_mistake(check, cell, edits, words):
    namespace = NOTEBOOK.with_edits(cell, edits)
    kernel = namespace["gqa_prefill_tiles_kernel" if cell == "prefill_kernel" else "gqa_decode_group_kernel"]
    from course import exercise_checks

    with pytest.raises(AssertionError) as failure:
        getattr(exercise_checks, check)(kernel)
    message = str(failure.value)
    assert all(word in message for word in words), message
