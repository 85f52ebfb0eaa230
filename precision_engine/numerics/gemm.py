"""FP8 GEMM dispatch: one function, `fp8_gemm(a, b)` = dequant(a) @ dequant(b)^T, over several kernels.

Operands are `Quantized` (see `numerics.quantize`): `a` is [M, K] in 1x128 groups along K (scale
[M, ceil(K/128)]); `b` is [N, K] in 128x128 blocks (weights, scale [ceil(N/128), ceil(K/128)]) or in 1x128
groups along K (the wgrad pair, scale [N, ceil(K/128)]). The three GEMMs of a linear all fit this one shape:
fprop x @ W^T, dgrad dy @ (W^T)^T, wgrad dy^T @ (x^T)^T with both wgrad operands grouped along tokens.

Kernels (`Kernel`):
  reference  exact and batch-invariant anywhere (CPU tests and CPU runs): per 128-wide K block the FP8 x FP8
             dot products are exact in float64 (each E4M3 product has <= 8 significant bits and spans 2^-18 ..
             2^18, so 128 of them sum exactly in 53 bits; E5M2's wider range can round, in extreme mixes only),
             then scaled and summed over K blocks in increasing order, rounded once to out_dtype.
  emulated   both operands dequantized to fp32, one fp32 matmul: within fp32 rounding of `reference`, several
             times faster on a CPU, not batch-invariant (CPU GEMM libraries block by M). AUTO's CPU backward.
  triton     `triton_gemm`: fixed K order, one FP32 chain over K per output (`segment_kb`), so a row has the
             same bits at any M; on Hopper Gluon launches make the same additions (same bits), faster, and with
             AUTO above decode sizes pinned cuBLAS does (same bits again, faster still).
  cublas     torch._scaled_mm blockwise on Hopper; its algorithm choice depends on M, so it is not
             batch-invariant. M is zero-padded to a multiple of 16, ceil(K/128) to a multiple of 4 and N
             to a multiple of 128 (copies, only for shapes that need them).
  cublas_pinned  the same cuBLASLt GEMM on operands padded the same way, with one algorithm (no split-K)
             pinned per shape (`cublas_pinned`): batch-invariant at cuBLAS speed for training sizes; under 16
             rows and at decode sizes where Gluon takes the shape, the Triton/Gluon kernel with one K segment,
             which makes the same additions (same bits, faster there). With one segment for every weight
             (`triton_gemm.segment_kb`) its bits are AUTO Triton's. On request only.
  deep_gemm  DeepGEMM's fp8_gemm_nt (block weights only). On Hopper its bits are cuBLAS's (measured), so where
             it is installed AUTO launches it in place of pinned cuBLAS and cuBLAS above decode sizes
             (`_deep_gemm_gives_cublas_bits`); by name it is never AUTO's numerics.
Which kernel's numerics run is decided by `capabilities.resolve_kernel` (the kernel table), never here. Here only
the launch that makes them: where two launches give the same bits (GPU-tested), the faster one
(`_triton_bits_from_pinned`, `_pinned_bits_from_triton`), as `triton_gemm` hands its rows to Gluon.
"""

from __future__ import annotations

import functools
import warnings

import torch

from precision_engine.errors import OperandError, UnsupportedError
from precision_engine.numerics import custom_ops, elf
from precision_engine.numerics.capabilities import (CUBLAS_MIN_CUDA, CUBLAS_MIN_TORCH, SCALE_BLOCK, SMALL_M_MAX,
                                                    WEIGHT_BLOCK, DeviceInfo, Gemm, resolve_kernel)
from precision_engine.numerics.contract import TRITON_INTERPRET, Quantized, fp8_dtype
from precision_engine.numerics.cuda_context import make_context_current
from precision_engine.numerics.formats import Granularity, Kernel
# cuBLAS (13.0, H200) refuses blockwise scaling unless M is a multiple of 4 (M=1, 2, 7, 15, 17, 33 refused;
# 4, 8, 16, 24, 32, 64 accepted) and returned wrong results at K=320, where the scales' leading dimension
# ceil(K/128) = 3; both are zero-padded here (a copy). Training sizes and the 8B shapes need none.
CUBLAS_M_ALIGN = 16
CUBLAS_KBLOCK_ALIGN = 4


def fp8_gemm(
    a: Quantized,
    b: Quantized,
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    kernel: Kernel = Kernel.AUTO,
    gemm: Gemm = Gemm.FPROP,
    batch_invariant: bool = True,
) -> torch.Tensor:
    """dequant(a) @ dequant(b)^T -> [M, N] in out_dtype, on the kernel `capabilities.resolve_kernel` picks for
    this device, GEMM and M. Raises OperandError for operands it cannot take, UnsupportedError for a kernel the
    device cannot run."""
    b_scale_rows = _check_operands(a, b)
    if out_dtype not in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        raise OperandError(f"fp8_gemm: out_dtype {out_dtype}; expected bfloat16, float16, float32 or float64")
    if a.data.shape[1] == 0:  # an empty sum, which no launch below takes (cuBLAS, DeepGEMM and Triton tile K)
        return torch.zeros((a.data.shape[0], b.data.shape[0]), dtype=out_dtype, device=a.data.device)
    if custom_ops.routes():
        return custom_ops.fp8_gemm(a, b, out_dtype=out_dtype, kernel=kernel.value, gemm=gemm.value,
                                   batch_invariant=batch_invariant)
    requested = kernel
    kernel = resolve_kernel(kernel, device=device_info(a.data.device), m=a.data.shape[0], gemm=gemm,
                            batch_invariant=batch_invariant, dtypes=frozenset({a.fmt.dtype, b.fmt.dtype}))
    if kernel is Kernel.REFERENCE:
        return reference_gemm(a, b, out_dtype=out_dtype)
    if kernel is Kernel.EMULATED:
        return emulated_gemm(a, b, out_dtype=out_dtype)
    if requested is Kernel.AUTO and kernel in (Kernel.TRITON, Kernel.CUBLAS) \
            and _deep_gemm_gives_cublas_bits(a, b, b_scale_rows, out_dtype, one_segment=kernel is Kernel.TRITON):
        out = _auto_deep_gemm(a, b, b_scale_rows, out_dtype)
        if out is not None:
            return out
    if kernel is Kernel.TRITON:
        from precision_engine.numerics.triton_gemm import block_scaled_gemm

        if requested is Kernel.AUTO and _triton_bits_from_pinned(a, b, b_scale_rows):
            try:
                return _cublas_gemm(a, b, b_scale_rows, out_dtype, pinned=True)
            except UnsupportedError:  # no extension here, or no algorithm without split-K: Triton, same bits
                pass
        return block_scaled_gemm(a.data, a.scale, b.data, b.scale, b_scale_rows=b_scale_rows, out_dtype=out_dtype)
    if kernel is Kernel.CUBLAS_PINNED and _pinned_bits_from_triton(a, b, b_scale_rows):
        from precision_engine.numerics.triton_gemm import block_scaled_gemm

        return block_scaled_gemm(a.data, a.scale, b.data, b.scale, b_scale_rows=b_scale_rows, out_dtype=out_dtype,
                                 seg_kb=_cdiv(a.data.shape[1], SCALE_BLOCK))
    if kernel in (Kernel.CUBLAS, Kernel.CUBLAS_PINNED):
        return _cublas_gemm(a, b, b_scale_rows, out_dtype, pinned=kernel is Kernel.CUBLAS_PINNED)
    return _deep_gemm(a, b, b_scale_rows, out_dtype)


def reference_gemm(a: Quantized, b: Quantized, *, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """The exact, batch-invariant GEMM (see the module docstring). Works on any device; slow."""
    b_scale_rows = _check_operands(a, b)
    m, k = a.data.shape
    n = b.data.shape[0]
    a64 = a.data.to(torch.float64)
    b64 = b.data.to(torch.float64)
    sa = a.scale.to(torch.float64)
    sb = b.scale.to(torch.float64).repeat_interleave(b_scale_rows, dim=0)[:n]
    out = torch.zeros((m, n), dtype=torch.float64, device=a.data.device)
    for kb in range(_cdiv(k, SCALE_BLOCK)):
        cols = slice(kb * SCALE_BLOCK, min(k, (kb + 1) * SCALE_BLOCK))
        exact = a64[:, cols] @ b64[:, cols].T  # exact: any summation order gives these bits
        out += exact * sa[:, kb, None] * sb[None, :, kb]
    return out.to(out_dtype)


def emulated_gemm(a: Quantized, b: Quantized, *, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """dequant(a) @ dequant(b)^T with both operands dequantized to fp32 and one fp32 matmul: 3-10x faster than
    `reference_gemm` on a CPU (which pays for float64 and a loop over K blocks), within fp32 rounding of it, and
    not batch-invariant. AUTO runs the backward GEMMs with it off CUDA."""
    b_scale_rows = _check_operands(a, b)
    m, k = a.data.shape
    n = b.data.shape[0]
    a32 = a.data.float() * a.scale.float().repeat_interleave(SCALE_BLOCK, dim=1)[:, :k]
    b_scale = b.scale.float().repeat_interleave(b_scale_rows, dim=0)[:n]
    b32 = b.data.float() * b_scale.repeat_interleave(SCALE_BLOCK, dim=1)[:, :k]
    return (a32 @ b32.T).to(out_dtype)


def transpose_operand(q: Quantized) -> Quantized:
    """Q^T of a 128x128-block operand as a K-major [K, N] operand (dgrad's weight): the same bytes transposed,
    which is exactly Q(W^T) since square blocks transpose into square blocks. Triton on CUDA (torch's copy
    kernel moves single bytes at a fraction of the bandwidth), torch elsewhere."""
    if custom_ops.routes():
        return custom_ops.transpose_operand(q)
    if q.data.is_cuda:
        from precision_engine.numerics.triton_gemm import transpose_bytes

        data = transpose_bytes(q.data)
    else:
        data = q.data.t().contiguous()
    return type(q)(data, q.scale.t().contiguous(), q.fmt)


@functools.cache
def deep_gemm_available() -> bool:
    """Whether a DeepGEMM with the pair API (`fp8_gemm_nt((a, sfa), (b, sfb), d)`, 2.x) imports here, its host
    module taking the C++ runtime from the process (`elf`): one with its own static copy is refused, with a
    warning, since its first GEMM can crash the process where no fallback catches it."""
    try:
        import deep_gemm
    except ImportError:
        return False
    if not hasattr(deep_gemm, "fp8_gemm_nt"):
        return False
    module = getattr(getattr(deep_gemm, "_C", None), "__file__", None)
    try:
        static = module is not None and not elf.links_cxx_runtime(module)
    except (OSError, ValueError):  # not an ELF file we can read: nothing known against it
        static = False
    if static:
        warnings.warn(f"DeepGEMM's {module} links no shared libstdc++ (the C++ runtime built in statically): its "
                      "first GEMM crashed the process in std::regex on the H200 image, so it is not used; AUTO runs "
                      "cuBLAS's launch of the same bits. Rebuild it with a g++ that links libstdc++ dynamically "
                      "(scripts/build_deep_gemm.py, README \"DeepGEMM\")", RuntimeWarning, stacklevel=2)
    return not static


@functools.cache
def device_info(device: torch.device) -> DeviceInfo:
    """What `resolve_kernel` needs to know about `device` (cached: a device's facts do not change)."""
    if device.type != "cuda":
        return DeviceInfo(device.type, interpreter=TRITON_INTERPRET)
    return DeviceInfo(
        "cuda",
        capability=torch.cuda.get_device_capability(device),
        interpreter=TRITON_INTERPRET,
        cublas_blockwise=_version(torch.__version__) >= CUBLAS_MIN_TORCH
        and _version(torch.version.cuda or "0") >= CUBLAS_MIN_CUDA,
        deep_gemm=deep_gemm_available(),
    )


def _version(text: str) -> tuple[int, ...]:
    """'2.13.0+cu130' -> (2, 13); '12.9' -> (12, 9)."""
    return tuple(int(part) for part in text.split("+")[0].split(".")[:2] if part.isdigit())


def _check_operands(a: Quantized, b: Quantized) -> int:
    """Validate dtypes, devices, shapes and scale granularities; return how many rows of b share a scale row (128
    or 1). Bytes of another dtype would be read as FP8 all the same: wrong numbers, not an error."""
    for name, operand in (("a", a), ("b", b)):
        if not operand.fmt.is_quantized or operand.data.dtype != fp8_dtype(operand.fmt):
            raise OperandError(f"fp8_gemm: operand {name} holds {operand.data.dtype} data, its format is "
                               f"{operand.fmt.describe()}; expected the bytes a quantizer of that format made")
        if operand.scale.dtype != torch.float32:
            raise OperandError(f"fp8_gemm: operand {name}'s scales are {operand.scale.dtype}, expected float32")
    devices = {t.device for t in (a.data, a.scale, b.data, b.scale)}
    if len(devices) > 1:
        raise OperandError(f"fp8_gemm: operands and scales on more than one device: {sorted(map(str, devices))}")
    if a.data.dim() != 2 or b.data.dim() != 2:
        raise OperandError(f"fp8_gemm takes 2-D operands, got {tuple(a.data.shape)} and {tuple(b.data.shape)}")
    m, k = a.data.shape
    n, kb_ = b.data.shape
    if k != kb_:
        raise OperandError(f"fp8_gemm: K differs, a is [{m}, {k}] and b is [{n}, {kb_}]")
    kblocks = _cdiv(k, SCALE_BLOCK)
    if not _is_group128(a.fmt) or tuple(a.scale.shape) != (m, kblocks):
        raise OperandError(
            f"fp8_gemm: operand a must be 1x128 groups along K with scale [{m}, {kblocks}]; "
            f"got {a.fmt.describe()} with scale {tuple(a.scale.shape)}"
        )
    if b.fmt.granularity is Granularity.BLOCK and b.fmt.block == WEIGHT_BLOCK:
        rows = SCALE_BLOCK
    elif _is_group128(b.fmt):
        rows = 1
    else:
        raise OperandError(
            f"fp8_gemm: operand b must be 128x128 blocks or 1x128 groups, got {b.fmt.describe()}"
        )
    if tuple(b.scale.shape) != (_cdiv(n, rows), kblocks):
        raise OperandError(
            f"fp8_gemm: b scale must be [{_cdiv(n, rows)}, {kblocks}], got {tuple(b.scale.shape)}"
        )
    return rows


def _is_group128(fmt) -> bool:
    return fmt.is_quantized and fmt.granularity is Granularity.GROUP and fmt.group == SCALE_BLOCK


def _cublas_gemm(a: Quantized, b: Quantized, b_scale_rows: int, out_dtype: torch.dtype, *, pinned: bool
                 ) -> torch.Tensor:
    """torch._scaled_mm (or, `pinned`, `cublas_pinned.gemm`) on `_cublas_operands`' layouts."""
    m, n = a.data.shape[0], b.data.shape[0]
    a_data, a_scale, b_data, scale_b = _cublas_operands(a, b, b_scale_rows)
    if pinned:
        from precision_engine.numerics import cublas_pinned

        out = cublas_pinned.gemm(a_data, a_scale, b_data, scale_b, w_blocks=b_scale_rows == SCALE_BLOCK,
                                 out_dtype=out_dtype)
    else:
        out = torch._scaled_mm(a_data, b_data.t(), scale_a=a_scale, scale_b=scale_b, out_dtype=out_dtype)
    return out[:m, :n] if out.shape != (m, n) else out


def _cublas_operands(a: Quantized, b: Quantized, b_scale_rows: int
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, a's scales, b, b's scales) in the blockwise layouts cuBLASLt reads (recorded in DESIGN.md); no copies
    for aligned shapes.

    a is [M, K] row-major, b [N, K] row-major (torch._scaled_mm takes b^T viewed column-major); a's scales are
    M-major (a [M, K/128] view with strides (1, M)); b's are b.scale^T: [K/128, N/128] with strides (1, K/128)
    for blocks, [K/128, N] contiguous for groups. cuBLAS also needs M a multiple of 16 and ceil(K/128) a multiple
    of 4 (seen on an H200 with cuBLAS 13.0: M=1, 7, 17 are refused; K=320 gives wrong results); other shapes are
    zero-padded here, scales padded with 1, and the product's rows and columns past [M, N] are to be dropped.
    """
    m, k = a.data.shape
    n = b.data.shape[0]
    kblocks = _cdiv(k, SCALE_BLOCK)
    m_pad, kb_pad = _round_up(m, CUBLAS_M_ALIGN), _round_up(kblocks, CUBLAS_KBLOCK_ALIGN)
    n_pad = _round_up(n, SCALE_BLOCK) if b_scale_rows == SCALE_BLOCK else _round_up(n, 16)
    k_pad = kb_pad * SCALE_BLOCK
    a_data = _pad_fp8(a.data, m_pad, k_pad).contiguous()
    b_data = _pad_fp8(b.data, n_pad, k_pad).contiguous()
    if (m_pad, kb_pad) == (m, kblocks) and a.scale.stride() == (1, m):  # M-major with no gaps (not a slice)
        a_scale = a.scale
    else:
        a_scale = _padded_ones(kb_pad, m_pad, a.scale).t()
        a_scale[:m, :kblocks] = a.scale
    if b_scale_rows == SCALE_BLOCK:
        b_scale = b.scale
        if b_scale.shape != (n_pad // SCALE_BLOCK, kb_pad) or not b_scale.is_contiguous():
            b_scale = _padded_ones(n_pad // SCALE_BLOCK, kb_pad, b.scale)
            b_scale[: b.scale.shape[0], :kblocks] = b.scale
        scale_b = b_scale.t()
    else:
        scale_b = b.scale.t()
        if scale_b.shape != (kb_pad, n_pad) or not scale_b.is_contiguous():
            scale_b = _padded_ones(kb_pad, n_pad, b.scale)
            scale_b[:kblocks, :n] = b.scale.t()
    return a_data, a_scale, b_data, scale_b


def _triton_bits_from_pinned(a: Quantized, b: Quantized, b_scale_rows: int) -> bool:
    """Where AUTO's Triton bits come faster from pinned cuBLAS: above decode sizes, for weights whose K is one
    segment (`triton_gemm.segment_kb`: all of them), whose sums are then the pinned algorithm's (see
    `_pinned_bits_from_triton`): its GEMM runs 1.58-1.72x BF16 at 8192 tokens, the Gluon kernel's 1.22-1.45x.
    Only weights cuBLAS takes as they are: padding one would copy it on every call. Where the extension does not
    build, never: the call would pad the activations for nothing before it is refused."""
    if a.data.shape[0] <= SMALL_M_MAX or not _measured_identity(a, b_scale_rows):
        return False
    if {a.data.dtype, b.data.dtype} != {torch.float8_e4m3fn} or not device_info(a.data.device).cublas_blockwise:
        return False
    from precision_engine.numerics import cublas_pinned

    n, k = b.data.shape
    unpadded = n % SCALE_BLOCK == 0 and k % (SCALE_BLOCK * CUBLAS_KBLOCK_ALIGN) == 0
    return unpadded and _one_segment(n, k) and cublas_pinned.builds()


def _one_segment(n: int, k: int) -> bool:
    """Whether AUTO Triton sums this weight's K in one segment (`triton_gemm.segment_kb`: every weight since the
    sixteenth session), the form whose bits pinned cuBLAS and DeepGEMM give."""
    from precision_engine.numerics.triton_gemm import segment_kb

    return segment_kb(n, k) >= _cdiv(k, SCALE_BLOCK)


def _deep_gemm_gives_cublas_bits(a: Quantized, b: Quantized, b_scale_rows: int, out_dtype: torch.dtype, *,
                                 one_segment: bool) -> bool:
    """Where DeepGEMM, when installed, makes AUTO's bits faster above decode sizes: its SM90 1x128 x 128x128
    kernel gave torch._scaled_mm's and the pinned algorithm's bits on every 8B shape at 8192 rows, fprop and
    dgrad, and a row the same bits at M = 1 .. 8192 (two shapes), 6-20% faster than cuBLAS (1.66-1.92x BF16
    for the GEMM, cuBLAS 1.38-1.72x; H200, eighteenth session, BENCHMARKS.md). So it stands in for pinned
    cuBLAS under a batch-invariant forward (`one_segment`: where Triton's bits are pinned cuBLAS's) and for
    cuBLAS elsewhere. Hopper only (its SM100 kernels take UE8M0 scales: other numerics), E4M3 with 128x128
    weight blocks, BF16 out, K-major operands, N and K multiples of 128. Decode sizes keep their kernels
    (DeepGEMM's speed there is unmeasured). Never again after a DeepGEMM failure (`_auto_deep_gemm`)."""
    if _deep_gemm_failure or not device_info(a.data.device).runs(Kernel.DEEP_GEMM):
        return False
    if b_scale_rows != SCALE_BLOCK or out_dtype != torch.bfloat16:
        return False
    n, k = b.data.shape
    operands = (a.data, b.data)
    return (a.data.shape[0] > SMALL_M_MAX and n % SCALE_BLOCK == 0 and k % SCALE_BLOCK == 0
            and all(t.dtype == torch.float8_e4m3fn and t.stride(1) == 1 and t.stride(0) % 16 == 0 for t in operands)
            and (not one_segment or _one_segment(n, k)))


def _measured_identity(a: Quantized, b_scale_rows: int) -> bool:
    """Whether the one-segment Triton kernel and pinned cuBLAS were measured bitwise equal for these operands:
    128x128 weight blocks, on Hopper (wgmma)."""
    capability = device_info(a.data.device).capability
    return b_scale_rows == SCALE_BLOCK and capability is not None and capability[0] == 9


def _pinned_bits_from_triton(a: Quantized, b: Quantized, b_scale_rows: int) -> bool:
    """Where `cublas_pinned`'s bits come faster from the Triton/Gluon kernel with one K segment. That kernel then
    makes the pinned algorithm's additions: one FP32 chain, chain = fma(block product, sa * sb, chain) per 128-wide
    K block; bitwise equal on an H200 for every 8B shape at M = 1 .. 8192, BF16 and FP32 out (fifteenth session,
    BENCHMARKS.md). Measured for 128x128 weight blocks on Hopper only, so only those take it:
    - below cuBLAS's 16-row minimum, where cuBLAS pays for padding copies (M = 1: 0.40-1.14x BF16, the Triton
      launch 0.81-1.88x);
    - up to decode sizes where a Gluon launch takes the shape: the chain launch for narrow weights (1.06-1.55x
      BF16 against cuBLAS's 0.80-1.38x, sixteenth session) and for weights of >= 14336 rows at few tokens,
      whole tiles for those above (1.61-1.68x at M = 64 against 1.39-1.54x)."""
    if not _measured_identity(a, b_scale_rows):
        return False
    from precision_engine.numerics.triton_gemm import one_segment_decode_runs_gluon

    return a.data.shape[0] < CUBLAS_M_ALIGN or one_segment_decode_runs_gluon(a.data, b.data)


def _padded_ones(rows: int, cols: int, like: torch.Tensor) -> torch.Tensor:
    return torch.ones((rows, cols), dtype=torch.float32, device=like.device)


_deep_gemm_failure: list[str] = []  # AUTO's first DeepGEMM failure in this process: it launches DeepGEMM no more


def _auto_deep_gemm(a: Quantized, b: Quantized, b_scale_rows: int, out_dtype: torch.dtype) -> torch.Tensor | None:
    """DeepGEMM for AUTO, or None (with one warning) where it fails: the caller's own launch gives the same bits.
    DeepGEMM compiles each kernel at its first call and needs nvcc (or NVRTC) for it; an install without one
    refuses at run time, which must not stop a training run that cuBLAS can finish bit for bit."""
    try:
        return _deep_gemm(a, b, b_scale_rows, out_dtype)
    except RuntimeError as err:
        _deep_gemm_failure.append(f"{type(err).__name__}: {str(err)[:300]}")
        warnings.warn(f"DeepGEMM failed ({_deep_gemm_failure[0]}); AUTO runs cuBLAS's launch of the same bits from "
                      "now on (`python -m pytest -m gpu tests/numerics/gpu/test_deep_gemm_gpu.py` checks an install)",
                      RuntimeWarning, stacklevel=3)
        return None


def _deep_gemm(a: Quantized, b: Quantized, b_scale_rows: int, out_dtype: torch.dtype) -> torch.Tensor:
    """DeepGEMM's NT kernel (1x128 activations x 128x128 weights, BF16 out). It reads a's scales M-major, as
    ours are (it copies them only where M is not a multiple of 4), b's [N/128, K/128] row-major."""
    import deep_gemm

    if b_scale_rows != SCALE_BLOCK or out_dtype != torch.bfloat16 or a.data.shape[1] % SCALE_BLOCK:
        raise OperandError("kernel deep_gemm takes 128x128 block weights, K a multiple of 128 and bf16 out")
    out = torch.empty((a.data.shape[0], b.data.shape[0]), dtype=out_dtype, device=a.data.device)
    make_context_current(a.data.device)  # DeepGEMM encodes and launches through the driver (`cuda_context`)
    deep_gemm.fp8_gemm_nt((a.data, a.scale), (b.data, b.scale.contiguous()), out)
    return out


@torch.library.custom_op("precision_engine::fp8_gemm", mutates_args=())
def _fp8_gemm_op(a: torch.Tensor, a_scale: torch.Tensor, a_fmt: str, b: torch.Tensor, b_scale: torch.Tensor,
                 b_fmt: str, out_dtype: torch.dtype, kernel: str, gemm: str, batch_invariant: bool) -> torch.Tensor:
    """`fp8_gemm` as one op for torch.compile (`custom_ops`); its output contiguous, as the fake's."""
    out = fp8_gemm(Quantized(a, a_scale, custom_ops.parse_format(a_fmt)),
                   Quantized(b, b_scale, custom_ops.parse_format(b_fmt)), out_dtype=out_dtype, kernel=Kernel(kernel),
                   gemm=Gemm(gemm), batch_invariant=batch_invariant)
    return out.contiguous()


@torch.library.custom_op("precision_engine::transpose_operand", mutates_args=())
def _transpose_operand_op(data: torch.Tensor, scale: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    q = transpose_operand(Quantized(data, scale, custom_ops.parse_format(fmt)))
    # The scales of one block row or column are their own transpose, and `.t().contiguous()` hands back the
    # input itself, which an op may not return: a copy then.
    return tuple(out.clone() if out.untyped_storage().data_ptr() == given.untyped_storage().data_ptr() else out
                 for out, given in ((q.data, data), (q.scale, scale)))


_fp8_gemm_op.register_fake(custom_ops.fake_fp8_gemm)
_transpose_operand_op.register_fake(custom_ops.fake_transpose_operand)


def _pad_fp8(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Zero-pad an FP8 matrix (FP8 zero is the all-zero byte); returns x itself when already that shape."""
    if tuple(x.shape) == (rows, cols):
        return x
    padded = torch.zeros((rows, cols), dtype=torch.uint8, device=x.device)
    padded[: x.shape[0], : x.shape[1]] = x.view(torch.uint8)
    return padded.view(x.dtype)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _cdiv(a, b) * b
