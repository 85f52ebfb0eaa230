"""`precision sglang-args`: the SGLang server command that serves an export with a policy's rollout numerics."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from precision_engine.cli.options import PolicyOpt, SetOpt


def register(app: typer.Typer) -> None:
    app.command("sglang-args")(sglang_args)


def sglang_args(
    policy: PolicyOpt,
    model: Annotated[str, typer.Option("--model", "-m", metavar="DIR", show_default=False,
                                       help="A directory written by `precision export`.")],
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel size of the server.")] = 1,
    set_: SetOpt = None,
) -> None:
    """Print the `python -m sglang.launch_server ...` line that serves MODEL with POLICY's rollout numerics.

    Examples:
      precision export --policy jetrl_unified --model /models/Llama-3.1-8B --out /models/llama-fp8
      precision sglang-args --policy jetrl_unified --model /models/llama-fp8 --tp 2
    """
    from precision_engine.integrations.sglang import launch_command
    from precision_engine.policy import load_policy

    typer.echo(shlex.join(launch_command(load_policy(policy, overrides=set_ or []), model, tp)))
