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
from tinyllm.cli.eval.options import HF, Device, Dtype, Model

Tasks = Annotated[str, typer.Option("--tasks", help="Comma-separated lm-eval task names.")]
IncludePath = Annotated[
    str | None,
    typer.Option(
        "--include-path",
        "--include_path",
        help="A folder of task YAMLs (may include bundled ones).",
    ),
]
NoBundled = Annotated[
    bool,
    typer.Option(
        "--no-bundled", help="Index only --include-path, not lm-eval's bundled tasks (faster)."
    ),
]
FewShot = Annotated[
    int | None, typer.Option("--num-fewshot", "--num_fewshot", min=0, help="Few-shot examples.")
]
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
ModelArgs = Annotated[
    str | None,
    typer.Option(
        "--model-args",
        "--model_args",
        metavar="ARGS",
        help="lm-eval's model args: pretrained=DIR (a local HF folder, as --hf), dtype=, device=, "
        "batch_size=, and the backend's max_length=, rolling=, stride=.",
    ),
]
BatchSize = Annotated[
    int | None,
    typer.Option("--batch-size", "--batch_size", min=1, help="Rows per generation batch."),
]
OutputPath = Annotated[
    str | None,
    typer.Option(
        "--output-path",
        "--output_path",
        metavar="DIR",
        help="Also write lm-eval's results file into DIR (as <model>/results_<date>.json, "
        "our intervals in its 'tinyllm' block; formats/lmeval-results.md).",
    ),
]
LogSamples = Annotated[
    bool,
    typer.Option(
        "--log-samples",
        "--log_samples",
        help="With --output-path: lm-eval's per-document samples_<task>_<date>.jsonl too.",
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
    model_args: ModelArgs = None,
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
    batch_size: BatchSize = None,
    output_path: OutputPath = None,
    log_samples: LogSamples = False,
    as_json: AsJson = False,
) -> None:
    """lm-eval tasks (lm-eval's own configs: a task config is code) scored by our engine, 95% intervals.

    Metrics under lm-eval's names (acc_norm by characters, acc_bytes by bytes); intervals over units, each document or, with --cluster-key, each cluster (docs/definitions.md): Wilson for 0/1 scores of single documents, else the bootstrap over units, each in the metric's units; group aggregates as lm-eval weights them. Data from local files or the datasets cache only: offline unless you set HF_DATASETS_OFFLINE or HF_HUB_OFFLINE; a data file over 256 MiB is refused (TINYLLM_LMEVAL_MAX_DATA_BYTES sets another limit).

    lm-eval's own spellings work too: --model_args, --include_path, --num_fewshot, --batch_size, --output_path, --log_samples.
    """
    if log_samples and output_path is None:
        raise fail("expected --output-path DIR with --log-samples, got none")
    backend = {"rolling": rolling, "stride": stride, "max_length": max_length}
    backend |= {} if batch_size is None else {"batch_size": batch_size}
    load = dict(hf=hf, ckpt=model, device=device, dtype=dtype)
    opts = dict(include_path=include_path, include_defaults=not no_bundled, limit=limit)
    opts |= dict(num_fewshot=num_fewshot, seed=seed, n_boot=n_boot, cluster_key=cluster_key)
    out = _evaluate(tasks, load, backend, opts, (model_args, output_path, log_samples))
    _print(out, as_json)


def _evaluate(tasks: str, load: dict, backend: dict, opts: dict, files: tuple) -> dict:
    """:func:`evaluate_tasks` with ``--model_args`` merged in; lm-eval's results (and samples)
    files written under ``--output_path`` when given, each named on stderr."""
    model_args, output_path, log_samples = files
    load, backend = with_model_args(model_args, load, backend)
    quiet_lm_eval()
    run: dict = {}
    opts = dict(opts, quiet=not DEBUG["on"], backend=backend, lm_eval_run=run)
    out = evaluate_tasks(tasks, load, opts)
    if output_path is not None:
        for f in write_results(run, out, output_path, model_args, load, log_samples):
            typer.echo(f"wrote {f}", err=True)
    return out


def _print(out: dict, as_json: bool) -> None:
    """The run as JSON, or one table per task and per group."""
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    for name, task in out["tasks"].items():
        console.print(task_table(name, task, out))
    for name, group in out["groups"].items():
        console.print(task_table(f"{name} (group of {len(group['tasks'])} tasks)", group, out))


def with_model_args(model_args: str | None, load: dict, backend: dict) -> tuple[dict, dict]:
    """``load`` and ``backend`` with lm-eval's ``--model_args`` (``pretrained=DIR``, ``dtype``,
    ``device``, ``batch_size``, the backend's keywords, which win over the flags:
    :func:`tinyllm.eval.lmeval.backend.model_args`) merged in; the folder there and ``--hf`` /
    ``--model``, or a ``dtype`` / ``device`` there and another one given as a flag, is one
    line."""
    if model_args is None:
        if (load["ckpt"] is None) == (load["hf"] is None):
            raise fail(
                "expected exactly one of --model DIR or --hf DIR (or --model_args pretrained=DIR)"
            )
        return load, backend
    from tinyllm.eval.lmeval import MissingLmEvalError  # torch and lm-eval: not for --help

    try:
        from lm_eval.utils import simple_parse_args_string  # lm-eval: not for --help

        from tinyllm.eval.lmeval.backend import model_args as parse_model_args  # torch, lm-eval

        folder, load_kw, kw = parse_model_args(simple_parse_args_string(model_args))
    except (ValueError, MissingLmEvalError, ImportError) as e:
        raise fail(str(e)) from None
    if load["ckpt"] is not None or load["hf"] not in (None, folder):
        given = f"--hf {load['hf']}" if load["ckpt"] is None else f"--model {load['ckpt']}"
        raise fail(f"expected one model, got --model_args pretrained={folder} and {given}")
    load = dict(load, hf=folder)
    for k, v in load_kw.items():
        if v != "auto" and load[k] not in ("auto", v):
            raise fail(f"expected one {k}, got {k}={v} in --model_args and --{k} {load[k]}")
        load[k] = v if v != "auto" else load[k]
    return load, backend | kw


def write_results(
    run: dict, out: dict, output_path: str, model_args: str | None, load: dict, samples: bool
) -> list:
    """lm-eval's results (and with ``samples`` its samples) files of the run under
    ``output_path`` (:func:`tinyllm.eval.lmeval.results_files.write`); a bad path is one line."""
    from tinyllm.eval.lmeval import results_files  # torch: not for --help

    args = results_files.model_args_string(model_args, load["hf"], load["ckpt"])
    try:
        return results_files.write(run, out, output_path, model_args=args, log_samples=samples)
    except (OSError, ValueError) as e:
        raise fail(str(e)) from None


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
    from tinyllm.eval.lmeval.task_files import folder_tasks  # torch: not for --help

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
