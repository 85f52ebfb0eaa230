"""rope_qkv_sums at decode (64 rows, 32/8 heads, 4 parts of 6144): num_warps sweep (elementwise: no bit changes)."""
import torch
from precision_engine.bench.gemm import time_graphed
from precision_engine.bench.timing import rotation
from precision_engine.numerics import triton_invariant as TI
from precision_engine.numerics.contract import SplitSums

rows, n, parts = 64, 6144, 4
def make():
    ws = torch.randn(parts, rows, n, device="cuda")
    cos, sin = (torch.randn(64, 1, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return ws, cos, sin
sets = rotation(make, parts * rows * n * 4)
fn = lambda ws, cos, sin: TI.rope_qkv_sums(SplitSums(ws, torch.bfloat16), 64, (32, 8), cos, sin)
TI.ROPE_SUMS_WARPS = 4
ref = fn(*sets[0])
line = []
for w in (4, 8, 16):
    TI.ROPE_SUMS_WARPS = w
    out = fn(*sets[0])
    same = all(torch.equal(a.reshape(-1).view(torch.int16), b.reshape(-1).view(torch.int16)) for a, b in zip(out, ref))
    line.append(f"w{w}={time_graphed(fn, sets, warmup=3, reps=30) * 1e3:.2f}us{'' if same else '!'}")
print("rope_qkv_sums", " ".join(line))
