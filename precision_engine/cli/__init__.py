"""The `precision` command line. `app` is the typer application; each verb lives in its own module."""
