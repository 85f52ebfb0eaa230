"""User data loaders (GSM8K JSONL and parquet, verl's parquet), their errors, and the verl parquet writer."""

import json
import sys

import pytest

from precision_engine.errors import DataError, UnsupportedError
from precision_engine.rl.recipes.math import (
    GSM8K_INSTRUCTION,
    MathRecipe,
    Problem,
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
                       "prompt": [{"role": "user", "content": problems[3].prompt}],
                       "ability": "math",
                       "reward_model": {"style": "rule", "ground_truth": problems[3].answer},
                       "extra_info": {"split": "train", "index": 3, "answer": problems[3].target,
                                      "kind": problems[3].kind}}
    assert load_problems(path) == problems
    assert not list(path.parent.glob(".*partial"))


def test_missing_pyarrow_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    (tmp_path / "x.parquet").write_bytes(b"")
    with pytest.raises(UnsupportedError, match=r"needs pyarrow: pip install 'precision-engine\[recipe\]'"):
        load_problems(tmp_path / "x.parquet")
    with pytest.raises(UnsupportedError, match="needs pyarrow"):
        write_verl_parquet([Problem("1+1=", "2", "2")], tmp_path / "y.parquet", split="train")
