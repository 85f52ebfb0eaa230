"""Where the causal attention's fwd+bwd time goes on this GPU, at the 8B layer's shape (32 query heads, 8 kv heads,
D = 128, bf16, 8192 tokens): SDPA's backend choice, each backend's forward and fwd+bwd (GQA read natively, or
with repeated kv heads where a backend refuses GQA), our batch-invariant kernel's forward, and cuDNN's backward
fed the kernel's own output and logsumexp (the forward not run again). Prints a table last."""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from precision_engine.bench.timing import median, time_cuda
from precision_engine.numerics import triton_attention as TA

b, hq, hkv, d = 1, 32, 8, 128
scale = d ** -0.5
rows = []
for t in (8192, 16384):
    torch.manual_seed(0)
    q = torch.randn(b, hq, t, d, device="cuda").bfloat16()
    k, v = (torch.randn(b, hkv, t, d, device="cuda").bfloat16() for _ in range(2))
    gy = torch.randn_like(q)
    choice = torch.ops.aten._fused_sdp_choice(q, k, v, None, 0.0, True, scale=scale, enable_gqa=True)
    print(t, "SDPA's choice:", SDPBackend(choice).name if choice >= 0 else choice)
    q_pos, kv_len = torch.arange(t, device="cuda")[None], torch.tensor([t], device="cuda")
    lse = torch.empty(q.shape[:3], device="cuda")
    ours = TA.attention_forward(q, k, v, q_pos, kv_len, scale=scale, logsumexp=lse)
    rows.append((t, "ours (invariant) fwd", median(time_cuda(
        lambda: TA.attention_forward(q, k, v, q_pos, kv_len, scale=scale), reps=20))))
    for name, backend in (("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                          ("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        for gqa in (True, False):
            kk, vv = (k, v) if gqa else (k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1))
            leaves = [x.clone().requires_grad_() for x in (q, kk, vv)]
            ctx = sdpa_kernel([backend]) if backend is not None else torch.enable_grad()

            def fwd():
                with ctx:
                    return F.scaled_dot_product_attention(*leaves, is_causal=True, scale=scale, enable_gqa=gqa)

            def both():
                torch.autograd.grad(fwd(), leaves, gy)
            try:
                with torch.no_grad():
                    f = median(time_cuda(fwd, reps=20))
                rows.append((t, f"{name} {'gqa' if gqa else 'repeated kv'} fwd / fwd+bwd",
                             f"{f:.3f} / {median(time_cuda(both, reps=20)):.3f}"))
            except Exception as e:  # a backend that refuses these inputs
                rows.append((t, f"{name} {'gqa' if gqa else 'repeated kv'}", f"refused: {str(e)[:80]}"))
    # cuDNN's backward from our forward
    for gqa in (True, False):
        kk, vv = (k, v) if gqa else (k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1))
        try:
            fw = torch.ops.aten._scaled_dot_product_cudnn_attention(q, kk, vv, None, True, 0.0, True, scale=scale)
            print("cudnn lse", tuple(fw[1].shape), fw[1].stride(), fw[1].dtype, "vs ours max |diff|",
                  (fw[1].reshape(lse.shape).float() - lse).abs().max().item(), "philox", fw[6], fw[7])
            ref = fw[1]
            mine = lse.reshape(ref.shape) if ref.is_contiguous() else lse.reshape(ref.shape)

            def bwd():
                return torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
                    gy, q, kk, vv, ours, mine, fw[6], fw[7], None, None, None, t, t, 0.0, True, scale=scale)
            got = bwd()
            leaves = [x.clone().requires_grad_() for x in (q, kk, vv)]
            out = F.scaled_dot_product_attention(*leaves, is_causal=True, scale=scale, enable_gqa=gqa)
            want = torch.autograd.grad(out, leaves, gy)
            errs = " ".join(f"{((g.float() - w.float()).norm() / w.norm()).item():.1e}" for g, w in zip(got, want))
            rows.append((t, f"cudnn bwd from ours ({'gqa' if gqa else 'repeated kv'}), rel diff {errs}",
                         f"{median(time_cuda(bwd, reps=20)):.3f}"))
        except Exception as e:
            rows.append((t, f"cudnn bwd from ours ({'gqa' if gqa else 'repeated kv'})", f"failed: {str(e)[:100]}"))
for t, what, ms in rows:
    print(f"{t:>6} {what:<72} {ms if isinstance(ms, str) else f'{ms:.3f}'}")
