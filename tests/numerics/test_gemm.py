"""fp8_gemm: the exact reference against float64, bitwise batch invariance, the Triton kernel (in Triton's
CPU interpreter, tiny shapes) against the reference, and refusals of layouts the GEMM cannot run.

Tolerances: the reference is exact up to its final rounding, so against a float64 product of the dequantized
operands it must agree to 1e-12 relative (float64 output). Triton accumulates in fp32: 1e-5 relative with
fp32 output, 5e-3 with bf16 output (bf16 rounding alone is 2^-9 per element).
"""

import math
from dataclasses import replace

import pytest
import torch

from precision_engine.errors import OperandError, UnsupportedError
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm, reference_gemm, transpose_operand
from precision_engine.numerics.quantize import (
    Quantized,
    quantize_blocks,
    quantize_rows_1xG,
    quantize_tokens_transposed,
)

from helpers import needs_interpreter

ACT, WEIGHT = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"]
TOKENS = PRESET_FORMATS["fp8_group_tokens"]


def _operands(m, n, k, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * scale
    w = torch.randn(n, k, generator=g) * 0.05
    return quantize_rows_1xG(x, ACT), quantize_blocks(w, WEIGHT)


def _integer_operands(m, n, k, seed=0):
    """Operands whose FP8 values are integers in [-16, 16] under random fp32 scales: each 128-wide K block's dot
    product is then exact in fp32 in any order, as the tensor cores' is, while the GPU kernels' fixed order of
    adding the scaled blocks still decides the bits. Triton's interpreter sums a block's products with numpy's
    matmul, whose order follows the tile's shape and the CPU's BLAS kernels, so for random FP8 values its last
    bit differs between tiles on some machines (seen here: 128-row swapped tiles vs 64-row tiles)."""
    g = torch.Generator().manual_seed(seed)

    def operand(rows, fmt, scale_rows):
        data = torch.randint(-16, 17, (rows, k), generator=g).float().to(torch.float8_e4m3fn)
        scale = torch.exp2(torch.rand(-(-rows // scale_rows), -(-k // 128), generator=g) * 8 - 8)
        return Quantized(data, scale, fmt)

    return operand(m, ACT, 1), operand(n, WEIGHT, 128)


def _dequant64(q: Quantized, rows_per_scale: int) -> torch.Tensor:
    """float64 dequantization (exact: an FP8 value times an fp32 scale fits in 53 bits)."""
    s = q.scale.double().repeat_interleave(rows_per_scale, 0)[: q.data.shape[0]]
    return q.data.double() * s.repeat_interleave(128, 1)[:, : q.data.shape[1]]


def _rel(out, ref):
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("m,n,k", [(1, 128, 128), (13, 256, 384), (67, 200, 320), (128, 384, 1024)])
def test_reference_matches_float64(m, n, k):
    xq, wq = _operands(m, n, k, seed=m * n + k)
    ref64 = _dequant64(xq, 1) @ _dequant64(wq, 128).T
    out = reference_gemm(xq, wq, out_dtype=torch.float64)
    assert _rel(out, ref64) < 1e-12
    bf16 = fp8_gemm(xq, wq)  # AUTO on the CPU = reference
    assert bf16.dtype == torch.bfloat16 and torch.equal(bf16, out.to(torch.bfloat16))


def test_reference_wgrad_pair_matches_float64():
    g = torch.Generator().manual_seed(5)
    dy, x = torch.randn(200, 256, generator=g), torch.randn(200, 384, generator=g)
    dyt, xt = quantize_tokens_transposed(dy, TOKENS), quantize_tokens_transposed(x, TOKENS)
    out = fp8_gemm(dyt, xt, out_dtype=torch.float64)
    assert out.shape == (256, 384)
    assert _rel(out, _dequant64(dyt, 1) @ _dequant64(xt, 1).T) < 1e-12
    assert _rel(out, dy.double().t() @ x.double()) < 0.1  # the FP8 error of both operands


def test_reference_is_order_independent():
    """Each K block's partial sum is exact, so permuting K inside the blocks changes no bit."""
    xq, wq = _operands(32, 256, 512, seed=9, scale=30.0)
    perm = torch.cat([torch.randperm(128) + 128 * b for b in range(4)])
    xp = Quantized(xq.data[:, perm], xq.scale, xq.fmt)
    wp = Quantized(wq.data[:, perm], wq.scale, wq.fmt)
    a, b = reference_gemm(xq, wq, out_dtype=torch.float64), reference_gemm(xp, wp, out_dtype=torch.float64)
    assert torch.equal(a.view(torch.int64), b.view(torch.int64))


def test_reference_rows_bitwise_batch_invariant():
    xq, wq = _operands(128, 256, 384, seed=3)
    full = fp8_gemm(xq, wq)
    for m in (1, 7, 128):
        part = fp8_gemm(Quantized(xq.data[:m], xq.scale[:m], xq.fmt), wq)
        assert torch.equal(part.view(torch.uint16), full[:m].view(torch.uint16)), m


def test_nan_group_poisons_its_row_only():
    x = torch.randn(4, 256)
    x[2, 5] = math.nan
    xq, wq = quantize_rows_1xG(x, ACT), quantize_blocks(torch.randn(128, 256), WEIGHT)
    out = fp8_gemm(xq, wq, out_dtype=torch.float32)
    assert torch.isnan(out[2]).all()
    assert torch.isfinite(out[[0, 1, 3]]).all()


def test_zero_operands_give_zeros_not_nan():
    xq, wq = quantize_rows_1xG(torch.zeros(3, 256), ACT), quantize_blocks(torch.randn(128, 256), WEIGHT)
    assert torch.equal(fp8_gemm(xq, wq, out_dtype=torch.float32), torch.zeros(3, 128))


@needs_interpreter
@pytest.mark.parametrize("kernel", [Kernel.AUTO, Kernel.TRITON, Kernel.REFERENCE, Kernel.EMULATED])
@pytest.mark.parametrize("m,n,k", [(3, 128, 0), (0, 128, 256), (3, 0, 256)])
def test_empty_operands_give_an_empty_or_zero_product(kernel, m, n, k):
    """No rows, no weight rows, or no K (a sum of nothing: zeros) on every kernel this machine runs, and the Triton
    launch called directly, which once divided by K's block count."""
    from precision_engine.numerics.triton_gemm import block_scaled_gemm

    xq, wq = quantize_rows_1xG(torch.randn(m, k), ACT), quantize_blocks(torch.randn(n, k), WEIGHT)
    assert torch.equal(fp8_gemm(xq, wq, kernel=kernel, out_dtype=torch.float32), torch.zeros(m, n))
    out = block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, out_dtype=torch.float32)
    assert torch.equal(out, torch.zeros(m, n))


@pytest.mark.parametrize("m,n,k", [(16, 128, 256), (5, 160, 200)])
@needs_interpreter
def test_triton_matches_reference(m, n, k):
    xq, wq = _operands(m, n, k, seed=m + n + k)
    ref = reference_gemm(xq, wq, out_dtype=torch.float64)
    assert _rel(fp8_gemm(xq, wq, kernel=Kernel.TRITON, out_dtype=torch.float32), ref) < 1e-5
    assert _rel(fp8_gemm(xq, wq, kernel=Kernel.TRITON), ref) < 5e-3


@needs_interpreter
def test_triton_wgrad_pair_matches_reference():
    g = torch.Generator().manual_seed(2)
    dyt = quantize_tokens_transposed(torch.randn(40, 128, generator=g), TOKENS)
    xt = quantize_tokens_transposed(torch.randn(40, 256, generator=g), TOKENS)
    ref = reference_gemm(dyt, xt, out_dtype=torch.float64)
    assert _rel(fp8_gemm(dyt, xt, kernel=Kernel.TRITON, out_dtype=torch.float32), ref) < 1e-5


@needs_interpreter
def test_triton_rows_bitwise_batch_invariant():
    """Decode tiles (M = 1, 7, 16, swapped operands) and the one-program prefill walk (M = 70), with AUTO's one
    segment and with K split into segments of 2 blocks (decode splits K over programs): the same row bytes."""
    from precision_engine.numerics.triton_gemm import block_scaled_gemm

    xq, wq = _operands(70, 128, 1024, seed=4)
    for seg_kb in (None, 2):
        full = block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg_kb)
        for m in (1, 7, 16):
            part = block_scaled_gemm(xq.data[:m], xq.scale[:m], wq.data, wq.scale, b_scale_rows=128, seg_kb=seg_kb)
            assert torch.equal(part.view(torch.uint16), full[:m].view(torch.uint16)), (seg_kb, m)


@needs_interpreter
def test_wide_weight_decode_walks_whole_tiles_with_the_prefill_bytes(monkeypatch):
    """A weight of >= WHOLE_TILES_MIN row tiles (fused gate/up) decodes in persistent programs over whole-K
    tiles, no split: its rows are the bytes of the prefill walk. The interpreter meets the rule at 2 tiles."""
    from precision_engine.numerics import triton_gemm

    assert triton_gemm.config_for(64, 28672, 4096).persistent and not triton_gemm.config_for(64, 6144, 4096).persistent
    monkeypatch.setattr(triton_gemm, "WHOLE_TILES_MIN", 2)
    n, k = 256, 640
    assert triton_gemm.config_for(64, n, k).persistent and triton_gemm.config_for(1, n, k).swap_ab
    xq, wq = _operands(70, n, k, seed=9)
    full = fp8_gemm(xq, wq, kernel=Kernel.TRITON)
    for m in (1, 20):
        part = fp8_gemm(Quantized(xq.data[:m], xq.scale[:m], xq.fmt), wq, kernel=Kernel.TRITON)
        assert torch.equal(part.view(torch.uint16), full[:m].view(torch.uint16)), m


@needs_interpreter
def test_triton_launch_choices_give_the_same_bytes():
    """Tiles, TMA or plain loads, swapped operands, split-K with a separate or fused sum, persistent programs
    walking several tiles or segments each: one set of bits."""
    from precision_engine.numerics.triton_gemm import GemmConfig, block_scaled_gemm

    xq, wq = _integer_operands(5, 160, 640, seed=8)
    ref = reference_gemm(xq, wq, out_dtype=torch.float64)
    outs = [
        block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, out_dtype=torch.float32,
                          config=replace(cfg, fused_sum=fused), seg_kb=2, split=split)
        for cfg in (GemmConfig(64, 32, 4, 2, 1), GemmConfig(64, 64, 4, 2, 1, tma=False),
                    GemmConfig(128, 16, 4, 2, 1, swap_ab=True), GemmConfig(128, 64, 4, 2, flatten=True),
                    GemmConfig(64, 32, 4, 2, persistent=1), GemmConfig(64, 64, 4, 2, tma=False, persistent=2),
                    GemmConfig(128, 16, 4, 2, swap_ab=True, flatten=True, persistent=1))
        for split, fused in ((False, False), (True, False), (True, True))
    ]
    assert _rel(outs[0], ref) < 1e-5
    for out in outs[1:]:
        assert torch.equal(out.view(torch.int32), outs[0].view(torch.int32))


def test_every_weight_is_one_k_segment():
    """AUTO's rule: K is one segment (one FP32 chain, pinned cuBLAS's sums) for every weight, a function of
    (N, K) only; narrow weights then decode on the Gluon chain launch."""
    from precision_engine.numerics.triton_gemm import (CHAIN_MAX_KB, CHAIN_MAX_TILES, WIDE_CHAIN_MAX_M,
                                                       WIDE_CHAIN_MAX_TILES, chain_decodes, segment_kb)

    for n, k in [(4096, 4096), (1024, 4096), (4096, 14336), (12288, 4096), (6144, 4096), (28672, 4096)]:
        assert segment_kb(n, k) == -(-k // 128), (n, k)
    assert segment_kb(4096, 200) == 2
    for m in (1, WIDE_CHAIN_MAX_M, WIDE_CHAIN_MAX_M + 1, 64):
        assert chain_decodes(m, 6144, 4096) and chain_decodes(m, 128 * CHAIN_MAX_TILES - 128, 4096)
        assert chain_decodes(m, 4096, 128 * CHAIN_MAX_KB) and not chain_decodes(m, 4096, 128 * CHAIN_MAX_KB + 1)
        wide = m <= WIDE_CHAIN_MAX_M  # the 8B's gate or up, and the fused gate/up, up to 32 tokens
        assert chain_decodes(m, 14336, 4096) is wide and chain_decodes(m, 28672, 4096) is wide, m
        assert not chain_decodes(m, 128 * WIDE_CHAIN_MAX_TILES + 1, 4096)


def test_transpose_operand_equals_quantizing_the_transpose():
    w = torch.randn(200, 320)
    wt = transpose_operand(quantize_blocks(w, WEIGHT))
    direct = quantize_blocks(w.t().contiguous(), WEIGHT)
    assert torch.equal(wt.data.view(torch.uint8), direct.data.view(torch.uint8))
    assert torch.equal(wt.scale, direct.scale)


@needs_interpreter
def test_triton_byte_transpose():
    from precision_engine.numerics.triton_gemm import transpose_bytes

    x = (torch.randn(70, 130) * 20).to(torch.float8_e4m3fn)
    assert torch.equal(transpose_bytes(x).view(torch.uint8), x.t().contiguous().view(torch.uint8))


def test_refuses_unsupported_layouts():
    xq, wq = _operands(4, 128, 256)
    with pytest.raises(OperandError, match="K differs"):
        fp8_gemm(xq, quantize_blocks(torch.randn(128, 384), WEIGHT))
    per_tensor = quantize_rows_1xG(torch.randn(4, 256), ACT)
    with pytest.raises(OperandError, match="operand a must be 1x128"):
        fp8_gemm(Quantized(per_tensor.data, per_tensor.scale[:, :1], ACT), wq)
    with pytest.raises(OperandError, match="operand b must be"):
        fp8_gemm(xq, Quantized(wq.data, wq.scale, PRESET_FORMATS["fp8_tensor"]))
    with pytest.raises(UnsupportedError, match="kernel cublas needs a CUDA GPU of compute capability 9.0"):
        fp8_gemm(xq, wq, kernel=Kernel.CUBLAS)


def test_refuses_bytes_scales_and_outputs_it_would_misread():
    """Data of another dtype was read as FP8 all the same (int8 bytes gave other numbers, E5M2 bytes under an
    E4M3 format NaN), bf16 scales and an int32 out_dtype passed: each is an OperandError now."""
    xq, wq = _operands(4, 128, 256)
    for data in (xq.data.view(torch.int8), xq.data.view(torch.float8_e5m2), xq.data.to(torch.bfloat16)):
        with pytest.raises(OperandError, match=f"operand a holds {data.dtype} data, its format is e4m3 1x128"):
            fp8_gemm(Quantized(data, xq.scale, xq.fmt), wq)
    with pytest.raises(OperandError, match="operand b's scales are torch.bfloat16, expected float32"):
        fp8_gemm(xq, Quantized(wq.data, wq.scale.bfloat16(), wq.fmt))
    with pytest.raises(OperandError, match="on more than one device"):
        fp8_gemm(xq, Quantized(wq.data.to("meta"), wq.scale.to("meta"), wq.fmt))
    for out_dtype in (torch.int32, torch.float8_e4m3fn):
        with pytest.raises(OperandError, match="out_dtype"):
            fp8_gemm(xq, wq, out_dtype=out_dtype)


@pytest.mark.parametrize("m,n,k", [(13, 256, 384), (67, 128, 200)])
def test_emulated_gemm_is_the_reference_within_fp32_rounding(m, n, k):
    """The CPU backward's kernel: fp32 dequantization and one matmul, against the exact float64 reference."""
    from precision_engine.numerics.gemm import emulated_gemm
    from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG

    generator = torch.Generator().manual_seed(m * n + k)
    x = torch.randn(m, k, generator=generator) * 3
    w = torch.randn(n, k, generator=generator)
    a = quantize_rows_1xG(x, PRESET_FORMATS["fp8_group_act"])
    b = quantize_blocks(w, PRESET_FORMATS["fp8_block_weight"])
    exact = reference_gemm(a, b, out_dtype=torch.float64)
    emulated = emulated_gemm(a, b, out_dtype=torch.float32).double()
    assert torch.linalg.norm(emulated - exact) / torch.linalg.norm(exact) < 1e-6


def test_gluon_decode_runs_where_its_units_fill_the_sms():
    """The decode dispatch rule (`triton_gemm._gluon_decode_fills`) on the H200's 132 SMs and the 8B decode
    shapes it was measured on, with K in the segments of the twelfth session (an explicit seg_kb): o_proj (128
    units), down_proj (256) and the fused gate/up (224 whole tiles) take the Gluon launch; the fused q/k/v
    (192 units, 73% of two waves) keeps the Triton launch, which was faster."""
    from precision_engine.numerics.triton_gemm import _gluon_decode_fills

    def fills(n, k, seg, sms=132):
        return _gluon_decode_fills(n, k, seg, sms)

    assert fills(4096, 4096, 8) and fills(4096, 14336, 16) and fills(28672, 4096, 32) and fills(14336, 4096, 32)
    assert not fills(6144, 4096, 8)
    assert not fills(4096, 4096, 8, sms=100)  # 128 units over 100 SMs: two waves, 64% full


def test_chain_config_narrows_the_weight_tiles_only_while_they_fit_in_one_wave():
    """`chain_config` on the H200's 132 SMs: up to 32 tokens one program per 64-row weight tile; above, weight
    tiles on wgmma's narrow side against all the tokens, the fewest rows (a multiple of 8, at most 64) that put
    them on the SMs in one wave (4096 rows: 32; the fused qkv's 6144: 48; k/v's 1024: 8; 4096 rows on 100 SMs:
    48), and so at any token count where 64-row tiles would fill a quarter of the SMs (k/v); where 64 rows do not
    fit one wave (12288 rows), two programs an SM. One wgmma in flight on 8-row tiles, 3 on wider ones."""
    gluon_chain = pytest.importorskip("precision_engine.numerics.gluon_chain")
    chain_config = gluon_chain.chain_config

    tiles = {(m, n): gluon_chain.tiles(chain_config(m, n, 4096, 132), m) for m in (1, 8, 9, 16, 32, 33, 64)
             for n in (4096, 6144)}
    assert tiles == {(1, 4096): (64, 8), (8, 4096): (64, 8), (9, 4096): (64, 16), (16, 4096): (64, 16),
                     (32, 4096): (64, 32), (33, 4096): (32, 64), (64, 4096): (32, 64), (1, 6144): (64, 8),
                     (8, 6144): (64, 8), (9, 6144): (64, 16), (16, 6144): (64, 16), (32, 6144): (64, 32),
                     (33, 6144): (48, 64), (64, 6144): (48, 64)}
    assert gluon_chain.tiles(chain_config(64, 4096, 4096, 100), 64) == (48, 64)  # 86 48-row tiles: one wave
    for m in (1, 8, 16, 32, 64):  # k/v's 1024 rows: 16 programs of 64 rows would leave most SMs idle
        assert gluon_chain.tiles(chain_config(m, 1024, 4096, 132), m) == (8, 64)
        assert chain_config(m, 1024, 4096, 132).ahead == 1  # an 8-row tile: one wgmma in flight
    assert chain_config(64, 4096, 4096, 132).ahead == 3
    assert chain_config(64, 12288, 4096, 132).per_sm == 2  # 96 rows a program would spill: two an SM instead
    for bad in ({"trip": 2, "ahead": 3}, {"stages": 3, "ahead": 3}, {"ahead": 0}):  # would deadlock or not issue
        with pytest.raises(ValueError, match="ahead"):
            gluon_chain.ChainConfig(**bad)
    for bad in ({"weight_rows": 44}, {"weight_rows": 128}, {"weight_rows": 32, "token_block": 32}):
        with pytest.raises(ValueError, match="weight_rows"):
            gluon_chain.ChainConfig(**bad)


def test_chain_launch_lands_only_the_rows_its_tiles_hold():
    """A chain program's TMA boxes (`gluon_chain.pieces` of its live rows) cover its tokens, rounded up to 8,
    and its own weight rows, and never reach past them: a power of two, then 8-row boxes, inside the ring slot
    (a power of two: wgmma's side). 48 weight rows (the fused qkv's 6144 over 128 programs) take a 64-row slot."""
    gluon_chain = pytest.importorskip("precision_engine.numerics.gluon_chain")
    C = gluon_chain

    def boxes(rows):
        head, copies = C.pieces(rows)
        return [head] + [8] * copies

    for m in range(1, 65):
        for cfg in (C.chain_config(m, 4096, 4096, 132), C.chain_config(m, 6144, 4096, 132),
                    C.ChainConfig(weight_rows=48), C.ChainConfig(weight_rows=8)):
            slot_w, slot_t = C.slots(cfg, m)
            live = C.live_token_rows(cfg, m)
            assert live == -(-m // 8) * 8 and sum(boxes(live)) == live <= slot_t, (m, cfg)
            weight = C.tiles(cfg, m)[0]
            assert sum(boxes(weight)) == weight <= slot_w, (m, cfg)
            assert slot_t & (slot_t - 1) == 0 and slot_w & (slot_w - 1) == 0
    assert [boxes(r) for r in (8, 16, 24, 40, 48, 56, 64)] == [[8], [16], [16, 8], [32, 8], [32, 8, 8],
                                                               [32, 8, 8, 8], [64]]
    qkv = C.ChainConfig(weight_rows=48)
    assert C.slots(qkv, 64) == (64, 64) and C.grid(qkv, 64, 6144) == (128, 1)
    assert C.live_token_rows(C.ChainConfig(token_block=16), 64) == 16  # four token tiles: each whole


def test_chain_config_fits_every_launch_it_is_given():
    """Every M <= 64 against every weight AUTO sends to the chain launch (`triton_gemm.chain_decodes`: under
    CHAIN_MAX_TILES 128-row tiles, or up to WIDE_CHAIN_MAX_TILES at few tokens; K up to CHAIN_MAX_KB blocks) gets a
    ring of more slots than wgmmas in flight beside its staged scales; two programs share an SM only where the
    programs outnumber the SMs (the 12288-row weight, not 4096 or 6144 rows) and both fit, each at most 128
    registers a thread."""
    gluon_chain = pytest.importorskip("precision_engine.numerics.gluon_chain")
    from precision_engine.numerics.triton_gemm import CHAIN_MAX_KB, CHAIN_MAX_TILES, chain_decodes

    for n in (1024, 4096, 6144, 12288, 128 * CHAIN_MAX_TILES - 128, 14336, 28672):
        for k in (320, 4096, 14336, 128 * CHAIN_MAX_KB):
            for m in (m for m in range(1, 65) if chain_decodes(m, n, k)):
                cfg = gluon_chain.chain_config(m, n, k, 132)
                assert gluon_chain.ring_slots(cfg, m, k) > cfg.ahead, (m, n, k, cfg)
                assert cfg.per_sm == 1 or math.prod(gluon_chain.grid(cfg, m, n)) > 132, (m, n, k, cfg)
    assert {gluon_chain.chain_config(m, 12288, 4096, 132).per_sm for m in (1, 16, 32, 64)} == {2}
    assert {gluon_chain.chain_config(m, n, 4096, 132).per_sm for m in (1, 16, 32, 64) for n in (4096, 6144)} == {1}
    assert gluon_chain.SM_REGISTERS // (2 * gluon_chain.PROGRAM_THREADS) == 128


def test_gluon_training_split_rule():
    """The column-split schedule's dispatch (`gluon_gemm.training_config`, `_even_segments`) on the 8B shapes
    it was measured on: fused qkv, gate/up, down_proj and the MLP's 14336-row weight take it; o_proj
    (4096x4096) and k/v (1024x4096), slower split, do not; a K segment of odd length never does."""
    G = pytest.importorskip("precision_engine.numerics.gluon_gemm")
    from precision_engine.numerics.triton_gemm import segment_kb

    split = {(n, k): G.training_config(n, k).split_n for n, k in
             [(6144, 4096), (28672, 4096), (4096, 14336), (14336, 4096), (4096, 4096), (1024, 4096)]}
    assert split == {(6144, 4096): True, (28672, 4096): True, (4096, 14336): True, (14336, 4096): True,
                     (4096, 4096): False, (1024, 4096): False}
    assert all(G._even_segments(k, segment_kb(n, k)) for n, k in split)
    assert not G._even_segments(384, segment_kb(1000, 384)) and not G._even_segments(1152, 4)
