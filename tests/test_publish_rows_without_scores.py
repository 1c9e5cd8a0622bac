"""An ok row published without per-item scores (none given for its entry) stays ok, is not
checked against scores it does not have, and is published with ``items: null``."""

from __future__ import annotations

import numpy as np
from store_helpers import acc_row, make_report

from tinyllm.publish import publish_run
from tinyllm.store import open_store


def test_an_ok_row_without_scores_is_published_as_it_is_with_null_items(tmp_path):
    store = open_store(tmp_path)
    scores = np.array([1.0, 0.0, 1.0, 1.0])
    bare = acc_row("b", scores, value=0.5)  # no scores given: the value is not checked
    run = make_report("r1", "2026-12-01T18:00:00Z", [acc_row("a", scores), bare])
    out = publish_run(store, "r1", run, {"a": scores})
    a, b = store.read_report("r1")["rows"]
    assert b == dict(bare, items=None)
    assert a["status"] == "ok" and a["items"] is not None
    assert [k.rsplit("/", 1)[1].split("-")[0] for k in store.list("releases/r1/items/")] == ["a"]
    assert out["report"]["rows"] == [a, b]
