"""The batch-invariant causal attention's backward from the kernel's own logsumexp (flash backward alone) against
recomputing the forward inside SDPA's autograd (`causal_sdpa`), on one GPU: the forward's bits with and without
the logsumexp store, the gradients of both against float64 on a right-padded GQA batch, and fwd+bwd time at the
8B layer's shape (32 query heads, 8 kv heads, D = 128, 8192 and 16384 tokens). Prints a table last."""

import torch

from precision_engine.bench.timing import median, time_cuda
from precision_engine.numerics import triton_attention as TA

dev = "cuda"
torch.manual_seed(0)


def case(b, t, lengths, hq=32, hkv=8, d=128):
    q = torch.randn(b, hq, t, d, device=dev).bfloat16()
    k, v = (torch.randn(b, hkv, t, d, device=dev).bfloat16() for _ in range(2))
    kv_len = torch.tensor(lengths, device=dev)
    cols = torch.arange(t, device=dev)
    q_pos = torch.where(cols < kv_len[:, None], cols, -1)
    for x in (k, v):  # padding slots hold NaN, as a preallocated cache may
        x.masked_fill_((cols >= kv_len[:, None])[:, None, :, None], float("nan"))
    return q, k, v, q_pos, kv_len


def grads(flash, q, k, v, q_pos, kv_len, gy):
    TA.lse_backward_fits = (lambda *a: True) if flash else (lambda *a: False)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = TA.attention(*leaves, q_pos, kv_len, scale=128 ** -0.5, causal=True)
    return (out.detach(), *torch.autograd.grad(out, leaves, gy))


rows = []
q, k, v, q_pos, kv_len = case(3, 1000, [1000, 731, 64])
gy = torch.randn_like(q)
gy.masked_fill_((q_pos < 0)[:, None, :, None], 1.0)  # padding queries get a gradient too: it must be ignored
fl, re = grads(True, q, k, v, q_pos, kv_len, gy), grads(False, q, k, v, q_pos, kv_len, gy)
assert torch.equal(fl[0].view(torch.int16), re[0].view(torch.int16)), "the logsumexp store changed the output"
lse = torch.empty(q.shape[:3], device=dev)
TA.attention_forward(q, k, v, q_pos, kv_len, scale=128 ** -0.5, logsumexp=lse)
filled = (torch.arange(1000, device=dev) < kv_len[:, None])[:, None, :, None]
qd, kd, vd = (x.double().requires_grad_() for x in (q, torch.where(filled, k, 0), torch.where(filled, v, 0)))
ref = TA.attention_reference(qd, kd, vd, q_pos, kv_len, scale=128 ** -0.5)
sc = (qd @ kd.repeat_interleave(4, 1).transpose(-1, -2)) * 128 ** -0.5
seen = TA.visible_slots(q_pos, kv_len, 1000)[:, None]
ref_lse = sc.masked_fill(~seen, float("-inf")).logsumexp(-1).masked_fill(~seen.any(-1), float("inf"))
real = (q_pos >= 0)[:, None, :].expand_as(lse)
print(f"lse: max |err| on real queries {(lse.double() - ref_lse)[real].abs().max().item():.2e}, "
      f"blind +inf: {bool(torch.isinf(lse[~real]).all() and (lse[~real] > 0).all())}")
refg = torch.autograd.grad(ref, (qd, kd, vd), gy.double().masked_fill((q_pos < 0)[:, None, :, None], 0))
for name, got in (("from-lse", fl), ("recompute", re)):
    errs = [((g.double() - r).norm() / r.norm()).item() for g, r in zip(got[1:], refg)]
    finite = all(torch.isfinite(g).all() for g in got[1:])
    print(f"{name}: rel err dq {errs[0]:.2e} dk {errs[1]:.2e} dv {errs[2]:.2e} finite {finite}")
    assert finite and max(errs) < 2e-2

for t in (8192, 16384):
    q, k, v, q_pos, kv_len = case(1, t, [t])
    gy = torch.randn_like(q)
    ms = {}
    for flash in (False, True):
        TA.lse_backward_fits = (lambda *a: True) if flash else (lambda *a: False)
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]

        def step():
            out = TA.attention(*leaves, q_pos, kv_len, scale=128 ** -0.5, causal=True)
            torch.autograd.grad(out, leaves, gy)
        ms[flash] = median(time_cuda(step, warmup=5, reps=20))
        fwd = median(time_cuda(lambda: TA.attention_forward(q, k, v, q_pos, kv_len, scale=128 ** -0.5), reps=20))
    rows.append((t, fwd, ms[False], ms[True]))
print(f"{'tokens':>7} {'fwd ms':>8} {'fwd+bwd recompute':>18} {'fwd+bwd from-lse':>18} {'saved':>7}")
for t, fwd, a, b in rows:
    print(f"{t:>7} {fwd:>8.3f} {a:>18.3f} {b:>18.3f} {a - b:>7.3f}")
