"""`tinyllm eval lmeval`: lm-evaluation-harness tasks scored by our engine, every metric with its
95% interval and n (:mod:`tinyllm.eval.lmeval.run`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tinyllm.cli.app import DEBUG, console, eval_app
from tinyllm.cli.common import fail
from tinyllm.cli.lm import HF, Device, Dtype, Model

Tasks = Annotated[str, typer.Option("--tasks", help="Comma-separated lm-eval task names.")]
IncludePath = Annotated[
    str | None,
    typer.Option("--include-path", help="A folder of task YAMLs (may include bundled ones)."),
]
NoBundled = Annotated[
    bool,
    typer.Option(
        "--no-bundled", help="Index only --include-path, not lm-eval's bundled tasks (faster)."
    ),
]
FewShot = Annotated[int | None, typer.Option("--num-fewshot", min=0, help="Few-shot examples.")]
Limit = Annotated[int | None, typer.Option("--limit", min=1, help="Documents per task.")]
Rolling = Annotated[
    str,
    typer.Option(
        "--rolling",
        help="Rolling perplexity windows: lmeval (lm-eval's own, as published) or strided "
        "(ours, every token with at least C - s tokens of context: the fairer number).",
    ),
]
Stride = Annotated[
    int | None,
    typer.Option("--stride", min=1, help="Stride of --rolling strided (default C // 2)."),
]
Seed = Annotated[int, typer.Option("--seed", help="lm-eval's seeds and the bootstrap's.")]
NBoot = Annotated[int, typer.Option("--n-boot", min=1, help="Bootstrap resamples.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON (with per-document scores).")]
ClusterKey = Annotated[
    str | None,
    typer.Option(
        "--cluster-key",
        metavar="FIELD",
        help="A document field whose value (a string or an integer) is the document's sampling "
        "unit: intervals over those clusters (default: each document its own unit).",
    ),
]
MaxLength = Annotated[
    int | None,
    typer.Option("--max-length", min=1, help="Tokens the model reads (default: its context)."),
]


@eval_app.command("lmeval")
def eval_lmeval_cmd(
    tasks: Tasks,
    model: Model = None,
    hf: HF = None,
    include_path: IncludePath = None,
    no_bundled: NoBundled = False,
    num_fewshot: FewShot = None,
    limit: Limit = None,
    seed: Seed = 0,
    n_boot: NBoot = 1000,
    cluster_key: ClusterKey = None,
    rolling: Rolling = "lmeval",
    stride: Stride = None,
    max_length: MaxLength = None,
    device: Device = "auto",
    dtype: Dtype = "auto",
    as_json: AsJson = False,
) -> None:
    """lm-eval tasks (lm-eval's own configs: a task config is code) scored by our engine, 95% intervals.

    Metrics under lm-eval's names (acc_norm by characters, acc_bytes by bytes); intervals over units, each document or, with --cluster-key, each cluster (docs/definitions.md): Wilson for 0/1 scores of single documents, else the bootstrap over units, each in the metric's units; group aggregates as lm-eval weights them. Data from local files or the datasets cache only: offline unless you set HF_DATASETS_OFFLINE or HF_HUB_OFFLINE; a data file over 256 MiB is refused (TINYLLM_LMEVAL_MAX_DATA_BYTES sets another limit).
    """
    if (model is None) == (hf is None):
        raise fail("expected exactly one of --model DIR or --hf DIR")
    quiet_lm_eval()
    opts = dict(include_path=include_path, include_defaults=not no_bundled, limit=limit)
    opts |= dict(num_fewshot=num_fewshot, seed=seed, n_boot=n_boot, cluster_key=cluster_key)
    backend = {"rolling": rolling, "stride": stride, "max_length": max_length}
    load = dict(hf=hf, ckpt=model, device=device, dtype=dtype)
    out = evaluate_tasks(tasks, load, opts | dict(quiet=not DEBUG["on"], backend=backend))
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    for name, task in out["tasks"].items():
        console.print(task_table(name, task, out))
    for name, group in out["groups"].items():
        console.print(task_table(f"{name} (group of {len(group['tasks'])} tasks)", group, out))


def evaluate_tasks(tasks: str, load: dict, opts: dict) -> dict:
    """:func:`tinyllm.eval.lmeval.run.evaluate` of the ``--tasks`` on the model ``load`` names
    (:func:`tinyllm.eval.lmeval.run.load`); a bad input is one line (:func:`fail`)."""
    from tinyllm.eval.lmeval import MissingLmEvalError, run  # torch and lm-eval: not for --help

    try:
        specs = task_specs(tasks, opts["include_path"])
        lm, tok = run.load(**load)
        return run.evaluate(specs, lm, tok, **opts)
    except (OSError, ValueError, MissingLmEvalError) as e:
        raise fail(str(e)) from None


def task_specs(tasks: str, include_path: str | None) -> list[str | dict] | str:
    """The ``--tasks`` names, each task that a YAML directly in ``--include-path`` names read
    from that YAML with its paths resolved against the folder
    (:func:`tinyllm.eval.lmeval.task_files.folder_tasks`: a zoo's task folder runs from anywhere)."""
    from tinyllm.eval.lmeval.task_files import folder_tasks  # not for --help

    names = [t for t in tasks.split(",") if t]
    if not names or include_path is None or not Path(include_path).is_dir():
        return tasks  # run.evaluate says what is wrong with them
    return folder_tasks(names, include_path)


def quiet_lm_eval() -> None:
    """lm-eval's and datasets' INFO / WARNING log lines and datasets' progress bars off, so the
    output is the tables (``--debug`` keeps them: they say how lm-eval built each task); lm-eval's
    git probe and request bar are off for the run itself (``run.evaluate(quiet=...)``)."""
    if DEBUG["on"]:
        return
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    try:
        from datasets.utils import logging as ds_logging  # lm-eval's dependency, when present
    except ImportError:
        return
    ds_logging.set_verbosity_error()
    ds_logging.disable_progress_bar()


def task_table(name: str, task: dict, out: dict) -> Table:
    """One task's metrics: value, 95% interval, its method, n and the units it is over (``-``
    where none is known); the caption names lm-eval's version, the cluster key and each
    metric's warning (fewer than 10 units)."""
    shots = "" if out["num_fewshot"] is None else f", {out['num_fewshot']}-shot"
    caption = [f"lm-eval {out['lm_eval_version']}"]
    if task.get("cluster_key"):
        caption.append(f"units: clusters of {task['cluster_key']!r}")
    warnings = dict.fromkeys(m.get("warning") for m in task["metrics"].values())
    caption += [w for w in warnings if w]
    table = Table(title=f"{name}{shots}", caption="; ".join(caption))
    for col in ("metric", "value", "95% lo", "95% hi", "interval", "n", "units"):
        table.add_column(col, justify="left" if col in ("metric", "interval") else "right")

    def num(x):
        return "-" if x is None else f"{x:.4f}"

    for key, m in task["metrics"].items():
        units = "-" if m.get("n_units") is None else str(m["n_units"])
        row = (num(m["value"]), num(m["lo"]), num(m["hi"]), m["interval"] or "-", str(m["n"]))
        table.add_row(key, *row, units)
    return table
