"""Checkpoints: an exact round trip of weights, optimizer and every RNG stream; keep-last-K; damaged
checkpoints give an error naming the file and leave the model untouched; nothing is unpickled."""

import io
import json
import random
import warnings

import numpy as np
import pytest
import torch

from precision_engine.errors import CheckpointError
from precision_engine.rl.runs import list_checkpoints, load_checkpoint, load_latest_checkpoint, save_checkpoint
from precision_engine.rl.runs.checkpoint import MANIFEST_FILE, MODEL_FILE, OPTIMIZER_FILE, _sha256


class Tied(torch.nn.Module):
    """Tied embedding and head, like small Llamas: safetensors refuses shared storage unless we copy."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6)
        self.mid = torch.nn.Linear(6, 6)
        self.head = torch.nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor([1.5], dtype=torch.bfloat16))

    def forward(self, ids):
        return self.head(self.mid(self.embed(ids)) * self.scale.float())


def _train_step(model, optimizer, generator):
    ids = torch.randint(0, 11, (4, 5), generator=generator)
    loss = model(ids).logsumexp(-1).mean() + 0.01 * torch.randn(())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def _draws(generator):
    return (torch.rand(3), torch.rand(3, generator=generator), random.random(), np.random.rand())


def _setup(seed=0):
    torch.manual_seed(seed)
    model = Tied()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(seed + 1)
    _train_step(model, optimizer, generator)
    return model, optimizer, generator


def test_round_trip_restores_weights_optimizer_and_rng_streams(tmp_path):
    model, optimizer, generator = _setup()
    random.seed(5)
    np.random.seed(6)
    path = save_checkpoint(tmp_path, 7, model=model, optimizer=optimizer, generators={"sampler": generator},
                           data_state={"epoch": 2, "index": 16, "permutation": torch.tensor([3, 1, 2])},
                           trainer_state={"kl_coef": 0.001})
    assert path.name == "step_000007" and path.parent == tmp_path / "checkpoints"
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    expected_draws = _draws(generator)
    _train_step(model, optimizer, generator)
    expected_after = {k: v.clone() for k, v in model.state_dict().items()}

    fresh, fresh_optimizer, fresh_generator = _setup(seed=99)  # different weights, moments and streams
    checkpoint = load_latest_checkpoint(tmp_path, model=fresh, optimizer=fresh_optimizer,
                                        generators={"sampler": fresh_generator})

    assert checkpoint.step == 7 and checkpoint.path == path
    assert checkpoint.data_state == {"epoch": 2, "index": 16, "permutation": [3, 1, 2]}
    assert checkpoint.trainer_state == {"kl_coef": 0.001}
    for name, tensor in fresh.state_dict().items():
        assert tensor.dtype == weights[name].dtype and torch.equal(tensor, weights[name]), name
    assert fresh.head.weight is fresh.embed.weight  # loading copies into the tied parameter, tie kept
    draws = _draws(fresh_generator)
    assert all(torch.equal(a, b) if torch.is_tensor(a) else a == b for a, b in zip(draws, expected_draws))
    # The restored optimizer (moments, step count) takes the very same next step.
    _train_step(fresh, fresh_optimizer, fresh_generator)
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, expected_after[name]), name


def test_keep_last_k_and_latest_by_scanning(tmp_path):
    model, optimizer, generator = _setup()
    for step in (5, 10, 15, 20, 100):
        save_checkpoint(tmp_path, step, model=model, optimizer=optimizer, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000020", "step_000100"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_000020", "step_000100"]
    (tmp_path / "checkpoints" / ".staging-step_000105.abc").mkdir()  # a save killed before its rename
    assert load_latest_checkpoint(tmp_path, model=model).step == 100
    save_checkpoint(tmp_path, 105, model=model, keep_last=None)
    assert [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")] == []
    assert load_latest_checkpoint(tmp_path / "nowhere", model=model) is None


def _damage_truncate(file):
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def _damage_flip(file):
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0x40
    file.write_bytes(bytes(data))


@pytest.mark.parametrize(("file_name", "damage", "message"), [
    (MODEL_FILE, _damage_truncate, "is truncated or altered"),
    (OPTIMIZER_FILE, _damage_flip, "is corrupted: sha256"),
    (MANIFEST_FILE, lambda file: file.unlink(), "is missing: the checkpoint is incomplete"),
    (MANIFEST_FILE, _damage_truncate, "is unreadable or corrupted"),
])
def test_damaged_checkpoint_names_the_file_and_leaves_the_model_alone(tmp_path, file_name, damage, message):
    model, optimizer, generator = _setup()
    path = save_checkpoint(tmp_path, 3, model=model, optimizer=optimizer)
    damage(path / file_name)
    other, other_optimizer, _ = _setup(seed=1)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(CheckpointError, match=message) as caught:
        load_latest_checkpoint(tmp_path, model=other, optimizer=other_optimizer)
    assert str(path / file_name) in str(caught.value)
    assert all(torch.equal(v, before[k]) for k, v in other.state_dict().items())


def test_fallback_sets_the_damaged_one_aside_and_loads_the_previous(tmp_path):
    model, optimizer, generator = _setup()
    save_checkpoint(tmp_path, 10, model=model, optimizer=optimizer)
    newest = save_checkpoint(tmp_path, 20, model=model, optimizer=optimizer)
    _damage_truncate(newest / MODEL_FILE)
    with pytest.warns(UserWarning, match="step_000020/model.safetensors is truncated"):
        checkpoint = load_latest_checkpoint(tmp_path, model=model, optimizer=optimizer, fallback=True)
    assert checkpoint.step == 10
    assert [p.name for p in checkpoint.skipped] == ["step_000020.corrupt"]
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000010"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_latest_checkpoint(tmp_path, model=model, optimizer=optimizer).step == 10


def test_missing_generator_and_mismatched_model_are_clear(tmp_path):
    model, optimizer, generator = _setup()
    path = save_checkpoint(tmp_path, 1, model=model, generators={"sampler": generator})
    with pytest.raises(CheckpointError, match=r"no state for generator\(s\) \['eval'\] \(saved: \['sampler'\]\)"):
        load_checkpoint(path, model=model, generators={"eval": torch.Generator()})
    with pytest.raises(CheckpointError, match="does not fit the model: missing"):
        load_checkpoint(path, model=torch.nn.Linear(2, 2))
    wider = Tied()
    wider.mid = torch.nn.Linear(6, 6)
    wider.mid.bias = torch.nn.Parameter(torch.zeros(7))
    with pytest.raises(CheckpointError, match=r"shapes differ: \['mid.bias \(6,\), model \(7,\)'\]"):
        load_checkpoint(path, model=wider)
    assert torch.equal(wider.mid.bias, torch.zeros(7))
    with pytest.raises(CheckpointError, match="optimizer.pt is missing"):
        load_checkpoint(path, model=model, optimizer=optimizer)


class _Payload:
    def __reduce__(self):
        return (print, ("unpickled!",))


def test_optimizer_file_is_never_unpickled(tmp_path, capsys):
    model, optimizer, _ = _setup()
    path = save_checkpoint(tmp_path, 1, model=model, optimizer=optimizer)
    buffer = io.BytesIO()
    torch.save({"state": {}, "param_groups": [], "evil": _Payload()}, buffer)
    (path / OPTIMIZER_FILE).write_bytes(buffer.getvalue())
    manifest = json.loads((path / MANIFEST_FILE).read_text())  # a consistent manifest: only weights_only stops it
    manifest["files"][OPTIMIZER_FILE] = {"sha256": _sha256(path / OPTIMIZER_FILE), "bytes": len(buffer.getvalue())}
    (path / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="optimizer.pt could not be read safely"):
        load_checkpoint(path, model=model, optimizer=optimizer)
    assert "unpickled!" not in capsys.readouterr().out
