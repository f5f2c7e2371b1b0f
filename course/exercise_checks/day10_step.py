"""Day 10, the last exercise: the decode step assembled from the course's operations, checked by what it computes.

The student writes ``decode_step(ops, token, position)``: host Python over the symbolic operations of
``kernels.step_ops`` (embed, rmsnorm, gemv, rope, write_cache, attention, add, swiglu), declared as
``DECODE_STEP`` (a ``course.hostcode.HostExercise``: no given names, the driver ``day10_step_driver.drive``, an
answer of kind "function"). A check runs it (``course.hostcode.run``: in the notebook, or in a process of its own
when graded) over a sequence of a tiny random model of SmolLM2's architecture (``inference.tiny.tiny_model``),
teacher-forced: a prompt, then the tokens the model itself picks greedily, one call per position, the cache
carried from call to call. The record comes back as data, one list of operations per call, and is judged here:

- read back: each call's operations run again on a ``RecordingOps`` of the case's shape (so a record that no
  step could have made is refused);
- replayed in NumPy (``inference.numpy_model``'s rmsnorm, rope and silu; the dequantized weights of
  ``NumpyModel.weight``; a KV cache per layer), float32 as the forward pass: every call's logits must be within
  ``TOLERANCE`` times the logits' scale of ``NumpyModel.forward``'s at that position (float32 sums taken in
  another order differ by 2e-6 of it typically and 2e-5 at most over 420 sequences of the hidden cases; the
  mildest of the classic mistakes by more than 0.5), and
  the greedy next token equal to the model's at every position where the model's two best logits are not
  within ``NEAR_TIE`` of each other.

A failing step is explained from its record: each operation is also a *term*, the tree of what it computes
(a cache entry is the term of what was written at that position; ``add`` is commutative), and the terms of the
step are set against those of the course's step on the same tokens, from the logits down, to the first
operation that differs: a rope, a write or a context off by one, read across all calls to say which
(``position - 1``, 0 at every position), a norm weight of the other sublayer or another layer, a missing
residual add, a missing final norm, a matrix of the wrong kind or layer. A step that raised is reported with
the line of the answer and the message of ``kernels.step_ops``, which names most mistakes where they happen
(a shape, rope on v, swiglu's arguments swapped, attention before write_cache).

``day10_step_kernels.decode_step_on_kernels`` replays a step on the course's kernels instead, launch by launch on
the simulator or a GPU, as ``inference.engine`` runs the model (rmsnorm, Q4_1 and Q8_0 GEMVs, RoPE from a table, the
paged cache write, split-K GQA decode attention, SwiGLU, add), optionally with the student's RMSNorm, RoPE and
SwiGLU kernels in place of the course's.
"""

from __future__ import annotations

import functools

import numpy as np

from course.hostcode import HostExercise, run
from kernels import step_ops
from kernels.decode_step import decode_step as course_decode_step

from .day10_step_driver import SHAPE, drive

# The exercise's answer: a function over kernels.step_ops's operations, run by the driver.
DECODE_STEP = HostExercise(base="kernels.step_ops", names=(), driver="course.exercise_checks.day10_step_driver:drive",
                           answer="function")

__all__ = ["DECODE_STEP", "TOLERANCE", "NEAR_TIE", "TINY", "reference_decode_step", "decode_step_case",
           "decode_step_cases", "step_data", "replay_logits", "decode_step_problems", "check_decode_step",
           "decode_step_first_token", "decode_step_matches_reference", "decode_step_every_group",
           "decode_step_generates_greedy_tokens"]

TOLERANCE = 1e-3        # of the logits' scale (the largest |logit| of the position, at least 1)
NEAR_TIE = 1e-3         # of the same scale: two best logits closer than this are not judged by their argmax
TINY = dict(layers=2, hidden=64, ffn=96, heads=4, kv_heads=2, vocab=80, context=64)


# The course's step (kernels.decode_step), the model the checks compare a student's step with, operation by operation.
reference_decode_step = course_decode_step


# --------------------------------------------------------------------------------------------- cases

@functools.lru_cache(maxsize=32)
def _numpy_model(seed: int, shape: tuple):
    from inference.numpy_model import NumpyModel
    from inference.tiny import tiny_model

    return NumpyModel(tiny_model(seed, **dict(shape)))


def _model_of(case: dict):
    return _numpy_model(case["seed"], tuple((k, case["shape"][k]) for k in SHAPE))


def decode_step_case(seed: int, *, prompt: int = 4, positions: int = 12, title: str | None = None, **shape) -> dict:
    """One sequence on ``tiny_model(seed, **shape)`` (``TINY``'s sizes unless given): ``prompt`` random tokens,
    then the tokens the model picks greedily, ``positions`` in all. ``{"seed", "shape", "tokens", "prompt",
    "title"}``."""
    from inference.numpy_model import Cache

    shape = {**TINY, **shape}
    unknown = set(shape) - set(SHAPE)
    if unknown:
        raise ValueError(f"unknown sizes {sorted(unknown)}; the model's are {', '.join(SHAPE)}")
    if not 1 <= prompt <= positions <= shape["context"]:
        raise ValueError(f"need 1 <= prompt <= positions <= context, got {prompt}, {positions}, {shape['context']}")
    model = _numpy_model(seed, tuple((k, shape[k]) for k in SHAPE))
    rng = np.random.default_rng(seed)
    tokens = [int(t) for t in rng.integers(0, shape["vocab"], prompt)]
    cache = Cache(model.config)
    logits = model.forward(tokens, cache)[-1]
    while len(tokens) < positions:
        tokens.append(int(logits.argmax()))
        logits = model.forward(tokens[-1:], cache)[-1]
    if title is None:
        group = shape["heads"] // shape["kv_heads"]
        title = (f"tiny_model({seed}): {shape['layers']} layer(s), hidden {shape['hidden']}, {shape['heads']} heads "
                 f"over {shape['kv_heads']} KV heads (group {group}), ffn {shape['ffn']}; a prompt of {prompt} "
                 f"tokens, then {positions - prompt} decoded")
    return {"seed": seed, "shape": shape, "tokens": tokens, "prompt": prompt, "title": title}


def decode_step_cases(kind: str, seed: int = 0) -> list[dict]:
    """The cases of one grade cell, drawn from ``seed``:

    - ``"first_token"``: one position (a prompt of one token), on models of 1 to 3 layers and groups 1, 2 and 4:
      everything but positions;
    - ``"sequence"``: 12 positions (a prompt of 4, then 8 decoded) of the default tiny model, and 13 of one layer;
    - ``"groups"``: 12 positions each of group 1 (MHA, one layer), 4 (8 heads over 2, two layers) and 2 (6 heads
      over 3, three layers: an odd number of heads, as SmolLM2's 9 over 3);
    - ``"long"``: 20 and 24 positions (past the engine's cache blocks of 16) of 3 layers.
    """
    draws = np.random.default_rng(seed).integers(0, 2**31, 4)
    s = [int(d) for d in draws]
    if kind == "first_token":
        return [decode_step_case(s[0], prompt=1, positions=1, layers=1, heads=4, kv_heads=4),
                decode_step_case(s[1], prompt=1, positions=1, layers=2),
                decode_step_case(s[2], prompt=1, positions=1, layers=3, heads=4, kv_heads=1)]
    if kind == "sequence":
        return [decode_step_case(s[0], prompt=4, positions=12),
                decode_step_case(s[1], prompt=2, positions=13, layers=1, ffn=64)]
    if kind == "groups":
        return [decode_step_case(s[0], prompt=3, positions=12, layers=1, heads=4, kv_heads=4),
                decode_step_case(s[1], prompt=5, positions=12, layers=2, heads=8, kv_heads=2, ffn=128),
                decode_step_case(s[2], prompt=4, positions=12, layers=3, heads=6, kv_heads=3, hidden=96)]
    if kind == "long":
        return [decode_step_case(s[0], prompt=6, positions=20, layers=3),
                decode_step_case(s[1], prompt=17, positions=24, layers=2, heads=4, kv_heads=1)]
    raise ValueError(f"kind must be 'first_token', 'sequence', 'groups' or 'long', got {kind!r}")


def step_data(cases: list[dict]) -> dict:
    """What the driver is given for ``cases``: each one's shape and tokens."""
    return {"cases": [{"shape": dict(case["shape"]), "tokens": list(case["tokens"])} for case in cases]}


# --------------------------------------------------------------------------------------------- reading a record

class _BadRecord(Exception):
    """A record that no decode step could have made (the operations do not replay)."""


class _Terms:
    """What each operation computes, as a tree: one id per distinct term (shared parts shared), with the words and
    what made it first (its call's position, its handle's role and layer)."""

    def __init__(self):
        self.ids: dict[tuple, int] = {}
        self.keys: list[tuple] = []
        self.words: list[str] = []
        self.meta: list[dict] = []

    def intern(self, key: tuple, words: str, meta: dict) -> int:
        if key not in self.ids:
            self.ids[key] = len(self.keys)
            self.keys.append(key)
            self.words.append(words)
            self.meta.append(meta)
        return self.ids[key]


class _Call:
    def __init__(self, position: int, token: int):
        self.position, self.token = position, token
        self.logits = None          # the term of the returned logits
        self.values = None          # NumPy logits
        self.error = self.line = None
        self.nodes: list[tuple[dict, object]] = []       # (operation, the handle it returned or None)


def _read(case: dict, record, terms: _Terms, *, numeric: bool, lines: dict | None = None) -> list[_Call]:
    """The calls of one case's record, replayed on a RecordingOps (which checks every operation), with their terms
    and, if ``numeric``, their logits computed in NumPy; ``lines`` receives the answer's line of each term."""
    if not isinstance(record, dict) or not isinstance(record.get("calls"), list):
        raise _BadRecord("a case's record is not {'calls': [...]}")
    ops = step_ops.RecordingOps(**{k: case["shape"][k] for k in SHAPE})
    model = _model_of(case) if numeric else None
    term_of: dict[int, int] = {}
    cache: list[dict] = [dict() for _ in range(ops.layers)]          # layer -> {position: write term}
    values: dict[int, np.ndarray] = {}
    kv: list[dict] = [dict() for _ in range(ops.layers)]             # layer -> {position: (k, v) arrays}
    calls = []
    tokens = case["tokens"]
    if len(record["calls"]) > len(tokens):
        raise _BadRecord(f"{len(record['calls'])} calls for {len(tokens)} tokens")
    for position, raw in enumerate(record["calls"]):
        if not isinstance(raw, dict) or not isinstance(raw.get("operations"), list):
            raise _BadRecord("a call's record has no list of operations")
        call = _Call(position, tokens[position])
        for node in raw["operations"]:
            try:
                handle = ops.replay(node)
            except Exception as exc:  # noqa: BLE001 - whatever the data says, it is not a record
                raise _BadRecord(f"operation {node!r:.120} does not replay: {exc}") from None
            call.nodes.append((node, handle))
            term_of[node["id"]] = _term(node, handle, term_of, cache, terms, position)
            if lines is not None and isinstance(node.get("line"), int):
                lines.setdefault(term_of[node["id"]], node["line"])
            if model is not None:
                value = _value(node, handle, values, kv, model)
                if value is not None:
                    values[node["id"]] = value
        if "error" in raw:
            call.error, call.line = str(raw["error"]), raw.get("line")
            if not (call.line is None or (isinstance(call.line, int) and not isinstance(call.line, bool))):
                raise _BadRecord("a line that is not a number")
            calls.append(call)
            if position + 1 != len(record["calls"]):
                raise _BadRecord("calls after an error")
            return calls
        logits = raw.get("logits")
        try:
            handle = ops.vector(logits)
        except (KeyError, TypeError):
            raise _BadRecord(f"the logits {logits!r:.40} are no vector of the record") from None
        if handle.space != "vocab":
            raise _BadRecord("the logits are not a vector of vocab")
        call.logits = term_of[logits]
        call.values = values.get(logits)
        calls.append(call)
    if len(calls) != len(tokens):
        raise _BadRecord(f"{len(calls)} calls for {len(tokens)} tokens, and no error")
    return calls


def _term(node: dict, handle, term_of: dict, cache: list, terms: _Terms, position: int) -> int:
    op = node["op"]
    meta = {"position": position, "role": getattr(handle, "role", "write"),
            "layer": getattr(handle, "layer", node.get("layer"))}
    words = getattr(handle, "words", None)
    if op == "embed":
        key = ("embed", node["token"])
    elif op == "rmsnorm":
        key = ("rmsnorm", term_of[node["x"]], node["weight"])
    elif op == "gemv":
        key = ("gemv", node["matrix"], term_of[node["x"]])
    elif op == "rope":
        key = ("rope", term_of[node["x"]], node["position"])
    elif op == "write_cache":
        key = ("write", node["layer"], node["position"], term_of[node["k"]], term_of[node["v"]])
        words = f"layer {node['layer']}'s cache entry at position {node['position']}"
        term = terms.intern(key, words, meta)
        cache[node["layer"]][node["position"]] = term
        return term
    elif op == "attention":
        entries = tuple(cache[node["layer"]][p] for p in range(node["context"]))
        key = ("attention", node["layer"], term_of[node["q"]], entries)
    elif op == "add":
        key = ("add", *sorted((term_of[node["x"]], term_of[node["y"]])))
    else:
        key = ("swiglu", term_of[node["gate"]], term_of[node["up"]])
    return terms.intern(key, words, meta)


def _value(node: dict, handle, values: dict, kv: list, model) -> np.ndarray | None:
    """What the operation computes in NumPy, float32, as ``inference.numpy_model`` does."""
    from inference.numpy_model import rmsnorm, rope, silu

    c = model.config
    op = node["op"]
    if op == "embed":
        return model.embed([node["token"]])[0]
    if op == "rmsnorm":
        return rmsnorm(values[node["x"]], model.weight(node["weight"]), c.eps)
    if op == "gemv":
        return (model.weight(node["matrix"]) @ values[node["x"]].reshape(-1)).reshape(handle.shape)
    if op == "rope":
        return rope(values[node["x"]][None], np.array([node["position"]]), c.rope_base)[0]
    if op == "write_cache":
        kv[node["layer"]][node["position"]] = (values[node["k"]], values[node["v"]])
        return None
    if op == "attention":
        entries = [kv[node["layer"]][p] for p in range(node["context"])]
        keys = np.repeat(np.stack([k for k, _ in entries]), c.group, axis=1)       # (context, heads, d)
        vals = np.repeat(np.stack([v for _, v in entries]), c.group, axis=1)
        scores = np.einsum("hd,phd->hp", values[node["q"]], keys) / np.float32(np.sqrt(c.head_dim))
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p = scores / scores.sum(axis=-1, keepdims=True)
        return np.einsum("hp,phd->hd", p, vals).astype(np.float32)
    if op == "add":
        return values[node["x"]] + values[node["y"]]
    return silu(values[node["gate"]]) * values[node["up"]]


# --------------------------------------------------------------------------------------------- explaining

def _weight(name: str) -> tuple:
    """(layer or None, short name) of a GGUF weight name."""
    if name == "token_embd.weight":
        return None, "embedding"
    if name == "output_norm.weight":
        return None, "output_norm"
    _, layer, short, _ = name.split(".")
    return int(layer), short


def _weight_words(name: str) -> str:
    layer, short = _weight(name)
    return f"ops.{short}" if layer is None else f"layer {layer}'s {short}"


def _offsets(pairs: list[tuple[int, int]], where: str) -> str:
    """What a step passes, read across its calls: ``pairs`` of (the token's position, what it passed)."""
    if len(pairs) < 2:
        return ""
    used = {u for _, u in pairs}
    offsets = {u - p for p, u in pairs}
    if len(used) == 1:
        expression = str(used.pop())
    elif len(offsets) == 1:
        o = offsets.pop()
        expression = "position" if o == 0 else f"position {'+' if o > 0 else '-'} {abs(o)}"
    else:
        return ""
    return f" (your step passes {expression} {where}, in every call)"


class _Explain:
    """The first difference between the terms of a student's call and the course's, in words."""

    def __init__(self, terms: _Terms, student: list[_Call], lines: dict):
        self.terms, self.student, self.lines = terms, student, lines

    def key(self, term: int) -> tuple:
        return self.terms.keys[term]

    def words(self, term: int) -> str:
        return self.terms.words[term]

    def line(self, term: int) -> str:
        line = self.lines.get(term)
        return f" (line {line} of your cell)" if line is not None else ""

    def children(self, term: int) -> list[int]:
        key = self.key(term)
        return [c for c, kind in zip(key[1:], _KINDS[key[0]]) if kind == "term"] + (
            list(key[3]) if key[0] == "attention" else [])

    def cause(self, s: int, e: int) -> str | None:
        for _ in range(10_000):
            if s == e:
                return None
            ks, ke = self.key(s), self.key(e)
            if ks[0] != ke[0] or s in self.children(e) or e in self.children(s):
                return self.different(s, e)
            op = ks[0]
            if op == "attention" and len(ks[3]) != len(ke[3]):
                return self.context(s, e)
            if op == "add" and None not in (self.sum_of(s), self.sum_of(e)) and self.sum_of(s)[0] != self.sum_of(e)[0]:
                return self.sums(s, e)
            kinds = _KINDS[op]
            scalars = [i for i, kind in enumerate(kinds) if kind in ("int", "name") and ks[1 + i] != ke[1 + i]]
            if op == "add":
                pairs = self.add_pairs(ks[1:], ke[1:])
            else:
                pairs = [(ks[1 + i], ke[1 + i]) for i, kind in enumerate(kinds)
                         if kind == "term" and ks[1 + i] != ke[1 + i]]
                if op == "attention" and not scalars:           # another layer's cache differs because of the layer
                    pairs += [(a, b) for a, b in zip(ks[3], ke[3]) if a != b]
            if not pairs:                                       # the inputs are the model's: this operation differs
                return self.scalar(op, _FIELDS[op][scalars[0]], s, e) if scalars else None
            s, e = min(pairs, key=lambda pair: pair[1])         # the earliest input of the course's step that differs
        return None

    def add_pairs(self, mine: tuple, theirs: tuple) -> list[tuple[int, int]]:
        a, b = mine
        c, d = theirs
        for x, y, same_x, same_y in ((a, b, c, d), (b, a, c, d), (a, b, d, c), (b, a, d, c)):
            if x == same_x:
                return [(y, same_y)]
        ops = lambda t: self.key(t)[0]                          # noqa: E731
        if (ops(a) == ops(c)) + (ops(b) == ops(d)) >= (ops(a) == ops(d)) + (ops(b) == ops(c)):
            return [(a, c), (b, d)]
        return [(a, d), (b, c)]

    def sum_of(self, term: int):
        """(role, layer) of the sublayer output that a sum adds to the residual stream (its other input a sum or
        the embedding), or None."""
        meta = [self.terms.meta[child] for child in self.key(term)[1:]]
        roles = sorted((m["role"], m["layer"]) for m in meta)
        outputs = [r for r in roles if r[0] in ("attn_out", "mlp_out")]
        stream = [r for r in roles if r[0] in ("sum", "embedding")]
        return outputs[0] if len(outputs) == 1 and len(stream) == 1 else None

    def sums(self, s: int, e: int) -> str:
        (mine, mine_layer), (theirs, layer) = self.sum_of(s), self.sum_of(e)
        sublayer = {"attn_out": "attention", "mlp_out": "MLP"}
        lost = f"layer {layer}'s {sublayer[theirs]}"
        return (f"{self.where(e)}: where the model has {self.words(e)}, your step has {self.words(s)}{self.line(s)}: "
                f"the output of {lost} is never added to the residual stream. ops.add returns the sum and changes "
                "nothing in place: x = ops.add(x, ...)")

    def where(self, e: int) -> str:
        meta = self.terms.meta[e]
        return f"at position {meta['position']}"

    def different(self, s: int, e: int) -> str:
        ks, ke = self.key(s), self.key(e)
        theirs = self.children(e)
        mine = self.children(s)
        if ke[0] == "add" and (s in theirs or ks[0] in [self.key(c)[0] for c in theirs]):
            return (f"a residual add is missing {self.where(e)}: the model has {self.words(e)}, the sum of "
                    f"{self.words(theirs[0])} and {self.words(theirs[1])}; your step has {self.words(s)} alone"
                    f"{self.line(s)}. Each sublayer's output is added to the residual stream, and ops.add returns the "
                    "sum: x = ops.add(x, ...)")
        if ke[0] == "rmsnorm" and (s in theirs or ks[0] == self.key(theirs[0])[0]):
            layer, short = _weight(ke[2])
            if layer is None:
                return (f"the final norm is missing: the head multiplies rmsnorm(x, ops.output_norm), your step "
                        f"multiplies x itself{self.line(s)}: ops.gemv(ops.embedding, ops.rmsnorm(x, ops.output_norm))")
            return (f"a norm is missing {self.where(e)}, layer {layer}: the model normalizes x with {short} before the "
                    f"{'attention' if short == 'attn_norm' else 'MLP'}, your step passes {self.words(s)}{self.line(s)}")
        if ke[0] == "attention" and s in theirs:
            return (f"attention is missing {self.where(e)}, layer {ke[1]}: the model passes attention's output to "
                    f"attn_output, your step passes {self.words(s)}{self.line(s)}")
        if e in mine:
            return (f"{self.where(e)}: your step applies {ks[0]} once more, to {self.words(e)}, where the model has "
                    f"{self.words(e)} itself{self.line(s)}")
        return (f"{self.where(e)}: where the model has {self.words(e)}, your step has {self.words(s)}{self.line(s)}")

    def pairs(self, op: str, role: str, layer, field: str) -> list[tuple[int, int]]:
        """(the call's position, what the student's step passed as ``field``) of the first ``op`` on a vector of
        ``role`` and ``layer`` in each call."""
        found = []
        for call in self.student:
            for node, handle in call.nodes:
                if node["op"] != op:
                    continue
                if op == "write_cache" and node["layer"] != layer:
                    continue
                if op == "rope" and (handle.role != role + "_rope" or handle.layer != layer):
                    continue
                if op == "attention" and node["layer"] != layer:
                    continue
                found.append((call.position, node[field]))
                break
        return found

    def context(self, s: int, e: int) -> str:
        ks, ke = self.key(s), self.key(e)
        layer, got, want = ke[1], len(ks[3]), len(ke[3])
        pattern = _offsets(self.pairs("attention", "", layer, "context"), "to attention as its context")
        return (f"{self.where(e)}, layer {layer}: attention reads {got} position(s) of the cache, but the token at "
                f"position {want - 1} attends to positions 0 ... {want - 1}: context = position + 1 = {want}"
                f"{pattern}{self.line(s)}")

    def scalar(self, op: str, field: str, s: int, e: int) -> str:
        ks, ke = self.key(s), self.key(e)
        meta = self.terms.meta[e]
        if op == "rope":
            role = self.terms.meta[ke[1]]["role"]
            layer = self.terms.meta[ke[1]]["layer"]
            pattern = _offsets(self.pairs("rope", role, layer, "position"), f"to rope for {role}")
            return (f"{role} of layer {layer} is turned by rope to position {ks[2]}, but the token sits at position "
                    f"{ke[2]}{pattern}{self.line(s)}: rope(x, position) turns q and k by the token's own position, "
                    "`position` (in every call and every layer)")
        if op == "write" and field == "position":
            pattern = _offsets(self.pairs("write_cache", "", ke[1], "position"), "to write_cache")
            return (f"layer {ke[1]}: the key and value of the token at position {ke[2]} are written at position "
                    f"{ks[2]}{pattern}{self.line(s)}: write_cache(layer, k, v, position) stores them at the token's "
                    "own position, where attention reads them in this call and every later one")
        if op == "write":
            return (f"{self.where(e)}: the key and value of layer {ke[1]} go into layer {ks[1]}'s cache{self.line(s)}: "
                    "write_cache(i, k, v, position) takes the index of the layer being computed")
        if op == "attention":
            return (f"{self.where(e)}: attention in layer {ke[1]} reads layer {ks[1]}'s cache{self.line(s)}: "
                    "attention(i, q, context) takes the index of the layer being computed")
        if op == "embed":
            hint = " (that is the position: embed takes the token)" if ks[1] == meta["position"] else ""
            return f"{self.where(e)}: embed got {ks[1]}, but the token is {ke[1]}{hint}{self.line(s)}"
        if op == "rmsnorm":
            return self.norm(ks[2], ke[2], e, s)
        if op == "gemv":
            (mine_layer, mine), (layer, theirs) = _weight(ks[1]), _weight(ke[1])
            if mine == theirs:
                return (f"{self.where(e)}, layer {layer}: your step multiplies by layer {mine_layer}'s {mine}"
                        f"{self.line(s)}: take the weights of the layer being computed, w = ops.layer(i) inside "
                        "the loop over layers")
            return (f"{self.where(e)}: the model multiplies {self.words(ke[2])} by {_weight_words(ke[1])} (which gives "
                    f"{self.words(e)}), your step by {_weight_words(ks[1])}{self.line(s)}")
        return f"{self.where(e)}: your step's {op} differs from the model's in its {field}{self.line(s)}"

    def norm(self, mine: str, theirs: str, e: int, s: int) -> str:
        (mine_layer, mine_short), (layer, short) = _weight(mine), _weight(theirs)
        where = self.line(s)
        if layer is None:
            return (f"the final norm uses {_weight_words(mine)}{where}: the logits are "
                    "ops.gemv(ops.embedding, ops.rmsnorm(x, ops.output_norm))")
        before = "attention" if short == "attn_norm" else "MLP"
        if mine_short == short:
            return (f"{self.where(e)}, layer {layer}: the norm before the {before} uses layer {mine_layer}'s {short}"
                    f"{where}: take the weights of the layer being computed, w = ops.layer(i) inside the loop over "
                    "layers")
        if mine_layer is None:
            return (f"layer {layer}: the norm before the {before} uses ops.output_norm{where}; it takes the layer's "
                    f"{short}, w.{short} (ops.output_norm is the final norm's, before the head)")
        return (f"layer {layer}: the norm before the {before} uses {mine_short}{where}; the attention's input is "
                "normalized with w.attn_norm and the MLP's with w.ffn_norm")


# Each term's fields after its operation's name: their names and kinds.
_FIELDS = {"embed": ("token",), "rmsnorm": ("x", "weight"), "gemv": ("matrix", "x"), "rope": ("x", "position"),
           "write": ("layer", "position", "k", "v"), "attention": ("layer", "q", "cache"), "add": ("x", "y"),
           "swiglu": ("gate", "up")}
_KINDS = {"embed": ("int",), "rmsnorm": ("term", "name"), "gemv": ("name", "term"), "rope": ("term", "int"),
          "write": ("int", "int", "term", "term"), "attention": ("int", "term", "entries"), "add": ("term", "term"),
          "swiglu": ("term", "term")}


# --------------------------------------------------------------------------------------------- judging

def _where(call: _Call) -> str:
    return f"decode_step(ops, token={call.token}, position={call.position})"


def _case_problem(case: dict, record) -> str | None:
    """What is wrong with one case's record, in words, or None."""
    terms = _Terms()
    course = _read(case, drive(reference_decode_step, step_data([case]), step_ops)[0], terms, numeric=False)
    lines: dict[int, int] = {}
    try:
        mine = _read(case, record, terms, numeric=True, lines=lines)
    except _BadRecord as exc:
        return f"the record your step sent back is not one the operations make ({exc})"
    model = _model_of(case)
    want = model.forward(case["tokens"])
    for call in mine:
        if call.error is not None:
            line = f" at line {call.line} of your cell" if call.line is not None else ""
            ran = ("" if not call.position else " (the call for position 0 ran)" if call.position == 1 else
                   f" (the calls for positions 0 ... {call.position - 1} ran)")
            return f"{_where(call)} raised{line}{ran}:\n  {call.error}"
        got, ref = call.values, want[call.position]
        scale = max(1.0, float(np.abs(ref).max()))
        err = float(np.abs(got - ref).max()) if np.isfinite(got).all() else float("inf")
        if err > TOLERANCE * scale:
            before = "position 0" if call.position == 1 else f"positions 0 ... {call.position - 1}"
            right = (f"right at {before} and wrong from position {call.position} (token {call.token}) on"
                     if call.position else f"wrong at the first position (token {call.token}, position 0)")
            why = _Explain(terms, mine, lines).cause(call.logits, course[call.position].logits)
            likely = (f"\n  likely: {why}" if why else
                      "\n  the record shows no operation that differs from the course's step: the numbers do")
            return (f"the logits are {right}: they differ from the model's by up to {err:.3g} (the model's logits "
                    f"reach {scale:.3g}; allowed {TOLERANCE * scale:.2g}){likely}")
        top = np.sort(ref)[-2:]
        if top[1] - top[0] > NEAR_TIE * scale and int(got.argmax()) != int(ref.argmax()):
            return (f"at position {call.position} your step's greedy next token is {int(got.argmax())}, the model's "
                    f"{int(ref.argmax())}")
    return None


def replay_logits(case: dict, record) -> np.ndarray:
    """The logits (calls, vocab) float32 of one case's record (the driver's, for a step that raised nowhere),
    replayed in NumPy."""
    try:
        calls = _read(case, record, _Terms(), numeric=True)
    except _BadRecord as exc:
        raise ValueError(f"the record is not one the operations make ({exc})") from None
    if any(call.error is not None for call in calls):
        raise ValueError(f"the step raised at position {calls[-1].position}: {calls[-1].error}")
    return np.stack([call.values for call in calls])


def decode_step_problems(cases: list[dict], records) -> list[str]:
    """What the records show wrong, one line of each failing case's title and its first problem."""
    if not isinstance(records, list) or len(records) != len(cases):
        return [f"the step's record holds {len(records) if isinstance(records, list) else 'no list of'} cases for "
                f"{len(cases)}"]
    found = []
    for case, record in zip(cases, records):
        problem = _case_problem(case, record)
        if problem is not None:
            found.append(f"{case['title']}:\n  {problem}")
    return found


def check_decode_step(answer, cases: list[dict]) -> None:
    """Run ``answer`` (the function, or its ``HostCode`` when graded) on the cases; raise on the first problems."""
    found = decode_step_problems(cases, run(DECODE_STEP, answer, step_data(cases)))
    if found:
        raise AssertionError("your decode_step:\n" + "\n".join(found[:2]))


def decode_step_first_token(answer) -> None:
    """Visible: the first position of a sequence on the default tiny model (2 layers, 4 heads over 2 KV heads)."""
    check_decode_step(answer, [decode_step_case(0, prompt=1, positions=1)])
    print("visible check passed: the logits of a first token (2 layers, GQA group 2) equal the model's")


def decode_step_matches_reference(answer) -> None:
    """Visible: 8 positions of the default tiny model, a prompt of 3 tokens then 5 decoded."""
    check_decode_step(answer, [decode_step_case(1, prompt=3, positions=8)])
    print("visible check passed: 8 positions (a prompt of 3, then 5 greedy tokens) equal the model's logits")


def decode_step_every_group(answer) -> None:
    """Visible: 6 positions each of MHA (group 1, one layer) and MQA (4 heads over 1 KV head)."""
    check_decode_step(answer, [decode_step_case(2, prompt=2, positions=6, layers=1, heads=4, kv_heads=4),
                               decode_step_case(3, prompt=2, positions=6, heads=4, kv_heads=1)])
    print("visible check passed: groups 1 and 4 give the model's logits")


def decode_step_generates_greedy_tokens(answer) -> None:
    """Visible: 18 positions of 3 layers (a prompt of 4, 14 decoded): the logits and the greedy tokens."""
    check_decode_step(answer, [decode_step_case(4, prompt=4, positions=18, layers=3)])
    print("visible check passed: 18 positions of 3 layers: every greedy next token is the model's")
