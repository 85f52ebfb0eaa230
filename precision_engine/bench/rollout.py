"""Rollout throughput on one GPU: the built-in engine against transformers' `generate`, same weights, one run.

    python -m precision_engine.bench.rollout --model llama-3.1-8b --batch 64 --prompt 128 --gen 256

Random BF16 weights (drawn on the GPU), `batch` random prompts of `prompt` tokens, `gen` sampled tokens each
(temperature 1, no EOS, so every row generates all of them). For each format (bf16_baseline; W8A8 with
fp8_rollout_naive's rollout rules; W8A8 + FP8 KV with jetrl_unified_kv's, KV scales calibrated on the prompts)
and each mode (fast: cuBLAS / SDPA / `torch._scaled_mm` where the kernel table picks it; batch-invariant: the
Triton kernels) the engine's `generate` is timed end to end (prefill, CUDA-graph decode, assembly; the first
call, which captures the graph, is the warm-up): tok/s = generated tokens / wall time, median of `runs`
CUDA-synchronised calls. Then transformers' `generate` on the same weights and batch with a static cache,
eager and compiled (`CompileConfig(fullgraph=True, mode="reduce-overhead")`), each in try/except: a row
records what ran or the error. Rows are reported (and written to `out`) as they finish, so a run cut short
keeps what it measured.

    python -m precision_engine.bench.rollout --profile 20       # where a decode step's GPU time goes

profiles 20 replays of the captured decode step (BF16 and W8A8 + FP8 KV, fast mode) instead: kernels per step,
GPU ms per step and the top kernels by total time (`profile_decode`).
"""

from __future__ import annotations

import argparse
import gc
import json
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import torch

from precision_engine.bench.gemm import error_text
from precision_engine.models.decoder import Decoder, calibrate_kv_scales
from precision_engine.models.loader import resolve_config

# (format label, the shipped policy whose rollout rules and KV cache give that format)
FORMATS = (("bf16", "bf16_baseline"), ("fp8 w8a8", "fp8_rollout_naive"), ("fp8 w8a8 + fp8 kv", "jetrl_unified_kv"))
MODES = (("fast", False), ("batch-invariant", True))
BASELINE = ("bf16", "fast")  # the row every ratio is relative to


def random_decoder(config: Mapping, *, device: str | torch.device = "cuda", seed: int = 0,
                   dtype: torch.dtype = torch.bfloat16, batch_invariant: bool = True) -> Decoder:
    """A Decoder with HF's random init (normal(0, initializer_range), norms 1, biases 0) drawn on `device`
    from a seeded generator of that device: an 8B model in seconds (`Decoder.from_config` draws on the CPU)."""
    with torch.device("meta"):
        model = Decoder(dict(config), batch_invariant=batch_invariant)
    model = model.to(dtype=dtype).to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    std = model.config.initializer_range
    model.init_weights_(lambda param: param.normal_(0.0, std, generator=generator))
    return model.eval()


def timed_calls(fn: Callable[[], int], runs: int, *, warmup: int = 1) -> tuple[float, list[float]]:
    """(median tokens/s, seconds of each timed call) of fn() -> generated tokens, CUDA-synchronised."""
    for _ in range(warmup):
        fn()
    seconds, rates = [], []
    for _ in range(runs):
        _synchronize()
        start = time.perf_counter()
        tokens = fn()
        _synchronize()
        seconds.append(time.perf_counter() - start)
        rates.append(tokens / seconds[-1])
    return statistics.median(rates), seconds


def bench_rollout(model_spec: str = "llama-3.1-8b", *, batch: int = 64, prompt: int = 128, gen: int = 256,
                  runs: int = 3, hf_runs: int = 1, transformers_rows: bool = True, seed: int = 0,
                  device: str = "cuda", on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Rows {variant, mode, tok_s, seconds, vs_bf16_fast, ...} or {..., error}; `on_row` sees each as it
    finishes. `device` cpu runs the same loop (tests, at toy sizes)."""
    from precision_engine.rewrite import restore

    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        _add_ratios(rows)
        if on_row is not None:
            on_row(row)

    config = resolve_config(model_spec)
    model = random_decoder(config, device=device, seed=seed)
    generator = torch.Generator(device=device).manual_seed(seed + 1)
    ids = torch.randint(0, config["vocab_size"], (batch, prompt), device=device, generator=generator)
    for label, policy_name in FORMATS:
        for mode, invariant in MODES:
            row = {"variant": label, "policy": policy_name, "mode": mode, "batch": batch, "prompt": prompt,
                   "gen": gen}
            try:
                row["tok_s"], row["seconds"] = _engine_rate(model, model_spec, policy_name, invariant, ids, gen,
                                                            runs, seed)
            except Exception as err:  # noqa: BLE001 (one variant failing must not lose the others)
                row["error"] = error_text(err)
            _release()
            emit(row)
    restore(model)
    model.batch_invariant = False
    if transformers_rows:
        for row in _transformers_rows(model_spec, model, ids, gen, hf_runs):
            emit(row)
    return rows


def _engine(model: Decoder, model_spec: str, policy_name: str, invariant: bool, ids: torch.Tensor):
    """A fresh Engine over `model` rewritten for the policy's rollout phase in one mode."""
    from precision_engine.pipeline import compile_for_model
    from precision_engine.rewrite import apply
    from precision_engine.rl.engine import Engine

    plan = compile_for_model(policy_name, model_spec)
    kv = plan.policy.kv_cache
    apply(plan, model, "rollout", numerics=replace(plan.policy.numerics, batch_invariant=invariant))
    model.batch_invariant = invariant
    scales = calibrate_kv_scales(model, ids[:16], mode=kv.scale) if kv.is_fp8 else None
    return Engine(model, kv_scales=scales)


def _engine_rate(model: Decoder, model_spec: str, policy_name: str, invariant: bool, ids: torch.Tensor, gen: int,
                 runs: int, seed: int) -> tuple[float, list[float]]:
    """`model` rewritten for the policy's rollout phase in one mode, timed through a fresh Engine."""
    engine = _engine(model, model_spec, policy_name, invariant, ids)
    prompts = ids.tolist()

    def call() -> int:
        rollout = engine.generate(prompts, max_new_tokens=gen, temperature=1.0, seed=seed)
        return int(rollout.generated_mask.sum())

    return timed_calls(call, runs)


def _transformers_rows(model_spec: str, model: Decoder, ids: torch.Tensor, gen: int, runs: int):
    """transformers' generate on our weights (shared, not copied), static cache, eager then compiled."""
    from precision_engine.models.loader import build_model

    base = {"batch": ids.shape[0], "prompt": ids.shape[1], "gen": gen}
    try:
        import transformers

        hf = build_model(model_spec, device=ids.device, dtype="bf16", seed=0)
        missing, unexpected = hf.load_state_dict(model.state_dict(), strict=False, assign=True)
        if missing or unexpected:
            raise RuntimeError(f"weights do not map onto transformers' model: {missing[:3]} {unexpected[:3]}")
        hf.generation_config.eos_token_id = None
        hf.generation_config.pad_token_id = 0
        _release()
    except Exception as err:  # noqa: BLE001
        yield {"variant": "transformers generate", "mode": "static cache", **base,
               "error": error_text(err)}
        return
    mask = torch.ones_like(ids)
    sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "cache_implementation": "static"}

    def compiled():
        return {"compile_config": transformers.CompileConfig(fullgraph=True, mode="reduce-overhead")}

    for mode, options in (("static cache, eager", lambda: {"disable_compile": True}),
                          ("static cache, compiled reduce-overhead", compiled)):
        row = {"variant": f"transformers {transformers.__version__} generate", "mode": mode, **base}
        try:
            kwargs = {**sampling, **options()}

            def call(kwargs=kwargs, new_tokens=gen) -> int:
                out = hf.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, **kwargs)
                return (out.shape[1] - ids.shape[1]) * ids.shape[0]

            if mode.endswith("eager"):
                call(new_tokens=4)  # kernels and cache set up; the timed call is the whole generation
                row["tok_s"], row["seconds"] = timed_calls(call, runs, warmup=0)
            else:
                row["tok_s"], row["seconds"] = timed_calls(call, runs)  # the warm-up call compiles
        except Exception as err:  # noqa: BLE001
            row["error"] = f"{type(err).__name__}: {str(err)[:500]}"
        _release()
        yield row


def profile_decode(model_spec: str = "llama-3.1-8b", *, batch: int = 64, prompt: int = 128, steps: int = 20,
                   top: int = 15, formats=(FORMATS[0], FORMATS[2]), invariant: bool = False, seed: int = 0) -> str:
    """Where a decode step's GPU time goes: for each format, `steps` replays of the engine's captured decode
    graph under torch.profiler (CUDA kernels only), summarised as kernel launches and GPU ms per step and the
    `top` kernels by total time (name, launches per step, us per launch, share of GPU time)."""
    from torch.profiler import ProfilerActivity, profile

    config = resolve_config(model_spec)
    model = random_decoder(config, device="cuda", seed=seed)
    generator = torch.Generator(device="cuda").manual_seed(seed + 1)
    ids = torch.randint(0, config["vocab_size"], (batch, prompt), device="cuda", generator=generator)
    lines = []
    for label, policy_name in formats:
        engine = _engine(model, model_spec, policy_name, invariant, ids)
        engine.generate(ids.tolist(), max_new_tokens=steps + 4, temperature=1.0, seed=seed)  # captures
        graph = engine._graph
        mode = "batch-invariant" if invariant else "fast"
        if graph is None:
            lines.append(f"== {label}, {mode}: no CUDA graph captured (eager decode); not profiled")
            continue
        graph.state.step.fill_(1)  # replays write columns 1..steps of the state, positions prompt..+steps
        graph.replay()
        graph.state.step.fill_(1)
        _synchronize()
        start = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                graph.replay()
            _synchronize()
        wall = (time.perf_counter() - start) / steps
        kernels = [e for e in prof.key_averages() if "CUDA" in str(e.device_type) and e.self_device_time_total > 0]
        total = sum(e.self_device_time_total for e in kernels) or 1
        launches = sum(e.count for e in kernels)
        lines.append(f"== {label}, {mode}: {launches / steps:.0f} kernels/step, GPU {total / steps / 1e3:.2f} ms/step "
                     f"(kernel time summed), wall {wall * 1e3:.2f} ms/step under the profiler")
        lines.append(f"{'kernel':<72} {'per step':>8} {'us each':>8} {'share':>6}")
        for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:top]:
            lines.append(f"{e.key[:72]:<72} {e.count / steps:>8.1f} {e.self_device_time_total / e.count:>8.1f} "
                         f"{e.self_device_time_total / total:>6.1%}")
        del engine, graph, prof
        _release()
    return "\n".join(lines)


def _add_ratios(rows: list[dict]) -> None:
    base = next((r.get("tok_s") for r in rows if (r["variant"], r["mode"]) == BASELINE), None)
    for row in rows:
        if base and row.get("tok_s"):
            row["vs_bf16_fast"] = row["tok_s"] / base


def _release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def format_table(rows: list[dict]) -> str:
    """variant, mode, tok/s, ratio against our BF16 fast mode (or the error)."""
    lines = [f"{'variant':<40} {'mode':<40} {'tok/s':>9} {'vs bf16 fast':>12}"]
    for r in rows:
        if "tok_s" in r:
            ratio = f"{r['vs_bf16_fast']:.2f}x" if "vs_bf16_fast" in r else "-"
            lines.append(f"{r['variant']:<40} {r['mode']:<40} {r['tok_s']:>9.0f} {ratio:>12}")
        else:
            lines.append(f"{r['variant']:<40} {r['mode']:<40} {'failed':>9}  {r.get('error', '')[:200]}")
    return "\n".join(lines)


def run(model_spec: str, *, batch: int, prompt: int, gen: int, runs: int, hf_runs: int, transformers_rows: bool,
        out: Path | None, command: str, echo: Callable[[str], None] = print) -> list[dict]:
    """bench_rollout, echoing each row as it finishes and rewriting `out` (JSON) after each; then the table.
    `command` is the caller's command line as typed; the JSON also holds every setting, defaults included."""
    from precision_engine.bench.gemm import environment
    from precision_engine.rl.runs.files import write_atomic

    done: list[dict] = []
    settings = {"model": model_spec, "batch": batch, "prompt": prompt, "gen": gen, "runs": runs, "hf_runs": hf_runs,
                "transformers_rows": transformers_rows}

    def save(rows: list[dict]) -> None:
        if out is not None:
            write_atomic(out, json.dumps({"command": command, "settings": settings, "env": environment(),
                                          "rows": rows}, indent=1))

    def on_row(row: dict) -> None:
        done.append(row)
        echo(json.dumps(row))
        save(done)

    if not torch.cuda.is_available():
        raise RuntimeError("bench rollout needs a CUDA GPU (none is visible); run it on the GPU machine")
    rows = bench_rollout(model_spec, batch=batch, prompt=prompt, gen=gen, runs=runs, hf_runs=hf_runs,
                         transformers_rows=transformers_rows, on_row=on_row)
    save(rows)
    echo(format_table(rows))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--gen", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3, help="timed generate calls per engine variant (median)")
    parser.add_argument("--hf-runs", type=int, default=1, help="timed calls per transformers variant")
    parser.add_argument("--no-transformers", action="store_true", help="the engine's rows only")
    parser.add_argument("--out", type=Path, help="write every row and the environment as JSON")
    parser.add_argument("--profile", type=int, metavar="STEPS",
                        help="instead: profile STEPS graph-replayed decode steps (bf16 and fp8 w8a8 + fp8 kv, fast)")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.profile:
        print(profile_decode(args.model, batch=args.batch, prompt=args.prompt, steps=args.profile))
        return
    run(args.model, batch=args.batch, prompt=args.prompt, gen=args.gen, runs=args.runs, hf_runs=args.hf_runs,
        transformers_rows=not args.no_transformers, out=args.out,
        command=shlex.join(["python", "-m", "precision_engine.bench.rollout", *argv]))


if __name__ == "__main__":
    main()
