"""`precision bench kernels|linear|block|ceiling|quant|rollout`: FP8 against BF16 (the quantizers against a copy)
on this machine's GPU, same run, table + JSON."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from precision_engine.errors import UnsupportedError, UsageError


OutOpt = Annotated[Path | None, typer.Option("--out", help="Write every number and the environment as JSON.")]
QuickOpt = Annotated[bool, typer.Option("--quick", help="Two shapes, one training and one decode size.")]


def register(app: typer.Typer) -> None:
    """`precision bench kernels|linear|block|ceiling|quant|rollout`, one sub-command each."""
    from precision_engine.cli import bench_rollout

    group = typer.Typer(help="Benchmarks on this machine's GPU, every ratio against a baseline of the same run.",
                        no_args_is_help=True)

    @group.command()
    def kernels(out: OutOpt = None, quick: QuickOpt = False) -> None:
        """The FP8 GEMMs alone (cuBLAS, Triton, DeepGEMM, torchao's Triton GEMM) against the BF16 GEMM, same run.

        Shapes: the projections of Llama-3.1-8B (fused qkv and gate+up included) and Qwen3-8B at 8192/16384 tokens
        (training) and 1/16/64 (decode). torchao's columns show "-" with a note where it is not importable or
        cannot run.

        Examples:
          precision bench kernels --quick
        """
        _bench_kernels(out, quick)

    @group.command()
    def linear(
        out: OutOpt = None,
        quick: QuickOpt = False,
        variants: Annotated[str | None, typer.Option("--variants", help="Comma-separated columns to run (default "
                                                     "all: bf16,fp8_cublas,fp8_bi,fp8_bi_pinned,fp8_bi_wblocks,"
                                                     "torchao,torchao_triton); bf16, the baseline, always "
                                                     "runs.")] = None,
        tokens: Annotated[str | None, typer.Option("--tokens", help="Comma-separated token counts (default "
                                                   "8192,16384 and the decode sizes 1,16,64; --quick 8192,1); "
                                                   "up to 64 is a decode row.")] = None,
        shapes: Annotated[str | None, typer.Option("--shapes", help="Comma-separated weights N x K (default "
                                                   "the 8B projections; --quick two of them).")] = None,
        model: Annotated[str | None, typer.Option("--model", help="Instead of --shapes: the weights a model's "
                                                  "decoder layers run (a built-in name or an HF model directory), "
                                                  "its fused q/k/v and gate/up included.")] = None,
        rounds: Annotated[int, typer.Option("--rounds", min=1, help="Time each row's variants this many times, "
                                            "taking turns; a row reports their median and each ratio's range "
                                            "over the rounds (a card's clock moves under load: 3 or more to "
                                            "judge close ratios).")] = 1,
    ) -> None:
        """The FP8 linear layer (forward, forward+backward) against nn.Linear in BF16, same run, table + JSON.

        Training sizes are also timed as CUDA-graph replays (fwd/graph, fwd+bwd/graph), where the host's launches
        drop out; decode sizes always are. Eager rows end with each variant's host time to issue one call and its
        GPU time ("host / GPU ms"), marked host-bound where the host's is longer. Beside ours, torchao's
        Float8BlockwiseLinear (cuBLAS and Triton GEMMs) at training sizes, where torchao is importable and runs
        ("-" and a note otherwise); its first calls autotune for minutes, so ours run at every shape first. Each
        row is printed as it is measured and, with --out, written at once. Last, fp8_bi (the batch-invariant
        linear) against issue 12's targets per pass, the short rows named, and the rows it is ahead of torchao on.

        Examples:
          precision bench linear --out bench_linear.json
          precision bench linear --quick --variants fp8_bi,torchao --out bench_linear.json
          precision bench linear --tokens 1,16,64 --variants fp8_bi
          precision bench linear --shapes 6144x4096,28672x4096 --tokens 8192 --variants fp8_bi,torchao
          precision bench linear --model qwen3-8b --tokens 8192 --variants fp8_bi,fp8_bi_wblocks
          precision bench linear --tokens 8192 --variants fp8_bi_wblocks --rounds 3
        """
        from precision_engine.bench import linear as bench_linear

        if model and shapes:
            raise UsageError("--model and --shapes both choose the weights: pass one")
        # `is None`, not falsiness: an empty `--variants ''` is refused by the parser instead of running everything
        chosen = bench_linear.VARIANTS if variants is None else bench_linear.choose_variants(variants.split(","))
        ms = None if tokens is None else bench_linear.parse_tokens(tokens)
        weights = None if shapes is None else bench_linear.parse_shapes(shapes)
        left_out: list[str] = []
        if model:
            weights, left_out = bench_linear.model_shapes(model)
        require_gpu(out, "precision bench")
        if model:
            typer.echo(f"{model}: {', '.join(f'{n}x{k}' for n, k in weights)}"
                       + (f"; left out {', '.join(left_out)}" if left_out else ""))
        typer.echo(bench_linear.format_header())

        def on_row(row: dict, rows: list[dict]) -> None:
            typer.echo(bench_linear.progress(row))
            if out is not None:
                write_json(rows, out)

        rows = bench_linear.bench_linear(quick=quick, variants=chosen, shapes=weights, ms=ms, rounds=rounds,
                                         on_row=on_row)
        _report(bench_linear.format_table(rows), rows, out)

    @group.command()
    def block(
        model: Annotated[str | None, typer.Option("--model", help="Model spec (default llama-3.1-8b; --quick: "
                                                   "tiny-llama); one decoder layer of its shapes is built.")] = None,
        policy: Annotated[list[str] | None, typer.Option("--policy", help="A policy name or file; repeat for "
                                                         "several (default: bf16_baseline, jetrl_unified, "
                                                         "jetrl_unified_wgrad_blocks, jetrl_unified_kv, "
                                                         "fp8rl_rollout_tis).")] = None,
        mode: Annotated[list[str] | None, typer.Option("--mode", help="fast and/or batch-invariant "
                                                       "(default both).")] = None,
        batch: Annotated[int | None, typer.Option("--batch", min=1, help="Sequences (default 4; --quick 2).")] = None,
        seq: Annotated[int | None, typer.Option("--seq", min=1, help="Tokens per sequence (default 2048; --quick "
                                                "64).")] = None,
        reps: Annotated[int | None, typer.Option("--reps", min=1, help="Timed calls, median reported (default "
                                                 "20; --quick 2).")] = None,
        rounds: Annotated[int, typer.Option("--rounds", min=1, help="Time the policies' turns this many times; a "
                                            "row reports the median round and each ratio's range over the "
                                            "rounds (A/B of close policies: 3 or more).")] = 1,
        device: Annotated[str, typer.Option("--device", help="cuda, or cpu with --quick: a toy-size run of the "
                                            "wiring, not a measurement.")] = "cuda",
        out: OutOpt = None,
        quick: Annotated[bool, typer.Option("--quick", help="tiny-llama, 2 x 64 tokens, 2 reps.")] = False,
    ) -> None:
        """One decoder layer (attention + MLP + norms) per policy, training-phase rewrite, fwd and fwd+bwd.

        The layer alone (embedding and lm_head excluded), 4 x 2048 = 8192 tokens by default, BF16 weights
        marked changed before every call (as after an optimizer step), fast and batch-invariant mode, every
        policy and mode on a layer of its own, timed in turns call by call; ratios against bf16_baseline in the
        same run.

        Examples:
          precision bench block --out bench_block.json
          precision bench block --policy bf16_baseline --policy jetrl_unified --mode fast --batch 1 --seq 8192
          precision bench block --policy bf16_baseline --policy jetrl_unified --rounds 3
          precision bench block --quick --device cpu
        """
        if device not in ("cuda", "cpu"):
            raise UsageError(f"--device {device!r}: use cuda or cpu")
        if device == "cpu" and not quick:
            raise UsageError("--device cpu runs only with --quick (8B shapes take minutes on a CPU and measure "
                             "nothing); drop --device for the GPU")
        if device == "cpu":
            check_out(out)
        else:
            require_gpu(out, "precision bench block")
        from precision_engine.bench import block as bench_block
        from precision_engine.policy import load_policy

        for name in policy or ():  # a misspelt name or a broken file, refused before any timing
            load_policy(name)

        def echo_row(row: dict) -> None:
            result = f"{row['ms']:.3f} ms" if "ms" in row else f"failed: {row['error']}"
            typer.echo(f"  {row['policy']} {row['mode']} {row['pass']}: {result}")

        rows = bench_block.bench_block(
            model or ("tiny-llama" if quick else "llama-3.1-8b"),
            policies=tuple(policy) if policy else bench_block.POLICIES, modes=tuple(mode) if mode else None,
            batch=batch or (2 if quick else 4), seq=seq or (64 if quick else 2048), reps=reps or (2 if quick else 20),
            warmup=1 if quick else 3, rounds=rounds, device=device, on_row=echo_row,
        )
        _report(bench_block.format_table(rows), rows, out)
        if all("error" in row for row in rows):  # e.g. a model no policy can run (MoE): nothing was measured
            raise UsageError(f"every row failed, the first with: {rows[0]['error']}")

    @group.command()
    def ceiling(out: OutOpt = None, quick: QuickOpt = False,
                decode: Annotated[bool, typer.Option("--decode", help="The decode forward (M = 1, 16, 64) instead: "
                                                     "one read of the FP8 weight's bytes against BF16's GEMM.")]
                = False,
                tokens: Annotated[str | None, typer.Option("--tokens", help="Comma-separated token counts: above 64 "
                                                           "(default 8192,16384), or with --decode 1 to 64 (default "
                                                           "1,16,64).")] = None) -> None:
        """How far an FP8 linear could get ahead of BF16 on this GPU, against issue 12's targets, same run.

        For each 8B projection shape at 8192/16384 tokens (or --tokens; --quick: two shapes at 8192), the training
        step's three GEMMs are timed in BF16, in FP8 with one scale per tensor and fast accumulation (cuBLAS's
        fastest FP8 GEMM), and in FP8 with the Jet-RL block scales on cuBLAS's block-scaled GEMM and, where DeepGEMM is
        installed on a Hopper GPU, on DeepGEMM's (its wgrad accumulates into an FP32 dW, as with FP32 main
        grads), and the copy bandwidth is measured. Each ceiling per pass is printed twice: with the GEMMs alone,
        and with the fewest bytes the FP8 dataflow's quantizers must move added at copy bandwidth. The
        block-scaled ceiling takes each GEMM's fastest of cuBLAS and DeepGEMM (with each one's own where both
        ran). Beside them are our FP8 linear's own ratios (fp8_cublas, fp8_bi; eager, and graphed) on the same
        shape. A target above the block-scaled ceiling is out of reach for any linear on the block-scaled GEMMs
        measured; above the per-tensor GEMMs-only one, for any FP8 GEMM cuBLAS has. Last, a line per pass counts
        fp8_bi's rows (the batch-invariant linear, whose targets they are): met, short and beyond the ceiling,
        short within reach (named).

        --decode times the whole linear's decode forward instead (M = 1, 16, 64, or --tokens; --quick: M = 1):
        BF16's GEMM against one read of the FP8 weight's bytes, alone and followed by x cast to FP8 (the cheapest
        Q(x) in a launch of its own), as CUDA-graph replays, beside our fp8_bi and against the 1.5x target.

        Examples:
          precision bench ceiling --out bench_ceiling.json
          precision bench ceiling --decode --out bench_decode_ceiling.json
          precision bench ceiling --tokens 4096
          precision bench ceiling --decode --tokens 24,40,48,56
        """
        ms = _ceiling_tokens(tokens, decode)
        require_gpu(out, "precision bench ceiling")
        if decode:
            from precision_engine.bench import decode_ceiling as bench_ceiling
            run = bench_ceiling.bench_decode_ceiling
        else:
            from precision_engine.bench import ceiling as bench_ceiling
            run = bench_ceiling.bench_ceiling
        rows = run(quick=quick, ms=ms, on_row=lambda row: typer.echo(bench_ceiling.format_row(row)))
        _report(bench_ceiling.format_table(rows), rows, out)

    @group.command()
    def quant(
        out: OutOpt = None,
        sweep: Annotated[bool, typer.Option("--sweep", help="Also every launch config of the 1x128, "
                                            "tokens-transposed, re-quantizing, grad-output and SiLU-mul kernels, "
                                            "the re-quantizer's IEEE division and, on Hopper, its Gluon kernel's "
                                            "programs.")] = False,
        only: Annotated[str | None, typer.Option("--only", help="Comma-separated parts of kernel names: time the "
                                                 "kernels whose name holds one, e.g. 'requant,dy' (default all).")]
        = None,
        reps: Annotated[int, typer.Option("--reps", min=1, help="Timed calls a row, median reported.")] = 40,
    ) -> None:
        """The FP8 quantizers' bandwidth against a device copy measured in the same run, table + JSON.

        Each row is the fewest bytes its kernel must move (input read once, FP8 bytes and fp32 scales written once)
        over its median time, as GB/s and as a share of the copy's: the 1x128 activation quantizer, the
        tokens-transposed one, the wgrad re-quantizer (a saved FP8 activation to the wgrad operand), the grad
        output's two operands in one launch and in two, the RMSNorm and SiLU*mul producers beside the unfused
        ops, per-tensor scaling and the 128x128 weight blocks, on Llama-3.1-8B's shapes. Each is timed behind a
        copy of its bytes; the re-quantizers also behind the dgrad GEMM they follow in a backward (% dgrad). Rows
        print as they are measured; last, the rows with a target (issue 3's 1x128 quantizer, issue 12's
        re-quantizer: >= 80% of copy) say on how many shapes they reach it.

        Examples:
          precision bench quant --out bench_quant.json
          precision bench quant --only requant,dy --sweep
        """
        from precision_engine.bench import quant as bench_quant

        parts = tuple(part for part in (only or "").split(",") if part)
        if only is not None and not parts:
            raise UsageError(f"--only {only!r} names no kernel: give parts of kernel names, comma-separated")
        names = bench_quant.kernel_names(sweep)
        unmatched = [part for part in parts if not any(part in name for name in names)]
        if unmatched:
            raise UsageError(f"--only: no kernel's name holds {', '.join(map(repr, unmatched))}; the kernels"
                             f"{' (with --sweep)' if sweep else ''}: {', '.join(names)}")
        require_gpu(out, "precision bench quant")
        from precision_engine.bench.gemm import environment

        copy_gbps = bench_quant.copy_bandwidth()
        typer.echo(bench_quant.table_header(environment(), copy_gbps))

        def on_row(row: dict, rows: list[dict]) -> None:
            typer.echo(bench_quant.table_row(row))
            if out is not None:
                write_json(rows, out, copy_gbps=round(copy_gbps, 1), reps=reps)

        rows = bench_quant.run(reps=reps, sweep=sweep, only=parts, copy_gbps=copy_gbps, on_row=on_row)
        for line in bench_quant.summary(rows):
            typer.echo(line)
        if out is not None:
            typer.echo(f"wrote {out}")

    bench_rollout.register(group)
    app.add_typer(group, name="bench")


def _ceiling_tokens(tokens: str | None, decode: bool) -> tuple[int, ...] | None:
    """`bench ceiling --tokens`: decode sizes (1..64) with --decode, training sizes (above 64) without; a
    UsageError otherwise."""
    if tokens is None:
        return None
    from precision_engine.bench.gemm import DECODE_M
    from precision_engine.bench.linear import parse_tokens

    ms, widest = parse_tokens(tokens), DECODE_M[-1]  # `bench linear`'s line between decode and training rows
    if decode and max(ms) > widest:
        raise UsageError(f"--tokens {tokens!r}: the decode ceiling takes 1 to {widest} tokens (drop --decode for "
                         "training sizes)")
    if not decode and min(ms) <= widest:
        raise UsageError(f"--tokens {tokens!r}: the training ceiling takes more than {widest} tokens (add --decode "
                         "for decode sizes)")
    return ms


def check_out(out: Path | None) -> None:
    """Refuse an --out that cannot take the JSON file before benchmarking, not after: a directory, a path under a
    file, a folder that cannot be made."""
    from precision_engine.rl.runs.files import nearest_existing  # lazily: `precision validate` shares the app

    if out is None:
        return
    if out.is_dir():
        raise UsageError(f"--out {out}: a directory; --out names the JSON file to write (e.g. {out / 'bench.json'})")
    existing = nearest_existing(out.parent)
    if not existing.is_dir():
        raise UsageError(f"--out {out}: {existing} is a file, so no folder can be made there")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--out {out}: cannot create its folder ({err.strerror})") from None


def require_gpu(out: Path | None, verb: str) -> None:
    """Refuse before minutes of benchmarking, not after: an --out whose folder cannot be made, or no GPU."""
    check_out(out)
    import torch

    if not torch.cuda.is_available():
        raise UnsupportedError(f"{verb} needs a CUDA GPU (none is visible); run it on the GPU machine")


def _bench_kernels(out: Path | None, quick: bool) -> None:
    """The FP8 GEMMs against BF16 (median of CUDA-event timings, fresh random data, BF16 in the same run)."""
    require_gpu(out, "precision bench")
    from precision_engine.bench import gemm

    rows = gemm.bench_kernels(quick=quick)
    kinds = [k for k in ("cublas", "cublas_pinned", "triton", "deep_gemm") if any(f"{k}_ms" in r for r in rows)]
    kinds.append("torchao_triton")  # always a column: "-" and a note where torchao does not run
    _report(gemm.format_table(rows, kinds), rows, out)


def _report(table: str, rows: list[dict], out: Path | None) -> None:
    """Print the table (and whether AUTO's GEMMs ran on DeepGEMM); with --out, write the command, the environment
    and every row as JSON."""
    from precision_engine.bench import gemm

    typer.echo(table)
    note = gemm.deep_gemm_note()
    if note:
        typer.echo(note)
    if out is not None:
        write_json(rows, out)
        typer.echo(f"wrote {out}")


def write_json(rows: list[dict], out: Path, **extra: object) -> None:
    """The command, the environment, `extra`'s entries and every row as JSON, replacing `out` atomically: a reader,
    or a run killed mid-write, never leaves half a file."""
    from precision_engine.bench import gemm
    from precision_engine.rl.runs.files import write_atomic

    result = {"command": shlex.join(["precision", *sys.argv[1:]]), "env": gemm.environment(), **extra, "rows": rows}
    write_atomic(out, json.dumps(result, indent=1))
