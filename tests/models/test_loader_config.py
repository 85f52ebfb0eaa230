"""A model config.json is user input: one too deeply nested for the JSON parser is a ModelError naming the file,
never a RecursionError; a device or FIFO is named as one; a size below 1 is refused."""

import pytest
from typer.testing import CliRunner

from precision_engine.cli.app import app
from precision_engine.errors import ModelError
from precision_engine.models.loader import resolve_config

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def deep_config(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(DEEP)
    return folder / "config.json"


def test_a_deeply_nested_config_is_a_model_error(deep_config):
    for spec in (deep_config, deep_config.parent):
        with pytest.raises(ModelError, match=f"{deep_config}: not an HF config.json \\(JSON nested too deeply\\)"):
            resolve_config(str(spec))


def test_validate_says_so_in_one_line(deep_config):
    for spec in (deep_config, deep_config.parent):
        result = CliRunner().invoke(app, ["validate", "jetrl_unified", "-m", str(spec)])
        assert result.exit_code == 2, result.output
        assert result.output == f"error: {deep_config}: not an HF config.json (JSON nested too deeply)\n"


def test_a_device_or_fifo_is_said_to_be_one_not_missing(tmp_path):
    """`--model /dev/null` read "no such file or directory": it exists, it is not a regular file."""
    import os

    os.mkfifo(tmp_path / "config.json")
    for spec in ("/dev/null", str(tmp_path / "config.json")):
        with pytest.raises(ModelError, match=f"{spec}: not a regular file"):
            resolve_config(spec)


@pytest.mark.parametrize("key, value", [("hidden_size", 0), ("num_hidden_layers", -3), ("vocab_size", 0)])
def test_a_size_below_one_is_refused_where_transformers_builds_an_empty_model(tmp_path, key, value):
    """hidden_size 0 gave a torch warning and `ok`; -3 layers a plan of no layers and `ok`."""
    import json

    config = resolve_config("tiny-llama")
    (tmp_path / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(ModelError, match=f"config.json: {key} is {value}; an architecture's sizes are >= 1"):
        resolve_config(str(tmp_path))
