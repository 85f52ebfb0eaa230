"""Problems from users' files, and verl's parquet format for ours.

`load_problems` reads JSONL or parquet and tells two row shapes apart by their keys:
- GSM8K: `question`, and `answer` whose last line is `#### N`. The prompt is the question followed by verl's
  GSM8K instruction (as verl's examples/data_preprocess/gsm8k.py builds it), so a GSM8K file and its verl
  preprocessing give the same prompts; the full answer is the warm-up target.
- verl's preprocessed rows: `prompt` (a list of {role, content} messages, or a string) and
  `reward_model.ground_truth`. Without a chat template the messages' contents are joined by a blank line. The
  target is `extra_info.answer` when present (verl's GSM8K keeps the worked answer there), else `#### N`.
Errors name the file and the JSONL line (1-based) or parquet row (0-based, as extra_info.index counts).

pyarrow is imported only for parquet (the `recipe` extra).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

from precision_engine.errors import DataError, UnsupportedError
from precision_engine.rl.recipes.math.problems import Problem
from precision_engine.rl.recipes.math.answers import extract_answer, normalize_answer

GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
DATA_SOURCE = "precision-engine/math"


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise UnsupportedError("reading or writing parquet needs pyarrow: pip install 'precision-engine[recipe]' "
                               "(or pip install pyarrow)") from None
    return pyarrow


def _messages_text(prompt: Any) -> str | None:
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, (list, tuple)) or not prompt:
        return None
    if not all(isinstance(m, dict) and isinstance(m.get("content"), str) and "role" in m for m in prompt):
        return None
    return "\n\n".join(m["content"] for m in prompt)


def _problem(row: Any, where: str, instruction: str | None) -> Problem:
    """One row as a Problem; `where` is 'file:line' or 'file: row N' for the error."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected an object with 'question' and 'answer' (GSM8K) or 'prompt' and "
                        f"'reward_model' (verl), got {type(row).__name__}")
    if "question" in row and "answer" in row:
        question, answer = row["question"], row["answer"]
        if not isinstance(question, str) or not question.strip():
            raise DataError(f"{where}: expected 'question' to be a non-empty string")
        final = extract_answer(answer) if isinstance(answer, str) and "####" in answer else None
        if final is None:
            raise DataError(f"{where}: expected 'answer' to end with '#### <number>' (GSM8K), got {answer!r:.60}")
        prompt = question if instruction is None else f"{question} {instruction}"
        return Problem(prompt=prompt, answer=final, target=answer, kind="gsm8k")
    if "prompt" in row and "reward_model" in row:
        prompt = _messages_text(row["prompt"])
        if prompt is None:
            raise DataError(f"{where}: expected 'prompt' to be a string or a non-empty list of "
                            f"{{role, content}} messages")
        reward_model = row["reward_model"]
        truth = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
        if isinstance(truth, bool) or not isinstance(truth, (str, int, float)) or not str(truth).strip():
            raise DataError(f"{where}: expected 'reward_model.ground_truth' to be a string or a number, got {truth!r}")
        answer = normalize_answer(str(truth))
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        target = extra.get("answer") if isinstance(extra.get("answer"), str) else f"#### {answer}"
        kind = extra.get("kind") if isinstance(extra.get("kind"), str) else "verl"
        return Problem(prompt=prompt, answer=answer, target=target, kind=kind)
    raise DataError(f"{where}: expected keys 'question' and 'answer' (GSM8K) or 'prompt' and 'reward_model' "
                    f"(verl), found {sorted(row)}")


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{number}", json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{path}:{number}: expected one JSON object per line ({err.msg})") from None


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    pyarrow = _pyarrow()
    try:
        rows = pyarrow.parquet.read_table(path).to_pylist()
    except (pyarrow.ArrowException, OSError) as err:
        raise DataError(f"{path}: not a readable parquet file ({err})") from None
    for index, row in enumerate(rows):
        yield f"{path}: row {index}", row


def load_problems(path: str | Path, *, instruction: str | None = GSM8K_INSTRUCTION) -> list[Problem]:
    """Problems from a `.jsonl` or `.parquet` file of GSM8K or verl rows. `instruction` is appended to GSM8K
    questions (verl rows already carry theirs); None leaves questions as they are."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: {'not a file' if path.exists() else 'no such file'}")
    readers = {".jsonl": _jsonl_rows, ".parquet": _parquet_rows}
    if path.suffix not in readers:
        raise DataError(f"{path}: expected a .jsonl or .parquet file of problems")
    problems = [_problem(row, where, instruction) for where, row in readers[path.suffix](path)]
    if not problems:
        raise DataError(f"{path}: holds no problems")
    return problems


def write_verl_parquet(problems: Iterable[Problem], path: str | Path, split: str, *,
                       data_source: str = DATA_SOURCE) -> Path:
    """Write problems as verl's preprocessed parquet (the fields of verl 0.9.1's examples/data_preprocess/gsm8k.py):
    data_source, prompt [{role: user, content}], ability "math", reward_model {style: rule, ground_truth},
    extra_info {split, index, answer (the warm-up target), kind}. Written to a temporary file, then renamed."""
    pyarrow = _pyarrow()
    rows = [{"data_source": data_source,
             "prompt": [{"role": "user", "content": p.prompt}],
             "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": p.answer},
             "extra_info": {"split": split, "index": index, "answer": p.target, "kind": p.kind}}
            for index, p in enumerate(problems)]
    if not rows:
        raise DataError(f"{path}: no problems to write")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), partial)
    os.replace(partial, path)
    return path
