"""The jetrl_unified BI block step: the aten ops that launch the GPU time (self device time, by op and shapes),
and a sweep of the SiLU backward kernel's launch."""
import sys, statistics, torch
from torch.profiler import ProfilerActivity, profile
from precision_engine.bench.block import _rewrite, _config_file, _train_step as block_step
from precision_engine.bench.rollout import random_decoder
from precision_engine.models.loader import resolve_config

config = resolve_config("llama-3.1-8b"); config["num_hidden_layers"] = 1
spec = _config_file(config)
model = random_decoder(config, device="cuda", seed=0)
x = torch.randn(4, 2048, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn_like(x)
for policy, inv in (("jetrl_unified", True), ("bf16_baseline", True)):
    _rewrite(model, spec, policy, inv, "cuda")
    for _ in range(3):
        block_step(model, x, dy)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        block_step(model, x, dy)
        torch.cuda.synchronize()
    print(f"== {policy} BI: ops by self device time (ms), one step")
    rows = []
    for ev in prof.key_averages(group_by_input_shape=True):
        us = getattr(ev, "self_device_time_total", 0)
        if us > 50 and ev.device_type == torch.autograd.DeviceType.CPU:
            rows.append((us, ev.key, ev.count, str(ev.input_shapes)[:90]))
    for us, key, count, shapes in sorted(rows, reverse=True)[:28]:
        print(f"  {us/1e3:7.3f} {count:3d}x {key[:40]:40} {shapes}")
    sys.stdout.flush()
