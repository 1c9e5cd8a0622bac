"""A failed entry (status "error") keeps its own error when baseline scores come with it:
publish_run checks baseline scores against ok rows only (baseline_items_problem), and stores
none for a row without a baseline field to name them. An ok row whose baseline scores disagree
with it is published as an error row, whether or not its own scores came too."""

from __future__ import annotations

import numpy as np
from store_helpers import acc_row, make_report

from tinyllm import baselines
from tinyllm.compare_checks import parse_row
from tinyllm.publish import baseline_items_problem, publish_run
from tinyllm.store import open_store

OWN = np.array([1.0, 0.0, 1.0, 1.0])
MAJORITY = np.array([1.0, 1.0, 0.0, 1.0])
RESULT = ("value", "lo", "hi", "interval", "n", "items")
ERROR = {"type": "RuntimeError", "message": "entry b: CUDA out of memory"}


def failed(name: str) -> dict:
    return dict(acc_row(name, OWN), status="error", error=ERROR, **dict.fromkeys(RESULT))


def test_a_failed_entry_with_baseline_scores_is_published_with_its_own_error(tmp_path):
    store = open_store(tmp_path)
    run = make_report("r1", "2026-12-01T18:00:00Z", [acc_row("a", OWN), failed("b")])
    publish_run(store, "r1", run, {"a": OWN}, baseline_items={"b": MAJORITY})
    a, b = store.read_report("r1")["rows"]
    assert a["status"] == "ok" and a["n"] == 4
    assert b["status"] == "error" and b["error"] == ERROR
    assert {k: b[k] for k in RESULT} == dict.fromkeys(RESULT)
    stored = sorted(p.name.split("-")[0] for p in (tmp_path / "releases/r1/items").iterdir())
    assert stored == ["a"]  # no baseline scores kept for b


def test_rows_that_are_not_ok_have_no_baseline_problem():
    assert baseline_items_problem(parse_row(failed("b")), MAJORITY) is None
    assert baseline_items_problem(parse_row(failed("b")), MAJORITY[:1], OWN) is None


def test_disagreeing_baseline_scores_make_an_error_row_without_the_rows_own_scores(tmp_path):
    store = open_store(tmp_path)
    b = baselines.proportion_baseline("majority class", MAJORITY)
    a = dict(acc_row("a", OWN), baseline=baselines.baseline_field(b, baselines.items_ref("a")))
    run = make_report("r1", "2026-12-01T18:00:00Z", [a])
    publish_run(store, "r1", run, {}, baseline_items={"a": MAJORITY[:3]})
    (row,) = store.read_report("r1")["rows"]
    assert row["status"] == "error" and row["error"] == {
        "type": "RowItemsMismatchError",
        "message": "row 'a': baseline 'majority class': expected n = 3 (the number of its "
        "per-item scores), got 4",
    }
    assert not (tmp_path / "releases/r1/items").exists() or not any(
        (tmp_path / "releases/r1/items").iterdir()
    )
