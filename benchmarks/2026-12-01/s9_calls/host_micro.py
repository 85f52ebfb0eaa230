"""Host cost (us per call, median of 5 x 300 calls, GPU work tiny) of the pieces of an FP8 linear step."""
import time, statistics, sys
import torch, triton, triton.language as tl
from precision_engine.numerics.formats import PRESET_FORMATS as P
from precision_engine.numerics import triton_quant as tq, gluon_gemm as gg
from precision_engine.numerics.quantize import quantize_rows_1xG, quantize_tokens_transposed, quantize_blocks
from precision_engine.numerics.gemm import fp8_gemm
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.bench.linear import _specs, _train_step

def us(fn, n=300):
    for _ in range(20): fn()
    torch.cuda.synchronize()
    r = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n): fn()
        r.append((time.perf_counter() - t) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(r)

@triton.jit
def _k(a, b, c, d, n, m, s0, s1, s2, s3, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr, D: tl.constexpr):
    pid = tl.program_id(0)
    tl.store(a + pid, tl.load(b + pid))

x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
y = torch.empty_like(x)
rows = {}
rows["torch.empty 256x256"] = us(lambda: torch.empty((256, 256), device="cuda", dtype=torch.float8_e4m3fn))
rows["x.t() + stride"] = us(lambda: x.t().stride(0))
rows["triton tiny kernel[grid](14 args)"] = us(lambda: _k[(1,)](y, x, y, x, 1, 2, 3, 4, 5, 6, A=1, B=2, C=3, D=4))
ck = _k[(1,)](y, x, y, x, 1, 2, 3, 4, 5, 6, A=1, B=2, C=3, D=4)
dev = torch.cuda.current_device()
from triton.runtime.driver import driver
def direct():
    ck.run(1, 1, 1, driver.active.get_current_stream(dev), ck.function, ck.packed_metadata, None, None, None,
           y, x, y, x, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4)
rows["same, CompiledKernel.run direct"] = us(direct)
rows["torch.cuda.current_stream().cuda_stream"] = us(lambda: torch.cuda.current_stream().cuda_stream)
xs = torch.randn(128, 4096, device="cuda", dtype=torch.bfloat16)
rows["quantize_rows_1xG 128x4096"] = us(lambda: quantize_rows_1xG(xs, P["fp8_group_act"]))
rows["triton_quant.quantize_rows 128x4096"] = us(lambda: tq.quantize_rows(xs, P["fp8_group_act"]))
rows["quantize_tokens_transposed 128x4096"] = us(lambda: quantize_tokens_transposed(xs, P["fp8_group_tokens"]))
w = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
rows["quantize_blocks 256x4096"] = us(lambda: quantize_blocks(w, P["fp8_block_weight"]))
xq = quantize_rows_1xG(xs, P["fp8_group_act"]); wq = quantize_blocks(w, P["fp8_block_weight"])
rows["fp8_gemm BI (gluon) 128x256x4096"] = us(lambda: fp8_gemm(xq, wq, batch_invariant=True))
from precision_engine.numerics.formats import Kernel
rows["fp8_gemm cublas 128x256x4096"] = us(lambda: fp8_gemm(xq, wq, kernel=Kernel.CUBLAS, batch_invariant=False))
rows["gluon _descriptor"] = us(lambda: gg._descriptor(xq.data, 128))
rows["torch.mm bf16 128x256x4096"] = us(lambda: xs @ w.t())
lin = torch.nn.Linear(4096, 256, bias=False, device="cuda", dtype=torch.bfloat16)
xg = torch.randn(128, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
rows["nn.Linear train step"] = us(lambda: _train_step(lin, xg, dy), 100)
for name, (s, num) in _specs().items():
    layer = Fp8Linear.from_linear(lin, s, numerics=num)
    rows[f"Fp8Linear {name} train step"] = us(lambda: _train_step(layer, xg, dy), 100)
    with torch.no_grad():
        rows[f"Fp8Linear {name} fwd (cached W)"] = us(lambda: layer(xg), 100)
for k, v in rows.items():
    print(f"{v:9.1f} us  {k}")
