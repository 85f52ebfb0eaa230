"""maxnreg / KV block for the decode attention launches with the o_proj quantization epilogue."""
import sys, json, os, itertools
import torch
sys.path.insert(0, "exp")
import ti_var as TV
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.bench.gemm import time_graphed
from precision_engine.bench.timing import rotation
ACT = PRESET_FORMATS["fp8_group_act"]
b, cap, d = 64, 512, 128
out = {}
for fp8, ctx in itertools.product((True, False), (128, 256, 384)):
    def make():
        q = torch.randn(b, 32, 1, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, 8, cap, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        if fp8: k, v = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
        return q, k, v, torch.full((b, 1), ctx - 1, device="cuda"), torch.full((b,), ctx, device="cuda")
    sets = rotation(make, b * 8 * ctx * d * 2 * (1 if fp8 else 2))
    kw = {"k_scale": torch.full((8,), 0.05, device="cuda"), "v_scale": torch.full((8,), 0.07, device="cuda")} if fp8 else {}
    row = {}
    for fast in (True, False):
        fn = lambda q, k, v, p, n: TV.attention_forward(q, k, v, p, n, scale=d ** -0.5, fast=fast, quantize=ACT, **kw)
        TV.MAXNREG = {True: None, False: None}
        ref = fn(*sets[0])
        for regs, blk in itertools.product((None, 128, 120, 112, 96) if fast else (None, 168, 128), (64, 32) if fast else (64,)):
            TV.MAXNREG = {True: regs, False: regs}
            TV.FAST_KV_BLOCK = {True: blk, False: 32} if fp8 else {True: 64, False: blk}
            try:
                o = fn(*sets[0])
                same = torch.equal(o[0].view(torch.int16), ref[0].view(torch.int16)) and torch.equal(o[1].data.view(torch.int8), ref[1].data.view(torch.int8))
                row[f"{'fast' if fast else 'inv'}_r{regs}_n{blk}"] = (round(time_graphed(fn, sets, warmup=3, reps=30) * 1e3, 2), same)
            except Exception as e:
                row[f"{'fast' if fast else 'inv'}_r{regs}_n{blk}"] = str(e)[:100]
        TV.FAST_KV_BLOCK = {True: 64, False: 32}
    TV.MAXNREG = {True: None, False: None}
    out[f"{'fp8' if fp8 else 'bf16'}_{ctx}"] = row
    print(fp8, ctx, row, flush=True)
json.dump(out, open(os.environ.get("OUT", ".") + "/attn_regs.json", "w"), indent=1)
