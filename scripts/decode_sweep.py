"""Decode-size sweep of the FP8 block GEMM's persistent launch on the GPU. Not part of the package: it chooses
`triton_gemm.config_for` at M <= 64.

`decode_sweep.py OUT.json [--budget S]`: for the GEMMs one 8B decode step runs (fused q/k/v, o, fused
gate/up, down) at M = 1, 16, 64, CUDA-graph timed over input sets larger than the L2: BF16 `F.linear`, the
shipped decode launch, and persistent launches over tiles, stages, programs per SM and split or whole tiles.
Every variant's bytes are checked against the shipped launch's. Rows are printed and the JSON rewritten as
they finish, and no new variant starts after --budget seconds, so a cut-short call keeps what it measured.
`decode_sweep.py OUT.json --bf16-invariant`: the same for the batch-invariant BF16 linear's launches;
`--bf16-tiles`: its tile shapes (other bits, so checked for row invariance instead); `--attention`: decode
attention, the invariant launch over pipeline stages and fast mode's over KV slots per step, warps and stages.
"""

import argparse
import itertools
import json
import time
from dataclasses import asdict

import torch
import torch.nn.functional as F

from precision_engine.bench.gemm import environment, time_graphed
from precision_engine.bench.timing import rotation
from precision_engine.numerics.formats import PRESET_FORMATS
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG
from precision_engine.numerics.triton_gemm import GemmConfig, block_scaled_gemm, config_for
from precision_engine.rl.runs.files import write_atomic

ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
SHAPES = [(28672, 4096), (6144, 4096), (4096, 14336), (4096, 4096)]  # what the decoder's decode step runs
MS = (64, 16, 1)


def save(out: str, result: dict) -> None:
    write_atomic(out, json.dumps(result, indent=1))


def measure(check, fn, sets: list[tuple], reps: int, check_name: str = "bitwise") -> dict:
    """{"ms", check_name: check()} for one variant, or {"error"}: one config failing to compile must not lose
    the sweep."""
    try:
        passed = check()
        return {"ms": time_graphed(fn, sets, warmup=3, reps=reps), check_name: passed}
    except Exception as err:  # noqa: BLE001
        return {"error": f"{type(err).__name__}: {str(err)[:160]}"}


def variants(m: int):
    """(name, config, split) of the persistent launches tried at this M."""
    if m <= 16:  # swapped: weight rows on wgmma's 64/128 side, tokens in a 16-wide tile
        grid = itertools.product((64, 128), (4, 6), (1, 2), (True, False))
        for bm, stages, per_sm, split in grid:
            yield (f"swap{bm}s{stages}p{per_sm}{'split' if split else 'whole'}",
                   GemmConfig(bm, 16, 4, stages, 1, swap_ab=True, flatten=True, persistent=per_sm), split)
        return
    grid = [(64, s, p) for s in (3, 4, 6) for p in (1, 2)] + [(128, s, p) for s in (3, 4) for p in (1, 2)] \
        + [(32, 6, p) for p in (2, 3)]
    for (bn, stages, per_sm), split in itertools.product(grid, (True, False)):
        yield (f"64x{bn}s{stages}p{per_sm}{'split' if split else 'whole'}",
               GemmConfig(64, bn, 4, stages, 1, flatten=True, persistent=per_sm), split)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--budget", type=float, default=200.0, help="seconds after which no variant starts")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--bf16-invariant", action="store_true", help="sweep the batch-invariant BF16 linear")
    parser.add_argument("--bf16-tiles", action="store_true", help="tile shapes of the invariant BF16 linear")
    parser.add_argument("--attention", action="store_true", help="decode attention: invariant and fast launches")
    args = parser.parse_args()
    if args.attention:
        return attention_decode(args.out, args.reps)
    if args.bf16_tiles:
        return bf16_tiles(args.out, args.reps)
    if args.bf16_invariant:
        return bf16_invariant(args.out, args.reps)
    start = time.monotonic()
    result = {"env": environment(), "rows": []}
    for m, (n, k) in itertools.product(MS, SHAPES):
        def make():
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
            return x, w, quantize_rows_1xG(x, ACT), quantize_blocks(w, WEIGHT)

        sets = rotation(make, n * k * 3)

        def gemm(cfg, split):
            return lambda x, w, xq, wq: block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128,
                                                          config=cfg, split=split)

        row = {"n": n, "k": k, "m": m, "shipped": asdict(config_for(m, n, k))}
        row["bf16_ms"] = time_graphed(lambda x, w, xq, wq: F.linear(x, w), sets, warmup=3, reps=args.reps)
        row["shipped_ms"] = time_graphed(gemm(None, None), sets, warmup=3, reps=args.reps)
        ref = gemm(None, None)(*sets[0])
        row["variants"] = {}
        for name, cfg, split in variants(m):
            if time.monotonic() - start > args.budget:
                row["cut_short"] = True
                break
            fn = gemm(cfg, split)
            row["variants"][name] = measure(
                lambda fn=fn: torch.equal(fn(*sets[0]).view(torch.uint16), ref.view(torch.uint16)), fn, sets,
                args.reps)
        timed_ = {k_: v for k_, v in row["variants"].items() if "ms" in v}
        best = min(timed_, key=lambda name: timed_[name]["ms"]) if timed_ else None
        row["best"] = best
        result["rows"].append(row)
        save(args.out, result)
        print(f"{n:>6}x{k:<6} M={m:<3} bf16 {row['bf16_ms'] * 1e3:7.1f} us  shipped {row['shipped_ms'] * 1e3:7.1f} us"
              f" ({row['bf16_ms'] / row['shipped_ms']:.2f}x)  best {best}: "
              + (f"{timed_[best]['ms'] * 1e3:7.1f} us ({row['bf16_ms'] / timed_[best]['ms']:.2f}x)"
                 f" bitwise={timed_[best]['bitwise']}" if best else "-")
              + f"  bad bits: {sum(not v['bitwise'] for v in timed_.values())}"
              + f"  errors: {sum('error' in v for v in row['variants'].values())}", flush=True)
        del sets


def bf16_invariant(out: str, reps: int) -> None:
    """The batch-invariant BF16 linear (`triton_invariant.linear_forward`) at M = 64 and 16: split-K (shipped),
    whole tiles one program each, and persistent whole tiles, over stages; bytes checked against the shipped."""
    from dataclasses import replace

    from precision_engine.numerics import triton_invariant as TI

    result = {"env": environment(), "rows": []}
    for m, (n, k) in itertools.product((64, 16), SHAPES + [(128256, 4096)]):
        def make():
            return (torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                    torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02)

        sets = rotation(make, n * k * 2)
        row = {"n": n, "k": k, "m": m, "bf16_ms": time_graphed(F.linear, sets, warmup=3, reps=reps),
               "shipped_ms": time_graphed(TI.linear_forward, sets, warmup=3, reps=reps), "variants": {}}
        ref = TI.linear_forward(*sets[0])
        for stages, (name, split, persistent) in itertools.product(
                (3, 4, 6), (("split", True, False), ("whole", False, False), ("persistent", False, True))):
            cfg = replace(TI.LINEAR, num_stages=stages, persistent=persistent)
            fn = lambda x, w, cfg=cfg, split=split: TI.linear_forward(x, w, split=split, config=cfg)  # noqa: E731
            row["variants"][f"{name}s{stages}"] = measure(
                lambda fn=fn: torch.equal(fn(*sets[0]).view(torch.uint16), ref.view(torch.uint16)), fn, sets, reps)
        result["rows"].append(row)
        save(out, result)
        timed_ = {k_: v for k_, v in row["variants"].items() if "ms" in v}
        best = min(timed_, key=lambda name: timed_[name]["ms"])
        print(f"bf16-inv {n:>6}x{k:<6} M={m:<3} cublas {row['bf16_ms'] * 1e3:7.1f} us  shipped "
              f"{row['shipped_ms'] * 1e3:7.1f} us ({row['bf16_ms'] / row['shipped_ms']:.2f}x)  best {best} "
              f"{timed_[best]['ms'] * 1e3:7.1f} us ({row['bf16_ms'] / timed_[best]['ms']:.2f}x)  "
              f"bad bits: {sum(not v['bitwise'] for v in timed_.values())}", flush=True)
        del sets


def bf16_tiles(out: str, reps: int) -> None:
    """Tile shapes of the invariant BF16 linear at M = 64 (these change bits, so each is checked for row
    invariance against its own M = 256 launch instead of against the shipped bytes)."""
    from dataclasses import replace

    from precision_engine.numerics import triton_invariant as TI

    result = {"env": environment(), "rows": []}
    for n, k in SHAPES:
        def make():
            return (torch.randn(256, k, device="cuda", dtype=torch.bfloat16),
                    torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02)

        sets = rotation(make, n * k * 2)
        decode = [(x[:64], w) for x, w in sets]
        row = {"n": n, "k": k, "m": 64, "bf16_ms": time_graphed(F.linear, decode, warmup=3, reps=reps),
               "shipped_ms": time_graphed(TI.linear_forward, decode, warmup=3, reps=reps), "variants": {}}
        for bk, bn, stages in itertools.product((64, 128), (64, 128), (3, 4)):
            cfg = replace(TI.LINEAR, block_k=bk, block_n=bn, num_stages=stages)
            fn = lambda x, w, cfg=cfg: TI.linear_forward(x, w, config=cfg)  # noqa: E731
            x, w = sets[0]
            row["variants"][f"k{bk}n{bn}s{stages}"] = measure(
                lambda fn=fn: torch.equal(fn(x[:64], w).view(torch.uint16), fn(x, w)[:64].view(torch.uint16)),
                fn, decode, reps, check_name="invariant")
        result["rows"].append(row)
        save(out, result)
        print(f"bf16-tiles {n:>6}x{k:<6} cublas {row['bf16_ms'] * 1e3:6.1f} shipped {row['shipped_ms'] * 1e3:6.1f} "
              + " ".join(f"{name}={v['ms'] * 1e3:.1f}{'' if v['invariant'] else '!'}" if "ms" in v else f"{name}=ERR"
                         for name, v in row["variants"].items()), flush=True)
        del sets, decode


def attention_decode(out: str, reps: int) -> None:
    """Decode attention (batch 64, 32/8 heads, D 128, a 512-slot cache filled to 128, 256 and 384, BF16 and FP8
    KV): the invariant launch over num_stages (a scheduling choice: bytes checked against 2 stages) and fast
    mode's launch over KV slots per step, warps and stages (checked against the invariant launch within 8e-3,
    norm-relative; named n<slots>w<warps>s<stages>)."""
    from precision_engine.numerics import triton_attention as TA

    b, cap, d = 64, 512, 128
    shipped = (TA.ATTN_STAGES, TA.ATTN_DECODE_STAGES, TA.FAST_KV_BLOCK, TA.FAST_ATTN_WARPS)
    result = {"env": environment(), "rows": [], "shipped": {
        "stages": shipped[1], "fast_kv_block": {"fp8": shipped[2][True], "bf16": shipped[2][False]},
        "fast_warps": shipped[3]}}
    for fp8, ctx in itertools.product((True, False), (128, 256, 384)):
        def make():
            q = torch.randn(b, 32, 1, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(b, 8, cap, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            if fp8:
                k, v = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
            return q, k, v, torch.full((b, 1), ctx - 1, device="cuda"), torch.full((b,), ctx, device="cuda")

        sets = rotation(make, b * 8 * ctx * d * 2 * 2)
        one = torch.ones((), device="cuda")
        kw = {"k_scale": one, "v_scale": one} if fp8 else {}

        def launch(fast):
            return lambda q, k, v, p, n: TA.attention_forward(q, k, v, p, n, scale=d ** -0.5, fast=fast, **kw)

        TA.ATTN_DECODE_STAGES = 2
        ref = launch(False)(*sets[0])
        row = {"fp8_kv": fp8, "context": ctx, "invariant": {}, "fast": {}}
        for stages in (2, 3, 4):
            TA.ATTN_DECODE_STAGES = stages
            row["invariant"][stages] = measure(
                lambda: torch.equal(launch(False)(*sets[0]).view(torch.int16), ref.view(torch.int16)),
                launch(False), sets, reps)
        for block_n, warps, stages in itertools.product((32, 64, 128), (4, 8), (2, 3, 4)):
            TA.FAST_KV_BLOCK, TA.FAST_ATTN_WARPS, TA.ATTN_DECODE_STAGES = {fp8: block_n}, warps, stages
            row["fast"][f"n{block_n}w{warps}s{stages}"] = measure(
                lambda: ((launch(True)(*sets[0]).float() - ref.float()).norm() / ref.float().norm()).item() < 8e-3,
                launch(True), sets, reps, "close")
        TA.ATTN_STAGES, TA.ATTN_DECODE_STAGES, TA.FAST_KV_BLOCK, TA.FAST_ATTN_WARPS = shipped
        result["rows"].append(row)
        save(out, result)
        timed_ = {name: v["ms"] for name, v in row["fast"].items() if "ms" in v and v["close"]}
        best = min(timed_, key=timed_.get) if timed_ else None
        shipped_fast = row["fast"].get(f"n{shipped[2][fp8]}w{shipped[3]}s{shipped[1]}", {}).get("ms", 0)
        print(f"attention decode fp8_kv={fp8} ctx={ctx}: invariant " + " ".join(
            f"s{n}={v['ms'] * 1e3:.1f}" for n, v in row["invariant"].items() if "ms" in v)
            + f" | fast shipped={shipped_fast * 1e3:.1f}"
            + (f" best {best}={timed_[best] * 1e3:.1f}" if best else " no fast variant ran"), flush=True)


if __name__ == "__main__":
    main()
