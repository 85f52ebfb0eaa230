"""Programmatic dependent launch (PDL) along the decode chain: quantize the tokens -> GEMM -> segment sum.

At decode sizes each of these kernels runs for a few microseconds, and even inside a CUDA graph the step from
one kernel's end to the next one's first instruction (launch, CTA set-up) is a visible share of it. Launched
with `launch_pdl=True` (Hopper), a kernel may start while the one before it still runs, once every program of
that one has called `release_dependents`; it calls `wait_for_producer` before its first load, which returns when
the producer grid has finished and its writes are visible. So the overlap is only the launch and set-up, and a
kernel reads exactly what it would read without PDL. Both instructions are no-ops in a kernel launched without
PDL. Only the token quantizer releases, at its start: its dependent, the GEMM, has a grid of about one program
per SM. GEMMs that released at their start too (H200, 2026-12-03) ran 7-8% slower at M = 64 on 1024x4096 and
4096x14336 (likely the segment-sum kernel's programs, resident and waiting, taking SM slots the GEMM's queued
programs needed), against 2-7% faster at M = 1 and 16 on every 8B shape.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from precision_engine.numerics.capabilities import SMALL_M_MAX
from precision_engine.numerics.contract import TRITON_INTERPRET

ENABLED = True  # a module switch for A/B benches (bench linear's decode rows with and without)
_INTERPRET = tl.constexpr(TRITON_INTERPRET)


def launch_options(m: int, device: torch.device) -> dict:
    """The launch keyword for a kernel of the decode chain at M rows: PDL at decode sizes on Hopper and newer."""
    return {"launch_pdl": True} if ENABLED and m <= SMALL_M_MAX and _supported(device) else {}


@functools.cache
def _supported(device: torch.device) -> bool:
    return device.type == "cuda" and not _INTERPRET.value and torch.cuda.get_device_capability(device) >= (9, 0)


@triton.jit
def wait_for_producer():
    """griddepcontrol.wait: the kernel launched before this one has finished and its writes are visible."""
    if not _INTERPRET:
        tl.extra.cuda.gdc_wait()


@triton.jit
def release_dependents():
    """griddepcontrol.launch_dependents: the next kernel, if launched with PDL, may start (and wait)."""
    if not _INTERPRET:
        tl.extra.cuda.gdc_launch_dependents()
