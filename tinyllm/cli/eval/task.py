"""`tinyllm eval task`: multiple-choice accuracy of one model on a task file, with its interval
over units (:func:`tinyllm.eval.single.score_task`)."""

from __future__ import annotations

import functools
import json
from typing import Annotated

import typer

from tinyllm.cli.app import console, eval_app
from tinyllm.cli.common import Quiet, fail
from tinyllm.cli.eval.options import HF, Device, Dtype, Model
from tinyllm.console import Progress, interval_table

Task = Annotated[str, typer.Option("--task", help="Task file (formats/task-jsonl.md).")]
Metric = Annotated[str, typer.Option("--metric", help="acc or acc_norm (per UTF-8 byte).")]
MaxLength = Annotated[
    int | None,
    typer.Option(
        "--max-length",
        "--max-len",
        min=1,
        help="Tokens the model reads (default: its context); a longer context is cut from "
        "the left as lm-eval does.",
    ),
]
Delimiter = Annotated[
    str | None,
    typer.Option(
        "--target-delimiter",
        help="Score DELIM + choice as lm-eval does (acc_norm still divides by the choice's "
        "bytes); overrides the task file's target_delimiter.",
    ),
]
Tokenizer = Annotated[
    str, typer.Option("--tokenizer", help="auto (the checkpoint's / the HF folder's) or byte.")
]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the bootstrap interval.")]
NBoot = Annotated[int, typer.Option("--n-boot", min=1, help="Bootstrap resamples.")]


@eval_app.command("task")
def eval_task_cmd(
    task: Task,
    model: Model = None,
    hf: HF = None,
    metric: Metric = "acc_norm",
    max_length: MaxLength = None,
    target_delimiter: Delimiter = None,
    tokenizer: Tokenizer = "auto",
    seed: Seed = 0,
    n_boot: NBoot = 1000,
    device: Device = "auto",
    dtype: Dtype = "auto",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (with per-item scores).")
    ] = False,
    quiet: Quiet = False,
) -> None:
    """Multiple-choice accuracy of a model on a task file, with a 95% interval over its units (its items, or its 'cluster' values: Wilson, else the bootstrap over clusters)."""
    from tinyllm.eval.single import score_task  # torch and the models: not for --help

    bar = functools.partial(Progress, quiet=quiet)
    opts = dict(model=model, hf=hf, metric=metric, max_len=max_length, tokenizer=tokenizer)
    opts |= dict(target_delimiter=target_delimiter, device=device, dtype=dtype)
    try:
        out = score_task(task, **opts, seed=seed, n_boot=n_boot, progress=bar)
    except ValueError as e:
        raise fail(str(e)) from None
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    unit = "fraction correct" + (" (LL per UTF-8 byte)" if metric == "acc_norm" else " (LL)")
    title = f"{metric} of {out['model']} on {task}"
    console.print(interval_table(title, [(metric, out, unit)], task_caption(out, n_boot, seed)))


def task_caption(out: dict, n_boot: int, seed: int) -> str:
    """The caption of ``eval task``'s table: items, units, the interval's method (the bootstrap's
    resamples and seed when it is one), the item-level interval beside a clustered one, the
    warning."""
    caption = f"{out['n']} items in {out['n_units']} units; {out['interval']} interval"
    if out["interval"] == "cluster_bootstrap":
        caption += f", {n_boot} resamples, seed {seed}"
    iid = out.get("iid_interval")
    if iid:
        caption += f"; over items ({iid['method']}): [{iid['lo']:.4f}, {iid['hi']:.4f}]"
    if out.get("interval_warning"):
        caption += f"; {out['interval_warning']}"
    return caption
