"""The character tokenizer (round trip, vocabulary a multiple of 64, save/load) and the HF adapter."""

import json

import pytest

from precision_engine.errors import DataError, ModelError
from precision_engine.rl.recipes.math import CharTokenizer, HFTokenizer, MathRecipe, Problem, load_tokenizer


def test_round_trip_on_every_generated_prompt_and_target():
    tok = CharTokenizer()
    recipe = MathRecipe(seed=0, train_size=300, heldout_size=100, validation_size=0)
    for p in recipe.train + recipe.heldout:
        ids = tok.encode(p.prompt + p.target)
        assert all(3 <= i < tok.vocab_size for i in ids)
        assert tok.decode(ids) == p.prompt + p.target
    text = "Tom has 12 apples; \\boxed{19} #### 1,000.\n"
    assert tok.decode(tok.encode(text)) == text


def test_vocab_is_a_multiple_of_64_and_specials_are_fixed():
    tok = CharTokenizer()
    assert tok.vocab_size % 64 == 0 and tok.vocab_size >= 3 + len(tok.chars)
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    assert CharTokenizer("0123456789+=").vocab_size == 64


def test_decode_drops_specials_and_marks_unused_ids():
    tok = CharTokenizer()
    one, nine = tok.encode("19")
    assert tok.decode([tok.bos_id, one, nine, tok.eos_id, tok.pad_id]) == "19"
    assert tok.decode([one, tok.vocab_size - 1, nine]) == "1\ufffd9"  # not "19": no reward for an unused id


def test_encode_prompt_starts_with_bos():
    tok = CharTokenizer()
    assert tok.encode_prompt(Problem("3+4=", "7", "7")) == [tok.bos_id] + tok.encode("3+4=")


def test_unknown_character_is_a_clear_error():
    with pytest.raises(DataError, match="'é' at position 3"):
        CharTokenizer().encode("caf\u00e9")


def test_save_load_and_a_self_describing_model_directory(tmp_path):
    tok = CharTokenizer("0123456789+-*= ")
    path = tok.save(tmp_path / "model")
    spec = json.loads(path.read_text())
    assert spec["type"] == "char" and spec["vocab_size"] == 64 and spec["specials"]["<eos>"] == 2
    loaded = load_tokenizer(tmp_path / "model")
    assert isinstance(loaded, CharTokenizer) and loaded.chars == tok.chars
    assert loaded.encode("12+7=") == tok.encode("12+7=")


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(DataError, match="char_tokenizer.json: no such file"):
        CharTokenizer.load(tmp_path)
    (tmp_path / "char_tokenizer.json").write_text("{not json")
    with pytest.raises(DataError, match="char_tokenizer.json: not a readable JSON file"):
        CharTokenizer.load(tmp_path)
    (tmp_path / "char_tokenizer.json").write_text(json.dumps({"type": "char", "chars": "01", "vocab_size": 7}))
    with pytest.raises(DataError, match="vocab_size 7 does not match"):
        CharTokenizer.load(tmp_path)


@pytest.fixture
def hf_dir(tmp_path):
    """A small word-level HF tokenizer saved to a local directory (no download)."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    words = ["<pad>", "<s>", "</s>", "<unk>", "Question:", "Answer:", "3+4=", "7", "Tom", "has", "apples"]
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>")
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    backend.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>",
                                                eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(tmp_path / "hf")
    return tmp_path / "hf"


def test_hf_adapter_has_the_same_interface(hf_dir):
    tok = load_tokenizer(hf_dir)
    assert isinstance(tok, HFTokenizer)
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.vocab_size) == (0, 1, 2, 11)
    assert tok.encode("Tom has 7 apples") == [8, 9, 7, 10]
    assert tok.decode([1, 8, 9, 7, 10, 2]) == "Tom has 7 apples"
    ids = tok.encode_prompt(Problem("3+4=", "7", "7"))
    assert ids == [tok.bos_id, 4, 6, 5]  # "Question: 3+4=\nAnswer:", no chat template


def test_hf_adapter_errors_name_the_directory(tmp_path):
    pytest.importorskip("transformers")
    with pytest.raises(ModelError, match=f"{tmp_path}: cannot load a tokenizer"):
        HFTokenizer(tmp_path)


def test_a_name_that_is_no_directory_is_refused_in_one_line_without_the_hubs_advice():
    """`precision run --model tiny-llama`: transformers took the name for a hub id and answered with three
    lines about the internet; a run's model is a local directory, and the error says so."""
    pytest.importorskip("transformers")
    with pytest.raises(ModelError) as refused:
        HFTokenizer("tiny-llama")
    message = str(refused.value)
    assert message.startswith("tiny-llama: not a directory") and "\n" not in message and "internet" not in message
