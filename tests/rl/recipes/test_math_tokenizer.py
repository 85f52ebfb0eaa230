"""The character tokenizer (round trip, vocabulary a multiple of 64, save/load) and the HF adapter."""

import json

import pytest

from precision_engine.errors import DataError, ModelError
from precision_engine.rl.recipes.math import CharTokenizer, HFTokenizer, MathRecipe, Problem, load_tokenizer, reward


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


def test_decode_ends_at_eos_and_marks_other_specials_and_unused_ids():
    tok = CharTokenizer()
    one, nine = tok.encode("19")
    assert tok.eos_ids == [tok.eos_id] and tok.decode([one, nine, tok.eos_id]) == "19"
    assert tok.decode([one, tok.eos_id, nine]) == "1"  # nothing after the end of the response
    assert tok.decode([one, tok.vocab_size - 1, nine]) == "1\ufffd9"  # not "19": no reward for an unused id
    four, two, newline = tok.encode("42\n")
    text = tok.decode([four, tok.pad_id, two, tok.bos_id, newline])
    assert text == "4\ufffd2\ufffd\n" and reward(text, "42") == 0.0  # pad and bos decoded to "": '42', a reward


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
    assert tok.decode([8, 9, 7, 10, 2]) == "Tom has 7 apples"
    assert tok.eos_ids == [2]  # no generation_config.json
    ids = tok.encode_prompt(Problem("3+4=", "7", "7"))
    assert ids == [tok.bos_id, 4, 6, 5]  # "Question: 3+4=\nAnswer:", no chat template


def test_hf_decode_ends_at_eos_and_marks_special_and_out_of_range_ids(hf_dir):
    """[7, 500, 8] decoded to '7 Tom': an id past len(tokenizer) (a padded embedding samples it) was dropped."""
    tok = HFTokenizer(hf_dir)
    assert tok.decode([7, 500, 8]) == "7\ufffdTom"
    assert tok.decode([8, 9, 0, 7, 1, 10, 3]) == "Tom has\ufffd7\ufffdapples\ufffd"  # pad, bos, unk
    assert tok.decode([7, 2, 8, 9]) == "7"  # the response ends at eos


@pytest.mark.parametrize("eos, expected", [(10, [2, 10]), ([2, 6, 10], [2, 6, 10]), ([6, 2], [2, 6]), (None, [2])])
def test_hf_eos_ids_add_generation_configs(hf_dir, eos, expected):
    """Qwen2.5-Instruct ends at 151645 or 151643, Llama-3 at 128001, 128008 or 128009 (generation_config.json);
    with the tokenizer's eos alone, text after another end token was appended to the answer."""
    (hf_dir / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": eos}))
    tok = HFTokenizer(hf_dir)
    assert tok.eos_ids == expected and tok.eos_id == 2
    assert tok.decode([8, 9, 7, *expected[-1:], 10]) == "Tom has 7"


@pytest.mark.parametrize("text, message", [
    ("{not json", "not a readable JSON file"),
    ("[2]", "expected a JSON object, got list"),
    ('{"eos_token_id": "2"}', "expected 'eos_token_id' to be a token id or a list of them, got '2'"),
    ('{"eos_token_id": [2, true]}', "expected 'eos_token_id' to be a token id or a list of them"),
    ('{"eos_token_id": -1}', "expected 'eos_token_id' to be a token id or a list of them, got -1"),
])
def test_a_malformed_generation_config_names_the_file(hf_dir, text, message):
    (hf_dir / "generation_config.json").write_text(text)
    with pytest.raises(ModelError, match=f"generation_config.json: {message}"):
        HFTokenizer(hf_dir)


def test_hf_encode_prompt_asks_a_word_problem_for_its_answer_once(hf_dir):
    tok = HFTokenizer(hf_dir)
    word = Problem("Tom has 7 apples Answer: ", "7", "7", kind="word")
    assert tok.encode_prompt(word) == [1, 4, 8, 9, 7, 10, 5]  # "Question: Tom has 7 apples\nAnswer:"


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
