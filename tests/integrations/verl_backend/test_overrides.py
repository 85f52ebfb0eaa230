"""Every shipped policy's verl overrides compose with verl 0.9.1's own Hydra config and build its config
dataclasses; what verl or SGLang cannot run is refused with the reason.

The model is the built-in `llama-3.1-8b` (its HF id `meta-llama/Llama-3.1-8B`, resolved offline, meta
device), so the plan and the `quantization_config` are those of the real model. Each compose takes ~1-2 s.
"""

import json
import os

import pytest

pytest.importorskip("verl", reason="verl is not installed (CI runs these in its verl venv)")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

import verl  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass, validate_config  # noqa: E402
from verl.workers.config import FSDPEngineConfig, RolloutConfig  # noqa: E402

from precision_engine.errors import UnsupportedError, UsageError  # noqa: E402
from precision_engine.integrations.verl.launch import build_command  # noqa: E402
from precision_engine.integrations.verl.runtime import POLICY_ENV  # noqa: E402
from precision_engine.policy import load_policy, shipped_policies  # noqa: E402
from precision_engine.rl.correction import verl_rollout_correction  # noqa: E402

MODEL = "actor_rollout_ref.model.path=meta-llama/Llama-3.1-8B"
CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
CALIBRATED_KV = {"fp8rl_rollout_tis", "fp8rl_rollout_mis", "jetrl_unified_kv"}
# A verl layout that validates on the CPU: 1 node x 8 GPUs, batch sizes divisible by it.
LAYOUT = ["trainer.n_gpus_per_node=8", "trainer.nnodes=1", "data.train_batch_size=64",
          "actor_rollout_ref.actor.ppo_mini_batch_size=16", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
          "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
          "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2"]


def _compose(argv_overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(argv_overrides))


def _launch(name, *extra, sets=()):
    return build_command(load_policy(name, overrides=list(sets)), "math", [MODEL, *LAYOUT, *extra],
                         dry_run=True, run_dir="/tmp/precision-verl-test")


def _verl_config(launch):
    """What verl's main_ppo does with the overrides: compose, validate, resolve, then each worker's dataclass."""
    config = _compose(launch.argv[3:])
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    OmegaConf.resolve(config)
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    algorithm = omega_conf_to_dataclass(config.algorithm, AlgoConfig)
    assert isinstance(rollout, RolloutConfig) and isinstance(actor.fsdp_config, FSDPEngineConfig)
    return config, rollout, actor.fsdp_config, algorithm


@pytest.mark.parametrize("name", shipped_policies())
def test_shipped_policy_composes_and_builds_verl_dataclasses(name):
    sets = ["kv_cache.calibrate=never"] if name in CALIBRATED_KV else []
    policy = load_policy(name, overrides=sets)
    config, rollout, fsdp, algorithm = _verl_config(_launch(name, sets=sets))

    assert rollout.name == "sglang" and rollout.calculate_log_probs is True
    assert rollout.quantization is None  # never verl's own re-quantization unless asked
    sglang = OmegaConf.to_container(config.actor_rollout_ref.rollout.engine_kwargs.sglang)
    fp8_rollout = any(r.linear is not None for r in policy.rules_for("rollout"))
    assert (sglang.get("quantization") == "fp8") == fp8_rollout
    if fp8_rollout:
        quant = json.loads(sglang["json_model_override_args"])["quantization_config"]
        assert quant["quant_method"] == "fp8" and quant["weight_block_size"] == [128, 128]
        assert quant["ignored_layers"] == ["lm_head"]  # explicit names, no patterns
        assert rollout.checkpoint_engine.backend == "naive"
    assert sglang.get("kv_cache_dtype") == ("fp8_e4m3" if policy.kv_cache.is_fp8 else None)
    assert fsdp.model_dtype == ("bf16" if policy.master_weights.value == "bf16" else "fp32")

    for key, value in verl_rollout_correction(policy.correction).items():  # verl reads back what we wrote
        assert getattr(algorithm.rollout_correction, key.rpartition(".")[2]) == value, key
    env = OmegaConf.to_container(config.ray_kwargs.ray_init.runtime_env.env_vars)
    assert env[POLICY_ENV] == "/tmp/precision-verl-test/policy.yaml"


def test_one_sample_per_prompt_turns_on_sglang_deterministic_inference():
    config, *_ = _verl_config(_launch("jetrl_unified", "actor_rollout_ref.rollout.n=1"))
    assert config.actor_rollout_ref.rollout.engine_kwargs.sglang.enable_deterministic_inference is True
    launch = _launch("jetrl_unified")  # n=8: the mode would make a group's samples identical
    assert "enable_deterministic_inference" not in str(launch.argv)
    assert any("deterministic inference OFF" in note for note in launch.notes)


def test_native_fp8_is_an_explicit_opt_in_labelled_as_requantized_by_verl():
    launch = _launch("fp8_rollout_naive", "actor_rollout_ref.rollout.quantization=fp8")
    config, rollout, *_ = _verl_config(launch)
    assert rollout.quantization == "fp8"
    assert "quantization" not in config.actor_rollout_ref.rollout.engine_kwargs.sglang
    assert launch.env["PRECISION_ROLLOUT_WEIGHTS"] == "verl"
    assert any("RE-QUANTIZED BY VERL" in note for note in launch.notes)


@pytest.mark.parametrize("name", sorted(CALIBRATED_KV))
def test_calibrated_fp8_kv_cache_is_refused_with_the_reason(name):
    with pytest.raises(UnsupportedError, match=r"kv_cache.calibrate: every_weight_update cannot run on verl.*"
                       r"k_scale_float.*hint: --set kv_cache.calibrate=never"):
        _launch(name)


@pytest.mark.parametrize("sets, message", [
    (["rules.unified[1].linear.weight={dtype: float8_e4m3, granularity: block, block: [128, 128], scale: pow2}"],
     r"SGLang's block-FP8 linear takes weight as 128x128 e4m3 blocks.*UE8M0"),
    (["master_weights=fp16"], r"master weights in fp32 or bf16"),
])
def test_numerics_sglang_or_verl_cannot_run_are_refused(sets, message):
    with pytest.raises(UnsupportedError, match=message):
        _launch("jetrl_unified", sets=sets)


def test_a_user_override_of_a_policy_key_is_refused():
    with pytest.raises(UsageError, match=r"algorithm.rollout_correction.rollout_is is decided by the policy"):
        _launch("fp8_rollout_naive", "algorithm.rollout_correction.rollout_is=sequence")
