"""`server_args`: an export from `export_checkpoint` is served with exactly the policy's rollout numerics, and an
export that does not match the policy is refused before a server starts. Tiny Llama, ~1 s per export."""

import json

import pytest

from precision_engine.compile import compile_plan
from precision_engine.errors import UnsupportedError, UsageError
from precision_engine.integrations import export_checkpoint
from precision_engine.integrations.export_files import MANIFEST_FILE
from precision_engine.integrations.sglang import check_rollout, launch_command, server_args
from precision_engine.models.loader import build_model, load_inventory
from precision_engine.numerics.kv_cache import KVScales
from precision_engine.policy import load_policy


def _export(tmp_path, name, *, kv_scales=None):
    policy = load_policy(name)
    plan = compile_plan(policy, load_inventory("tiny-llama"))
    model = build_model("tiny-llama", device="cpu", dtype="bf16", seed=0)
    return export_checkpoint(model, plan, tmp_path / name, kv_scales=kv_scales)


def test_unified_fp8_export_is_served_in_fp8_with_deterministic_inference(tmp_path):
    out = _export(tmp_path, "jetrl_unified")
    args = server_args(load_policy("jetrl_unified"), out, tp=2)
    assert args == ["--model-path", str(out), "--tp-size", "2", "--dtype", "bfloat16", "--quantization", "fp8",
                    "--enable-deterministic-inference"]
    assert launch_command(load_policy("jetrl_unified"), out)[:3] == ["python", "-m", "sglang.launch_server"]


def test_calibrated_fp8_kv_cache_passes_the_exported_scale_file(tmp_path):
    out = _export(tmp_path, "fp8rl_rollout_tis", kv_scales=KVScales.ones(2))
    args = server_args(load_policy("fp8rl_rollout_tis"), out)
    assert args[args.index("--kv-cache-dtype") + 1] == "fp8_e4m3"
    assert args[args.index("--quantization-param-path") + 1] == str(out / "kv_cache_scales.json")
    with pytest.raises(UsageError, match=r"has scales for TP rank\(s\) 0, --tp 2 serves rank\(s\) 0 to 1"):
        server_args(load_policy("fp8rl_rollout_tis"), out, tp=2)


def test_a_scale_file_for_other_ranks_or_layers_is_refused(tmp_path):
    """SGLang logs and serves unit scales when the file's ranks are not --tp's or a rank's layers not the
    model's: the calibration would silently not apply (a 2-rank file at --tp 1 passed, and one of 2 layers on
    a deeper model)."""
    out = _export(tmp_path, "fp8rl_rollout_tis", kv_scales=KVScales.ones(2))
    path = out / "kv_cache_scales.json"
    (out / MANIFEST_FILE).unlink()  # a directory of the user's: the manifest would refuse an edited file first
    document = json.loads(path.read_text())
    factors = document["kv_cache"]["scaling_factor"]
    path.write_text(json.dumps(document | {"kv_cache": {**document["kv_cache"], "scaling_factor": {
        **factors, "1": factors["0"]}}}))
    with pytest.raises(UsageError, match=r"TP rank\(s\) 0, 1, --tp 1 serves rank\(s\) 0 to 0"):
        server_args(load_policy("fp8rl_rollout_tis"), out)
    del factors["0"]["1"]
    path.write_text(json.dumps(document))
    with pytest.raises(UsageError, match="rank 0 has scales for 1 layers, config.json's model has 2"):
        server_args(load_policy("fp8rl_rollout_tis"), out)


def test_an_export_with_missing_or_truncated_weights_is_refused(tmp_path):
    out = _export(tmp_path, "jetrl_unified")
    weights = out / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(UsageError, match="model.safetensors: content differs from the export manifest"):
        server_args(load_policy("jetrl_unified"), out)
    weights.unlink()
    with pytest.raises(UsageError, match="no model.safetensors or model.safetensors.index.json"):
        server_args(load_policy("jetrl_unified"), out)


def test_uncalibrated_export_under_a_calibrating_policy_is_refused(tmp_path):
    out = _export(tmp_path, "fp8rl_rollout_tis")
    with pytest.raises(UsageError, match="no kv_cache_scales.json"):
        server_args(load_policy("fp8rl_rollout_tis"), out)
    args = server_args(load_policy("fp8rl_rollout_tis", overrides=["kv_cache.calibrate=never"]), out)
    assert "--quantization-param-path" not in args and "fp8_e4m3" in args


def test_calibrated_export_under_unit_scales_is_refused(tmp_path):
    """SGLang applies the checkpoint's k_scale/v_scale tensors: under calibrate=never it would not run unit scales."""
    out = _export(tmp_path, "fp8rl_rollout_tis", kv_scales=KVScales.ones(2))
    (out / "kv_cache_scales.json").unlink()  # the tensors alone decide: they are what the attention applies
    (out / MANIFEST_FILE).unlink()  # else the manifest refuses the missing file first
    with pytest.raises(UsageError, match=r"carries calibrated KV scales \(model.layers.0.self_attn.k_scale and 3 "
                                         r"more\).*kv_cache.calibrate: never"):
        server_args(load_policy("fp8rl_rollout_tis", overrides=["kv_cache.calibrate=never"]), out)


@pytest.mark.parametrize("exported, served, message", [
    ("jetrl_unified", "bf16_baseline", "quantizes model.layers.0.mlp.down_proj .and 13 more. but the policy's "
                                       "rollout phase runs no FP8"),
    ("bf16_baseline", "jetrl_unified", "runs 14 FP8 linears, but config.json has no 128x128 block-FP8 "
                                       "quantization_config"),  # a BF16 export is plain (issue 8, item 4)
])
def test_an_export_for_another_policy_is_refused(tmp_path, exported, served, message):
    with pytest.raises(UsageError, match=message):
        server_args(load_policy(served), _export(tmp_path, exported))


def test_an_export_quantizing_modules_the_policy_keeps_in_bf16_is_refused(tmp_path):
    """fp8_rollout_naive quantizes tiny-qwen3-moe's experts, jetrl_unified keeps them BF16: SGLang would serve
    them in FP8 under jetrl_unified's name."""
    plan = compile_plan(load_policy("fp8_rollout_naive"), load_inventory("tiny-qwen3-moe"))
    model = build_model("tiny-qwen3-moe", device="cpu", dtype="bf16", seed=0)
    out = export_checkpoint(model, plan, tmp_path / "naive")
    assert "--quantization" in server_args(load_policy("fp8_rollout_naive"), out)
    with pytest.raises(UsageError, match=r"quantizes model.layers.0.mlp.experts \(and 1 more\), which the policy's "
                                         r"rollout phase runs in BF16"):
        server_args(load_policy("jetrl_unified"), out)


def test_a_bf16_export_is_served_in_bf16(tmp_path):
    out = _export(tmp_path, "bf16_baseline")
    assert "--quantization" not in server_args(load_policy("bf16_baseline"), out)


def test_rollout_formats_sglang_cannot_run_are_refused():
    pow2 = "rules.unified[1].linear.input={dtype: float8_e4m3, granularity: group, group: 128, scale: pow2}"
    policy = load_policy("jetrl_unified", overrides=[pow2])
    with pytest.raises(UnsupportedError, match="takes input as 1x128 e4m3 groups along K.*UE8M0"):
        check_rollout(compile_plan(policy, load_inventory("tiny-llama")))


def test_a_tp_size_that_does_not_split_the_heads_is_refused_before_the_server_starts(tmp_path):
    """tiny-llama: 4 attention heads, 2 KV heads. --tp 4 replicates the KV heads (SGLang does); 3 and 8 fail."""
    out = _export(tmp_path, "jetrl_unified")
    assert server_args(load_policy("jetrl_unified"), out, tp=4)[3] == "4"
    for tp in (3, 8):
        with pytest.raises(UsageError, match=f"--tp {tp} does not split its 4 attention heads and 2 KV heads.*"
                                             "hint: --tp 1 / 2 / 4"):
            server_args(load_policy("jetrl_unified"), out, tp=tp)
