"""`tinyllm export`: one release of a store as CSV or Parquet files (:mod:`tinyllm.export`),
and logged to MLflow or W&B (:mod:`tinyllm.trackers`). ``--track`` is shared with
``eval --suite zoo --release R`` (:mod:`tinyllm.cli.eval.suite`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tinyllm import safeio
from tinyllm.cli.app import app, console
from tinyllm.cli.common import DEFAULT_STORE, Store, existing_store, fail, store_error
from tinyllm.console import warning_line

Track = Annotated[
    list[str] | None,
    typer.Option(
        "--track",
        help="Log the release's rows, intervals and verdicts to this tracker (repeatable): "
        "mlflow ($MLFLOW_TRACKING_URI, else sqlite:///mlflow.db) or wandb (W&B's own "
        "settings: WANDB_MODE, WANDB_PROJECT, ...).",
    ),
]


def check_track(track: list[str] | None) -> tuple[str, ...]:
    """``--track``'s trackers (:func:`tinyllm.trackers.check_trackers`), or exit 2 with one line
    naming the known trackers or the extra to install."""
    from tinyllm.trackers import TrackerError, check_trackers  # the store: after parsing

    try:
        return check_trackers(track)
    except TrackerError as e:
        raise fail(str(e)) from None


def print_tracked(release: str, results: list[Any]) -> int:
    """One line per tracker: where it logged ``release``, or a warning saying why it could not;
    returns how many failed."""
    for t in results:
        if t.error is None:
            console.print(f"{release} logged to {t.tracker}: {t.where}", highlight=False)
        else:
            msg = f"{release} not logged to {t.tracker}: {t.error}"
            typer.echo(warning_line(msg), err=True)
    return sum(t.error is not None for t in results)


def check_export(fmt: str, out: str | None, track: tuple[str, ...]) -> None:
    """Everything about `export` that can be checked before the store is read."""
    from tinyllm.export import ExportError, check_format, check_out  # numpy: after parsing

    if out is None and not track:
        raise fail("export: expected --out DIR, --track NAME or both, got neither")
    try:
        check_format(fmt)
        if out is not None:
            check_out(out)
    except ExportError as e:
        raise fail(str(e)) from None


Release = Annotated[str, typer.Argument(help="The release to export.")]
Format = Annotated[str, typer.Option("--format", help="csv or parquet (needs pyarrow).")]
Out = Annotated[
    str | None,
    typer.Option(
        "--out", help="Write <release>.rows.<format> and <release>.items.<format> into this folder."
    ),
]


@app.command("export")
def export_cmd(
    release: Release,
    store: Store = DEFAULT_STORE,
    fmt: Format = "csv",
    out: Out = None,
    track: Track = None,
) -> None:
    """A release's rows and per-item scores (with their unit ids) as CSV or Parquet files
    (formats/export.md), and/or logged to MLflow or W&B; exit 1 when a tracker failed."""
    from tinyllm.export import ExportError, export_release  # numpy and the store: after parsing
    from tinyllm.store import StoreError
    from tinyllm.trackers import track_release

    trackers = check_track(track)
    check_export(fmt, out, trackers)
    st = existing_store(store)
    try:
        if out is not None:
            e = export_release(st, release, out, fmt)
            console.print(f"{e.n_rows} rows: {e.rows_path}", highlight=False, soft_wrap=True)
            console.print(f"{e.n_items} items: {e.items_path}", highlight=False, soft_wrap=True)
        results = track_release(st, release, trackers) if trackers else []
    except (StoreError, ExportError, safeio.UnsafePathError) as e:
        store_error(e)
    if print_tracked(release, results):
        raise typer.Exit(1)
