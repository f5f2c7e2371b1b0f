"""What the launch checks refused in a graded notebook: the course's kernels used, what differs read.

The grading kernel refuses, before it runs, a student's kernel that reaches the course's own kernels
(``course.kernel_reach.CourseKernelUsed``) or reads what differs between the simulator and a GPU
(``SimulatorDependent``: numba's configuration, the simulator's modules, the environment). The test
that launched it fails, and its error stays in the executed notebook (``autograded/``, hidden tests
included; the feedback drops it). :func:`launch_refusals` reads those errors back, so the grading
process can name them in the row: a use of the course's kernels makes the row ``course_kernel`` as
the clean room's findings do, a read of what differs goes into its details.

Only the student's kernels can raise inside a grading kernel (``grader.cleanroom`` runs nothing else
of theirs), and a message they forge can only mark their own row, so the text is trusted as it is.
"""

from __future__ import annotations

import re

from course.kernel_reach import COURSE_KERNEL_PHRASE, SIMULATOR_PHRASE

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FOUND = re.compile("(" + re.escape(COURSE_KERNEL_PHRASE) + "|" + re.escape(SIMULATOR_PHRASE) + r")(.+?) \(")


def _meta_id(cell: dict, index: int) -> str:
    nbgrader = cell.get("metadata", {}).get("nbgrader", {})
    gid = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
    return gid or f"cell {index + 1}"


def launch_refusals(notebook: dict) -> tuple[list[str], list[str]]:
    """``(uses of the course's kernels, reads of what differs between the simulator and a GPU)`` that
    launches of the executed ``notebook`` refused: each what was read, once, with the cells whose launches
    it stopped (``"engine.paged_attention._merge_partitions (in merge_traffic, merge_matches_reference)"``)."""
    found: dict[str, dict[str, list[str]]] = {COURSE_KERNEL_PHRASE: {}, SIMULATOR_PHRASE: {}}
    for index, cell in enumerate(notebook.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") != "error":
                continue
            text = _ANSI.sub("", "\n".join([str(output.get("evalue", "")), *map(str, output.get("traceback", []))]))
            for phrase, name in _FOUND.findall(text):
                cells = found[phrase].setdefault(name, [])
                if _meta_id(cell, index) not in cells:
                    cells.append(_meta_id(cell, index))

    def listed(phrase):
        return [f"{name} (in {', '.join(cells)})" for name, cells in found[phrase].items()]

    return listed(COURSE_KERNEL_PHRASE), listed(SIMULATOR_PHRASE)
