"""Fast FP8-cache decode attention with and without the o_proj quantization epilogue (and the variant)."""
import sys, json, os
import torch
sys.path.insert(0, "exp")
import ti_var as TV
from precision_engine.numerics import triton_invariant as TI
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.bench.gemm import time_graphed
from precision_engine.bench.timing import rotation
ACT = PRESET_FORMATS["fp8_group_act"]
b, cap, d = 64, 512, 128
out = {}
for fp8 in (True, False):
  for ctx in (128, 256, 384):
    def make():
        q = torch.randn(b, 32, 1, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, 8, cap, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        if fp8: k, v = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
        return q, k, v, torch.full((b, 1), ctx - 1, device="cuda"), torch.full((b,), ctx, device="cuda")
    sets = rotation(make, b * 8 * ctx * d * 2 * (1 if fp8 else 2))
    kw = {"k_scale": torch.full((8,), 0.05, device="cuda"), "v_scale": torch.full((8,), 0.07, device="cuda")} if fp8 else {}
    row = {}
    for name, mod, quant in (("plain", TI, None), ("quant", TI, ACT), ("var_quant", TV, ACT)):
        fn = lambda q, k, v, p, n: mod.attention_forward(q, k, v, p, n, scale=d ** -0.5, fast=True, quantize=quant, **kw)
        row[name] = time_graphed(fn, sets, warmup=3, reps=30) * 1e3
    out[f"{'fp8' if fp8 else 'bf16'}_{ctx}"] = row
    print(fp8, ctx, {k: round(v, 2) for k, v in row.items()}, flush=True)
json.dump(out, open(os.environ.get("OUT", ".") + "/attn_quant.json", "w"), indent=1)
# one profiled launch of each for ncu
if os.environ.get("NCU"):
    q, k, v, p, n = make()
    for quant in (None, ACT):
        TI.attention_forward(q, k, v, p, n, scale=d ** -0.5, fast=True, quantize=quant)
    torch.cuda.synchronize()
