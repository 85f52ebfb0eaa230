"""`bench.sampling` on the CPU (Triton's interpreter): the baseline it times, the previous per-row log-softmax
kernel, still computes log-softmax (1e-5 of float64) and the previous tail records its logprob element; the
bench itself asks for a GPU."""

import pytest
import torch

pytest.importorskip("triton")

from precision_engine.bench import sampling  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU checks; the GPU runs the bench itself")
def test_baseline_tail_runs_and_the_bench_needs_a_gpu():
    logits = (torch.randn(3, 5000, generator=torch.Generator().manual_seed(0)) * 3).bfloat16()
    logp = sampling.per_row_log_softmax(logits, 0.8)
    assert (logp.double() - torch.log_softmax(logits.double() / 0.8, -1)).abs().max().item() < 1e-5
    torch.manual_seed(1)
    tokens, logprobs = sampling._before(logits, 0.8)
    assert torch.equal(logprobs, logp.gather(-1, tokens[:, None])[:, 0])
    with pytest.raises(RuntimeError, match="GPU"):
        sampling.bench_sampling()
