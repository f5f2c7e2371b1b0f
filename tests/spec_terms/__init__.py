"""The bounds of every graded spec, term by term, and the cases that decide each (issue: hidden tests
that leave a term of the spec untested).

A kernel's bounds are where a subtly wrong answer hides: a key loop that ends at
``min(kv_end, tile_start + TILE_Q, n_queries)`` is right only if some case makes each of its three terms
the smallest. One table per day (``dayNN.py``), one :class:`Term` per row:

- every term of every ``min(...)`` in the solution's answer cells is a row; the mutant drops that term
  (``min(a, b, c)`` becomes ``min(a, c)``, ``min(a, b)`` becomes ``a``), and :func:`min_terms` lists them
  from the code, so a bound added to a kernel without its row fails ``test_spec_terms.py``;
- each edge of a mask and each partial tile is a row written by hand, with the ``edits`` that move the
  edge (``j <= i`` to ``j < i``) or drop the guard of the partial tile.

Each row names the grade cell whose **hidden** tests must fail the mutant and the grade cell whose
**visible** check must fail it too (the student meets the case before the grade). A term no case can
decide (the mutant computes the same values on every input) is a row with ``exempt`` saying why.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import re

from grader import markers

__all__ = ["Term", "TABLES", "ALL", "min_terms", "drop_term", "answer_source"]


@dataclasses.dataclass(frozen=True)
class Term:
    cell: str                            # the answer cell of the solution notebook
    bound: str                           # the min(...) call as the code writes it, or a name for a hand row
    term: str                            # the term of it this row is about (for a min: the argument dropped)
    hidden: str | None = None            # the grade cell whose hidden tests fail the mutant
    visible: str | None = None           # the grade cell whose visible check fails it
    edits: tuple[tuple[str, str], ...] = ()   # a hand row's (old, new) edits; empty: drop ``term`` of ``bound``
    why: str = ""                        # which case decides it, or (with exempt) why none can
    exempt: bool = False

    def __post_init__(self):
        if self.exempt != (self.hidden is None and self.visible is None):
            raise ValueError(f"{self.label}: a row names both a hidden and a visible grade cell, or is exempt "
                             f"(and names neither)")
        if not self.why:
            raise ValueError(f"{self.label}: say which case decides the term, or why none can")

    @property
    def label(self) -> str:
        return f"{self.cell}: {self.term} in {self.bound}"

    def mutant_edits(self, source: str) -> tuple[tuple[str, str], ...]:
        return self.edits or ((self.bound, drop_term(self.bound, self.term)),)


def answer_source(source: str) -> str:
    """An answer cell's code without the solution markers."""
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in (markers.BEGIN_SOLUTION, markers.END_SOLUTION))


def _min_calls(source: str):
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "min" \
                and len(node.args) >= 2 and not node.keywords:
            yield node


def min_terms(source: str) -> set[tuple[str, str]]:
    """``{(bound, term)}``: every argument of every ``min(...)`` call in ``source``, the call as written."""
    return {(ast.get_source_segment(source, node), ast.get_source_segment(source, arg))
            for node in _min_calls(source) for arg in node.args}


def drop_term(bound: str, term: str) -> str:
    """``bound`` (a ``min(...)`` call) without its argument ``term``."""
    (node,) = _min_calls(bound)
    args = [ast.get_source_segment(bound, arg) for arg in node.args]
    if term not in args:
        raise ValueError(f"{term!r} is not an argument of {bound!r}")
    args.remove(term)
    return f"min({', '.join(args)})" if len(args) > 1 else f"({args[0]})"


def _tables() -> dict[str, tuple[Term, ...]]:
    tables = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        if re.fullmatch(r"day\d\d", info.name):
            module = importlib.import_module(f"{__name__}.{info.name}")
            tables[module.ASSIGNMENT] = tuple(module.TABLE)
    return tables


TABLES = _tables()
ALL = tuple((assignment, term) for assignment, table in TABLES.items() for term in table)
