"""`python -m sglang.launch_server` arguments that serve an export (`precision export`) with a policy's
rollout numerics.

The export carries the numerics SGLang reads at start: FP8 weights with `quantization_config` in config.json
and, for a calibrated FP8 KV cache, `kv_cache_scales.json`. These arguments name them explicitly and check that
the export's numerics are the policy's (FP8 or BF16 linears and their blocks, the KV scales, the scale file's ranks
and layers) and its weight files are there at their recorded sizes, so a server never runs other numerics than
the plan says (SGLang would silently serve a BF16 checkpoint in BF16, or an FP8 one under a BF16 policy). The
export does not record which policy wrote it: one with the same numerics passes.
"""

from __future__ import annotations

import json
from pathlib import Path

from precision_engine.errors import CheckpointError, UsageError
from precision_engine.integrations.sglang.rollout import ROLLOUT, RolloutNumerics, check_rollout
from precision_engine.models.loader import text_config
from precision_engine.numerics.kv_cache import KV_SCALE_SUFFIXES
from precision_engine.policy.model import Calibrate, Policy

KV_SCALES_FILE = "kv_cache_scales.json"  # what `export_checkpoint` writes beside config.json


def server_args(policy: Policy, model_dir: str | Path, tp: int = 1) -> list[str]:
    """The argv (after `python -m sglang.launch_server`) that serves `model_dir` with `policy`'s rollout."""
    if tp < 1:
        raise UsageError(f"--tp must be >= 1, got {tp}")
    model_dir = Path(model_dir).expanduser()
    config = _read_config(model_dir)
    _check_files(model_dir)
    _check_tp(config, tp, model_dir)
    plan = _plan(policy, model_dir)
    numerics = check_rollout(plan)
    gemms = [m.module.name for m in plan.phases[ROLLOUT].modules if m.module.kind.is_gemm]
    _check_export(config, numerics, gemms, model_dir)
    args = ["--model-path", str(model_dir), "--tp-size", str(tp), "--dtype", "bfloat16"]
    if numerics.fp8_linears:
        args += ["--quantization", "fp8"]  # what config.json says already; explicit, so a mismatch fails loudly
    if numerics.kv_cache_dtype:
        args += ["--kv-cache-dtype", numerics.kv_cache_dtype]
        if policy.kv_cache.calibrate is not Calibrate.NEVER:
            scales = model_dir / KV_SCALES_FILE
            if not scales.is_file():
                raise UsageError(f"{model_dir}: the policy calibrates its FP8 KV cache, but the export has no "
                                 f"{KV_SCALES_FILE} (hint: export with KV calibration, or "
                                 "--set kv_cache.calibrate=never for SGLang's unit scales)")
            _check_scale_file(scales, tp, text_config(config).get("num_hidden_layers"))
            args += ["--quantization-param-path", str(scales)]
        elif calibrated := _kv_scale_tensors(model_dir):
            raise UsageError(f"{model_dir}: the checkpoint carries calibrated KV scales ({calibrated[0]} and "
                             f"{len(calibrated) - 1} more), which SGLang's attention applies, but the policy's FP8 KV "
                             "cache uses unit scales (kv_cache.calibrate: never) (hint: serve it under the policy it "
                             "was exported with, or export again under this one)")
    if numerics.deterministic:
        args += ["--enable-deterministic-inference"]
    return args


def launch_command(policy: Policy, model_dir: str | Path, tp: int = 1) -> list[str]:
    """The whole command line: `python -m sglang.launch_server` + `server_args`."""
    return ["python", "-m", "sglang.launch_server", *server_args(policy, model_dir, tp)]


def _plan(policy: Policy, model_dir: Path):
    from precision_engine.compile import compile_plan
    from precision_engine.models.loader import load_inventory

    return compile_plan(policy, load_inventory(str(model_dir)))


def _read_config(model_dir: Path) -> dict:
    path = model_dir / "config.json"
    if not path.is_file():
        raise UsageError(f"{model_dir}: no config.json (hint: pass a directory written by `precision export`)")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"{path}: not a readable config.json ({err})") from None


def _check_files(model_dir: Path) -> None:
    """The weights SGLang will load are there: the single file or every shard the index names, and in an export
    every file its manifest lists at its recorded size (`precision check` and `load_checkpoint` hash them)."""
    from precision_engine.integrations.export_files import is_export_dir, verify_manifest, weight_files

    try:
        absent = [name for name in weight_files(model_dir) if not (model_dir / name).is_file()]
        if absent:
            raise CheckpointError(f"{model_dir / absent[0]}: missing (the shard index names it)")
        if is_export_dir(model_dir):
            verify_manifest(model_dir, hashes=False)
    except CheckpointError as err:
        raise UsageError(f"{err} (hint: export again; SGLang would fail to load it, or serve what is left)") from None


def _check_tp(config: dict, tp: int, model_dir: Path) -> None:
    """SGLang splits the attention heads over the TP ranks, and the KV heads too or replicates them: a size that
    does neither fails at server start, after the weights load."""
    text = text_config(config)
    heads, kv_heads = text.get("num_attention_heads"), text.get("num_key_value_heads") or text.get(
        "num_attention_heads")
    if not isinstance(heads, int) or not isinstance(kv_heads, int):
        return  # not a decoder config this check can read; the plan below says what is wrong with it
    if heads % tp or (kv_heads % tp and tp % kv_heads):
        sizes = [n for n in range(1, heads + 1) if not heads % n and not (kv_heads % n and n % kv_heads)]
        raise UsageError(f"{model_dir}: --tp {tp} does not split its {heads} attention heads and {kv_heads} KV "
                         f"heads over the ranks (hint: --tp {' / '.join(map(str, sizes))})")


def _check_export(config: dict, numerics: RolloutNumerics, gemms: list[str], model_dir: Path) -> None:
    """The export's FP8 layers are the policy's: same quant method and block, and a module is FP8 in the checkpoint
    exactly when the policy runs it in FP8 (SGLang quantizes every GEMM the config does not skip)."""
    quant = config.get("quantization_config")
    hint = "(hint: `precision export --policy <this policy>` writes the matching checkpoint)"
    quantized = set(gemms) - set(quant.get("ignored_layers") or ()) if quant else set()
    if not numerics.fp8_linears:
        if quantized:
            raise UsageError(f"{model_dir}: the checkpoint quantizes {sorted(quantized)[0]} (and "
                             f"{len(quantized) - 1} more) but the policy's {ROLLOUT} phase runs no FP8 linears {hint}")
        return
    bf16 = quantized - set(numerics.fp8_linears)
    if bf16:
        raise UsageError(f"{model_dir}: the checkpoint quantizes {sorted(bf16)[0]} (and {len(bf16) - 1} more), "
                         f"which the policy's {ROLLOUT} phase runs in BF16 {hint}")
    if not quant or quant.get("quant_method") != "fp8" or list(quant.get("weight_block_size") or []) != [128, 128]:
        raise UsageError(f"{model_dir}: the policy's {ROLLOUT} phase runs {len(numerics.fp8_linears)} FP8 linears, "
                         f"but config.json has no 128x128 block-FP8 quantization_config {hint}")
    fp8 = set(numerics.fp8_linears)
    skipped = fp8.intersection(quant.get("ignored_layers") or ())
    if skipped:
        raise UsageError(f"{model_dir}: config.json skips {sorted(skipped)[0]} (and {len(skipped) - 1} more), "
                         f"which the policy runs in FP8 {hint}")


def _kv_scale_tensors(model_dir: Path) -> list[str]:
    """The checkpoint's `self_attn.k_scale` / `v_scale` tensor names, read from the safetensors headers alone."""
    from safetensors import SafetensorError, safe_open

    names = []
    for path in sorted(model_dir.glob("*.safetensors")):
        try:
            with safe_open(path, "pt") as weights:
                names += [name for name in weights.keys() if name.endswith(KV_SCALE_SUFFIXES)]
        except (OSError, SafetensorError) as err:
            raise UsageError(f"{path}: not a readable safetensors file ({err})") from None
    return names


def _check_scale_file(path: Path, tp: int, layers: int | None) -> None:
    """SGLang wants one entry per TP rank, each with one scale per layer: with another count of either it logs
    and serves unit scales, so the calibration would silently not apply."""
    try:
        ranks = json.loads(path.read_text())["kv_cache"]["scaling_factor"]
        per_rank = {rank: len(ranks[rank]) for rank in ranks}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"{path}: not an SGLang KV scale file ({err})") from None
    if sorted(per_rank) != sorted(map(str, range(tp))):
        raise UsageError(f"{path}: has scales for TP rank(s) {', '.join(sorted(per_rank))}, --tp {tp} serves rank(s) "
                         f"0 to {tp - 1}: SGLang would use unit scales (hint: export with the serving TP size)")
    short = next((rank for rank, count in per_rank.items() if isinstance(layers, int) and count != layers), None)
    if short is not None:
        raise UsageError(f"{path}: rank {short} has scales for {per_rank[short]} layers, config.json's model has "
                         f"{layers}: SGLang would use unit scales (hint: the scale file of another export?)")
