"""The operations of a llama decode step as symbols (day 10): what a step does, recorded, with no numbers.

Day 10's last exercise is the decode step itself, written once over operations, ``decode_step(ops, token,
position)``, and run on three machines: here, where ``ops`` is a ``RecordingOps`` that records each operation
and checks its arguments; in NumPy, which replays the record against the model's forward pass; and on the course's
kernels, which replay it launch by launch (``course.exercise_checks.day10_step``). Nothing here computes a number:
a *handle* stands for a vector, and knows its shape and what made it.

The model: ``ops.layers`` blocks over vectors of ``ops.hidden``; ``ops.heads`` query heads over ``ops.kv_heads``
KV heads of ``ops.head_dim`` (grouped-query attention, day 7); a SwiGLU MLP of width ``ops.ffn``; ``ops.vocab``
tokens; positions 0 ... ``ops.context`` - 1.

Weights (handles too):

- ``ops.embedding``: the token embedding (vocab × hidden). The output head is tied to it: there is no separate
  output matrix, the logits are ``ops.gemv(ops.embedding, h)``;
- ``ops.output_norm``: the weight of the final RMSNorm;
- ``ops.layer(i)``, i in 0 ... layers - 1: the weights of block i, as attributes: ``attn_norm``, ``attn_q``,
  ``attn_k``, ``attn_v``, ``attn_output``, ``ffn_norm``, ``ffn_gate``, ``ffn_up``, ``ffn_down``.

Operations (each returns a new handle; none changes the handles it is given):

- ``embed(token)``: the token's row of the embedding, a vector of hidden;
- ``rmsnorm(x, weight)``: x / sqrt(mean(x^2) + eps) * weight; x of hidden, weight a norm (attn_norm, ffn_norm,
  output_norm);
- ``gemv(matrix, x)``: the matrix times x (the matrix first). attn_q gives q (heads × head_dim), attn_k and attn_v
  give k and v (kv_heads × head_dim), attn_output takes attention's output (heads × head_dim) and gives hidden,
  ffn_gate and ffn_up give ffn, ffn_down takes ffn and gives hidden, the embedding gives the logits (vocab);
- ``rope(x, position)``: q or k with every pair of every head turned by the angle of ``position``;
- ``write_cache(layer, k, v, position)``: stores k (turned by rope) and v at ``position`` of the layer's KV cache;
  returns None;
- ``attention(layer, q, context)``: q (turned by rope) attends to positions 0 ... context - 1 of the layer's cache
  (query head h reads KV head h // (heads / kv_heads)); heads × head_dim;
- ``add(x, y)``: x + y, of one shape (the residual stream);
- ``swiglu(gate, up)``: silu(gate) * up, gate the output of ffn_gate, up that of ffn_up.

The cache keeps what earlier calls wrote: when the step for the token at ``position`` starts, every layer's cache
holds positions 0 ... position - 1. Reading a position no call has written is an error, as are a handle of the
wrong shape, an argument in the wrong place, a position outside the context, rope on anything but q and k (once),
and a key not turned by rope going into the cache; each message names the argument, what was expected and what
was received. ``ops.trace`` is the record: one dict per operation, its handles by number and its weights by their
GGUF names (``blk.0.attn_q.weight``), the line of the caller when ``source_file`` names its file.

This module imports nothing but the standard library: when the exercise is graded, it is all there is of the
course in the process that runs the answer (``grader/host_answers.py``).
"""

from __future__ import annotations

import difflib
import sys

__all__ = ["RecordingOps", "Vector", "Weight", "LayerWeights", "MATRICES", "NORMS", "OPERATIONS"]

MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
NORMS = ("attn_norm", "ffn_norm")
OPERATIONS = ("embed", "rmsnorm", "gemv", "rope", "write_cache", "attention", "add", "swiglu")
LAYER_WEIGHTS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                 "ffn_down")

# What a gemv's output is, by its matrix: (role, words with the layer's index to fill in).
_PRODUCTS = {"attn_q": ("q", "q of layer {} (attn_q's output)"), "attn_k": ("k", "k of layer {} (attn_k's output)"),
             "attn_v": ("v", "v of layer {} (attn_v's output)"),
             "attn_output": ("attn_out", "the attention sublayer's output of layer {} (gemv with attn_output)"),
             "ffn_gate": ("gate", "gate of layer {} (ffn_gate's output)"),
             "ffn_up": ("up", "up of layer {} (ffn_up's output)"),
             "ffn_down": ("mlp_out", "the MLP's output of layer {} (gemv with ffn_down)")}

# Names other code bases give the weights, and the name they have here.
_ALIASES = {
    "q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output", "wq": "attn_q",
    "wk": "attn_k", "wv": "attn_v", "wo": "attn_output", "attn_o": "attn_output", "gate_proj": "ffn_gate",
    "up_proj": "ffn_up", "down_proj": "ffn_down", "w1": "ffn_gate", "w3": "ffn_up", "w2": "ffn_down",
    "input_layernorm": "attn_norm", "attention_norm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "mlp_norm": "ffn_norm",
}
_HEADS = ("output", "lm_head", "head", "output_weight", "unembedding", "unembed", "output_head", "wout")
_EMBEDDINGS = ("token_embd", "tok_embeddings", "embed_tokens", "wte", "embeddings", "token_embedding")


def _close(name: str, names) -> str:
    near = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean {near[0]}?)" if near else ""


class Weight:
    """A weight of the model: a matrix (``rows`` × ``cols``) or a norm (``cols`` values). ``name`` is its GGUF
    name, ``short`` its name in ``ops.layer(i)`` (or ``embedding``, ``output_norm``), ``layer`` its block or
    None."""

    __slots__ = ("name", "short", "layer", "kind", "rows", "cols")

    def __init__(self, name: str, short: str, layer, kind: str, rows, cols: int):
        self.name, self.short, self.layer, self.kind, self.rows, self.cols = name, short, layer, kind, rows, cols

    @property
    def words(self) -> str:
        if self.layer is None:
            return "ops.embedding" if self.short == "embedding" else "ops.output_norm"
        return f"{self.short} of layer {self.layer}"

    def __repr__(self) -> str:
        size = f"{self.rows} × {self.cols}" if self.kind == "matrix" else f"{self.cols} values"
        return f"<weight {self.words}: {self.kind}, {size}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, Weight) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


class LayerWeights:
    """The weights of block ``index``: attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
    ffn_down."""

    def __init__(self, index: int, weights: dict):
        object.__setattr__(self, "index", index)
        for name, weight in weights.items():
            object.__setattr__(self, name, weight)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _ALIASES:
            raise AttributeError(f"layer {self.index} has no {name}: here it is called {_ALIASES[name]} "
                                 f"(ops.layer({self.index}).{_ALIASES[name]})")
        if name in _HEADS:
            raise AttributeError(f"a layer has no {name}: the output head belongs to no layer, and it is tied to "
                                 "the embedding: the logits are ops.gemv(ops.embedding, h)")
        raise AttributeError(f"layer {self.index} has no weight {name!r}{_close(name, LAYER_WEIGHTS)}; its weights "
                             f"are {', '.join(LAYER_WEIGHTS)}")

    def __setattr__(self, name, value):
        raise AttributeError("the weights of a layer are given: they cannot be set")

    def __repr__(self) -> str:
        return f"<the weights of layer {self.index}: {', '.join(LAYER_WEIGHTS)}>"


class Vector:
    """A handle: the vector an operation returned, ``trace[id]``. ``shape`` is ``(n,)`` or ``(heads, head_dim)``,
    ``space`` what its numbers are (hidden, ffn, vocab, heads), ``role`` what made it (embedding, norm, q, k, v,
    q_rope, k_rope, attention, attn_out, gate, up, swiglu, mlp_out, sum, logits), ``layer`` the block whose
    weights made it (or None), ``words`` the same in words."""

    __slots__ = ("ops", "id", "shape", "space", "role", "layer", "words")

    def __init__(self, ops, id: int, shape: tuple, space: str, role: str, layer, words: str):
        self.ops, self.id, self.shape, self.space = ops, id, shape, space
        self.role, self.layer, self.words = role, layer, words

    @property
    def shape_words(self) -> str:
        return self.ops.shape_words(self.shape, self.space)

    def __repr__(self) -> str:
        return f"<vector {self.id}: {self.words}, {self.shape_words}>"

    def _no_numbers(self, *_):
        raise TypeError("a handle stands for a vector of the step; it holds no numbers: compute with the operations "
                        "of ops (ops.add(x, y) adds two vectors)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _no_numbers
    __matmul__ = __rmatmul__ = __neg__ = __pow__ = __float__ = __int__ = __index__ = _no_numbers
    __getitem__ = __iter__ = __len__ = _no_numbers


def _position_hint(value) -> str:
    return " (position - 1 at the first token?)" if value == -1 else ""


class RecordingOps:
    """The operations of a decode step over a model of the given shape, recorded in ``trace``, checked, never
    computed (the module docstring lists them). ``source_file``: the file of the answer, whose lines the record
    notes; ``max_operations``: how many operations all calls together may make."""

    def __init__(self, *, layers: int, hidden: int, ffn: int, heads: int, kv_heads: int, vocab: int, context: int,
                 source_file: str | None = None, max_operations: int | None = None):
        sizes = dict(layers=layers, hidden=hidden, ffn=ffn, heads=heads, kv_heads=kv_heads, vocab=vocab,
                     context=context)
        for name, value in sizes.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if heads % kv_heads or hidden % heads or (hidden // heads) % 2:
            raise ValueError(f"heads must be a multiple of kv_heads and hidden / heads an even int; got "
                             f"hidden={hidden}, heads={heads}, kv_heads={kv_heads}")
        self._sizes = dict(sizes, head_dim=hidden // heads)
        self._source_file = source_file
        self._max_operations = max_operations
        self._trace: list[dict] = []
        self._handles: dict[int, Vector] = {}
        self._written = [dict() for _ in range(layers)]        # layer -> {position: operation id}
        d = hidden // heads
        self._embedding = Weight("token_embd.weight", "embedding", None, "matrix", vocab, hidden)
        self._output_norm = Weight("output_norm.weight", "output_norm", None, "norm", None, hidden)
        rows = {"attn_q": heads * d, "attn_k": kv_heads * d, "attn_v": kv_heads * d, "attn_output": hidden,
                "ffn_gate": ffn, "ffn_up": ffn, "ffn_down": hidden}
        cols = {"attn_q": hidden, "attn_k": hidden, "attn_v": hidden, "attn_output": heads * d, "ffn_gate": hidden,
                "ffn_up": hidden, "ffn_down": ffn}
        self._layers = []
        self._weights = {w.name: w for w in (self._embedding, self._output_norm)}
        for i in range(layers):
            weights = {}
            for name in LAYER_WEIGHTS:
                if name in NORMS:
                    weight = Weight(f"blk.{i}.{name}.weight", name, i, "norm", None, hidden)
                else:
                    weight = Weight(f"blk.{i}.{name}.weight", name, i, "matrix", rows[name], cols[name])
                weights[name] = weight
                self._weights[weight.name] = weight
            self._layers.append(LayerWeights(i, weights))

    # ------------------------------------------------------------------ the model's shape and weights

    layers = property(lambda self: self._sizes["layers"], doc="blocks of the model")
    hidden = property(lambda self: self._sizes["hidden"], doc="the width of the residual stream")
    ffn = property(lambda self: self._sizes["ffn"], doc="the width of the MLP")
    heads = property(lambda self: self._sizes["heads"], doc="query heads")
    kv_heads = property(lambda self: self._sizes["kv_heads"], doc="key and value heads")
    head_dim = property(lambda self: self._sizes["head_dim"], doc="numbers per head")
    vocab = property(lambda self: self._sizes["vocab"], doc="tokens of the vocabulary")
    context = property(lambda self: self._sizes["context"], doc="positions 0 ... context - 1")
    embedding = property(lambda self: self._embedding, doc="the token embedding, also the output head")
    output_norm = property(lambda self: self._output_norm, doc="the weight of the final RMSNorm")

    @property
    def trace(self) -> list[dict]:
        """The operations so far, in order: ``{"id", "op", its arguments, "line"?}``."""
        return self._trace

    def layer(self, i) -> LayerWeights:
        """The weights of block i (attn_norm ... ffn_down)."""
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"layer(i) takes the block's index, an int in 0 ... {self.layers - 1}; got "
                            f"{self._what(i)}")
        if not 0 <= i < self.layers:
            raise IndexError(f"layer({i}): the model has {self.layers} layer(s), 0 ... {self.layers - 1}")
        return self._layers[i]

    def weight_named(self, name: str) -> Weight:
        """The weight of GGUF name ``name`` (``blk.0.attn_q.weight``, ``token_embd.weight``)."""
        if name not in self._weights:
            raise KeyError(f"the model has no weight {name!r}")
        return self._weights[name]

    def vector(self, id) -> Vector:
        """The handle that operation ``id`` returned."""
        if id not in self._handles:
            raise KeyError(f"no operation {id!r} returned a vector")
        return self._handles[id]

    def written(self, layer: int) -> list[int]:
        """The positions of layer ``layer``'s cache that some call has written, in order."""
        return sorted(self._written[layer])

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in _HEADS:
            raise AttributeError(f"ops has no {name}: there is no output matrix, the head is tied to the embedding: "
                                 "the logits are ops.gemv(ops.embedding, h), h the final norm's output")
        if name in _EMBEDDINGS:
            raise AttributeError(f"ops has no {name}: the embedding is ops.embedding, and ops.embed(token) reads the "
                                 "token's row")
        if name in ("norm", "final_norm", "ln_f", "output_layernorm"):
            raise AttributeError(f"ops has no {name}: the final norm's weight is ops.output_norm")
        if name in LAYER_WEIGHTS or name in _ALIASES:
            raise AttributeError(f"ops has no {name}: the weights of block i are "
                                 f"ops.layer(i).{_ALIASES.get(name, name)}")
        known = ("layers", "hidden", "ffn", "heads", "kv_heads", "head_dim", "vocab", "context", "embedding",
                 "output_norm", "layer", *OPERATIONS)
        raise AttributeError(f"ops has no {name!r}{_close(name, known)}; it has {', '.join(known)}")

    # ------------------------------------------------------------------ shapes and words

    def shape_words(self, shape: tuple, space: str) -> str:
        if space == "heads":
            heads = "KV heads" if shape[0] == self.kv_heads != self.heads else "heads"
            return f"{shape[0]} {heads} × {shape[1]}"
        return f"a vector of {shape[0]} ({space})"

    def _what(self, value) -> str:
        if isinstance(value, Vector):
            return f"{value.words} ({value.shape_words})"
        if isinstance(value, Weight):
            return f"the weight {value.words}"
        if isinstance(value, LayerWeights):
            return f"the weights of layer {value.index} (ops.layer({value.index})); take one of them, such as .attn_q"
        text = repr(value)
        if len(text) > 60 or "\n" in text:
            return f"an object of type {type(value).__name__}"
        return f"{type(value).__name__} {text}"

    def _vector(self, op: str, name: str, value, space: str | None = None, shape: tuple | None = None) -> Vector:
        """``value`` if it is a handle of this ops (of ``space`` and ``shape`` when given), else the error."""
        if isinstance(value, Weight):
            raise TypeError(f"{op}: {name} must be a vector (a handle an operation returned), got the weight "
                            f"{value.words}")
        if not isinstance(value, Vector):
            raise TypeError(f"{op}: {name} must be a vector (a handle an operation returned), got {self._what(value)}")
        if value.ops is not self or self._handles.get(value.id) is not value:
            raise ValueError(f"{op}: {name} is a handle of another ops (a handle belongs to the ops that made it)")
        if space is not None and (value.space != space or value.shape != shape):
            want = self.shape_words(shape, space)
            raise ValueError(f"{op}: {name} takes {want} but got {value.shape_words}: {value.words}")
        return value

    def _int(self, op: str, name: str, value, low: int, high: int, meaning: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{op}: {name} must be an int ({meaning}), got {self._what(value)}")
        if not low <= value <= high:
            raise ValueError(f"{op}: {name} must be in {low} ... {high} ({meaning}), got {value}"
                             + (_position_hint(value) if name == "position" else ""))
        return value

    def _caller_line(self):
        if self._source_file is None:
            return None
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename != self._source_file:
            frame = frame.f_back
        return frame.f_lineno if frame is not None else None

    def _record(self, op: str, returns, **arguments):
        if self._max_operations is not None and len(self._trace) >= self._max_operations:
            raise RuntimeError(f"more than {self._max_operations} operations: a decode step makes about "
                               f"{16 * self.layers + 3}")
        node = {"id": len(self._trace), "op": op, **arguments}
        line = self._caller_line()
        if line is not None:
            node["line"] = line
        self._trace.append(node)
        if returns is None:
            return None
        space, shape, role, layer, words = returns
        handle = Vector(self, node["id"], shape, space, role, layer, words)
        self._handles[node["id"]] = handle
        return handle

    # ------------------------------------------------------------------ the operations

    def embed(self, token):
        """The embedding row of ``token``: a vector of hidden."""
        token = self._int("embed", "token", token, 0, self.vocab - 1, "a token id of the vocabulary")
        return self._record("embed", ("hidden", (self.hidden,), "embedding", None, f"the embedding of token {token}"),
                            token=token)

    def rmsnorm(self, x, weight):
        """x / sqrt(mean(x^2) + eps) * weight: x a vector of hidden, weight a norm."""
        if isinstance(x, Weight) and isinstance(weight, Vector):
            raise TypeError("rmsnorm(x, weight) takes the vector first and the weight second: "
                            f"ops.rmsnorm(x, w.attn_norm); got the weight {x.words} first")
        x = self._vector("rmsnorm", "x", x, "hidden", (self.hidden,))
        if not isinstance(weight, Weight):
            raise TypeError(f"rmsnorm: weight must be a norm's weight (ops.layer(i).attn_norm, .ffn_norm or "
                            f"ops.output_norm), got {self._what(weight)}")
        if weight.kind != "norm":
            raise TypeError(f"rmsnorm: weight must be a norm's weight (attn_norm, ffn_norm or ops.output_norm), "
                            f"got the matrix {weight.words}")
        words = ("the final norm's output" if weight.layer is None else
                 f"h of layer {weight.layer} (x normalized with its {weight.short})")
        return self._record("rmsnorm", ("hidden", (self.hidden,), "norm", weight.layer, words), x=x.id,
                            weight=weight.name)

    def gemv(self, matrix, x):
        """matrix times x (the matrix first); the output's shape is the matrix's rows."""
        if isinstance(matrix, Vector) and isinstance(x, Weight):
            name = x.short if x.layer is None else "w." + x.short
            raise TypeError(f"gemv(matrix, x) takes the matrix first: ops.gemv({name}, x); got a vector first and the "
                            "weight second")
        if not isinstance(matrix, Weight):
            raise TypeError(f"gemv: matrix must be a weight matrix (ops.layer(i).attn_q ... ffn_down, or "
                            f"ops.embedding), got {self._what(matrix)}")
        if matrix.kind != "matrix":
            raise TypeError(f"gemv: {matrix.words} is a norm's weight, not a matrix: it goes to rmsnorm(x, weight)")
        d = self.head_dim
        if matrix.short == "attn_output":
            space, shape, what = "heads", (self.heads, d), " (attention's output)"
        elif matrix.short == "ffn_down":
            space, shape, what = "ffn", (self.ffn,), " (swiglu's output)"
        else:
            space, shape, what = "hidden", (self.hidden,), ""
        x = self._vector("gemv", "x", x)
        if x.space != space or x.shape != shape:
            raise ValueError(f"gemv: {matrix.short} takes {self.shape_words(shape, space)}{what} but got "
                             f"{x.shape_words}: {x.words}")
        if matrix.layer is None:
            return self._record("gemv", ("vocab", (self.vocab,), "logits", None, "the logits"), matrix=matrix.name,
                                x=x.id)
        role, words = _PRODUCTS[matrix.short]
        rows = {"q": ("heads", (self.heads, d)), "k": ("heads", (self.kv_heads, d)),
                "v": ("heads", (self.kv_heads, d)), "gate": ("ffn", (self.ffn,)), "up": ("ffn", (self.ffn,))}
        out_space, out_shape = rows.get(role, ("hidden", (self.hidden,)))
        return self._record("gemv", (out_space, out_shape, role, matrix.layer, words.format(matrix.layer)),
                            matrix=matrix.name, x=x.id)

    def rope(self, x, position):
        """q or k with every pair (2i, 2i + 1) of every head turned by the angle of ``position``."""
        x = self._vector("rope", "x", x)
        if x.role in ("q_rope", "k_rope"):
            raise ValueError(f"rope: x is {x.words}: it was turned already, and q and k are turned once")
        if x.role == "v":
            raise ValueError(f"rope: x is {x.words}: rope turns q and k only (their dot products then depend on "
                             "the distance of the positions); v goes into the cache as it is")
        if x.role == "attention":
            raise ValueError(f"rope: x is {x.words}: rope turns q and k before attention, not its output")
        if x.role not in ("q", "k"):
            raise ValueError(f"rope: x must be q or k (the output of gemv with attn_q or attn_k), got {x.words} "
                             f"({x.shape_words})")
        position = self._int("rope", "position", position, 0, self.context - 1, "the token's position")
        role = x.role + "_rope"
        return self._record("rope", ("heads", x.shape, role, x.layer,
                                     f"{x.role} of layer {x.layer} turned by rope to position {position}"),
                            x=x.id, position=position)

    def write_cache(self, layer, k, v, position):
        """Store k (turned by rope) and v at ``position`` of layer ``layer``'s cache; returns None."""
        layer = self._int("write_cache", "layer", layer, 0, self.layers - 1, "the layer's index")
        kv = (self.kv_heads, self.head_dim)
        k = self._vector("write_cache", "k", k, "heads", kv)
        v = self._vector("write_cache", "v", v, "heads", kv)
        if k.role == "k":
            raise ValueError(f"write_cache: k is {k.words}, not turned by rope: the cache holds keys turned to "
                             "their positions (k = ops.rope(k, position) returns the turned key: a handle never "
                             "changes)")
        if k.role != "k_rope":
            raise ValueError(f"write_cache: k must be the key turned by rope (ops.rope(ops.gemv(w.attn_k, h), "
                             f"position)), got {k.words}")
        if v.role != "v":
            raise ValueError(f"write_cache: v must be the value, the output of gemv with attn_v (not turned), got "
                             f"{v.words}")
        position = self._int("write_cache", "position", position, 0, self.context - 1, "the token's position")
        self._record("write_cache", None, layer=layer, k=k.id, v=v.id, position=position)
        self._written[layer][position] = len(self._trace) - 1
        return None

    def attention(self, layer, q, context):
        """q (turned by rope) over positions 0 ... context - 1 of layer ``layer``'s cache: heads × head_dim."""
        layer = self._int("attention", "layer", layer, 0, self.layers - 1, "the layer's index")
        q = self._vector("attention", "q", q, "heads", (self.heads, self.head_dim))
        if q.role == "q":
            raise ValueError(f"attention: q is {q.words}, not turned by rope (q = ops.rope(q, position) returns the "
                             "turned query: a handle never changes)")
        if q.role != "q_rope":
            raise ValueError(f"attention: q must be the query turned by rope (ops.rope(ops.gemv(w.attn_q, h), "
                             f"position)), got {q.words}")
        if isinstance(context, bool) or not isinstance(context, int):
            raise TypeError(f"attention: context must be an int (how many cached positions the query reads), got "
                            f"{self._what(context)}")
        if context < 1:
            raise ValueError(f"attention: context={context} reads no position: the token at `position` attends to "
                             "positions 0 ... position, its own included, so context = position + 1 (after "
                             "write_cache has stored its key and value)")
        if context > self.context:
            raise ValueError(f"attention: context must be at most the model's {self.context} positions, got {context}")
        held = self._written[layer]
        missing = [p for p in range(context) if p not in held]
        if missing:
            holds = (f"holds positions {self._ranges(sorted(held))}" if held else "holds no position yet")
            reads = "position 0" if context == 1 else f"positions 0 ... {context - 1}"
            raise ValueError(f"attention: context={context} reads {reads} of layer {layer}'s cache, but position "
                             f"{missing[0]} was never written (the cache {holds}): the token at `position` writes "
                             "its key and value there first, write_cache(layer, k, v, position), then reads "
                             "position + 1 positions, attention(layer, q, position + 1)")
        return self._record("attention", ("heads", (self.heads, self.head_dim), "attention", layer,
                                          f"attention's output of layer {layer}"),
                            layer=layer, q=q.id, context=context)

    def add(self, x, y):
        """x + y, of one shape: the residual stream."""
        x, y = self._vector("add", "x", x), self._vector("add", "y", y)
        if x.space != y.space or x.shape != y.shape:
            raise ValueError(f"add: x and y must have one shape; x is {x.shape_words} ({x.words}), y is "
                             f"{y.shape_words} ({y.words})")
        words = "a sum"
        for part in (y, x):
            if part.role == "attn_out":
                words = f"x after layer {part.layer}'s attention (x + its output)"
            elif part.role == "mlp_out":
                words = f"x after layer {part.layer} (x + its MLP's output)"
        return self._record("add", (x.space, x.shape, "sum", None, words), x=x.id, y=y.id)

    def swiglu(self, gate, up):
        """silu(gate) * up: gate the output of gemv with ffn_gate, up that with ffn_up."""
        gate = self._vector("swiglu", "gate", gate, "ffn", (self.ffn,))
        up = self._vector("swiglu", "up", up, "ffn", (self.ffn,))
        if gate.role == "up" and up.role == "gate":
            raise ValueError("swiglu(gate, up): gate is ffn_up's output and up is ffn_gate's: they are swapped. "
                             "silu goes on the gate: swiglu(ops.gemv(w.ffn_gate, h), ops.gemv(w.ffn_up, h))")
        if gate.role != "gate":
            raise ValueError(f"swiglu: gate must be the output of gemv with ffn_gate, got {gate.words}")
        if up.role != "up":
            raise ValueError(f"swiglu: up must be the output of gemv with ffn_up, got {up.words}")
        return self._record("swiglu", ("ffn", (self.ffn,), "swiglu", gate.layer, f"swiglu(gate, up) of layer "
                                       f"{gate.layer}"), gate=gate.id, up=up.id)

    # ------------------------------------------------------------------ what the checks use

    def logits_of(self, value) -> int:
        """The id of ``value`` if it is the logits (a vector of vocab), else a ValueError saying what it is."""
        if not isinstance(value, Vector) or value.ops is not self:
            raise ValueError(f"decode_step must return the logits, the handle of ops.gemv(ops.embedding, ...); it "
                             f"returned {self._what(value)}")
        if value.space != "vocab":
            raise ValueError(f"decode_step must return the logits, a vector of {self.vocab} (vocab); it returned "
                             f"{value.words} ({value.shape_words}): the last operation is "
                             "ops.gemv(ops.embedding, rmsnorm(x, ops.output_norm))")
        return value.id

    def replay(self, node: dict):
        """Run a recorded operation again on this ops (its handles by their ids here): what the checks use to
        read a record. Returns what the operation returns."""
        if not isinstance(node, dict) or node.get("op") not in OPERATIONS:
            raise ValueError(f"not an operation: {node!r}"[:200])
        fields = {"embed": ("token",), "rmsnorm": ("x", "weight"), "gemv": ("matrix", "x"),
                  "rope": ("x", "position"), "write_cache": ("layer", "k", "v", "position"),
                  "attention": ("layer", "q", "context"), "add": ("x", "y"), "swiglu": ("gate", "up")}[node["op"]]
        if set(node) - {"id", "op", "line"} != set(fields) or node.get("id") != len(self._trace):
            raise ValueError(f"not an operation of this record: {node!r}"[:200])
        handles = {"rmsnorm": ("x",), "gemv": ("x",), "rope": ("x",), "write_cache": ("k", "v"),
                   "attention": ("q",), "add": ("x", "y"), "swiglu": ("gate", "up")}.get(node["op"], ())
        arguments = {}
        for name in fields:
            value = node[name]
            if name in handles:
                value = self.vector(value) if isinstance(value, int) and not isinstance(value, bool) else value
            elif name in ("weight", "matrix"):
                value = self.weight_named(value) if isinstance(value, str) else value
            arguments[name] = value
        saved, self._source_file = self._source_file, None
        try:
            out = getattr(self, node["op"])(**arguments)
        finally:
            self._source_file = saved
        if "line" in node:
            self._trace[-1]["line"] = node["line"]
        return out

    @staticmethod
    def _ranges(values: list[int]) -> str:
        runs, start = [], None
        for i, p in enumerate(values):
            if start is None:
                start = p
            if i + 1 == len(values) or values[i + 1] != p + 1:
                runs.append(f"{start}" if start == p else f"{start} ... {p}")
                start = None
        return ", ".join(runs)
