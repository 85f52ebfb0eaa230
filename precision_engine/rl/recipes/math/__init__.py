"""The math recipe's data side: generated problems, tokenizers, answer extraction and reward, user data.

    recipe = MathRecipe(seed=0, train_size=20_000, heldout_size=1_000, mix={"add": 0.7, "sub": 0.1, ...})
    recipe.train, recipe.validation, recipe.heldout      # lists of Problem(prompt, answer, target, kind)
    tokenizer = CharTokenizer()                          # or HFTokenizer(dir), or load_tokenizer(model_dir)
    ids = tokenizer.encode_prompt(problem)               # bos + encode(format_prompt(problem, template))
    reward(tokenizer.decode(completion_ids), problem.answer)   # 1.0 or 0.0
    load_problems("gsm8k.jsonl")                         # GSM8K JSONL/parquet or verl's parquet
    write_verl_parquet(recipe.train, "train.parquet", split="train")

Public API:
- `Problem(prompt, answer, target, kind="user")`: frozen; `prompt` is chat-template-free text.
- `MathRecipe(seed=0, train_size=20_000, heldout_size=1_000, mix=None, validation_size=200)` with `.train`,
  `.validation`, `.heldout`, `.mix` (normalised) and `.config` (a JSON-ready dict to hash for caches).
  `KINDS`, `DEFAULT_MIX`, `resolve_mix(mix)`.
- `format_prompt(problem, template="{prompt}") -> str`.
- `extract_answer(text) -> str | None`, `normalize_answer(text) -> str`, `reward(completion_text, answer) -> float`,
  `reward_backend() -> "math_verify" | "exact"`.
- `CharTokenizer(chars=DEFAULT_CHARS)` (`.save(dir)`, `CharTokenizer.load(dir)`), `HFTokenizer(dir,
  prompt_template=...)`, `load_tokenizer(dir)`; each has encode, decode, encode_prompt, pad_id, bos_id, eos_id,
  eos_ids (every id that ends a response: generation_config.json's too), vocab_size, prompt_template.
- `load_problems(path, *, instruction=GSM8K_INSTRUCTION) -> list[Problem]`,
  `write_verl_parquet(problems, path, split, *, data_source=DATA_SOURCE) -> Path`.

Everything here is plain Python (transformers only for HFTokenizer, pyarrow only for parquet, math_verify only
if installed), deterministic and quick: the default recipe is drawn in well under a second.
"""

from precision_engine.rl.recipes.math.loaders import DATA_SOURCE, GSM8K_INSTRUCTION, load_problems, write_verl_parquet
from precision_engine.rl.recipes.math.problems import (
    DEFAULT_MIX,
    KINDS,
    MathRecipe,
    Problem,
    format_prompt,
    resolve_mix,
)
from precision_engine.rl.recipes.math.answers import extract_answer, normalize_answer, reward, reward_backend
from precision_engine.rl.recipes.math.tokenizer import CharTokenizer, HFTokenizer, load_tokenizer

__all__ = [
    "DATA_SOURCE",
    "DEFAULT_MIX",
    "GSM8K_INSTRUCTION",
    "KINDS",
    "CharTokenizer",
    "HFTokenizer",
    "MathRecipe",
    "Problem",
    "extract_answer",
    "format_prompt",
    "load_problems",
    "load_tokenizer",
    "normalize_answer",
    "resolve_mix",
    "reward",
    "reward_backend",
    "write_verl_parquet",
]
