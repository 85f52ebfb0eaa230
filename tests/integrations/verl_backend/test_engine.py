"""The plugin and the FSDP engine subclass, with verl 0.9.1 itself.

- `import verl` finds the plugin through its own `verl.plugins` entry-point loading (a fresh interpreter).
- The engine builds a tiny Llama the way verl's FSDP2 engine does, on the CPU, one process, gloo: verl's
  `initialize()` -> `_build_module` (HF from_pretrained) -> our training rewrites -> `fully_shard` ->
  optimizer. verl 0.9.1 cannot run on a CPU by itself: its platform falls back to CUDA, so the device mesh,
  `get_device_id` and the GPU-memory log call CUDA. The test points exactly those five helpers at the CPU
  (`_cpu_verl`); everything else is verl's code. What it cannot reach: Ray, SGLang, the weight-update RPC.
- The weights the engine yields for SGLang are byte-identical to `Fp8Linear.quantized_weight()` as the FSDP
  forward computes it (unsharded, bf16 mixed precision).
Slow: ~45 s on 2 cores (verl import ~10 s, model build, three forwards, one optimizer step).
"""

import os
import subprocess
import sys

import pytest
import torch
import yaml

pytest.importorskip("verl", reason="verl is not installed (CI runs these in its verl venv)")
pytestmark = pytest.mark.slow


def test_import_verl_loads_the_plugin_through_its_entry_points():
    code = ("import verl\nfrom verl.workers.engine import EngineRegistry\n"
            "print(EngineRegistry._engines['language_model']['fsdp2'][('cuda', 'nvidia')].__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=os.environ | {"VERL_USE_EXTERNAL_PLUGINS": "auto"})
    assert out.stdout.strip() == "PrecisionFSDPEngine"


def test_the_registry_selects_the_engine_for_fsdp_and_fsdp2(monkeypatch):
    from verl.workers.engine import EngineRegistry

    from precision_engine.integrations.verl.engine import PrecisionFSDPEngine

    monkeypatch.setenv("VERL_ENGINE_DEVICE", "cuda")
    monkeypatch.setenv("VERL_ENGINE_VENDOR", "nvidia")
    for backend in ("fsdp", "fsdp2"):
        assert EngineRegistry.get_engine_cls("language_model", backend) is PrecisionFSDPEngine


def _cpu_verl(monkeypatch):
    """The five places verl 0.9.1 calls CUDA unconditionally, pointed at the CPU."""
    import verl.utils.fsdp_utils as fsdp_utils
    import verl.workers.engine.fsdp.transformer_impl as impl
    import verl.workers.engine.fsdp.utils as fsdp_engine_utils

    monkeypatch.setattr(fsdp_engine_utils, "get_device_name", lambda: "cpu")  # init_device_mesh
    monkeypatch.setattr(impl, "device_name", "cpu")
    monkeypatch.setattr(impl, "get_device_id", lambda: "cpu")
    monkeypatch.setattr(impl, "log_gpu_memory_usage", lambda *a, **k: None)
    monkeypatch.setattr(fsdp_utils, "get_device_id", lambda: "cpu")


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    import torch.distributed as dist
    from verl.trainer.config.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig

    from precision_engine.integrations.verl.engine import PrecisionFSDPEngine
    from precision_engine.models.loader import build_model
    from precision_engine.policy import load_policy

    model_dir = tmp_path_factory.mktemp("tiny-llama")
    build_model("tiny-llama", device="cpu", dtype="fp32", seed=0).save_pretrained(model_dir)
    policy_file = model_dir / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(dict(load_policy("jetrl_unified").resolved)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PRECISION_POLICY", str(policy_file))
        mp.setenv("MASTER_ADDR", "127.0.0.1")
        mp.setenv("MASTER_PORT", "29561")
        if not dist.is_initialized():
            dist.init_process_group("gloo", rank=0, world_size=1)
        _cpu_verl(mp)
        engine = PrecisionFSDPEngine(
            model_config=HFModelConfig(path=str(model_dir), load_tokenizer=False,
                                       override_config={"attn_implementation": "sdpa"}),
            engine_config=FSDPEngineConfig(strategy="fsdp2", use_torch_compile=False),
            optimizer_config=FSDPOptimizerConfig(lr=1e-5),
            checkpoint_config=CheckpointConfig(),
        )
        engine.initialize()
        yield engine


def test_the_engine_trains_the_policy_training_phase_under_fsdp2(engine):
    from torch.distributed.fsdp import FSDPModule

    from precision_engine.numerics.linear import Fp8Linear

    assert isinstance(engine.module, FSDPModule)
    fp8 = {name for name, m in engine.module.named_modules() if isinstance(m, Fp8Linear)}
    planned = {m.module.name for m in engine.plan.phases["train"].modules if m.is_fp8}
    assert fp8 == planned and len(fp8) == 14  # q/k/v/o, gate/up/down in each of 2 layers


def _forward_fp8_bytes(engine):
    """Q(W) of every Fp8Linear as the FSDP forward computes it (inside the forward: the unsharded bf16 weight)."""
    from precision_engine.numerics.linear import Fp8Linear

    seen = {}

    def record(module, args, name):
        q = module.quantized_weight()
        seen[name] = (module.weight.dtype, q.data.clone(), q.scale.clone())

    hooks = [m.register_forward_pre_hook(lambda mod, args, n=name: record(mod, args, n))
             for name, m in engine.module.named_modules() if isinstance(m, Fp8Linear)]
    try:
        with torch.no_grad():
            engine.module(input_ids=torch.randint(0, 500, (2, 9)))
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def _assert_sent_bytes_equal(engine, seen):
    params, peft = engine.get_per_tensor_param()
    sent = dict(params)
    assert peft is None and len(seen) == 14
    for name, (dtype, data, scale) in seen.items():
        assert dtype == torch.bfloat16
        weight, weight_scale_inv = sent[f"{name}.weight"], sent[f"{name}.weight_scale_inv"]
        assert weight.dtype == torch.float8_e4m3fn and weight_scale_inv.dtype == torch.float32
        assert torch.equal(weight.view(torch.uint8), data.view(torch.uint8)), name
        assert torch.equal(weight_scale_inv.view(torch.int32), scale.view(torch.int32)), name
    return sent


def test_weights_for_sglang_are_the_fsdp_forwards_fp8_bytes(engine):
    sent = _assert_sent_bytes_equal(engine, _forward_fp8_bytes(engine))
    assert sent["model.embed_tokens.weight"].dtype == torch.bfloat16
    assert not any(key.endswith("weight_scale_inv") and key.removesuffix("_scale_inv") not in sent for key in sent)


def test_after_an_optimizer_step_forward_and_sync_use_the_new_bytes(engine):
    before = _forward_fp8_bytes(engine)
    for group in engine.optimizer.param_groups:
        group["lr"] = 0.05  # large enough to move bf16 weights
    for p in engine.module.parameters():
        p.grad = torch.full_like(p, 1.0)
    engine.optimizer_step()
    after = _forward_fp8_bytes(engine)
    name = "model.layers.0.self_attn.q_proj"
    assert not torch.equal(before[name][1].view(torch.uint8), after[name][1].view(torch.uint8))
    _assert_sent_bytes_equal(engine, after)


def test_the_delta_sharded_checkpoint_engine_is_refused_while_the_rollout_runs_fp8(engine):
    from precision_engine.errors import UnsupportedError

    with pytest.raises(UnsupportedError, match="checkpoint_engine.backend=naive"):
        engine.get_per_tensor_param_shard()
