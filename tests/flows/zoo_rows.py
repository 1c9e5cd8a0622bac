"""The EvalSuite flow's rows against ``run_zoo``'s: equal field by field (but wall time), items
names included once the store's content hash is taken out of them, and every array the flow
stored (the row's own scores and its baseline's) equal to the one ``run_zoo`` attached."""

from __future__ import annotations

import re

import numpy as np

# a store's content-addressed items name: items/<entry>-<h>.npy, items/<entry>.baseline-<h>.npy
HASHED = re.compile(r"^(items/[a-z0-9][a-z0-9_.-]*)-[0-9a-f]{16}\.npy$")


def unhashed(ref: str | None) -> str | None:
    """``items/kn3-1f2e3d4c5b6a7988.npy`` -> ``items/kn3.npy`` (the name ``write_report`` gives
    the same scores beside a report); ``items/kn3.baseline-<h>.npy`` -> ``items/kn3.baseline.npy``."""
    if ref is None:
        return None
    m = HASHED.match(ref)
    assert m is not None, f"expected a content-addressed items name, got {ref!r}"
    return m.group(1) + ".npy"


def _normal(row: dict, name) -> dict:
    out = {k: v for k, v in row.items() if k != "seconds"}
    out["items"] = name(out["items"])
    if isinstance(out.get("baseline"), dict):
        out["baseline"] = dict(out["baseline"], items=name(out["baseline"]["items"]))
    return out


def assert_flow_rows_equal_run_zoo(rows: list[dict], report, store, release: str) -> int:
    """``rows`` (the flow's, in ``store`` under ``release``) equal ``report``'s (a
    :class:`tinyllm.report.Report` from ``run_zoo``) but for wall time and the items names' hash,
    and the stored arrays equal ``report``'s; returns how many baseline arrays were compared."""
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
    return compared
