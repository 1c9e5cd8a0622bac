"""The ``tinyllm`` Typer app, its command groups, the stdout console and the ``--debug`` switch
that every command module of :mod:`tinyllm.cli` shares."""

from __future__ import annotations

import os

import typer

from tinyllm import __version__
from tinyllm.console import stdout_console

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Evaluate small language models."
)
eval_app = typer.Typer(help="Score models: perplexity, multiple-choice tasks, the zoo suite.")
zoo_app = typer.Typer(no_args_is_help=True, help="Build the demo zoo of trained models.")
task_app = typer.Typer(no_args_is_help=True, help="Task files: convert from lm-eval.")
server_app = typer.Typer(no_args_is_help=True, help="A standing Prefect server on this machine.")
app.add_typer(eval_app, name="eval")
app.add_typer(zoo_app, name="zoo")
app.add_typer(task_app, name="task")
app.add_typer(server_app, name="server")

console = stdout_console()
"""Where results (tables, JSON) are printed; progress and errors go to stderr."""

DEBUG = {"on": bool(os.environ.get("TINYLLM_DEBUG"))}
"""Whether errors and warnings are shown in full (``--debug`` or ``TINYLLM_DEBUG=1``): the
traceback instead of one ``error:`` line, Python's own warning format instead of one
``warning:`` line, and Prefect's full console log."""


def _flag_display_type(self, ctx):
    """Help shows a value's type (``--store <str>``) but no tag for a flag (``--json``)."""
    if getattr(self, "is_flag", False) and not getattr(self, "metavar", None):
        return None
    return _typer_display_type(self, ctx)


_typer_display_type = typer.core.TyperOption.display_type_rich
typer.core.TyperOption.display_type_rich = _flag_display_type


@app.callback()
def _global_options(
    debug: bool = typer.Option(
        False,
        "--debug",
        help="On an error, print the full traceback, not one line; show third-party output.",
    ),
) -> None:
    """Evaluate small language models."""
    if debug:
        DEBUG["on"] = True
        # the library and worker processes read the environment: transformers' progress bars
        # and load reports are shown only while it is set (tinyllm.models.hf_checks)
        os.environ["TINYLLM_DEBUG"] = "1"


@app.command()
def version() -> None:
    """Print the tinyllm version."""
    console.print(__version__)
