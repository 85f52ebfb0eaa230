"""Tokenizers with one small interface: the built-in model's character vocabulary, and a user's HF tokenizer.

Both give `encode(text) -> list[int]` (no special tokens), `decode(response_ids) -> str`, `pad_id`, `bos_id`
(None for HF tokenizers without one, e.g. Qwen's), `eos_id`, `eos_ids` (every id that ends a generation: instruct
models list several in generation_config.json), `vocab_size`, a `prompt_template` that `format_prompt` fills
without any chat template, and `encode_prompt(problem)`, the ids a rollout starts from.

`decode` reads a response (the rollout's generated ids, its EOS included): the first of `eos_ids` ends it, and any
other special id (pad, bos, unk, ...) or an id outside the vocabulary decodes to U+FFFD, so a sampled special or
unused id can never complete a correct answer by being dropped, nor text after an end token extend one.

The character vocabulary is printable ASCII and newline after pad/bos/eos, padded with unused ids to a multiple
of 64 (the batch-invariant kernels tile the vocabulary dimension by 64), which a model can still sample.
"""

from __future__ import annotations

import json
from pathlib import Path

from precision_engine.errors import DataError, ModelError, first_line
from precision_engine.rl.recipes.math.problems import Problem, format_prompt

CHAR_TOKENIZER_FILE = "char_tokenizer.json"
DEFAULT_CHARS = "\n" + "".join(chr(c) for c in range(32, 127))
_SPECIALS = ("<pad>", "<bos>", "<eos>")  # ids 0, 1, 2
_VOCAB_MULTIPLE = 64
_UNUSED = "\ufffd"


class CharTokenizer:
    """One id per character of `chars`, after pad=0, bos=1, eos=2."""

    pad_id, bos_id, eos_id = 0, 1, 2
    prompt_template = "{prompt}"

    def __init__(self, chars: str = DEFAULT_CHARS) -> None:
        if len(set(chars)) != len(chars) or not chars:
            raise DataError("character tokenizer: `chars` must be non-empty and without repeats")
        self.chars = chars
        self._ids = {c: i + len(_SPECIALS) for i, c in enumerate(chars)}
        used = len(_SPECIALS) + len(chars)
        self.vocab_size = -(-used // _VOCAB_MULTIPLE) * _VOCAB_MULTIPLE

    def encode(self, text: str) -> list[int]:
        try:
            return [self._ids[c] for c in text]
        except KeyError:
            bad = next(i for i, c in enumerate(text) if c not in self._ids)
            raise DataError(f"character tokenizer: {text[bad]!r} at position {bad} of {text[:40]!r} is not in "
                            f"its vocabulary (printable ASCII and newline); use an HF model for other text") from None

    @property
    def eos_ids(self) -> list[int]:
        """The ids that end a response: eos alone (the same interface as HFTokenizer's)."""
        return [self.eos_id]

    def decode(self, ids: list[int]) -> str:
        first = len(_SPECIALS)
        ids = ids[:ids.index(self.eos_id)] if self.eos_id in ids else ids
        return "".join(self.chars[i - first] if first <= i < first + len(self.chars) else _UNUSED for i in ids)

    def encode_prompt(self, problem: Problem) -> list[int]:
        return [self.bos_id] + self.encode(format_prompt(problem, self.prompt_template))

    def save(self, directory: str | Path) -> Path:
        """Write `char_tokenizer.json` into `directory` (a model directory, which then describes itself)."""
        path = Path(directory) / CHAR_TOKENIZER_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        spec = {"type": "char", "version": 1, "specials": dict(zip(_SPECIALS, range(len(_SPECIALS)))),
                "chars": self.chars, "vocab_size": self.vocab_size}
        path.write_text(json.dumps(spec, indent=1) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | Path) -> CharTokenizer:
        path = Path(directory) / CHAR_TOKENIZER_FILE
        try:
            spec = json.loads(path.read_text())
        except FileNotFoundError:
            raise DataError(f"{path}: no such file (a character tokenizer is saved with CharTokenizer.save)") from None
        except (OSError, json.JSONDecodeError) as err:
            raise DataError(f"{path}: not a readable JSON file ({err})") from None
        if not isinstance(spec, dict) or spec.get("type") != "char" or not isinstance(spec.get("chars"), str):
            raise DataError(f"{path}: expected a character tokenizer ({{\"type\": \"char\", \"chars\": ...}})")
        tokenizer = cls(spec["chars"])
        if spec.get("vocab_size") != tokenizer.vocab_size:
            raise DataError(f"{path}: vocab_size {spec.get('vocab_size')!r} does not match its {len(spec['chars'])} "
                            f"characters (expected {tokenizer.vocab_size})")
        return tokenizer


class HFTokenizer:
    """A user's tokenizer from a local directory, behind the same interface. No chat template is applied: the
    prompt is framed as plain text by `prompt_template`, which base and instruct models both continue."""

    def __init__(self, directory: str | Path, prompt_template: str = "Question: {prompt}\nAnswer:") -> None:
        from transformers import AutoTokenizer

        if not Path(directory).is_dir():  # else transformers takes it for a hub id and talks of the internet
            raise ModelError(f"{directory}: not a directory; a run's model is a local Hugging Face model directory "
                             "(config, weights, tokenizer), not a built-in architecture or a hub id")
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        except (OSError, ValueError) as err:
            raise ModelError(f"{directory}: cannot load a tokenizer from it ({first_line(err)})") from None
        if self._tokenizer.eos_token_id is None:
            raise ModelError(f"{directory}: the tokenizer has no eos token, so generation could not stop")
        self.prompt_template = prompt_template
        self.eos_id: int = self._tokenizer.eos_token_id
        self.bos_id: int | None = self._tokenizer.bos_token_id
        self.pad_id: int = self._tokenizer.pad_token_id if self._tokenizer.pad_token_id is not None else self.eos_id
        self.vocab_size: int = len(self._tokenizer)  # the model's embedding may have more rows (padding)
        self.eos_ids: list[int] = list(dict.fromkeys([self.eos_id, *_generation_eos_ids(Path(directory))]))
        # What skip_special_tokens would drop: the named specials and added tokens marked special (Qwen's <|im_start|>)
        self._special = set(self._tokenizer.all_special_ids) | {
            i for i, token in self._tokenizer.added_tokens_decoder.items() if token.special}

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        """Runs of regular ids decoded as the tokenizer does, joined by U+FFFD where a special or unknown id was."""
        runs: list[list[int]] = [[]]
        for i in ids:
            if i in self.eos_ids:
                break
            if 0 <= i < self.vocab_size and i not in self._special:
                runs[-1].append(i)
            else:
                runs.append([])
        return _UNUSED.join(self._tokenizer.decode(run) for run in runs)

    def encode_prompt(self, problem: Problem) -> list[int]:
        bos = [] if self.bos_id is None else [self.bos_id]
        return bos + self.encode(format_prompt(problem, self.prompt_template))


def _generation_eos_ids(directory: Path) -> list[int]:
    """`eos_token_id` of the directory's generation_config.json (an int or a list), [] without the file or key."""
    path = directory / "generation_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelError(f"{path}: not a readable JSON file ({first_line(err)})") from None
    if not isinstance(config, dict):
        raise ModelError(f"{path}: expected a JSON object, got {type(config).__name__}")
    eos = config.get("eos_token_id")
    ids = [] if eos is None else [eos] if isinstance(eos, int) else eos
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ModelError(f"{path}: expected 'eos_token_id' to be a token id or a list of them, got {eos!r:.60}")
    return ids


def load_tokenizer(directory: str | Path) -> CharTokenizer | HFTokenizer:
    """The tokenizer a model directory carries: ours when it holds `char_tokenizer.json`, else the HF one."""
    if (Path(directory) / CHAR_TOKENIZER_FILE).is_file():
        return CharTokenizer.load(directory)
    return HFTokenizer(directory)
