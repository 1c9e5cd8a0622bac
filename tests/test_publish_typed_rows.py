"""publish_run reads every run row as a typed row before it writes anything: a row whose fields
do not have the schema's types (a count given as a string, an unknown field, a bad name) or a run
document the schema refuses leaves the store as it was, and the error names the row and the field.
A row that has the schema's types but disagrees with its scores is still published as an error
row (tests/test_publish_error_rows.py)."""

from __future__ import annotations

import numpy as np
import pytest
from store_helpers import acc_row, make_report

from tinyllm.publish import publish_run
from tinyllm.report import ReportSchemaError
from tinyllm.store import open_store

OWN = np.array([1.0, 0.0, 1.0, 1.0])


def publish_two(tmp_path, bad: dict):
    """Publish row a (good, with scores) and ``bad`` (with scores) as release r1; the store."""
    store = open_store(tmp_path)
    run = make_report("r1", "2026-12-01T18:00:00Z", [acc_row("a", OWN), bad])
    return store, lambda: publish_run(store, "r1", run, {"a": OWN, bad["name"]: OWN})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n": "4"}, "got at n: '4' is not of type 'integer', 'null'"),
        ({"n": True}, "got at n: True is not of type 'integer', 'null'"),
        ({"speed": 3.0}, "got at (top level): Additional properties are not allowed ('speed' was "),
        ({"metric": "f1"}, "got at metric: 'f1' is not one of "),
    ],
)
def test_a_row_without_the_schemas_types_is_refused_before_anything_is_written(
    tmp_path, change, message
):
    store, publish = publish_two(tmp_path, acc_row("b", OWN, **change))
    with pytest.raises(ReportSchemaError) as e:
        publish()
    assert str(e.value).startswith(
        "run report rows[1] ('b'): expected a row of eval-results.schema.json, " + message
    )
    assert store.list("releases/") == []  # not even row a's scores


def test_a_bad_row_name_is_named_by_its_index(tmp_path):
    store = open_store(tmp_path)
    run = make_report("r1", "2026-12-01T18:00:00Z", [acc_row("B b", OWN)])
    with pytest.raises(ReportSchemaError, match=r"^run report rows\[0\] \('B b'\): .* at name: "):
        publish_run(store, "r1", run, {})
    assert store.list("releases/") == []


def test_a_run_the_schema_refuses_writes_no_scores(tmp_path):
    # row b has the schema's types but not its status rules: an ok row without a value
    bad = acc_row("b", OWN, value=None)
    store = open_store(tmp_path)
    run = make_report("r1", "2026-12-01T18:00:00Z", [acc_row("a", OWN), bad])
    with pytest.raises(ReportSchemaError, match="rows/1"):
        publish_run(store, "r1", run, {"a": OWN})
    assert store.list("releases/") == []


def test_a_typed_row_that_disagrees_with_its_scores_is_still_an_error_row(tmp_path):
    store, publish = publish_two(tmp_path, acc_row("b", OWN, n=3))
    out = publish()
    a, b = out["report"]["rows"]
    assert a["status"] == "ok" and b["status"] == "error"
    assert b["error"]["message"] == (
        "row 'b': expected n = 4 (the number of its per-item scores), got 3"
    )
    assert [k.rsplit("/", 1)[1].split("-")[0] for k in store.list("releases/r1/items/")] == ["a"]
