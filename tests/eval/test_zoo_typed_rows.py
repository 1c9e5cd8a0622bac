"""The zoo's rows are typed (tinyllm.report.Row) from scoring to the report; a row is a dict
only at the JSON boundary (score_entry, score_entry_result, error_row; build_report takes
either)."""

from __future__ import annotations

import numpy as np
from zoo_helpers import stable_row, uniform_bigram

from tinyllm.eval import zoo
from tinyllm.report import BaselineInfo, BeatsBaseline, Entry, Row


def test_score_entry_row_is_typed_and_its_document_is_score_entrys_row(tmp_path):
    entry = uniform_bigram(tmp_path)
    res = zoo.score_entry_row(entry, seed=3, base_dir=tmp_path)
    assert isinstance(res.row, Row) and res.row.status == "ok" and res.row.value == 8.0
    assert isinstance(res.row.baseline, BaselineInfo)
    assert isinstance(res.row.beats_baseline, BeatsBaseline)
    assert res.row.baseline.items == "items/uniform.baseline.npy"
    assert res.items.dtype == np.float64 and res.items.size == res.row.n == 18
    doc = zoo.score_entry(entry, seed=3, base_dir=tmp_path, items_dir=tmp_path / "items")
    assert isinstance(doc, dict) and stable_row(doc) == stable_row(zoo.row_json(res.row))
    # unsaved: the document names no file
    unsaved = zoo.score_entry(entry, seed=3, base_dir=tmp_path)
    assert (unsaved["items"], unsaved["units"], unsaved["baseline"]["items"]) == (None,) * 3
    assert res.row.items == "items/uniform.npy"  # the typed row is not changed by it
    result = zoo.score_entry_result(entry, seed=3, base_dir=tmp_path)
    assert stable_row(result.row) == stable_row(doc)
    np.testing.assert_array_equal(result.items, res.items)


def test_build_report_takes_rows_and_their_documents_alike(tmp_path):
    entry = uniform_bigram(tmp_path)
    manifest = {"suite": "zoo", "entries": [entry, dict(entry, name="other", family="nope")]}
    typed = [zoo.score_entry_row(e, seed=1, base_dir=tmp_path).row for e in manifest["entries"]]
    assert typed[1].status == "skipped" and typed[1].reason.startswith("unknown family 'nope'")
    docs = [zoo.row_json(r) for r in typed]
    a = zoo.build_report(manifest, typed[::-1], seed=1, created_at="2026-01-01T00:00:00Z")
    b = zoo.build_report(manifest, docs, seed=1, created_at="2026-01-01T00:00:00Z")
    assert a.to_json() == b.to_json()
    assert [r.name for r in a.rows] == ["uniform", "other"]
    assert a.rows[0].beats_baseline.p_adjusted is not None  # Holm over the report's rows


def test_error_row_is_a_document_of_a_valid_row():
    entry = Entry(name="e", family="bigram", checkpoint="c", data="d")
    doc = zoo.error_row(entry, OSError("disk gone"), seconds=1.5)
    row = Row.model_validate(doc)
    assert row.status == "error" and row.error.type == "OSError" and row.seconds == 1.5
    assert list(doc) == list(Row.model_fields)
