"""Inclusive host time per step of each piece of the FP8 linear's training step (perf_counter wrappers, no
profiler), 4096x4096 at M = 8192 and M = 128, fp8_bi and fp8_cublas; plus the BF16 step."""
import time, statistics, collections, functools, sys
import torch
import precision_engine.numerics.linear as L, precision_engine.numerics.gemm as G
import precision_engine.numerics.quantize as Q, precision_engine.numerics.gluon_gemm as GG
import precision_engine.numerics.triton_quant as TQ, precision_engine.numerics.triton_gemm as TG
from precision_engine.bench.linear import _specs, _train_step
acc = collections.Counter(); calls = collections.Counter()
def wrap(mod, name, label=None):
    f = getattr(mod, name); label = label or f"{mod.__name__.split('.')[-1]}.{name}"
    @functools.wraps(f)
    def w(*a, **k):
        t = time.perf_counter()
        try: return f(*a, **k)
        finally: acc[label] += time.perf_counter() - t; calls[label] += 1
    setattr(mod, name, w)
for mod, names in ((L, ["fp8_linear", "quantize_rows_1xG", "quantize_tokens_transposed", "requantize_tokens_transposed",
                        "fp8_gemm", "check_finite", "transpose_operand", "quantize_blocks", "_fprop"]),
                   (G, ["_cublas_gemm", "resolve_kernel", "_check_operands"]), (TG, ["transpose_bytes", "block_scaled_gemm"]),
                   (GG, ["gluon_block_scaled_gemm", "_descriptor"]), (TQ, ["quantize_rows", "quantize_blocks", "_launch_tokens_t"])):
    for n in names:
        if hasattr(mod, n): wrap(mod, n, f"{mod.__name__.split('.')[-1]}.{n}")
# the module methods and the autograd function
for cls, names in ((L.Fp8Linear, ["forward", "quantized_weight", "_quantized_weight_t", "_quantize_weight"]),):
    for n in names:
        f = getattr(cls, n)
        def mk(f, n):
            def w(*a, **k):
                t = time.perf_counter()
                try: return f(*a, **k)
                finally: acc[f"Fp8Linear.{n}"] += time.perf_counter() - t; calls[f"Fp8Linear.{n}"] += 1
            return w
        setattr(cls, n, mk(f, n))
fb = L._Fp8LinearFn.backward
def bw(ctx, dy):
    t = time.perf_counter()
    try: return fb(ctx, dy)
    finally: acc["_Fp8LinearFn.backward"] += time.perf_counter() - t; calls["_Fp8LinearFn.backward"] += 1
L._Fp8LinearFn.backward = staticmethod(bw)
# import-time bindings inside gemm.py and quantize.py point at the triton modules' functions: rebind
def run(label, layer, x, dy, steps=50):
    for _ in range(10): _train_step(layer, x, dy)
    torch.cuda.synchronize(); acc.clear(); calls.clear()
    t = time.perf_counter(); hs = []
    for _ in range(steps):
        torch.cuda.synchronize(); t0 = time.perf_counter(); _train_step(layer, x, dy); hs.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    print(f"== {label}: host {statistics.median(hs)*1e6:.0f} us/step (median; wrappers on)")
    for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
        print(f"   {v/steps*1e6:8.1f} us/step  {calls[k]/steps:4.1f} calls  {k}")
    sys.stdout.flush()
for m in (8192, 128):
    lin = torch.nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
    run(f"bf16 M={m}", lin, x, dy)
    for name, (s, num) in _specs().items():
        run(f"{name} M={m}", L.Fp8Linear.from_linear(lin, s, numerics=num), x, dy)
