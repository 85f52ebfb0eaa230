"""`precision` from a checkout: `python cli.py validate policies/*.yaml` runs the same typer app.

The app lives in precision_engine/cli/ (installed as the `precision` command). This file is the card's root-level
entry into it, as policies/ and integrations/ are; it is not installed (only `precision_engine` is).
"""

from precision_engine.cli.app import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
