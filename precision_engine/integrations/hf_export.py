"""What the rollout engine loads for a policy: block-FP8 weights from the trainer's master weights.

For every module the rollout plan runs in FP8, `weight` becomes float8_e4m3fn [N, K] plus `weight_scale_inv`
fp32 [ceil(N/128), ceil(K/128)] (a dequant multiplier despite its name), the layout of DeepSeek-V3 checkpoints
that SGLang's and vLLM's `Fp8Config` and transformers' `FineGrainedFP8Config` load. Everything else is written
in the module's planned compute dtype (bf16 by default). The FP8 bytes come from the same code the trainer's
forward uses (`Fp8Linear.quantized_weight()`, or the same `quantize_blocks` for a model not rewritten: for
128x128 e4m3 that is the exchange format's `to_block_fp8`), so rollout and training see the same bytes.

Fused MoE experts (transformers 5 keeps them as 3-D `gate_up_proj` / `down_proj`) are written per expert under
the names HF checkpoints use and SGLang loads, `mlp.experts.{e}.{gate,up,down}_proj.weight` (+ scale).

Three ways out: `quantization_config` (the dict), `iter_rollout_weights` (in-process weight sync, e.g. into
SGLang's `update_weights_from_tensor`), `export_checkpoint` (a safetensors directory, written atomically).
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from torch import nn

from precision_engine.errors import NonFiniteError, UnsupportedError, UsageError
from precision_engine.integrations.export_files import (  # noqa: F401 (read_checkpoint: re-exported)
    MANIFEST_FILE,
    fsync_path,
    is_export_dir,
    read_checkpoint,
    read_json,
    write_manifest,
)
from precision_engine.models.inventory import ModuleKind
from precision_engine.numerics.capabilities import WEIGHT_BLOCK
from precision_engine.numerics.formats import DType, Granularity, QuantFormat, ScaleKind
from precision_engine.integrations.sglang_kv_scales import kv_scale_tensors, write_sglang_kv_scales
from precision_engine.numerics.kv_cache import KVScales
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.quantize import COMPUTE_TORCH_DTYPE, quantize_blocks
from precision_engine.rewrite.experts import EXPERT_PARAMS, EXPERT_PARTS, Fp8Experts

ROLLOUT = "rollout"
KV_SCALES_FILE = "kv_cache_scales.json"  # pass to SGLang as --quantization-param-path
_SHARD_BYTES = 5 * 1024**3  # transformers' default max_shard_size


def quantization_config(plan, phase: str = ROLLOUT) -> dict:
    """`quantization_config` for config.json, read by SGLang/vLLM `Fp8Config` and transformers'
    `FineGrainedFP8Config`: the skip list goes under both `ignored_layers` (SGLang, vLLM) and
    `modules_to_not_convert` (transformers)."""
    phase_plan = _phase_plan(plan, phase)
    fp8 = [m for m in phase_plan.modules if m.is_fp8]
    _check_exportable(fp8)
    _check_fused_shards(phase_plan)
    gemm_kinds = (ModuleKind.LINEAR, ModuleKind.ROUTER, ModuleKind.EXPERTS)
    ignored = [m.module.name for m in phase_plan.modules if m.module.kind in gemm_kinds and not m.is_fp8]
    block = list(fp8[0].linear.weight.block) if fp8 else list(WEIGHT_BLOCK)
    config = {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "weight_block_size": block,
        "ignored_layers": ignored,
        "modules_to_not_convert": list(ignored),
    }
    if fp8 and fp8[0].linear.weight.scale is ScaleKind.POW2:
        config["scale_fmt"] = "ue8m0"  # DeepSeek-V3.1's key: power-of-two scales, as SGLang's DeepGEMM path reads
    return config


def _phase_plan(plan, phase: str):
    if phase not in plan.phases:
        raise UsageError(f"unknown phase {phase!r}; the plan has {', '.join(plan.phases)}")
    return plan.phases[phase]


def _check_exportable(fp8_modules) -> None:
    """The exchange format is one block layout of e4m3, for linears and fused experts."""
    routers = [m.module.name for m in fp8_modules if m.module.kind is ModuleKind.ROUTER]
    if routers:
        raise UnsupportedError(f"block-FP8 export of MoE routers is not supported: {routers[:4]}")
    formats = {m.linear.weight for m in fp8_modules}
    if len(formats) > 1:
        raise UnsupportedError(f"an FP8 checkpoint has one weight format; the plan uses {len(formats)}")
    for fmt in formats:
        if fmt.granularity is not Granularity.BLOCK or fmt.dtype is not DType.FLOAT8_E4M3:
            raise UnsupportedError(
                f"rollout weights must be e4m3 blocks (SGLang's block-FP8 loader); the plan uses {fmt.describe()}"
            )
    for m in fp8_modules:
        if m.module.kind is ModuleKind.EXPERTS and (m.module.weight_shape[1] // 2) % m.linear.weight.block[0]:
            raise UnsupportedError(
                f"{m.module.name}: gate and up projections must each fill whole {m.linear.weight.block[0]}-row "
                "blocks to be written as separate checkpoint tensors"
            )


def iter_rollout_weights(model: nn.Module, plan, phase: str = ROLLOUT) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) in HF naming, as the rollout engine loads them; tensors stay on the model's device.

    A Parameter tied to one already yielded (tied embeddings) is skipped: loaders re-tie it from the config. The
    checks run at the call, before any tensor: a plan the rollout engines cannot load raises UnsupportedError, a
    weight holding NaN or Inf NonFiniteError (a rollout engine fed in process, SGLang's update_weights_from_tensor,
    would serve it without a word).
    """
    phase_plan = _phase_plan(plan, phase)
    fp8 = {m.module.name for m in phase_plan.modules if m.is_fp8}
    _check_exportable([phase_plan.by_name[name] for name in fp8])
    _check_fused_shards(phase_plan)
    _check_output_embedding(model, fp8)
    _check_finite(model)
    return _rollout_tensors(model, phase_plan, fp8)


def _rollout_tensors(model: nn.Module, phase_plan, fp8: set[str]) -> Iterator[tuple[str, torch.Tensor]]:
    experts = {m.module.name for m in phase_plan.modules if m.module.kind is ModuleKind.EXPERTS}
    seen: set[int] = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        module_name, _, param_name = name.rpartition(".")
        if module_name in experts and param_name in EXPERT_PARAMS:
            module = model.get_submodule(module_name)
            planned = phase_plan.by_name[module_name]
            yield from _per_expert(module, module_name, param_name, planned)
        elif module_name in fp8 and param_name == "weight":
            fmt = phase_plan.by_name[module_name].linear.weight
            weight_fp8, weight_scale_inv = _block_fp8(model.get_submodule(module_name), fmt)
            yield name, weight_fp8
            yield f"{module_name}.weight_scale_inv", weight_scale_inv
        elif tensor.is_floating_point():
            planned = phase_plan.by_name.get(module_name)
            dtype = COMPUTE_TORCH_DTYPE.get(planned.compute if planned else DType.BF16, torch.bfloat16)
            yield name, tensor.detach().to(dtype)
        else:
            yield name, tensor.detach()


# Projections SGLang and vLLM load as one fused layer (QKVParallelLinear, MergedColumnParallelLinear); their
# `is_layer_skipped` refuses a checkpoint in which only some shards of a fused layer are quantized.
_FUSED_SHARDS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def _check_fused_shards(phase_plan) -> None:
    for shards in _FUSED_SHARDS:
        groups: dict[str, dict[str, bool]] = {}
        for m in phase_plan.modules:
            parent, _, leaf = m.module.name.rpartition(".")
            if leaf in shards:
                groups.setdefault(parent, {})[leaf] = m.is_fp8
        for parent, fp8 in groups.items():
            if len(set(fp8.values())) > 1:
                quantized = ", ".join(leaf for leaf, is_fp8 in fp8.items() if is_fp8)
                raise UnsupportedError(
                    f"{parent}: only {quantized} of {'/'.join(shards)} in FP8; rollout engines fuse them into one "
                    "layer, quantized as a whole or not at all (hint: one rule for all of them)"
                )


# How SGLang and vLLM shard each projection across tensor-parallel ranks: output rows (column parallel) or input
# columns (row parallel). A rank's block-FP8 shard must be whole weight blocks along the split dimension.
_COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
_ROW_PARALLEL = ("o_proj", "down_proj")


def check_tensor_parallel(model: nn.Module, plan, phase: str, tp_size: int) -> None:
    """Every FP8 projection splits into whole blocks on each of `tp_size` ranks (KV heads fewer than the
    ranks are replicated, one head per rank), else an UnsupportedError naming the module and the shape."""
    if tp_size < 1:
        raise UsageError(f"--tp must be >= 1, got {tp_size}")
    if tp_size == 1:
        return
    text = model.config.get_text_config(decoder=True)
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    for m in _phase_plan(plan, phase).modules:
        leaf = m.module.name.rpartition(".")[2]
        if not m.is_fp8 or m.module.kind is not ModuleKind.LINEAR or leaf not in _COLUMN_PARALLEL + _ROW_PARALLEL:
            continue
        n, k = m.module.weight_shape[-2:]
        block_n, block_k = m.linear.weight.block
        if leaf in _ROW_PARALLEL:
            dim, size, block = "input columns", k / tp_size, block_k
        elif leaf in ("k_proj", "v_proj") and kv_heads < tp_size:
            dim, size, block = "output rows", n / kv_heads, block_n
        else:
            dim, size, block = "output rows", n / tp_size, block_n
        if size != int(size) or int(size) % block:
            raise UnsupportedError(
                f"{m.module.name}: at --tp {tp_size} each rank holds {size:g} of its {n if dim[0] == 'o' else k} "
                f"{dim}, not a multiple of the {block}-wide FP8 blocks SGLang and vLLM shard by (hint: a smaller "
                f"--tp, or keep {leaf} in bf16)"
            )


def _check_output_embedding(model: nn.Module, fp8: set[str]) -> None:
    """SGLang's and vLLM's `Fp8Config` quantize LinearBase, MoE and attention layers only, and transformers puts
    the output embedding in `modules_to_not_convert`: an FP8 lm_head would load its raw FP8 values as BF16 (or,
    tied to embed_tokens, be skipped here and silently run in BF16)."""
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if get_head else None
    names = [name for name, module in model.named_modules() if module is head and name in fp8]
    if names:
        raise UnsupportedError(
            f"{names[0]} is the output embedding, which rollout engines load unquantized: it cannot be exported in "
            "FP8 (hint: keep it in bf16 with a `compute: bf16` rule)"
        )


def _per_expert(module: nn.Module, module_name: str, param_name: str, planned):
    """One fused 3-D Parameter -> HF per-expert tensors; gate_up_proj splits into gate_proj then up_proj."""
    weight = getattr(module, param_name)
    parts = EXPERT_PARTS[param_name]
    rows = weight.shape[1] // len(parts)
    dtype = COMPUTE_TORCH_DTYPE.get(planned.compute, torch.bfloat16)
    fp8 = planned.is_fp8
    for expert in range(weight.shape[0]):
        if fp8:
            if isinstance(module, Fp8Experts) and module.spec.weight == planned.linear.weight:  # the forward's bytes
                quantized = module.quantized_weight(param_name, expert)
            else:
                quantized = quantize_blocks(weight[expert].detach(), planned.linear.weight)
            data, scale = quantized.data, quantized.scale
            scale_rows = scale.shape[0] // len(parts)
        for i, part in enumerate(parts):
            prefix = f"{module_name}.{expert}.{part}"
            if fp8:
                yield f"{prefix}.weight", data[i * rows : (i + 1) * rows]
                yield f"{prefix}.weight_scale_inv", scale[i * scale_rows : (i + 1) * scale_rows]
            else:
                yield f"{prefix}.weight", weight[expert, i * rows : (i + 1) * rows].detach().to(dtype)


def _block_fp8(module: nn.Module, fmt: QuantFormat) -> tuple[torch.Tensor, torch.Tensor]:
    """Fp8Linear's cached Q(W) (the very bytes the trainer's forward multiplies with) when it runs the exported
    phase's format, else the same quantizer on the master weight (for 128x128 e4m3: exactly `to_block_fp8`)."""
    if isinstance(module, Fp8Linear) and module.spec.weight == fmt:
        quantized = module.quantized_weight()
    else:
        quantized = quantize_blocks(module.weight.detach(), fmt)
    return quantized.data, quantized.scale


def check_export_target(out_dir: str | Path, *, overwrite: bool = False, source: str | Path | None = None) -> Path:
    """The resolved `out_dir`, or a UsageError, before any model work: an existing path is replaced only with
    `overwrite`, only when it is a directory an earlier export wrote (it holds MANIFEST_FILE) and nothing else, and
    never when it is, or holds, the working directory or the `source` model. Creates nothing: missing parent
    directories are made by `export_checkpoint` when it writes (and removed again if it fails)."""
    from precision_engine.rl.runs.files import nearest_existing  # here: the rl.runs package is not import-cheap

    if not str(out_dir).strip():  # Path("") is the working directory, which an export never replaces
        raise UsageError("--out is empty; expected the checkpoint directory to write")
    try:
        out = Path(out_dir).expanduser().resolve()
        exists = out.exists() or out.is_symlink()
        if exists and not out.is_dir():
            raise UsageError(f"--out {out}: exists and is not a directory; an export never replaces it")
        if exists:
            _check_replaceable(out, overwrite, source)
        folder = nearest_existing(out.parent)
        if not folder.is_dir():
            raise UsageError(f"--out {out}: {folder} is not a directory")
    except OSError as err:  # ENAMETOOLONG, EACCES, ELOOP
        raise UsageError(f"--out {str(out_dir)[:200]}: {err.strerror or err}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: cannot write into {folder}")
    return out


def _make_parents(folder: Path, created: list[Path]) -> None:
    """mkdir -p `folder`, appending each directory it made to `created` (outermost first) for `_remove_dirs`."""
    for path in reversed([p for p in (folder, *folder.parents) if not p.is_dir()]):
        try:
            path.mkdir()
        except FileExistsError:  # made meanwhile by another process: not ours to remove
            if not path.is_dir():
                raise
            continue
        created.append(path)


def _remove_dirs(created: list[Path]) -> None:
    """Remove the directories `_make_parents` made, innermost first, as long as they are empty."""
    for path in reversed(created):
        try:
            path.rmdir()
        except OSError:  # something else was put there meanwhile: keep it, and so its parents
            return


# A full disk, as an OSError or as safetensors reports it ("I/O error: No space left on device (os error 28)").
_DISK_FULL = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded"}


def _disk_full(err: BaseException) -> str | None:
    """What `_DISK_FULL` says about `err`, or None when it is not a full disk."""
    if isinstance(err, OSError):
        return _DISK_FULL.get(err.errno)
    if isinstance(err, SafetensorError):
        return next((why for code, why in _DISK_FULL.items() if f"(os error {code})" in str(err)), None)
    return None


def _check_replaceable(out: Path, overwrite: bool, source: str | Path | None) -> None:
    if not overwrite:
        raise UsageError(f"{out} exists (hint: pass --overwrite or choose another --out)")
    cwd = Path.cwd().resolve()
    if out == cwd or out in cwd.parents:
        raise UsageError(f"--out {out}: is the working directory or holds it; --overwrite never replaces it")
    if source is not None:
        src = Path(source).expanduser().resolve()
        if out == src or out in src.parents:
            raise UsageError(f"--out {out}: is the source model (--model); --overwrite never replaces it")
    if not is_export_dir(out):
        raise UsageError(f"--out {out}: not written by `precision export` (no {MANIFEST_FILE}); --overwrite "
                         "replaces only an earlier export (hint: choose another --out)")
    added = _unrecorded(out)
    if added:
        more = f", ... ({len(added)} in all)" if len(added) > 3 else ""
        raise UsageError(f"--out {out}: holds {', '.join(added[:3])}{more}, which the earlier export did not write; "
                         "--overwrite would delete them (hint: move them out, or choose another --out)")


def _unrecorded(out: Path) -> list[str]:
    """Entries of the export directory `out` that its manifest does not record (a user's notes or eval results),
    directories with a trailing slash: the export writes only the files it records, and the manifest itself."""
    files = read_json(out / MANIFEST_FILE, what="the export manifest").get("files")
    recorded = set(files) if isinstance(files, dict) else set()
    added = [p for p in out.iterdir() if p.name != MANIFEST_FILE and (p.name not in recorded or p.is_dir())]
    return sorted(f"{p.name}/" if p.is_dir() else p.name for p in added)


def export_checkpoint(
    model: nn.Module,
    plan,
    out_dir: str | Path,
    *,
    phase: str = ROLLOUT,
    kv_scales: KVScales | None = None,
    overwrite: bool = False,
    source: str | Path | None = None,
    tp_size: int = 1,
    max_shard_bytes: int = _SHARD_BYTES,
) -> Path:
    """Write safetensors + config.json (+ KV scales) + MANIFEST_FILE for the rollout engine.

    `source`: the HF model directory the weights came from; its tokenizer files and generation_config.json are
    copied (a rollout engine needs them), and it is never overwritten. `kv_scales` (FP8 KV-cache policies only)
    go into the checkpoint as per-layer `self_attn.k_scale` / `v_scale` tensors and into KV_SCALES_FILE for
    `tp_size` ranks; `tp_size` also checks that every rank's FP8 shard is whole blocks. A weight holding NaN or Inf
    is refused (NonFiniteError) before anything is written.

    Atomic and durable: everything is written and fsynced in a staging sibling directory, which then replaces
    `out_dir` (on Linux in one renameat2 exchange, so there is no moment without a checkpoint there; elsewhere
    two renames, and a checkpoint left in a `.old` sibling by a crash between them is put back by the next
    export). Staging directories of dead exports are removed.
    """
    out_dir = check_export_target(out_dir, overwrite=overwrite, source=source)
    if kv_scales is not None and not plan.policy.kv_cache.is_fp8:
        raise UsageError(f"{plan.policy.name} has no FP8 KV cache: there are no KV-cache scales to export")
    check_tensor_parallel(model, plan, phase, tp_size)
    meta = next((name for name, tensor in model.state_dict().items() if tensor.is_meta), None)
    if meta is not None:  # its values do not exist: the write would fail halfway with torch's NotImplementedError
        raise UsageError(f"cannot export a model on the meta device ({meta}, ...) (hint: load its weights first, "
                         "or export from a real device)")
    weights = iter_rollout_weights(model, plan, phase)  # its checks (NaN and Inf included) run here
    _clean_stale(out_dir)
    created: list[Path] = []  # parent directories this export made, removed again if it fails
    staging = None
    try:
        _make_parents(out_dir.parent, created)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial.{os.getpid()}.", dir=out_dir.parent))
        if kv_scales is not None:
            weights = itertools.chain(weights, kv_scale_tensors(model, kv_scales))
        _write_shards(weights, staging, max_shard_bytes)
        fp8 = any(m.is_fp8 for m in _phase_plan(plan, phase).modules)
        config = _hf_config(model, quantization_config(plan, phase) if fp8 else None)
        (staging / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if kv_scales is not None:
            write_sglang_kv_scales(staging / KV_SCALES_FILE, kv_scales, config.get("model_type"), tp_size=tp_size)
        if source is not None:
            _copy_side_files(Path(source).expanduser(), staging)
        for path in staging.iterdir():
            fsync_path(path)
        write_manifest(staging)
        _grant_umask_permissions(staging)
        fsync_path(staging)
        _replace_dir(staging, out_dir)
    except BaseException as err:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        _remove_dirs(created)
        why = _disk_full(err)
        if why is not None:
            raise UsageError(f"--out {out_dir}: {why} while writing the checkpoint; the partial export was "
                             "removed (hint: free some space, or choose another --out)") from None
        if isinstance(err, OSError):  # a read-only or failing disk, a file the export could not read or write
            where = f" ({err.filename})" if err.filename else ""
            raise UsageError(f"--out {out_dir}: the export failed: {err.strerror or err}{where}; the partial "
                             "export was removed") from None
        raise
    return out_dir


# What a rollout engine reads beside the weights (transformers' tokenizer files, sampling defaults).
SIDE_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
              "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "chat_template.json",
              "generation_config.json")


def _check_finite(model: nn.Module) -> None:
    """Refuse NaN or Inf in a weight: it would be written as a block of NaN FP8 bytes under a NaN scale (or a NaN
    BF16 value) that rollout engines load without a word and `load_checkpoint` refuses. One host sync for the
    whole model, as weight sync runs it every step."""
    weights = [(name, t) for name, t in model.state_dict().items() if t.is_floating_point() and t.numel()]
    if not weights:
        return
    device = weights[0][1].device
    finite = torch.stack([torch.isfinite(t).all().to(device) for _, t in weights])
    if bool(finite.all()):
        return
    name, tensor = weights[int((~finite).nonzero()[0])]
    bad = int((~torch.isfinite(tensor)).sum())
    raise NonFiniteError(f"{name}: {bad} of {tensor.numel()} values are NaN or Inf; a rollout engine given them "
                         "would not run (hint: export or sync from a checkpoint before the weights diverged)")


def _copy_side_files(source: Path, staging: Path) -> None:
    if not source.is_dir():
        return
    for name in SIDE_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, staging / name)


def _hf_config(model: nn.Module, quant_config: dict | None) -> dict:
    """The model's config.json; `quantization_config` only when some module is FP8 (a BF16 export is plain)."""
    config = model.config.to_dict()
    config["architectures"] = config.get("architectures") or [type(model).__name__]
    config["dtype"] = "bfloat16"
    config.pop("torch_dtype", None)
    config.pop("quantization_config", None)
    if quant_config is not None:
        config["quantization_config"] = quant_config
    return config


def _write_shards(weights: Iterator[tuple[str, torch.Tensor]], directory: Path, max_shard_bytes: int) -> None:
    """model.safetensors, or model-0000i-of-0000n.safetensors + model.safetensors.index.json above the limit."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in weights:
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = _own_storage(tensor)
        size += nbytes
    if len(shards) == 1:
        save_file(shards[0], directory / "model.safetensors", metadata={"format": "pt"})
        return
    weight_map, total = {}, 0
    for i, shard in enumerate(shards, start=1):
        file_name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, directory / file_name, metadata={"format": "pt"})
        for name, tensor in shard.items():
            weight_map[name] = file_name
            total += tensor.numel() * tensor.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def _own_storage(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU tensor that owns its storage: safetensors refuses views into shared memory
    (the per-expert slices of a fused weight)."""
    tensor = tensor.detach().contiguous().cpu()
    if tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size():
        tensor = tensor.clone()
    return tensor


def _grant_umask_permissions(directory: Path) -> None:
    """mkdtemp makes the staging directory private (0700); the checkpoint gets the modes a plain mkdir and
    open would give, so a rollout server running as another user can read it."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for path in directory.iterdir():
        path.chmod(0o666 & ~umask)


def _replace_dir(staging: Path, out_dir: Path) -> None:
    if not out_dir.exists():
        os.rename(staging, out_dir)
    elif _exchange(staging, out_dir):  # out_dir now holds the new export, staging the old one
        shutil.rmtree(staging, ignore_errors=True)
    else:
        retired = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.{os.getpid()}.", dir=out_dir.parent))
        os.rename(out_dir, retired / out_dir.name)
        os.rename(staging, out_dir)
        shutil.rmtree(retired, ignore_errors=True)
    fsync_path(out_dir.parent)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories in one step (Linux renameat2 RENAME_EXCHANGE); False where that is unavailable."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _clean_stale(out_dir: Path) -> None:
    """Remove staging siblings of exports whose process is gone; put back a checkpoint that a crash between
    the two fallback renames left in a `.old` sibling."""
    for path in sorted(out_dir.parent.glob(f".{out_dir.name}.*.*.*")):
        kind, _, rest = path.name[len(out_dir.name) + 2 :].partition(".")
        pid = rest.partition(".")[0]
        if kind not in ("partial", "old") or not pid.isdigit() or _alive(int(pid)):
            continue
        kept = path / out_dir.name
        if kind == "old" and kept.is_dir() and not out_dir.exists():
            os.rename(kept, out_dir)
        shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
