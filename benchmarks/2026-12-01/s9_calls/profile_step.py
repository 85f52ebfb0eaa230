"""Where the 8B block's and the linear's training step spend time: wall, host issue time, GPU kernels by kind."""
import sys, time, statistics, collections
import torch
from torch.profiler import ProfilerActivity, profile
from precision_engine.bench.block import _rewrite, _config_file, _train_step as block_step
from precision_engine.bench.rollout import random_decoder
from precision_engine.models.loader import resolve_config
from precision_engine.bench.linear import _specs, _train_step as lin_step
from precision_engine.numerics.linear import Fp8Linear

def kind(name):
    n = name.lower()
    for key, label in (("nvjet", "cublas"), ("gemm", "gemm"), ("cutlass", "cublas"), ("flash", "attn"), ("fmha", "attn"),
                       ("attention", "attn"), ("rms", "norm"), ("norm", "norm"), ("_rows_kernel", "quant"),
                       ("tokens_t", "quant"), ("blocks_kernel", "quant"), ("quant", "quant"), ("transpose", "quant"),
                       ("silu", "silu"), ("rope", "rope"), ("rotary", "rope"), ("memset", "memset"), ("memcpy", "copy"),
                       ("elementwise", "elementwise"), ("reduce", "reduce"), ("cat", "copy")):
        if key in n:
            return label
    return "other"

def measure(label, fn, steps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    hosts, walls = [], []
    for _ in range(steps):
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t = time.perf_counter(); e0.record()
        fn()
        h = time.perf_counter() - t
        e1.record(); torch.cuda.synchronize()
        hosts.append(h * 1e3); walls.append(e0.elapsed_time(e1))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    per = collections.Counter(); byname = collections.Counter()
    for ev in prof.key_averages():
        if ev.device_type == torch.autograd.DeviceType.CUDA or getattr(ev, "self_device_time_total", 0):
            us = getattr(ev, "self_device_time_total", None) or ev.self_cuda_time_total
            if us:
                per[kind(ev.key)] += us / 3; byname[ev.key[:70]] += us / 3
    gpu = sum(per.values()) / 1e3
    print(f"== {label}: wall {statistics.median(walls):.3f} ms, host issue {statistics.median(hosts):.3f} ms, "
          f"GPU kernels {gpu:.3f} ms")
    print("   by kind ms: " + ", ".join(f"{k} {v/1e3:.3f}" for k, v in per.most_common()))
    for name, us in byname.most_common(14):
        print(f"     {us/1e3:8.3f}  {name}")
    sys.stdout.flush()

config = resolve_config("llama-3.1-8b"); config["num_hidden_layers"] = 1
spec = _config_file(config)
model = random_decoder(config, device="cuda", seed=0)
x = torch.randn(4, 2048, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
dy = torch.randn_like(x)
for policy, inv in (("bf16_baseline", False), ("jetrl_unified", False), ("jetrl_unified", True)):
    _rewrite(model, spec, policy, inv, "cuda")
    measure(f"block {policy} {'BI' if inv else 'fast'} fwd+bwd", lambda: block_step(model, x, dy))
del model
if "block" in sys.argv[1:]:
    sys.exit(0)
for n, k in ((4096, 4096), (14336, 4096)):
    lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    xs = torch.randn(8192, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dys = torch.randn(8192, n, device="cuda", dtype=torch.bfloat16)
    measure(f"linear {n}x{k} bf16 fwd+bwd", lambda: lin_step(lin, xs, dys))
    for name, (s, num) in _specs().items():
        layer = Fp8Linear.from_linear(lin, s, numerics=num)
        measure(f"linear {n}x{k} {name} fwd+bwd", lambda: lin_step(layer, xs, dys))
