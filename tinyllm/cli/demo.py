"""`tinyllm demo`: the main job on the embedded defaults (:mod:`tinyllm_suite.demo`, what
`make demo` runs).

The demo imports :mod:`tinyllm_suite` (and so prefect, seconds of start-up) inside the command:
every other command, and ``--help``, starts without it."""

from __future__ import annotations

import typer

from tinyllm.cli.app import app, console


@app.command()
def demo() -> None:
    """The main job on the embedded defaults (what `make demo` runs)."""
    from tinyllm_suite.demo import run_demo  # prefect, seconds of start-up: only for the demo

    raise typer.Exit(run_demo(console))
