"""The Triton attention reading an FP8 KV cache in place, at Llama-3.1-8B decode and prefill shapes on the GPU:
bitwise equal to the same kernel on the `dequantize_kv` copy (per-tensor and per-head scales), also under
CUDA-graph replay. A few seconds on an H200."""

import pytest
import torch

from precision_engine.numerics import triton_invariant as TI
from precision_engine.numerics.kv_cache import KVScales, dequantize_kv, quantize_kv
from precision_engine.numerics.specs import KVScale

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("mode", [KVScale.PER_TENSOR, KVScale.PER_HEAD])
def test_fp8_cache_in_place_equals_dequantized_copy(mode):
    g = torch.Generator(device="cuda").manual_seed(0)
    b, hq, hkv, cap, d = 64, 32, 8, 512, 128
    k = torch.randn(b, hkv, cap, d, device="cuda", generator=g).bfloat16() * 2
    v = torch.randn(b, hkv, cap, d, device="cuda", generator=g).bfloat16()
    amax = lambda t: t.float().abs().amax(dim=(0, 2, 3))[None].cpu()  # noqa: E731
    scales = KVScales.from_amax(amax(k), amax(v), mode)
    ks, vs = scales.k[0].cuda(), scales.v[0].cuda()
    kq, vq = quantize_kv(k, ks), quantize_kv(v, vs)
    kd, vd = dequantize_kv(kq, ks, torch.bfloat16), dequantize_kv(vq, vs, torch.bfloat16)
    kv_len = torch.randint(200, 385, (b,), device="cuda", generator=g)
    q = torch.randn(b, hq, 1, d, device="cuda", generator=g).bfloat16()
    pos = (kv_len - 1)[:, None]
    ref = TI.attention(q, kd, vd, pos, kv_len, scale=d ** -0.5)
    out = TI.attention(q, kq, vq, pos, kv_len, scale=d ** -0.5, k_scale=ks, v_scale=vs)
    assert torch.equal(out.view(torch.int16), ref.view(torch.int16))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = TI.attention(q, kq, vq, pos, kv_len, scale=d ** -0.5, k_scale=ks, v_scale=vs)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured.view(torch.int16), ref.view(torch.int16))
    t = 128  # prefill of the first 128 slots
    qp = torch.randn(8, hq, t, d, device="cuda", generator=g).bfloat16()
    pp, lp = torch.arange(t, device="cuda").expand(8, t), torch.full((8,), t, device="cuda")
    ref = TI.attention(qp, kd[:8, :, :t], vd[:8, :, :t], pp, lp, scale=d ** -0.5)
    out = TI.attention(qp, kq[:8, :, :t], vq[:8, :, :t], pp, lp, scale=d ** -0.5, k_scale=ks, v_scale=vs)
    assert torch.equal(out.view(torch.int16), ref.view(torch.int16))
