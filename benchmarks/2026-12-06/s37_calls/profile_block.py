"""Where the 8B block's training step spends GPU time, kernel by kernel (torch.profiler, 3 steps after 3 warm-up
steps, 4 x 2048 tokens, as `precision bench block` builds and steps it): bf16_baseline fast, jetrl_unified fast and
jetrl_unified batch-invariant. Tells what the batch-invariant step pays over the fast one and where jetrl_unified's
time goes against the fast BF16 block. Prints each configuration's kernels by total time, ms a step. TRACE=text
(environment) also prints, for kernels whose name holds that text, the op that launched them and its Python stack
(for the seven `elementwise_kernel<128, 4` launches only batch-invariant mode makes, call 9)."""

import os
from collections import defaultdict

import torch

from precision_engine.bench.block import _rewrite, _train_step
from precision_engine.bench.rollout import random_decoder
from precision_engine.models.loader import config_spec, resolve_config

STEPS = 3
TRACE = os.environ.get("TRACE")
config = resolve_config("llama-3.1-8b")
config["num_hidden_layers"] = 1
with config_spec(config) as spec:
    model = random_decoder(config, device="cuda", seed=0)
    x = torch.randn(4, 2048, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(4, 2048, 4096, device="cuda", dtype=torch.bfloat16)
    for policy, invariant in (("bf16_baseline", False), ("jetrl_unified", False), ("jetrl_unified", True),
                              ("bf16_baseline", True)):
        _rewrite(model, spec, policy, invariant, "cuda")
        for _ in range(3):
            _train_step(model, x, dy)
        torch.cuda.synchronize()
        activities = [torch.profiler.ProfilerActivity.CUDA] + ([torch.profiler.ProfilerActivity.CPU] if TRACE else [])
        with torch.profiler.profile(activities=activities, with_stack=bool(TRACE)) as prof:
            for _ in range(STEPS):
                _train_step(model, x, dy)
            torch.cuda.synchronize()
        total, count = defaultdict(float), defaultdict(int)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                total[e.name[:90]] += e.device_time / 1e3 / STEPS
                count[e.name[:90]] += 1
        mode = "batch-invariant" if invariant else "fast"
        print(f"== {policy} {mode}: {sum(total.values()):.3f} ms of kernels a step, "
              f"{sum(count.values()) // STEPS} launches")
        for name, ms in sorted(total.items(), key=lambda kv: -kv[1])[:22]:
            print(f"  {ms:7.3f} ms  x{count[name] // STEPS:<3} {name}")
        if TRACE:
            seen = set()
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CPU and any(TRACE in k.name for k in e.kernels):
                    where = " <- ".join(frame for frame in e.stack if "precision_engine" in frame)[:400]
                    if (e.name, where) not in seen:
                        seen.add((e.name, where))
                        print(f"  launched by {e.name}: {where}")
