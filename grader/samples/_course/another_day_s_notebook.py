"""Day 7's notebook handed in as day 8's (the two days share grade ids: both have a prefill and a decode
exercise). The file is a notebook of the course, but not this assignment's: status wrong_notebook,
naming the day it is, and nothing is run (it is not called tampered)."""

import pathlib

ASSIGNMENT = "day08_mixed_precision"
_DAY7 = "day07_grouped_query_attention"
RAW = (pathlib.Path(__file__).resolve().parents[3] / "exercises" / _DAY7 / f"{_DAY7}.ipynb").read_text("utf-8")
EXPECT = {"status": "wrong_notebook", "total": 0, "details": [f"the notebook of {_DAY7}"]}
