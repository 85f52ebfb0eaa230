"""add_rms_norm over a split-K GEMM's segment sums at decode (M=64, H=4096, 4 / 8 parts): num_warps sweep."""
import torch, triton
from precision_engine.bench.gemm import time_graphed
from precision_engine.bench.timing import rotation
from precision_engine.numerics import triton_fused_quant as TF
from precision_engine.numerics.contract import SplitSums
from precision_engine.numerics.formats import PRESET_FORMATS

fmt = PRESET_FORMATS["fp8_group_act"]
h = 4096
for m, parts in ((64, 4), (64, 8), (8192, 0), (64, 0)):
    def make():
        x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(parts, m, h, device="cuda", dtype=torch.float32) if parts else torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
        return x, y, w
    sets = rotation(make, m * h * (2 + 4 * parts))
    ref = TF.add_rms_norm(sets[0][0], SplitSums(sets[0][1], torch.bfloat16) if parts else sets[0][1], sets[0][2], 1e-5, fmt)
    def launch(warps):
        def fn(x, y, w):
            r = torch.empty((m, h), dtype=x.dtype, device=x.device)
            out = torch.empty((m, h), dtype=x.dtype, device=x.device)
            q, scale = TF._rows_buffers(m, h, fmt, x.device)
            TF._add_rms_norm_kernel[(m,)](x, y, r, w, out, h, x.stride(0), y.stride(-2), r.stride(0), out.stride(0), 1e-5, q,
                scale, m, y.stride(0) if parts else 0, PARTS=parts, BLOCK_H=4096, INTERPRET=False, QUANT=True, G=fmt.group,
                **TF._fmt_args(fmt, None), num_warps=warps)
            return r, out, q
        return fn
    line = [f"m={m} parts={parts}:"]
    for warps in (8, 16, 32):
        r, out, q = launch(warps)(*sets[0])
        same = torch.equal(out.view(torch.int16), ref[1].view(torch.int16)) and torch.equal(q.view(torch.uint8), ref[2].data.view(torch.uint8))
        ms = time_graphed(launch(warps), sets, warmup=3, reps=30)
        line.append(f"w{warps}={ms * 1e3:.2f}us{'' if same else '!'}")
    print(" ".join(line), flush=True)
