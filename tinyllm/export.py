"""One release of a store as two flat tables, for pandas, spreadsheets and trackers.

::

    rows  = release_rows(store, "r2")          # one dict per row, keys ROW_COLUMNS
    items = release_items(store, "r2")         # one ItemBlock per row with per-item scores
    export_release(store, "r2", "out/", "csv") # out/r2.rows.csv and out/r2.items.csv

The rows table is the release's report.json, one line per row (formats/export.md names every
column): what was scored (entry, family, kind, metric), the value and its 95% interval with
its method, the count of items ``n`` and of sampling units ``n_units``, the status and why a
row has no value, the trivial baseline's verdict, and the verdict against the release it was
compared with (its stored comparison: delta, its interval, p and the Holm-adjusted p).

The items table is one line per item of every row that has per-item scores: the entry, the
item's index in the row's item order, its score (per-token NLL in nats for LM rows, 0/1 for
accuracy rows, NaN where a word-vector row does not cover a pair), its sampling unit id and
the baseline's score of the same item. The unit is the row's stored unit id; the item's own
index when the row has ``n_units == n`` and no unit file (every item its own unit); empty when
the units are unknown (reports written before units).

Files are written only inside ``out`` (a folder, created when missing, never a link) and each
one all or nothing (:func:`tinyllm.safeio.write_under`). CSV needs nothing beyond the standard
library; Parquet needs pyarrow (the ``parquet`` extra).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from tinyllm import safeio
from tinyllm.comparison import Comparison, ComparisonRow
from tinyllm.report import StoredReport
from tinyllm.store import Store, StoreKeyError

FORMATS = ("csv", "parquet")
"""The file formats :func:`export_release` writes."""

ROW_COLUMNS: tuple[tuple[str, str], ...] = (
    ("release", "string"),
    ("created_at", "string"),
    ("entry", "string"),
    ("family", "string"),
    ("kind", "string"),
    ("metric", "string"),
    ("value", "float"),
    ("lo", "float"),
    ("hi", "float"),
    ("interval", "string"),
    ("n", "int"),
    ("n_units", "int"),
    ("status", "string"),
    ("error_type", "string"),
    ("error", "string"),
    ("reason", "string"),
    ("interval_warning", "string"),
    ("checkpoint", "string"),
    ("data", "string"),
    ("checkpoint_sha256", "string"),
    ("data_sha256", "string"),
    ("seconds", "float"),
    ("baseline", "string"),
    ("baseline_value", "float"),
    ("beats_baseline", "string"),
    ("beats_baseline_delta", "float"),
    ("beats_baseline_p", "float"),
    ("beats_baseline_p_adjusted", "float"),
    ("previous", "string"),
    ("vs_previous", "string"),
    ("delta", "float"),
    ("delta_lo", "float"),
    ("delta_hi", "float"),
    ("p", "float"),
    ("p_adjusted", "float"),
    ("mde", "float"),
)
"""The rows table's columns and their types, in order (formats/export.md)."""

ITEM_COLUMNS: tuple[tuple[str, str], ...] = (
    ("release", "string"),
    ("entry", "string"),
    ("item", "int"),
    ("score", "float"),
    ("unit", "int"),
    ("baseline_score", "float"),
)
"""The items table's columns and their types, in order (formats/export.md)."""


class ExportError(ValueError):
    """An export that cannot be made: an unknown format, pyarrow missing, an unsafe ``out``."""


@dataclass(frozen=True)
class ItemBlock:
    """The per-item scores of one row: ``scores`` (float64), ``units`` (int64 or None: the
    units unknown) and ``baseline`` (float64 or None: no baseline scores), all in the row's
    item order and of one length."""

    entry: str
    scores: np.ndarray
    units: np.ndarray | None
    baseline: np.ndarray | None


@dataclass(frozen=True)
class Exported:
    """What :func:`export_release` wrote: the two files and how many lines each holds."""

    rows_path: Path
    items_path: Path
    n_rows: int
    n_items: int


def release_comparison(store: Store, release: str) -> Comparison | None:
    """The release's stored comparison (:meth:`Store.read_compare`), None when it has none (the
    first release of a store). An unreadable one raises the store's error naming its key."""
    try:
        return store.read_compare(release)
    except StoreKeyError:
        if not store.has_report(release):
            raise
        return None


def _versus_previous(c: ComparisonRow | None) -> dict:
    """The columns of a row's comparison with the previous release (None without one)."""
    if c is None:
        return dict.fromkeys(
            ("vs_previous", "delta", "delta_lo", "delta_hi", "p", "p_adjusted", "mde")
        )
    return {
        "vs_previous": c.verdict,
        "delta": c.delta,
        "delta_lo": c.lo,
        "delta_hi": c.hi,
        "p": c.p,
        "p_adjusted": c.p_adjusted,
        "mde": c.mde,
    }


def rows_of(report: StoredReport, compare: Comparison | None) -> list[dict]:
    """One dict per row of ``report`` (keys: the names of :data:`ROW_COLUMNS`, None where a row
    has no such value), each with its verdict from ``compare`` when given."""
    verdicts = {} if compare is None else compare.by_name()
    out = []
    for r in report.rows:
        base, beats = r.baseline, r.beats_baseline
        line = {
            "release": report.release,
            "created_at": report.created_at,
            "entry": r.name,
            "family": r.family,
            "kind": r.kind,
            "metric": r.metric,
            "value": r.value,
            "lo": r.lo,
            "hi": r.hi,
            "interval": r.interval,
            "n": r.n,
            "n_units": r.n_units,
            "status": r.status,
            "error_type": None if r.error is None else r.error.type,
            "error": None if r.error is None else r.error.message,
            "reason": r.reason,
            "interval_warning": r.interval_warning,
            "checkpoint": r.checkpoint,
            "data": r.data,
            "checkpoint_sha256": r.checkpoint_sha256,
            "data_sha256": r.data_sha256,
            "seconds": r.seconds,
            "baseline": None if base is None else base.name,
            "baseline_value": None if base is None else base.value,
            "beats_baseline": None if beats is None else beats.verdict,
            "beats_baseline_delta": None if beats is None else beats.delta,
            "beats_baseline_p": None if beats is None else beats.p,
            "beats_baseline_p_adjusted": None if beats is None else beats.p_adjusted,
            "previous": None if compare is None else compare.previous,
            **_versus_previous(verdicts.get(r.name)),
        }
        out.append(line)
    return out


def release_rows(store: Store, release: str) -> list[dict]:
    """The rows table of ``release`` (:func:`rows_of` of its report and stored comparison)."""
    return rows_of(store.read_stored_report(release), release_comparison(store, release))


def release_items(
    store: Store, release: str, report: StoredReport | None = None
) -> Iterator[ItemBlock]:
    """One :class:`ItemBlock` per row of ``release`` whose ``items`` names a file, in row order.

    Each array is read by the store's checked readers (:meth:`Store.read_items`,
    :meth:`Store.read_units`: never unpickled, the header checked first); unit ids or baseline
    scores of another length than the row's scores raise the store's error naming the file."""
    doc = store.read_stored_report(release) if report is None else report
    for r in doc.rows:
        if not r.items:
            continue
        scores = store.read_items(release, r.name, r.items)
        units = None
        if r.units:
            units = store.read_units(release, r.units, scores.size)
        elif r.n_units is not None and r.n_units == scores.size:
            units = np.arange(scores.size, dtype=np.int64)  # every item its own unit
        base_ref = None if r.baseline is None else r.baseline.items
        baseline = None
        if base_ref:
            baseline = store.read_items(release, r.name, base_ref)
            if baseline.size != scores.size:
                raise ExportError(
                    f"{store.where(store.ref_key(release, base_ref))}: expected {scores.size} "
                    f"baseline scores (one per item of {r.name}), got {baseline.size}"
                )
        yield ItemBlock(r.name, scores, units, baseline)


def check_format(fmt: str) -> str:
    """``fmt`` when it is one of :data:`FORMATS` and can be written here; else
    :class:`ExportError` naming the formats, or the extra that Parquet needs."""
    if fmt not in FORMATS:
        raise ExportError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ExportError(
            "--format parquet: needs pyarrow, which is not installed: pip install 'tinyllm[parquet]'"
        )
    return fmt


def check_out(out: str | Path) -> Path:
    """``out`` when it is a folder or a new path (a link, a file or anything else is refused:
    :class:`ExportError` naming it)."""
    got = safeio.path_kind(out)
    if got not in (None, "a folder"):
        raise ExportError(f"--out {out}: expected a folder or a new path, got {got}")
    return Path(out)


def _cell(value: Any) -> Any:
    """A CSV cell: empty for None, ``repr`` of a float (the shortest string that reads back
    as the same float; ``nan``, ``inf``), the value itself otherwise."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return value


def _csv_writer(names: list[str], lines: Iterator[tuple]) -> Callable[[BinaryIO], None]:
    """A function that writes a header of ``names`` and then ``lines`` as UTF-8 CSV to a binary
    file, line by line (an items table of millions of tokens is never held as one string)."""

    def write(f: BinaryIO) -> None:
        text = io.TextIOWrapper(f, encoding="utf-8", newline="")
        w = csv.writer(text, lineterminator="\n")
        w.writerow(names)
        for line in lines:
            w.writerow([_cell(v) for v in line])
        text.flush()
        text.detach()  # the caller's file stays open

    return write


def _item_lines(release: str, blocks: list[ItemBlock]) -> Iterator[tuple]:
    for b in blocks:
        units = b.units.tolist() if b.units is not None else [None] * b.scores.size
        base = b.baseline.tolist() if b.baseline is not None else [None] * b.scores.size
        for i, (s, u, bs) in enumerate(zip(b.scores.tolist(), units, base, strict=True)):
            yield (release, b.entry, i, s, u, bs)


def _arrow_type(kind: str) -> Any:
    import pyarrow as pa  # optional dependency: the parquet extra

    return {"string": pa.string(), "float": pa.float64(), "int": pa.int64()}[kind]


def _parquet_bytes(table: Any) -> bytes:
    import pyarrow.parquet as pq  # optional dependency: the parquet extra

    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _rows_table(rows: list[dict]) -> Any:
    import pyarrow as pa  # optional dependency: the parquet extra

    cols = {
        name: pa.array([r[name] for r in rows], type=_arrow_type(kind))
        for name, kind in ROW_COLUMNS
    }
    return pa.table(cols)


def _items_table(release: str, blocks: list[ItemBlock]) -> Any:
    import pyarrow as pa  # optional dependency: the parquet extra

    def joined(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)

    n = [b.scores.size for b in blocks]
    entries = [b.entry for b in blocks for _ in range(b.scores.size)]
    items = joined([np.arange(k, dtype=np.int64) for k in n], np.int64)
    scores = joined([b.scores for b in blocks], np.float64)
    # a block without units or baseline contributes nulls: a mask beside the joined values
    units = joined(
        [np.zeros(0, np.int64) if b.units is None else b.units for b in blocks], np.int64
    )
    unit_mask = joined([np.full(b.scores.size, b.units is None) for b in blocks], bool)
    units_all = np.zeros(int(sum(n)), dtype=np.int64)
    units_all[~unit_mask] = units
    base_mask = joined([np.full(b.scores.size, b.baseline is None) for b in blocks], bool)
    base_all = np.zeros(int(sum(n)), dtype=np.float64)
    base_all[~base_mask] = joined([b.baseline for b in blocks if b.baseline is not None], float)
    cols = {
        "release": pa.array([release] * int(sum(n)), type=pa.string()),
        "entry": pa.array(entries, type=pa.string()),
        "item": pa.array(items, type=pa.int64()),
        "score": pa.array(scores, type=pa.float64()),  # NaN stays NaN, not null
        "unit": pa.array(units_all, type=pa.int64(), mask=unit_mask),
        "baseline_score": pa.array(base_all, type=pa.float64(), mask=base_mask),
    }
    return pa.table(cols)


def export_release(store: Store, release: str, out: str | Path, fmt: str = "csv") -> Exported:
    """Write ``release``'s rows table and items table into the folder ``out``:
    ``<release>.rows.<fmt>`` and ``<release>.items.<fmt>`` (``fmt`` one of :data:`FORMATS`).

    Everything is read and checked before anything is written: the format (and pyarrow for
    Parquet), ``out`` (a folder or a new path; a link is refused), the report, its comparison
    and every per-item file. Each file is written all or nothing, only inside ``out``
    (:func:`tinyllm.safeio.write_under`). Raises :class:`ExportError`, the store's errors
    (a missing release names the store's releases) and :class:`tinyllm.safeio.UnsafePathError`.
    """
    check_format(fmt)
    folder = check_out(out)
    report = store.read_stored_report(release)
    rows = rows_of(report, release_comparison(store, release))
    blocks = list(release_items(store, release, report))
    n_items = sum(b.scores.size for b in blocks)
    if fmt == "csv":
        row_names = [name for name, _ in ROW_COLUMNS]
        rows_data = _csv_writer(row_names, (tuple(r[k] for k in row_names) for r in rows))
        item_names = [name for name, _ in ITEM_COLUMNS]
        items_data = _csv_writer(item_names, _item_lines(release, blocks))
    else:
        rows_data = _parquet_bytes(_rows_table(rows))
        items_data = _parquet_bytes(_items_table(release, blocks))
    safeio.make_dirs(folder, [])
    rows_path = safeio.write_under(folder, f"{release}.rows.{fmt}", rows_data)
    items_path = safeio.write_under(folder, f"{release}.items.{fmt}", items_data)
    return Exported(rows_path, items_path, len(rows), n_items)


def metric_key(entry: str, name: str) -> str:
    """``<entry>/<name>``: the key a tracker logs a row's number under (entry names are lower
    case letters, digits, ``_`` and ``-``, so every tracker accepts it)."""
    return f"{entry}/{name}"


def tracked_numbers(rows: list[dict]) -> dict[str, float]:
    """The numbers a tracker logs for a rows table: per row ``value``, ``lo``, ``hi``, ``n``,
    ``n_units`` and, when it was compared, ``delta``, ``p``, ``p_adjusted`` (as floats, keyed
    by :func:`metric_key`); a missing or non-finite number is left out."""
    out: dict[str, float] = {}
    for r in rows:
        for name in ("value", "lo", "hi", "n", "n_units", "delta", "p", "p_adjusted"):
            v = r.get(name)
            if v is not None and math.isfinite(float(v)):
                out[metric_key(r["entry"], name)] = float(v)
    return out


def tracked_labels(rows: list[dict]) -> dict[str, str]:
    """The words a tracker logs for a rows table: per row its ``status``, ``metric`` and, when
    it has them, its verdict against the previous release (``vs_previous``) and against its
    baseline (``beats_baseline``), keyed by :func:`metric_key`."""
    out: dict[str, str] = {}
    for r in rows:
        for name in ("status", "metric", "vs_previous", "beats_baseline"):
            if r.get(name) is not None:
                out[metric_key(r["entry"], name)] = str(r[name])
    return out


def rows_json(rows: list[dict]) -> str:
    """The rows table as JSON text (one object per row), for a tracker's artifact."""
    return json.dumps(rows, indent=1, allow_nan=False, default=str)
