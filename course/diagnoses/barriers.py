"""Diagnoses from a kernel's Python source: barriers that not every thread reaches, or that are missing.

The simulator runs the threads of a block in an order that hides most races and never hangs at a
divergent barrier, so these mistakes often give right numbers there and wrong ones, or a hang, on a
GPU. ``kernel_findings`` reads the source with ``ast``:

- a name is thread-dependent when its value comes from ``threadIdx``, ``cuda.grid`` or
  ``laneid``, directly or through other thread-dependent names;
- a barrier inside an ``if``, ``for`` or ``while`` whose condition or bound is thread-dependent is
  divergent, and so is a barrier after a ``return`` inside a thread-dependent ``if``;
- in a loop that writes and reads a shared array, a barrier must separate the writes from the reads
  after them, and the last read from the next pass's writes.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

__all__ = ["kernel_findings"]


def kernel_findings(kernel) -> list:
    """Barrier mistakes in the Python source of ``kernel`` (a @cuda.jit kernel or a function).

    Returns (key, message) pairs; an empty list when none is found or the source cannot be read.
    """
    function = getattr(kernel, "py_func", kernel)
    try:
        lines, first_line = inspect.getsourcelines(function)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return []
    definition = next((node for node in tree.body if isinstance(node, ast.FunctionDef)), None)
    if definition is None:
        return []
    name = definition.name
    offset = first_line - 1

    def line(node):
        return node.lineno + offset

    per_thread = _thread_dependent_names(definition)
    shared = {target.id for node in ast.walk(definition) if isinstance(node, ast.Assign)
              and _is_call_to(node.value, "array") and "shared" in ast.unparse(node.value.func)
              for target in node.targets if isinstance(target, ast.Name)}
    findings = []
    divergent = _divergent_barriers(definition, per_thread)
    if divergent:
        barrier, condition = divergent
        findings.append(("divergent_barrier", (
            f"{name}: the barrier at line {line(barrier)} sits inside code that depends on the thread "
            f"(line {line(condition)}: `{_headline(condition)}`): threads that skip it never arrive, so "
            "on a GPU the block hangs or reads tiles that are not ready (the simulator does not notice). "
            "Every thread of a block must meet the same barriers: take loop bounds from the block (e.g. "
            "the causal key bound from the tile's last row, not each thread's row) and let threads "
            "without work skip the computation, not the barrier")))
    early = _early_return(definition, per_thread)
    if early:
        returned, barrier = early
        findings.append(("early_return_barrier", (
            f"{name}: some threads return at line {line(returned)} (`{_headline(returned)}`), before the "
            f"barrier at line {line(barrier)}: they never load their part of the tile and never arrive at "
            "the barrier. Keep every thread through the barriers: guard the loads (load a neutral value, "
            "0 outside the matrix) and the final store instead")))
    for loop, array, read, write, kind in _unguarded_shared(definition, shared):
        if kind == "after_read" and read.lineno == write.lineno:
            message = (f"{name}: the loop at line {line(loop)} reads and writes the shared array {array} "
                       f"(line {line(read)}) with no barrier between one pass and the next: a thread can "
                       "read another thread's slot before this pass's value is written, or after the next "
                       "pass overwrote it. Put cuda.syncthreads() at the end of the loop body")
        elif kind == "after_read":
            message = (f"{name}: in the loop at line {line(loop)}, the shared array {array} is read "
                       f"(line {line(read)}) and overwritten in the next pass (line {line(write)}) with no "
                       "barrier in between: a fast thread overwrites values others still read. Put "
                       "cuda.syncthreads() after the last read, at the end of the loop body")
        else:
            message = (f"{name}: in the loop at line {line(loop)}, the shared array {array} is written "
                       f"(line {line(write)}) and then read (line {line(read)}) with no barrier in between: "
                       "a thread reads slots other threads have not written yet. Put cuda.syncthreads() "
                       "between the writes and the reads")
        findings.append(("missing_barrier", message))
        break
    return findings


def _is_call_to(node, attribute: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
            and (getattr(node.func, "attr", None) == attribute or getattr(node.func, "id", None) == attribute))


def _is_barrier(node) -> bool:
    return isinstance(node, ast.Expr) and _is_call_to(node.value, "syncthreads")


def _headline(node) -> str:
    if isinstance(node, ast.If):
        return f"if {ast.unparse(node.test)}:"
    if isinstance(node, ast.While):
        return f"while {ast.unparse(node.test)}:"
    if isinstance(node, ast.For):
        return f"for {ast.unparse(node.target)} in {ast.unparse(node.iter)}:"
    return ast.unparse(node).splitlines()[0]


def _thread_dependent_names(definition) -> set:
    """Names whose value may differ between the threads of one block (threadIdx, cuda.grid, ...)."""
    names: set = set()
    changed = True
    while changed:
        changed = False
        for node in ast.walk(definition):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.value
            elif isinstance(node, ast.For):
                targets, value = [node.target], node.iter
            else:
                continue
            if _depends(value, names):
                # Only plain names: an element stored into an array does not make the array's
                # other elements (a shared partial read back by every thread) thread-dependent.
                for target in targets:
                    leaves = target.elts if isinstance(target, ast.Tuple) else [target]
                    for leaf in leaves:
                        if isinstance(leaf, ast.Name) and leaf.id not in names:
                            names.add(leaf.id)
                            changed = True
    return names


def _depends(expr, names) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute) and node.attr in ("threadIdx", "laneid"):
            return True
        if _is_call_to(node, "grid") or (isinstance(node, ast.Name) and node.id in names):
            return True
    return False


def _divergent_barriers(definition, names):
    """(barrier, the enclosing thread-dependent if/for/while) for the first such barrier, or None."""

    def visit(node, enclosing):
        for child in ast.iter_child_nodes(node):
            if _is_barrier(child) and enclosing:
                return child, enclosing[-1]
            inner = enclosing
            if isinstance(child, (ast.If, ast.While)) and _depends(child.test, names):
                inner = enclosing + [child]
            elif isinstance(child, ast.For) and _depends(child.iter, names):
                inner = enclosing + [child]
            found = visit(child, inner)
            if found:
                return found
        return None

    return visit(definition, [])


def _early_return(definition, names):
    """(return statement inside a thread-dependent if, a later barrier), or None."""
    returns = [node for branch in ast.walk(definition) if isinstance(branch, ast.If) and _depends(branch.test, names)
               for node in ast.walk(branch) if isinstance(node, ast.Return)]
    barriers = [node for node in ast.walk(definition) if _is_barrier(node)]
    for returned in sorted(returns, key=lambda node: node.lineno):
        later = [b for b in barriers if b.lineno > returned.lineno]
        if later:
            return returned, min(later, key=lambda node: node.lineno)
    return None


def _accesses(statement, array: str, store: bool):
    return [node for node in ast.walk(statement) if isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name) and node.value.id == array
            and isinstance(node.ctx, ast.Store if store else ast.Load)]


def _unguarded_shared(definition, shared: set):
    """Loops that write and read a shared array without a barrier between the two (either way round).

    Yields (loop, array, a read, a write, "after_read" | "before_read"). Looks at the statements of
    each loop body in order, as a cycle: a barrier must separate the writes from the reads that follow
    them, and the last read from the next pass's first write.
    """
    for loop in ast.walk(definition):
        if not isinstance(loop, (ast.For, ast.While)):
            continue
        body = loop.body
        # A statement counts as a barrier when it holds one anywhere (a barrier under a uniform
        # `if causal:` still separates the passes; a divergent one is reported on its own).
        barriers = [index for index, statement in enumerate(body)
                    if any(_is_barrier(node) for node in ast.walk(statement))]
        for array in sorted(shared):
            writes = [index for index, statement in enumerate(body) if _accesses(statement, array, True)]
            reads = [index for index, statement in enumerate(body) if _accesses(statement, array, False)]
            if not writes or not reads:
                continue
            first_write, last_read = writes[0], reads[-1]
            read_after_write = [index for index in reads if index > first_write]
            if read_after_write and not any(first_write < b < read_after_write[0] for b in barriers):
                yield (loop, array, _accesses(body[read_after_write[0]], array, False)[0],
                       _accesses(body[first_write], array, True)[0], "before_read")
            elif not any(b > last_read or b < first_write for b in barriers):
                yield (loop, array, _accesses(body[last_read], array, False)[0],
                       _accesses(body[first_write], array, True)[0], "after_read")
