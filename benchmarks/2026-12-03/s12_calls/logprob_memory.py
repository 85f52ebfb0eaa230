"""Peak GPU memory of token_logprobs forward + backward over logits [32, 384, 128256] bf16, the whole-batch
log-softmax (before 4229292) against the chunked one, and whether both give the same bits (forward and
gradient). The logits stand in for the 8B's output (allocated before measuring)."""
import torch

from precision_engine.numerics import invariant
from precision_engine.rl.logprobs import token_logprobs
from precision_engine.rl.sampling import logprob_temperature


def whole_batch(model, ids, mask, *, temperature=1.0):  # token_logprobs before the chunked path
    logits = model(ids, mask)
    n, length, vocab = logits.shape
    logp = invariant.log_softmax(logits[:, :-1].reshape(-1, vocab), logprob_temperature(temperature))
    picked = logp.gather(-1, ids[:, 1:].reshape(-1, 1)).view(n, length - 1)
    picked = torch.where(mask[:, 1:].bool() & mask[:, :-1].bool(), picked, 0.0)
    return torch.cat((picked.new_zeros(n, 1), picked), dim=1)


N, L, V, T = 32, 384, 128256, 0.7
base = torch.randn(N, L, V, device="cuda", dtype=torch.bfloat16) * 4
ids = torch.randint(0, V, (N, L), device="cuda")
mask = torch.ones(N, L, dtype=torch.long, device="cuda")
mask[::2, -50:] = 0
g = torch.randn(N, L, device="cuda")


def measure(score):
    logits = base.clone().requires_grad_()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out = score(lambda i, m: logits, ids, mask, temperature=T)
    out.backward(g)
    end.record()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**30, start.elapsed_time(end), out.detach(), logits.grad


for _ in range(2):  # the second round is warm (compiled kernels)
    old_peak, old_ms, old_out, old_grad = measure(whole_batch)
    new_peak, new_ms, new_out, new_grad = measure(token_logprobs)
print(f"peak over the logits, fwd+bwd: whole-batch {old_peak:.2f} GiB ({old_ms:.1f} ms), "
      f"chunked {new_peak:.2f} GiB ({new_ms:.1f} ms)")
print("forward equal:", torch.equal(old_out, new_out), " gradient equal:", torch.equal(old_grad, new_grad))
