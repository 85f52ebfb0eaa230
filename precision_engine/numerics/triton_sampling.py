"""The trainer's log-softmax and the rollout's sampler from one set of row statistics, for CUDA tensors.

Both phases compute a row's statistics the same way, so the logprob the sampler records for a token has the
bits `log_softmax` gives that element (the on-policy contract), and neither depends on how many rows share
the call (a function of the vocabulary size V only decides how a row is cut):

- y = logits.float() / temperature, correctly rounded (`div_rn`, torch's division).
- The row is cut into chunks of `vocab_chunk(V)` columns (a power of two, at most MAX_CHUNK). One program per
  (row, chunk) computes the chunk's max m_c and s_c = sum exp(y - m_c), the sum as a pairwise tree over
  adjacent elements (`_pair_sum`: every addition is spelled out, so the interpreter, the GPU and the torch
  twin add the same pairs whatever the layout or warp count).
- Combined in a fixed tree over the chunks: m = max m_c, log_s = log(sum s_c * exp(m_c - m)) (`_combine`);
  logp = (y - m) - log_s.

`log_softmax` runs two launches: the chunk statistics, then one program per chunk that combines its row's
partials and writes the chunk. Cutting a row into chunks lets a decode batch (64 rows of 128256) use 2048
programs where one program per row left 64 programs latency-bound; at training sizes it is the same traffic
(logits read twice, fp32 written once).

`sample` draws without the logp tensor: log_softmax + Gumbel noise and y + Gumbel noise differ by a per-row
constant, so the chunk programs keep the argmax of y - log(-log u) (u: the caller's uniforms, in (0, 1), see
`sample`) beside their statistics, and one program per row combines them and computes the token's logprob as
(y_tok - m) - log_s with the same helpers. Greedy (no uniforms) is the argmax of y. Ties go to the lowest index,
as in torch.argmax. Three device ops instead of the log-softmax, the [N, V] noise arithmetic, the argmax and the
gather.

Every launch disables FP fusion, so no multiply-add is contracted into an FMA: the GPU rounds each operation
as the interpreter and the twins do (transcendentals aside: exp and log are the platform's). `*_twin` are the
same arithmetic in torch; with the interpreter's exp and log (numpy's) they match the kernels bit for bit
(tests/numerics/test_triton_sampling.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

MAX_CHUNK = 4096  # columns per program; 128256 -> 32 chunks, 2048 programs for a 64-row decode step
FUSION = dict(enable_fp_fusion=False)  # no FMA contraction: the twins' rounding, operation by operation

# what a chunk program keeps besides the statistics: nothing, the argmax of y, the argmax of y + Gumbel noise
_STATS, _GREEDY, _GUMBEL = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)


def vocab_chunk(v: int) -> int:
    """Columns per chunk: a function of the vocabulary size only (never of the number of rows)."""
    return min(MAX_CHUNK, triton.next_power_of_2(max(v, 1)))


def _warps(block: int) -> int:
    return max(1, min(8, block // 512))


@triton.jit
def _pair_sum(x, N: tl.constexpr):
    """Sum of a power-of-two vector as a tree of adjacent pairs: ((x0 + x1) + (x2 + x3)) + ...; each level is
    a sum over an axis of two, one rounded addition, so every backend adds the same pairs."""
    for level in tl.static_range(1, 32):  # unrolled; levels past log2(N) are compiled out
        if (N >> level) > 0:
            x = tl.sum(tl.reshape(x, (N >> level, 2)), axis=1)
    return tl.sum(x, axis=0)


@triton.jit
def _scaled(x_row, offs, V, temperature, other):
    """y = logits.float() / temperature, correctly rounded; `other` past V."""
    t = tl.zeros(offs.shape, dtype=tl.float32) + temperature
    return tl.math.div_rn(tl.load(x_row + offs, mask=offs < V, other=other).to(tl.float32), t)


@triton.jit
def _combine(pm_row, ps_row, NC, NC_P2: tl.constexpr):
    """A row's (m, log_s) from its chunks' (m_c, s_c); padding chunks are (-inf, 0) and add exact zeros."""
    c = tl.arange(0, NC_P2)
    m_c = tl.load(pm_row + c, mask=c < NC, other=float("-inf"))
    s_c = tl.load(ps_row + c, mask=c < NC, other=0.0)
    m = tl.max(m_c, axis=0)
    m_use = tl.where(m == float("-inf"), 0.0, m)
    return m, tl.log(_pair_sum(s_c * tl.exp(m_c - m_use), NC_P2))


@triton.jit
def _chunk_kernel(x_ptr, u_ptr, pm_ptr, ps_ptr, pv_ptr, pi_ptr, V, NC, stride_x, stride_u, temperature,
                  CHUNK: tl.constexpr, MODE: tl.constexpr):
    """Program (row, chunk): m_c, s_c of the chunk, and with MODE GREEDY / GUMBEL the chunk's best score
    (y, or y - log(-log u)) and its column, the lowest on ties."""
    pid = tl.program_id(0)
    row, c = (pid // NC).to(tl.int64), pid % NC
    offs = c * CHUNK + tl.arange(0, CHUNK)
    y = _scaled(x_ptr + row * stride_x, offs, V, temperature, float("-inf"))
    m_c = tl.max(y, axis=0)
    m_use = tl.where(m_c == float("-inf"), 0.0, m_c)
    tl.store(pm_ptr + pid, m_c)
    tl.store(ps_ptr + pid, _pair_sum(tl.exp(y - m_use), CHUNK))
    if MODE != _STATS:
        score = y
        if MODE == _GUMBEL:
            u = tl.load(u_ptr + row * stride_u + offs, mask=offs < V, other=0.5)
            score = y - tl.log(-tl.log(u))
        best, at = tl.max(score, axis=0, return_indices=True, return_indices_tie_break_left=True)
        tl.store(pv_ptr + pid, best)
        tl.store(pi_ptr + pid, c * CHUNK + at)


@triton.jit
def _write_kernel(x_ptr, pm_ptr, ps_ptr, o_ptr, V, NC, stride_x, stride_o, temperature, CHUNK: tl.constexpr,
                  NC_P2: tl.constexpr):
    """Program (row, chunk): logp = (y - m) - log_s over the chunk, (m, log_s) combined from the row's partials."""
    pid = tl.program_id(0)
    row, c = (pid // NC).to(tl.int64), pid % NC
    offs = c * CHUNK + tl.arange(0, CHUNK)
    y = _scaled(x_ptr + row * stride_x, offs, V, temperature, 0.0)
    m, log_s = _combine(pm_ptr + row * NC, ps_ptr + row * NC, NC, NC_P2)
    tl.store(o_ptr + row * stride_o + offs, (y - m) - log_s, mask=offs < V)


@triton.jit
def _pick_kernel(x_ptr, pm_ptr, ps_ptr, pv_ptr, pi_ptr, tok_ptr, lp_ptr, V, NC, stride_x, temperature,
                 NC_P2: tl.constexpr):
    """Program row: the best chunk's column (the lowest chunk on ties) and its logprob (y_tok - m) - log_s."""
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, NC_P2)
    best = tl.load(pv_ptr + row * NC + c, mask=c < NC, other=float("-inf"))
    at = tl.argmax(best, axis=0, tie_break_left=True)
    token = tl.load(pi_ptr + row * NC + at)
    y = _scaled(x_ptr + row * stride_x, token + tl.arange(0, 1), V, temperature, 0.0)
    m, log_s = _combine(pm_ptr + row * NC, ps_ptr + row * NC, NC, NC_P2)
    tl.store(tok_ptr + row, token.to(tl.int64))
    tl.store(lp_ptr + row + tl.arange(0, 1), (y - m) - log_s)


def _rows(logits: torch.Tensor) -> torch.Tensor:
    x2 = logits.reshape(-1, logits.shape[-1])
    return x2 if x2.stride(1) == 1 else x2.contiguous()


def _chunk_stats(x2: torch.Tensor, temperature: float, mode: int, uniform: torch.Tensor | None):
    """Launch the chunk programs: partials [rows, NC] (m_c, s_c, and for sampling best score and column)."""
    rows, v = x2.shape
    chunk = vocab_chunk(v)
    nc = triton.cdiv(v, chunk)
    pm, ps = (torch.empty(rows, nc, dtype=torch.float32, device=x2.device) for _ in range(2))
    pv, pi = pm, pm  # not written unless the mode keeps an argmax, u not read unless it is GUMBEL
    if mode != _STATS:
        pv = torch.empty_like(pm)
        pi = torch.empty(rows, nc, dtype=torch.int32, device=x2.device)
    u = uniform if uniform is not None else pm
    _chunk_kernel[(rows * nc,)](x2, u, pm, ps, pv, pi, v, nc, x2.stride(0), u.stride(0), float(temperature),
                                CHUNK=chunk, MODE=mode, num_warps=_warps(chunk), **FUSION)
    return nc, pm, ps, pv, pi


def log_softmax_forward(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """log_softmax(logits.float() / temperature) over the last dim -> fp32 (no autograd; see module docstring)."""
    v = logits.shape[-1]
    x2 = _rows(logits)
    out = torch.empty(x2.shape, dtype=torch.float32, device=logits.device)
    if x2.shape[0] and v:
        nc, pm, ps, _, _ = _chunk_stats(x2, temperature, _STATS, None)
        chunk = vocab_chunk(v)
        _write_kernel[(x2.shape[0] * nc,)](x2, pm, ps, out, v, nc, x2.stride(0), out.stride(0), float(temperature),
                                           CHUNK=chunk, NC_P2=triton.next_power_of_2(nc), num_warps=_warps(chunk),
                                           **FUSION)
    return out.reshape(logits.shape)


class _LogSoftmax(torch.autograd.Function):
    """Forward: the chunked kernels. Backward (fp32, not batch-invariant): d/dx of log_softmax(x / t) is
    (g - softmax * sum(g)) / t, from the saved output; the gradient comes back in the logits' dtype."""

    @staticmethod
    def forward(ctx, logits, temperature):
        out = log_softmax_forward(logits, temperature)
        ctx.save_for_backward(out)
        ctx.temperature, ctx.dtype = temperature, logits.dtype
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        grad = grad.float()
        dx = (grad - out.exp() * grad.sum(-1, keepdim=True)) / ctx.temperature
        return dx.to(ctx.dtype), None


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def log_softmax(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log_softmax(logits.float() / temperature) over the last dim -> fp32, batch-invariant. Differentiable
    (the trainer's policy loss backpropagates through it; see `_LogSoftmax`)."""
    _check_temperature(temperature)
    if torch.is_grad_enabled() and logits.requires_grad:
        return _LogSoftmax.apply(logits, float(temperature))
    return log_softmax_forward(logits, temperature)


def sample(logits: torch.Tensor, temperature: float, uniform: torch.Tensor | None = None
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N, V] -> (tokens int64 [N], logprobs fp32 [N]).

    With `uniform` (fp32 [N, V] in (0, 1): torch.rand with the caller's generator, its zeros raised to the
    smallest normal as `rl.sampling` does, since u = 0 scores -inf) the token is argmax(y - log(-log u)), a
    Gumbel-max draw from softmax(y), y = logits.float() / temperature; without it, argmax(y) (greedy; pass
    temperature 1 to record the logprob at 1). Ties: the lowest index. The logprob is
    `log_softmax(logits, temperature)` at the token, bit for bit.
    """
    _check_temperature(temperature)
    n, v = logits.shape
    if not v:
        raise ValueError("sample: the vocabulary is empty")
    x2 = _rows(logits)
    tokens = torch.empty(n, dtype=torch.long, device=logits.device)
    logprobs = torch.empty(n, dtype=torch.float32, device=logits.device)
    if not n:
        return tokens, logprobs
    if uniform is not None:
        if uniform.shape != logits.shape or uniform.dtype != torch.float32:
            raise ValueError(f"sample: uniform must be fp32 {tuple(logits.shape)}, got {uniform.dtype} "
                             f"{tuple(uniform.shape)}")
        uniform = uniform if uniform.stride(1) == 1 else uniform.contiguous()
    mode = _GREEDY if uniform is None else _GUMBEL
    nc, pm, ps, pv, pi = _chunk_stats(x2, temperature, mode, uniform)
    _pick_kernel[(n,)](x2, pm, ps, pv, pi, tokens, logprobs, v, nc, x2.stride(0), float(temperature),
                       NC_P2=triton.next_power_of_2(nc), num_warps=1, **FUSION)
    return tokens, logprobs


# ------------------------------------------------------------------------------------------------------ twins

def _pair_sum_twin(x: torch.Tensor) -> torch.Tensor:
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


def _stats_twin(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(m [rows, 1], log_s [rows, 1]) of y [rows, V], as the chunk programs and `_combine` compute them."""
    rows, v = y.shape
    chunk = vocab_chunk(v)
    nc = -(-v // chunk)
    chunks = F.pad(y, (0, nc * chunk - v), value=float("-inf")).view(rows, nc, chunk)
    m_c = chunks.amax(-1)
    m_c_use = torch.where(m_c == float("-inf"), 0.0, m_c)
    s_c = _pair_sum_twin(torch.exp(chunks - m_c_use[..., None]))
    pad = triton.next_power_of_2(nc) - nc
    m_c, s_c = F.pad(m_c, (0, pad), value=float("-inf")), F.pad(s_c, (0, pad), value=0.0)
    m = m_c.amax(-1, keepdim=True)
    m_use = torch.where(m == float("-inf"), 0.0, m)
    return m, torch.log(_pair_sum_twin(s_c * torch.exp(m_c - m_use)))[:, None]


def log_softmax_twin(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The kernels' log-softmax in torch ops (chunk statistics, combined in the same trees)."""
    y = logits.float().reshape(-1, logits.shape[-1]) / temperature
    m, log_s = _stats_twin(y)
    return ((y - m) - log_s).reshape(logits.shape)


def sample_twin(logits: torch.Tensor, temperature: float, uniform: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample` in torch ops: argmax (first index) of y - log(-log u), or of y; the logprob as the kernels'."""
    y = logits.float() / temperature
    m, log_s = _stats_twin(y)
    score = y if uniform is None else y - torch.log(-torch.log(uniform))
    tokens = score.argmax(-1)
    return tokens, ((y.gather(-1, tokens[:, None]) - m) - log_s)[:, 0]


__all__ = ["MAX_CHUNK", "log_softmax", "log_softmax_forward", "log_softmax_twin", "sample", "sample_twin",
           "vocab_chunk"]
