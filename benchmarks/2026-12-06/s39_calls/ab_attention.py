"""The batch-invariant attention's fwd+bwd at the 8B block's shape (4 x 2048 tokens, 32 query heads over 8 kv
heads, D = 128, causal from the logsumexp), main's `_Attention` against attention_backward_inputs.patch's, in one
process, interleaved: CUDA-event medians of 40 steps in each of 5 rounds. Also the masks alone: main's torch ops
(masked_fill, two where, the grad's copy into out's layout) against `backward_inputs`."""

import importlib.util
import shutil
import statistics
import sys

import torch

from precision_engine.numerics import triton_attention as main_ta

shutil.copy(sys.argv[1], "/tmp/ta_patched.py")
spec = importlib.util.spec_from_file_location("ta_patched", "/tmp/ta_patched.py")
patched_ta = importlib.util.module_from_spec(spec)
spec.loader.exec_module(patched_ta)

b, hq, hkv, t, d = 4, 32, 8, 2048, 128
gen = torch.Generator(device="cuda").manual_seed(0)
q = torch.randn(b, t, hq, d, device="cuda", generator=gen).to(torch.bfloat16).transpose(1, 2).requires_grad_()
k = torch.randn(b, t, hkv, d, device="cuda", generator=gen).to(torch.bfloat16).transpose(1, 2).requires_grad_()
v = torch.randn(b, t, hkv, d, device="cuda", generator=gen).to(torch.bfloat16).transpose(1, 2).requires_grad_()
q_pos = torch.arange(t, device="cuda").repeat(b, 1)
kv_len = torch.full((b,), t, device="cuda")
dy = torch.randn(b, hq, t, d, device="cuda", generator=gen).to(torch.bfloat16)


def step(module):
    out = module.attention(q, k, v, q_pos, kv_len, scale=d ** -0.5, causal=True)
    out.backward(dy)
    return q.grad, k.grad, v.grad


def timed(fn, reps=40):
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


grads = {}
for name, module in (("main", main_ta), ("patch", patched_ta)):
    q.grad = k.grad = v.grad = None
    grads[name] = [g.clone() for g in step(module)]
same = all(torch.equal(a, b) for a, b in zip(grads["main"], grads["patch"]))
print(f"grads bitwise equal main vs patch: {same}")

out = torch.randn(b, t, hq, d, device="cuda", generator=gen).to(torch.bfloat16).transpose(1, 2)


def main_masks():
    blind = (q_pos < 0) | (kv_len[:, None] < 1)
    g = dy.masked_fill(blind[:, None, :, None], 0)
    filled = (torch.arange(k.shape[2], device="cuda") < kv_len[:, None])[:, None, :, None]
    return torch.where(filled, k, 0), torch.where(filled, v, 0), torch.empty_like(out).copy_(g)


def patch_masks():
    return patched_ta.backward_inputs(dy, k.detach(), v.detach(), q_pos, kv_len, out)


rows = {"main fwd+bwd": [], "patch fwd+bwd": [], "main masks": [], "patch masks": []}
for _ in range(5):
    for name, module in (("main", main_ta), ("patch", patched_ta)):
        q.grad = k.grad = v.grad = None
        rows[f"{name} fwd+bwd"].append(timed(lambda: step(module)))
    rows["main masks"].append(timed(main_masks, 100))
    rows["patch masks"].append(timed(patch_masks, 100))
for name, values in rows.items():
    rounds = " ".join(f"{x:.4f}" for x in values)
    print(f"{name:16s} ms median of rounds {statistics.median(values):.4f}  rounds {rounds}")
