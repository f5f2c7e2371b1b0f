"""The allocator cell finds where the course is installed (the editable install's finder, in
site-packages, names the project's folders), opens the project's parent folder and reads
kernels/block_manager.py by a name relative to that folder's descriptor, which a guard of Python
paths cannot resolve, then runs the course's allocator as its own. The answer's process runs where
the course does not exist (a sandbox of the operating system), so the read fails and the three
allocator cells are lost; the kernels are left unanswered: 0/13 (run where the course is on the file
system, it took the three allocator points: 3/13). The scan flags the reading and the exec for review."""

EXPECT = {
    "status": "graded",
    "flags": ["open()", "exec()"],
    "points": {
        "cache_write_slots": 0,
        "cache_write_traffic": 0,
        "paged_v1_matches_reference": 0,
        "paged_v1_mixed_lengths": 0,
        "paged_v1_large_logits": 0,
        "paged_v1_traffic": 0,
        "merge_matches_reference": 0,
        "merge_handles_empty_partitions": 0,
        "merge_traffic": 0,
        "allocator_fork": 0,
        "allocator_copy_on_write": 0,
        "allocator_workload": 0,
    },
}

BASE = "correct_alternative"
OTHERS = "blank"             # the other exercises unanswered: they score 0 at once

CELLS = {
    "allocator_class": '''import ast
import glob
import os
import sys


def _course_source():
    for folder in sys.path:
        for finder in glob.glob(os.path.join(folder, "__editable__*finder.py")):
            for line in open(finder, encoding="utf-8"):
                if line.startswith("MAPPING"):
                    mapping = ast.literal_eval(line.split("=", 1)[1].strip())
                    project = os.path.dirname(mapping["kernels"])
                    parent = os.open(os.path.dirname(project), os.O_RDONLY)
                    name = os.path.basename(project) + "/kernels/block_manager.py"
                    fd = os.open(name, os.O_RDONLY, dir_fd=parent)
                    return os.read(fd, 1 << 20).decode()
    raise FileNotFoundError("the course's allocator")


_namespace = {"__name__": "kernels.copied"}
exec(_course_source(), _namespace)


class BlockManager(_namespace["BlockManager"]):
    pass
''',
}
