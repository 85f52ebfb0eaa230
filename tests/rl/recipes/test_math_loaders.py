"""User data loaders (GSM8K JSONL and parquet, verl's parquet), their errors, and the verl parquet writer."""

import codecs

import json
import sys

import pytest

from precision_engine.errors import DataError, UnsupportedError
from precision_engine.rl.recipes.math import (
    GSM8K_INSTRUCTION,
    MathRecipe,
    Problem,
    format_prompt,
    load_problems,
    write_verl_parquet,
)

GSM8K_ROWS = [
    {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
    {"question": "A farm has 1,200 hens and sells 200.", "answer": "1200-200=1000\n#### 1,000"},
]


def _write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_gsm8k_jsonl(tmp_path):
    path = _write_jsonl(tmp_path / "gsm8k.jsonl", [GSM8K_ROWS[0], "", GSM8K_ROWS[1]])
    first, second = load_problems(path)
    assert first == Problem(prompt=f"{GSM8K_ROWS[0]['question']} {GSM8K_INSTRUCTION}", answer="7",
                            target=GSM8K_ROWS[0]["answer"], kind="gsm8k")
    assert second.answer == "1000"
    assert load_problems(path, instruction=None)[0].prompt == GSM8K_ROWS[0]["question"]


@pytest.mark.parametrize("answer, gold", [
    ("we get \\boxed{7} then add 1\n#### 8", "8"),  # the worked solution's \\boxed{} is not the gold
    ("12 #### apples #### 9", "9"),  # the last '####' only
    ("so\n#### 1,000.", "1000"),
    ("so\n#### 72 apples", "72"),
    ("so\n#### -3\n", "-3"),
])
def test_gsm8k_gold_is_the_whole_number_after_the_last_hashes(tmp_path, answer, gold):
    path = _write_jsonl(tmp_path / "gsm8k.jsonl", [{"question": "Q?", "answer": answer}])
    assert load_problems(path)[0].answer == gold


@pytest.mark.parametrize("answer", ["so\n#### 3/4", "so\n#### 1.5e3", "#### 2.5", "#### $5", "#### 8\n####"])
def test_gsm8k_gold_that_is_no_whole_number_is_refused(tmp_path, answer):
    """'#### 3/4' loaded '3' and '#### 1.5e3' '1': a gold answer no correct completion could match."""
    path = _write_jsonl(tmp_path / "gsm8k.jsonl", [GSM8K_ROWS[0], {"question": "Q?", "answer": answer}])
    with pytest.raises(DataError, match=r"gsm8k.jsonl:2: expected 'answer' to end with '#### <number>'"):
        load_problems(path)


def test_jsonl_may_start_with_a_utf8_bom(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_bytes(codecs.BOM_UTF8 + (json.dumps(GSM8K_ROWS[0]) + "\n").encode())
    assert load_problems(path)[0].answer == "7"


def test_jsonl_that_is_not_utf8_names_the_line(tmp_path):
    """It raised a bare UnicodeDecodeError, which the CLI reports as an internal error."""
    path = tmp_path / "gsm8k.jsonl"
    path.write_bytes((json.dumps(GSM8K_ROWS[0]) + "\n").encode() + b'{"question": "caf\xe9?", "answer": "#### 1"}\n')
    with pytest.raises(DataError, match=r"gsm8k.jsonl:2: not UTF-8 \(byte 0xe9 at byte 18 of the line\)"):
        load_problems(path)


@pytest.mark.parametrize("line, message", [
    ("{not json", r"gsm8k.jsonl:2: expected one JSON object per line"),
    ("[1, 2]", r"gsm8k.jsonl:2: expected an object with 'question' and 'answer'"),
    ('{"question": "q", "answer": "no final line"}', r"gsm8k.jsonl:2: expected 'answer' to end with '#### <number>'"),
    ('{"question": "", "answer": "#### 3"}', r"gsm8k.jsonl:2: expected 'question' to be a non-empty string"),
    ('{"q": "x", "a": "y"}', r"gsm8k.jsonl:2: expected keys 'question' and 'answer' .* found \['a', 'q'\]"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, line, message):
    path = _write_jsonl(tmp_path / "gsm8k.jsonl", [GSM8K_ROWS[0], line])
    with pytest.raises(DataError, match=message):
        load_problems(path)


def test_file_level_errors(tmp_path):
    with pytest.raises(DataError, match="nope.jsonl: no such file"):
        load_problems(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match=f"{tmp_path}: not a file"):
        load_problems(tmp_path)
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(DataError, match=r"data.csv: expected a .jsonl or .parquet file"):
        load_problems(tmp_path / "data.csv")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="empty.jsonl: holds no problems"):
        load_problems(tmp_path / "empty.jsonl")


def test_gsm8k_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(GSM8K_ROWS), tmp_path / "gsm8k.parquet")
    assert load_problems(tmp_path / "gsm8k.parquet") == load_problems(_write_jsonl(tmp_path / "g.jsonl", GSM8K_ROWS))


def test_verl_parquet_in_its_shapes(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "3+4="}]
    pq.write_table(pa.Table.from_pylist([
        {"prompt": messages, "reward_model": {"style": "rule", "ground_truth": "7"},
         "extra_info": {"split": "train", "index": 0, "answer": "3+4=7\n#### 7"}},
        {"prompt": [{"role": "user", "content": "2+2="}], "reward_model": {"style": "rule", "ground_truth": "4"},
         "extra_info": {"split": "train", "index": 1, "answer": None}},
    ]), tmp_path / "chat.parquet")
    first, second = load_problems(tmp_path / "chat.parquet")
    assert first == Problem(prompt="Be brief.\n\n3+4=", answer="7", target="3+4=7\n#### 7", kind="verl")
    assert second == Problem(prompt="2+2=", answer="4", target="#### 4", kind="verl")

    pq.write_table(pa.Table.from_pylist([{"prompt": "5+5=", "reward_model": {"ground_truth": 10}}]),
                   tmp_path / "plain.parquet")
    assert load_problems(tmp_path / "plain.parquet") == [Problem("5+5=", "10", "#### 10", "verl")]


@pytest.mark.parametrize("truth, answer", [(18.0, "18"), (1e16, "10000000000000000"), (2.5, "2.5"), (-0.0, "0")])
def test_whole_float_ground_truths_read_as_integers(tmp_path, truth, answer):
    """18.0 loaded as '18.0' and 1e16 as '1e+16', which no integer answer ever equals."""
    path = _write_jsonl(tmp_path / "verl.jsonl", [{"prompt": "Q?", "reward_model": {"ground_truth": truth}}])
    assert load_problems(path)[0].answer == answer


@pytest.mark.parametrize("truth", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_ground_truths_are_refused(tmp_path, truth):
    path = _write_jsonl(tmp_path / "verl.jsonl", [{"prompt": "2+2=", "reward_model": {"ground_truth": "4"}},
                                                   f'{{"prompt": "Q?", "reward_model": {{"ground_truth": {truth}}}}}'])
    with pytest.raises(DataError, match=r"verl.jsonl:2: expected 'reward_model.ground_truth' to be a finite number"):
        load_problems(path)


def test_non_finite_ground_truth_in_parquet_names_the_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [{"prompt": "2+2=", "reward_model": {"ground_truth": 4.0}},
            {"prompt": "3+3=", "reward_model": {"ground_truth": float("nan")}}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"bad.parquet: row 1: expected 'reward_model.ground_truth' to be a finite"):
        load_problems(tmp_path / "bad.parquet")


def test_verl_messages_are_system_then_user_turns(tmp_path):
    """Messages were joined with their roles lost: a few-shot conversation read as one user text."""
    system, user = {"role": "system", "content": "Be brief."}, {"role": "user", "content": "3+4="}
    shot = [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]
    rows = [{"prompt": [system, user, {"role": "user", "content": "Answer with a number."}],
             "reward_model": {"ground_truth": "7"}},
            {"prompt": [system, *shot, user], "reward_model": {"ground_truth": "7"}}]
    path = _write_jsonl(tmp_path / "verl.jsonl", rows)
    with pytest.raises(DataError, match=r"verl.jsonl:2: expected 'prompt' messages to be system ones then user ones, "
                                        r"got roles \['system', 'user', 'assistant', 'user'\]"):
        load_problems(path)
    assert load_problems(_write_jsonl(path, rows[:1]))[0].prompt == "Be brief.\n\n3+4=\n\nAnswer with a number."
    for roles in (["user", "system"], ["system"]):
        path = _write_jsonl(tmp_path / "verl.jsonl", [{"prompt": [{"role": r, "content": "x"} for r in roles],
                                                       "reward_model": {"ground_truth": "1"}}])
        with pytest.raises(DataError, match=r"verl.jsonl:1: expected 'prompt' messages to be system ones then user"):
            load_problems(path)


@pytest.mark.parametrize("row, message", [
    ({"prompt": [], "reward_model": {"ground_truth": "1"}}, "expected 'prompt' to be a string or a non-empty list"),
    ({"prompt": [{"content": "x"}], "reward_model": {"ground_truth": "1"}}, "expected 'prompt' to be a string"),
    ({"prompt": "x", "reward_model": {"style": "rule"}}, "expected 'reward_model.ground_truth'"),
    ({"prompt": "x", "reward_model": {"ground_truth": ["1", "2"]}}, "expected 'reward_model.ground_truth'"),
])
def test_verl_row_errors_name_file_and_line(tmp_path, row, message):
    # Through JSONL, where each row keeps its own types (parquet would unify the rows' schemas first).
    path = _write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "2+2=", "reward_model": {"ground_truth": "4"}}, row])
    with pytest.raises(DataError, match=f"bad.jsonl:2: {message}"):
        load_problems(path)


def test_verl_row_error_in_parquet_names_the_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [{"prompt": "2+2=", "reward_model": {"ground_truth": "4"}},
            {"prompt": "3+3=", "reward_model": {"ground_truth": None}}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"bad.parquet: row 1: expected 'reward_model.ground_truth'"):
        load_problems(tmp_path / "bad.parquet")


def test_corrupted_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match="broken.parquet: not a readable parquet file"):
        load_problems(tmp_path / "broken.parquet")


def test_write_verl_parquet_has_verls_fields_and_round_trips(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    problems = MathRecipe(seed=0, train_size=20, heldout_size=5, validation_size=0).train
    path = write_verl_parquet(problems, tmp_path / "data" / "train.parquet", split="train")
    rows = pq.read_table(path).to_pylist()
    assert rows[3] == {"data_source": "precision-engine/math",
                       "prompt": [{"role": "user", "content": f"{problems[3].prompt} {GSM8K_INSTRUCTION}"}],
                       "ability": "math",
                       "reward_model": {"style": "rule", "ground_truth": problems[3].answer},
                       "extra_info": {"split": "train", "index": 3, "answer": problems[3].target,
                                      "kind": problems[3].kind}}
    assert load_problems(path) == problems
    assert not list(path.parent.glob(".*partial"))


def test_verl_parquet_asks_generated_problems_for_the_answer_format(tmp_path):
    """verl applies the chat template to the bare '6+6=', and a chat model answers in prose no reward reads."""
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    generated = MathRecipe(seed=0, train_size=40, heldout_size=0, validation_size=0, mix={"add": 1, "word": 1}).train
    word = next(p for p in generated if p.kind == "word")
    gsm8k = load_problems(_write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K_ROWS[:1]))[0]
    own = Problem(prompt="2+2= Solve it. \\boxed{}", answer="4", target="4", kind="verl")
    problems = [*generated, gsm8k, own]
    path = write_verl_parquet(problems, tmp_path / "train.parquet", split="train")
    contents = [row["prompt"][0]["content"] for row in pq.read_table(path).to_pylist()]
    assert all(c.endswith(f" {GSM8K_INSTRUCTION}") and c.count(GSM8K_INSTRUCTION) == 1 for c in contents[:-1])
    assert contents[generated.index(word)] == format_prompt(word, "{prompt} " + GSM8K_INSTRUCTION)
    assert "Answer:" not in contents[generated.index(word)]  # the instruction asks for the answer, not twice
    assert contents[-1] == own.prompt  # a loaded problem keeps its own instruction
    assert load_problems(path) == problems


def test_missing_pyarrow_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    (tmp_path / "x.parquet").write_bytes(b"")
    with pytest.raises(UnsupportedError, match=r"needs pyarrow: pip install 'precision-engine\[recipe\]'"):
        load_problems(tmp_path / "x.parquet")
    with pytest.raises(UnsupportedError, match="needs pyarrow"):
        write_verl_parquet([Problem("1+1=", "2", "2")], tmp_path / "y.parquet", split="train")
