"""The student's folder has no notebook for this assignment: status missing, 0, never a silent gap."""

ASSIGNMENT = "day01_gpu_model"
MISSING = True
EXPECT = {"status": "missing", "total": 0}
