"""scripts/fsdp2_fp8.py: BF16 and jetrl_unified FP8 training under FSDP2 on two ranks against one process.

The CPU run launches two gloo processes (`torch.distributed.run --standalone --nproc_per_node 2`) at tiny shapes
(2 layers, hidden 256, vocab 256, 4 x 64 tokens, 4 AdamW steps) and takes about 11 s on 2 cores; every test of
the module reads that one run. Tolerances, and why:
- first-step gradients (same weights on both sides): relative 1e-2 per parameter. FSDP2 reduce-scatters two
  half-batch GEMMs (in FP32) where the reference accumulates one GEMM over all tokens, and both round to BF16
  (half an ulp is 2^-9 ~ 2e-3 relative); measured ~3e-3.
- later steps: the weights now differ by those roundings, and the differences grow through AdamW; in FP8 a
  one-ulp BF16 weight change can flip an E4M3 rounding (1/8 relative), so later FP8 gradients agree to 0.25
  (measured ~0.13), BF16 to 0.05 (measured ~0.012); losses agree to 5e-3 absolute (measured ~1e-3 FP8).
- bitwise: first-forward logits (batch_invariant: true), and the rollout FP8 bytes against the reference's
  Q(W) before any step and against the Q(W) the FSDP2 forward itself used after the last step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fsdp2_fp8.py"
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
LATER_GRAD_TOL = {"bf16_baseline": 0.05, "jetrl_unified": 0.25}


def launch(tmp_path: Path, *script_args: str, timeout: int) -> dict:
    out = tmp_path / "fsdp2.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(SCRIPT),
           *script_args, "--out", str(out)]
    env = {**os.environ, **MULTICAST_OFF, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {r["policy"]: r for r in json.loads(out.read_text())["results"]}


def check(results: dict) -> None:
    assert set(results) == {"bf16_baseline", "jetrl_unified"}
    for policy, r in results.items():
        assert r["loss_abs_diff_max"] <= 5e-3, (policy, r["losses_fsdp"], r["losses_ref"])
        first = r["first_step_grad_rel_diff_by_param"]
        assert max(first.values()) <= 1e-2, (policy, max(first.items(), key=lambda kv: kv[1]))
        assert max(r["grad_rel_diff_max_per_step"][1:]) <= LATER_GRAD_TOL[policy], (policy, r)
        assert r["logits_before_steps_bitwise"], policy
        assert r["logits_after_steps_rel_diff"] <= 0.1, policy
        assert r["seconds_per_step_fsdp"] > 0
    fp8 = results["jetrl_unified"]
    assert fp8["fp8_forwards_seen"] > 0 and fp8["fp8_forward_saw_full_weights"]
    assert fp8["fp8_rollout_matches_reference_before_steps"]
    assert fp8["fp8_rollout_matches_used_after_steps"]
    assert results["bf16_baseline"]["fp8_forwards_seen"] == 0


@pytest.fixture(scope="module")
def cpu_results(tmp_path_factory) -> dict:
    return launch(tmp_path_factory.mktemp("fsdp2_cpu"), "--device", "cpu", timeout=180)


@pytest.mark.slow
def test_fsdp2_gloo_matches_single_process(cpu_results):
    check(cpu_results)


@pytest.mark.slow
def test_fsdp2_gloo_shards_every_fp8_linear(cpu_results):
    """2 layers x 7 projections, each its own FSDP2 unit, plus the root; BF16 runs as the root alone."""
    assert cpu_results["jetrl_unified"]["fsdp_units"] == 15
    assert cpu_results["bf16_baseline"]["fsdp_units"] == 1


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (the nvidia-h200-x2 kind)")
def test_fsdp2_nccl_full_size(tmp_path):
    """8 layers, hidden 2048, vocab 32000, 8 x 512 tokens over NCCL on 2 GPUs, same checks as the CPU run.
    Not run yet: the session that wrote it had no two-GPU machine (nvidia-h200-x2 was not lent)."""
    check(launch(tmp_path, "--device", "cuda", timeout=600))
