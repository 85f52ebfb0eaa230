"""Where a graphed FP8 linear training step spends its GPU time, kernel by kernel, next to BF16's. Not part of the
package: a device-call tool for issue 12's gap between `bench linear`'s graphed fwd+bwd and `bench ceiling`.

For each (N, K) at M tokens, one training step of `bench linear`'s bf16 and fp8_bi variants (W re-quantized as
after an optimizer step) is captured into a CUDA graph; its replays are timed with CUDA events (median of 30) and
profiled (torch.profiler, 10 replays). Printed per variant: the replay's ms, the sum of its kernels' ms (the gap
between the two is launch latency and idle time inside the graph), and each kernel's us per step.

    python scripts/profile_graphed_step.py --shapes 28672x4096,4096x14336,6144x4096 --tokens 8192
"""

import argparse
import statistics
from collections import defaultdict

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from precision_engine.bench.gemm import capture_graph
from precision_engine.bench.linear import _specs, _train_step
from precision_engine.bench.timing import time_cuda
from precision_engine.numerics.linear import Fp8Linear


def kernel_us(graph: torch.cuda.CUDAGraph, replays: int = 10) -> dict[str, tuple[int, float]]:
    """Kernel name -> (launches per step, us per step), from torch.profiler over `replays` replays."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    out: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            out[event.name][0] += 1
            out[event.name][1] += event.device_time
    return {name: (count // replays, us / replays) for name, (count, us) in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="28672x4096,4096x14336,6144x4096")
    parser.add_argument("--tokens", type=int, default=8192)
    args = parser.parse_args()
    spec, numerics = _specs()["fp8_bi"]
    summary = []
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        torch.manual_seed(0)
        lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        layers = {"bf16": lin, "fp8_bi": Fp8Linear.from_linear(lin, spec, numerics=numerics)}
        x = torch.randn(args.tokens, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(args.tokens, n, device="cuda", dtype=torch.bfloat16)
        replay_ms = {}
        for name, layer in layers.items():
            graph = capture_graph(_train_step, [(layer, x, dy)])
            replay_ms[name] = statistics.median(time_cuda(graph.replay, warmup=5, reps=30))
            kernels = kernel_us(graph)
            total = sum(us for _, us in kernels.values()) / 1e3
            print(f"=== {name} N={n} K={k} M={args.tokens}: replay {replay_ms[name]:.3f} ms, kernels {total:.3f} ms "
                  f"({len(kernels)} kinds, {sum(c for c, _ in kernels.values())} launches)")
            for kname, (count, us) in sorted(kernels.items(), key=lambda kv: -kv[1][1]):
                print(f"  {us:9.1f} us  x{count}  {kname[:110]}")
            del graph
        summary.append((shape, replay_ms["bf16"], replay_ms["fp8_bi"]))
    print("\n| shape | bf16 ms | fp8_bi ms | x |\n|---|---:|---:|---:|")
    for shape, bf16, fp8 in summary:
        print(f"| {shape} x {args.tokens} | {bf16:.3f} | {fp8:.3f} | {bf16 / fp8:.2f} |")


if __name__ == "__main__":
    main()
