"""Session 10, after shipping: gluon_block_scaled_gemm's default (training_config) against TRAINING and
TRAINING_SPLIT forced, BF16 torch.mm in the same run; default bitwise against the unsplit kernel."""
import json, sys
import torch
from precision_engine.bench.timing import median, rotation, time_cuda
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.numerics.gluon_gemm import TRAINING, TRAINING_SPLIT, gluon_block_scaled_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import segment_kb

ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
SHAPES = [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (14336, 4096), (1024, 4096)]
rows, bad = [], []
for n, k in SHAPES:
    seg = segment_kb(n, k)
    for m in (8192, 16384):
        def make():
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
            return x, w, quantize_rows_1xG(x, ACT), quantize_blocks(w, WEIGHT)
        sets = rotation(make, m * k * 3 + n * k * 3, l2_multiple=2.0, max_sets=3)
        g = lambda cfg: lambda x, w, xq, wq: gluon_block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale,
                                                                     b_scale_rows=128, seg_kb=seg, config=cfg)
        x, w, xq, wq = sets[0]
        if not torch.equal(g(None)(*sets[0]).view(torch.uint16), g(TRAINING)(*sets[0]).view(torch.uint16)):
            bad.append((n, k, m))
        timers = {"bf16": lambda x, w, xq, wq: torch.mm(x, w.t()), "default": g(None), "unsplit": g(TRAINING),
                  "split": g(TRAINING_SPLIT), "unsplit_b": g(TRAINING), "split_b": g(TRAINING_SPLIT)}
        row = {"n": n, "k": k, "m": m, **{nm: median(time_cuda(fn, warmup=5, reps=50, inputs_rotation=sets))
                                          for nm, fn in timers.items()}}
        rows.append(row)
        del sets, x, w, xq, wq
        torch.cuda.empty_cache()
json.dump({"rows": rows, "not_bitwise": bad}, open(sys.argv[1], "w"), indent=1)
print("not bitwise:", bad)
names = ["default", "unsplit", "split", "unsplit_b", "split_b"]
print("| N x K | M | BF16 ms | " + " | ".join(names) + " |")
for r in rows:
    print(f"| {r['n']}x{r['k']} | {r['m']} | {r['bf16']:.4f} | " + " | ".join(f"{r['bf16']/r[nm]:.2f}" for nm in names) + " |")
