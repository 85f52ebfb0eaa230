"""Gluon decode GEMM (one TMA warp + one MMA warpgroup, split-K units) against the shipped Triton decode launch
and cuBLAS BF16 at the 8B decode shapes; bitwise against the Triton launch's segment sums / output."""
import itertools, json, os, sys, time
import torch
import torch.nn.functional as F
from precision_engine.bench.gemm import time_graphed
from precision_engine.bench.timing import rotation
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import block_scaled_gemm
from precision_engine.numerics.triton_gemm import segment_kb
from precision_engine.numerics import gluon_gemm as G
ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
SHAPES = [(28672, 4096), (6144, 4096), (4096, 14336), (4096, 4096)]
SPLIT_CFGS = [G.DecodeConfig(bn, st, ps, un) for bn, st, ps, un in
              [(128, 3, 1, 2), (128, 4, 1, 2), (128, 5, 1, 2), (128, 6, 1, 2), (128, 3, 2, 2), (64, 6, 1, 2), (64, 8, 1, 2),
               (64, 8, 1, 4), (64, 4, 2, 2)]]
WHOLE_CFGS = [G.DecodeConfig(bn, st, ps, un, True) for bn, st, ps, un in
              [(128, 3, 1, 2), (128, 4, 1, 2), (128, 5, 1, 2), (128, 6, 1, 2), (128, 4, 1, 4), (128, 5, 1, 4), (64, 8, 1, 4),
               (64, 8, 1, 2), (128, 3, 2, 2)]]
res = []
t0 = time.monotonic()
for m, (n, k) in itertools.product((64, 32, 17), SHAPES):
    def make():
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        return x, w, quantize_rows_1xG(x, ACT), quantize_blocks(w, WEIGHT)
    sets = rotation(make, n * k * 3)
    seg = segment_kb(n, k)
    tri = lambda x, w, xq, wq: block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, split_sums=True)
    ref = tri(*sets[0])
    ref_t = ref.parts if hasattr(ref, "parts") else ref
    row = {"m": m, "n": n, "k": k, "segments": ref_t.shape[0] if ref_t.dim() == 3 else 1}
    timing = m == 64
    if timing:
        row["bf16_us"] = time_graphed(lambda x, w, xq, wq: F.linear(x, w), sets, warmup=3, reps=30) * 1e3
        row["triton_us"] = time_graphed(tri, sets, warmup=3, reps=30) * 1e3
    cfgs = WHOLE_CFGS if row['segments'] == 1 or n == 28672 else SPLIT_CFGS
    if not timing:
        cfgs = cfgs[:2]
    for cfg in cfgs:
        name = f"n{cfg.block_n}s{cfg.stages}p{cfg.per_sm}u{cfg.unroll}{'w' if cfg.whole else ''}"
        fn = lambda x, w, xq, wq, cfg=cfg: G.gluon_decode_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg, config=cfg)
        try:
            out = fn(*sets[0])
            same = bool(torch.equal(out.view(torch.uint8), ref_t.contiguous().view(torch.uint8)))
            row[name] = {"bitwise": same}
            if timing:
                row[name]["us"] = time_graphed(fn, sets, warmup=3, reps=30) * 1e3
        except Exception as e:
            row[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    res.append(row)
    brief = {k_: (round(v["us"], 1) if "us" in v else v.get("error", "")[:60], v.get("bitwise")) if isinstance(v, dict) else (round(v, 1) if isinstance(v, float) else v) for k_, v in row.items()}
    print(brief, flush=True)
    json.dump(res, open(os.environ.get("OUT", ".") + "/gluon_decode.json", "w"), indent=1)
    del sets
    if time.monotonic() - t0 > 400:
        break
