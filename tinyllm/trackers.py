"""One release's rows, intervals and verdicts logged to an experiment tracker: MLflow or W&B.

::

    check_trackers(["mlflow"])                        # before any work: known, its extra there
    for t in track_release(store, "r2", ["mlflow", "wandb"]):
        t.tracker, t.where, t.error                   # a failing tracker is reported, not raised

Each tracker gets one run per release, named after it, holding (:mod:`tinyllm.export`):

* numbers, per row ``<entry>/<name>``: ``value``, ``lo``, ``hi`` (its 95% interval), ``n``,
  ``n_units`` and, for a row compared with the previous release, ``delta`` (current - previous,
  in the metric's units), ``p`` and ``p_adjusted`` (Holm over the compared rows);
* words, per row: ``status``, ``metric``, ``vs_previous`` (improved, regressed, unchanged, not
  comparable, added, removed) and ``beats_baseline``; and the release, its previous release,
  suite, seed and creation time;
* the whole rows table (:func:`tinyllm.export.rows_of`) as a file of the run.

MLflow (the ``mlflow`` extra, mlflow-skinny): through ``MlflowClient`` at
``$MLFLOW_TRACKING_URI``, else :data:`MLFLOW_DEFAULT_URI` (a SQLite file in the working folder:
MLflow's own file store refuses to start unless ``MLFLOW_ALLOW_FILE_STORE=true``), experiment
``$MLFLOW_EXPERIMENT_NAME`` or ``tinyllm``; numbers as metrics, words as tags, the release's
provenance as params, the table as ``rows.json``.

W&B (the ``wandb`` extra): ``wandb.init`` in project ``$WANDB_PROJECT`` or ``tinyllm``, with
W&B's own settings from the environment (``WANDB_MODE=offline``, ``WANDB_DIR``, the API key);
numbers in one logged step, words in the run summary, the table as a ``wandb.Table``.

A tracker that fails (no server, no API key, a refused write) never undoes the release: the
report is in the store before anything is logged, and the failure comes back as
:attr:`Tracked.error`, one line, for the caller to print.
"""

from __future__ import annotations

import importlib.util
import os
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

from tinyllm.comparison import Comparison
from tinyllm.console import error_line
from tinyllm.export import (
    ROW_COLUMNS,
    release_comparison,
    rows_json,
    rows_of,
    tracked_labels,
    tracked_numbers,
)
from tinyllm.report import StoredReport
from tinyllm.store import Store

TRACKERS = ("mlflow", "wandb")
"""The trackers ``--track`` names; each one's extra has its name (``pip install 'tinyllm[mlflow]'``)."""

MODULES = {"mlflow": "mlflow", "wandb": "wandb"}
"""The module each tracker imports (installed by its extra)."""

MLFLOW_DEFAULT_URI = "sqlite:///mlflow.db"
"""Where MLflow runs go without ``$MLFLOW_TRACKING_URI``: a SQLite file in the working folder."""

DEFAULT_PROJECT = "tinyllm"
"""The MLflow experiment and the W&B project without ``$MLFLOW_EXPERIMENT_NAME`` /
``$WANDB_PROJECT``."""

MLFLOW_BATCH = 100
"""Metrics, params or tags sent per ``log_batch`` call (MLflow takes at most 100 params or tags
and 1,000 metrics per call)."""


class TrackerError(ValueError):
    """An unknown tracker, or one whose extra is not installed."""


@dataclass(frozen=True)
class Tracked:
    """What one tracker did with a release: ``where`` it logged (a run's URI or folder), or
    ``error``, one line saying why it could not (then ``where`` is None)."""

    tracker: str
    where: str | None = None
    error: str | None = None


def check_trackers(names: Iterable[str] | None) -> tuple[str, ...]:
    """``names`` without repeats, in order, when each is one of :data:`TRACKERS` and its module
    can be imported; else :class:`TrackerError`, one line naming the known trackers or the
    extra to install. Nothing is imported (``importlib.util.find_spec``)."""
    out: list[str] = []
    for name in names or ():
        if name not in TRACKERS:
            raise TrackerError(f"--track: expected one of {', '.join(TRACKERS)}, got {name!r}")
        if importlib.util.find_spec(MODULES[name]) is None:
            raise TrackerError(
                f"--track {name}: expected the {name} extra, got no module {MODULES[name]!r}: "
                f"pip install 'tinyllm[{name}]'"
            )
        if name not in out:
            out.append(name)
    return tuple(out)


def _provenance(report: StoredReport, compare: Comparison | None, store_uri: str) -> dict[str, str]:
    """The release's provenance as text: what a run's params (MLflow) or config (W&B) hold."""
    info = {
        "release": report.release,
        "previous": None if compare is None else compare.previous,
        "suite": report.suite,
        "created_at": report.created_at,
        "seed": report.seed,
        "tinyllm_version": report.tinyllm_version,
        "manifest_sha256": report.manifest_sha256,
        "store": store_uri,
    }
    return {k: str(v) for k, v in info.items() if v is not None}


def _chunks(items: list, size: int = MLFLOW_BATCH) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def log_mlflow(release: str, rows: list[dict], info: dict[str, str]) -> str:
    """One MLflow run named ``release`` (see the module's docstring); returns
    ``<tracking uri>#<run id>``. The deprecation warnings of MLflow's own dependencies
    (SQLAlchemy's, for the SQLite store) are not the user's to act on: they are not shown."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _log_mlflow(release, rows, info)


def _log_mlflow(release: str, rows: list[dict], info: dict[str, str]) -> str:
    from mlflow.entities import Metric, Param, RunTag  # optional dependency: the mlflow extra
    from mlflow.tracking import MlflowClient

    uri = os.environ.get("MLFLOW_TRACKING_URI") or MLFLOW_DEFAULT_URI
    client = MlflowClient(tracking_uri=uri)
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_PROJECT
    exp = client.get_experiment_by_name(name)
    exp_id = exp.experiment_id if exp is not None else client.create_experiment(name)
    run = client.create_run(exp_id, run_name=release, tags={"tinyllm.release": release})
    run_id = run.info.run_id
    try:
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in tracked_numbers(rows).items()]
        params = [Param(k, v) for k, v in info.items()]
        tags = [RunTag(k, v) for k, v in tracked_labels(rows).items()]
        for batch in _chunks(metrics):
            client.log_batch(run_id, metrics=batch)
        for batch in _chunks(params):
            client.log_batch(run_id, params=batch)
        for batch in _chunks(tags):
            client.log_batch(run_id, tags=batch)
        client.log_text(run_id, rows_json(rows), "rows.json")
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id)
    return f"{uri}#{run_id}"


def log_wandb(release: str, rows: list[dict], info: dict[str, str]) -> str:
    """One W&B run named ``release`` (see the module's docstring); returns the run's folder."""
    import wandb  # optional dependency: the wandb extra

    settings = wandb.Settings(silent=True, console="off", x_disable_stats=True)
    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
        name=release,
        job_type="eval",
        config=info,
        settings=settings,
        reinit="create_new",
    )
    try:
        names = [n for n, _ in ROW_COLUMNS]
        table = wandb.Table(columns=names, data=[[r[n] for n in names] for r in rows])
        run.log({**tracked_numbers(rows), "rows": table}, step=0)
        run.summary.update(tracked_labels(rows))
        where = os.path.dirname(run.dir)
    except BaseException:
        run.finish(exit_code=1)
        raise
    run.finish()
    return where


LOGGERS = {"mlflow": log_mlflow, "wandb": log_wandb}


def track_rows(
    release: str,
    report: StoredReport,
    compare: Comparison | None,
    names: Iterable[str],
    store_uri: str = "",
) -> list[Tracked]:
    """Log ``report`` (a release's stored report) with its comparison ``compare`` (or None) to
    each tracker of ``names`` (checked by :func:`check_trackers` first); one
    :class:`Tracked` per tracker, in order. A tracker that raises is caught: its
    :attr:`Tracked.error` is the error as one line, and the next tracker still runs."""
    checked = check_trackers(names)
    rows = rows_of(report, compare)
    info = _provenance(report, compare, store_uri)
    out = []
    for name in checked:
        try:
            out.append(Tracked(name, where=LOGGERS[name](release, rows, info)))
        except Exception as e:  # noqa: BLE001 - a tracker's failure is reported, never raised
            out.append(Tracked(name, error=error_line(e).removeprefix("error: ")))
    return out


def track_release(store: Store, release: str, names: Iterable[str]) -> list[Tracked]:
    """:func:`track_rows` of ``release`` as ``store`` holds it: its report and its stored
    comparison (none for the first release). Raises the store's errors (a missing release, an
    unreadable report) before any tracker is called."""
    checked = check_trackers(names)
    report = store.read_stored_report(release)
    return track_rows(release, report, release_comparison(store, release), checked, store.uri)
