"""`tinyllm judge`: lm-eval runs made anywhere (``--output_path`` folders written with
``--log_samples``), each run's values with their intervals and every later run paired with the
first, Holm across the rows (:func:`tinyllm.lmeval_judge.judge`, formats/lmeval-logs.md)."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from tinyllm.cli.app import app, console
from tinyllm.cli.common import MAX_N_PERM, fail, store_option
from tinyllm.compare_render import summary_line

STYLE = {"better": "green", "worse": "bold red", "not compared": "yellow"}


def number(x: float | None, signed: bool = False) -> str:
    """``0.1234`` (4 decimals), ``2.025e+12`` for large or tiny values, ``-`` for None."""
    if x is None:
        return "-"
    if not math.isfinite(x):
        return str(x)
    if abs(x) < 1e-12:  # a floating-point end at zero (Wilson's at 0 of n)
        x = 0.0
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:+.4g}" if signed else f"{x:.4g}"
    return f"{x:+.4f}" if signed else f"{x:.4f}"


def _p(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def _interval(lo: float | None, hi: float | None, signed: bool = False) -> str:
    if lo is None or hi is None:
        return "-"
    return f"[{number(lo, signed)}, {number(hi, signed)}]"


def _metric(row: Any) -> str:
    return row.metric if row.filter == "none" else f"{row.metric} ({row.filter})"


def _table(title: str, columns: tuple[str, ...], right: tuple[str, ...]) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, title=title)
    for col in columns:
        t.add_column(col, justify="right" if col in right else "left", no_wrap=col in right)
    return t


def _values_table(j: Any) -> Table:
    cols = ("task", "metric", "run", "value", "95% interval", "n", "units", "interval")
    t = _table("values", cols, ("value", "95% interval", "n", "units"))
    for v in j.values:
        t.add_row(
            v.task, _metric(v), v.run, number(v.value), _interval(v.lo, v.hi),
            str(v.n), str(v.n_units), v.method or "-",
        )  # fmt: skip
    return t


def _comparison_table(j: Any) -> Table:
    cols = ("task", "metric", "runs", "difference", "95% interval", "p", "p (Holm)", "verdict")
    t = _table("paired, each run against A", cols, cols[3:7])
    for c in j.comparisons:
        ratio = c.delta_kind == "ratio"
        style = STYLE.get(c.verdict)
        words = f"[{style}]{c.verdict}[/]" if style else c.verdict
        t.add_row(
            c.task, _metric(c), f"{c.b} / {c.a}" if ratio else f"{c.b} - {c.a}",
            number(c.delta, signed=not ratio), _interval(c.lo, c.hi, signed=not ratio),
            _p(c.p), _p(c.p_adjusted), words,
        )  # fmt: skip
    return t


Runs = Annotated[
    list[str] | None,
    typer.Argument(
        help="Two or more lm-eval --output_path folders (or results files) written with "
        "--log_samples; the first is the one the others are compared with.",
        show_default=False,
    ),
]
ImportRun = Annotated[
    str | None,
    typer.Option(
        "--import",
        help="Import this one run (a folder or results file) as --release into --store, "
        "compared with the release before it.",
    ),
]
ImportStore = Annotated[str | None, store_option("--import")]
Release = Annotated[str | None, typer.Option("--release", help="With --import: the release name.")]
Previous = Annotated[
    str | None, typer.Option("--previous", help="With --import: the release to compare with.")
]
ClusterKey = Annotated[
    str | None,
    typer.Option(
        "--cluster-key",
        metavar="FIELD",
        help="A field of each document naming its cluster: the sampling unit of the intervals "
        "and tests (default: each document).",
    ),
]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the bootstrap and the permutations.")]
NPerm = Annotated[
    int, typer.Option("--n-perm", min=1, help="Sign-flip permutations per row (at most 1000000).")
]


def print_judgement(j: Any) -> None:
    """The runs, the values table, the paired table, then tasks not in every run and notes."""
    for r in j.runs:
        version = f", lm-eval {r['lm_eval_version']}" if r["lm_eval_version"] else ""
        line = f"{r['label']}: {r['model']} ({r['results_file']}{version})"
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(_values_table(j))
    console.print(_comparison_table(j))
    for o in j.only_in:
        line = f"{o['task']} ({o['filter']}): only in {', '.join(o['runs'])}, not compared"
        console.print(line, style="yellow", highlight=False, markup=False)
    for note in sorted({c.note for c in j.comparisons if c.note}):
        console.print(f"note: {note}", style="dim", highlight=False, markup=False, soft_wrap=True)


def import_release(
    run: str, store: str | None, release: str | None, previous: str | None, key, seed: int
) -> None:
    """``--import``: the run read and checked first (nothing is written for a bad run), then
    published as a release (:func:`tinyllm.publish.publish_run`), its comparison's summary."""
    if store is None or release is None:
        raise fail("--import: expected --store and --release")
    from tinyllm.lmeval_judge import release_report  # numpy, scipy and the store: not for --help
    from tinyllm.lmeval_logs import LogError, read_run
    from tinyllm.publish import check_publish_args, publish_run
    from tinyllm.store import StoreError

    try:
        r = read_run(run, cluster_key=key)
        report, items, units, left_out = release_report(r, release, cluster_key=key, seed=seed)
        st = check_publish_args(store, release, previous)
        out = publish_run(st, release, report, items, units=units, previous=previous, seed=seed)
    except (LogError, StoreError, ValueError) as e:
        raise fail(str(e)) from None
    n = len(report["rows"])
    rows = f"{n} row" + ("" if n == 1 else "s")
    line = f"imported {rows} of {r.results_file} as release {release} into {store}"
    console.print(line, highlight=False, markup=False, soft_wrap=True)
    if left_out:
        line = f"not imported (no 0/1 mean): {', '.join(left_out)}"
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    cmp = out["compare"]
    line = summary_line(cmp) if cmp is not None else f"{release}: the first release of the store"
    console.print(line, highlight=False, markup=False, soft_wrap=True)


@app.command("judge")
def judge_cmd(
    runs: Runs = None,
    cluster_key: ClusterKey = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the judgement as JSON.")] = False,
    seed: Seed = 0,
    n_perm: NPerm = 10_000,
    import_run: ImportRun = None,
    store: ImportStore = None,
    release: Release = None,
    previous: Previous = None,
) -> None:
    """Judge lm-eval runs made anywhere: per task and metric each run's value with its 95%
    interval, and each later run paired with the first on the same documents (sign-flip test,
    Holm across all rows); or --import one as a release of a store."""
    if import_run is not None and not runs:
        return import_release(import_run, store, release, previous, cluster_key, seed)
    runs = runs or []
    if len(runs) < 2 or import_run is not None:
        raise fail(f"expected at least 2 runs to judge or --import RUN alone, got {len(runs)}")
    if n_perm > MAX_N_PERM:
        raise fail(f"--n-perm: expected at most {MAX_N_PERM} permutations per row, got {n_perm}")
    from tinyllm.lmeval_judge import judge  # numpy and scipy: after the arguments are parsed
    from tinyllm.lmeval_logs import LogError, read_run

    try:
        read = [read_run(r, cluster_key=cluster_key) for r in runs]
        j = judge(read, cluster_key=cluster_key, seed=seed, n_perm=n_perm)
    except (LogError, ValueError) as e:
        raise fail(str(e)) from None
    if as_json:
        typer.echo(json.dumps(j.to_json(), indent=2, allow_nan=False))
    else:
        print_judgement(j)
