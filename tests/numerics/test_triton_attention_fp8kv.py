"""The Triton attention reading an FP8 KV cache in place (Triton's CPU interpreter, small shapes).

Bitwise: the kernel on float8_e4m3fn k/v with their scales equals the kernel on `dequantize_kv` of them (the
BF16 copy `invariant.attention` used to make every step), per-tensor and per-head scales, decode and prefill
queries; and equals its torch twin. ~2 s on one core.
"""

import pytest
import torch

from precision_engine.errors import UnsupportedError
from precision_engine.numerics import triton_invariant as TI
from precision_engine.numerics.kv_cache import KVScales, dequantize_kv, quantize_kv
from precision_engine.numerics.specs import KVScale

from helpers import needs_interpreter


def _case(seed, per_head):
    g = torch.Generator().manual_seed(seed)
    b, hq, hkv, s, d = 2, 4, 2, 80, 16
    q = torch.randn(b, hq, s, d, generator=g).bfloat16()
    k = torch.randn(b, hkv, s, d, generator=g).bfloat16() * 3
    v = torch.randn(b, hkv, s, d, generator=g).bfloat16()
    amax_k = k.float().abs().amax(dim=(0, 2, 3))[None]
    amax_v = v.float().abs().amax(dim=(0, 2, 3))[None]
    scales = KVScales.from_amax(amax_k, amax_v, KVScale.PER_HEAD if per_head else KVScale.PER_TENSOR)
    ks, vs = scales.k[0], scales.v[0]
    kq, vq = quantize_kv(k, ks), quantize_kv(v, vs)
    kv_len = torch.tensor([s, 53])
    return q, kq, vq, ks, vs, kv_len


@needs_interpreter
@pytest.mark.parametrize("per_head", [False, True])
def test_fp8_cache_read_in_place_equals_dequantized_copy(per_head):
    q, kq, vq, ks, vs, kv_len = _case(3, per_head)
    kd, vd = dequantize_kv(kq, ks, torch.bfloat16), dequantize_kv(vq, vs, torch.bfloat16)
    s = kq.shape[2]
    full_pos = torch.arange(s).expand(2, s).clone()
    full_pos[1, 53:] = -1  # padding queries of the shorter row
    decode_q, decode_pos = q[:, :, 52:53], torch.tensor([[52], [52]])
    for qq, pos in ((q, full_pos), (decode_q, decode_pos)):
        fp8 = TI.attention(qq, kq, vq, pos, kv_len, scale=0.25, k_scale=ks, v_scale=vs)
        ref = TI.attention(qq, kd, vd, pos, kv_len, scale=0.25)
        twin = TI.attention_twin(qq, kq, vq, pos, kv_len, scale=0.25, k_scale=ks, v_scale=vs)
        assert torch.equal(fp8.view(torch.int16), ref.view(torch.int16))
        assert torch.equal(fp8.view(torch.int16), twin.view(torch.int16))


def test_fp8_cache_needs_its_scales():
    q, kq, vq, ks, vs, kv_len = _case(4, False)
    with pytest.raises(UnsupportedError):
        TI.attention(q, kq, vq, torch.arange(80).expand(2, 80), kv_len, scale=0.25)
