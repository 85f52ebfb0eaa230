"""A whole built-in RL run: `precision run --policy P --recipe math` and `precision ablate`.

    data      the recipe's problems (or the user's files), visited in a seeded order, one permutation per epoch
    model     the recipe's warmed-up model (cached) or the user's HF directory, through `pipeline.prepare` with
              our decoder as loader, parameters in the policy's master dtype, compute in the plan's dtype
    steps     GRPOTrainer.step on `prompts_per_step` problems; sampling seed derived from (run seed, step)
    evaluate  greedy held-out accuracy at step 0, every `eval_every` steps and at the end, in rollout numerics
    record    one metrics row per step (appended before that step's checkpoint), a checkpoint every
              `checkpoint_every` steps and at the end, the report at the end

Resume is exact: the model, optimizer, FP8 KV scales and data position come from the last checkpoint, and every
random draw after it is a function of (seed, step), so a resumed run logs the same rows and ends with the same
weights as one that was never interrupted. So it continues a run only under the policy and settings recorded
when it started (RESUMABLE lists the few it may change), checked before the warm-up, as is a new run's --out.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from functools import partial
from operator import attrgetter
from pathlib import Path

import torch

from precision_engine.compile.render import plan_to_dict
from precision_engine.errors import DataError, UsageError
from precision_engine.models.decoder import load_decoder
from precision_engine.models.loader import max_positions, resolve_config
from precision_engine.numerics.kv_cache import KVScales
from precision_engine.pipeline import compile_for_model, prepare
from precision_engine.policy.model import Policy
from precision_engine.rl.evaluate import greedy_accuracy
from precision_engine.rl.recipes.math import (CharTokenizer, MathRecipe, Problem, load_problems, load_tokenizer,
                                              reward, reward_backend)
from precision_engine.rl.runs import (ABLATION_FILES, RunDir, check_same_run, list_checkpoints, resume_run,
                                      save_checkpoint, write_ablation, write_report)
from precision_engine.rl.sampling import SamplingParams
from precision_engine.rl.trainer import GRPOConfig, GRPOTrainer
from precision_engine.rl.warmup import WARMUP_INFO, WarmupConfig, recipe_model_config, warmed_up_model

RECIPES = ("math",)
MAX_SEED = 2**63 - 1  # a signed 64-bit integer, as the generators' seeds derived from it (_step_seed)
# Settings a resumed run may change: how far it trains (--steps, e.g. raised to train longer; never below its last
# checkpoint), how often it checkpoints, and the device (a checkpoint loads on either). Every other setting decides
# what the steps compute or when they evaluate, so changing it would mix two runs in one record.
RESUMABLE = ("steps", "checkpoint_every", "device")
StepCallback = Callable[[int, dict], None]

# The CLI flag of a setting, named in messages next to RunConfig's field (cli/run.py defines the flags).
_FLAGS = {
    "recipe": "--recipe", "seed": "--seed", "steps": "--steps", "eval_every": "--eval-every",
    "heldout_size": "--heldout-size", "mix": "--mix", "model": "--model",
    "train_data": "--data", "heldout_data": "--heldout", "device": "--device",
    "grpo.prompts_per_step": "--prompts", "grpo.samples_per_prompt": "--samples",
    "grpo.max_new_tokens": "--max-new-tokens", "grpo.temperature": "--temperature", "grpo.top_p": "--top-p",
    "grpo.top_k": "--top-k",
}
_MINIMUMS = {"steps": 1, "eval_every": 1, "checkpoint_every": 1, "heldout_size": 1, "grpo.prompts_per_step": 1,
             "grpo.samples_per_prompt": 2, "grpo.max_new_tokens": 1}
_PATHS = ("model", "train_data", "heldout_data")  # recorded absolute, so a resume from elsewhere compares them
_NOTHING_LEARNED = "GRPO's advantage is a sample's reward minus its group's mean, always 0 {}: nothing is learned"
_WHY = {"grpo.samples_per_prompt": f" ({_NOTHING_LEARNED.format('with one sample per prompt')})"}
# Response lengths: the recipe's own model answers in a few characters ("42" and a newline); a user's HF model
# reasons first, and gets verl's default data.max_response_length.
RECIPE_MODEL_MAX_NEW_TOKENS = GRPOConfig.max_new_tokens
HF_MODEL_MAX_NEW_TOKENS = 512


def default_max_new_tokens(model: str | None) -> int:
    """The response length a run gets without --max-new-tokens: the recipe's model's, or an HF model's."""
    return RECIPE_MODEL_MAX_NEW_TOKENS if model is None else HF_MODEL_MAX_NEW_TOKENS


@dataclass(frozen=True)
class RunConfig:
    """Everything a run depends on besides the policy (recorded in run.json; ablations share one)."""

    recipe: str = "math"
    seed: int = 0
    steps: int = 300
    eval_every: int = 25
    checkpoint_every: int = 25
    train_size: int = 20_000
    heldout_size: int = 1_000
    mix: dict[str, float] | None = None  # problem kinds of the generated data (None: the recipe's DEFAULT_MIX)
    model: str | None = None  # a local HF directory; None: the recipe's own warmed-up model
    train_data: str | None = None  # GSM8K-style JSONL/parquet or verl parquet; None: generated problems
    heldout_data: str | None = None
    device: str = "cpu"
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)

    def __post_init__(self) -> None:
        if self.recipe not in RECIPES:
            raise UsageError(f"unknown recipe {self.recipe!r}; available: {', '.join(RECIPES)}")
        if not 0 <= self.seed <= MAX_SEED:
            raise UsageError(f"{_setting('seed')} must be in 0 .. 2**63-1, got {self.seed}")
        for name, minimum in _MINIMUMS.items():
            value = attrgetter(name)(self)
            if value < minimum:
                why = _WHY.get(name, "")
                raise UsageError(f"{_setting(name)} must be >= {minimum}, got {value}{why}")
        _check_sampling(self.grpo)


def _check_sampling(grpo: GRPOConfig) -> None:
    """The rollouts' sampling settings, refused here rather than at the first step, after the warm-up."""
    try:
        SamplingParams(temperature=grpo.temperature, top_p=grpo.top_p, top_k=grpo.top_k)
    except UsageError as err:
        raise UsageError(f"{err} (the rollouts' sampling: --temperature, --top-p, --top-k)") from None
    if grpo.temperature == 0:
        greedy = "when greedy rollouts give all samples of a prompt one response"
        raise UsageError(f"{_setting('grpo.temperature')} must be > 0 ({_NOTHING_LEARNED.format(greedy)})")


def run(
    policy: Policy,
    config: RunConfig,
    out: str | Path,
    *,
    resume: bool = False,
    fallback: bool = False,
    on_step: StepCallback = lambda step, row: None,
    log: Callable[[str], None] = lambda _: None,
) -> RunDir:
    """Train `policy` per `config` in run directory `out` (continue it with `resume`); returns the run.

    `resume` refuses (UsageError) a policy or setting other than those the run was started with, except for
    RESUMABLE ones, which run.json then records, and a run that has reached `config.steps`; --out and the
    resume are checked before the warm-up. `fallback` (with `resume`): a damaged newest checkpoint is set aside
    and the run continues from the previous intact one. The run is held (RunDir.lock) while it trains."""
    if fallback and not resume:
        raise UsageError("--fallback picks the checkpoint a resume starts from: pass it with --resume")
    with ExitStack() as held:
        resumed = _check_out(policy, config, out, resume=resume)
        if resumed is not None:
            held.enter_context(resumed.lock())
            if _finished(resumed.path, config.steps):
                raise UsageError(f"{resumed.path} finished its {config.steps} steps already (hint: a larger "
                                 f"{_setting('steps')} trains on; `precision report` rewrites its report)")
        return _train(policy, config, out, resumed, held, fallback=fallback, on_step=on_step, log=log)


def _train(policy: Policy, config: RunConfig, out: str | Path, resumed: RunDir | None, held: ExitStack, *,
           fallback: bool, on_step: StepCallback, log: Callable[[str], None]) -> RunDir:
    """`run` after its checks: the run directory is made (and held) only once the model is ready."""
    recipe = MathRecipe(seed=config.seed, train_size=config.train_size, heldout_size=config.heldout_size,
                        mix=config.mix)
    train, heldout = _problems(recipe, config)
    # The recipe's model reads the character vocabulary its warm-up is given: known before the warm-up runs.
    tokenizer = load_tokenizer(config.model) if config.model else CharTokenizer()
    _check_problems(train, heldout, tokenizer, config)
    calibration = [tokenizer.encode_prompt(p) + tokenizer.encode(p.target) for p in train[:64]]
    model_dir = config.model or str(warmed_up_model(recipe, seed=config.seed, config=config.warmup, log=log))
    plan = compile_for_model(policy, model_dir)
    loader = partial(load_decoder, batch_invariant=policy.numerics.batch_invariant,
                     compute_dtype=_compute_dtype(plan))
    ready = prepare(
        plan, model_dir, phase="rollout", device=config.device, dtype=policy.master_weights.value,
        seed=config.seed, loader=loader, calibration_ids=calibration[: policy.kv_cache.calibration_sequences],
    )
    model = ready.model
    trainer = GRPOTrainer(model, plan, tokenizer, reward, config.grpo, calibrator=ready.calibrator)
    order = DataOrder(len(train), config.seed)

    settings = {**_settings(config), "model_dir": str(Path(model_dir).absolute()), "policy": policy.name}
    if resumed is not None:
        run_dir, checkpoint = resume_run(resumed, model=model, optimizer=trainer.optimizer, config=settings,
                                         fallback=fallback)
        start = 1 if checkpoint is None else checkpoint.step + 1
        if checkpoint is not None:
            order = DataOrder.from_state(checkpoint.data_state, len(train), config.seed)
            trainer.kv_scales = _scales_from_state(checkpoint.trainer_state.get("kv_scales"), config.device)
        log(f"resuming {run_dir.path} at step {start}")
    else:
        run_dir = RunDir.create(out, policy=policy, plan=plan_to_dict(plan, tuple(plan.phases)), config=settings)
        held.enter_context(run_dir.lock())
        start = 1

    evaluate = partial(_evaluate, trainer, heldout, tokenizer, config.grpo.max_new_tokens)
    with run_dir.metrics() as metrics:
        if start == 1 and metrics.last_step is None:
            row = {"step": 0, "heldout/accuracy": evaluate()}
            metrics.append(row)
            on_step(0, row)
        for step in range(start, config.steps + 1):
            problems = [train[i] for i in order.take(config.grpo.prompts_per_step)]
            row = {"step": step, **trainer.step(problems, seed=_step_seed(config.seed, step))}
            if step % config.eval_every == 0 or step == config.steps:
                row["heldout/accuracy"] = evaluate()
            metrics.append(row)
            on_step(step, row)
            if step % config.checkpoint_every == 0 or step == config.steps:
                save_checkpoint(
                    run_dir, step, model=model, optimizer=trainer.optimizer, data_state=order.state(),
                    trainer_state={"kv_scales": _scales_to_state(trainer.kv_scales)},
                )
    write_report(run_dir)
    return run_dir


def ablate(
    policies: Sequence[Policy], config: RunConfig, out: str | Path, *,
    on_step: Callable[[str, int, dict], None] = lambda name, step, row: None,
    log: Callable[[str], None] = lambda _: None,
) -> list[Path]:
    """Run each policy with the same seed, data and model into `out/<policy>/`, then write the comparison.
    A policy whose run directory already holds a finished run is not run again, an unfinished one resumes; one
    made with another policy document or other settings is refused before any run starts."""
    names = [p.name for p in policies]
    if len(set(names)) != len(names):
        raise UsageError(f"ablate: policies must have distinct names, got {', '.join(names)}")
    taken = [name for name in names if name in ABLATION_FILES]
    if taken:  # each policy's run is out/<name>/, beside the comparison's files
        raise UsageError(f"ablate: policy name {taken[0]!r} is the name of a file ablate writes beside the runs "
                         f"({', '.join(ABLATION_FILES)}): rename the policy")
    out = Path(out)
    targets = [out / policy.name for policy in policies]
    resumes = [(target / "run.json").is_file() for target in targets]
    for policy, target, resume in zip(policies, targets, resumes):
        _check_out(policy, config, target, resume=resume)
    for policy, target, resume in zip(policies, targets, resumes):
        if _finished(target, config.steps):
            log(f"{policy.name}: finished run found in {target}, not run again")
        else:
            run(policy, config, target, resume=resume, on_step=partial(on_step, policy.name), log=log)
    return write_ablation(targets, out)


class DataOrder:
    """Indices of the training problems in a seeded order: a fresh permutation per epoch, so every problem
    is visited once per epoch. `state()` / `from_state` carry the position through checkpoints."""

    def __init__(self, size: int, seed: int, epoch: int = 0, index: int = 0) -> None:
        self.size, self.seed, self.epoch, self.index = size, seed, epoch, index
        self._permutation = self._shuffled(epoch)

    @classmethod
    def from_state(cls, state: dict, size: int, seed: int) -> DataOrder:
        return cls(size, seed, epoch=int(state["epoch"]), index=int(state["index"]))

    def state(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def take(self, count: int) -> list[int]:
        picked = []
        while len(picked) < count:
            if self.index == self.size:
                self.epoch, self.index = self.epoch + 1, 0
                self._permutation = self._shuffled(self.epoch)
            picked.append(self._permutation[self.index])
            self.index += 1
        return picked

    def _shuffled(self, epoch: int) -> list[int]:
        permutation = list(range(self.size))
        random.Random(f"data:{self.seed}:{epoch}").shuffle(permutation)
        return permutation


def _check_out(policy: Policy, config: RunConfig, out: str | Path, *, resume: bool) -> RunDir | None:
    """The run to continue in `out`, checked to be this policy's and settings' (the one check of `run` and
    `ablate`), or None after checking that a new run may start there. Cheap: called before the warm-up."""
    if not resume:
        RunDir.check_new(out)
        return None
    run_dir = RunDir.open(out, hint="without --resume, run starts a new one there")
    check_same_run(run_dir, policy=policy, config=_settings(config), recorded=_recorded_settings(run_dir),
                   may_change=(*RESUMABLE, "model_dir"), labels=_FLAGS)
    done = _last_checkpoint_step(run_dir.path)
    if config.steps < done:
        raise UsageError(f"{_setting('steps')} {config.steps}: {run_dir.path} has a checkpoint at step {done} "
                         f"already; pass --steps {done} or more to continue it")
    return run_dir


def _settings(config: RunConfig) -> dict:
    """What run.json records as the run's settings: RunConfig's fields, the user's files as absolute paths, the
    reward's backend; `model` None stands for the recipe's warmed-up model (`model_dir` is added with the directory
    it resolved to)."""
    settings = {**asdict(config), "reward": reward_backend()}  # two graders in one run would mix two runs
    for key in _PATHS:
        if settings[key] is not None:
            settings[key] = str(Path(settings[key]).expanduser().absolute())
    return settings


def _recorded_settings(run_dir: RunDir) -> dict:
    """run.json's settings in `_settings`' form. Runs recorded before `model_dir` existed hold the resolved model
    directory in `model`: a warm-up cache entry there was the recipe's own model."""
    recorded = dict(run_dir.info.get("config", {}))
    for key in _PATHS:
        if isinstance(recorded.get(key), str):
            recorded[key] = str(Path(recorded[key]).expanduser().absolute())
    if "model_dir" not in recorded and recorded.get("model") and (Path(recorded["model"]) / WARMUP_INFO).is_file():
        recorded["model"] = None
    recorded.setdefault("reward", reward_backend())  # runs recorded before the backend was: unknown, not refused
    return recorded


def _setting(name: str) -> str:
    """A RunConfig field as messages name it: with its CLI flag where it has one."""
    return f"{name} ({_FLAGS[name]})" if name in _FLAGS else name


def _problems(recipe: MathRecipe, config: RunConfig):
    """(train, held-out): the user's files where given, else the recipe's generated splits."""
    train = load_problems(config.train_data) if config.train_data else recipe.train
    if config.heldout_data:
        heldout = load_problems(config.heldout_data)
    elif config.train_data:
        heldout, train = train[: config.heldout_size], train[config.heldout_size :]
    else:
        heldout = recipe.heldout
    if not train or not heldout:
        raise UsageError("the run needs at least one training and one held-out problem")
    return train, heldout[: config.heldout_size]


def _check_problems(train: Sequence[Problem], heldout: Sequence[Problem], tokenizer, config: RunConfig) -> None:
    """Encode every problem the run may visit once, before the warm-up: a character the tokenizer lacks, or a
    prompt that leaves no room for --max-new-tokens within the model's positions, would otherwise stop the run at
    the step that draws it, and again at every resume (the data order is part of the checkpoint)."""
    limit = _position_limit(config)
    # Where each split's problems come from, and the number of the first among those its source holds.
    split_from_data = config.train_data and not config.heldout_data  # held-out: the head of --data
    sources = ((train, config.train_data, config.heldout_size if split_from_data else 0),
               (heldout, config.heldout_data or config.train_data, 0))
    for problems, source, first in sources:
        where = source or "the recipe's generated problems"
        for index, problem in enumerate(problems, start=first + 1):
            named = f"{where}: problem #{index} ({problem.prompt[:40]!r})"
            try:
                length = len(tokenizer.encode_prompt(problem))
            except DataError as err:
                raise DataError(f"{named}: {err}") from None
            if limit is not None and length + config.grpo.max_new_tokens > limit:
                raise DataError(
                    f"{named} takes {length} tokens, and with {_setting('grpo.max_new_tokens')} "
                    f"{config.grpo.max_new_tokens} exceeds the model's {limit} positions (max_position_embeddings) "
                    "(hint: a smaller --max-new-tokens, or leave such problems out of the file)")


def _position_limit(config: RunConfig) -> int | None:
    """The model's max_position_embeddings (the recipe's model's without --model); None where config.json has none."""
    if config.model is None:
        return recipe_model_config(CharTokenizer(), config.warmup)["max_position_embeddings"]
    return max_positions(resolve_config(config.model))


def _evaluate(trainer: GRPOTrainer, heldout, tokenizer, max_new_tokens: int) -> float:
    return greedy_accuracy(trainer.rollout_model(), heldout, tokenizer, reward, max_new_tokens=max_new_tokens,
                           kv_scales=trainer.kv_scales)


def _compute_dtype(plan) -> torch.dtype:
    """The activations' dtype of the modules the plan keeps unquantized (bf16 in every shipped policy)."""
    from precision_engine.numerics.quantize import COMPUTE_TORCH_DTYPE

    dtypes = {m.compute for phase in plan.phases.values() for m in phase.modules if not m.is_fp8}
    if len(dtypes) != 1:
        raise UsageError("the built-in backend computes in one dtype; the plan mixes "
                         f"{sorted(d.value for d in dtypes)}")
    return COMPUTE_TORCH_DTYPE[dtypes.pop()]


def _step_seed(seed: int, step: int) -> int:
    """The sampler's seed of one step: a function of (run seed, step) only, so resume repeats it exactly."""
    return (seed * 1_000_003 + step) % (2**63)


def _scales_to_state(scales: KVScales | None) -> dict | None:
    return None if scales is None else {"k": scales.k.tolist(), "v": scales.v.tolist()}


def _scales_from_state(state: dict | None, device: str) -> KVScales | None:
    if state is None:
        return None
    return KVScales(*(torch.tensor(state[kv], dtype=torch.float32, device=device) for kv in ("k", "v")))


def _finished(target: Path, steps: int) -> bool:
    """Whether the run in `target` has its checkpoint of step `steps` (saved after that step's row)."""
    return (target / "run.json").is_file() and _last_checkpoint_step(target) == steps


def _last_checkpoint_step(target: Path) -> int:
    checkpoints = list_checkpoints(target)
    return int(checkpoints[-1].name.removeprefix("step_")) if checkpoints else 0


__all__ = ["RECIPES", "DataOrder", "RunConfig", "ablate", "run"]
