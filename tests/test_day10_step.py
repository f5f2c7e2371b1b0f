"""Day 10's last exercise, the decode step over ``kernels.step_ops``'s operations
(``course.exercise_checks.day10_step``): correct steps written two ways pass every case; each classic mistake
fails with words that name it, whether ``RecordingOps`` refuses it where it happens or the judge finds it in
the record; cheats fail; the grader's sandboxed process gives the record the notebook gives; the NumPy replay
agrees with the forward pass, and the replay on the course's kernels with both."""

from __future__ import annotations

import json

import numpy as np
import pytest
from numba import cuda

from course import hostcode
from course.exercise_checks import day10_step, day10_step_driver, day10_step_kernels
from course.hostcode import HostCode
from grader import cleanroom, host_answers
from kernels import step_ops

CORRECT = '''
def decode_step(ops, token, position):
    x = ops.embed(token)
    for i in range(ops.layers):
        w = ops.layer(i)
        h = ops.rmsnorm(x, w.attn_norm)
        q, k, v = ops.gemv(w.attn_q, h), ops.gemv(w.attn_k, h), ops.gemv(w.attn_v, h)
        q, k = ops.rope(q, position), ops.rope(k, position)
        ops.write_cache(i, k, v, position)
        x = ops.add(x, ops.gemv(w.attn_output, ops.attention(i, q, position + 1)))
        h = ops.rmsnorm(x, w.ffn_norm)
        x = ops.add(x, ops.gemv(w.ffn_down, ops.swiglu(ops.gemv(w.ffn_gate, h), ops.gemv(w.ffn_up, h))))
    return ops.gemv(ops.embedding, ops.rmsnorm(x, ops.output_norm))
'''

# A helper per block, keyword arguments, the sums in the other order, v and up computed first.
CORRECT_BLOCKS = '''
def attention_block(ops, i, w, x, position):
    h = ops.rmsnorm(x=x, weight=w.attn_norm)
    v = ops.gemv(matrix=w.attn_v, x=h)
    k = ops.rope(x=ops.gemv(matrix=w.attn_k, x=h), position=position)
    q = ops.rope(x=ops.gemv(matrix=w.attn_q, x=h), position=position)
    ops.write_cache(layer=i, k=k, v=v, position=position)
    return ops.add(x=ops.gemv(w.attn_output, ops.attention(layer=i, q=q, context=position + 1)), y=x)


def mlp_block(ops, w, x):
    h = ops.rmsnorm(x, w.ffn_norm)
    up = ops.gemv(w.ffn_up, h)
    gate = ops.gemv(w.ffn_gate, h)
    return ops.add(ops.gemv(w.ffn_down, ops.swiglu(gate=gate, up=up)), x)


def decode_step(ops, token, position):
    weights = [ops.layer(i) for i in range(ops.layers)]
    x = ops.embed(token=token)
    for i, w in enumerate(weights):
        x = mlp_block(ops, w, attention_block(ops, i, w, x, position))
    final = ops.rmsnorm(x, ops.output_norm)
    return ops.gemv(ops.embedding, final)
'''

# (label, edits of CORRECT, words the message must hold)
MISTAKES = [
    ("rope_position_minus_one", [("ops.rope(q, position), ops.rope(k, position)",
                                  "ops.rope(q, position - 1), ops.rope(k, position - 1)")],
     ["rope", "got -1", "position - 1"]),
    ("rope_position_zero", [("ops.rope(q, position), ops.rope(k, position)", "ops.rope(q, 0), ops.rope(k, 0)")],
     ["right at position 0 and wrong from position 1", "turned by rope to position 0", "passes 0 to rope"]),
    ("rope_k_only_off", [("ops.rope(k, position)", "ops.rope(k, max(position - 1, 0))")],
     ["k of layer 0 is turned by rope to position 0", "sits at position 1", "line 8"]),
    ("context_is_position", [("position + 1)))", "position)))")], ["context=0 reads no position",
                                                                    "context = position + 1"]),
    ("context_always_one", [("position + 1)))", "1)))")],
     ["attention reads 1 position(s)", "context = position + 1 = 2", "passes 1 to attention"]),
    ("attention_before_write", [("        ops.write_cache(i, k, v, position)\n", ""),
                                ("        x = ops.add(x, ops.gemv(w.attn_output, ops.attention(i, q, position + 1)))\n",
                                 "        o = ops.attention(i, q, position + 1)\n"
                                 "        ops.write_cache(i, k, v, position)\n"
                                 "        x = ops.add(x, ops.gemv(w.attn_output, o))\n")],
     ["never written", "write_cache(layer, k, v, position)", "then reads"]),
    ("write_position_minus_one", [("write_cache(i, k, v, position)", "write_cache(i, k, v, position - 1)")],
     ["write_cache: position", "got -1"]),
    ("write_layer_zero", [("write_cache(i, k, v, position)", "write_cache(0, k, v, position)")],
     ["layer 1's cache", "holds no position yet"]),
    ("attention_layer_zero", [("ops.attention(i, q,", "ops.attention(0, q,")],
     ["attention in layer 1 reads layer 0's cache"]),
    ("swiglu_swapped", [("ops.swiglu(ops.gemv(w.ffn_gate, h), ops.gemv(w.ffn_up, h))",
                         "ops.swiglu(ops.gemv(w.ffn_up, h), ops.gemv(w.ffn_gate, h))")], ["swapped", "silu"]),
    ("no_attention_residual", [("x = ops.add(x, ops.gemv(w.attn_output", "x = (ops.gemv(w.attn_output")],
     ["residual add is missing", "ops.add(x"]),
    ("no_mlp_residual", [("x = ops.add(x, ops.gemv(w.ffn_down", "x = (ops.gemv(w.ffn_down")],
     ["residual add is missing"]),
    ("residual_dropped", [("x = ops.add(x, ops.gemv(w.ffn_down", "ops.add(x, ops.gemv(w.ffn_down")],
     ["never added to the residual stream", "x = ops.add(x, ...)"]),
    ("no_final_norm", [("ops.gemv(ops.embedding, ops.rmsnorm(x, ops.output_norm))", "ops.gemv(ops.embedding, x)")],
     ["final norm is missing", "ops.output_norm"]),
    ("ffn_norm_for_attention", [("ops.rmsnorm(x, w.attn_norm)", "ops.rmsnorm(x, w.ffn_norm)")],
     ["norm before the attention uses ffn_norm", "w.attn_norm"]),
    ("attn_norm_for_mlp", [("ops.rmsnorm(x, w.ffn_norm)", "ops.rmsnorm(x, w.attn_norm)")],
     ["norm before the MLP uses attn_norm"]),
    ("separate_head", [("ops.gemv(ops.embedding, ops.rmsnorm", "ops.gemv(ops.output, ops.rmsnorm")],
     ["no output", "tied to the embedding", "ops.embedding"]),
    ("lm_head", [("ops.gemv(ops.embedding, ops.rmsnorm", "ops.gemv(ops.lm_head, ops.rmsnorm")],
     ["tied to the embedding"]),
    ("first_layer_weights", [("w = ops.layer(i)", "w = ops.layer(0)")],
     ["layer 0's attn_norm", "ops.layer(i) inside the loop"]),
    ("k_from_attn_q", [("ops.gemv(w.attn_k, h)", "ops.gemv(w.attn_q, h)")], ["write_cache: k takes 2 KV heads"]),
    ("gate_from_ffn_up", [("ops.gemv(w.ffn_gate, h)", "ops.gemv(w.ffn_up, h)")],
     ["gate must be the output of gemv with ffn_gate", "ffn_up's output"]),
    ("attn_output_of_h", [("ops.gemv(w.attn_output, ops.attention(i, q, position + 1))", "ops.gemv(w.attn_output, h)")],
     ["attn_output takes 4 heads × 16", "a vector of 64 (hidden)"]),
    ("attention_skipped", [("ops.gemv(w.attn_output, ops.attention(i, q, position + 1))",
                            "ops.gemv(w.attn_output, q)")], ["attention is missing"]),
    ("rope_on_v", [("ops.rope(k, position)", "ops.rope(v, position)")], ["rope", "v goes into the cache as it is"]),
    ("rope_result_dropped", [("q, k = ops.rope(q, position), ops.rope(k, position)",
                              "ops.rope(q, position); ops.rope(k, position)")], ["not turned by rope", "k = ops.rope"]),
    ("embed_position", [("ops.embed(token)", "ops.embed(position)")], ["embed got 0", "that is the position"]),
    ("matrix_second", [("ops.gemv(w.attn_q, h)", "ops.gemv(h, w.attn_q)")], ["takes the matrix first"]),
]

CHEATS = [
    ("computes_with_numpy", "import numpy as np\n\ndef decode_step(ops, token, position):\n"
                            "    return np.zeros(ops.vocab, np.float32)\n", ["must return the logits", "ndarray"]),
    ("returns_the_embedding", "def decode_step(ops, token, position):\n    return ops.embed(token)\n",
     ["must return the logits", "the embedding of token", "(hidden)"]),
    ("returns_a_constant", "def decode_step(ops, token, position):\n    return 3\n",
     ["must return the logits", "int 3"]),
    ("numbers_from_handles", "def decode_step(ops, token, position):\n    x = ops.embed(token)\n    return x * 2\n",
     ["holds no numbers"]),
]


def _edited(edits) -> str:
    source = CORRECT
    for old, new in edits:
        assert source.count(old) >= 1, old
        source = source.replace(old, new)
    return source


def _function(source: str, name: str = "decode_step"):
    namespace: dict = {}
    exec(compile(source, "<your answer cell>", "exec"), namespace)
    return namespace[name]


@pytest.fixture(scope="module")
def cases():
    """A sequence on the default tiny model (2 layers, group 2), whose problems the messages name first, and a
    one-layer MHA one."""
    return [day10_step.decode_step_case(1, prompt=3, positions=8),
            day10_step.decode_step_case(5, prompt=2, positions=5, layers=1, heads=4, kv_heads=4)]


@pytest.fixture
def runner():
    """What the grading kernel registers: the guarded answer process of grader/host_answers.py."""
    hostcode.set_runner(host_answers.run_process)
    yield
    hostcode.set_runner(None)


def _graded(source: str, name: str = "decode_step"):
    """What the grading kernel holds for the cell: the HostCode its added line binds."""
    namespace: dict = {}
    exec(cleanroom.clean_host_source(source).source, namespace)
    return namespace[name]


# --------------------------------------------------------------------------------------------- correct steps

@pytest.mark.parametrize("source", [CORRECT, CORRECT_BLOCKS], ids=["as_in_the_spec", "blocks_and_keywords"])
def test_correct_steps_pass_every_case_of_every_grade_cell(source):
    answer = _function(source)
    for kind in ("first_token", "sequence", "groups", "long"):
        day10_step.check_decode_step(answer, day10_step.decode_step_cases(kind, seed=7))
    day10_step.decode_step_matches_reference(answer)


def test_the_hidden_cases_cover_layers_groups_and_long_sequences():
    cases = [c for kind in ("first_token", "sequence", "groups", "long") for c in day10_step.decode_step_cases(kind)]
    assert {c["shape"]["layers"] for c in cases} == {1, 2, 3}
    assert {c["shape"]["heads"] // c["shape"]["kv_heads"] for c in cases} >= {1, 2, 4}
    sequences = [c for c in cases if c["title"] and len(c["tokens"]) > 1]
    assert all(len(c["tokens"]) >= 12 for c in sequences)
    assert max(len(c["tokens"]) for c in cases) > 16          # past a cache block of 16 positions
    assert all(len(c["tokens"]) > c["prompt"] for c in sequences)       # some positions are decoded


def test_the_numpy_replay_of_the_course_step_is_far_inside_the_tolerance(cases):
    """The replay sums in another order than the forward pass: a few 1e-6 of the scale, the tolerance 1e-3."""
    from inference.numpy_model import NumpyModel
    from inference.tiny import tiny_model

    for case in cases:
        record = hostcode.run(day10_step.DECODE_STEP, day10_step.reference_decode_step, day10_step.step_data([case]))
        got = day10_step.replay_logits(case, record[0])
        want = NumpyModel(tiny_model(case["seed"], **case["shape"])).forward(case["tokens"])
        assert np.abs(got - want).max() < day10_step.TOLERANCE / 10 * max(1.0, np.abs(want).max())


# --------------------------------------------------------------------------------------------- mistakes

@pytest.mark.parametrize("label, edits, words", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_classic_mistake_fails_with_words_that_name_it(label, edits, words, cases):
    with pytest.raises(AssertionError) as failure:
        day10_step.check_decode_step(_function(_edited(edits)), cases)
    message = str(failure.value)
    for word in words:
        assert word in message, (label, word, message)


@pytest.mark.parametrize("label, source, words", CHEATS, ids=[c[0] for c in CHEATS])
def test_cheats_fail(label, source, words, cases):
    with pytest.raises(AssertionError) as failure:
        day10_step.check_decode_step(_function(source), cases[:1])
    for word in words:
        assert word in str(failure.value), (label, word, str(failure.value))


def test_rope_with_position_plus_one_for_q_and_k_alike_computes_the_same_logits(cases):
    """RoPE's scores depend on the distance of positions only: shifting both is no mistake the numbers see."""
    shifted = _edited([("ops.rope(q, position), ops.rope(k, position)",
                        "ops.rope(q, position + 1), ops.rope(k, position + 1)")])
    day10_step.check_decode_step(_function(shifted), cases)


def test_a_record_no_step_could_make_is_refused_with_words(cases):
    forged = [{"calls": [{"operations": [{"id": 0, "op": "embed", "token": 999}], "logits": 0}]}]
    found = day10_step.decode_step_problems(cases[:1], forged)
    assert len(found) == 1 and "not one the operations make" in found[0]
    assert "holds 2 cases for 1" in day10_step.decode_step_problems(cases[:1], [{}, {}])[0]
    logits_of_embedding = [{"calls": [{"operations": [{"id": 0, "op": "embed", "token": 1}], "logits": 0}]}]
    assert "not a vector of vocab" in day10_step.decode_step_problems(cases[:1], logits_of_embedding)[0]


# --------------------------------------------------------------------------------------------- the operations

def _ops(**sizes):
    return step_ops.RecordingOps(**{**day10_step.TINY, **sizes})


@pytest.mark.parametrize("call, error, words", [
    (lambda ops: ops.gemv(ops.layer(0).attn_q, ops.swiglu(ops.gemv(ops.layer(0).ffn_gate, ops.embed(1)),
                                                          ops.gemv(ops.layer(0).ffn_up, ops.embed(1)))),
     ValueError, "gemv: attn_q takes a vector of 64 (hidden) but got a vector of 96 (ffn)"),
    (lambda ops: ops.output, AttributeError,
     "no output matrix, the head is tied to the embedding: the logits are ops.gemv(ops.embedding"),
    (lambda ops: ops.layer(0).q_proj, AttributeError, "here it is called attn_q"),
    (lambda ops: ops.layer(0).attn_qq, AttributeError, "did you mean attn_q?"),
    (lambda ops: ops.layer(2), IndexError, "the model has 2 layer(s)"),
    (lambda ops: ops.rmsnorm(ops.layer(0).attn_norm, ops.embed(1)), TypeError, "the vector first"),
    (lambda ops: ops.gemv(ops.layer(0).attn_q, ops.layer(0).attn_norm), TypeError,
     "x must be a vector (a handle an operation returned), got the weight attn_norm of layer 0"),
    (lambda ops: ops.gemv(ops.layer(0).attn_norm, ops.embed(1)), TypeError, "is a norm's weight, not a matrix"),
    (lambda ops: ops.rope(ops.embed(1), 0), ValueError, "x must be q or k"),
    (lambda ops: ops.rope(ops.rope(ops.gemv(ops.layer(0).attn_q, ops.embed(1)), 0), 0), ValueError,
     "turned already"),
    (lambda ops: ops.rope(ops.gemv(ops.layer(0).attn_q, ops.embed(1)), 64), ValueError, "0 ... 63"),
    (lambda ops: ops.embed(80), ValueError, "token must be in 0 ... 79"),
    (lambda ops: ops.add(ops.embed(1), ops.gemv(ops.layer(0).attn_k, ops.embed(1))), ValueError,
     "add: x and y must have one shape"),
    (lambda ops: ops.embed(1) + ops.embed(2), TypeError, "ops.add(x, y)"),
    (lambda ops: ops.embed(True), TypeError, "must be an int"),
])
def test_recording_ops_refuse_with_words_where_it_happens(call, error, words):
    with pytest.raises(error) as raised:
        call(_ops())
    assert words in str(raised.value), str(raised.value)


def test_rope_of_attention_s_output_is_refused():
    ops = _ops()
    w = ops.layer(0)
    h = ops.rmsnorm(ops.embed(1), w.attn_norm)
    q, k, v = ops.rope(ops.gemv(w.attn_q, h), 0), ops.rope(ops.gemv(w.attn_k, h), 0), ops.gemv(w.attn_v, h)
    ops.write_cache(0, k, v, 0)
    o = ops.attention(0, q, 1)
    with pytest.raises(ValueError, match="rope turns q and k before attention, not its output"):
        ops.rope(o, 0)
    assert ops.written(0) == [0] and ops.written(1) == []
    assert [node["op"] for node in ops.trace][-2:] == ["write_cache", "attention"]


def test_the_driver_records_only_data_and_the_answer_s_lines():
    answer = _function(CORRECT)
    record = day10_step_driver.drive(answer, {"cases": [{"shape": day10_step.TINY, "tokens": [3, 4]}]}, step_ops)
    calls = record[0]["calls"]
    assert len(calls) == 2 and all(isinstance(call["logits"], int) for call in calls)
    assert {node["line"] for node in calls[0]["operations"]} == {3, 6, 7, 8, 9, 10, 11, 12, 13}
    assert len(calls[0]["operations"]) == 16 * 2 + 3
    assert json.loads(json.dumps(record)) == record                     # plain data only


# --------------------------------------------------------------------------------------------- graded

def test_graded_in_its_own_process_a_step_gets_the_record_and_the_verdict_it_gets_in_place(cases, runner):
    answer = _graded(CORRECT)
    assert hostcode.is_host_code(answer) and answer.name == "decode_step"
    data = day10_step.step_data(cases)
    in_place = hostcode.run(day10_step.DECODE_STEP, _function(CORRECT), data)
    in_process = hostcode.run(day10_step.DECODE_STEP, answer, data)
    assert in_place == in_process
    day10_step.decode_step_first_token(answer)

    wrong = _edited(MISTAKES[1][1])                                     # rope at position 0
    with pytest.raises(AssertionError) as graded:
        day10_step.check_decode_step(_graded(wrong), cases)
    with pytest.raises(AssertionError) as notebook:
        day10_step.check_decode_step(_function(wrong), cases)
    assert str(graded.value) == str(notebook.value) and "line 8 of your cell" in str(graded.value)


def test_graded_a_step_that_reads_the_course_or_imports_it_fails(cases, runner):
    path = host_answers.PROJECT_ROOT / "kernels" / "decode_step.py"
    reader = ("def decode_step(ops, token, position):\n"
              f"    source = open({str(path)!r}).read()\n"
              "    namespace = {}\n"
              "    exec(source[source.index('def decode_step'):], namespace)\n"
              "    return namespace['decode_step'](ops, token, position)\n")
    day10_step.check_decode_step(_function(reader), cases[:1])         # in the notebook, reading works
    with pytest.raises(AssertionError, match="raised at line 2 of your cell:\n  (FileNotFoundError|PermissionError)"):
        day10_step.check_decode_step(_graded(reader), cases[:1])
    importer = "import kernels.decode_step as d\n\ndecode_step = d.decode_step\n"
    with pytest.raises(AssertionError, match="does not define the function decode_step|could not be run"):
        day10_step.check_decode_step(HostCode(importer, "decode_step"), cases[:1])


# --------------------------------------------------------------------------------------------- on the kernels

@cuda.jit
def swiglu_without_silu(gate, up, out):
    """A student's SwiGLU kernel that forgot silu: gate * up."""
    n = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if n < out.size:
        out.reshape(out.size)[n] = gate.reshape(gate.size)[n] * up.reshape(up.size)[n]


def test_the_step_on_the_course_s_kernels_gives_the_numpy_model_s_logits_and_takes_a_student_s_kernel():
    from inference.numpy_model import NumpyModel
    from inference.tiny import tiny_model

    model = tiny_model(3, layers=1, hidden=32, ffn=32, heads=2, kv_heads=1, vocab=40, context=16)
    run = day10_step_kernels.decode_step_on_kernels(_function(CORRECT_BLOCKS), [5, 9], new_tokens=1, model=model,
                                            block_size=2)
    want = NumpyModel(model).forward(run["tokens"])
    assert np.abs(run["logits"] - want).max() < 1e-4 * np.abs(want).max()
    assert run["tokens"][2] == int(want[1].argmax()) and run["launches"] == [19, 19, 19]

    theirs = day10_step_kernels.decode_step_on_kernels(_function(CORRECT), [5], model=model,
                                               kernels={"swiglu": swiglu_without_silu})
    assert np.abs(theirs["logits"][0] - want[0]).max() > 1e-2
    with pytest.raises(ValueError, match="kernels may replace rmsnorm, rope, swiglu"):
        day10_step_kernels.decode_step_on_kernels(_function(CORRECT), [5], model=model, kernels={"gemv": swiglu_without_silu})
    with pytest.raises(TypeError, match="runs your step in the notebook"):
        day10_step_kernels.decode_step_on_kernels(HostCode(CORRECT, "decode_step"), [5], model=model)
