"""Kernel timing done right: CUDA events per repetition, warm-up, median, inputs rotated past the L2.

Timing one buffer over and over measures the cache, not HBM, so callers pass several input sets whose total
size exceeds the L2 (`rotation` builds them from a factory of fresh random inputs) and each repetition uses
the next set. Before each timed call the GPU spins for `host_lead_us` so that the host has enqueued the whole
call before the start event fires: Python and launch overhead (tens of microseconds per quantize call) is not
what a bandwidth or GEMM comparison measures, and a pipeline that runs ahead of the GPU hides it too (first
H200 run of bench/quant.py, without the spin: the 8192x4096 1x128 quantization, 100 MB or ~25 us at copy
speed, timed at 64 us). Pass 0 to include it.
Without CUDA the same loop runs with a host clock, so the utility is testable on a laptop.
What the lead hides is measured apart: `host_issue_ms` times the host's side of a call alone, and
`host_and_gpu_ms` sets it beside the call's GPU time, so an eager row can say whether it measured the host.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

SPIN_CYCLES_PER_US = 2000  # spins are sized for a ~2 GHz SM clock: a slower one lengthens them, a faster shortens


def time_cuda(
    fn: Callable[..., object],
    *,
    warmup: int = 10,
    reps: int = 50,
    inputs_rotation: Sequence[tuple] | None = None,
    host_lead_us: float = 200.0,
) -> list[float]:
    """Milliseconds of each of `reps` calls of fn(*inputs_rotation[i % n]) (fn() when no rotation given)."""
    return time_cuda_turns([fn], warmup=warmup, reps=reps, inputs_rotation=inputs_rotation,
                           host_lead_us=host_lead_us)[0]


def time_cuda_turns(
    fns: Sequence[Callable[..., object]],
    *,
    warmup: int = 10,
    reps: int = 50,
    inputs_rotation: Sequence[tuple] | None = None,
    host_lead_us: float = 200.0,
) -> list[list[float]]:
    """Milliseconds of each of `reps` calls of each of `fns`, the functions taking turns call by call (repetition
    i calls each fn on set i % n in order), so that a clock that moves within the run moves each one's times
    alike: an H100 under sustained load held its 700 W cap by moving its SM clock between 1470 and 1980 MHz
    within a second (fortieth session), which timing one function's repetitions after another's turns into a
    difference between them."""
    sets = list(inputs_rotation) if inputs_rotation else [()]
    for i in range(warmup):
        for fn in fns:
            fn(*sets[i % len(sets)])
    times: list[list[float]] = [[] for _ in fns]
    if not torch.cuda.is_available():
        for i in range(reps):
            for fn, own in zip(fns, times):
                start = time.perf_counter()
                fn(*sets[i % len(sets)])
                own.append((time.perf_counter() - start) * 1e3)
        return times
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
              for _ in fns]
    spin_cycles = int(host_lead_us * SPIN_CYCLES_PER_US)
    torch.cuda.synchronize()
    for i in range(reps):
        for fn, own in zip(fns, events):
            if spin_cycles:
                torch.cuda._sleep(spin_cycles)
            own[i][0].record()
            fn(*sets[i % len(sets)])
            own[i][1].record()
    torch.cuda.synchronize()
    return [[start.elapsed_time(end) for start, end in own] for own in events]


def host_issue_ms(fn: Callable[..., object], inputs_rotation: Sequence[tuple], *, calls: int = 10,
                  spin_ms: float = 100.0) -> float:
    """Host milliseconds to issue one call of fn(*set) (the mean of `calls`, cycling through the sets), with the
    GPU kept busy meanwhile (a spin of `spin_ms`), so the host never waits for it: what a call costs the CPU
    whatever the GPU does. An eager call is host-bound where this exceeds its GPU time (the H200's FP8 training
    step issued in 1.5-2.0 ms against 0.82 ms of GPU work on 4096x4096, seventeenth session). `calls` stays small
    so the launches fit CUDA's queue, which would otherwise block the host on the GPU. Without CUDA, the host
    clock's time per call."""
    sets = list(inputs_rotation)
    fn(*sets[0])
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda._sleep(int(spin_ms * 1e3 * SPIN_CYCLES_PER_US))
    start = time.perf_counter()
    for i in range(calls):
        fn(*sets[i % len(sets)])
    issued = (time.perf_counter() - start) * 1e3 / calls
    if cuda:
        torch.cuda.synchronize()
    return issued


def host_and_gpu_ms(fn: Callable[..., object], inputs_rotation: Sequence[tuple], *, warmup: int, reps: int,
                    calls: int = 10) -> tuple[float, float]:
    """(host ms to issue one call, `host_issue_ms`; GPU ms of one call, timed with a lead the whole call is queued
    within, so no kernel waits for its launch). An eager call whose host time exceeds its GPU time is
    host-bound: its eager time is the host's. Without CUDA both are host clock times."""
    host = host_issue_ms(fn, inputs_rotation, calls=calls)
    lead_us = max(5000.0, 2e3 * host)
    return host, median(time_cuda(fn, warmup=warmup, reps=reps, inputs_rotation=inputs_rotation,
                                  host_lead_us=lead_us))


def median(times_ms: Sequence[float]) -> float:
    return statistics.median(times_ms)


def l2_bytes() -> int:
    """The device's L2 size (60 MB on an H200); a conservative 64 MiB without CUDA."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return 64 << 20


def rotation(
    make_inputs: Callable[[], tuple], bytes_per_set: int, *, l2_multiple: float = 4.0, max_sets: int = 64
) -> list[tuple]:
    """Enough freshly drawn input sets that cycling through them touches `l2_multiple` x the L2 (at least 2)."""
    n = min(max_sets, max(2, -(-int(l2_multiple * l2_bytes()) // max(1, bytes_per_set))))
    return [make_inputs() for _ in range(n)]


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9
