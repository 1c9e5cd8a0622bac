"""report.StoredRow: the typed row a store holds and the comparison reads -- Row's fields and
types, the provenance fields possibly absent and no status rules -- and the store's reading
(check_stored_report) that builds them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pydantic import ValidationError
from store_helpers import make_report, make_row

from tinyllm import history
from tinyllm.report import (
    ReportSchemaError,
    Row,
    StoredRow,
    check_stored_report,
    stored_report,
    stored_rows,
)


def test_a_stored_row_may_lack_its_provenance_and_a_zoo_row_may_not():
    doc = make_row("gpt", 2.0)  # no checkpoint, data or options
    row = StoredRow.model_validate(doc)
    assert (row.name, row.metric, row.value, row.n, row.items) == (
        "gpt",
        "bpb",
        2.0,
        100,
        "items/gpt.npy",
    )
    assert (row.checkpoint, row.data, row.options) == (None, None, None)
    with pytest.raises(ValidationError, match="checkpoint"):
        Row.model_validate(doc)
    full = Row.model_validate(doc | {"checkpoint": "c/", "data": "d.bin", "options": {}})
    assert full.checkpoint == "c/" and full.options == {}


def test_a_stored_row_keeps_no_status_rules_but_every_type():
    # an ok row without a value: the store leaves the status rules to the writer
    no_value = make_row("gpt", 2.0) | {"value": None}
    assert StoredRow.model_validate(no_value).value is None
    with pytest.raises(ValidationError, match="status ok"):
        Row.model_validate(no_value | {"checkpoint": "c/", "data": "d.bin", "options": {}})
    with pytest.raises(ValidationError, match="metric"):
        StoredRow.model_validate(make_row("gpt", metric="ppl"))
    with pytest.raises(ValidationError, match="extra"):
        StoredRow.model_validate(make_row("gpt") | {"colour": "red"})


def test_stored_rows_names_the_row_and_the_field():
    doc = make_report("r1", "2026-01-01T00:00:00Z", [make_row("a"), make_row("b", n="x")])
    with pytest.raises(ValueError) as ei:
        stored_rows(doc)
    assert str(ei.value) == (
        "rows[1]: expected a row of eval-results.schema.json, got n: Input should be a valid "
        "integer, unable to parse string as an integer (got 'x')"
    )
    rows = stored_rows(make_report("r1", "2026-01-01T00:00:00Z", [make_row("a"), make_row("b")]))
    assert [type(r) for r in rows] == [StoredRow, StoredRow]
    assert [r.name for r in rows] == ["a", "b"]


def test_a_stored_report_read_back_is_one_of_stored_rows():
    doc = make_report("r1", "2026-01-01T00:00:00+00:00", [make_row("a", items=None)])
    check_stored_report(doc)  # provenance absent, any ISO time
    with pytest.raises(ReportSchemaError, match=r"rows/0/n"):
        check_stored_report(make_report("r1", "2026-01-01T00:00:00Z", [make_row("a", n="x")]))


# --- the stored report: report-level fields as attributes, read where a store's report is read ---


def test_a_stored_report_reads_its_run_step_and_created_at_as_attributes():
    doc = make_report("a-step-500", "2026-11-30T18:00:00+01:00", [make_row("gpt", 2.0)])
    rep = stored_report(doc | {"run": "a", "step": 500})
    assert (rep.release, rep.created_at, rep.run, rep.step) == (
        "a-step-500",
        "2026-11-30T18:00:00+01:00",  # any ISO 8601 time, as the store takes it
        "a",
        500,
    )
    assert rep.run_step == ("a", 500) and history.run_step(rep) == ("a", 500)
    assert isinstance(rep.rows[0], StoredRow) and rep.rows[0].value == 2.0
    plain = stored_report(doc)  # no checkpoint of a training run
    assert (plain.run, plain.step, plain.run_step, history.run_step(plain)) == (
        None,
        None,
        None,
        None,
    )
    assert history.run_step(None) is None  # an unreadable release
    # its rows are the document's, field for field (a field it was read without stays absent)
    assert [r.to_json() for r in rep.rows] == doc["rows"]


def test_a_stored_report_that_does_not_fit_is_refused_naming_the_field():
    doc = make_report("r1", "2026-11-30T18:00:00Z", [make_row("gpt", 2.0)])
    with pytest.raises(ValueError) as ei:
        stored_report(doc | {"step": "500"})
    assert str(ei.value) == (
        "expected a report of eval-results.schema.json, got step: Input should be a valid "
        "integer (got '500')"
    )
    with pytest.raises(ValueError, match=r"^rows\[0\]: expected a row of eval-results"):
        stored_report(doc | {"rows": [make_row("gpt", 2.0) | {"n": "x"}]})
    with pytest.raises(ValueError, match="extra: unknown key"):
        stored_report(doc | {"extra": 1})


def test_history_orders_a_runs_checkpoints_by_their_typed_step():
    def view(name, step):
        doc = make_report(name, "2026-11-30T18:00:00Z", [])
        rep = stored_report(doc if step is None else doc | {"run": "a", "step": step})
        return SimpleNamespace(name=name, report=rep)

    views = [view("a@1000", 1000), view("v1", None), view("a@500", 500)]
    assert [v.name for v in history.order_by_step(views)] == ["a@500", "v1", "a@1000"]
    assert history.steps_of([views[0], views[2]]) == [1000, 500]
    assert history.steps_of(views) is None  # v1 is no checkpoint of the run
