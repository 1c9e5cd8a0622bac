"""The ``tinyllm`` Typer app, its command groups, the stdout console and the ``--debug`` switch
that every command module of :mod:`tinyllm.cli` shares.

Every command and group of the app is a :class:`Command` / :class:`Group`: its help is its
docstring with each paragraph on one line (rich wraps it to the terminal's width, so a docstring's
own line breaks never show), and an option's long names after its first are hidden aliases (an
older spelling, lm-eval's underscore spelling): they parse, but help and shell completion show
only the first (:func:`shown_names`)."""

from __future__ import annotations

import copy
import inspect
import os
from typing import Any

import typer

from tinyllm import __version__
from tinyllm.console import stdout_console


def reflow(text: str | None) -> str | None:
    """A docstring as help text: dedented, each paragraph (blocks between blank lines) on one
    line; a paragraph that starts with ``\\b`` (click's mark for "keep my line breaks") as
    written."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


def _is_option(param: Any) -> bool:
    return getattr(param, "param_type_name", None) == "option"


def shown_names(param: Any) -> list[str]:
    """The names of ``param`` that help and completion show: its short names (``-q``) and its
    first long name; any later long name is a hidden alias."""
    long = [o for o in param.opts if o.startswith("--")]
    return [o for o in param.opts if not o.startswith("--") or o == long[0]]


def hidden_aliases(params: list[Any]) -> set[str]:
    """Every hidden alias (:func:`shown_names`) of ``params``' options."""
    options = [p for p in params if _is_option(p)]
    return {o for p in options for o in p.opts} - {o for p in options for o in shown_names(p)}


def _shown(param: Any) -> Any:
    if not _is_option(param):
        return param
    shown = copy.copy(param)
    shown.opts = shown_names(param)
    return shown


class _Polished:
    """Help reflowed (:func:`reflow`), hidden aliases left out of help and completion."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["help"] = reflow(kwargs.get("help"))
        super().__init__(*args, **kwargs)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        shown = copy.copy(self)
        shown.params = [_shown(p) for p in self.params]
        super(_Polished, shown).format_help(ctx, formatter)

    def shell_complete(self, ctx: Any, incomplete: str) -> list:
        hidden = hidden_aliases(self.params)
        return [c for c in super().shell_complete(ctx, incomplete) if c.value not in hidden]


class Command(_Polished, typer.core.TyperCommand):
    """A command of :data:`app` (:class:`_Polished`)."""


class Group(_Polished, typer.core.TyperGroup):
    """A command group of :data:`app` (:class:`_Polished`)."""


class Typer(typer.Typer):
    """A Typer app whose commands are :class:`Command` and whose groups are :class:`Group`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=Group, **kwargs)

    def command(self, name: str | None = None, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", Command)
        return super().command(name, **kwargs)


app = Typer(no_args_is_help=True, help="Evaluate small language models.")
eval_app = Typer(help="Score models: perplexity, multiple-choice tasks, the zoo suite.")
zoo_app = Typer(no_args_is_help=True, help="Build the demo zoo of trained models.")
task_app = Typer(no_args_is_help=True, help="Task files: convert from lm-eval.")
server_app = Typer(no_args_is_help=True, help="A standing Prefect server on this machine.")
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
