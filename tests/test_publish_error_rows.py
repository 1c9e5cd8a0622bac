"""A published row that disagrees with its per-item scores keeps no part of its result: value,
interval ends, interval method, n and items are all null, every other field is the run's."""

from __future__ import annotations

import numpy as np
from store_helpers import acc_row, make_report

from tinyllm.publish import publish_run
from tinyllm.store import open_store

RESULT = ("value", "lo", "hi", "interval", "n", "items")


def test_a_mismatched_row_is_published_with_no_result(tmp_path):
    store = open_store(tmp_path)
    scores = np.array([1.0, 0.0, 1.0, 1.0])  # mean 0.75
    bad = acc_row("b", scores, value=0.5, lo=0.2, hi=0.8)  # the value is not their mean
    run = make_report("r1", "2026-12-01T18:00:00Z", [acc_row("a", scores), bad])
    publish_run(store, "r1", run, {"a": scores, "b": scores})
    a, b = store.read_report("r1")["rows"]
    assert a["status"] == "ok" and a["interval"] == "wilson" and a["n"] == 4
    assert b["status"] == "error"
    assert {k: b[k] for k in RESULT} == dict.fromkeys(RESULT)
    assert b["error"] == {
        "type": "RowItemsMismatchError",
        "message": "row 'b': expected acc value 0.75 (the mean of its 4 per-item scores), got 0.5",
    }
    kept = {k: v for k, v in bad.items() if k not in (*RESULT, "status", "error")}
    assert {k: b[k] for k in kept} == kept
