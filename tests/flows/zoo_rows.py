"""The EvalSuite flow's rows against ``run_zoo``'s: equal field by field (but wall time), items
and units names included once the store's content hash is taken out of them, and every array the
flow stored (the row's own scores, its baseline's and its unit ids) equal to the one ``run_zoo``
attached."""

from __future__ import annotations

import re

import numpy as np

# a store's content-addressed items name: items/<entry>-<h>.npy, items/<entry>.baseline-<h>.npy,
# items/<entry>.units-<h>.npy
HASHED = re.compile(r"^(items/[a-z0-9][a-z0-9_.-]*)-[0-9a-f]{16}\.npy$")


def unhashed(ref: str | None) -> str | None:
    """``items/kn3-1f2e3d4c5b6a7988.npy`` -> ``items/kn3.npy`` (the name ``write_report`` gives
    the same scores beside a report); ``items/kn3.baseline-<h>.npy`` -> ``items/kn3.baseline.npy``;
    ``items/kn3.units-<h>.npy`` -> ``items/kn3.units.npy``."""
    if ref is None:
        return None
    m = HASHED.match(ref)
    assert m is not None, f"expected a content-addressed items name, got {ref!r}"
    return m.group(1) + ".npy"


REPORT_LEVEL = ("p_adjusted", "verdict")
"""The fields of a row's beats_baseline its report decides over all its rows (Holm,
docs/definitions.md): recomputed whenever a report is built or a rerun merged into one, so a
row scored once (a cached task result) has them as a family of one."""


def entry_level(row: dict) -> dict:
    """``row`` without its report-level fields (:data:`REPORT_LEVEL`)."""
    bb = row.get("beats_baseline")
    if not isinstance(bb, dict):
        return row
    return dict(row, beats_baseline={k: v for k, v in bb.items() if k not in REPORT_LEVEL})


def assert_holm(rows: list[dict]) -> None:
    """Every beats_baseline's ``p_adjusted`` is Holm's over the rows that have one: the i-th
    smallest p times (m - i), at most 1, never below the one before."""
    tested = [r["beats_baseline"] for r in rows if r.get("beats_baseline")]
    running = 0.0
    for i, bb in enumerate(sorted(tested, key=lambda b: b["p"])):
        running = max(running, min(1.0, (len(tested) - i) * bb["p"]))
        assert abs(bb["p_adjusted"] - running) <= 1e-12 * running, (bb, tested)


def _normal(row: dict, name) -> dict:
    out = {k: v for k, v in row.items() if k != "seconds"}
    out["items"] = name(out["items"])
    if "units" in out:
        out["units"] = name(out["units"])
    if isinstance(out.get("baseline"), dict):
        out["baseline"] = dict(out["baseline"], items=name(out["baseline"]["items"]))
    return out


def assert_flow_rows_equal_run_zoo(
    rows: list[dict], report, store, release: str, *, units: int | None = None
) -> int:
    """``rows`` (the flow's, in ``store`` under ``release``) equal ``report``'s (a
    :class:`tinyllm.report.Report` from ``run_zoo``) but for wall time and the items names' hash,
    and the stored arrays equal ``report``'s: per-item scores, baselines' and unit ids (a row
    has a units file exactly where ``report`` has unit ids; ``units``, when given, is how many
    rows have one). Returns how many baseline arrays were compared."""
    assert [_normal(r, unhashed) for r in rows] == [
        _normal(r, lambda ref: ref) for r in report.to_json()["rows"]
    ]
    compared = 0
    for r in rows:
        if r["items"] is not None:
            got = store.read_items(release, r["name"], r["items"])
            np.testing.assert_array_equal(got, report.item_scores[r["name"]])
        ref = (r.get("baseline") or {}).get("items")
        if ref is not None:
            got = store.read_items(release, r["name"], ref)
            np.testing.assert_array_equal(got, report.baseline_item_scores[r["name"]])
            compared += 1
    with_units = [r["name"] for r in rows if r.get("units") is not None]
    assert with_units == [n for n in (r["name"] for r in rows) if n in report.unit_ids]
    assert units is None or len(with_units) == units, with_units
    for r in rows:
        if r.get("units") is not None:
            got = store.read_units(release, r["units"], r["n"])
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, report.unit_ids[r["name"]])
    return compared
