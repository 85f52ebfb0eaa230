"""A Llama-family dense decoder in plain PyTorch (Llama, Qwen2, Qwen3), with HF's module names and state_dict.

Why our own and not transformers' modelling code: true on-policy RL needs every op on the path to give a row the
same bits in a decode step and in the trainer's full-sequence forward. With `batch_invariant` on, every op goes
through `numerics.invariant` (GEMMs of the linears the plan keeps in BF16, lm_head included; RMSNorm; SiLU;
attention; the FP8 linears are batch-invariant already); off, the fast torch ops run (F.linear, SDPA, F.silu).
FP8 q/k/v and gate/up with one numerics run as one GEMM each (`numerics.fused_linear`), in both phases. In
batch-invariant mode, and in a fast forward without autograd on the GPU (rollout), an RMSNorm or SiLU(gate) * up
whose readers are FP8 linears of one input format also makes their 1xG quantization in the same kernel
(`numerics.fused_quant`), so the linears do not read and quantize the activation again; the bits are those of
`numerics.invariant`'s RMSNorm and SiLU and the separate quantizer (which fast rollout's RMSNorm runs anyway).
On the GPU without autograd (rollout, both modes) launches are what a CUDA-graph decode step costs, so: each
residual add runs in the kernel of the RMSNorm after it (`fused_quant.add_rms_norm`, torch's add bits); the
attention kernel also quantizes o_proj's input; and q and k are rotated in one launch. Every such fusion gives
the bits of the separate ops, which the trainer's forward runs. Fast mode
decodes attention with its own launch (16-row tiles, an FP8 cache read as is: not batch-invariant).
Submodule names equal HF's (`model.layers.{i}.self_attn.q_proj`, ..., `lm_head`), so compiled plans and
`rewrite.apply` work unchanged and HF safetensors load as they are.

Two entry points share every op:
- `forward(input_ids, attention_mask)`: teacher forcing over a padded batch, any padding side;
- `forward_cached(input_ids, positions, kv_len, cache, ...)`: what the engine calls for prefill and decode.
Internally both are position-indexed (the contract of `invariant.attention`): the key of position p sits in slot
p. `forward` moves each row's tokens to the left (a gather), runs, and moves the logits back.

FP8 KV: with `kv_scales` set, the full forward rounds k and v through FP8 with those scales exactly as the FP8
cache stores them (`quantize_kv` then `dequantize_kv`, straight-through for gradients), so the trainer sees the
keys the rollout attended to (jetrl_unified_kv). `kv_amax` records the per-layer amax that calibration needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from precision_engine.errors import ModelError, UnsupportedError, UsageError
from precision_engine.numerics import invariant
from precision_engine.numerics.contract import Quantized
from precision_engine.numerics.formats import QuantFormat
from precision_engine.numerics.fused_linear import fp8_linear_group, shares_one_gemm
from precision_engine.numerics.fused_quant import (add_rms_norm, rms_norm_quantize, silu_mul, silu_mul_packed_fast,
                                                   silu_mul_quantize, silu_mul_quantize_packed)
from precision_engine.numerics.kv_cache import KVScales, dequantize_kv, quantize_kv
from precision_engine.numerics.linear import Fp8Linear
from precision_engine.numerics.masked_attention import causal_sdpa, masked_sdpa, visible_slots
from precision_engine.policy import KVScale

SUPPORTED_TYPES = ("llama", "qwen2", "qwen3")
_HF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
           "fp32": torch.float32, "float32": torch.float32}


@dataclass(frozen=True)
class DecoderConfig:
    """The fields of an HF config.json that shape this decoder (`from_hf` validates and refuses the rest)."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    tie_word_embeddings: bool
    initializer_range: float
    hf: Mapping  # the config.json it came from (RoPE parameters are read from it through transformers)

    @classmethod
    def from_hf(cls, config: Mapping) -> DecoderConfig:
        model_type = config.get("model_type")
        if any(config.get(key) for key in _MOE_KEYS) or "moe" in str(model_type):
            raise UnsupportedError(
                f"model_type {model_type!r} is a mixture of experts; the built-in decoder is dense only "
                f"({', '.join(SUPPORTED_TYPES)}); use the transformers loader for MoE models"
            )
        if model_type not in SUPPORTED_TYPES:
            raise UnsupportedError(f"the built-in decoder runs {', '.join(SUPPORTED_TYPES)}, not {model_type!r}")
        if config.get("hidden_act", "silu") != "silu":
            raise UnsupportedError(f"hidden_act {config['hidden_act']!r}: the built-in decoder runs SwiGLU (silu)")
        if config.get("use_sliding_window"):
            raise UnsupportedError("sliding-window attention is not supported by the built-in decoder")
        heads = config["num_attention_heads"]
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        kv_heads = config.get("num_key_value_heads") or heads
        if heads % kv_heads:
            raise ModelError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
        attention_bias = bool(config.get("attention_bias", False))
        return cls(
            model_type=model_type,
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            intermediate_size=config["intermediate_size"],
            num_layers=config["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            qkv_bias=True if model_type == "qwen2" else attention_bias,
            o_bias=False if model_type == "qwen2" else attention_bias,
            mlp_bias=bool(config.get("mlp_bias", False)),
            qk_norm=model_type == "qwen3",
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            initializer_range=float(config.get("initializer_range", 0.02)),
            hf=dict(config),
        )

    # The accessors of transformers' configs that the pipeline, the KV calibrator and export read.
    @property
    def num_hidden_layers(self) -> int:
        return self.num_layers

    def to_dict(self) -> dict:
        """The config.json this decoder came from, with the HF class name loaders dispatch on (SGLang, vLLM and
        transformers read `architectures`, not our class name)."""
        config = dict(self.hf)
        config.setdefault("architectures", [_HF_ARCHITECTURES[self.model_type]])
        return config

    def get_text_config(self, decoder: bool = True) -> DecoderConfig:
        return self


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps


class Attention(nn.Module):
    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.q_proj = nn.Linear(c.hidden_size, c.num_heads * c.head_dim, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.qkv_bias)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=c.o_bias)
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
            self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)


class MLP(nn.Module):
    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)


class DecoderLayer(nn.Module):
    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class DecoderModel(nn.Module):
    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


# attend(layer index, q [B, Hq, T, D], k, v [B, Hkv, T, D], reader: o_proj) -> ([B, Hq, T, D], its quantization for
# the reader when the attention kernel makes it, else None)
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, nn.Module], tuple[torch.Tensor, Quantized | None]]


class Decoder(nn.Module):
    """The causal LM. `compute_dtype` is the activations' dtype (weights are cast to it at use, as autocast
    would, so FP32 master weights can compute in BF16); it defaults to the parameters' dtype."""

    def __init__(
        self,
        config: DecoderConfig | Mapping,
        *,
        batch_invariant: bool = True,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config if isinstance(config, DecoderConfig) else DecoderConfig.from_hf(config)
        c = self.config
        self.model = DecoderModel(c)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if c.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.batch_invariant = batch_invariant
        self.compute_dtype = compute_dtype
        self.kv_scales = None
        # FP8 q/k/v and gate/up of one numerics as one GEMM each (`numerics.fused_linear`). Off, each projection
        # runs its own call, which is what FSDP2's per-linear units force: a reference for such a run turns it
        # off, so both take the same GEMMs (the grouped split-K differs from the separate one on the GPU).
        self.fuse_linears = True
        self.scaling = c.head_dim**-0.5
        self._inv_freq, self._rope_scale = _rope_parameters(c)
        self._rope: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    # ------------------------------------------------------------------------------------------ construction

    @classmethod
    def from_config(
        cls, config: Mapping | str, *, seed: int = 0, dtype: torch.dtype | str = torch.bfloat16,
        device: torch.device | str = "cpu", batch_invariant: bool = True,
    ) -> Decoder:
        """Random weights from `seed` (HF's init: normal(0, initializer_range), norms 1), reproducibly and
        without touching the global RNG. `config` is a config dict or a model spec for `resolve_config`."""
        if isinstance(config, str):
            from precision_engine.models.loader import resolve_config

            config = resolve_config(config)
        model = cls(config, batch_invariant=batch_invariant)
        generator = torch.Generator().manual_seed(seed)
        std = model.config.initializer_range
        model.init_weights_(lambda param: param.copy_(torch.randn(param.shape, generator=generator) * std))
        return model.to(device=device, dtype=_torch_dtype(dtype)).eval()

    @property
    def kv_scales(self) -> KVScales | None:
        """The scales `forward` rounds k/v through: the rollout cache's when the policy unifies the phases
        (jetrl_unified_kv), None otherwise (a rollout-only FP8 KV cache, as FP8-RL's, is not the trainer's)."""
        return self._kv_scales

    @kv_scales.setter
    def kv_scales(self, scales: KVScales | None) -> None:
        """Kept on the model's device: calibration hands them over on the CPU, and each layer reading them from
        host memory made every forward wait on the GPU and a training step impossible to capture in a CUDA
        graph (jetrl_unified_kv's batch-invariant block, forty-third session)."""
        device = self.model.embed_tokens.weight.device
        self._kv_scales = None if scales is None else KVScales(scales.k.to(device), scales.v.to(device))

    @torch.no_grad()
    def init_weights_(self, fill_random: Callable[[torch.Tensor], object]) -> None:
        """HF's init rule in place: norm weights 1, biases 0, every other parameter `fill_random(param)`."""
        for name, param in self.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith("bias"):
                param.zero_()
            else:
                fill_random(param)

    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, dtype: torch.dtype | str = torch.bfloat16, device: torch.device | str = "cpu",
        batch_invariant: bool = True,
    ) -> Decoder:
        """An HF model directory: its config.json and every *.safetensors file in it (sharded or not)."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from precision_engine.models.loader import resolve_config

        path = Path(path)
        model = cls(resolve_config(str(path)), batch_invariant=batch_invariant).to(dtype=_torch_dtype(dtype))
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise ModelError(f"{path}: no *.safetensors weights next to config.json")
        state = {}
        for file in files:
            try:
                state.update(load_file(str(file)))
            except (SafetensorError, OSError) as err:  # a truncated or damaged file: name it
                raise ModelError(f"{file}: not a readable safetensors file ({err})") from None
        state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
        if model.config.tie_word_embeddings:
            state.setdefault("lm_head.weight", state.get("model.embed_tokens.weight"))
        expected = set(model.state_dict())
        missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
        if missing or unexpected:
            raise ModelError(
                f"{path}: weights do not fit the config: missing {missing[:5]}, unexpected {unexpected[:5]}"
            )
        model.load_state_dict(state)
        return model.to(device=device).eval()

    # ------------------------------------------------------------------------------------------ forwards

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher forcing: logits [B, L, V] in the compute dtype; rows of padding positions are 0.

        `attention_mask` [B, L] marks each row's tokens, one contiguous run (left, right or no padding).
        """
        return self._full(input_ids, attention_mask)

    def forward_cached(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_len: torch.Tensor,
        cache,
        *,
        read_len: int,
        logits_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One prefill or decode step against `cache` (rl.kv_cache.KVCache or anything with its write/read).

        input_ids, positions [B, T]: token t of row b has position positions[b, t]; its k/v are written to that
        slot. kv_len [B]: slots a row may attend to (j < kv_len, and j <= the query's position). read_len: a
        Python int (no host sync) above every position and kv_len, the cache slots attention reads. logits_index [B]:
        return the logits of that token of each row only ([B, V]); otherwise [B, T, V].
        """
        ops = _Ops(self.batch_invariant)

        def attend(i: int, q, k, v, reader):
            cache.write(i, k, v, positions)
            k_all, v_all, k_scale, v_scale = cache.read(i, read_len)
            return ops.attention(q, k_all, v_all, positions, kv_len, self.scaling, k_scale, v_scale, cached=True,
                                 reader=reader)

        x = self.model.embed_tokens(input_ids).to(self._dtype())
        x, y = self._layers(x, positions, attend, ops, positions_below=read_len)
        if logits_index is not None:
            rows = torch.arange(x.shape[0], device=x.device)
            x, y = x[rows, logits_index], None if y is None else y[rows, logits_index]
        return self._logits(x, ops, y)

    @torch.no_grad()
    def kv_amax(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per layer and KV head, max |k| and max |v| over the real tokens (post-RoPE k, as the cache stores):
        fp32 [layers, kv_heads] each, for `KVScales.from_amax`."""
        record: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._full(input_ids, attention_mask, record=record)
        return torch.stack([k for k, _ in record]).cpu(), torch.stack([v for _, v in record]).cpu()

    # ------------------------------------------------------------------------------------------ internals

    def _full(self, input_ids, attention_mask, *, record=None) -> torch.Tensor:
        """`forward`, optionally appending each layer's (k amax, v amax) to `record`."""
        b, length = input_ids.shape
        device = input_ids.device
        mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        lengths = mask.sum(1)
        start = torch.where(lengths > 0, mask.int().argmax(1), 0)
        cols = torch.arange(length, device=device)
        if not torch.equal(mask, (cols >= start[:, None]) & (cols < (start + lengths)[:, None])):
            raise UsageError("attention_mask must mark one contiguous run of tokens per row (left or right padding)")
        shifted = bool((start > 0).any())
        ids = input_ids.gather(1, (cols + start[:, None]).clamp(max=length - 1)) if shifted else input_ids
        valid = cols < lengths[:, None]
        q_pos = torch.where(valid, cols, -1)
        ops = _Ops(self.batch_invariant)
        x = self.model.embed_tokens(ids).to(self._dtype())
        attend = self._teacher_forcing_attend(q_pos, lengths, ops, valid, record)
        x, y = self._layers(x, q_pos, attend, ops, positions_below=length)
        logits = self._logits(x, ops, y)
        if shifted:
            back = (cols - start[:, None]).clamp(min=0)
            logits = logits.gather(1, back[:, :, None].expand(b, length, logits.shape[-1]))
        return torch.where(mask[:, :, None], logits, 0).to(logits.dtype)

    def layers(self, hidden: torch.Tensor) -> torch.Tensor:
        """The decoder layers alone on hidden states [B, T, H] of whole rows (no padding), as `forward` runs
        them (k/v rounded through `kv_scales` when set), before the final norm: for callers that own the
        embedding and the head, e.g. `bench block`."""
        b, t, _ = hidden.shape
        q_pos = torch.arange(t, device=hidden.device).repeat(b, 1)
        lengths = torch.full((b,), t, device=hidden.device)
        ops = _Ops(self.batch_invariant)
        attend = self._teacher_forcing_attend(q_pos, lengths, ops)
        x, y = self._layers(hidden.to(self._dtype()), q_pos, attend, ops, positions_below=t)
        return x if y is None else x + y

    def _teacher_forcing_attend(self, q_pos, lengths, ops: _Ops, valid=None, record=None) -> Attend:
        """Attention of a full-sequence forward: k/v rounded as the rollout cache stores them when the policy
        unifies the phases; with `record`, each layer's (k amax, v amax) over `valid` tokens is appended."""
        scales = self.kv_scales

        def attend(i: int, q, k, v, reader):
            if record is not None:
                record.append((_masked_amax(k, valid), _masked_amax(v, valid)))
            if scales is not None:
                k, v = _RoundKV.apply(k, scales.k[i]), _RoundKV.apply(v, scales.v[i])
            return ops.attention(q, k, v, q_pos, lengths, self.scaling, None, None, reader=reader, causal=True)

        return attend

    def _layers(self, x, positions, attend: Attend, ops: _Ops, *, positions_below: int):
        """Hidden states [B, T, H] through every layer, before the final norm, as (x, y) with y not yet added to
        x (None without layers): each residual add happens in the RMSNorm after it (`_Ops.add_norm_into`), the
        last one in the final norm. Every position is below `positions_below` (a Python int: sizing the RoPE
        table needs no host sync)."""
        c = self.config
        cos, sin = self._cos_sin(positions.clamp(min=0), x.dtype, positions_below)
        b, t, _ = x.shape
        y = None  # the last sublayer's output, still to be added to the residual stream x
        for i, layer in enumerate(self.model.layers):
            attn, mlp = layer.self_attn, layer.mlp
            qkv, gate_up = (attn.q_proj, attn.k_proj, attn.v_proj), (mlp.gate_proj, mlp.up_proj)
            x, h, hq = ops.add_norm_into(layer.input_layernorm, x, y, qkv)
            q, k, v = ops.linears(qkv, h, fuse=self.fuse_linears, x_quantized=hq)
            q = q.view(b, t, c.num_heads, c.head_dim)
            k, v = k.view(b, t, c.num_kv_heads, c.head_dim), v.view(b, t, c.num_kv_heads, c.head_dim)
            if c.qk_norm:
                q, k = ops.norm(attn.q_norm, q), ops.norm(attn.k_norm, k)
            q, k = invariant.rope_qk(q, k, cos, sin)  # [B, H, T, D], exact: both modes; one launch on the GPU
            out, oq = attend(i, q, k, v.transpose(1, 2), attn.o_proj)
            out = out.transpose(1, 2).reshape(b, t, c.num_heads * c.head_dim)
            y = ops.linear(attn.o_proj, out, x_quantized=oq)
            x, h, hq = ops.add_norm_into(layer.post_attention_layernorm, x, y, gate_up)
            h, hq = ops.swiglu_into(ops.linears(gate_up, h, fuse=self.fuse_linears, x_quantized=hq, stacked=True),
                                    mlp.down_proj)
            y = ops.linear(mlp.down_proj, h, x_quantized=hq)
        return x, y

    def _logits(self, x: torch.Tensor, ops: _Ops, y: torch.Tensor | None = None) -> torch.Tensor:
        """lm_head(norm(x + y)), hidden states as `_layers` hands them over (y None: norm(x))."""
        _, h, _ = ops.add_norm_into(self.model.norm, x, y, ())
        return ops.linear(self.lm_head, h)

    def _dtype(self) -> torch.dtype:
        return self.compute_dtype or self.model.embed_tokens.weight.dtype

    def _cos_sin(self, positions: torch.Tensor, dtype: torch.dtype, need: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [B, T, D] from one fp32 table per device, grown on demand: each position's values are
        computed once, so both phases read the same bits (HF's formula: cat(freqs, freqs), times the scale)."""
        device = positions.device
        cos, sin = self._rope.get(device, (None, None))
        have = 0 if cos is None else cos.shape[0]
        if need > have:
            size = max(need, 2 * have, 256)
            freqs = torch.arange(have, size, device=device, dtype=torch.float32)[:, None] * self._inv_freq.to(device)
            emb = torch.cat((freqs, freqs), dim=-1)
            new_cos, new_sin = emb.cos() * self._rope_scale, emb.sin() * self._rope_scale
            cos = new_cos if cos is None else torch.cat((cos, new_cos))
            sin = new_sin if sin is None else torch.cat((sin, new_sin))
            self._rope[device] = (cos, sin)
        return cos[positions].to(dtype), sin[positions].to(dtype)


class _Ops:
    """The ops of one forward: batch-invariant (numerics.invariant) or the fast torch ones."""

    def __init__(self, batch_invariant: bool) -> None:
        self.invariant = batch_invariant

    def linear(self, module: nn.Module, x: torch.Tensor, *, x_quantized: Quantized | None = None) -> torch.Tensor:
        if x_quantized is not None:  # module is an Fp8Linear of x_quantized's format (`fused_input`)
            return module(x, x_quantized=x_quantized)
        if isinstance(module, Fp8Linear) or not isinstance(module, nn.Linear):
            return module(x)  # FP8 linears are batch-invariant through their own GEMM
        bias = None if module.bias is None else module.bias.to(x.dtype)
        weight = module.weight.to(x.dtype)
        return invariant.linear(x, weight, bias) if self.invariant else F.linear(x, weight, bias)

    def linears(
        self, modules: tuple[nn.Module, ...], x: torch.Tensor, *, fuse: bool, x_quantized: Quantized | None = None,
        stacked: bool = False,
    ) -> tuple[torch.Tensor, ...] | torch.Tensor:
        """Linears reading the same x (q/k/v, gate/up). With `fuse`, FP8 parts of one numerics run as one GEMM
        per pass (`fused_linear`: x quantized once, no narrow host-bound k/v GEMMs); both phases take this
        path, so their bits agree. BF16 parts run one by one: stacking their weights would copy them every
        forward (they change every step), for one launch saved; the Triton BF16 kernel's split-K depends on N
        too (`triton_invariant.segment_kb`), so a stack would not even keep the separate calls' bits.
        `x_quantized`: Q(x) from the op that made x (`norm_into`), then every part reads it. `stacked`: the one
        GEMM's output itself, the parts side by side (`fp8_linear_group`)."""
        if fuse and shares_one_gemm(modules):
            return fp8_linear_group(modules, x, x_quantized=x_quantized, stacked=stacked)
        return tuple(self.linear(m, x, x_quantized=x_quantized) for m in modules)

    def triton_norm(self, x: torch.Tensor) -> bool:
        """Whether RMSNorm runs `numerics.invariant`'s kernel: in batch-invariant mode, and on the GPU in fast mode
        too, where one kernel replaces the four that the torch ops launch and, in front of FP8 linears, also makes
        their input's quantization (`fused_input`), in the trainer's forward as in rollout's."""
        return self.invariant or x.is_cuda

    def fused_input(self, readers: tuple[nn.Module, ...], x: torch.Tensor) -> QuantFormat | None:
        """The 1xG format `readers` would quantize their input x to, when the op that makes x may make it instead
        (`numerics.fused_quant`): where RMSNorm runs `numerics.invariant`'s kernel (`triton_norm`; the fused
        kernels equal its RMSNorm and SiLU, not F.rms_norm / F.silu), and when every reader is an Fp8Linear of
        that one input format; a BF16 reader, or two formats, leave the op unfused. Python attributes only: no
        host sync."""
        if not self.triton_norm(x) or not all(isinstance(m, Fp8Linear) for m in readers):
            return None
        formats = {m.spec.input for m in readers}
        return formats.pop() if len(formats) == 1 else None

    def norm_into(
        self, module: RMSNorm, x: torch.Tensor, readers: tuple[nn.Module, ...]
    ) -> tuple[torch.Tensor, Quantized | None]:
        """(norm(x), its quantization for `readers` or None): one kernel makes both when `fused_input` allows."""
        fmt = self.fused_input(readers, x)
        if fmt is None:
            return self.norm(module, x), None
        return rms_norm_quantize(x, module.weight.to(x.dtype), module.eps, fmt)

    def fused_add(self, x: torch.Tensor) -> bool:
        """Whether a residual add runs inside the RMSNorm after it (`numerics.fused_quant.add_rms_norm`, one
        launch where a CUDA-graph decode step launches two): where that norm runs numerics.invariant's kernel
        (`triton_norm`) on the GPU and no autograd is recorded (rollout, fast and batch-invariant mode). The
        trainer's forward keeps torch's add and the norm, whose bits the kernel equals."""
        return x.is_cuda and not torch.is_grad_enabled() and self.triton_norm(x)

    def add_norm_into(
        self, module: RMSNorm, x: torch.Tensor, y: torch.Tensor | None, readers: tuple[nn.Module, ...]
    ) -> tuple[torch.Tensor, torch.Tensor, Quantized | None]:
        """(x + y, then `norm_into` of that): one kernel makes all three when `fused_add` allows. y None: no add."""
        if y is not None and self.fused_add(x):
            return add_rms_norm(x, y, module.weight.to(x.dtype), module.eps, self.fused_input(readers, x))
        if y is not None:
            x = x + y
        return (x, *self.norm_into(module, x, readers))

    def swiglu_into(
        self, gate_up: tuple[torch.Tensor, torch.Tensor] | torch.Tensor, reader: nn.Module
    ) -> tuple[torch.Tensor, Quantized | None]:
        """(silu(gate) * up, its quantization for `reader` or None), fused as `norm_into`. `gate_up`: the pair,
        or one GEMM's output with gate and up side by side (`linears(stacked=True)`), whose gradient then
        comes back whole (`silu_mul_quantize_packed`)."""
        packed = isinstance(gate_up, torch.Tensor)
        fmt = self.fused_input((reader,), gate_up if packed else gate_up[0])
        if fmt is None:
            return self.silu_mul(gate_up), None
        return silu_mul_quantize_packed(gate_up, fmt) if packed else silu_mul_quantize(*gate_up, fmt)

    def norm(self, module: RMSNorm, x: torch.Tensor) -> torch.Tensor:
        if self.triton_norm(x):  # weight in the activations' dtype: FP32 master weights must not promote x to FP32
            return invariant.rms_norm(x, module.weight.to(x.dtype), module.eps)
        return module.weight.to(x.dtype) * F.rms_norm(x.float(), (x.shape[-1],), eps=module.eps).to(x.dtype)

    def silu_mul(self, gate_up: tuple[torch.Tensor, torch.Tensor] | torch.Tensor) -> torch.Tensor:
        """silu(gate) * up of the pair or of one GEMM's packed output (`swiglu_into`); fast mode's packed case
        hands its gradient back whole (`silu_mul_packed_fast`)."""
        if isinstance(gate_up, torch.Tensor):
            if not self.invariant:
                return silu_mul_packed_fast(gate_up)
            gate_up = gate_up.chunk(2, dim=-1)
        gate, up = gate_up
        return silu_mul(gate, up) if self.invariant else F.silu(gate) * up

    def fused_output(self, reader: nn.Module | None, q: torch.Tensor) -> QuantFormat | None:
        """The 1xG format in which the attention kernel also quantizes its output for `reader` (o_proj), in its
        epilogue (one quantizer launch fewer per layer): on the GPU without autograd (rollout, both modes), when
        `fused_input` would hand the reader its Q(x) and a head is one group (D = G,
        `triton_invariant.attention_quantize_fits`). The trainer's forward keeps o_proj's own quantizer, whose
        bits the epilogue's equal."""
        if reader is None or not q.is_cuda or torch.is_grad_enabled():
            return None
        fmt = self.fused_input((reader,), q)
        if fmt is None:
            return None
        from precision_engine.numerics import triton_invariant

        return fmt if triton_invariant.attention_quantize_fits(q.shape[-1], fmt) else None

    def attention(
        self, q, k, v, q_pos, kv_len, scale, k_scale, v_scale, *, cached: bool = False, reader: nn.Module | None = None,
        causal: bool = False,
    ) -> tuple[torch.Tensor, Quantized | None]:
        """(attention output, its quantization for `reader` where the kernel makes it (`fused_output`), else None).
        `causal`: a teacher-forcing forward (query i at position i, or padding), which fast mode hands to SDPA's
        causal kernels (`causal_sdpa`), and batch-invariant mode's backward too (`invariant.attention`)."""
        if not self.invariant and cached and q.is_cuda:  # fast mode's launch: 16-row decode tiles, FP8 read as is
            from precision_engine.numerics import triton_invariant

            fmt = self.fused_output(reader, q)
            out = triton_invariant.attention(q, k, v, q_pos, kv_len, scale=scale, k_scale=k_scale,
                                             v_scale=v_scale, fast=True, quantize=fmt)
            return (out, None) if fmt is None else out
        if self.invariant or (q.is_cuda and (cached or k_scale is not None)):
            # Reads of the KV cache on the GPU take the Triton kernel in fast mode too: it stops at each row's
            # kv_len (a device value, so one CUDA graph serves every length, and a step reads only the live
            # blocks of the static cache), reads GQA k/v once and FP8 in place; SDPA would read the whole cache
            # through a mask built per layer (and a BF16 copy of an FP8 cache would cost more than it saves).
            fmt = self.fused_output(reader, q)
            out = invariant.attention(q, k, v, q_pos, kv_len, scale=scale, k_scale=k_scale, v_scale=v_scale,
                                      quantize=fmt, causal=causal)
            return (out, None) if fmt is None else out
        if k_scale is not None:
            k, v = dequantize_kv(k, k_scale, q.dtype), dequantize_kv(v, v_scale, q.dtype)
        if causal:
            return causal_sdpa(q, k, v, scale=scale), None
        return masked_sdpa(q, k, v, visible_slots(q_pos, kv_len, k.shape[2]), scale=scale), None


class _RoundKV(torch.autograd.Function):
    """k -> dequantize_kv(quantize_kv(k)) (the FP8 cache's rounding), with a straight-through gradient."""

    @staticmethod
    def forward(ctx, states, scale):
        return dequantize_kv(quantize_kv(states, scale), scale, states.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _masked_amax(states: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[B, H, T, D] -> [H] max |x| over valid tokens; padding is selected away (never 0 * inf)."""
    magnitude = torch.where(valid[:, None, :, None], states.detach().float().abs(), 0.0)
    return magnitude.amax(dim=(0, 2, 3))


def _rope_parameters(c: DecoderConfig) -> tuple[torch.Tensor, float]:
    """inv_freq and the cos/sin scale, from transformers' own RoPE initialisers (default, llama3, yarn, ...).
    Computed on the CPU even under a `torch.device("meta")` context (a decoder built on meta, then filled)."""
    with torch.device("cpu"):
        return _rope_parameters_cpu(c)


def _rope_parameters_cpu(c: DecoderConfig) -> tuple[torch.Tensor, float]:
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    kwargs = {k: v for k, v in c.hf.items() if k not in ("model_type", "quantization_config")}
    hf_config = AutoConfig.for_model(c.model_type, **kwargs)
    rope = getattr(hf_config, "rope_parameters", None) or {"rope_type": "default", "rope_theta": 10000.0}
    rope_type = rope.get("rope_type", "default")
    if rope_type == "default":
        dim = c.head_dim
        inv_freq = 1.0 / (rope["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        return inv_freq, 1.0
    if rope_type not in ROPE_INIT_FUNCTIONS:
        raise UnsupportedError(f"rope_type {rope_type!r} is not known to this transformers")
    inv_freq, scale = ROPE_INIT_FUNCTIONS[rope_type](hf_config, torch.device("cpu"))
    if rope_type == "dynamic":
        raise UnsupportedError("dynamic RoPE scaling changes with the sequence length; not supported")
    return inv_freq.float(), float(scale)


def _torch_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; use bf16, fp16 or fp32")
    return _DTYPES[dtype]


def load_decoder(
    model_spec: str, *, device: torch.device | str = "cpu", dtype: torch.dtype | str = "bf16", seed: int = 0,
    batch_invariant: bool = True, compute_dtype: torch.dtype | None = None,
) -> Decoder:
    """The pipeline's `loader`: an HF model directory with safetensors loads its weights; any other spec
    (built-in name, config.json, a directory without weights) builds random weights from `seed`.
    `compute_dtype` is set before the pipeline calibrates, so the KV scales see the rollout's activations."""
    path = Path(model_spec).expanduser()
    if path.is_dir() and any(path.glob("*.safetensors")):
        model = Decoder.from_pretrained(path, dtype=dtype, device=device, batch_invariant=batch_invariant)
    else:
        model = Decoder.from_config(model_spec, seed=seed, dtype=dtype, device=device,
                                    batch_invariant=batch_invariant)
    model.compute_dtype = compute_dtype
    return model


@torch.no_grad()
def calibrate_kv_scales(
    model: Decoder, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
    *, mode: KVScale = KVScale.PER_TENSOR,
) -> KVScales:
    """FP8 KV scales (amax / 448) from one forward of `model` over real sequences, as SGLang's calibration."""
    k_amax, v_amax = model.kv_amax(input_ids, attention_mask)
    return KVScales.from_amax(k_amax, v_amax, mode)


__all__ = ["Decoder", "DecoderConfig", "SUPPORTED_TYPES", "calibrate_kv_scales", "load_decoder"]
