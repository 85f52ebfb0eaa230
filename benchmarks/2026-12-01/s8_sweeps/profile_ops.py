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

from precision_engine.numerics import triton_fused_quant as TF
m, k = 8192, 14336
gu = torch.randn(m, 2 * k, device="cuda", dtype=torch.bfloat16)
dh = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
d = torch.empty_like(gu)
g, u, dg, du = gu[:, :k], gu[:, k:], d[:, :k], d[:, k:]
copy_src = torch.randn(m, 3 * k, device="cuda", dtype=torch.bfloat16); copy_dst = torch.empty(m, 2 * k, device="cuda", dtype=torch.bfloat16)
def t(fn, reps=30):
    for _ in range(3): fn()
    torch.cuda.synchronize(); ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)
nbytes = 5 * m * k * 2
base = TF._SILU_BACKWARD_CONFIG
ref = torch.empty_like(d); TF.silu_mul_backward(g, u, dh, ref[:, :k], ref[:, k:])
cp = t(lambda: copy_dst.copy_(copy_src[:, :2 * k]))
print(f"copy 3->2 x {m}x{k}: {cp:.3f} ms, {(5*m*k*2)/cp/1e9:.0f} GB/s")
for cfg in ({"BLOCK_M": 4, "BLOCK_K": 512, "num_warps": 4}, {"BLOCK_M": 1, "BLOCK_K": 1024, "num_warps": 4},
            {"BLOCK_M": 2, "BLOCK_K": 1024, "num_warps": 4}, {"BLOCK_M": 8, "BLOCK_K": 256, "num_warps": 4},
            {"BLOCK_M": 4, "BLOCK_K": 1024, "num_warps": 8}, {"BLOCK_M": 1, "BLOCK_K": 2048, "num_warps": 8},
            {"BLOCK_M": 16, "BLOCK_K": 256, "num_warps": 8}, {"BLOCK_M": 2, "BLOCK_K": 512, "num_warps": 2}):
    TF._SILU_BACKWARD_CONFIG = cfg
    ms = t(lambda: TF.silu_mul_backward(g, u, dh, dg, du))
    same = torch.equal(d.view(torch.int16), ref.view(torch.int16))
    print(f"silu backward {cfg}: {ms:.3f} ms, {nbytes/ms/1e9:.0f} GB/s, {nbytes/ms/1e9/((5*m*k*2)/cp/1e9)*100:.0f}% of copy, same bits {same}")
