"""FP8 GEMM kernels at full size on the GPU: against the exact reference, and bitwise batch invariance."""

from dataclasses import replace

import pytest
import torch

from precision_engine.numerics.contract import Quantized
from precision_engine.numerics.formats import PRESET_FORMATS, Kernel
from precision_engine.numerics.gemm import fp8_gemm, reference_gemm
from precision_engine.numerics.quantize import quantize_blocks, quantize_rows_1xG, quantize_tokens_transposed

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

ACT, WEIGHT, TOKENS = PRESET_FORMATS["fp8_group_act"], PRESET_FORMATS["fp8_block_weight"], PRESET_FORMATS["fp8_group_tokens"]
# bf16 output rounding alone is 2^-9 relative per element; the kernels accumulate in fp32.
REL_TOL = 5e-3


def _operands(m, n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=g, dtype=torch.bfloat16) * 0.02
    return quantize_rows_1xG(x, ACT), quantize_blocks(w, WEIGHT)


def _rel(out, ref):
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("kernel", [Kernel.CUBLAS, Kernel.CUBLAS_PINNED, Kernel.TRITON])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (7, 1024, 4096), (512, 14336, 4096), (300, 200, 320)])
def test_kernel_matches_reference(kernel, m, n, k):
    xq, wq = _operands(m, n, k, seed=m + n + k)
    out = fp8_gemm(xq, wq, kernel=kernel, batch_invariant=False)
    ref = reference_gemm(xq, wq, out_dtype=torch.float64)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert torch.isfinite(out).all()
    assert _rel(out, ref) < REL_TOL


@pytest.mark.parametrize("kernel", [Kernel.CUBLAS, Kernel.CUBLAS_PINNED, Kernel.TRITON])
def test_wgrad_pair_matches_reference(kernel):
    g = torch.Generator(device="cuda").manual_seed(3)
    m, n, k = 1000, 1024, 512
    dy = torch.randn(m, n, device="cuda", generator=g, dtype=torch.bfloat16)
    x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.bfloat16)
    dyt, xt = quantize_tokens_transposed(dy, TOKENS), quantize_tokens_transposed(x, TOKENS)
    out = fp8_gemm(dyt, xt, kernel=kernel, batch_invariant=False)
    assert _rel(out, reference_gemm(dyt, xt, out_dtype=torch.float64)) < REL_TOL
    assert _rel(out, dy.double().t() @ x.double()) < 0.1  # FP8 quantization error itself, both operands


SHAPES_8B = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (12288, 4096), (4096, 12288), (6144, 4096),
             (28672, 4096)]  # the last: fused gate/up, whose decode walks whole tiles in persistent programs


@pytest.mark.parametrize("kernel", [Kernel.TRITON, Kernel.CUBLAS_PINNED, Kernel.AUTO])
@pytest.mark.parametrize("n,k", SHAPES_8B)  # every split (segment_kb) and decode tile choice of the 8B models
def test_rows_bitwise_batch_invariant(kernel, n, k):
    """Row i is the same bytes whether the GEMM has 1, 3, 7, 17, 64, 65, 128 or 4096 rows. Triton: decode split-K
    launches and the one-program prefill walk over the same K segments. Pinned cuBLAS: one algorithm at every M
    (where cuBLAS's own heuristic picks split-K at decode sizes for K = 14336 and 12288), and under 16 rows (and
    17 .. 64 for the widest weights) the one-segment Triton/Gluon launch: its rows against cuBLAS's 4096. AUTO:
    Triton's, but above 64 rows pinned cuBLAS for the weights whose K is one segment (14336, 28672 rows)."""
    xq, wq = _operands(4096, n, k, seed=11)
    full = fp8_gemm(xq, wq, kernel=kernel)
    for m in (1, 3, 7, 17, 64, 65, 128):
        sub = type(xq)(xq.data[:m], xq.scale[:m], xq.fmt)
        part = fp8_gemm(sub, wq, kernel=kernel)
        assert torch.equal(part.view(torch.uint16), full[:m].view(torch.uint16)), f"M={m}"


@pytest.mark.parametrize("n,k", SHAPES_8B)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_one_segment_triton_and_gluon_give_the_pinned_cublas_bits(n, k, out_dtype):
    """With seg_kb = every K block, the Triton tiles and (on Hopper with Triton 3.6) the Gluon kernel make pinned
    cuBLAS's additions, chain = fma(block product, sa * sb, chain): the same bytes at 1024 rows, FP32 out too."""
    from precision_engine.numerics.triton_gemm import PREFILL, block_scaled_gemm

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("measured on Hopper (wgmma) only")
    xq, wq = _operands(1024, n, k, seed=13)
    pinned = fp8_gemm(xq, wq, kernel=Kernel.CUBLAS_PINNED, out_dtype=out_dtype)
    one = dict(b_scale_rows=128, out_dtype=out_dtype, seg_kb=-(-k // 128))
    tiles = block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, config=PREFILL, split=False, **one)
    default = block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, **one)  # Gluon where it runs
    bits = torch.int16 if out_dtype == torch.bfloat16 else torch.int32
    assert torch.equal(tiles.view(bits), pinned.view(bits))
    assert torch.equal(default.view(bits), pinned.view(bits))


def test_pinned_cublas_pins_one_algorithm_without_split_k_per_shape():
    """Where cuBLAS's own heuristic splits K at decode sizes (K = 14336), the pinned algorithm does not, and the
    same one serves every M of the shape (the extension builds on the H200 image: nvcc and cuBLASLt's headers)."""
    from precision_engine.numerics import cublas_pinned

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("blockwise cuBLAS needs Hopper")
    picks = set()
    for m in (1, 64, 1000):
        xq, wq = _operands(m, 4096, 14336, seed=m)
        fp8_gemm(xq, wq, kernel=Kernel.CUBLAS_PINNED)
        picks.add(cublas_pinned.pinned_algorithm(xq.scale, wq.scale, 4096, 14336, xq.data.dtype, wq.data.dtype,
                                                 torch.bfloat16, True))
    assert len(picks) == 1 and not picks.pop().splits_k


def test_pinned_cublas_replays_in_a_cuda_graph():
    xq, wq = _operands(256, 4096, 4096, seed=6)
    eager = fp8_gemm(xq, wq, kernel=Kernel.CUBLAS_PINNED)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fp8_gemm(xq, wq, kernel=Kernel.CUBLAS_PINNED)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured.view(torch.uint16), eager.view(torch.uint16))


@pytest.mark.parametrize("m", [1, 64, 300])
def test_triton_launch_choices_give_the_same_bytes(m):
    """Tiles, TMA or plain loads, swapped operands, split-K with a separate or fused sum, persistent programs:
    one set of bits, and the fused sum (an atomic arrival counter) is deterministic over repeated launches."""
    from precision_engine.numerics.triton_gemm import PREFILL, GemmConfig, block_scaled_gemm

    xq, wq = _operands(m, 4096, 4096, seed=m)

    def run(cfg, split, fused=False):
        return block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128,
                                 config=replace(cfg, fused_sum=fused), split=split)

    ref = run(PREFILL, False)
    assert _rel(ref, reference_gemm(xq, wq, out_dtype=torch.float64)) < REL_TOL
    cfgs = [GemmConfig(64, 64, 4, 4, 1, tma=False), GemmConfig(64, 128, 4, 3, 1),
            GemmConfig(128, 16, 4, 4, 1, swap_ab=True), GemmConfig(64, 16, 4, 6, 1, swap_ab=True),
            GemmConfig(128, 64, 4, 6, 1, swap_ab=True), GemmConfig(128, 128, 8, 3),
            GemmConfig(128, 128, 8, 3, flatten=True), GemmConfig(64, 64, 4, 4, flatten=True, persistent=2),
            GemmConfig(64, 128, 4, 4, persistent=1), GemmConfig(64, 32, 4, 6, tma=False, persistent=3),
            GemmConfig(128, 16, 4, 4, swap_ab=True, flatten=True, persistent=2)]
    for cfg in cfgs:
        for split, fused in ((False, False), (True, False), (True, True)):
            for _ in range(3 if fused else 1):
                out = run(cfg, split, fused)
                assert torch.equal(out.view(torch.uint16), ref.view(torch.uint16)), (cfg, split, fused)


def test_transpose_operand_is_quantized_transpose():
    """dgrad's operand: the Triton byte transpose equals quantizing W^T directly (square blocks)."""
    from precision_engine.numerics.gemm import transpose_operand

    w = torch.randn(1000, 640, device="cuda", dtype=torch.bfloat16)
    wt = transpose_operand(quantize_blocks(w, WEIGHT))
    direct = quantize_blocks(w.t().contiguous(), WEIGHT)
    assert torch.equal(wt.data.view(torch.uint8), direct.data.view(torch.uint8))
    assert torch.equal(wt.scale, direct.scale)


@pytest.mark.parametrize("n,k", [(4096, 4096), (4096, 14336), (28672, 4096), (6144, 4096), (1000, 320)])
def test_gluon_decode_gives_the_triton_kernels_bytes(n, k):
    """The Gluon decode launch (what AUTO runs from 17 to 64 rows on wide weights, whose K is one segment, and
    for K in segments of 8 blocks where a caller names them) against the Triton decode launch: the same output
    (segment sums added in order), for every schedule choice and over repeated launches; M below
    the 64-row tile (TMA zero-fills past it), ragged N and K."""
    from precision_engine.numerics import triton_gemm
    from precision_engine.numerics.gluon_gemm import DECODE, gluon_decode_gemm

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("Gluon's wgmma kernel is Hopper-only")
    seg = triton_gemm.segment_kb(n, k) if n >= 14336 else min(8, -(-k // 128))
    for m in (17, 40, 64):
        xq, wq = _operands(m, n, k, seed=m + n)
        args = (xq.data, xq.scale, wq.data, wq.scale)
        c = triton_gemm.block_scaled_gemm(*args, b_scale_rows=128, config=triton_gemm.config_for(m, n, k), seg_kb=seg)
        for cfg in (DECODE, replace(DECODE, stages=6), replace(DECODE, block_n=64, stages=8, unroll=4),
                    replace(DECODE, per_sm=2, stages=3), replace(DECODE, whole=True)):
            for _ in range(2):
                out = gluon_decode_gemm(*args, b_scale_rows=128, seg_kb=seg, config=cfg)
                if out.dim() == 3:  # segment sums: added in order as block_scaled_gemm adds them
                    out = triton_gemm._from_segments(out, torch.empty_like(c))
                assert torch.equal(out.view(torch.uint8), c.view(torch.uint8)), (m, cfg)
        if seg == triton_gemm.segment_kb(n, k):
            auto = fp8_gemm(xq, wq, kernel=Kernel.TRITON)  # dispatches to it where it fills
            assert torch.equal(auto.view(torch.uint16), c.view(torch.uint16))


@pytest.mark.parametrize("n,k", [(4096, 4096), (6144, 4096), (4096, 14336), (1024, 4096), (1000, 320),
                                 (12288, 4096), (14336, 4096), (28672, 4096)])
def test_chain_decode_gives_the_one_segment_bits(n, k):
    """The one-chain decode (`gluon_chain`: AUTO's narrow weights at M <= 64, its wide ones at few tokens) against
    the one-segment Triton tiles, which give pinned cuBLAS's bits (test above): every launch choice (ring depth,
    trips, wgmmas in flight, tokens split over programs, two programs an SM, narrow weight tiles on wgmma's N
    side, 48 and 8 of them, all 64 tokens in one program above 32, which `chain_config` now gives only at the
    widest K), M = 1 .. 64 (tokens landed in 8-row boxes past a power of two at 20, 33, 48, 56), BF16 and FP32 out,
    -0 among the tokens, ragged N and K; and AUTO's dispatch to it. About 5 minutes on the H200 with a cold Triton
    cache, nearly all of it kernel builds (each M, config and output dtype is one; twenty-eighth session: 4 of the 6
    shapes in 240 s, the GPU idle; all 6 in 74 s with those builds cached); give its step 420 s (the two wide
    weights, added in the twenty-ninth session, reuse those builds)."""
    from precision_engine.numerics import triton_gemm
    from precision_engine.numerics.gluon_chain import ChainConfig, chain_config, gluon_chain_decode_gemm

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("Gluon's wgmma kernel is Hopper-only")
    xq, wq = _operands(64, n, k, seed=n + k)
    xq.data.view(torch.uint8)[5, :9] = 0x80  # -0
    one = dict(b_scale_rows=128, seg_kb=-(-k // 128), config=triton_gemm.PREFILL, split=False)
    configs = (None, ChainConfig(stages=6, trip=4, ahead=1), ChainConfig(stages=12, trip=8, ahead=2, token_block=8),
               ChainConfig(stages=8, trip=4, ahead=3, token_block=16), ChainConfig(stages=8, trip=4, ahead=2),
               ChainConfig(stages=12, trip=4, ahead=3, token_block=16, per_sm=2),
               ChainConfig(stages=12, trip=4, ahead=3, weight_rows=32), ChainConfig(stages=8, trip=4, ahead=2,
                                                                                    weight_rows=64),
               ChainConfig(stages=12, trip=8, ahead=3, weight_rows=16, per_sm=2),
               ChainConfig(stages=12, trip=4, ahead=3, weight_rows=48), ChainConfig(stages=16, trip=8, ahead=3,
                                                                                    weight_rows=8),
               ChainConfig(stages=10, trip=4, ahead=2, token_block=64))
    for out_dtype in (torch.bfloat16, torch.float32):
        bits = torch.int16 if out_dtype == torch.bfloat16 else torch.int32
        want = triton_gemm.block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, out_dtype=out_dtype, **one)
        for m in (1, 3, 8, 16, 20, 33, 48, 56, 64):
            args = (xq.data[:m], xq.scale[:m], wq.data, wq.scale)
            for cfg in configs:
                if cfg is None:
                    cfg = chain_config(m, n, k, torch.cuda.get_device_properties(0).multi_processor_count)
                elif not cfg.token_block and not cfg.weight_rows and m > 32:
                    continue  # all 64 tokens in one program: the 64-token config only
                elif cfg.token_block == 64 and m <= 32:
                    continue  # chain_config's 64-token program, which it gives above 32 tokens only
                out = gluon_chain_decode_gemm(*args, b_scale_rows=128, out_dtype=out_dtype, config=cfg)
                assert torch.equal(out.view(bits), want[:m].view(bits)), (m, cfg, out_dtype)
            auto = fp8_gemm(Quantized(*args[:2], xq.fmt), wq, out_dtype=out_dtype)
            assert torch.equal(auto.view(bits), want[:m].view(bits)), (m, "auto", out_dtype)


@pytest.mark.parametrize("m,n,k", [(65, 4096, 4096), (200, 1000, 320), (4097, 6144, 4096), (2048, 4096, 14336),
                                   (130, 1003, 384), (300, 1000, 1152)])
def test_gluon_gives_the_triton_kernels_bytes(m, n, k):
    """The Gluon kernel (what AUTO runs above decode sizes on Hopper) against the Triton kernel's one-program
    walk over the same segments: the same bytes for every schedule choice, column-split or not, over repeated
    launches; ragged M, N and K (TMA zero-fills past the edges); segments of odd length (K = 320: one of 3
    blocks, K = 1152: 5 then 4), where a split config runs unsplit (`_even_segments`); N = 1003 takes the
    per-thread store (rows not TMA-aligned, so never the split), an FP32 output the shorter ring beside its
    larger epilogue buffer."""
    from precision_engine.numerics.gluon_gemm import TRAINING, TRAINING_SPLIT, gluon_block_scaled_gemm
    from precision_engine.numerics.triton_gemm import PREFILL, block_scaled_gemm, segment_kb

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("Gluon's wgmma kernel is Hopper-only")
    xq, wq = _operands(m, n, k, seed=m + k)
    seg = segment_kb(n, k)
    ref = block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=PREFILL, split=False)
    for cfg in (TRAINING, replace(TRAINING, persistent=False), replace(TRAINING, stages=3),
                replace(TRAINING, stages=4, group_m=1), TRAINING_SPLIT, replace(TRAINING_SPLIT, stages=3),
                replace(TRAINING_SPLIT, persistent=False, group_m=1)):
        for _ in range(2):
            out = gluon_block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg,
                                          config=cfg)
            assert torch.equal(out.view(torch.uint16), ref.view(torch.uint16)), cfg
    ref32 = block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, config=PREFILL, split=False,
                              out_dtype=torch.float32)
    out32 = gluon_block_scaled_gemm(xq.data, xq.scale, wq.data, wq.scale, b_scale_rows=128, seg_kb=seg,
                                    out_dtype=torch.float32)
    assert torch.equal(out32.view(torch.int32), ref32.view(torch.int32))
    assert torch.equal(fp8_gemm(xq, wq, kernel=Kernel.TRITON).view(torch.uint16), ref.view(torch.uint16))
