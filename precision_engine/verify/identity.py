"""The identity check: does the rollout path compute the logprobs the training forward computes?

One model (random or checkpoint weights, see `pipeline`) gets the train-phase and rollout-phase rewrites in turn.
Rewrites share Parameters, so both phases run on the very same weight tensors (not copies that could drift).
The same token sequences then go through

- the training forward: train-phase modules, train mode, autograd on, the whole sequence at once;
- rollout prefill scoring: rollout-phase modules, eval mode, the rollout KV cache (FP8 when the policy says,
  scales calibrated on these sequences), the whole sequence at once: how a rollout engine scores a sequence;
- rollout decode: the same, but a prompt prefill followed by one token per step through the KV cache, as
  generation produces the logprobs it reports (teacher-forced with the given tokens).

What the numerics promise covers (`Plan.identical`): every module computes the same bits in both phases for
the same input rows, whatever the number of rows (batch invariance). Prefill scoring feeds identical rows to
every module, so under a policy whose plan is identical everywhere its logits must be bitwise equal to the
training forward's. This model is transformers', so its decode is NOT covered: its attention runs one query
against the cached keys instead of all queries at once (a different reduction in the attention kernel), and
its training forward uses the keys and values an FP8 KV cache rounds unrounded. Those differences are reported
so users see their size. The built-in engine closes both gaps (one attention kernel for a decode step and the
training forward; the trainer rounds k/v through the rollout's FP8 scales when the phases are unified):
`rl.onpolicy` measures that path, and `precision check` prints it as the sampled row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn

from precision_engine.compile.plan import Plan
from precision_engine.errors import NonFiniteError
from precision_engine.policy.model import Policy
from precision_engine.rewrite import apply
from precision_engine.rewrite.kv_cache import KVCacheCalibrator, cache_kwargs, returned_cache


@dataclass(frozen=True)
class LayerDiff:
    """One module's output, rollout prefill vs training forward."""

    name: str
    max_abs: float
    rel_l2: float  # ||rollout - train|| / ||train||
    bitwise: bool


@dataclass(frozen=True)
class LogprobDiff:
    """Rollout logprobs vs the training forward's, over `tokens` predicted positions."""

    path: str  # "prefill" or "decode"
    tokens: int
    max_abs_dlogp: float  # max |logp_rollout(token) - logp_train(token)| over the actual next tokens
    mean_kl: float  # mean over positions of KL(pi_train || pi_rollout), full vocabulary
    bitwise: bool  # logits identical byte for byte (so every logprob is too)
    covered: bool  # whether the numerics promise covers this path (see module docstring)
    why_not_covered: str = ""


@dataclass(frozen=True)
class IdentityReport:
    policy: str
    model: str
    device: str
    batch: int
    seq_len: int
    plan_identical: bool  # the plan says train forward and rollout numerics are equal for every module
    differing_modules: tuple[str, ...]
    kv_cache: str
    prefill: LogprobDiff
    decode: LogprobDiff | None
    layers: tuple[LayerDiff, ...]

    @property
    def promise_holds(self) -> bool:
        """An identical plan must give bitwise-equal prefill logits where the promise covers prefill."""
        return self.prefill.bitwise or not (self.plan_identical and self.prefill.covered)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["promise_holds"] = self.promise_holds
        return data


def random_sequences(vocab_size: int, batch: int, seq_len: int, *, seed: int = 0) -> torch.Tensor:
    """Token ids [batch, seq_len] from a seeded generator: models with random weights have no tokenizer."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, seq_len), generator=generator)


def check_identity(
    plan: Plan,
    model: nn.Module,
    sequences: torch.Tensor,
    *,
    prompt_len: int | None = None,
    decode: bool = True,
    layers: bool = True,
) -> IdentityReport:
    """Run `sequences` [B, T] through `model` in both phases of `plan` and compare the outputs.

    `model` (any weights, on any device; `pipeline.compile_for_model` and `models.loader.load_model` give
    both) is rewritten in place and left in the rollout phase. NaN or Inf logits on any path raise NonFiniteError.
    """
    policy = plan.policy
    device = next(model.parameters()).device
    sequences = sequences.to(device)
    watched = _watched_names(model, plan) if layers else []

    apply(plan, model, "train")
    with _Recorder(model, watched) as train_outputs:
        train_logits = _finite("training forward", _training_forward(model, sequences))

    apply(plan, model, "rollout")
    calibrator = _kv_calibrator(policy, model, sequences)
    layer_diffs = []
    with _Recorder(model, watched, compare_to=train_outputs.outputs, on_diff=layer_diffs.append):
        prefill_logits = _finite("rollout prefill", _rollout_prefill(model, sequences, calibrator))
    kv_fp8 = "the FP8 KV cache rounds k/v, transformers' training forward does not (ours does: sampled row)" \
        if policy.kv_cache.is_fp8 else ""
    prefill = _logprob_diff(
        "prefill", train_logits[:, :-1], prefill_logits[:, :-1], sequences[:, 1:], why_not_covered=kv_fp8
    )

    decode_diff = None
    if decode and sequences.shape[1] > 1:
        prompt_len = prompt_len or max(1, sequences.shape[1] // 2)
        decode_logits = _finite("rollout decode", _rollout_decode(model, sequences, prompt_len, calibrator))
        decode_diff = _logprob_diff(
            "decode",
            train_logits[:, prompt_len - 1 : -1],
            decode_logits,
            sequences[:, prompt_len:],
            why_not_covered="; ".join(filter(None, [
                "transformers' attention runs one query against the cache (ours: sampled row)", kv_fp8])),
        )
    kv = policy.kv_cache
    return IdentityReport(
        policy=policy.name,
        model=plan.inventory.model_id,
        device=device.type,
        batch=sequences.shape[0],
        seq_len=sequences.shape[1],
        plan_identical=plan.all_identical,
        differing_modules=plan.differing(),
        kv_cache=f"{kv.dtype.value} {kv.scale.value}, calibrate {kv.calibrate.value}" if kv.is_fp8 else kv.dtype.value,
        prefill=prefill,
        decode=decode_diff,
        layers=tuple(layer_diffs),
    )


def _finite(path: str, logits: torch.Tensor) -> torch.Tensor:
    """`logits`, or a NonFiniteError: NaN logits are byte-equal to NaN logits, so a model whose weights hold a NaN
    would otherwise pass as bitwise identical, and NaN differences compare as no difference."""
    bad = int((~torch.isfinite(logits)).sum())
    if bad:
        raise NonFiniteError(
            f"the {path} gives {bad} of {logits.numel()} logits NaN or Inf: there is nothing to compare (hint: look "
            "for NaN/Inf in the model's weights, or an activation that overflows its dtype)"
        )
    return logits


def _training_forward(model: nn.Module, sequences: torch.Tensor) -> torch.Tensor:
    """As a trainer computes logprobs for the loss: train mode, autograd recording, no cache."""
    model.train()
    with torch.enable_grad():
        logits = model(input_ids=sequences, use_cache=False).logits
    return logits.detach()


@torch.no_grad()
def _rollout_prefill(model: nn.Module, sequences: torch.Tensor, calibrator: KVCacheCalibrator | None) -> torch.Tensor:
    model.eval()
    cache = calibrator.new_cache(model.config) if calibrator else None
    return model(input_ids=sequences, use_cache=True, **cache_kwargs(model, cache)).logits


@torch.no_grad()
def _rollout_decode(
    model: nn.Module, sequences: torch.Tensor, prompt_len: int, calibrator: KVCacheCalibrator | None
) -> torch.Tensor:
    """Logits predicting tokens prompt_len..T-1: a prompt prefill, then one token per step (teacher forcing)."""
    model.eval()
    cache = calibrator.new_cache(model.config) if calibrator else None
    out = model(input_ids=sequences[:, :prompt_len], use_cache=True, **cache_kwargs(model, cache))
    cache, steps = returned_cache(out), [out.logits[:, -1:]]
    for t in range(prompt_len, sequences.shape[1] - 1):
        out = model(input_ids=sequences[:, t : t + 1], use_cache=True, **cache_kwargs(model, cache))
        cache = returned_cache(out)
        steps.append(out.logits)
    return torch.cat(steps, dim=1)


def _kv_calibrator(policy: Policy, model: nn.Module, sequences: torch.Tensor) -> KVCacheCalibrator | None:
    """The rollout KV scales as a trainer would set them before a rollout: calibrated on the rollout model."""
    if not policy.kv_cache.is_fp8:
        return None
    calibrator = KVCacheCalibrator(policy.kv_cache, sequences)
    calibrator.after_weight_update(model)
    return calibrator


def _logprob_diff(path: str, train_logits, rollout_logits, targets, *, why_not_covered: str) -> LogprobDiff:
    bitwise = train_logits.dtype == rollout_logits.dtype and torch.equal(
        train_logits.contiguous().view(torch.uint8), rollout_logits.contiguous().view(torch.uint8)
    )
    logp_train = torch.log_softmax(train_logits.float(), dim=-1)
    logp_rollout = torch.log_softmax(rollout_logits.float(), dim=-1)
    index = targets.unsqueeze(-1)
    dlogp = (logp_rollout.gather(-1, index) - logp_train.gather(-1, index)).abs()
    kl = (logp_train.exp() * (logp_train - logp_rollout)).sum(-1)
    return LogprobDiff(
        path=path,
        tokens=targets.numel(),
        max_abs_dlogp=float(dlogp.max()),
        mean_kl=float(kl.mean()),
        bitwise=bool(bitwise),
        covered=not why_not_covered,
        why_not_covered=why_not_covered,
    )


def _watched_names(model: nn.Module, plan) -> list[str]:
    """Decoder layers and every planned GEMM module, in model order."""
    planned = {m.name for m in plan.inventory.modules if m.kind.is_gemm}
    layers = {
        f"{name}.{i}"
        for name, module in model.named_modules()
        if isinstance(module, nn.ModuleList) and name.endswith("layers")
        for i in range(len(module))
    }
    return [name for name, _ in model.named_modules() if name in planned or name in layers]


class _Recorder:
    """Forward hooks on the named modules, attached on entry so they land on the current (swapped) modules.

    Records outputs (train pass) or compares them with recorded ones (rollout pass).
    """

    def __init__(
        self,
        model: nn.Module,
        names: list[str],
        *,
        compare_to: dict[str, torch.Tensor] | None = None,
        on_diff: Callable[[LayerDiff], None] | None = None,
    ):
        self.model = model
        self.names = names
        self.compare_to = compare_to
        self.on_diff = on_diff
        self.outputs: dict[str, torch.Tensor] = {}
        self.handles = []

    def __enter__(self) -> _Recorder:
        modules = dict(self.model.named_modules())
        self.handles = [modules[name].register_forward_hook(self._hook(name)) for name in self.names]
        return self

    def _hook(self, name: str):
        def hook(module, args, output):
            out = output[0] if isinstance(output, tuple) else output
            out = out.detach()
            if self.compare_to is None:
                self.outputs[name] = out
            else:
                self.on_diff(_layer_diff(name, self.compare_to.pop(name), out))

        return hook

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()


def _layer_diff(name: str, train: torch.Tensor, rollout: torch.Tensor) -> LayerDiff:
    delta = rollout.float() - train.float()
    norm = train.float().norm()
    return LayerDiff(
        name=name,
        max_abs=float(delta.abs().max()),
        rel_l2=float(delta.norm() / norm) if norm > 0 else float(delta.norm()),
        bitwise=train.dtype == rollout.dtype
        and torch.equal(train.contiguous().view(torch.uint8), rollout.contiguous().view(torch.uint8)),
    )
