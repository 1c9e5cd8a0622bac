"""report.StoredRow: the typed row a store holds and the comparison reads -- Row's fields and
types, the provenance fields possibly absent and no status rules -- and the store's reading
(check_stored_report) that builds them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from store_helpers import make_report, make_row

from tinyllm.report import (
    ReportSchemaError,
    Row,
    StoredRow,
    check_stored_report,
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
