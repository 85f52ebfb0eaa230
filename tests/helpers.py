"""Formats and measures shared by the numerics tests (importable as `helpers`: pyproject puts tests/ on the path)."""

import os
import subprocess
import sys
import tempfile
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from precision_engine.numerics.contract import TRITON_INTERPRET
from precision_engine.numerics.formats import Axis, DType, Granularity, QuantFormat, ScaleKind
from precision_engine.numerics.quantize import Quantized, scale_from_amax

# Tests that run Triton kernels on CPU tensors: the interpreter's (CI, no GPU). On a GPU machine the kernels want
# CUDA tensors (the GPU tests run them there), so these skip instead of failing on the tensors' device.
needs_interpreter = pytest.mark.skipif(not TRITON_INTERPRET, reason="Triton on CPU tensors needs TRITON_INTERPRET=1")


def stable_seed(*parts) -> int:
    """A seed from formats, shapes and numbers that is the same in every process (`hash` of a format is not: its
    enums hash their names, and Python salts string hashes per process), so a failing case reruns on its inputs."""
    return zlib.crc32(repr(tuple(p.describe() if isinstance(p, QuantFormat) else p for p in parts)).encode())


# One E4M3 format per granularity (tensor, channel, 1x128, 128x1, 128x128) ...
BASE = [
    QuantFormat(DType.FLOAT8_E4M3, Granularity.TENSOR),
    QuantFormat(DType.FLOAT8_E4M3, Granularity.CHANNEL),
    QuantFormat(DType.FLOAT8_E4M3, Granularity.GROUP, group=128, axis=Axis.K),
    QuantFormat(DType.FLOAT8_E4M3, Granularity.GROUP, group=128, axis=Axis.TOKENS),
    QuantFormat(DType.FLOAT8_E4M3, Granularity.BLOCK, block=(128, 128)),
]
# ... and each of them in every FP8 dtype with both scale kinds.
FORMATS = [replace(f, dtype=d, scale=s) for f in BASE for d in DType if d.is_fp8 for s in ScaleKind]


def sqnr_db(ref: torch.Tensor, approx: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio of `approx` against `ref`, in dB, computed in float64."""
    ref, approx = ref.double(), approx.double()
    return float(20 * torch.log10(ref.norm() / (ref - approx).norm()))


def assert_bitwise(got: Quantized, ref: Quantized) -> None:
    """Same bytes and scales; NaN positions compared as positions (a NaN's sign bit is not specified)."""
    assert got.data.shape == ref.data.shape and got.scale.shape == ref.scale.shape
    assert got.scale.stride() == ref.scale.stride() and got.tokens == ref.tokens
    g, r = got.data.float(), ref.data.float()
    assert torch.equal(torch.isnan(g), torch.isnan(r))
    keep = ~torch.isnan(r)
    assert torch.equal(got.data.view(torch.uint8)[keep], ref.data.view(torch.uint8)[keep])
    assert torch.equal(torch.isnan(got.scale), torch.isnan(ref.scale))
    assert torch.equal(got.scale.nan_to_num(), ref.scale.nan_to_num())


def run_offline_compile(source: str, *, timeout: int = 600) -> None:
    """Run `source`, a script that compiles kernels for sm_90 ahead of time (no GPU) and prints "ok", in a fresh
    interpreter: without TRITON_INTERPRET (under which it would interpret instead of compile), from a file
    (Triton compiles @jit functions defined in source files only), with the repository first on its path.
    Fails with the script's stderr; skips where Triton has no NVIDIA backend."""
    pytest.importorskip("triton.backends.nvidia.compiler")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (root, env.get("PYTHONPATH"))))
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "compile_sm90.py"
        script.write_text(source)
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                              timeout=timeout)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


class GraphRecorder:
    """A torch.compile backend that keeps each graph's code (submodules included) and runs it as traced."""

    def __init__(self):
        self.code = []

    def __call__(self, gm, example_inputs):
        self.code.append(gm.print_readable(print_output=False))
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)


def _scale_groups(fmt: QuantFormat, rows: int, cols: int) -> torch.Tensor:
    """Each element's scale group in fmt, numbered, for a [rows, cols] input."""
    r, c = torch.arange(rows)[:, None], torch.arange(cols)[None, :]
    if fmt.granularity is Granularity.TENSOR:
        return torch.zeros(rows, cols, dtype=torch.long)
    if fmt.granularity is Granularity.CHANNEL:
        return r.expand(rows, cols)
    if fmt.granularity is Granularity.BLOCK:
        return (r // fmt.block[0]) * (cols // fmt.block[1]) + c // fmt.block[1]
    if fmt.axis is Axis.TOKENS:
        return (r // fmt.group) * cols + c
    return r * (cols // fmt.group) + c // fmt.group


def beside_fp8_boundaries(fmt: QuantFormat, size: int, seed: int) -> torch.Tensor:
    """A [size, size] fp32 input (CPU) for fmt with fp32 scales whose values lie where a quantizer's division
    must be exact to give the reference's bytes: each scale group's first value sets its amax (random mantissa
    and binade), and every other value lies within 4 ulps of scale * (1 + j/16) * 2**k, either sign, for random
    j (every FP8 rounding boundary's mantissa is on that grid) and k within the format's range."""
    gen = torch.Generator().manual_seed(seed)
    group = _scale_groups(fmt, size, size)
    groups = int(group.max()) + 1
    amax = ((torch.randint(0, 1 << 23, (groups,), generator=gen) | (127 << 23)).int().view(torch.float32)
            * torch.exp2(torch.randint(-30, 30, (groups,), generator=gen).float()))
    scale = scale_from_amax(amax, fmt).double()[group]
    top = 7 if fmt.dtype is DType.FLOAT8_E4M3 else 14  # (1 + 15/16) * 2**top < fmax: each amax stays its group's
    j = torch.randint(0, 16, group.shape, generator=gen)
    k = torch.randint(-17, top + 1, group.shape, generator=gen)
    sign = torch.randint(0, 2, group.shape, generator=gen) * 2 - 1
    near = (scale * (1 + j / 16) * torch.exp2(k.double()) * sign).float().view(torch.int32)
    x = (near + torch.randint(-4, 5, group.shape, generator=gen, dtype=torch.int32)).view(torch.float32)
    first = torch.full((groups,), group.numel()).scatter_reduce(0, group.flatten(), torch.arange(group.numel()),
                                                                "amin")
    x.view(-1)[first] = amax
    assert torch.equal(torch.zeros(groups).scatter_reduce(0, group.flatten(), x.abs().flatten(), "amax"), amax)
    return x
