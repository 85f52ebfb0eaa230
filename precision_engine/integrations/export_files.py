"""The files of an export directory, read and written so that damage is refused, never loaded.

`export_checkpoint` ends by writing `MANIFEST_FILE`: the size and sha256 of every file it wrote. It is both the
integrity record that `verify_manifest` checks before anything is loaded (a flipped byte, a shard replaced by a
copy of another, two tensors renamed, an edited config.json) and the marker that lets `--overwrite` replace a
directory: only a directory holding one was written by an export.

`read_checkpoint` reads the safetensors files the way the index describes them, and refuses an index that
names a missing file, a file whose tensors are not the ones the index assigns to it, or a tensor stored twice.
Every error names the file (and the tensor); raw SafetensorError / JSONDecodeError / OSError never escape.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from precision_engine.errors import CheckpointError

MANIFEST_FILE = "precision_export.json"
MANIFEST_KIND = "precision-engine export"
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
_CHUNK = 1 << 24


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_path(path: Path) -> None:
    """Flush a file's or a directory's contents to disk (a directory's fsync makes its entries durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(directory: Path) -> Path:
    """Record size and sha256 of every file in `directory` (written last, after every other file is synced)."""
    files = {}
    for path in sorted(directory.iterdir()):
        if path.is_file() and path.name != MANIFEST_FILE:
            files[path.name] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = directory / MANIFEST_FILE
    manifest.write_text(json.dumps({"kind": MANIFEST_KIND, "version": 1, "files": files}, indent=1) + "\n")
    fsync_path(manifest)
    return manifest


def is_export_dir(directory: Path) -> bool:
    """Whether `directory` was written by `export_checkpoint` (it holds our manifest)."""
    try:
        document = json.loads((directory / MANIFEST_FILE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(document, dict) and document.get("kind") == MANIFEST_KIND


def verify_manifest(directory: Path, *, hashes: bool = True) -> None:
    """Every file the manifest lists has its recorded size and sha256 (its size only, without `hashes`: cheap,
    and enough to find a missing or truncated file), and no weights file is unlisted."""
    manifest = directory / MANIFEST_FILE
    document = read_json(manifest, what=f"the export manifest (hint: {directory} was not written by "
                         "`precision export`, or the manifest was deleted)")
    files = document.get("files") if isinstance(document, dict) else None
    if not isinstance(files, dict) or document.get("kind") != MANIFEST_KIND:
        raise CheckpointError(f"{manifest}: not a precision-engine export manifest")
    for name, entry in files.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{path}: missing (the export manifest lists it)")
        if not isinstance(entry, dict) or path.stat().st_size != entry.get("bytes") \
                or hashes and sha256_file(path) != entry.get("sha256"):
            raise CheckpointError(f"{path}: content differs from the export manifest (damaged or edited)")
    unlisted = sorted(p.name for p in directory.glob("*.safetensors") if p.name not in files)
    if unlisted:
        raise CheckpointError(f"{directory / unlisted[0]}: a weights file the export manifest does not list")


def read_json(path: Path, *, what: str = "a JSON file"):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing ({what})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: not readable JSON ({err})") from None


def weight_files(directory: Path) -> dict[str, list[str] | None]:
    """file name -> the tensor names the index assigns to it (None: a single file, whatever it holds)."""
    index = directory / INDEX_FILE
    if index.is_file():
        document = read_json(index, what="the shard index")
        weight_map = document.get("weight_map") if isinstance(document, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index}: no weight_map")
        files: dict[str, list[str]] = {}
        for name, file_name in weight_map.items():
            if not isinstance(file_name, str) or Path(file_name).name != file_name:
                raise CheckpointError(f"{index}: {name} maps to {file_name!r}, not a file beside the index")
            files.setdefault(file_name, []).append(name)
        return files
    if (directory / SINGLE_FILE).is_file():
        return {SINGLE_FILE: None}
    raise CheckpointError(f"{directory}: no {SINGLE_FILE} or {INDEX_FILE}")


def read_checkpoint(directory: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of an exported checkpoint, exactly as stored (CPU), each exactly once."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    directory = Path(directory)
    tensors: dict[str, torch.Tensor] = {}
    for file_name, assigned in weight_files(directory).items():
        path = directory / file_name
        try:
            loaded = load_file(path)
        except FileNotFoundError:
            raise CheckpointError(f"{path}: missing (the shard index names it)") from None
        except (SafetensorError, OSError, ValueError) as err:
            raise CheckpointError(f"{path}: not a readable safetensors file ({err})") from None
        if assigned is not None and sorted(loaded) != sorted(assigned):
            extra = sorted(set(loaded) - set(assigned))
            missing = sorted(set(assigned) - set(loaded))
            detail = f"holds {extra[0]}, which the index puts elsewhere" if extra else f"lacks {missing[0]}"
            raise CheckpointError(f"{path}: {detail} (the shard does not match {INDEX_FILE})")
        twice = sorted(set(loaded) & set(tensors))
        if twice:
            raise CheckpointError(f"{path}: {twice[0]} is stored in two files")
        tensors.update(loaded)
    return tensors
