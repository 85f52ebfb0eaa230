"""A corpus of damaged exports: `load_checkpoint` refuses every one with the file or tensor named, and the
model keeps its weights. (issue 8, item 2: 20 of 50 such exports used to load silently.)

Two kinds of damage: "structural" cases rewrite the manifest after the damage, so the refusal comes from the
checks on tensors and config.json themselves (as for an export whose manifest a tool regenerated); "hashed"
cases leave it, and only the sha256 manifest can tell (a flipped payload byte, a scale x1000, swapped layers).
"""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from precision_engine.compile import compile_plan
from precision_engine.errors import OperandError, PrecisionError
from precision_engine.integrations import export_checkpoint, load_checkpoint
from precision_engine.integrations.export_files import MANIFEST_FILE, write_manifest
from precision_engine.models import build_model, load_inventory
from precision_engine.numerics.specs import NonFinite, NumericsSpec
from precision_engine.policy import load_policy
from precision_engine.rewrite import apply

Q = "model.layers.0.self_attn.q_proj"
K = "model.layers.0.self_attn.k_proj"  # [128, 256]: not square
SINGLE = "model.safetensors"


@pytest.fixture(scope="module")
def plan():
    return compile_plan(load_policy("jetrl_unified"), load_inventory("tiny-qwen3"))


@pytest.fixture(scope="module")
def exports(plan, tmp_path_factory):
    model = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=5)
    apply(plan, model, "rollout")
    root = tmp_path_factory.mktemp("exports")
    return {"single": export_checkpoint(model, plan, root / "single"),
            "sharded": export_checkpoint(model, plan, root / "sharded", max_shard_bytes=400_000)}


@pytest.fixture(scope="module")
def rollout(plan):
    model = build_model("tiny-qwen3", device="cpu", dtype="bf16", seed=11)
    apply(plan, model, "rollout")
    return model


def _edit_tensors(edit):
    def damage(d):
        tensors = load_file(d / SINGLE)
        edit(tensors)
        save_file(tensors, d / SINGLE, metadata={"format": "pt"})
    return damage


def _set(name, fn):
    def edit(tensors):
        tensors[name] = fn(tensors[name])
    return _edit_tensors(edit)


def _drop(predicate):
    return _edit_tensors(lambda t: [t.pop(k) for k in [k for k in t if predicate(k)]])


def _edit_config(edit):
    def damage(d):
        config = json.loads((d / "config.json").read_text())
        edit(config)
        (d / "config.json").write_text(json.dumps(config))
    return damage


def _scale(value):
    def fn(s):
        s = s.clone()
        s.view(-1)[0] = value
        return s
    return fn


def _nan_byte(w):
    w = w.clone()
    w.view(torch.uint8).view(-1)[3] = 0x7F
    return w


def _flip_payload_byte(d):
    data = bytearray((d / SINGLE).read_bytes())
    data[-100] ^= 0x01
    (d / SINGLE).write_bytes(bytes(data))


def _swap_layers(tensors):
    for suffix in (".weight", ".weight_scale_inv"):
        a, b = f"model.layers.0.mlp.up_proj{suffix}", f"model.layers.1.mlp.up_proj{suffix}"
        tensors[a], tensors[b] = tensors[b], tensors[a]


def _truncate(d):
    data = (d / SINGLE).read_bytes()
    (d / SINGLE).write_bytes(data[: len(data) // 2])


def _shard_names(d):
    return sorted(p.name for p in d.glob("model-*.safetensors"))


def _edit_index(edit):
    def damage(d):
        index = json.loads((d / "model.safetensors.index.json").read_text())
        edit(index, _shard_names(d))
        (d / "model.safetensors.index.json").write_text(json.dumps(index))
    return damage


def _copy_shard(d):
    first, second = _shard_names(d)[:2]
    shutil.copyfile(d / first, d / second)


def _kv(name_scale, value):
    def edit(tensors):
        tensors[f"model.layers.0.self_attn.{name_scale}"] = torch.tensor(value, dtype=torch.float32)
    return _edit_tensors(edit)


STRUCTURAL = {  # name: (export, damage, what the message must name)
    "every scale deleted": ("single", _drop(lambda k: k.endswith("weight_scale_inv")), "quantization_config"),
    "one scale deleted": ("single", _drop(lambda k: k == f"{Q}.weight_scale_inv"), Q),
    "a norm deleted": ("single", _drop(lambda k: k == "model.norm.weight"), "model.norm.weight: missing"),
    "an FP8 weight deleted": ("single", _drop(lambda k: k == f"{Q}.weight"), Q),
    "embedding deleted": ("single", _drop(lambda k: k == "model.embed_tokens.weight"), "embed_tokens"),
    "NaN scale": ("single", _set(f"{Q}.weight_scale_inv", _scale(float("nan"))), Q),
    "+Inf scale": ("single", _set(f"{Q}.weight_scale_inv", _scale(float("inf"))), Q),
    "negative scale": ("single", _set(f"{Q}.weight_scale_inv", _scale(-0.01)), Q),
    "zero scale": ("single", _set(f"{Q}.weight_scale_inv", _scale(0.0)), Q),
    "int32 scale": ("single", _set(f"{Q}.weight_scale_inv", lambda s: s.to(torch.int32)), "int32"),
    "bf16 scale": ("single", _set(f"{Q}.weight_scale_inv", lambda s: s.to(torch.bfloat16)), "bfloat16"),
    "fp64 scale": ("single", _set(f"{Q}.weight_scale_inv", lambda s: s.double()), "float64"),
    "NaN FP8 byte": ("single", _set(f"{Q}.weight", _nan_byte), "NaN"),
    "e5m2 weight": ("single", _set(f"{Q}.weight", lambda w: w.float().to(torch.float8_e5m2)), "float8_e5m2"),
    "weight transposed": ("single", _set(f"{K}.weight", lambda w: w.t().contiguous()), K),
    "scale of the wrong shape": ("single", _set(f"{Q}.weight_scale_inv", lambda s: s[:1].contiguous()), Q),
    "NaN in a norm": ("single", _set("model.norm.weight", _scale(float("nan"))), "model.norm.weight"),
    "norm of the wrong shape": ("single", _set("model.norm.weight", lambda w: w[:-1].contiguous()), "model.norm"),
    "int norm": ("single", _set("model.norm.weight", lambda w: w.to(torch.int32)), "model.norm.weight"),
    "FP8 codes in a bf16 module": ("single", _set("lm_head.weight", lambda w: w.to(torch.float8_e4m3fn)),
                                   "lm_head.weight"),
    "unknown tensor": ("single", _edit_tensors(lambda t: t.update(extra=torch.ones(2))), "extra"),
    "a bias the model lacks": ("single", _edit_tensors(lambda t: t.update({f"{Q}.bias": torch.ones(256)})),
                               f"{Q}.bias"),
    "NaN k_scale": ("single", _edit_tensors(lambda t: t.update({
        "model.layers.0.self_attn.k_scale": torch.tensor(float("nan")),
        "model.layers.0.self_attn.v_scale": torch.tensor(1.0)})), "k_scale"),
    "k_scale without v_scale": ("single", _kv("k_scale", 0.5), "v_scale"),
    "config.json deleted": ("single", lambda d: (d / "config.json").unlink(), "config.json"),
    "config.json not JSON": ("single", lambda d: (d / "config.json").write_text("{"), "config.json"),
    "hidden_act altered": ("single", _edit_config(lambda c: c.update(hidden_act="gelu")), "hidden_act"),
    "rope_theta altered": ("single", _edit_config(lambda c: c["rope_parameters"].update(rope_theta=1.0)),
                           "rope_parameters"),
    "quantization_config removed": ("single", _edit_config(lambda c: c.pop("quantization_config")),
                                    "quant_method"),
    "lm_head not ignored": ("single", _edit_config(lambda c: c["quantization_config"].update(ignored_layers=[])),
                            "lm_head"),
    "an FP8 module ignored": ("single", _edit_config(
        lambda c: c["quantization_config"]["ignored_layers"].append(Q)), Q),
    "other block size": ("single", _edit_config(
        lambda c: c["quantization_config"].update(weight_block_size=[64, 64])), "weight_block_size"),
    "truncated file": ("single", _truncate, SINGLE),
    "garbage file": ("single", lambda d: (d / SINGLE).write_bytes(b"\xff" * 64), SINGLE),
    "index omits a shard": ("sharded", _edit_index(
        lambda index, shards: index.update(weight_map={k: v for k, v in index["weight_map"].items()
                                                       if v != shards[1]})), "missing"),
    "shard replaced by a copy of another": ("sharded", _copy_shard, "safetensors"),
    "index names a missing shard": ("sharded", lambda d: (d / _shard_names(d)[2]).unlink(), "missing"),
    "index not JSON": ("sharded", lambda d: (d / "model.safetensors.index.json").write_text("]"), "index.json"),
    "index escapes the directory": ("sharded", _edit_index(
        lambda index, shards: index["weight_map"].update({"model.norm.weight": "../x.safetensors"})),
        "model.norm.weight"),
}

HASHED = {
    "one payload byte flipped": ("single", _flip_payload_byte, SINGLE),
    "a scale x1000": ("single", _set(f"{Q}.weight_scale_inv", lambda s: s * 1000), SINGLE),
    "two layers' weights swapped": ("single", _edit_tensors(_swap_layers), SINGLE),
    "config.json edited": ("single", _edit_config(lambda c: c.update(rms_norm_eps=0.1)), "config.json"),
    "config.json deleted": ("single", lambda d: (d / "config.json").unlink(), "config.json"),
    "a shard edited": ("sharded", lambda d: _flip(d / _shard_names(d)[1]), "model-00002"),
    "manifest deleted": ("single", lambda d: (d / MANIFEST_FILE).unlink(), MANIFEST_FILE),
    "manifest not ours": ("single", lambda d: (d / MANIFEST_FILE).write_text('{"kind": "x", "files": {}}'),
                          MANIFEST_FILE),
    "an unlisted weights file": ("single", lambda d: shutil.copyfile(d / SINGLE, d / "extra.safetensors"),
                                 "extra.safetensors"),
}


def _flip(path):
    data = bytearray(path.read_bytes())
    data[-10] ^= 0x40
    path.write_bytes(bytes(data))


def test_the_corpus_is_large():
    assert len(STRUCTURAL) + len(HASHED) >= 30


def _refused(exports, rollout, tmp_path, kind, damage, named, rewrite_manifest):
    target = tmp_path / "damaged"
    shutil.copytree(exports[kind], target)
    damage(target)
    if rewrite_manifest:
        (target / MANIFEST_FILE).unlink()
        write_manifest(target)
    before = {n: p.clone() for n, p in rollout.state_dict().items()}
    with pytest.raises(PrecisionError) as info:
        load_checkpoint(rollout, target)
    message = str(info.value)
    assert "\n" not in message
    if named:
        assert named in message, message
    assert all(torch.equal(p, before[n]) for n, p in rollout.state_dict().items())


@pytest.mark.parametrize("case", sorted(STRUCTURAL))
def test_structural_damage_is_refused(case, exports, rollout, tmp_path):
    _refused(exports, rollout, tmp_path, *STRUCTURAL[case], rewrite_manifest=True)


@pytest.mark.parametrize("case", sorted(HASHED))
def test_damage_only_the_manifest_sees_is_refused(case, exports, rollout, tmp_path):
    _refused(exports, rollout, tmp_path, *HASHED[case], rewrite_manifest=False)


def test_intact_exports_load(exports, rollout):
    for directory in exports.values():
        assert f"{Q}.weight_scale_inv" in load_checkpoint(rollout, directory)


@pytest.mark.parametrize("mode", [NonFinite.ERROR, NonFinite.WARN, NonFinite.PROPAGATE])
def test_load_quantized_honours_nonfinite(rollout, mode):
    """A NaN scale or a NaN FP8 byte: error raises, warn warns and loads, propagate loads (issue 8, item 2)."""
    import warnings

    from precision_engine.errors import NonFiniteError
    from precision_engine.numerics.linear import Fp8Linear

    spec = rollout.get_submodule(Q).spec
    linear = Fp8Linear(256, 200, spec, bias=False, numerics=NumericsSpec(nonfinite=mode), dtype=torch.bfloat16)
    wq = linear.quantized_weight()
    for data, scale in ((wq.data, _scale(float("nan"))(wq.scale)), (_nan_byte(wq.data), wq.scale)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if mode is NonFinite.ERROR:
                with pytest.raises(NonFiniteError, match="loaded"):
                    linear.load_quantized(data, scale)
                continue
            linear.load_quantized(data, scale)
        assert bool(caught) is (mode is NonFinite.WARN)
        assert linear.quantized_weight().data is data  # loaded as given, NaN included
    with pytest.raises(OperandError, match="zero or negative"):
        linear.load_quantized(wq.data, _scale(0.0)(wq.scale))
    with pytest.raises(OperandError, match="float32 scales"):
        linear.load_quantized(wq.data, wq.scale.double())
