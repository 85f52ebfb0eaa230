"""`precision run --backend verl`: verl's own PPO trainer (`python -m verl.trainer.main_ppo`) with the
overrides a policy implies (`translate`), the recipe's data and reward, and our engine plugin switched on.

    launch = build_command(policy, "math", ["actor_rollout_ref.model.path=/models/Llama-3.1-8B"], dry_run=True)
    print(launch.render())          # the exact command, every override and what the run does
    run(build_command(..., dry_run=False))

Override precedence: the recipe's defaults, then the user's overrides, then the policy's keys. A user override
of a key the policy decides is refused (the policy is what the run claims to use): change the policy with
`--set` instead. The one exception is `actor_rollout_ref.rollout.quantization=fp8`, the explicit opt-in to verl's
own FP8 re-quantization.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from precision_engine.errors import UsageError
from precision_engine.integrations.verl.runtime import POLICY_ENV, ROLLOUT_WEIGHTS_ENV
from precision_engine.integrations.verl.translate import NATIVE_FP8, POLICY_KEYS, translate
from precision_engine.models.registry import find_builtin
from precision_engine.policy.model import Policy
from precision_engine.rl.runs.files import nearest_existing
from precision_engine.rl.runs.run_dir import policy_yaml

RECIPES = ("math",)
MODEL_PATH = "actor_rollout_ref.model.path"
SAMPLES = "actor_rollout_ref.rollout.n"
ENGINE = "actor_rollout_ref.rollout.name"  # SGLang: the policy's rollout keys are SGLang's engine kwargs
ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"
# Keys that are not in verl's config tree and so need Hydra's `+` (append) prefix.
_APPENDED = ("actor_rollout_ref.rollout.engine_kwargs.sglang.", f"{ENV_VARS}.")


@dataclass(frozen=True)
class VerlLaunch:
    argv: list[str]  # the command
    overrides: dict[str, object]  # every override, resolved (recipe, user, policy), as verl reads it
    env: dict[str, str]  # added to the environment (and forwarded to Ray actors)
    notes: list[str]  # what the run does and what it does not make identical
    files: dict[str, Path] = field(default_factory=dict)  # what `write_files` writes before the start
    run_dir: Path = Path()

    def render(self) -> str:
        """The dry-run text: environment and command, one override per line, then the notes."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        lines = [f"{env} {shlex.join(self.argv[:3])} \\"]
        lines += [f"    {shlex.quote(arg)} \\" for arg in self.argv[3:]]
        lines[-1] = lines[-1].removesuffix(" \\")
        return "\n".join(lines + [""] + [f"# {note}" for note in self.notes])


_DATA_NOTE = ("data: the math recipe's generated problems, each asking for its answer after '####', which the reward "
              "reads; verl wraps them in the model's chat template, the built-in backend applies none")


def build_command(policy: Policy, recipe: str, overrides: list[str], *, dry_run: bool,
                  run_dir: str | Path | None = None) -> VerlLaunch:
    """The verl command for `policy` on `recipe`; with `dry_run=False` the policy file and data are written."""
    if recipe not in RECIPES:
        raise UsageError(f"unknown recipe {recipe!r} for the verl backend; available: {', '.join(RECIPES)}")
    user, appended = _parse(overrides)
    model = _model_path(user)
    if user.get(ENGINE, "sglang").strip("'\"") != "sglang":
        raise UsageError(f"{ENGINE}={user[ENGINE]}: the policy's rollout numerics are SGLang's engine kwargs, which "
                         "another engine ignores (hint: leave the rollout engine at sglang)")
    run_dir = _check_run_dir(Path(run_dir or Path("runs") / f"verl-{policy.name}").expanduser().resolve(), policy)
    files = {"policy": run_dir / "policy.yaml", "train": run_dir / "data" / "train.parquet",
             "test": run_dir / "data" / "test.parquet"}
    native = _native_fp8(user.pop(NATIVE_FP8, _Verbatim("null")))
    merged = _recipe_defaults(files, run_dir) | user
    samples = _int(merged[SAMPLES], SAMPLES)
    if samples < 1:
        raise UsageError(f"{SAMPLES} must be >= 1, got {samples}")
    translation = translate(policy, _plan(policy, model), native_fp8=native, samples_per_prompt=samples)
    if native and translation.overrides[NATIVE_FP8] is None:
        raise UsageError(f"{NATIVE_FP8}=fp8 re-quantizes the rollout's FP8 linears; {policy.name} has none "
                         "(hint: a policy with FP8 rollout linears, or leave it unset)")
    clash = sorted(set(user) & (set(translation.overrides) | set(POLICY_KEYS)))
    if clash:
        decided = translation.overrides.get(clash[0])
        what = "leaves it unset" if clash[0] not in translation.overrides else f"sets it to {_value(decided)}"
        raise UsageError(f"{clash[0]} is decided by the policy ({policy.name} {what}); change the policy with "
                         "--set instead")
    env = {POLICY_ENV: str(files["policy"]), ROLLOUT_WEIGHTS_ENV: translation.rollout_weights}
    resolved = merged | translation.overrides | {f"{ENV_VARS}.{k}": v for k, v in env.items()}
    argv = [sys.executable, "-m", "verl.trainer.main_ppo",
            *(_override(k, v, appended=k in appended) for k, v in resolved.items())]
    data_note = [] if "data.train_files" in user else [_DATA_NOTE]  # the user's own files say their own format
    launch = VerlLaunch(argv, resolved, env, [*translation.notes, *data_note], files, run_dir)
    if not dry_run:
        write_files(launch, policy)
    return launch


def write_files(launch: VerlLaunch, policy: Policy) -> None:
    """The merged policy (what every worker loads) and the recipe's parquet splits."""
    from precision_engine.rl.recipes.math import MathRecipe, write_verl_parquet

    launch.run_dir.mkdir(parents=True, exist_ok=True)
    launch.files["policy"].write_text(policy_yaml(policy))
    recipe = MathRecipe(seed=0)
    write_verl_parquet(recipe.train, launch.files["train"], "train")
    write_verl_parquet(recipe.heldout, launch.files["test"], "test")


def _model_path(user: dict[str, str]) -> str:
    """The user's model for verl: given, and not one of our built-in architectures (a config without weights)."""
    if MODEL_PATH not in user:
        raise UsageError(f"the verl backend needs the model: pass {MODEL_PATH}=<HF model directory>")
    model = user[MODEL_PATH].strip("'\"")
    builtin = find_builtin(model)
    if builtin is not None and model.lower() != (builtin.hf_id or "").lower() and not Path(model).is_dir():
        hf_id = f", or its HF id {builtin.hf_id}" if builtin.hf_id else ""
        raise UsageError(f"{MODEL_PATH}={model}: our built-in architecture (a config, no weights), which verl "
                         f"cannot load (hint: an HF model directory{hf_id})")
    return model


def _check_run_dir(run_dir: Path, policy: Policy) -> Path:
    """`run_dir` if this policy's verl run may write there: verl resumes from its checkpoints (resume_mode auto),
    so a directory holding another policy's run would continue that run under this policy's name."""
    existing = nearest_existing(run_dir)
    if not existing.is_dir():
        raise UsageError(f"--out {run_dir}: {existing} exists and is not a directory (hint: choose another --out)")
    written = run_dir / "policy.yaml"
    if written.is_file() and yaml.safe_load(written.read_text()) != yaml.safe_load(policy_yaml(policy)):
        raise UsageError(f"--out {run_dir} holds a verl run of another policy document ({written}); verl would "
                         "resume its checkpoints (hint: choose another --out)")
    return run_dir


def run(launch: VerlLaunch) -> int:
    """Start verl's trainer in the foreground; returns its exit code."""
    return subprocess.run(launch.argv, env=os.environ | launch.env, check=False).returncode


def _recipe_defaults(files: dict[str, Path], run_dir: Path) -> dict[str, object]:
    """GRPO on the math recipe's data with its reward; every one of these may be overridden by the user."""
    return {
        "algorithm.adv_estimator": "grpo",
        "data.train_files": str(files["train"]),
        "data.val_files": str(files["test"]),
        "reward.custom_reward_function.path": "pkg://precision_engine.integrations.verl.reward",
        "reward.custom_reward_function.name": "compute_score",
        "actor_rollout_ref.rollout.name": "sglang",
        SAMPLES: 8,
        "trainer.logger": ["console"],
        "trainer.default_local_dir": str(run_dir / "checkpoints"),
    }


def _plan(policy: Policy, model: str):
    from precision_engine.compile import compile_plan
    from precision_engine.models.loader import load_inventory

    return compile_plan(policy, load_inventory(model))


class _Verbatim(str):
    """A user's override value, passed to Hydra exactly as typed (its grammar, not ours)."""


def _parse(overrides: list[str]) -> tuple[dict[str, _Verbatim], set[str]]:
    """key -> value, and the keys the user appended with Hydra's `+` (kept: a key verl's config lacks needs it)."""
    parsed, appended = {}, set()
    for item in overrides:
        key, sep, value = item.partition("=")
        bare = key.lstrip("+")
        if not sep or not bare or bare.startswith("~"):
            raise UsageError(f"verl override {item!r} is not key=value or +key=value (e.g. trainer.total_epochs=1)")
        if bare != key:
            appended.add(bare)
        parsed[bare] = _Verbatim(value)
    return parsed, appended


def _native_fp8(value: str) -> bool:
    """The user's `rollout.quantization`: fp8 opts into verl's re-quantization; null (or unset) is ours."""
    choice = value.strip("'\"").lower()
    if choice not in ("fp8", "null", "none", ""):
        raise UsageError(f"{NATIVE_FP8}={value}: the policy decides the rollout's quantization (fp8 opts into "
                         "verl's own re-quantization of the policy's FP8 linears; null is precision-engine's bytes)")
    return choice == "fp8"


def _int(value: object, key: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{key} must be an integer, got {value!r}") from None


def _override(key: str, value: object, *, appended: bool = False) -> str:
    prefix = "+" if appended or key.startswith(_APPENDED) else ""
    return f"{prefix}{key}={value if isinstance(value, _Verbatim) else _value(value)}"


def _value(value: object) -> str:
    """A Python value as Hydra's override grammar reads it back (floats with repr: the exact double)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(_value(v) for v in value) + "]"
    text = str(value)
    if text and all(c.isalnum() or c in "_-./:" for c in text) and text.lower() not in ("null", "true", "false"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
