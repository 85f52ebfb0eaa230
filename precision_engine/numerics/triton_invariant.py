"""Batch-invariant Triton kernels for CUDA tensors: `linear`, `rms_norm`, `attention`, `log_softmax`, `rope`.

`numerics/invariant.py` dispatches here for CUDA tensors (signatures as in CONTRACTS.md). Each op gives a row
the same bits whatever else shares the call, because no choice that changes arithmetic depends on the number
of rows, their order or padding. Each lives in its own module, which says how:

- `linear` (x @ W^T, bf16/fp16 in, fp32 accumulate): `triton_linear`, one tile shape for every M and K segments
  that depend on the weight's shape only.
- `attention`: `triton_attention`, one kernel for decode and the full causal forward (and `kv_write`, the cache
  it reads); `fast=True` is fast mode's launch, not batch-invariant.
- `rms_norm`: `triton_norm`, one program per row, a fixed block size and warp count per row length.
- `rope`, `rope_qk`: `triton_rope`, a token's heads in one program.
- `log_softmax`: `triton_sampling`, a fixed split of each row into vocabulary chunks, shared with the fused
  sampler.

Each kernel has a pure-torch twin (`*_twin`) that spells out the same arithmetic in torch ops; the tests check
kernel against twin and both against float64 (tests/numerics/test_triton_invariant.py, in Triton's CPU
interpreter; full sizes in tests/numerics/gpu/test_triton_invariant_gpu.py). Backward passes are not
batch-invariant and need not be (only forward logprobs are compared).
"""

from precision_engine.numerics.triton_attention import (
    KV_BLOCK,
    attention,
    attention_quantize_fits,
    attention_reference,
    attention_twin,
    kv_write,
)
from precision_engine.numerics.triton_linear import (
    LINEAR,
    LinearConfig,
    linear,
    linear_forward,
    linear_twin,
    segment_kb,
)
from precision_engine.numerics.triton_norm import rms_norm, rms_norm_backward, rms_norm_twin
from precision_engine.numerics.triton_rope import rope, rope_qk
from precision_engine.numerics.triton_sampling import log_softmax, log_softmax_twin

__all__ = ["KV_BLOCK", "LINEAR", "LinearConfig", "attention", "attention_quantize_fits",
           "attention_reference", "attention_twin", "kv_write", "linear", "linear_forward", "linear_twin",
           "log_softmax", "log_softmax_twin", "rms_norm", "rms_norm_backward", "rms_norm_twin", "rope", "rope_qk",
           "segment_kb"]
