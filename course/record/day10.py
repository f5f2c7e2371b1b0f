"""GPU recordings of day 10: SmolLM2-135M-Instruct on the course's kernels (``inference.engine.KernelModel``), checked
against the NumPy forward pass and timed as a whole model, one request and many.

Not a sweep of rungs: the unit measured is the model's step. ``record(out_dir)`` writes, in this order (each saved
as soon as it is made):

- ``day10_full_size_checks``: greedy decoding of ``CHECK_TOKENS`` tokens after each of ``PROMPTS`` (a question,
  one with digits and code, one in French) on the kernels and on the NumPy model (``inference.numpy_model``), each
  fed the kernels' tokens: ``tokens_equal`` (the two greedy choices agree at every position), ``first_divergence``
  (-1 if none), ``max_logit_err`` (the largest |kernels - NumPy| of a position's logits over that position's largest
  |logit|), ``prompt_tokens`` and ``tokens``.
- ``day10_decode_timing``: one request decoding at batch 1, on the plain engine, the fused one and the fused one
  replayed as CUDA graphs (column ``engine``: "plain", 17 kernels a block, "fused", ``KernelModel(fused=True)``,
  6, or "graphs", ``KernelModel(fused=True, graphs=True)``, where a GPU runs it). Row ``what="decode_step"``:
  ``median_ms`` of a decode
  step (the host's wall time of ``KernelModel.decode``, which returns the logits on the host: the whole step a chat
  waits for), ``tokens_per_s``, ``kernels_launched`` per step, ``bytes`` (every tensor of the file read once),
  ``bytes_limit_ms`` (those bytes at the copy bandwidth measured in the same run). Rows ``what="launcher"``: one per
  launcher of the step, ``calls`` and ``ms_per_step`` from a run with ``KernelModel.timings`` (the device
  synchronized around each call, so each is its launch and its kernel alone; their sum is larger than an unsynchronized
  step), and ``kernel_ms_per_step`` from as many steps with ``KernelModel.kernel_timings``: the GPU's time of the
  same calls alone, their launches hidden behind a busy kernel (what a CUDA graph would leave of each). Row ``what="transformers"``: the same weights in transformers (fp16 on the GPU, eager, its greedy
  ``generate``), ``tokens_per_s``, where transformers and the model's GGUF loader are installed (the notes say so
  otherwise). An engine whose greedy tokens differ from the plain engine's over the timed steps gets no rows: the
  notes say where they diverged.
- ``day10_serving``: ``inference.serving.Server`` over the fused kernel engine (on a GPU its decode steps replayed
  as CUDA graphs, ``inference.engine.GRAPH_MAX_TOKENS``; column ``engine``) with ``CONCURRENCY``
  requests submitted at once
  (chat prompts of ``QUESTIONS`` in turn, ``SERVING_TOKENS`` answer tokens each, no stop token): ``tokens_per_s``
  (answer tokens over the wall time), ``mean_ttft_ms`` and ``max_ttft_ms`` (submit to first token), ``steps``;
  and ``what="prefill"``: a prompt of ``PREFILL_TOKENS`` tokens prefilled in one step, ``tokens_per_s``.

``record_other_gpu(out_dir)`` (``python -m course.record day10 --other-gpu``), on a second GPU: the greedy checks of
``day10_full_size_checks`` (raising where the kernels' tokens leave NumPy's), then the batch-1 decode recording as
``day10_decode_timing_other_gpu``, for the lesson to judge the decode rate on both GPUs.

``sanitize()`` runs a tiny random model of the same architecture (``inference.tiny``) for two steps on the plain and
the fused engine, every launcher once, small, under compute-sanitizer.
"""

from __future__ import annotations

import pathlib
import statistics
import time

import numpy as np

CHECK_TOKENS = 64
PROMPTS = ("What is the capital of France?",
           "Write a Python function that returns the sum of the digits of 90210.",
           "Traduis en français : « The weather is nice today. »")
QUESTIONS = ("What is the capital of France?", "Name three colors.", "What is 2 + 2?", "Write a haiku about the sea.",
             "Why is the sky blue?", "Give me a synonym for happy.", "How many legs does a spider have?",
             "What is a GPU?")
CONCURRENCY = (1, 8, 32, 64)
QUICK_CONCURRENCY = (1, 8)
SERVING_TOKENS = 32
DECODE_STEPS = 64
PREFILL_TOKENS = 256
BLOCK_SIZE = 16


def _model_file(model_file=None):
    from inference import files, gguf

    return model_file if model_file is not None else gguf.read(files.model_path())


def _kernel_engine(model_file, *, num_blocks: int, context: int, fused: bool = False):
    from inference.engine import KernelModel

    return KernelModel(model_file, num_blocks=num_blocks, block_size=BLOCK_SIZE, context=context, fused=fused)


def _fused_engine(model_file, *, num_blocks: int, context: int):
    return _kernel_engine(model_file, num_blocks=num_blocks, context=context, fused=True)


def _graph_engine(model_file, *, num_blocks: int, context: int):
    from inference.engine import KernelModel

    return KernelModel(model_file, num_blocks=num_blocks, block_size=BLOCK_SIZE, context=context, fused=True,
                       graphs=True)


def _prompt_ids(model_file, question: str) -> list[int]:
    from inference.tokenizer import Tokenizer, chat_prompt

    if "tokenizer.ggml.merges" not in model_file.metadata:       # a tiny random model has no tokenizer
        return [1 + (ord(ch) % (len(model_file.metadata["tokenizer.ggml.tokens"]) - 1)) for ch in question[:12]]
    return Tokenizer(model_file.metadata).encode(chat_prompt([{"role": "user", "content": question}]))


def checks_recording(model_file, *, tokens: int = CHECK_TOKENS, engine=_kernel_engine):
    """Greedy decoding on the kernels against the NumPy model, prompt by prompt (see the module's docstring)."""
    from course.records import new_recording
    from inference.numpy_model import Cache, NumpyModel

    reference = NumpyModel(model_file)
    rec = new_recording("day10_full_size_checks", notes=(
        f"greedy decoding of {tokens} tokens after each prompt on the course's kernels (inference.engine) and the "
        "float32 NumPy model fed the same tokens; max_logit_err is relative to each position's largest |logit|"))
    for question in PROMPTS:
        ids = _prompt_ids(model_file, question)
        kernels = engine(model_file, num_blocks=-(-(len(ids) + tokens) // BLOCK_SIZE), context=len(ids) + tokens)
        cache = Cache(reference.config)
        seq, got = kernels.prefill(ids)
        want = reference.forward(ids, cache)[-1]
        divergence, worst, produced = -1, 0.0, []
        for step in range(tokens):
            worst = max(worst, float(np.abs(got - want).max() / max(1.0, np.abs(want).max())))
            token = int(np.argmax(got))
            if divergence < 0 and token != int(np.argmax(want)):
                divergence = step
            produced.append(token)
            if step + 1 < tokens:
                got, want = kernels.decode(seq, token), reference.forward([token], cache)[-1]
        rec.add(prompt=question, prompt_tokens=len(ids), tokens=tokens, tokens_equal=divergence < 0,
                first_divergence=divergence, max_logit_err=worst)
    return rec


def decode_recording(model_file, *, steps: int = DECODE_STEPS, ceilings: dict | None = None,
                     engine=_kernel_engine, variants=None):
    """One request decoding at batch 1, on the plain engine, the fused one and the graphs (``engine`` column): the
    step's time, its launchers' times, and transformers beside it. ``variants``: ``(name, make)`` pairs to time
    instead (None: those three, or ``engine`` alone when it is not the kernel engine); each must give the first's
    greedy tokens."""
    from course.records import new_recording

    step_bytes = sum(info.nbytes for info in model_file.tensors.values())
    copy_gbps = (ceilings or {}).get("copy_gbps")
    rec = new_recording("day10_decode_timing", ceilings=ceilings or {}, notes=(
        f"batch-1 decode of {steps} steps after the prompt {PROMPTS[0]!r}; median_ms is the host's wall time of a "
        "step (logits back on the host); launcher rows: ms_per_step with each call synchronized, so each is its own "
        "launch and kernel; kernel_ms_per_step: the same calls' kernels alone (launch hidden behind a busy kernel, "
        "CUDA events); "
        "engine: plain (17 kernels a block), fused (KernelModel(fused=True), 6) or graphs (the fused engine's step "
        "captured once as a CUDA graph and replayed, KernelModel(fused=True, graphs=True); no launcher rows: its "
        "launches cannot be timed one by one)"))
    from inference import graphs

    if variants is None:
        variants = (("plain", engine), ("fused", _fused_engine)) if engine is _kernel_engine else (("plain", engine),)
        if engine is _kernel_engine and graphs.available():
            variants += (("graphs", _graph_engine),)
    first = None                                  # the first engine's greedy tokens, which the others must give
    for name, make in variants:
        try:
            tokens = _time_decode(rec, name, make, model_file, steps, step_bytes, copy_gbps)
            if first is not None and tokens != first:
                step = next(i for i, (a, b) in enumerate(zip(tokens, first)) if a != b)
                raise ValueError(f"its greedy tokens differ from the {variants[0][0]} engine's from step {step} on, "
                                 "so its rate is not a rate of this model")
            if first is None:
                first = tokens
        except Exception as exc:                  # a wrong engine or a driver that refuses the capture: said, not hidden
            if first is None:
                raise
            rec.rows = [row for row in rec.rows if row.get("engine") != name]
            rec.notes += f"; {name} not measured: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    tps, why = _transformers_tokens_per_s(steps)
    if tps is not None:
        rec.add(what="transformers", batch=1, steps=steps, tokens_per_s=tps, dtype="float16")
    else:
        rec.notes += f"; transformers not measured: {why}"
    return rec


def _time_decode(rec, name, make, model_file, steps, step_bytes, copy_gbps) -> list[int]:
    """The rows of one engine: its decode step's median time, then (an engine that can) its launchers' times.
    Returns the greedy tokens of the timed steps."""
    ids = _prompt_ids(model_file, PROMPTS[0])
    context = len(ids) + steps + 10           # the timed steps, then up to 8 profiled ones
    kernels = make(model_file, num_blocks=-(-context // BLOCK_SIZE), context=context)
    seq, logits = kernels.prefill(ids)
    token, times, produced = int(np.argmax(logits)), [], []
    for _ in range(steps):
        start = time.perf_counter()
        logits = kernels.decode(seq, token)
        times.append(time.perf_counter() - start)
        token = int(np.argmax(logits))
        produced.append(token)
    median_ms = 1e3 * statistics.median(times[1:] or times)
    rec.add(what="decode_step", engine=name, batch=1, steps=steps, median_ms=median_ms,
            tokens_per_s=1e3 / median_ms, kernels_launched=getattr(kernels, "kernels_launched", None),
            bytes=step_bytes, bytes_limit_ms=step_bytes / (copy_gbps * 1e9) * 1e3 if copy_gbps else None)
    if hasattr(kernels, "timings") and not getattr(kernels, "graphs", False):
        kernels.timings = {}
        profiled = max(1, min(steps, 4))
        for _ in range(profiled):
            token = int(np.argmax(kernels.decode(seq, token)))
        timed, kernels.timings = kernels.timings, None
        alone, why = {}, None
        try:                                     # each call's kernels alone on the GPU, as many steps again
            kernels.kernel_timings = {}
            for _ in range(profiled):
                token = int(np.argmax(kernels.decode(seq, token)))
            alone = kernels.kernel_timings
        except Exception as exc:                 # a GPU that refuses the timing: said in the notes, not hidden
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        finally:
            kernels.kernel_timings = None
        for launcher, (calls, seconds) in sorted(timed.items(), key=lambda item: -item[1][1]):
            row = dict(what="launcher", engine=name, launcher=launcher, calls=calls // profiled,
                       ms_per_step=1e3 * seconds / profiled)
            if launcher in alone:
                row["kernel_ms_per_step"] = 1e3 * alone[launcher][1] / profiled
            rec.add(**row)
        if why:
            rec.notes += f"; {name}'s kernels alone not measured: {why}"
    return produced


def _transformers_tokens_per_s(steps: int):
    """(tokens per second of transformers' greedy generate on the same GGUF weights, fp16 on the GPU, or None, why)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as exc:
        return None, f"{exc.name} is not installed"
    if not torch.cuda.is_available():
        return None, "torch sees no CUDA device"
    from inference import files

    path = pathlib.Path(files.model_path())
    try:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, torch_dtype=torch.float16)
    except Exception as exc:                 # the GGUF loader needs the gguf package and accelerate
        return None, f"transformers could not load the file ({type(exc).__name__}: {exc})"
    model = model.to("cuda").eval()
    ids = torch.tensor([[1, 2, 3, 4]], device="cuda")
    with torch.no_grad():
        model.generate(ids, max_new_tokens=8, do_sample=False, min_new_tokens=8)
        torch.cuda.synchronize()
        start = time.perf_counter()
        model.generate(ids, max_new_tokens=steps, do_sample=False, min_new_tokens=steps)
        torch.cuda.synchronize()
    return steps / (time.perf_counter() - start), ""


def serving_recording(model_file, *, concurrency=CONCURRENCY, tokens: int = SERVING_TOKENS,
                      prefill_tokens: int = PREFILL_TOKENS, engine=_kernel_engine):
    """The server over the fused kernel engine with many requests at once, and one long prompt's prefill."""
    from course.records import new_recording
    from inference.serving import Request, Server

    from inference import graphs
    from inference.engine import GRAPH_MAX_TOKENS

    replayed = engine is _kernel_engine and graphs.available()
    label = "graphs" if replayed else "fused" if engine is _kernel_engine else "given"
    engine = (_graph_engine if replayed else _fused_engine) if engine is _kernel_engine else engine

    rec = new_recording("day10_serving", notes=(
        f"inference.serving.Server on the course's kernels (engine: graphs, KernelModel(fused=True, graphs=True), its "
        f"decode steps of up to {GRAPH_MAX_TOKENS} sequences replayed as CUDA graphs and steps with prompt tokens "
        f"eager, where a GPU runs it; fused, KernelModel(fused=True), each launch from the host): the requests submitted at once, {tokens} answer tokens "
        f"each (no stop token), chat prompts of {len(QUESTIONS)} questions in turn; prefill: one prompt of "
        f"{prefill_tokens} tokens in one step. Each concurrency runs first untimed, 2 answer tokens a request, so that "
        "no kernel is compiled while timed; the timed run is on a new engine, whose graphs are captured as it meets "
        "each step's shape (inside the timing)"))
    prompts = [_prompt_ids(model_file, q) for q in QUESTIONS]
    longest = max(len(p) for p in prompts) + tokens
    for n in concurrency:
        for answer in (2, tokens):               # first untimed and short: what the process compiles is not timed
            kernels = engine(model_file, num_blocks=n * -(-longest // BLOCK_SIZE), context=longest)
            server = Server(kernels, max_batch=n, max_prefill_tokens=n * longest)
            for i in range(n):
                server.submit(Request(prompts[i % len(prompts)], max_tokens=answer))
            start = time.perf_counter()
            done = server.run()
            wall = time.perf_counter() - start
        ttft = [r.first_token_s for r in done]
        rec.add(what="decode", engine=label, concurrency=n, requests=n, tokens=sum(len(r.output) for r in done), seconds=wall,
                tokens_per_s=sum(len(r.output) for r in done) / wall, mean_ttft_ms=1e3 * statistics.mean(ttft),
                max_ttft_ms=1e3 * max(ttft), steps=len(server.stats))
    vocab = len(model_file.metadata["tokenizer.ggml.tokens"])
    ids = [int(t) for t in np.random.default_rng(10).integers(1, vocab, prefill_tokens)]
    kernels = engine(model_file, num_blocks=-(-prefill_tokens // BLOCK_SIZE), context=prefill_tokens)
    warm, _ = kernels.prefill(ids[:8])        # compiled, warm
    kernels.free(warm)
    start = time.perf_counter()
    kernels.prefill(ids)
    seconds = time.perf_counter() - start
    rec.add(what="prefill", engine=label, prompt_tokens=prefill_tokens, seconds=seconds, tokens_per_s=prefill_tokens / seconds)
    return rec


def record(out_dir, quick: bool = False, *, model_file=None, engine=_kernel_engine, ceilings=None) -> list[pathlib.Path]:
    """The day's three recordings (see the module's docstring), each saved in ``out_dir`` as it is made."""
    model_file = _model_file(model_file)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if ceilings is None:
        from course.timing import measure_ceilings

        ceilings = measure_ceilings()
    paths = []
    for make in (lambda: checks_recording(model_file, tokens=8 if quick else CHECK_TOKENS, engine=engine),
                 lambda: decode_recording(model_file, steps=8 if quick else DECODE_STEPS, ceilings=ceilings,
                                          engine=engine),
                 lambda: serving_recording(model_file, concurrency=QUICK_CONCURRENCY if quick else CONCURRENCY,
                                           tokens=8 if quick else SERVING_TOKENS,
                                           prefill_tokens=32 if quick else PREFILL_TOKENS, engine=engine)):
        rec = make()
        paths.append(rec.save(out_dir / f"{rec.name}.json"))
    return paths


def record_other_gpu(out_dir, quick: bool = False, *, model_file=None, engine=_kernel_engine,
                     ceilings=None) -> list[pathlib.Path]:
    """On a second GPU: the greedy checks (``checks_recording``; an ``AssertionError`` names the prompts whose tokens
    differ from NumPy's), then ``decode_recording`` saved as ``day10_decode_timing_other_gpu`` in ``out_dir``."""
    model_file = _model_file(model_file)
    checks = checks_recording(model_file, tokens=8 if quick else CHECK_TOKENS, engine=engine)
    wrong = [row["prompt"] for row in checks.rows if not row["tokens_equal"]]
    if wrong:
        raise AssertionError(f"the kernels' greedy tokens differ from the NumPy model's after {wrong}: nothing timed")
    if ceilings is None:
        from course.timing import measure_ceilings

        ceilings = measure_ceilings()
    rec = decode_recording(model_file, steps=8 if quick else DECODE_STEPS, ceilings=ceilings, engine=engine)
    rec.name = "day10_decode_timing_other_gpu"
    rec.notes = (f"day10_decode_timing on another GPU, after the greedy checks of {len(checks.rows)} prompts passed on "
                 f"it ({checks.rows[0]['tokens']} tokens each). " + rec.notes)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [rec.save(out_dir / f"{rec.name}.json")]


def sanitize() -> None:
    """Every launcher of a step once, small: a tiny random model's prefill of 5 tokens and one decode step, on the
    plain engine and on the fused one."""
    from inference.tiny import tiny_model

    for make in (_kernel_engine, _fused_engine):
        kernels = make(tiny_model(0), num_blocks=4, context=16)
        seq, logits = kernels.prefill([3, 17, 5, 60, 2])
        kernels.decode(seq, int(np.argmax(logits)))
