"""Tile and split-K sweep for the Triton FP8 GEMM on the GPU. Not part of the package: it chose
triton_gemm.PREFILL, config_for and segment_kb.

`gemm_tiles.py OUT.json` (sweep): for every (N, K) of the 8B shapes, decode (M = 1, 16, 64, CUDA-graph timed)
over segment sizes and tiles, and prefill (M = 8192) over tiles, each against BF16 in the same run; every
timed config is checked for the same bytes as another launch with the same segments (decode split-K vs the
one-program prefill walk), and the default dispatch for row invariance at M = 1, 7, 64, 65, 128 vs 4096.
`gemm_tiles.py OUT.json variants`: the shipped segments with the shipped decode tiles against swapped
operands (swap_ab), the fused segment sum and flattened prefill loops, same checks. Prints a table last.
"""

import json
import sys

import torch
import triton

from precision_engine.bench.gemm import timed
from precision_engine.bench.timing import rotation
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm, reference_gemm
from precision_engine.numerics.quantize import Quantized, quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import PREFILL, GemmConfig, block_scaled_gemm, config_for, segment_kb

ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
SHAPES = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (12288, 4096), (4096, 12288), (6144, 4096)]
DECODE_CFGS = {
    "64x64s4": GemmConfig(64, 64, 4, 4, 1),
    "64x128s3": GemmConfig(64, 128, 4, 3, 1),
    "64x32s5": GemmConfig(64, 32, 4, 5, 1),
    "64x64s4ptr": GemmConfig(64, 64, 4, 4, 1, tma=False),
}
PREFILL_CFGS = {
    "128x128w8s3ptr": GemmConfig(128, 128, 8, 3, tma=False),
    "128x128w8s3": GemmConfig(128, 128, 8, 3),
    "128x128w8s4": GemmConfig(128, 128, 8, 4),
    "128x256w8s3": GemmConfig(128, 256, 8, 3),
    "128x256w8s4": GemmConfig(128, 256, 8, 4),
    "256x128w8s3": GemmConfig(256, 128, 8, 3),
    "64x128w4s4": GemmConfig(64, 128, 4, 4),
    "128x64w4s4": GemmConfig(128, 64, 4, 4),
}
REPS, WARMUP = 30, 5


def gemm(xq, wq, cfg, seg, split=None):
    return block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=cfg, seg_kb=seg,
                             split=split)


def same(a, b):
    return torch.equal(a.view(torch.uint16), b.view(torch.uint16))


def inputs(m, n, k):
    def make():
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        return x, w, quantize_rows_1xG(x, ACT), quantize_blocks(w, WEIGHT)

    return rotation(make, (m + n) * k * 3)


def seg_candidates(n, k):
    num_kb = triton.cdiv(k, 128)
    segs = {num_kb, segment_kb(n, k)}
    for s in (2, 4, 8, 16):
        if num_kb // s >= 2 and triton.cdiv(n, 64) * s <= 2048:
            segs.add(triton.cdiv(num_kb, s))
    return sorted(segs, reverse=True)


def time_cfg(rows, base, sets, graphed, name, cfg, seg, split, ref):
    x, w, xq, wq = sets[0]
    try:
        out = gemm(xq, wq, cfg, seg, split)
        ms = timed(lambda x, w, xq, wq: gemm(xq, wq, cfg, seg, split), sets, graphed=graphed, warmup=WARMUP, reps=REPS)
    except Exception as err:  # a config that does not compile is a result too
        rows.append({**base, "cfg": name, "seg_kb": seg, "error": repr(err)[:300]})
        print(f"{base} {name} seg{seg} ERROR {repr(err)[:200]}", flush=True)
        return None
    r = {**base, "cfg": name, "seg_kb": seg, "split": split, "ms": ms, "x": base["bf16_ms"] / ms,
         "same_bytes": same(out, ref)}
    rows.append(r)
    return r


def decode(rows, summary):
    for n, k in SHAPES:
        num_kb = triton.cdiv(k, 128)
        for m in (1, 16, 64):
            sets = inputs(m, n, k)
            bf16 = timed(lambda x, w, xq, wq: torch.mm(x, w.t()), sets, graphed=True, warmup=WARMUP, reps=REPS)
            base = {"part": "decode", "m": m, "n": n, "k": k, "bf16_ms": bf16}
            xq, wq = sets[0][2], sets[0][3]
            results = []
            for seg in seg_candidates(n, k):
                ref = gemm(xq, wq, PREFILL, seg, split=False)  # the prefill walk, same segments
                for name, cfg in DECODE_CFGS.items():
                    r = time_cfg(rows, base, sets, True, name, cfg, seg, None, ref)
                    if r:
                        results.append(r)
            default_out = fp8_gemm(xq, wq, kernel=Kernel.TRITON)
            default_ms = timed(lambda x, w, xq, wq: fp8_gemm(xq, wq, kernel=Kernel.TRITON), sets, graphed=True,
                               warmup=WARMUP, reps=REPS)
            ref64 = reference_gemm(xq, wq, out_dtype=torch.float64)
            rel = ((default_out.double() - ref64).norm() / ref64.norm()).item()
            best = max(results, key=lambda r: r["x"])
            allsame = all(r["same_bytes"] for r in results)
            summary.append(f"dec {n:>5}x{k:<5} M={m:<2} bf16 {bf16 * 1e3:6.1f}us | default seg{segment_kb(n, k):>3}"
                           f" {default_ms * 1e3:6.1f}us x{bf16 / default_ms:4.2f} rel {rel:.1e} | best {best['cfg']}"
                           f" seg{best['seg_kb']}/{num_kb} {best['ms'] * 1e3:6.1f}us x{best['x']:4.2f}"
                           f" | allsame {allsame}")
            rows.append({**base, "cfg": "default", "seg_kb": segment_kb(n, k), "ms": default_ms,
                         "x": bf16 / default_ms, "rel_err": rel})
            print(summary[-1], flush=True)
            del sets


def prefill(rows, summary):
    m = 8192
    for n, k in [(4096, 4096), (14336, 4096), (4096, 14336), (1024, 4096)]:
        sets = inputs(m, n, k)
        bf16 = timed(lambda x, w, xq, wq: torch.mm(x, w.t()), sets, graphed=False, warmup=WARMUP, reps=REPS)
        cublas = timed(lambda x, w, xq, wq: fp8_gemm(xq, wq, kernel=Kernel.CUBLAS), sets, graphed=False,
                       warmup=WARMUP, reps=REPS)
        base = {"part": "prefill", "m": m, "n": n, "k": k, "bf16_ms": bf16, "cublas_ms": cublas}
        xq, wq = sets[0][2], sets[0][3]
        for seg in sorted({triton.cdiv(k, 128), segment_kb(n, k)}, reverse=True):
            ref = gemm(xq, wq, PREFILL_CFGS["128x128w8s3ptr"], seg, split=False)
            dec = gemm(Quantized(xq.data[:64], xq.scale[:64], xq.fmt), wq, DECODE_CFGS["64x64s4"], seg, split=True)
            dec_same = same(dec, ref[:64])
            results = [r for name, cfg in PREFILL_CFGS.items()
                       if (r := time_cfg(rows, base, sets, False, name, cfg, seg, False, ref))]
            for r in sorted(results, key=lambda r: -r["x"])[:4]:
                summary.append(f"pre {n:>5}x{k:<5} seg{seg:>3} bf16 {bf16:.4f}ms cublas x{bf16 / cublas:4.2f} | "
                               f"{r['cfg']:<20} {r['ms']:.4f}ms x{r['x']:4.2f} same {r['same_bytes']}"
                               f" dec_same {dec_same}")
                print(summary[-1], flush=True)
            bad = [r["cfg"] for r in results if not r["same_bytes"]]
            if bad:
                summary.append(f"pre {n}x{k} seg{seg}: NOT SAME BYTES: {bad}")
        del sets


def invariance(summary):
    """The default dispatch (fp8_gemm, triton): row i the same bytes at M = 1, 7, 64, 65, 128 and 4096."""
    for n, k in SHAPES:
        x = torch.randn(4096, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        xq, wq = quantize_rows_1xG(x, ACT), quantize_blocks(w, WEIGHT)
        full = fp8_gemm(xq, wq, kernel=Kernel.TRITON)
        bad = [m for m in (1, 7, 64, 65, 128)
               if not same(fp8_gemm(Quantized(xq.data[:m], xq.scale[:m], xq.fmt), wq, kernel=Kernel.TRITON), full[:m])]
        summary.append(f"inv {n:>5}x{k:<5} seg{segment_kb(n, k)}: {'OK' if not bad else f'DIFFER at M={bad}'}")
        print(summary[-1], flush=True)


def variants(rows, summary):
    """Shipped segments: shipped decode tiles vs swap_ab / fused sum; shipped prefill vs flattened loops."""
    for n, k in SHAPES:
        seg = segment_kb(n, k)
        for m in (1, 16, 64):
            sets = inputs(m, n, k)
            bf16 = timed(lambda x, w, xq, wq: torch.mm(x, w.t()), sets, graphed=True, warmup=WARMUP, reps=REPS)
            base = {"part": "variants", "m": m, "n": n, "k": k, "bf16_ms": bf16}
            xq, wq = sets[0][2], sets[0][3]
            ref = gemm(xq, wq, PREFILL, seg, split=False)
            tok = max(16, triton.next_power_of_2(m))
            cfgs = {"default": config_for(m, n, k),
                    "64-row tokens": GemmConfig(64, 64, 4, 4, 1, tma=False),
                    "64-row tokens+fused": GemmConfig(64, 64, 4, 4, 1, tma=False, fused_sum=True),
                    "swap128s4": GemmConfig(128, tok, 4, 4, 1, swap_ab=True),
                    "swap128s4+fused": GemmConfig(128, tok, 4, 4, 1, swap_ab=True, fused_sum=True),
                    "swap64s6+fused": GemmConfig(64, tok, 4, 6, 1, swap_ab=True, fused_sum=True)}
            line = f"var {n:>5}x{k:<5} M={m:<2} seg{seg:>3} bf16 {bf16 * 1e3:5.1f}us"
            for name, cfg in cfgs.items():
                def fn(x, w, xq, wq, cfg=cfg):
                    return block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=cfg)
                try:
                    outs = [fn(*sets[0]) for _ in range(5)]
                    ms = timed(fn, sets, graphed=True, warmup=WARMUP, reps=REPS)
                except Exception as err:
                    rows.append({**base, "cfg": name, "error": repr(err)[:300]})
                    line += f" | {name} ERR"
                    continue
                ok = all(same(o, ref) for o in outs)
                rows.append({**base, "cfg": name, "seg_kb": seg, "ms": ms, "x": bf16 / ms, "same_bytes": ok})
                line += f" | {name} x{bf16 / ms:4.2f}{'' if ok else ' DIFF'}"
            summary.append(line)
            print(line, flush=True)
            del sets
    for n, k in [(4096, 4096), (14336, 4096), (4096, 14336)]:
        m, seg = 8192, segment_kb(n, k)
        sets = inputs(m, n, k)
        bf16 = timed(lambda x, w, xq, wq: torch.mm(x, w.t()), sets, graphed=False, warmup=WARMUP, reps=REPS)
        base = {"part": "prefill-variants", "m": m, "n": n, "k": k, "bf16_ms": bf16}
        xq, wq = sets[0][2], sets[0][3]
        ref = gemm(xq, wq, PREFILL, seg, split=False)
        line = f"pre {n:>5}x{k:<5} seg{seg:>3} bf16 {bf16:.4f}ms"
        for name, cfg in {"PREFILL": PREFILL, "128x128w8s3": GemmConfig(128, 128, 8, 3),
                          "flatten": GemmConfig(128, 128, 8, 3, flatten=True),
                          "64x128w4s4-flatten": GemmConfig(64, 128, 4, 4, flatten=True)}.items():
            r = time_cfg(rows, base, sets, False, name, cfg, seg, False, ref)
            line += f" | {name} " + (f"x{r['x']:4.2f}{'' if r['same_bytes'] else ' DIFF'}" if r else "ERR")
        summary.append(line)
        print(line, flush=True)
        del sets


def main():
    rows, summary = [], []
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, torch.version.cuda, flush=True)
    invariance(summary)
    try:
        if sys.argv[2:] == ["variants"]:
            variants(rows, summary)
            return
        decode(rows, summary)
        prefill(rows, summary)
    finally:
        json.dump(rows, open(sys.argv[1], "w"), indent=1)
        print("\n".join(summary))


if __name__ == "__main__":
    main()
