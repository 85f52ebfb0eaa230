"""FP8 linear layer with the Jet-RL dataflow: every GEMM of forward and backward in FP8.

    fprop  y  = Q(x)[1x128]  @ Q(W)[128x128]^T
    dgrad  dx = Q(dy)[1x128] @ Q(W)[128x128]          (the same cached weight bytes, which the quantizer also
                                                      writes transposed in its one pass per weight version)
    wgrad  dW = Q(dy)[128x1]^T @ Q(x)[128x1]          (both re-quantized along tokens; x from the saved FP8
                                                      activation, not from a BF16 copy; with the spec's
                                                      `wgrad_input` in 128x128 blocks, Q(x)^T[128x128])

Saved for backward: x in FP8 with its 1x128 scales (half the bytes of BF16), plus the compute-dtype x only when
the spec leaves `wgrad_operands` unset. A spec whose `grad_output` / `wgrad_operands` is None runs that GEMM in
the compute dtype against the master weight (straight-through, as torchao does): the rollout-only policies.

The master weight stays in its own dtype (BF16 or FP32) and is quantized once per weight version: rollout
never re-quantizes, and the bytes are those `to_block_fp8` exports. The cache's owner says when the weight
changed: `invalidate_weight_cache()` (or `rewrite.invalidate_weight_caches(model)` for a whole model) after
every optimizer step. In-place writes through the Parameter, new storages and every torch.optim step over the
weight (fused kernels included, which write without bumping the version counter) are also noticed
(`weight_cache_key`); writes through `.data` are not, so the trainer's call stays the rule.
Under torch.compile the weight is quantized inside the graph on every call instead (no Python-side cache to
break the graph), which needs no invalidation. So is a training forward captured into a CUDA graph
(`torch.cuda.graph`, `make_graphed_callables`): a cached Q(W) would be frozen into the graph and read stale
after the next optimizer step, so each replay quantizes the weight it reads (once per call: under gradient
accumulation a micro-batch pays a weight read that eager training pays once per step), and the capture leaves
the cache alone; it quantizes the master weight, so bytes pinned by `load_quantized` are not what a captured
training step multiplies. A forward without autograd keeps the cache under capture: the rollout engine's decode
graph reads the cached Q(W) and copies each new weight version into it (`rl.decode`), pinned bytes included.

`Fp8Linear` is an `nn.Linear` (FSDP wrap policies, PEFT and verl's loaders test `isinstance(m, nn.Linear)`), and
its autograd function sees only tensors and the frozen (spec, numerics) pair, never the module. That function
runs one GEMM for 1..n parts whose weights are stacked by rows (`fused_linear` groups q/k/v and gate/up this
way); a single module is the n = 1 case. A caller that has already quantized x (a fused norm -> quant kernel)
hands it over as `x_quantized` and the forward skips its own quantization.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from precision_engine.errors import OperandError, UnsupportedError
from precision_engine.numerics import custom_ops
from precision_engine.numerics.capabilities import Gemm, linear_problems
from precision_engine.numerics.contract import (
    COMPUTE_TORCH_DTYPE,
    Quantized,
    as_dtype,
    capturing_cuda_graph,
    fp8_dtype,
)
from precision_engine.numerics.formats import Granularity, LinearSpec, QuantFormat
from precision_engine.numerics.gemm import fp8_gemm, transpose_operand
from precision_engine.numerics.quantize import (
    check_finite,
    dequantize,
    part_views,
    quantize_blocks,
    quantize_blocks_stacked,
    quantize_rows_1xG,
    quantize_rows_and_tokens_transposed,
    quantize_tokens_transposed,
    requantize_blocks_transposed,
    requantize_tokens_transposed,
)
from precision_engine.numerics.specs import NonFinite, NumericsSpec


# Attributes a weight carries for its cache key (in the tensor's __dict__, so deepcopy and swap_tensors move them)
_TOKEN = "_precision_engine_token"  # which tensor object it is: a number, which weights_only torch.load takes
_tokens = itertools.count()
_STEPS = "_precision_engine_steps"  # torch.optim steps over it (`_count_optimizer_step`)
_optimizer_hook = None


def _count_optimizer_step(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    """After any torch.optim step, count it on each parameter it holds whose Q(W) may be cached: fused kernels
    (AdamW(fused=True)) write without bumping the version counter. Other models' weights are not touched."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            if _TOKEN in param.__dict__:
                param.__dict__[_STEPS] = param.__dict__.get(_STEPS, 0) + 1


class WeightVersion:
    """What a cached Q(W) was made from: equal only for the same weight object at the same version counter,
    optimizer step count, address, device and dtype. So it changes with an in-place op through autograd (version
    counter), with any torch.optim step over the weight, fused kernels included (a post-step hook counts them),
    and with a new Parameter or tensor (FSDP-style replacement) even where the allocator hands it the address the
    old one freed, a new one starting at version 0 as the old did: a number the weight carries tells them
    apart (an attribute, where a weak reference made `torch.utils.swap_tensors` refuse the weight). Writes it
    cannot see (`weight.data.mul_(...)`, `weight.data = ...`) need `invalidate_weight_cache()`."""

    __slots__ = ("_state",)

    def __init__(self, weight: torch.Tensor) -> None:
        global _optimizer_hook
        if _optimizer_hook is None:
            _optimizer_hook = register_optimizer_step_post_hook(_count_optimizer_step)
        if _TOKEN not in weight.__dict__:
            weight.__dict__[_TOKEN] = next(_tokens)
        self._state = (weight.__dict__[_TOKEN], weight.__dict__.get(_STEPS, 0), weight._version, weight.data_ptr(),
                       weight.device, weight.dtype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WeightVersion) and self._state == other._state

    __hash__ = None  # compared, never a dict key


def weight_cache_key(weight: torch.Tensor) -> WeightVersion:
    """The current `WeightVersion` of `weight`: a cache made from it is current while this compares equal."""
    return WeightVersion(weight)


class Fp8Linear(nn.Linear):
    """nn.Linear whose GEMMs run in FP8 per a `LinearSpec`. Shares its Parameters with the Linear it wraps."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        spec: LinearSpec,
        *,
        bias: bool = True,
        numerics: NumericsSpec | None = None,
        device=None,
        dtype=None,
    ) -> None:
        if not isinstance(spec, LinearSpec):  # Fp8Linear(in, out, True), as nn.Linear is rebuilt
            raise TypeError(f"Fp8Linear(in_features, out_features, spec, *, bias=...): spec must be a LinearSpec, "
                            f"got {type(spec).__name__}")
        problems = linear_problems(spec, backward=True)
        if problems:  # the same table `precision validate --model` reports from, so validate caught it first
            raise UnsupportedError(f"Fp8Linear cannot run this spec: {problems[0].message} (hint: {problems[0].hint})")
        if in_features < 1 or out_features < 1:  # `validate --model` reports these modules first
            raise UnsupportedError("Fp8Linear needs in_features, out_features >= 1, got "
                                   f"({in_features}, {out_features}) (hint: exclude empty Linears from FP8 rules)")
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.spec = spec
        self.numerics = numerics or NumericsSpec()
        self._w_cache: tuple[WeightVersion, Quantized] | None = None
        self._wt_cache: tuple[torch.Tensor, Quantized] | None = None
        self._group_cache = None  # fused_linear's stacked Q(W) of a group this module leads (a plain attribute)

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, spec: LinearSpec, *, numerics: NumericsSpec | None = None
    ) -> Fp8Linear:
        """Wrap `linear` without copying: the new module holds the same Parameter objects (same state_dict)."""
        new = cls(
            linear.in_features, linear.out_features, spec,
            bias=linear.bias is not None, numerics=numerics, device="meta",
        )
        new.weight = linear.weight
        new.bias = linear.bias
        return new

    def to_linear(self) -> nn.Linear:
        """The plain nn.Linear over the same Parameters (undoes the rewrite)."""
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, device="meta")
        linear.weight = self.weight
        linear.bias = self.bias
        return linear

    def invalidate_weight_cache(self) -> None:
        """Forget Q(W): the next forward re-quantizes. Call after every optimizer step that wrote the weight."""
        self._w_cache = None
        self._wt_cache = None
        self._group_cache = None

    def __getstate__(self) -> dict:
        """Pickled without Q(W), made again from the weight on the next forward: torch cannot pickle FP8
        tensors."""
        return {**super().__getstate__(), "_w_cache": None, "_wt_cache": None, "_group_cache": None}

    def quantized_weight(self) -> Quantized:
        """Q(W) in 128x128 blocks, cached until invalidated or the weight visibly changes (`weight_cache_key`)."""
        return self._quantized_weights(dgrad=False)[0]

    def _quantize_weight(self, out: Quantized | None = None, out_t: Quantized | None = None) -> Quantized:
        """Q(W) of the current weight (into `out`, and Q(W)^T into `out_t`, when given), checked per
        `numerics.nonfinite`. Never inference tensors, even when rollout runs under torch.inference_mode(): the
        training step on the same weights saves the cached Q(W) for backward, which inference tensors refuse."""
        with torch.inference_mode(False):
            wq = quantize_blocks(self.weight.detach(), self.spec.weight, out=out, out_t=out_t)
        check_finite(wq, self.numerics.nonfinite, "weight")
        return wq

    @torch.no_grad()
    def load_quantized(self, weight_fp8: torch.Tensor, weight_scale_inv: torch.Tensor) -> None:
        """Install weights that arrive already quantized (an exported checkpoint, a trainer's weight sync), so
        the forward multiplies with exactly these bytes.

        Refused (OperandError): another FP8 dtype, scales not float32, shapes that do not fit, a finite scale
        <= 0 (no quantizer makes one). NaN/Inf scales and NaN FP8 bytes go through `numerics.nonfinite`, as a
        quantized weight of this module's own would: error raises NonFiniteError, warn warns, propagate loads.

        The master weight becomes their dequantization, for code that reads `weight`; quantizing that again
        need not give the same bytes (a dequantized value is rarely exact in BF16), so the given bytes are
        pinned as Q(W) until the weight next changes.
        """
        fmt = self.spec.weight
        expected_scale = tuple(-(-n // b) for n, b in zip(self.weight.shape, fmt.block))
        if weight_fp8.dtype != fp8_dtype(fmt):
            raise OperandError(f"load_quantized takes {fmt.describe()} weights only, got {weight_fp8.dtype}")
        if weight_scale_inv.dtype != torch.float32:
            raise OperandError(f"load_quantized takes float32 scales only, got {weight_scale_inv.dtype}")
        if tuple(weight_fp8.shape) != tuple(self.weight.shape) or tuple(weight_scale_inv.shape) != expected_scale:
            raise OperandError(
                f"quantized weight {tuple(weight_fp8.shape)} with scales {tuple(weight_scale_inv.shape)} does not "
                f"fit a {tuple(self.weight.shape)} weight in {fmt.describe()} blocks (scales {expected_scale})"
            )
        if bool((weight_scale_inv <= 0).any()):
            raise OperandError(f"load_quantized: {int((weight_scale_inv <= 0).sum())} scales are zero or negative")
        device = self.weight.device
        wq = Quantized(weight_fp8.to(device), weight_scale_inv.to(device).contiguous(), fmt)
        check_finite(wq, self.numerics.nonfinite, "loaded weight_scale_inv")
        if NonFinite(self.numerics.nonfinite) is not NonFinite.PROPAGATE:
            check_finite(wq.data.float(), self.numerics.nonfinite, "loaded FP8 weight")
        self.weight.copy_(dequantize(wq, self.weight.dtype))
        self.invalidate_weight_cache()
        self._w_cache = (weight_cache_key(self.weight), wq)

    def _quantized_weight_t(self, wq: Quantized) -> Quantized:
        """Q(W)^T as a K-major [K, N] operand for dgrad (keyed on the bytes of Q(W)), so that no GEMM reads a
        strided FP8 operand: the quantizer's own (`_quantized_weights`), or, for a Q(W) made without it (for
        rollout, or loaded), a transposed copy made once per weight version."""
        if self._wt_cache is None or self._wt_cache[0] is not wq.data:
            self._wt_cache = (wq.data, transpose_operand(wq))
        return self._wt_cache[1]

    def _quantized_weights(self, dgrad: bool) -> tuple[Quantized, Quantized | None]:
        """Q(W) (`quantized_weight`), and Q(W)^T when dgrad runs in FP8: a new weight version gets both from one
        quantizer pass."""
        key = weight_cache_key(self.weight)
        if self._w_cache is None or self._w_cache[0] != key:
            wq, wt = fresh_quantized_weights([self], dgrad)
            self._w_cache = (key, wq)
            self._wt_cache = None if wt is None else (wq.data, wt)  # never the last version's Q(W)^T, kept alive
        wq = self._w_cache[1]
        return wq, self._quantized_weight_t(wq) if dgrad else None

    def _quantize_weight_into(self, out: Quantized, out_t: Quantized | None = None) -> None:
        """Make `out` (this module's rows of a group's stacked Q(W), see fused_linear) its Q(W) for the current
        weight version, so the bytes live once, and `out_t` (its columns of the stacked Q(W)^T), when given, its
        Q(W)^T: a still-current Q(W) is copied there (bytes pinned by `load_quantized` stay the bytes
        multiplied), else the weight is quantized straight into both."""
        key = weight_cache_key(self.weight)
        if self._w_cache is not None and self._w_cache[0] == key:
            current = self._w_cache[1]
            out.data.copy_(current.data)
            out.scale.copy_(current.scale)
            if out_t is not None:
                out_t.data.copy_(current.data.t())
                out_t.scale.copy_(current.scale.t())
        else:
            self._quantize_weight(out, out_t)
        self._w_cache = (key, out)
        self._wt_cache = None

    def _holds_quantized_weight(self, wq: Quantized) -> bool:
        """Whether `wq` is this module's Q(W) for the current weight version."""
        cache = self._w_cache
        return cache is not None and cache[1] is wq and cache[0] == weight_cache_key(self.weight)

    def forward(self, input: torch.Tensor, *, x_quantized: Quantized | None = None) -> torch.Tensor:
        """y = x @ W^T + b in FP8 for x = `input` (nn.Linear's name for it). `x_quantized`: Q(x) in the spec's
        input format, computed by the caller (bitwise what this forward would compute), so the forward does not
        quantize x again."""
        x = input
        recording = torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)
        if torch.compiler.is_compiling():
            wq, wt = quantize_blocks_stacked([self.weight.detach()], self.spec.weight,
                                             transposed=self._dgrad_in_fp8())
        elif recording and capturing_cuda_graph():  # quantized inside the graph (module doc)
            wq, wt = fresh_quantized_weights([self], self._dgrad_in_fp8())
        else:
            wq, wt = self._quantized_weights(self._dgrad_in_fp8())
        return fp8_linear(x, wq, wt, (self.spec, self.numerics), (self.weight,), (self.bias,),
                          x_quantized=x_quantized)

    def _dgrad_in_fp8(self) -> bool:
        """Whether this forward's backward will run dgrad in FP8 (so it needs Q(W)^T): rollout never does."""
        return self.spec.grad_output is not None and torch.is_grad_enabled()

    def extra_repr(self) -> str:
        s = self.spec
        fmts = [f"w={s.weight.describe()}", f"x={s.input.describe()}"]
        fmts.append(f"dy={s.grad_output.describe() if s.grad_output else s.compute.value}")
        fmts.append(f"wgrad={s.wgrad_operands.describe() if s.wgrad_operands else s.compute.value}")
        if s.wgrad_input is not None:
            fmts.append(f"wgrad_x={s.wgrad_input.describe()}")
        return f"{super().extra_repr()}, {', '.join(fmts)}"


def fresh_quantized_weights(parts: Sequence[Fp8Linear], dgrad: bool) -> tuple[Quantized, Quantized | None]:
    """Q(W) of the row stack of `parts`' current weights (one part, or a fused group's), and Q(W)^T when dgrad runs
    in FP8, from one quantizer pass per part into new buffers (`quantize_blocks_stacked`), each part checked per
    its `numerics.nonfinite`; no cache is read or written. Never inference tensors: see
    `Fp8Linear._quantize_weight`."""
    with torch.inference_mode(False):
        wq, wt = quantize_blocks_stacked([p.weight.detach() for p in parts], parts[0].spec.weight, transposed=dgrad)
    for part, view in zip(parts, part_views(wq, [p.out_features for p in parts], 0)):
        check_finite(view, part.numerics.nonfinite, "weight")
    return wq, wt


def fp8_linear(
    x: torch.Tensor,
    wq: Quantized,
    wt: Quantized | None,
    config: tuple[LinearSpec, NumericsSpec],
    weights: tuple[torch.Tensor, ...],
    biases: tuple[torch.Tensor | None, ...],
    *,
    x_quantized: Quantized | None = None,
) -> torch.Tensor:
    """x @ W^T (+ b) -> [..., N] for W the row stack of `weights` (N their summed rows): one FP8 GEMM against
    `wq` = Q(W) (`wt` = Q(W)^T when the backward runs dgrad in FP8, else None), gradients into each weight and
    bias. Every part has a bias or none does. The caller owns the caches; `Fp8Linear.forward` is the one-part
    call."""
    if len({b is None for b in biases}) > 1:
        raise OperandError("fp8_linear: every part has a bias or none does (a zero bias would flip -0 to +0)")
    if x.dim() == 0:
        raise OperandError("fp8_linear: the input is a 0-d tensor; a linear layer needs its features on a last dim")
    if x_quantized is None:
        xq_data = xq_scale = None
    else:
        _check_x_quantized(x, x_quantized, config[0].input)
        xq_data, xq_scale = x_quantized.data, x_quantized.scale
    params = (*weights, *(b for b in biases if b is not None))
    if not (torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in params))):
        return _output(x, xq_data, xq_scale, wq.data, wq.scale, config, biases)[0]  # rollout: nothing to record
    wt_data, wt_scale = (None, None) if wt is None else (wt.data, wt.scale)
    return _Fp8LinearFn.apply(x, xq_data, xq_scale, wq.data, wq.scale, wt_data, wt_scale, config, *weights, *biases)


def _output(x, xq_data, xq_scale, w_data, w_scale, config, biases) -> tuple[torch.Tensor, Quantized]:
    """(y = x @ W^T + b in x's dtype and shape, Q(x)): the forward, recorded by `_Fp8LinearFn` or not at all.
    Calling it straight when nothing needs a gradient also spares rollout the autograd Function's host time,
    and torch.compile (2.11, 2.13) cannot trace that Function's forward under no_grad."""
    spec = config[0]
    x2 = x.reshape(-1, x.shape[-1])
    xq, y = _fprop(x2, None if xq_data is None else Quantized(xq_data, xq_scale, spec.input),
                   Quantized(w_data, w_scale, spec.weight), config)
    if biases[0] is not None:
        y = y + _cat([b.to(COMPUTE_TORCH_DTYPE[spec.compute]) for b in biases])
    # The GEMM computes in the policy's compute dtype; the output takes the dtype nn.Linear's would: autocast's
    # where it is on, else the input's, so an FP32 model without autocast keeps working (the upcast is exact).
    device = x.device.type
    out_dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
    return as_dtype(y.reshape(*x.shape[:-1], y.shape[-1]), out_dtype), xq


def _fprop(x2: torch.Tensor, xq: Quantized | None, wq: Quantized, config: tuple[LinearSpec, NumericsSpec]
           ) -> tuple[Quantized, torch.Tensor]:
    """(Q(x), the fprop GEMM's output in the compute dtype) for rows x2, quantized here unless `xq` is given."""
    spec, numerics = config
    xq = quantize_rows_1xG(x2, spec.input) if xq is None else xq
    check_finite(xq, numerics.nonfinite, "input")
    y = fp8_gemm(xq, wq, out_dtype=COMPUTE_TORCH_DTYPE[spec.compute], kernel=spec.kernel,
                 batch_invariant=numerics.batch_invariant)
    return xq, y


def _check_x_quantized(x: torch.Tensor, xq: Quantized, fmt: QuantFormat) -> None:
    """A handed-over Q(x) must have the layout the forward's own would: x's rows in the spec's input format."""
    rows, k = x.numel() // x.shape[-1], x.shape[-1]
    scale_shape = (rows, -(-k // fmt.group))
    if (xq.fmt != fmt or xq.data.dtype != fp8_dtype(fmt) or tuple(xq.data.shape) != (rows, k)
            or tuple(xq.scale.shape) != scale_shape or xq.data.device != x.device):
        raise OperandError(
            f"x_quantized must be x {tuple(x.shape)} as [{rows}, {k}] {fp8_dtype(fmt)} in {fmt.describe()} with "
            f"scale {scale_shape} on {x.device}; got {xq.fmt.describe()}, {xq.data.dtype} {tuple(xq.data.shape)}, "
            f"scale {tuple(xq.scale.shape)} on {xq.data.device}"
        )


_LEADING_INPUTS = 8  # x, xq_data, xq_scale, w_data, w_scale, wt_data, wt_scale, config: then the parts' params


class _Fp8LinearFn(torch.autograd.Function):
    """Tensors in, plus the frozen (LinearSpec, NumericsSpec) pair: no module state, so torch.compile traces it.

    `params` are the parts' weights, then their biases (None for none): W is their row stack, already in
    `w_data` / `wt_data` as Q(W) / Q(W)^T. One part is an Fp8Linear; n parts share Q(x) and every GEMM, and
    the backward splits dW and db by the parts' rows."""

    @staticmethod
    def forward(ctx, x, xq_data, xq_scale, w_data, w_scale, wt_data, wt_scale, config, *params):
        spec = config[0]
        parts = len(params) // 2
        weights, biases = params[:parts], params[parts:]
        y, xq = _output(x, xq_data, xq_scale, w_data, w_scale, config, biases)

        ctx.config = config
        ctx.x_shape, ctx.x_dtype = x.shape, x.dtype
        ctx.has_bias = biases[0] is not None
        ctx.bias_dtypes = [b.dtype for b in biases] if ctx.has_bias else []
        x_hp = x.reshape(-1, x.shape[-1]).to(COMPUTE_TORCH_DTYPE[spec.compute]) if spec.wgrad_operands is None \
            else None
        ctx.save_for_backward(xq.data, xq.scale, x_hp, wt_data, wt_scale, *weights)
        return y

    @staticmethod
    def backward(ctx, dy):
        # The policy fixes every dtype here: an autocast around the backward would run its fp32 GEMMs in bf16.
        no_autocast = torch.autocast(dy.device.type, enabled=False) if torch.is_autocast_enabled(dy.device.type) \
            else contextlib.nullcontext()
        with torch.no_grad(), no_autocast:
            grads = _Fp8LinearFn._grads(ctx, dy)
        if torch.is_grad_enabled():  # create_graph=True: refuse, do not drop, any use of their derivative
            grads = _NoDoubleBackward.apply(*(g if g is None else g.detach().requires_grad_() for g in grads))
        dx, *param_grads = grads
        return (dx, *[None] * (_LEADING_INPUTS - 1), *param_grads)

    @staticmethod
    def _grads(ctx, dy):
        """(dx, dW of each part, db of each part) per the Jet-RL dataflow; None for inputs that need none.

        Backward GEMMs pass Gemm.DGRAD / WGRAD instead of the forward's batch invariance: they run only in
        training, where nothing compares a row's bits across M (see capabilities.resolve_kernel)."""
        spec, numerics = ctx.config
        compute = COMPUTE_TORCH_DTYPE[spec.compute]
        x_data, x_scale, x_hp, wt_data, wt_scale, *weights = ctx.saved_tensors
        parts = len(weights)
        needs_w = ctx.needs_input_grad[_LEADING_INPUTS : _LEADING_INPUTS + parts]
        needs_b = ctx.needs_input_grad[_LEADING_INPUTS + parts :] if ctx.has_bias else (False,) * parts
        rows = [w.shape[0] for w in weights]
        dy2 = dy.reshape(-1, dy.shape[-1]).to(compute)
        dx, dws, dbs = None, [None] * parts, [None] * parts
        dyq = dyt = None
        fp8_wgrad = any(needs_w) and spec.wgrad_operands is not None
        if ctx.needs_input_grad[0] and spec.grad_output is not None:
            if fp8_wgrad:  # both layouts from one read of dy
                dyq, dyt = quantize_rows_and_tokens_transposed(dy2, spec.grad_output, spec.wgrad_operands)
            else:
                dyq = quantize_rows_1xG(dy2, spec.grad_output)
            check_finite(dyq, numerics.nonfinite, "grad_output")

        if ctx.needs_input_grad[0]:
            if spec.grad_output is None:
                dx = dy2 @ _cat([w.to(compute) for w in weights])
            else:
                wt = Quantized(wt_data, wt_scale, spec.weight)
                dx = fp8_gemm(dyq, wt, out_dtype=compute, kernel=spec.kernel, gemm=Gemm.DGRAD)
            dx = dx.reshape(ctx.x_shape).to(ctx.x_dtype)

        if any(needs_w):
            if spec.wgrad_operands is None:
                dw = dy2.t() @ x_hp
            else:
                xq = Quantized(x_data, x_scale, spec.input)
                if dyt is None:
                    dyt = quantize_tokens_transposed(dy2, spec.wgrad_operands)
                    check_finite(dyt, numerics.nonfinite, "grad_output")
                blocks = spec.wgrad_x.granularity is Granularity.BLOCK
                xt = (requantize_blocks_transposed if blocks else requantize_tokens_transposed)(xq, spec.wgrad_x)
                dw = fp8_gemm(dyt, xt, out_dtype=compute, kernel=spec.kernel, gemm=Gemm.WGRAD)
            dws = [d.to(w.dtype) if need else None for d, w, need in zip(_split(dw, rows), weights, needs_w)]

        if any(needs_b):
            db = _bias_grad(dy2)
            dbs = [d.to(dtype) if need else None for d, dtype, need in zip(_split(db, rows), ctx.bias_dtypes, needs_b)]
        return (dx, *dws, *dbs)


def _bias_grad(dy2: torch.Tensor) -> torch.Tensor:
    """db: dy's rows summed in fp32. Under torch.compile an op, so inductor keeps eager's summation order (traced,
    its reduction gave other bits)."""
    return torch.ops.precision_engine.bias_grad(dy2) if custom_ops.routes() else dy2.sum(0, dtype=torch.float32)


@torch.library.custom_op("precision_engine::bias_grad", mutates_args=())
def _bias_grad_op(dy: torch.Tensor) -> torch.Tensor:
    return dy.sum(0, dtype=torch.float32)


_bias_grad_op.register_fake(lambda dy: dy.new_empty(dy.shape[1:], dtype=torch.float32))


def _cat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Row stack; one part passes through (no copy)."""
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def _split(t: torch.Tensor, rows: list[int]) -> tuple[torch.Tensor, ...]:
    """The parts' rows of a stacked result (views); one part is the tensor itself."""
    return (t,) if len(rows) == 1 else t.split(rows)


class _NoDoubleBackward(torch.autograd.Function):
    """Identity on the first-order grads that raises if anything differentiates through them. FP8 GEMMs have
    no derivative, and torch's `once_differentiable` only guards when the incoming grad requires grad: a
    gradient penalty on dx or dW (which depend on W and x) would otherwise silently lose its terms."""

    @staticmethod
    def forward(ctx, *grads):
        return grads

    @staticmethod
    def backward(ctx, *_):
        raise UnsupportedError("Fp8Linear cannot differentiate twice (double backward through FP8 GEMMs)")
