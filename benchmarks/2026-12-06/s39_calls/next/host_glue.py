"""Where the eager fp8_bi_wblocks step's host time goes between its launches (4096x4096, 8192 tokens): the
functions `numerics.linear` calls (quantizers, re-quantizer, GEMMs, checks) wrapped with host timers, the step
issued 20 times while the GPU spins (no waits). Prints each wrapped function's host us a step and what is left:
the autograd Functions, saved tensors, the engine's hand-off and linear.py's own Python. The thirty-ninth session
measured the step at 1.6-2.0 ms, its launches called alone at about 0.62 ms."""

import collections
import time

import torch

from precision_engine.bench.linear import _specs, _train_step
from precision_engine.numerics import linear as L
from precision_engine.numerics.linear import Fp8Linear

spent = collections.Counter()
for name in ("fresh_quantized_weights", "quantize_rows_1xG", "quantize_rows_and_tokens_transposed",
             "requantize_blocks_transposed", "fp8_gemm", "weight_cache_key", "check_finite"):
    inner = getattr(L, name)

    def timed(*args, _inner=inner, _name=name, **kwargs):
        start = time.perf_counter()
        try:
            return _inner(*args, **kwargs)
        finally:
            spent[_name] += time.perf_counter() - start

    setattr(L, name, timed)

spec, numerics = _specs()["fp8_bi_wblocks"]
layer = Fp8Linear.from_linear(torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16), spec,
                              numerics=numerics)
x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    _train_step(layer, x, dy)
torch.cuda.synchronize()
for trial in range(3):
    spent.clear()
    torch.cuda._sleep(int(2e8))
    start = time.perf_counter()
    for _ in range(20):
        _train_step(layer, x, dy)
    total = (time.perf_counter() - start) / 20 * 1e6
    torch.cuda.synchronize()
    parts = {name: s / 20 * 1e6 for name, s in spent.items()}
    print(f"trial {trial}: step {total:.1f} us; "
          + ", ".join(f"{name} {us:.1f}" for name, us in sorted(parts.items(), key=lambda kv: -kv[1]))
          + f"; left outside them {total - sum(parts.values()) + parts.get('check_finite', 0) / 3:.1f}"
          " (fresh_quantized_weights makes one of the three check_finite calls)")
