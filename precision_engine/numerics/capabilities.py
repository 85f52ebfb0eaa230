"""What each FP8 GEMM kernel can run, in one table, and the one function that picks a kernel.

Every place that needs to know consults this module, so what `precision validate --model` and `plan` accept
is what `check`, `export` and training run:

- `linear_problems(spec, ...)`: why a planned FP8 module cannot run (policy checks against a model, and
  `Fp8Linear` / `Fp8Experts` on construction, raise or report exactly these);
- `forward_batch_invariant(kernel, batch_invariant)`: whether a module's forward gives a row the same bits at
  any M (`Plan.identical`, and the policy check that `numerics.batch_invariant` is not contradicted);
- `resolve_kernel(...)`: which kernel a GEMM call runs on a given device (`gemm.fp8_gemm`).

A new kernel is one row in `KERNELS` (and a branch in `gemm.fp8_gemm` that calls it). Torch-free, because
`precision validate` imports it: the device a kernel runs on is described by `DeviceInfo`, built by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from precision_engine.errors import UnsupportedError
from precision_engine.numerics.formats import Axis, DType, Granularity, Kernel, LinearSpec, QuantFormat

# The one scale granularity the FP8 GEMMs take along K: activations and grad outputs in 1x128 groups, weights
# in 128x128 blocks, the wgrad operands in 128x1 groups along tokens (the GEMMs walk K one scale block a step).
SCALE_BLOCK = 128
WEIGHT_BLOCK = (SCALE_BLOCK, SCALE_BLOCK)
# Decode sizes: at or below this many rows AUTO takes Triton's small-M tiles, where cuBLAS is slower than BF16.
SMALL_M_MAX = 64
# torch._scaled_mm takes blockwise (1x128, 128x128) scales from this compute capability and these versions on
# (Hopper; torch 2.9 with CUDA 12.9 shipped the cuBLASLt block-scaling modes it calls).
CUBLAS_MIN_CAPABILITY = (9, 0)
CUBLAS_MIN_TORCH = (2, 9)
CUBLAS_MIN_CUDA = (12, 9)


class Gemm(str, Enum):
    """The three GEMMs of a linear layer."""

    FPROP = "fprop"  # y = x @ W^T (rollout and training forward)
    DGRAD = "dgrad"  # dx = dy @ W
    WGRAD = "wgrad"  # dW = dy^T @ x, both operands grouped along tokens


FP8 = frozenset({DType.FLOAT8_E4M3, DType.FLOAT8_E5M2})
# The exchange format's element type (numerics.exchange): what weight sync sends and SGLang's loader reads.
EXCHANGE_DTYPES = frozenset({DType.FLOAT8_E4M3})
ALL_GEMMS = frozenset(Gemm)


@dataclass(frozen=True)
class KernelRow:
    """What one kernel runs. `batch_invariant`: a row's result never depends on M (fixed tiles, K order and
    split); `auto`: AUTO may pick it; `requires`: said when a device cannot run it."""

    kernel: Kernel
    devices: frozenset[str]
    dtypes: frozenset[DType]
    gemms: frozenset[Gemm]
    batch_invariant: bool
    auto: bool
    requires: str
    bf16_out_only: bool = False


KERNELS: dict[Kernel, KernelRow] = {
    row.kernel: row
    for row in (
        # Exact: each 128-wide K block's FP8 dot product is exact in float64 (see gemm.reference_gemm).
        KernelRow(Kernel.REFERENCE, frozenset({"cpu", "cuda"}), FP8, ALL_GEMMS, batch_invariant=True, auto=True,
                  requires="any device"),
        # fp32 dequantization and one fp32 matmul: the CPU's fast path for the backward GEMMs, whose rows are never
        # compared across M; CPU GEMM libraries pick their blocking by M, so it is not batch-invariant.
        KernelRow(Kernel.EMULATED, frozenset({"cpu", "cuda"}), FP8, ALL_GEMMS, batch_invariant=False, auto=True,
                  requires="any device"),
        # Fixed K order and a split-K fixed by (N, K); on Hopper its Gluon twins (same bits) above decode sizes
        # and from 17 to 64 rows where their decode units fill the SMs.
        # On the CPU only in Triton's interpreter (tests).
        KernelRow(Kernel.TRITON, frozenset({"cuda"}), FP8, ALL_GEMMS, batch_invariant=True, auto=True,
                  requires="a CUDA device (or TRITON_INTERPRET=1)"),
        # cuBLAS picks its algorithm by M, so the same row can round differently at another batch size.
        KernelRow(Kernel.CUBLAS, frozenset({"cuda"}), frozenset({DType.FLOAT8_E4M3}), ALL_GEMMS,
                  batch_invariant=False, auto=True,
                  requires=f"a CUDA GPU of compute capability {CUBLAS_MIN_CAPABILITY[0]}.{CUBLAS_MIN_CAPABILITY[1]}+ "
                  f"(Hopper), torch >= {'.'.join(map(str, CUBLAS_MIN_TORCH))} and CUDA >= "
                  f"{'.'.join(map(str, CUBLAS_MIN_CUDA))} (blockwise torch._scaled_mm)"),
        # cuBLASLt with one no-split algorithm pinned per shape (numerics.cublas_pinned): a row has the same bits at
        # any M (bitwise on an H200, M = 1 .. 16384); under 16 rows and at decode sizes where Gluon takes the shape
        # the Triton/Gluon kernel with one K segment gives the same bits, faster. AUTO Triton's K is one segment
        # for every weight (sixteenth session), so on Hopper with 128x128 weight blocks its bits are these, and it
        # runs this kernel above decode sizes (gemm.fp8_gemm). By name only: AUTO is the same GEMM where it is
        # faster, and the plan still reports the two kernels as different numerics (conservative: off Hopper
        # AUTO resolves elsewhere).
        KernelRow(Kernel.CUBLAS_PINNED, frozenset({"cuda"}), frozenset({DType.FLOAT8_E4M3}), ALL_GEMMS,
                  batch_invariant=True, auto=False,
                  requires="what the cublas kernel needs, plus a host C++ compiler and cuBLASLt's headers (its "
                  "extension builds at first use)"),
        # DeepGEMM's fp8_gemm_nt (1x128 x 128x128). On an H200 its SM90 kernel gave cuBLAS's bits (pinned and
        # _scaled_mm) and a row the same bits at every M measured, so AUTO launches it in their place where it is
        # installed (gemm._deep_gemm_gives_cublas_bits). By name its row claims no invariance: its SM100 kernels
        # take UE8M0 scales, and its tile heuristics are its own to change between releases.
        KernelRow(Kernel.DEEP_GEMM, frozenset({"cuda"}), frozenset({DType.FLOAT8_E4M3}),
                  frozenset({Gemm.FPROP, Gemm.DGRAD}), batch_invariant=False, auto=False,
                  requires="the deep_gemm package (DeepGEMM 2.x, built from source against a shared libstdc++: "
                  "scripts/build_deep_gemm.py, README) and a Hopper GPU "
                  "(compute capability 9.0; its newer GPUs' kernels take UE8M0 scales)", bf16_out_only=True),
    )
}


@dataclass(frozen=True)
class DeviceInfo:
    """The facts about a device that decide which kernels run on it (built by the caller, who has torch)."""

    type: str  # "cpu", "cuda", ...
    capability: tuple[int, int] | None = None  # CUDA compute capability
    interpreter: bool = False  # TRITON_INTERPRET=1: Triton kernels run on the CPU
    cublas_blockwise: bool = False  # torch and CUDA are new enough for blockwise torch._scaled_mm
    deep_gemm: bool = False  # the deep_gemm package imports

    def runs(self, kernel: Kernel) -> bool:
        if kernel is Kernel.TRITON and self.interpreter:
            return True
        if self.type not in KERNELS[kernel].devices:
            return False
        if kernel in (Kernel.CUBLAS, Kernel.CUBLAS_PINNED):  # the pinned kernel's build is checked at first use
            return self.cublas_blockwise and (self.capability or (0, 0)) >= CUBLAS_MIN_CAPABILITY
        if kernel is Kernel.DEEP_GEMM:  # SM90's kernel takes our FP32 scales; SM100's would round them to UE8M0
            return self.deep_gemm and self.capability == (9, 0)
        return True


def resolve_kernel(
    requested: Kernel,
    *,
    device: DeviceInfo,
    m: int,
    gemm: Gemm = Gemm.FPROP,
    batch_invariant: bool = True,
    dtypes: frozenset[DType] = frozenset({DType.FLOAT8_E4M3}),
) -> Kernel:
    """The kernel a GEMM of `m` rows runs: `requested` if the device can run it (else UnsupportedError with
    the reason), or AUTO's pick.

    AUTO: off CUDA the exact reference for the forward and the fp32 emulation for the backward GEMMs. On CUDA the
    forward takes Triton when `batch_invariant` (rollout and trainer logprobs must agree bitwise: one kernel at
    every M) or at decode sizes (m <= SMALL_M_MAX); otherwise cuBLAS where the GPU has blockwise scaling.
    Backward GEMMs (dgrad, wgrad) run only in training, where no two calls compare a row's bits at different M,
    so batch invariance buys nothing there and AUTO takes cuBLAS when it can.
    """
    if requested is not Kernel.AUTO:
        row = KERNELS[requested]
        if not device.runs(requested):
            raise UnsupportedError(f"kernel {requested.value} needs {row.requires}; use kernel: auto")
        if gemm not in row.gemms or not dtypes <= row.dtypes:
            raise UnsupportedError(f"kernel {requested.value} does not run the {gemm.value} GEMM on "
                                    f"{'/'.join(sorted(d.value for d in dtypes))} operands; use kernel: auto")
        return requested
    if device.type != "cuda":  # Triton's interpreter runs only what is asked of it by name (tests)
        return Kernel.REFERENCE if gemm is Gemm.FPROP else Kernel.EMULATED
    wants_invariance = gemm is Gemm.FPROP and (batch_invariant or m <= SMALL_M_MAX)
    if not wants_invariance and device.runs(Kernel.CUBLAS) and dtypes <= KERNELS[Kernel.CUBLAS].dtypes:
        return Kernel.CUBLAS
    return Kernel.TRITON


def forward_batch_invariant(kernel: Kernel | None, batch_invariant: bool) -> bool:
    """Whether a module's forward gives a row the same bits at any M on every device.

    `kernel` None: a module the plan keeps unquantized; its ops are batch-invariant when the policy asks for it
    (`numerics.batch_invariant`). AUTO keeps the policy's promise by picking an invariant kernel; an explicit
    kernel is as invariant as its row says.
    """
    if kernel is None or kernel is Kernel.AUTO:
        return batch_invariant
    return KERNELS[kernel].batch_invariant


@dataclass(frozen=True)
class Problem:
    """Why a planned FP8 module cannot run: the operand (or "kernel", "module") and a message with a hint."""

    operand: str
    message: str
    hint: str = ""


_ROLE_LAYOUT = {
    # operand -> (granularity, axis, what the GEMMs take, the YAML that gives it)
    "input": (Axis.K, "1x128 groups along K", "granularity: group, group: 128"),
    "grad_output": (Axis.K, "1x128 groups along K", "granularity: group, group: 128"),
    "wgrad_operands": (Axis.TOKENS, "128x1 groups along tokens", "granularity: group, group: 128, axis: tokens"),
}


def linear_problems(spec: LinearSpec, *, backward: bool, experts: bool = False, exported: bool = False
                    ) -> list[Problem]:
    """Everything that keeps the FP8 GEMMs from running `spec` (empty: it runs).

    `backward`: the phase trains, so grad_output / wgrad_operands / wgrad_input run too. `experts`: a fused MoE
    experts module (forward only: there is no grouped FP8 backward yet). `exported`: the weights travel to the
    rollout engine (the rollout phase: weight sync and `export`), so they must be in the exchange format.
    """
    found: list[Problem] = []
    if not spec.forward_is_fp8:
        return [Problem("input", f"the FP8 GEMMs need FP8 weight and input formats, got weight "
                        f"{spec.weight.describe()} and input {spec.input.describe()}",
                        "quantize both (W8A8) or neither")]
    if experts and backward:
        found.append(Problem("module", "FP8 fused MoE experts run in the rollout phase only (no grouped FP8 "
                             "backward yet)", "a `compute: bf16` rule for the experts in the training rule set"))
    weight = spec.weight
    if weight.granularity is not Granularity.BLOCK or weight.block != WEIGHT_BLOCK:
        found.append(Problem("weight", f"the FP8 GEMMs take weights in {WEIGHT_BLOCK[0]}x{WEIGHT_BLOCK[1]} blocks, "
                             f"got {weight.describe()}", "use `granularity: block, block: [128, 128]`"))
    if exported and weight.dtype not in EXCHANGE_DTYPES:
        found.append(Problem("weight", f"rollout weights travel in the block-FP8 exchange format (float8_e4m3 "
                             f"128x128, what SGLang loads), got {weight.describe()}", "use `dtype: float8_e4m3`"))
    operands = [("input", spec.input)]
    if backward:
        operands += [("grad_output", spec.grad_output), ("wgrad_operands", spec.wgrad_operands)]
    for role, fmt in operands:
        if fmt is not None and fmt.is_quantized:
            found.extend(_group_problems(role, fmt))
    if backward and spec.wgrad_input is not None and spec.wgrad_input.is_quantized:
        found.extend(_wgrad_input_problems(spec.wgrad_input))
    if spec.compute.is_fp8:
        found.append(Problem("compute", f"compute dtype must be bf16, fp16 or fp32, got {spec.compute.value}"))
    found.extend(_kernel_problems(spec, backward))
    return found


def _group_problems(role: str, fmt: QuantFormat) -> list[Problem]:
    axis, want, yaml = _ROLE_LAYOUT[role]
    if fmt.granularity is Granularity.GROUP and fmt.group == SCALE_BLOCK and fmt.axis is axis:
        return []
    return [Problem(role, f"the FP8 GEMMs take {role} in {want}, got {fmt.describe()}", f"use `{yaml}`")]


def _wgrad_input_problems(fmt: QuantFormat) -> list[Problem]:
    """x's own wgrad format: 128x128 blocks (the wgrad then has the fprop's GEMM form), or wgrad_operands' 128x1."""
    if fmt.granularity is Granularity.BLOCK and fmt.block == WEIGHT_BLOCK or not _group_problems("wgrad_operands", fmt):
        return []
    return [Problem("wgrad_input", f"the FP8 wgrad takes x in {WEIGHT_BLOCK[0]}x{WEIGHT_BLOCK[1]} blocks or 128x1 "
                    f"groups along tokens, got {fmt.describe()}", "use `granularity: block, block: [128, 128]`")]


def _kernel_problems(spec: LinearSpec, backward: bool) -> list[Problem]:
    if spec.kernel is Kernel.AUTO:
        return []
    row = KERNELS[spec.kernel]
    found = []
    gemms = {Gemm.FPROP}
    if backward and spec.grad_output is not None and spec.grad_output.is_quantized:
        gemms.add(Gemm.DGRAD)
    if backward and spec.wgrad_operands is not None and spec.wgrad_operands.is_quantized:
        gemms.add(Gemm.WGRAD)
    missing = sorted(g.value for g in gemms - row.gemms)
    if missing:
        found.append(Problem("kernel", f"kernel {row.kernel.value} does not run the {'/'.join(missing)} GEMM",
                             "use kernel: auto"))
    dtypes = {f.dtype for f in (spec.weight, spec.input, spec.grad_output, spec.wgrad_operands, spec.wgrad_input)
              if f is not None and f.is_quantized}
    if not dtypes <= row.dtypes:
        found.append(Problem("kernel", f"kernel {row.kernel.value} takes "
                             f"{'/'.join(sorted(d.value for d in row.dtypes))} operands only", "use kernel: auto"))
    if row.bf16_out_only and spec.compute is not DType.BF16:
        found.append(Problem("kernel", f"kernel {row.kernel.value} writes bf16 only, compute is "
                             f"{spec.compute.value}", "use kernel: auto or compute: bf16"))
    return found
