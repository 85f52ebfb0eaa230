"""Decode-step small kernels at 8B decode shapes (batch 64, T = 1): heads per program and warps of kv_write
and rope_qkv_sums, silu_mul_quantize's tiles, fast FP8 attention's stages under the register cap."""
import itertools, json, os, sys
import torch
sys.path.insert(0, "exp")
import ti_old
from precision_engine.numerics import triton_invariant as TI
from precision_engine.numerics import triton_fused_quant as TFQ
from precision_engine.numerics.contract import SplitSums
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.bench.gemm import time_graphed
from precision_engine.bench.timing import rotation
ACT = PRESET_FORMATS["fp8_group_act"]
dev = "cuda"
res = {}
def timeit(fn, sets):
    return round(time_graphed(fn, sets, warmup=3, reps=50) * 1e3, 2)
def same(a, b):
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    return all(torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)) for x, y in zip(a, b))

# --- kv_write
B, H, D, S = 64, 8, 128, 512
for fp8 in (True, False):
    def make():
        y = torch.randn(B, 1, 6144, device=dev, dtype=torch.bfloat16) * 3
        k = y[..., 4096:5120].view(B, 1, H, D).transpose(1, 2)
        v = y[..., 5120:].view(B, 1, H, D).transpose(1, 2)
        ks = torch.zeros(B, H, S, D, device=dev, dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16)
        vs = torch.zeros_like(ks)
        pos = torch.randint(0, S, (B, 1), device=dev)
        return k, v, pos, ks, vs
    sets = rotation(make, B * H * D * 8, max_sets=16)
    sc = (torch.rand(H, device=dev) * 0.05 + 0.01, torch.rand(H, device=dev) * 0.05 + 0.01) if fp8 else ()
    def run(mod):
        def f(k, v, pos, ks, vs):
            mod.kv_write(k, v, pos, ks, vs, *sc)
            return ks, vs
        return f
    k, v, pos, ks, vs = sets[0]
    ref = tuple(t.clone() for t in run(ti_old)(k, v, pos, ks.clone(), vs.clone()))
    row = {"old": timeit(run(ti_old), sets)}
    for heads, warps in itertools.product((8, 4, 2, 1), (1, 2, 4)):
        TI.KV_WRITE_HEADS, TI.KV_WRITE_WARPS = heads, warps
        got = run(TI)(k, v, pos, ks.clone(), vs.clone())
        row[f"h{heads}w{warps}"] = (timeit(run(TI), sets), same(got, ref))
    TI.KV_WRITE_HEADS, TI.KV_WRITE_WARPS = 8, 4
    res[f"kv_write_{'fp8' if fp8 else 'bf16'}"] = row
    print("kv_write", fp8, row, flush=True)

# --- rope_qkv_sums
def make():
    parts = torch.randn(4, B, 6144, device=dev) * 0.5
    cos = torch.rand(B, 1, D, device=dev).bfloat16(); sin = torch.rand(B, 1, D, device=dev).bfloat16()
    return SplitSums(parts, torch.bfloat16), cos, sin
sets = rotation(make, 4 * B * 6144 * 4, max_sets=16)
run = lambda mod: (lambda s, c, n: mod.rope_qkv_sums(s, B, (32, 8), c, n))
ref = run(ti_old)(*sets[0])
row = {"old": timeit(run(ti_old), sets)}
for heads, warps in itertools.product((8, 4, 2, 1), (4, 8, 16)):
    TI.ROPE_SUMS_HEADS, TI.ROPE_SUMS_WARPS = heads, warps
    row[f"h{heads}w{warps}"] = (timeit(run(TI), sets), same(run(TI)(*sets[0]), ref))
TI.ROPE_SUMS_HEADS, TI.ROPE_SUMS_WARPS = 8, 16
res["rope_qkv_sums"] = row
print("rope_qkv_sums", row, flush=True)

# --- silu_mul_quantize
def make():
    gu = torch.randn(B, 28672, device=dev, dtype=torch.bfloat16) * 2
    return gu[:, :14336], gu[:, 14336:]
sets = rotation(make, B * 28672 * 2, max_sets=16)
ref = TFQ.silu_mul_quantize(*sets[0], ACT)
flat = lambda r: (r[0], r[1].data, r[1].scale)
row = {"shipped": timeit(lambda g, u: TFQ.silu_mul_quantize(g, u, ACT), sets)}
for bm, groups, warps in itertools.product((4, 8, 16, 32, 64), (1, 2), (1, 2, 4, 8)):
    cfg = {"BLOCK_M": bm, "GROUPS": groups, "num_warps": warps}
    try:
        ok = same(flat(TFQ.silu_mul_quantize(*sets[0], ACT, config=cfg)), flat(ref))
        row[f"m{bm}g{groups}w{warps}"] = (timeit(lambda g, u: TFQ.silu_mul_quantize(g, u, ACT, config=cfg), sets), ok)
    except Exception as e:
        row[f"m{bm}g{groups}w{warps}"] = str(e)[:80]
res["silu_mul_quant"] = row
print("silu", row, flush=True)

# --- fast FP8 attention, quantizing, under the cap: stages and slots
b, cap, d = 64, 512, 128
for ctx in (128, 256, 384):
    def make():
        q = torch.randn(b, 32, 1, d, device=dev, dtype=torch.bfloat16)
        k, v = (torch.randn(b, 8, cap, d, device=dev, dtype=torch.bfloat16).to(torch.float8_e4m3fn) for _ in range(2))
        return q, k, v, torch.full((b, 1), ctx - 1, device=dev), torch.full((b,), ctx, device=dev)
    sets = rotation(make, b * 8 * ctx * d * 2)
    kw = {"k_scale": torch.full((8,), 0.05, device=dev), "v_scale": torch.full((8,), 0.07, device=dev)}
    fn = lambda q, k, v, p, n: TI.attention_forward(q, k, v, p, n, scale=d ** -0.5, fast=True, quantize=ACT, **kw)
    row = {}
    for slots, stages, regs in itertools.product((32, 64), (2, 3, 4), (120, 128)):
        TI.FAST_KV_BLOCK, TI.ATTN_DECODE_STAGES, TI.FAST_ATTN_MAX_REGS = {True: slots, False: 32}, stages, {True: regs, False: None}
        row[f"n{slots}s{stages}r{regs}"] = timeit(fn, sets)
    TI.FAST_KV_BLOCK, TI.ATTN_DECODE_STAGES, TI.FAST_ATTN_MAX_REGS = {True: 64, False: 32}, 3, {True: 120, False: None}
    res[f"attn_fp8_quant_{ctx}"] = row
    print("attn", ctx, row, flush=True)
json.dump(res, open(os.environ.get("OUT", ".") + "/small_sweep.json", "w"), indent=1)
