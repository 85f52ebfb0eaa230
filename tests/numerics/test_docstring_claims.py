"""The numerics docstrings say exactly what the measurements say about who computes the same bytes (issue 8,
item 6): no claim of identity where a third party multiplies by a reciprocal, rounds in bf16 or saturates."""

from precision_engine.numerics import exchange, kv_cache, quantize


def _text(module) -> str:
    return " ".join(module.__doc__.split())


def test_quantize_names_who_is_identical_and_who_is_not():
    doc = _text(quantize)
    assert "100% of bytes and scales" in doc and "99.90-99.99%" in doc and "30-55% of blocks" in doc
    assert "SGLang's CUDA activation quantizer multiplies" in doc
    assert "``per_token_group_quant_fp8``) divides" not in doc  # the old, wrong claim


def test_exchange_does_not_claim_verls_scales_are_ours():
    doc = _text(exchange)
    assert "never in layout, scale definition" not in doc
    assert "30-55% of blocks" in doc and "99.90-99.99%" in doc


def test_kv_cache_says_97_percent_and_that_sglang_saturates():
    doc = _text(kv_cache)
    assert "quantizes exactly as SGLang does" not in doc
    assert "97.0% of the bytes" in doc and "saturat" in doc
    assert "Unlike SGLang" not in doc
