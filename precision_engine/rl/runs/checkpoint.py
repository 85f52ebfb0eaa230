"""Checkpoints that a kill -9 cannot half-write and a resume can trust.

    checkpoints/step_000120/
      model.safetensors   the model's state_dict
      optimizer.pt        the optimizer's state_dict (torch.save; read back with weights_only=True)
      rng.safetensors     torch CPU and CUDA generator states, and every named torch.Generator passed in
      state.json          step, data loader position, trainer state, python `random` and numpy RNG states
      manifest.json       sha256 and size of each file above; written last

A checkpoint is built in a hidden staging directory and renamed into place, so a `step_*` directory is always
complete; old ones are retired by a rename before they are deleted, for the same reason. The latest one is
found by scanning names (no symlink to dangle). Loading checks the manifest before it touches the model, so a
damaged checkpoint raises CheckpointError naming the file and leaves the model and optimizer as they were.
Nothing is unpickled: tensors are safetensors, the optimizer goes through torch.load(weights_only=True), and
the rest is JSON.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from precision_engine.errors import CheckpointError
from precision_engine.rl.runs.files import fsync_dir, grant_default_permissions, to_json

CHECKPOINT_FORMAT = "precision-engine-checkpoint/1"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.safetensors"
STATE_FILE = "state.json"
MANIFEST_FILE = "manifest.json"

_NAME = re.compile(r"step_(\d+)")
_STAGING, _RETIRED = ".staging-", ".retired-"


@dataclass(frozen=True)
class Checkpoint:
    """What a load restored besides the tensors: the step it was taken after, and the caller's own state."""

    step: int
    path: Path
    data_state: dict[str, Any] = field(default_factory=dict)
    trainer_state: dict[str, Any] = field(default_factory=dict)
    skipped: tuple[Path, ...] = ()  # damaged newer checkpoints passed over (fallback=True only)


def checkpoints_dir(run_dir: str | os.PathLike) -> Path:
    """`run_dir/checkpoints`: every function here takes a RunDir or a path to one."""
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The run's checkpoint directories, oldest step first."""
    directory = checkpoints_dir(run_dir)
    if not directory.exists():
        return []
    if not directory.is_dir():  # else a resume would start over, dropping every logged row
        raise CheckpointError(f"{directory} is not a directory (hint: move it aside; it holds the checkpoints)")
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME.fullmatch(p.name)) and p.is_dir()]
    return [path for _, path in sorted(found)]


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    generators: Mapping[str, torch.Generator] | None = None,
    data_state: Mapping[str, Any] | None = None,
    trainer_state: Mapping[str, Any] | None = None,
    keep_last: int | None = 3,
) -> Path:
    """Write `checkpoints/step_{step:06d}/` atomically and keep only the newest `keep_last` (None: all).

    Call it after logging step `step`'s metrics row. `data_state` (epoch, index, shuffle seed or permutation)
    and `trainer_state` must be JSON-able; tensors in them come back as lists. The global torch, CUDA, python
    and (when imported) numpy RNG states are always saved; `generators` adds named ones (e.g. the sampler's).
    """
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 or None, got {keep_last}")
    directory = checkpoints_dir(run_dir)
    directory.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(directory)
    final = directory / f"step_{step:06d}"
    staging = Path(tempfile.mkdtemp(prefix=f"{_STAGING}{final.name}.", dir=directory))
    try:
        save_file(_own_tensors(model.state_dict()), staging / MODEL_FILE)
        if optimizer is not None:
            buffer = io.BytesIO()
            torch.save(optimizer.state_dict(), buffer)
            (staging / OPTIMIZER_FILE).write_bytes(buffer.getvalue())
        save_file(_torch_rng_states(generators or {}), staging / RNG_FILE)
        state = {
            "format": CHECKPOINT_FORMAT,
            "step": step,
            "data_state": dict(data_state or {}),
            "trainer_state": dict(trainer_state or {}),
            "rng": _host_rng_states(),
            "generators": sorted(generators or {}),
        }
        (staging / STATE_FILE).write_text(to_json(state, indent=1) + "\n")
        files = {path.name: _sync_and_hash(path) for path in sorted(staging.iterdir())}
        manifest = {"format": CHECKPOINT_FORMAT, "step": step, "files": files}
        (staging / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
        _sync_and_hash(staging / MANIFEST_FILE)
        grant_default_permissions(staging)
        fsync_dir(staging)
        if final.exists():  # re-saving a step (after resuming from an older checkpoint): retire the old one
            _retire(final)
        os.rename(staging, final)
        fsync_dir(directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if keep_last is not None:
        for old in list_checkpoints(run_dir)[:-keep_last]:
            _retire(old)
        _remove_leftovers(directory)
    return final


def verify_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Check every file against the manifest; returns state.json. CheckpointError names the first bad file."""
    path = Path(path)
    manifest_path = path / MANIFEST_FILE
    if not manifest_path.is_file():
        raise CheckpointError(f"{manifest_path} is missing: the checkpoint is incomplete")
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{manifest_path} is unreadable or corrupted ({err})") from None
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{file} is missing (listed in {MANIFEST_FILE})")
        size = file.stat().st_size
        if size != expected["bytes"]:
            raise CheckpointError(
                f"{file} is truncated or altered: {size} bytes, the manifest says {expected['bytes']}"
            )
        digest = _sha256(file)
        if digest != expected["sha256"]:
            raise CheckpointError(
                f"{file} is corrupted: sha256 {digest[:12]}..., the manifest says {expected['sha256'][:12]}..."
            )
    for name in (MODEL_FILE, RNG_FILE, STATE_FILE):
        if name not in files:
            raise CheckpointError(f"{path / name} is missing from {manifest_path}")
    state = json.loads((path / STATE_FILE).read_text())
    if state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path / STATE_FILE}: not a {CHECKPOINT_FORMAT} checkpoint")
    return state


def load_checkpoint(
    path: str | os.PathLike,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    generators: Mapping[str, torch.Generator] | None = None,
) -> Checkpoint:
    """Verify, then restore the model, optimizer and every RNG stream in place.

    Saved CUDA generator states are restored only where as many CUDA devices are present (a CPU resume of a
    GPU run keeps the CPU streams exact). Each name in `generators` must have been saved.
    """
    path = Path(path)
    return _restore(path, verify_checkpoint(path), model, optimizer, generators or {})


def load_latest_checkpoint(
    run_dir: str | os.PathLike,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    generators: Mapping[str, torch.Generator] | None = None,
    fallback: bool = False,
) -> Checkpoint | None:
    """Load the newest checkpoint; None when the run has none.

    A damaged newest checkpoint raises CheckpointError, unless `fallback`: then it is renamed
    `step_*.corrupt` (kept for inspection, never picked again), a warning names it, and the next older
    intact one is loaded.
    """
    skipped: list[Path] = []
    for path in reversed(list_checkpoints(run_dir)):
        try:
            state = verify_checkpoint(path)
        except CheckpointError as err:
            if not fallback:
                raise CheckpointError(f"{err} (hint: --resume --fallback, or fallback=True, sets it aside and "
                                      "continues from the previous intact checkpoint)") from None
            warnings.warn(f"{err}; falling back to an older checkpoint", stacklevel=2)
            skipped.append(_set_aside(path))
            continue
        checkpoint = _restore(path, state, model, optimizer, generators or {})
        return replace(checkpoint, skipped=tuple(skipped))
    if skipped:
        raise CheckpointError(f"no intact checkpoint in {checkpoints_dir(run_dir)} (set aside: {skipped})")
    return None


def _restore(path: Path, state: Mapping[str, Any], model, optimizer, generators: Mapping) -> Checkpoint:
    tensors = _load_tensors(path / MODEL_FILE)
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{path / MODEL_FILE} does not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    reshaped = [f"{k} {tuple(tensors[k].shape)}, model {tuple(v.shape)}" for k, v in expected.items()
                if v.shape != tensors[k].shape]
    if reshaped:
        raise CheckpointError(f"{path / MODEL_FILE} does not fit the model: shapes differ: {reshaped[:5]}")
    rng = _load_tensors(path / RNG_FILE)
    absent = sorted(name for name in generators if f"generator.{name}" not in rng)
    if absent:
        saved = state["generators"]
        raise CheckpointError(f"{path / RNG_FILE} has no state for generator(s) {absent} (saved: {saved})")
    optimizer_state = None
    if optimizer is not None:
        if not (path / OPTIMIZER_FILE).is_file():
            raise CheckpointError(f"{path / OPTIMIZER_FILE} is missing: the checkpoint has no optimizer state")
        try:
            optimizer_state = torch.load(path / OPTIMIZER_FILE, map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises UnpicklingError or RuntimeError with its own wording
            raise CheckpointError(f"{path / OPTIMIZER_FILE} could not be read safely ({err})") from None
    # Everything is read and checked: only now change the caller's objects.
    model.load_state_dict(tensors, strict=True)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    _restore_rng(rng, state["rng"], generators)
    return Checkpoint(state["step"], path, state["data_state"], state["trainer_state"])


def _own_tensors(state_dict: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """CPU copies that own their storage: safetensors refuses shared (tied) or non-contiguous tensors."""
    tensors = {}
    for name, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"state_dict entry {name!r} is a {type(value).__name__}, not a tensor")
        tensors[name] = value.detach().to("cpu", copy=True).contiguous()
    return tensors


def _torch_rng_states(generators: Mapping[str, torch.Generator]) -> dict[str, torch.Tensor]:
    states = {"torch.cpu": torch.get_rng_state()}
    if torch.cuda.is_initialized():  # never used: its streams are still where the run's manual_seed put them
        for index, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
            states[f"torch.cuda.{index}"] = cuda_state
    for name, generator in generators.items():
        states[f"generator.{name}"] = generator.get_state()
    return {name: state.to("cpu", copy=True) for name, state in states.items()}


def _host_rng_states() -> dict[str, Any]:
    """Python's `random`, and numpy's global generator when the process uses numpy (never imported here)."""
    version, internal, gauss = random.getstate()
    states: dict[str, Any] = {"python": [version, list(internal), gauss]}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        kind, keys, position, has_gauss, cached = numpy.random.get_state()
        states["numpy"] = [kind, keys.tolist(), position, has_gauss, cached]
    return states


def _restore_rng(tensors: Mapping[str, torch.Tensor], host: Mapping[str, Any], generators: Mapping) -> None:
    torch.set_rng_state(tensors["torch.cpu"])
    cuda = sorted((int(k.rsplit(".", 1)[1]), v) for k, v in tensors.items() if k.startswith("torch.cuda."))
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all([state for _, state in cuda])
    for name, generator in generators.items():
        generator.set_state(tensors[f"generator.{name}"])
    version, internal, gauss = host["python"]
    random.setstate((version, tuple(internal), gauss))
    if "numpy" in host:
        import numpy

        kind, keys, position, has_gauss, cached = host["numpy"]
        numpy.random.set_state((kind, numpy.asarray(keys, dtype=numpy.uint32), position, has_gauss, cached))


def _load_tensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(file, device="cpu")
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{file} could not be read ({err})") from None


def _sync_and_hash(file: Path) -> dict[str, Any]:
    with file.open("rb+") as handle:
        os.fsync(handle.fileno())
    return {"sha256": _sha256(file), "bytes": file.stat().st_size}


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _retire(path: Path) -> None:
    """Rename out of the `step_*` namespace first, so a kill mid-delete never leaves a partial checkpoint."""
    retired = path.with_name(f"{_RETIRED}{path.name}.{os.getpid()}")
    os.rename(path, retired)
    fsync_dir(path.parent)
    shutil.rmtree(retired, ignore_errors=True)


def _remove_leftovers(directory: Path) -> None:
    """Staging and retired directories a killed save left behind."""
    for path in directory.iterdir():
        if path.name.startswith((_STAGING, _RETIRED)):
            shutil.rmtree(path, ignore_errors=True)


def _set_aside(path: Path) -> Path:
    target, n = path.with_name(f"{path.name}.corrupt"), 1
    while target.exists():
        target, n = path.with_name(f"{path.name}.corrupt{n}"), n + 1
    os.rename(path, target)
    return target

