"""`tinyllm task import-lmeval`: an lm-eval multiple-choice task as a tinyllm task file
(:func:`tinyllm.lmeval_import.import_task`)."""

from __future__ import annotations

from typing import Annotated

import typer

from tinyllm.cli.app import console, task_app
from tinyllm.cli.common import check_target, fail


@task_app.command("import-lmeval")
def task_import_lmeval_cmd(
    config: Annotated[
        str, typer.Argument(help="An lm-eval multiple-choice task YAML (local data).")
    ],
    out: Annotated[str, typer.Option("--out", help="The task file to write (JSONL).")],
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            help="Data split (default: test_split, validation_split, train_split).",
        ),
    ] = None,
) -> None:
    """Convert a local lm-evaluation-harness multiple-choice task into a tinyllm task file."""
    from tinyllm.lmeval_import import import_task  # jinja2 (a tenth of a second): not for --help

    check_target(out)  # before the conversion: nothing is read or written for a bad --out
    try:
        path, n = import_task(config, out, split)
    except (ValueError, OSError) as e:
        raise fail(str(e)) from None
    console.print(f"wrote {n} items to {path}")
