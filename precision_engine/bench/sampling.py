"""The decode step's sampler tail, before and after the fused sampler, on Llama-3.1-8B's vocabulary.

`before`: the one-program-per-row log-softmax kernel this replaced (kept here, as it was, only to be timed)
followed by rl.sampling's torch ops (rand, two logs, sub, argmax, gather). `after`: `rl.sampling.sample`
(torch.rand and the two fused kernels; greedy: no rand). log_softmax alone is timed at decode and training
sizes, the chunked kernels against the per-row one. Decode sizes are CUDA-graph replays over input sets
larger than the L2, training sizes CUDA-event medians, the two taking turns call by call (bench.gemm.timed_turns).
`python -m precision_engine.bench.sampling` prints the table.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

from precision_engine.bench.gemm import timed_turns
from precision_engine.bench.invariant import format_rows
from precision_engine.bench.timing import rotation

VOCAB = 128256
DECODE_ROWS, TRAIN_ROWS = 64, 8192
TEMPERATURE = 0.8


@triton.jit
def _per_row_log_softmax(x_ptr, o_ptr, V, stride_x, stride_o, temperature, BLOCK: tl.constexpr):
    """The previous kernel: per-lane online max / sum over 4096-wide steps of one row, then a second pass."""
    row = tl.program_id(0).to(tl.int64)
    x_row, o_row = x_ptr + row * stride_x, o_ptr + row * stride_o
    t = tl.zeros((BLOCK,), dtype=tl.float32) + temperature
    m_vec = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    s_vec = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        y = tl.math.div_rn(tl.load(x_row + offs, mask=offs < V, other=float("-inf")).to(tl.float32), t)
        m_new = tl.maximum(m_vec, y)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        s_vec = s_vec * tl.exp(m_vec - m_use) + tl.exp(y - m_use)
        m_vec = m_new
    m = tl.max(m_vec, axis=0)
    log_s = tl.log(tl.sum(s_vec * tl.exp(m_vec - tl.where(m == float("-inf"), 0.0, m)), axis=0))
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        y = tl.math.div_rn(tl.load(x_row + offs, mask=offs < V, other=0.0).to(tl.float32), t)
        tl.store(o_row + offs, (y - m) - log_s, mask=offs < V)


def per_row_log_softmax(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    out = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
    _per_row_log_softmax[(logits.shape[0],)](logits, out, logits.shape[1], logits.stride(0), out.stride(0),
                                             float(temperature), BLOCK=4096, num_warps=8)
    return out


def _before(logits: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The previous tail: per-row log-softmax, then rl.sampling's torch ops."""
    logp = per_row_log_softmax(logits, 1.0 if temperature == 0 else temperature)
    if temperature == 0:
        tokens = logits.argmax(-1)
    else:
        uniform = torch.rand(logp.shape, device=logp.device, dtype=torch.float32)
        tokens = (logp - torch.log(-torch.log(uniform))).argmax(-1)
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]


def bench_sampling(*, reps: int = 50, warmup: int = 10) -> list[tuple]:
    """Rows of (name, shape, ms after, ms before, before / after: > 1 means the new tail is faster)."""
    if not torch.cuda.is_available():
        raise RuntimeError("bench_sampling needs a CUDA GPU")
    from precision_engine.numerics.triton_sampling import log_softmax
    from precision_engine.rl.sampling import SamplingParams, sample

    rows = []
    for m in (DECODE_ROWS, TRAIN_ROWS):
        sets = rotation(lambda m=m: (torch.randn(m, VOCAB, device="cuda").mul_(3).bfloat16(),), m * VOCAB * 6)
        graphed = m == DECODE_ROWS
        new, old = timed_turns([lambda x: log_softmax(x, TEMPERATURE), lambda x: per_row_log_softmax(x, TEMPERATURE)],
                               sets, graphed=graphed, warmup=warmup, reps=reps)
        rows.append(("log_softmax", f"[{m}, {VOCAB}] t={TEMPERATURE}", new, old, old / new))
        del sets
    sets = rotation(lambda: (torch.randn(DECODE_ROWS, VOCAB, device="cuda").mul_(3).bfloat16(),),
                    DECODE_ROWS * VOCAB * 2)
    for name, t in (("sample tail", TEMPERATURE), ("greedy tail", 0.0)):
        params = SamplingParams(t)
        new, old = timed_turns([lambda x: sample(x, params, None), lambda x: _before(x, t)], sets, graphed=True,
                               warmup=warmup, reps=reps)
        rows.append((name, f"[{DECODE_ROWS}, {VOCAB}] t={t}", new, old, old / new))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args(argv)
    print(format_rows(bench_sampling(reps=args.reps)))


if __name__ == "__main__":
    main()
