"""Options shared by several verbs, defined once so their flags, metavars and help read the same everywhere."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

_POLICY_HELP = "A policy file, or the name of a shipped policy (bf16_baseline, jetrl_unified, ...)."

PolicyOpt = Annotated[str, typer.Option("--policy", "-p", metavar="POLICY", help=_POLICY_HELP, show_default=False)]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--set",
        metavar="KEY.PATH=VALUE",
        show_default=False,
        help="Override a policy key after `extends` (value parsed as YAML; null removes), e.g. "
        "--set rules.unified[1].linear.kernel=triton. Repeatable.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for machines instead of text and tables.")]
