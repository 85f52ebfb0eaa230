"""Tokenizers with one small interface: the built-in model's character vocabulary, and a user's HF tokenizer.

Both give `encode(text) -> list[int]` (no special tokens), `decode(ids) -> str` (special tokens dropped),
`pad_id`, `bos_id` (None for HF tokenizers without one, e.g. Qwen's), `eos_id`, `vocab_size`, a
`prompt_template` that `format_prompt` fills without any chat template, and `encode_prompt(problem)`, the ids a
rollout starts from.

The character vocabulary is printable ASCII and newline after pad/bos/eos, padded with unused ids to a multiple
of 64 (the batch-invariant kernels tile the vocabulary dimension by 64). A model can still sample an unused id;
it decodes to U+FFFD, so it can never complete a correct answer by being dropped.
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

    def decode(self, ids: list[int]) -> str:
        first = len(_SPECIALS)
        return "".join(self.chars[i - first] if first <= i < first + len(self.chars)
                       else ("" if 0 <= i < first else _UNUSED) for i in ids)

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

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def encode_prompt(self, problem: Problem) -> list[int]:
        bos = [] if self.bos_id is None else [self.bos_id]
        return bos + self.encode(format_prompt(problem, self.prompt_template))


def load_tokenizer(directory: str | Path) -> CharTokenizer | HFTokenizer:
    """The tokenizer a model directory carries: ours when it holds `char_tokenizer.json`, else the HF one."""
    if (Path(directory) / CHAR_TOKENIZER_FILE).is_file():
        return CharTokenizer.load(directory)
    return HFTokenizer(directory)
