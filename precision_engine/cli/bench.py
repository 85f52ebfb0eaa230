"""CLI verbs (being written)."""

import typer


def register(app: typer.Typer) -> None:
    pass
