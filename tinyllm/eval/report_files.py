"""A zoo report on disk: ``report.json`` with each row's arrays beside it (formats/store.md has
the same files in a store's release).

* ``items/<name>.npy`` -- the row's per-item scores, float64;
* ``items/<name>.baseline.npy`` -- its baseline's per-item scores on the same items, float64;
* ``items/<name>.units.npy`` -- the unit id of each item, int64 (rows whose units hold several
  items: documents or blocks of a text, the rows of mlm and rtd).

:func:`write_report` validates and writes them, :func:`read_report`, :func:`load_items` and
:func:`load_units` read them back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tinyllm import baselines, safeio
from tinyllm.report import Report, validate_report


def units_ref(name: str) -> str:
    """Where row ``name``'s unit ids go beside the report: ``items/<name>.units.npy``."""
    return f"items/{name}.units.npy"


def save_npy(root: Path, relpath: str, arr: np.ndarray) -> Path:
    """``arr`` as float64 ``.npy`` at ``root/relpath`` (:func:`tinyllm.safeio.write_under`: every
    folder on the way a real folder, a random temporary name, never through a link)."""
    a = np.asarray(arr, dtype=np.float64)
    return safeio.write_under(root, relpath, lambda f: np.save(f, a, allow_pickle=False))


def save_units(root: Path, relpath: str, arr: np.ndarray) -> Path:
    """Unit ids as an int64 ``.npy`` at ``root/relpath``, written as :func:`save_npy` writes."""
    a = np.asarray(arr, dtype=np.int64)
    return safeio.write_under(root, relpath, lambda f: np.save(f, a, allow_pickle=False))


def write_report(report: Report | Mapping, path: str | os.PathLike) -> Path:
    """Validate ``report`` against formats/eval-results.schema.json, then write it to ``path``
    (JSON) with each row's per-item scores in ``items/<name>.npy`` beside it, its baseline's in
    ``items/<name>.baseline.npy`` and its unit ids in ``items/<name>.units.npy``.

    A report that violates the schema is refused (:class:`tinyllm.report.ReportSchemaError`)
    and nothing is written. Per-item scores come from ``report.item_scores`` (unit ids from
    ``report.unit_ids``); a row that names an items or units file that is neither attached nor
    already beside ``path`` is refused too, and so is a ``path`` that is a FIFO, a link or a
    device, or an ``items`` that is not a real folder (:class:`tinyllm.safeio.UnsafePathError`,
    before anything is written). Every file is written under a fresh random temporary name and
    renamed (:mod:`tinyllm.safeio`), the JSON last.
    """
    doc = report.to_json() if isinstance(report, Report) else json.loads(json.dumps(report))
    validate_report(doc)
    arrays = report.item_scores if isinstance(report, Report) else {}
    base_arrays = report.baseline_item_scores if isinstance(report, Report) else {}
    unit_arrays = report.unit_ids if isinstance(report, Report) else {}
    out = safeio.check_target(path, "report")
    folder = out.parent
    rows = doc["rows"]
    refs = [(r["items"], arrays.get(r["name"]), save_npy) for r in rows]
    refs += [(baselines.row_items_ref(r), base_arrays.get(r["name"]), save_npy) for r in rows]
    refs += [(r.get("units"), unit_arrays.get(r["name"]), save_units) for r in rows]
    missing = [f for f, a, _ in refs if f is not None and a is None and not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{out}: rows reference per-item scores that were neither given nor found beside "
            f"the report: {missing}"
        )
    safeio.make_dirs(folder, [])
    for ref, arr, save in refs:
        if ref is not None and arr is not None:
            save(folder, ref, arr)
    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    safeio.write_atomic(out, text.encode("utf-8"), what="report")
    return out


def read_report(path: str | os.PathLike) -> Report:
    """Read a report written by :func:`write_report`, validating it against the schema."""
    p = Path(path)
    doc = json.loads(p.read_text(encoding="utf-8"))
    validate_report(doc)
    return Report.model_validate(doc)


def load_items(
    report_path: str | os.PathLike, row: Mapping | Any, *, baseline: bool = False
) -> np.ndarray | None:
    """The per-item scores of ``row`` saved beside the report at ``report_path`` (or None);
    ``baseline=True``: its baseline's (``row.baseline.items``)."""
    doc = row if isinstance(row, Mapping) else row.model_dump(mode="json")
    ref = baselines.row_items_ref(doc) if baseline else doc["items"]
    if ref is None:
        return None
    return np.load(Path(report_path).parent / ref, allow_pickle=False)


def load_units(report_path: str | os.PathLike, row: Mapping | Any) -> np.ndarray | None:
    """The unit id of each item of ``row`` saved beside the report at ``report_path``: int64,
    one per item of its ``items`` file; None when the row names no units file (every item its
    own unit, or a report written before units). ValueError naming the file for an array that
    is not 1-d integer or whose length is not the items'."""
    doc = row if isinstance(row, Mapping) else row.model_dump(mode="json")
    ref = doc.get("units")
    if ref is None:
        return None
    path = Path(report_path).parent / ref
    a = np.load(path, allow_pickle=False)
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{path}: expected 1-d integer unit ids, got {a.dtype} {a.shape}")
    items = load_items(report_path, doc)
    if items is not None and items.shape != a.shape:
        raise ValueError(
            f"{path}: expected one unit id per item ({items.size}), got {a.size} unit ids"
        )
    return a.astype(np.int64)
