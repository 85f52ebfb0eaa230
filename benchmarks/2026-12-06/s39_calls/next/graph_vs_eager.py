"""Why do graphed training steps run slower than eager ones on the large rows (H200, thirty-ninth session:
14336x4096 at 8192 tokens, BF16 3.95 -> 4.17 ms, fp8_bi_wblocks 2.26 -> 2.66 ms)? `bench linear` times an eager
call after a 200 us spin kernel (`timing.time_cuda`'s host lead), so most SMs idle before each timed call; graph
replays run back to back. Four ways, same layers and inputs, BF16 and fp8_bi_wblocks interleaved, 3 rounds:
  lead200   bench linear's eager timing (a 200 us spin before each call)
  lead5000  a 5 ms spin before each call
  b2b       one spin long enough for the host to queue every call, then the calls back to back, an event between each
  graph     `bench.gemm.time_graphed` (bench linear's /graph rows)
Prints each phase's wall-clock start (for `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv
-lms 100`, run beside it by the call) and the medians and x BF16 per way."""

import statistics
import sys
import time

import torch

from precision_engine.bench.gemm import time_graphed
from precision_engine.bench.linear import _input_sets, _train_step
from precision_engine.bench.timing import SPIN_CYCLES_PER_US, time_cuda


def back_to_back(fn, sets, reps, per_call_ms=4.0):
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    torch.cuda._sleep(int(reps * per_call_ms * 1e3 * SPIN_CYCLES_PER_US))
    events[0].record()
    for i in range(reps):
        fn(*sets[i % len(sets)])
        events[i + 1].record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in zip(events, events[1:])]


WAYS = {
    "lead200": lambda fn, sets: statistics.median(time_cuda(fn, warmup=3, reps=30, inputs_rotation=sets)),
    "lead5000": lambda fn, sets: statistics.median(time_cuda(fn, warmup=3, reps=30, inputs_rotation=sets,
                                                             host_lead_us=5000)),
    "b2b": lambda fn, sets: statistics.median(back_to_back(fn, sets, 30)),
    "graph": lambda fn, sets: time_graphed(fn, sets, warmup=3, reps=10),
}

for shape in sys.argv[1:] or ["14336x4096", "4096x4096"]:
    n, k = map(int, shape.split("x"))
    m = 8192 if n * k > 4096 * 4096 else 16384
    sets = _input_sets(n, k, m, ["fp8_bi_wblocks"], seed=0, device="cuda")
    results = {}
    for round_ in range(3):
        for way, measure in WAYS.items():
            for variant in ("bf16", "fp8_bi_wblocks"):
                fn = lambda layers, x, dy, v=variant: _train_step(layers[v], x, dy)  # noqa: E731
                print(f"phase {time.time():.3f} {shape} {m} {way} {variant} round {round_}", flush=True)
                results.setdefault((way, variant), []).append(measure(fn, sets))
    for way in WAYS:
        bf16, fp8 = (statistics.median(results[(way, v)]) for v in ("bf16", "fp8_bi_wblocks"))
        print(f"{shape} M={m} {way:9s} bf16 {bf16:7.3f} ms  fp8_bi_wblocks {fp8:7.3f} ms  x {bf16 / fp8:.2f}  "
              f"(rounds: bf16 {' '.join(f'{t:.3f}' for t in results[(way, 'bf16')])}; fp8 "
              f"{' '.join(f'{t:.3f}' for t in results[(way, 'fp8_bi_wblocks')])})")
