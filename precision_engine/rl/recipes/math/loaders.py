"""Problems from users' files, and verl's parquet format for ours.

`load_problems` reads JSONL (UTF-8, a leading BOM allowed) or parquet and tells two row shapes apart by their keys:
- GSM8K: `question`, and `answer` ending in `#### N`. The gold answer is the whole number after the last `####`
  (commas, a trailing period or words allowed), never a number or \\boxed{} of the worked solution before it. The
  prompt is the question followed by verl's GSM8K instruction (as verl's examples/data_preprocess/gsm8k.py builds
  it), so a GSM8K file and its verl preprocessing give the same prompts; the full answer is the warm-up target.
- verl's preprocessed rows: `prompt` (a list of {role, content} messages, or a string) and
  `reward_model.ground_truth` (a whole float such as 18.0 reads as 18, as answers are written). Without a chat
  template the messages' contents are joined by a blank line, so only system messages followed by user messages
  are taken: a conversation with assistant turns (few-shot examples) would lose who said what, and is refused. The
  target is `extra_info.answer` when present (verl's GSM8K keeps the worked answer there), else `#### N`.
Errors name the file and the JSONL line (1-based) or parquet row (0-based, as extra_info.index counts).

`write_verl_parquet` asks for the answer format in generated problems' user message (verl applies the model's
chat template, and a chat model otherwise answers in prose that no reward reads); loading that parquet back
removes the request again, so the round trip gives the same problems.

pyarrow is imported only for parquet (the `recipe` extra).
"""

from __future__ import annotations

import codecs
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from precision_engine.errors import DataError, UnsupportedError
from precision_engine.rl.recipes.math.problems import KINDS, WORD_ANSWER_CUE, Problem, format_prompt
from precision_engine.rl.recipes.math.answers import normalize_answer

GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
DATA_SOURCE = "precision-engine/math"
# A generated problem's user message in verl's parquet: the prompt, then the format the reward reads.
_VERL_TEMPLATE = "{prompt} " + GSM8K_INSTRUCTION
# GSM8K's gold: one whole number opening the text after the last '####' (thousands commas allowed), then the end,
# whitespace, or a period that ends the sentence; '3/4', '1.5e3' or '$5' are no whole number and are refused.
_GOLD = re.compile(r"\s*(-?(?:\d{1,3}(?:,\d{3})+|\d+))(?:\.(?!\S))?(?=\s|$)")


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise UnsupportedError("reading or writing parquet needs pyarrow: pip install 'precision-engine[recipe]' "
                               "(or pip install pyarrow)") from None
    return pyarrow


def _prompt_text(prompt: Any, where: str) -> str:
    """A verl prompt as plain text: a string as is, or its system then user messages joined by a blank line."""
    if isinstance(prompt, str):
        return prompt
    if (not isinstance(prompt, (list, tuple)) or not prompt
            or not all(isinstance(m, dict) and isinstance(m.get("content"), str) and "role" in m for m in prompt)):
        raise DataError(f"{where}: expected 'prompt' to be a string or a non-empty list of {{role, content}} messages")
    roles = [m["role"] for m in prompt]
    users = roles.count("user")
    if not users or roles != ["system"] * (len(roles) - users) + ["user"] * users:
        raise DataError(f"{where}: expected 'prompt' messages to be system ones then user ones, got roles {roles} "
                        "(without a chat template the turns of a conversation could not be told apart)")
    return "\n\n".join(m["content"] for m in prompt)


def _gsm8k_gold(answer: Any) -> str | None:
    """The normalised whole number after the last '####' of a GSM8K answer, or None."""
    if not isinstance(answer, str) or "####" not in answer:
        return None
    gold = _GOLD.match(answer.rpartition("####")[2])
    return str(int(gold.group(1).replace(",", ""))) if gold else None


def _generated_prompt(content: str, kind: str) -> str:
    """The prompt of a generated problem that `write_verl_parquet` wrote as `content` (other prompts as they are)."""
    suffix = _VERL_TEMPLATE.removeprefix("{prompt}")
    if kind not in KINDS or not content.endswith(suffix):
        return content
    return content.removesuffix(suffix) + (WORD_ANSWER_CUE if kind == "word" else "")


def _problem(row: Any, where: str, instruction: str | None) -> Problem:
    """One row as a Problem; `where` is 'file:line' or 'file: row N' for the error."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected an object with 'question' and 'answer' (GSM8K) or 'prompt' and "
                        f"'reward_model' (verl), got {type(row).__name__}")
    if "question" in row and "answer" in row:
        question, answer = row["question"], row["answer"]
        if not isinstance(question, str) or not question.strip():
            raise DataError(f"{where}: expected 'question' to be a non-empty string")
        final = _gsm8k_gold(answer)
        if final is None:
            shown = answer[max(answer.rfind("####"), 0):] if isinstance(answer, str) else answer
            raise DataError(f"{where}: expected 'answer' to end with '#### <number>' (GSM8K, a whole number), "
                            f"got {shown!r:.60}")
        prompt = question if instruction is None else f"{question} {instruction}"
        return Problem(prompt=prompt, answer=final, target=answer, kind="gsm8k")
    if "prompt" in row and "reward_model" in row:
        prompt = _prompt_text(row["prompt"], where)
        reward_model = row["reward_model"]
        truth = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
        if isinstance(truth, bool) or not isinstance(truth, (str, int, float)) or not str(truth).strip():
            raise DataError(f"{where}: expected 'reward_model.ground_truth' to be a string or a number, got {truth!r}")
        if isinstance(truth, float):
            if not math.isfinite(truth):  # 'nan' or 'inf' would be an answer no completion can ever match
                raise DataError(f"{where}: expected 'reward_model.ground_truth' to be a finite number, got {truth!r}")
            truth = int(truth) if truth.is_integer() else truth  # 18.0 and 1e16 as the integers completions write
        answer = normalize_answer(str(truth))
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        target = extra.get("answer") if isinstance(extra.get("answer"), str) else f"#### {answer}"
        kind = extra.get("kind") if isinstance(extra.get("kind"), str) else "verl"
        return Problem(prompt=_generated_prompt(prompt, kind), answer=answer, target=target, kind=kind)
    raise DataError(f"{where}: expected keys 'question' and 'answer' (GSM8K) or 'prompt' and 'reward_model' "
                    f"(verl), found {sorted(row)}")


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """Rows of a UTF-8 JSONL file, decoded line by line so that bytes of another encoding name their line."""
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            raw = raw.removeprefix(codecs.BOM_UTF8) if number == 1 else raw  # as Windows editors save UTF-8
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"{path}:{number}: not UTF-8 (byte 0x{raw[err.start]:02x} at byte {err.start + 1} of "
                                "the line); save the file as UTF-8") from None
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
    extra_info {split, index, answer (the warm-up target), kind}. A generated problem's content asks for the answer
    after "####" (GSM8K_INSTRUCTION) unless its prompt already does; loaded problems carry their own instruction.
    Written to a temporary file, then renamed."""
    pyarrow = _pyarrow()
    rows = [{"data_source": data_source,
             "prompt": [{"role": "user", "content": format_prompt(p, _VERL_TEMPLATE)
                         if p.kind in KINDS and GSM8K_INSTRUCTION not in p.prompt else p.prompt}],
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
