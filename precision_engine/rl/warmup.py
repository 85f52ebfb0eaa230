"""The recipe's own starting model: a small Llama-style decoder warmed up by supervised training on the
generated problems, cached on disk by content hash.

Both papers start RL from a pretrained BF16 model that is right some of the time; a randomly initialised model
never earns a reward, so GRPO has nothing to reinforce. The warm-up stands in for pretraining: FP32 training
in the fast (not batch-invariant) numerics on prompt -> target + EOS, stopped as soon as greedy accuracy on the
validation split reaches `target_accuracy` (a seed-dependent number of steps, hence a target and a step cap,
not a fixed length), so RL starts with room to improve.

The result is an HF-format directory (config.json, model.safetensors, the tokenizer file), so `precision plan`,
`check` and `export` accept it as `--model` too. Its name is the SHA-256 of everything that determines it
(model config, recipe config, hyper-parameters, seed, WARMUP_VERSION): the same request reuses it, any change
trains a new one. Written to a staging directory and renamed, so a killed warm-up leaves no half model.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from precision_engine.models.decoder import Decoder
from precision_engine.rl.evaluate import greedy_accuracy
from precision_engine.rl.recipes.math import CharTokenizer, MathRecipe, reward

WARMUP_VERSION = 2  # bump when the training loop or the model definition changes what a cache entry holds
WARMUP_INFO = "warmup.json"
_WARMUP_MICRO_BATCH = 64


@dataclass(frozen=True)
class WarmupConfig:
    """The probe on a 2-core CPU: batch 256 at lr 3e-3 reaches ~30% in 175-525 steps (20-60 s)."""

    hidden_size: int = 128
    layers: int = 2
    heads: int = 4
    intermediate_size: int = 384  # SwiGLU; 3 x 128 so every projection tiles into 128x128 FP8 blocks
    batch_size: int = 256
    lr: float = 3e-3
    target_accuracy: float = 0.30
    max_steps: int = 800
    eval_every: int = 25
    max_new_tokens: int = 6


def recipe_model_config(tokenizer: CharTokenizer, config: WarmupConfig) -> dict:
    """An HF LlamaConfig dict for the recipe's model."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.layers,
        "num_attention_heads": config.heads,
        "num_key_value_heads": config.heads,
        "head_dim": config.hidden_size // config.heads,
        "vocab_size": tokenizer.vocab_size,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "bos_token_id": tokenizer.bos_id,
        "eos_token_id": tokenizer.eos_id,
        "pad_token_id": tokenizer.pad_id,
        "torch_dtype": "float32",
    }


def default_cache_dir() -> Path:
    """$PRECISION_CACHE, else $XDG_CACHE_HOME/precision-engine, else ~/.cache/precision-engine."""
    if os.environ.get("PRECISION_CACHE"):
        return Path(os.environ["PRECISION_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "precision-engine"


def warmed_up_model(
    recipe: MathRecipe,
    *,
    seed: int,
    config: WarmupConfig = WarmupConfig(),
    cache_dir: Path | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> Path:
    """The model directory for (recipe, seed, config): from the cache, or trained now and cached."""
    tokenizer = CharTokenizer()
    model_config = recipe_model_config(tokenizer, config)
    key = {"version": WARMUP_VERSION, "model": model_config, "recipe": recipe.config, "warmup": asdict(config),
           "seed": seed}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    target = (cache_dir or default_cache_dir()) / "warmup" / digest
    if (target / WARMUP_INFO).is_file():
        log(f"warm-up: cached model {target}")
        return target
    log(f"warm-up: training the recipe model (cache {target})")
    model = Decoder.from_config(model_config, seed=seed, dtype=torch.float32, batch_invariant=False)
    steps, accuracy = _train(model, recipe, tokenizer, config, seed, log)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{digest}.", dir=target.parent))
    try:
        _save(model, model_config, tokenizer, staging, {"key": key, "steps": steps, "validation_accuracy": accuracy})
        try:
            os.replace(staging, target)
        except OSError:  # another process cached the same model meanwhile: keep theirs
            shutil.rmtree(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _train(model: Decoder, recipe: MathRecipe, tokenizer, config: WarmupConfig, seed: int, log) -> tuple[int, float]:
    """Supervised steps until validation greedy accuracy reaches the target or max_steps; (steps, accuracy)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0)
    rng = random.Random(f"warmup:{seed}")
    accuracy, step = 0.0, 0
    for step in range(1, config.max_steps + 1):
        model.train()
        problems = sorted(rng.sample(recipe.train, config.batch_size), key=lambda p: len(p.prompt) + len(p.target))
        targets = sum(len(tokenizer.encode(p.target)) + 1 for p in problems)
        optimizer.zero_grad(set_to_none=True)
        loss = 0.0
        # Micro-batches of similar length: a word problem would otherwise pad every sum in the batch to its width.
        for start in range(0, len(problems), _WARMUP_MICRO_BATCH):
            ids, mask, target_mask = _batch(problems[start : start + _WARMUP_MICRO_BATCH], tokenizer)
            logits = model(ids, mask).float()
            part = torch.nn.functional.cross_entropy(
                logits[:, :-1][target_mask[:, 1:]], ids[:, 1:][target_mask[:, 1:]], reduction="sum"
            ) / targets
            part.backward()
            loss += part.item()
        optimizer.step()
        if step % config.eval_every == 0 or step == config.max_steps:
            model.eval()
            accuracy = greedy_accuracy(model, recipe.validation, tokenizer, reward,
                                       max_new_tokens=config.max_new_tokens)
            log(f"warm-up step {step}: loss {loss:.3f}, validation accuracy {accuracy:.1%}")
            if accuracy >= config.target_accuracy:
                break
    model.eval()
    return step, accuracy


def _batch(problems, tokenizer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded bos+prompt+target+eos rows [B, L], their attention mask, and the mask of target tokens."""
    rows, starts = [], []
    for p in problems:
        prompt = tokenizer.encode_prompt(p)
        rows.append(prompt + tokenizer.encode(p.target) + [tokenizer.eos_id])
        starts.append(len(prompt))
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tokenizer.pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    target = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (row, start) in enumerate(zip(rows, starts)):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = True
        target[i, start : len(row)] = True
    return ids, mask, target


def _save(model: Decoder, model_config: dict, tokenizer: CharTokenizer, directory: Path, info: dict) -> None:
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(model_config, indent=2) + "\n")
    tokenizer.save(directory)
    (directory / WARMUP_INFO).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    directory.chmod(0o755)


__all__ = ["WarmupConfig", "default_cache_dir", "recipe_model_config", "warmed_up_model"]
