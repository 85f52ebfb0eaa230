"""`precision export` and `precision check`: thin wrappers over `precision_engine.pipeline`.

torch and transformers load inside the command bodies, never at import (`precision validate` shares the app).
"""

from __future__ import annotations

import json
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from precision_engine.cli.options import JsonOpt, PolicyOpt, SetOpt
from precision_engine.errors import UsageError

ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="A built-in architecture (tiny-llama, llama-3.1-8b, ...; random weights) or a local HF model "
        "directory (its safetensors weights are loaded when present).",
        show_default=False,
    ),
]
# torch.manual_seed takes a signed 64-bit seed: the parser refuses a larger one (exit 2) before any work.
SeedOpt = Annotated[int, typer.Option("--seed", min=0, max=2**63 - 1,
                                      help="Seed of random weights and random token sequences.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="cpu or cuda.")]


RandomOpt = Annotated[bool, typer.Option(
    "--random-weights", help="Run a model directory or config.json with random weights (else its weights are "
    "loaded, and a directory without any is refused). Built-in architectures always have random weights.")]


def export(
    policy: PolicyOpt,
    model: ModelOpt,
    out: Annotated[str, typer.Option("--out", "-o", metavar="DIR", help="The checkpoint directory to write.",
                                     show_default=False)],  # a str: Path("") would read as the working directory
    set_: SetOpt = None,
    phase: Annotated[str, typer.Option("--phase", help="Whose numerics to export.")] = "rollout",
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace an earlier export at --out (never another directory, the working "
        "directory or the --model source).")] = False,
    calibration_ids: Annotated[
        Path | None,
        typer.Option(
            "--calibration-ids",
            help="JSON list of token-id lists to calibrate FP8 KV-cache scales on (default: random tokens). "
            "Only for a policy with an FP8 KV cache.",
        ),
    ] = None,
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel size the rollout server will run: the KV "
                                    "scale file gets one entry per rank, and each rank's FP8 shards are "
                                    "checked to be whole blocks.")] = 1,
    random_weights: RandomOpt = False,
    device: DeviceOpt = "cpu",
    seed: SeedOpt = 0,
) -> None:
    """Write the checkpoint the rollout engine loads for POLICY (block-FP8 weights, config, KV scales).

    FP8 modules get `weight` float8_e4m3fn + `weight_scale_inv`, the rest BF16; config.json carries the
    `quantization_config` (none for a policy without FP8 modules); a policy with an FP8 KV cache adds per-layer
    `self_attn.k_scale` / `v_scale` tensors and `kv_cache_scales.json` (SGLang's --quantization-param-path).
    Tokenizer files and generation_config.json are copied from a --model directory. Written atomically, with
    a sha256 manifest (precision_export.json) that `load_checkpoint` verifies.

    Examples:

      precision export --policy jetrl_unified --model ./Llama-3.1-8B --out ./Llama-3.1-8B-fp8

      precision export -p jetrl_unified_kv -m tiny-llama -o /tmp/tiny-fp8 --calibration-ids prompts.json

      python -m sglang.launch_server --model-path /tmp/tiny-fp8 --kv-cache-dtype fp8_e4m3 \\
        --quantization-param-path /tmp/tiny-fp8/kv_cache_scales.json
    """
    from precision_engine.integrations.hf_export import KV_SCALES_FILE, check_export_target, export_checkpoint
    from precision_engine.models.loader import load_model
    from precision_engine.models.registry import find_builtin
    from precision_engine.pipeline import prepare
    from precision_engine.policy import load_policy

    source = None if find_builtin(model) is not None else model
    target = check_export_target(out, overwrite=overwrite, source=source)  # before seconds of model work
    if tp < 1:
        raise UsageError(f"--tp must be >= 1, got {tp}")
    loaded = load_policy(policy, overrides=tuple(set_ or ()))
    if calibration_ids is not None and not loaded.kv_cache.is_fp8:
        raise UsageError(f"--calibration-ids: {loaded.name} has no FP8 KV cache, so there is nothing to calibrate "
                         "(hint: drop the flag, or use a policy with kv_cache.dtype: float8_e4m3)")
    token_ids = _read_token_ids(calibration_ids) if calibration_ids is not None else None
    loader = partial(load_model, random_weights=random_weights)
    ready = prepare(loaded, model, phase=phase, device=device, seed=seed, loader=loader,
                    calibration_ids=token_ids, calibration_source=f"--calibration-ids {calibration_ids}")
    written = export_checkpoint(ready.model, ready.plan, target, phase=phase, kv_scales=ready.kv_scales,
                                overwrite=overwrite, source=source, tp_size=tp)
    note = " (random weights)" if random_weights or source is None else ""
    typer.echo(f"wrote {written}{note}: {ready.plan.phases[phase].fp8_flop_share():.0%} of GEMM FLOPs in block FP8")
    if ready.kv_scales is not None:
        origin = calibration_ids or "random tokens"
        asked = ready.policy.kv_cache.calibration_sequences
        count = ready.calibration_sequences
        override = "" if count == asked else f" (--calibration-ids overrides the policy's {asked})"
        typer.echo(f"KV-cache scales calibrated on {count} sequences of {origin}{override}: "
                   f"{written / KV_SCALES_FILE} and per-layer k_scale/v_scale tensors")


def check(
    policy: PolicyOpt,
    model: ModelOpt,
    set_: SetOpt = None,
    device: DeviceOpt = "cpu",
    seq_len: Annotated[int, typer.Option("--seq-len", help="Tokens per sequence.")] = 64,
    batch: Annotated[int, typer.Option("--batch", help="Sequences.")] = 2,
    prompt_len: Annotated[
        int | None, typer.Option("--prompt-len", help="Decode path: tokens prefilled before decoding (default half).")
    ] = None,
    decode: Annotated[bool, typer.Option("--decode/--no-decode", help="Also check incremental decode.")] = True,
    layers: Annotated[bool, typer.Option("--layers/--no-layers", help="Compare every module's output.")] = True,
    top: Annotated[int, typer.Option("--top", min=0, help="Modules to list, largest difference first.")] = 8,
    random_weights: RandomOpt = False,
    seed: SeedOpt = 0,
    json_out: JsonOpt = False,
    save: Annotated[Path | None, typer.Option("--save", help="Also write the JSON report to this file.")] = None,
    samples: Annotated[int, typer.Option("--samples", help="Sampled row: sequences the built-in engine samples "
                                         "(0 skips the row).")] = 8,
    gen: Annotated[int, typer.Option("--gen", help="Sampled row: max new tokens per sequence.")] = 32,
    score_batch: Annotated[int, typer.Option("--score-batch", help="Sampled row: sequences per training "
                                             "forward that scores them (left-padded, shuffled).")] = 3,
) -> None:
    """Compare POLICY's rollout logprobs with its training forward's, from the same weights.

    The same token sequences run through the training forward and the rollout path of the transformers model
    (prefill scoring and incremental decode); per-module output differences and logprob differences (max
    |d logp|, mean KL, bitwise equality) are reported. The sampled row measures the path an RL step takes: the
    built-in engine samples --samples sequences from random prompts, and the training phase scores them in
    batches of --score-batch (left-padded, shuffled); its mean KL is verl's rollout_corr/kl. MoE and other
    models the built-in engine does not run skip that row, with the reason.

    Exit status: 0 when the numerics promise holds (or the policy makes none), 1 only when a policy whose plan
    is identical in both phases still gives different rollout-prefill logits, or (batch-invariant policies)
    sampled logprobs that differ from the trainer's, 2 for anything else (a bad flag, model or policy, a plan
    the kernels cannot run, out of memory).

    Examples:

      precision check --policy jetrl_unified --model tiny-llama

      precision check -p fp8_rollout_naive -m tiny-qwen3 --seq-len 128 --json

      precision check -p jetrl_unified_kv -m tiny-llama --samples 16 --gen 64 --score-batch 5

      precision check -p jetrl_unified -m llama-3.1-8b --device cuda --batch 4 --seq-len 256 --save unified.json
    """
    import torch

    from precision_engine.models.loader import has_checkpoint_weights, load_model
    from precision_engine.models.registry import find_builtin
    from precision_engine.pipeline import check_device, compile_for_model
    from precision_engine.verify import check_identity, random_sequences

    if seq_len < 2 or batch < 1:
        raise UsageError("--seq-len must be >= 2 and --batch >= 1")
    if prompt_len is not None and not 1 <= prompt_len < seq_len:
        raise UsageError(f"--prompt-len must be in [1, {seq_len - 1}]")
    if samples < 0 or gen < 1 or score_batch < 1:
        raise UsageError("--samples must be >= 0, --gen and --score-batch >= 1")
    if save is not None:
        _check_save(save)
    check_device(device)
    plan = compile_for_model(policy, model, overrides=tuple(set_ or ()))
    sampled_prompt = prompt_len or max(1, seq_len // 2)
    _check_positions(model, plan.inventory.config, seq_len, sampled_prompt + gen if samples else 0)
    if device == "cpu":
        _check_cpu_memory(model, plan.inventory.config, batch * seq_len)
    started = time.perf_counter()
    net = load_model(model, device=device, seed=seed, random_weights=random_weights)
    random_weights = random_weights or find_builtin(model) is not None or not has_checkpoint_weights(model)
    vocab = net.config.get_text_config(decoder=True).vocab_size
    sequences = random_sequences(vocab, batch, seq_len, seed=seed)
    report = check_identity(plan, net, sequences, prompt_len=prompt_len, decode=decode, layers=layers)
    del net  # the sampled row builds the built-in decoder: one model in memory at a time
    sampled = None
    if samples:
        sampled = _sampled_row(plan, model, samples=samples, gen=gen, seed=seed, device=device,
                               prompt_len=sampled_prompt, score_batch=score_batch,
                               random_weights=random_weights)
    cost = {"seconds": round(time.perf_counter() - started, 1), "random_weights": random_weights}
    if device == "cuda":
        cost["peak_cuda_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
    sampled_holds = sampled is None or not sampled.get("identity_promised") or sampled["bitwise"]
    result = {**report.to_dict(), "sampled": sampled, **cost}
    document = json.dumps(result, indent=2)
    if not json_out:
        _render_check(report, sampled, top, random_weights)
        typer.echo(", ".join(f"{key}: {value}" for key, value in cost.items() if key != "random_weights"))
    if save is not None:  # after the verdict is made: a failed write must not lose it
        try:
            _save_report(save, document + "\n")
        except UsageError as err:
            err.result = result  # --json prints the report with the error, one object on stdout
            raise
    if json_out:
        typer.echo(document)
    raise typer.Exit(0 if report.promise_holds and sampled_holds else 1)


def _check_save(save: Path) -> None:
    """Refuse, before the check runs, a --save that the report could not be written to: a directory, a path under
    a file or a missing directory, a folder this user cannot write into."""
    from precision_engine.rl.runs.files import nearest_existing

    try:
        if save.is_dir():
            raise UsageError(f"--save {save}: is a directory; expected the path of a JSON file to write")
        if save.exists() and not save.is_file():
            raise UsageError(f"--save {save}: not a regular file; expected the path of a JSON file to write")
        folder = save.parent
        existing = nearest_existing(folder)
        if not existing.is_dir():
            raise UsageError(f"--save {save}: {existing} is not a directory")
        if existing != folder:
            raise UsageError(f"--save {save}: no such directory {folder}")
    except OSError as err:  # ENAMETOOLONG, ELOOP, EACCES on a parent
        raise UsageError(f"--save {str(save)[:200]}: {err.strerror or err}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--save {save}: cannot write into {folder}")


def _save_report(save: Path, text: str) -> None:
    """Write the report atomically: a full disk or a kill leaves the earlier file (or none), never half a file."""
    from precision_engine.rl.runs.files import write_atomic

    try:
        write_atomic(save, text)
    except OSError as err:
        raise UsageError(f"--save {str(save)[:200]}: cannot write the report: {err.strerror or err}") from None


def _sampled_row(plan, model: str, *, samples: int, gen: int, seed: int, device: str, prompt_len: int,
                 score_batch: int, random_weights: bool) -> dict:
    """The sampled (engine -> trainer) row, or {"path", "skipped": reason} for a model the engine cannot run."""
    import gc

    import torch

    from precision_engine.errors import UnsupportedError
    from precision_engine.rl.onpolicy import PATH, sampled_logprob_check

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    try:
        return sampled_logprob_check(plan, model, n=samples, max_new_tokens=gen, seed=seed, device=device,
                                     prompt_len=prompt_len, score_batch=score_batch, random_weights=random_weights)
    except UnsupportedError as err:
        return {"path": PATH, "skipped": str(err)}


def _render_check(report, sampled: dict | None, top: int, random_weights: bool) -> None:
    from rich.table import Table

    from precision_engine.cli.console import VerbConsole

    console = VerbConsole(width=None if sys.stdout.isatty() else 160, highlight=False)
    promise = "identical in every module" if report.plan_identical else (
        f"differs in {len(report.differing_modules)} modules"
    )
    weights = "random" if random_weights else "checkpoint"
    console.print(
        f"{report.policy} on {report.model} ({weights} weights, {report.device}, "
        f"{report.batch}x{report.seq_len} random tokens, "
        f"KV cache {report.kv_cache}); plan: train forward vs rollout {promise}"
    )
    caption = None
    if sampled is not None and "skipped" not in sampled:
        caption = (f"sampled: {sampled['samples']} sequences of {sampled['max_new_tokens']} new tokens, random "
                   f"prompts, scored in shuffled left-padded batches of {sampled['score_batch']}; prefill and "
                   "decode: the transformers model, teacher-forced")
    paths = Table("rollout path", "tokens", "max |d logp|", "mean KL", "bitwise", "identity promised",
                  caption=caption)
    for diff in (report.prefill, report.decode):
        if diff is None:
            continue
        if not report.plan_identical:
            promised = "no (plan differs)"
        else:
            promised = "yes" if diff.covered else f"no: {diff.why_not_covered}"
        paths.add_row(
            diff.path, str(diff.tokens), f"{diff.max_abs_dlogp:.3g}", f"{diff.mean_kl:.3g}",
            "yes" if diff.bitwise else "no", promised,
        )
    if sampled is not None and "skipped" not in sampled:
        bitwise = "yes" if sampled["bitwise"] else f"no ({sampled['bitwise_fraction']:.0%} of tokens)"
        promised = "yes" if sampled["identity_promised"] else f"no: {sampled['why_not_promised']}"
        paths.add_row(sampled["path"], str(sampled["tokens"]), f"{sampled['max_abs_dlogp']:.3g}",
                      f"{sampled['mean_kl']:.3g}", bitwise, promised)
    console.print(paths)
    if report.layers:
        worst = sorted(report.layers, key=lambda d: d.rel_l2, reverse=True)[:top]
        equal = sum(d.bitwise for d in report.layers)
        table = Table("module (prefill)", "max |diff|", "rel L2", "bitwise",
                      title=f"{equal}/{len(report.layers)} module outputs bitwise equal; largest differences:")
        for d in worst:
            table.add_row(d.name, f"{d.max_abs:.3g}", f"{d.rel_l2:.3g}", "yes" if d.bitwise else "no")
        console.print(table)
    if not report.plan_identical:
        console.print("no identity promised: this policy computes rollout and training differently")
    elif not report.prefill.covered:
        console.print(f"module numerics identical, prefill logprobs not promised: {report.prefill.why_not_covered}")
    else:
        verdict = "holds" if report.prefill.bitwise else "is BROKEN"
        console.print(f"numerics promise {verdict}: rollout prefill logprobs vs training forward")
    if sampled is not None and "skipped" in sampled:
        console.print(f"sampled row skipped: {sampled['skipped']}")
    elif sampled is not None and sampled["identity_promised"]:
        verdict = "holds" if sampled["bitwise"] else "is BROKEN"
        console.print(f"numerics promise {verdict}: the engine's sampled logprobs vs the trainer's, bit for bit")


def _check_cpu_memory(spec: str, config, tokens: int) -> None:
    """Refuse, before loading, a check whose model cannot fit this machine's available memory: on a CPU the
    kernel would otherwise swap or kill the process minutes in. Estimate: BF16 weights plus half again for the
    cached FP8 weights and scales, and three fp32 [tokens, vocab] logit tensors (both phases, log-softmax)."""
    from precision_engine.models.loader import estimated_bytes, text_config

    available = _available_memory()
    if available is None:
        return
    text = text_config(config)
    vocab = int(text.get("vocab_size") or config.get("vocab_size") or 0)
    needed = int(estimated_bytes(spec) * 1.5) + 3 * tokens * vocab * 4
    if needed > available:
        raise UsageError(f"{spec} needs about {needed / 2**30:.1f} GiB on the CPU, {available / 2**30:.1f} GiB "
                         "is available (hint: --device cuda, or a smaller model, --batch or --seq-len)")


def _check_positions(spec: str, config, seq_len: int, sampled_len: int) -> None:
    """Refuse, before loading, sequences longer than the model's position table (config.json's
    max_position_embeddings, where it says): past it the model extrapolates, and the check would measure that.
    `sampled_len`: the sampled row's longest sequence (prompt and --gen; 0 without the row)."""
    from precision_engine.models.loader import max_positions

    limit = max_positions(config)
    if limit is None:
        return
    if seq_len > limit:
        raise UsageError(f"--seq-len {seq_len}: {spec} takes at most {limit} positions (max_position_embeddings)")
    if sampled_len > limit:
        raise UsageError(f"sampled row: a prompt of up to --prompt-len tokens plus --gen new ones is {sampled_len} "
                         f"positions, {spec} takes at most {limit} (hint: a smaller --gen or --prompt-len)")


def _available_memory() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), in bytes; None where the system does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _read_token_ids(path: Path) -> list:
    """--calibration-ids: a JSON list of token-id lists (checked further by pipeline.calibration_batch)."""
    try:
        rows = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"--calibration-ids {path}: not a readable JSON file ({err})") from None
    except RecursionError:  # json recurses per level: `[[[[...` deeper than the interpreter's stack limit
        raise UsageError(f"--calibration-ids {path}: JSON nested too deeply; expected a list of token-id "
                         "lists") from None
    if not (isinstance(rows, list) and rows and all(isinstance(r, list) and r for r in rows)):
        raise UsageError(f"--calibration-ids {path}: expected a non-empty list of non-empty token-id lists")
    if any(isinstance(t, (list, dict)) for row in rows for t in row):  # calibration_batch would echo it whole
        raise UsageError(f"--calibration-ids {path}: rows nested deeper than token ids; expected a list of "
                         "token-id lists")
    return rows


def register(app: typer.Typer) -> None:
    app.command()(export)
    app.command()(check)
