"""The ``tinyllm`` command. Sub-commands are thin: they parse, call the library, print."""

from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Evaluate small language models."
)
eval_app = typer.Typer(help="Score models: perplexity, multiple-choice tasks, the zoo suite.")
zoo_app = typer.Typer(no_args_is_help=True, help="Build the demo zoo of trained models.")
app.add_typer(eval_app, name="eval")
app.add_typer(zoo_app, name="zoo")
console = Console()


@app.command()
def version() -> None:
    """Print the tinyllm version."""
    from tinyllm import __version__

    console.print(__version__)


@app.command()
def demo() -> None:
    """The main job on the embedded defaults (what `make demo` runs)."""
    from tinyllm.demo import run_demo

    raise typer.Exit(run_demo(console))


# --- tinyllm eval (the suite callback, `eval ppl`, `eval task`) ---

# --- tinyllm zoo build ---


def main() -> None:
    app()


if __name__ == "__main__":
    main()
