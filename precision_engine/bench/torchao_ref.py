"""torchao's blockwise FP8 training linear, timed beside ours; imported lazily, and only where it can run.

What a torchao user gets: `quantize_(model, Float8BlockwiseLinearConfig())` replaces each nn.Linear with
`Float8BlockwiseLinear.from_float(linear)` (torchao 0.18, torchao/prototype/blockwise_fp8_training/linear.py):
the same Parameter, x quantized 1x128 and W 128x128 on every call (there is no weight cache, so a forward
re-quantizes W too), all three GEMMs in FP8 through `F.scaled_mm` (cuBLAS). torchao's own benchmark also times
its Triton GEMMs (`use_triton=True`, a constructor argument that `from_float` leaves at False): `VARIANTS` has both.
The GEMM alone is `triton_fp8_gemm_1x128_128x128`, a callable op, fed by torchao's own quantizers; its cuBLAS path
is the `torch._scaled_mm` call that `bench kernels` times for us already, so it gets no row of its own.

Its kernels are Triton and cuBLAS blockwise FP8 on SM90+ (`__init__` asserts it), so on a CPU or an older GPU
`unavailable` says why and the benches print "-" with that note.

Its first calls take minutes on a fresh machine, and not through torch.compile (torchao 0.18's blockwise path has
none; the ops are `triton_op`s run eagerly): every one of its Triton kernels (kernels.py) is `@triton.autotune`d
without a disk cache, each config compiled and then benchmarked (`do_bench`, ~125 ms) on the first call per key:
  the activation quantizers act_quant_lhs, act_quant_rhs, act_quant_transposed_lhs: 45 configs each
    (`quant_kernel_configs_with_groups`: NUM_GROUPS 2..128 x 3 warp counts x 3 stage counts), keyed by K;
  the weight quantizers weight_quant_rhs, weight_quant_transposed_rhs: 4 configs each, keyed by W's shape;
  the GEMMs (use_triton) gemm_1x128_128x128 (fprop, dgrad) and gemm_1x128_128x1 (wgrad): 6 configs each
    (64/128/256 square tiles x 4/8 warps), keyed by (N, K) and by (M, N, K): wgrad's K is the token count.
Those sizes are constexpr, so each new feature size or token count compiles every config again. Compiled offline
for sm_90 on a 2-core CPU, a quantizer key cost 39 s (45 configs) and a GEMM key 34 s, 26 s of it the 256 x 256
tile with 4 warps. A training step at a new (N, K) tunes up to 4 activation-quantizer keys (x's K twice, dy's N
twice), 2 weight-quantizer keys and, with the Triton GEMMs, up to 3 GEMM keys: minutes per shape, which
`bench linear` records as each torchao variant's `_warmup_s` (the quantizers under whichever variant runs first).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import warnings

import torch
from torch import nn

# bench column -> use_triton: the default (cuBLAS) route and the Triton GEMMs
VARIANTS = {"torchao": False, "torchao_triton": True}
_MODULE = "torchao.prototype.blockwise_fp8_training"


def version() -> str | None:
    """The installed torchao's version (read from its metadata, nothing imported), None when absent."""
    try:
        return importlib.metadata.version("torchao")
    except importlib.metadata.PackageNotFoundError:
        return None


def unavailable(device: str | torch.device = "cuda", *, trial: bool = True) -> str | None:
    """Why torchao's blockwise FP8 linear cannot run on `device` here, as a row's note; None when it can.
    Without CUDA it answers before importing torchao (seconds of import for a row that cannot run). `trial` runs
    its GEMM and a forward and backward at 128 x 128, so that a torchao that imports but does not run with this
    torch / triton fails here, not mid-bench; on a fresh machine that trial alone autotunes 149 Triton configs
    at sizes no bench times (minutes), so a caller that turns each call's failure into a note passes False."""
    if importlib.util.find_spec("torchao") is None:
        return "torchao not importable (not installed)"
    if torch.device(device).type != "cuda" or not torch.cuda.is_available():
        return "torchao Float8BlockwiseLinear needs CUDA (SM90+ Triton and cuBLAS blockwise FP8 kernels)"
    try:
        _import()
    except Exception as err:  # noqa: BLE001 (absent prototype, or a torchao built for another torch)
        return f"torchao not importable ({type(err).__name__}: {str(err)[:200]})"
    capability = torch.cuda.get_device_capability(torch.device(device))
    if capability < (9, 0):
        return f"torchao Float8BlockwiseLinear needs SM90+, this GPU is sm_{capability[0]}{capability[1]}"
    if not trial:
        return None
    try:
        x = torch.randn(128, 128, device=device, dtype=torch.bfloat16)
        gemm(*gemm_operands(x, x))
        blockwise_linear(nn.Linear(128, 128, bias=False, device=device, dtype=torch.bfloat16))(x).sum().backward()
    except Exception as err:  # noqa: BLE001 (any failure is the note)
        return f"torchao Float8BlockwiseLinear fails here ({type(err).__name__}: {str(err)[:200]})"
    return None


def blockwise_linear(linear: nn.Linear, *, use_triton: bool = False) -> nn.Module:
    """`Float8BlockwiseLinear.from_float(linear)`, sharing `linear`'s weight; `use_triton` picks its GEMMs."""
    module = _import().linear.Float8BlockwiseLinear.from_float(linear)
    module.use_triton = use_triton  # read by forward; from_float has no argument for it
    return module


def gemm_operands(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """x [M, K] and weight [N, K] quantized by torchao's own kernels, in the layouts its Triton GEMM takes."""
    kernels = _import().kernels
    x_fp8, x_scale = kernels.triton_fp8_blockwise_act_quant_lhs(x, 128)
    w_t_fp8, w_t_scale = kernels.triton_fp8_blockwise_weight_quant_transposed_rhs(weight, block_size=128)
    return x_fp8, w_t_fp8, x_scale, w_t_scale


def gemm(x_fp8, w_t_fp8, x_scale, w_t_scale) -> torch.Tensor:
    """torchao's Triton fprop GEMM on `gemm_operands`' output: [M, N] in BF16."""
    return _import().kernels.triton_fp8_gemm_1x128_128x128(x_fp8, w_t_fp8, x_scale, w_t_scale,
                                                          out_dtype=torch.bfloat16)


def _import():
    """The prototype package with its `linear` and `kernels` modules (importing torchao warns about its
    optional C++ extensions; those warnings are not ours to show)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        package = importlib.import_module(_MODULE)
        importlib.import_module(f"{_MODULE}.linear")
        importlib.import_module(f"{_MODULE}.kernels")
    return package
