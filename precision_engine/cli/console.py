"""The rich console every verb prints its tables and progress through.

Rich ends a print into a closed pipe (`precision plan ... | head`) with exit status 1, which is a verdict here
(`app.EXIT_VERDICT`: invalid, different). This console raises the BrokenPipeError instead, so the app ends a closed
stdout one way for every writer, typer's and rich's alike (`app.EXIT_PIPE_CLOSED`).

Markup is off: what the verbs print holds the user's text (paths, `--set` values, policy names), and rich read
`[...]` in it as markup and dropped it (`rules.unified[0].match=[x]` printed as `...match=`). Style goes in
`rich.text.Text` instead.
"""

from __future__ import annotations

from rich.console import Console


class VerbConsole(Console):
    def __init__(self, **options) -> None:
        super().__init__(**{"markup": False, **options})

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError("the reader of this output went away")
