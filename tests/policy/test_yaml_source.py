"""Safe YAML: plain data, exact locations, and limits that stop hostile input early."""

from __future__ import annotations

from precision_engine.policy.yaml_source import MAX_BYTES, Loc, parse_yaml, read_policy_text


def test_plain_data_and_locations():
    text = "a:\n  b: [1, 2.5, true, null, x]\n  c: '2024-01-01'\nd: 2024-01-01\n"
    data, source_map, problems = parse_yaml(text, "p.yaml")
    assert problems == []
    assert data == {"a": {"b": [1, 2.5, True, None, "x"], "c": "2024-01-01"}, "d": "2024-01-01"}
    assert source_map.locate(("a", "b", 1)) == Loc("p.yaml", 2, 10)
    assert source_map.locate(("a", "b")) == Loc("p.yaml", 2, 6)
    assert source_map.locate(("a",)) == Loc("p.yaml", 1, 1)  # block mapping: the key's line
    assert source_map.locate(("a", "b"), key=True) == Loc("p.yaml", 2, 3)
    assert source_map.locate(("a", "missing", 3)) == Loc("p.yaml", 1, 1)  # nearest located ancestor


def test_aliases_expand_to_independent_copies():
    data, _, problems = parse_yaml("x: &v {k: [1]}\ny: *v\n", "p.yaml")
    assert problems == [] and data["x"] == data["y"]
    data["x"]["k"].append(2)
    assert data["y"] == {"k": [1]}


def test_recursive_alias_stops_at_depth_limit():
    data, _, problems = parse_yaml("a: &a [*a]\n", "p.yaml")
    assert data is None
    assert "nesting deeper than" in problems[0].message


def test_deep_nesting_is_refused_before_the_recursive_composer():
    data, _, problems = parse_yaml("a: " + "[" * 100_000 + "]" * 100_000, "p.yaml")
    assert data is None
    assert (problems[0].message, problems[0].line, problems[0].column) == ("nesting deeper than 32 levels", 1, 35)


def test_control_character_is_located():
    data, _, problems = parse_yaml("a: 1\nb: x\x00y\n", "p.yaml")
    assert data is None
    assert (problems[0].message, problems[0].line, problems[0].column) == (
        "invalid YAML: character U+0000 is not allowed", 2, 5)


def test_multiple_documents_are_rejected():
    data, _, problems = parse_yaml("a: 1\n---\nb: 2\n", "p.yaml")
    assert data is None and problems[0].line == 2 and "invalid YAML" in problems[0].message


def test_empty_document_is_none_without_problems():
    assert parse_yaml("# only a comment\n", "p.yaml")[0::2] == (None, [])


def test_oversized_file_is_refused_before_parsing(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("a: " + "x" * MAX_BYTES)
    text, problems = read_policy_text(path, path.name)
    assert text is None and "limited to 1048576 bytes" in problems[0].message


def test_non_utf8_file_is_reported(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("version: 1\nname: caf\xe9\n".encode("latin-1"))
    text, problems = read_policy_text(path, path.name)
    assert text is None and problems[0].message.startswith("not UTF-8 text")
    assert (problems[0].line, problems[0].column) == (2, 10)  # located like every other error of a policy
