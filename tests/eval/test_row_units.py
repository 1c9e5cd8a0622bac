"""Rows over sampling units (docs/definitions.md, "Units", "Intervals"): what a kind's scorer
returns (:class:`Scored`: the units and the estimator's name), the lm row over documents or
blocks, the unit ids written beside a report and read back, and reports written before units."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from zoo_helpers import uniform_bigram  # same folder: pytest puts it on sys.path

from tinyllm import stats
from tinyllm.eval import report_files, zoo
from tinyllm.eval.kinds.common import Scored, proportion_scored
from tinyllm.eval.kinds.lm import block_length, lm_scored
from tinyllm.report import Report

LN2 = math.log(2.0)
# docs/definitions.md's worked example: four documents, per-token NLLs in nats
DOCS = [[2.0, 3.0], [1.0, 2.0, 3.0], [4.0], [2.5, 1.5]]
NLLS = np.array([x for d in DOCS for x in d])
DOC_OF = np.repeat(np.arange(4), [len(d) for d in DOCS])


def test_scored_reads_the_legacy_names_and_checks_its_units():
    iv = stats.Interval(0.5, 0.1, 0.9)
    assert Scored("bpb", iv, "student_t", 2, np.ones(2)).method == "iid"
    assert Scored("acc", iv, "bootstrap_percentile", 2, np.ones(2)).method == "cluster_bootstrap"
    s = Scored("acc", iv, "cluster_ratio", 3, np.ones(3), units=[4, 4, 7])
    assert s.units.dtype == np.int64 and s.units.tolist() == [4, 4, 7]
    with pytest.raises(ValueError, match=r"interval method: expected one of .*, got 'tdist'"):
        Scored("acc", iv, "tdist", 2, np.ones(2))
    with pytest.raises(ValueError, match=r"units: expected one unit id per item \(3\), got shape"):
        Scored("acc", iv, "wilson", 3, np.ones(3), units=[0, 1])
    with pytest.raises(ValueError, match="expected integer unit ids, got dtype float64"):
        Scored("acc", iv, "wilson", 2, np.ones(2), units=[0.0, 1.0])


def test_a_proportion_over_the_positions_of_rows_is_clustered_by_row():
    # 5 rows of 4 positions, right 3, 2, 4, 3, 3: r = 15/20 = 0.75, u = S - 4r = [0, -1, 1, 0, 0],
    # se = sqrt(5/4 * 2) / 20 = 0.07906, t_{.975, 4} = 2.77645: 0.75 ± 0.21950
    right = [3, 2, 4, 3, 3]
    correct = np.concatenate([[1] * k + [0] * (4 - k) for k in right])
    rows = np.repeat(np.arange(5), 4)
    s = proportion_scored("acc", correct, units=rows)
    assert (s.method, s.n, s.n_units) == ("cluster_ratio", 20, 5)
    assert s.interval.value == pytest.approx(0.75)
    assert (s.interval.lo, s.interval.hi) == pytest.approx((0.53050, 0.96950), abs=1e-5)
    w = stats.wilson_interval(15, 20)
    assert (s.iid_interval.lo, s.iid_interval.hi, s.iid_interval.method) == (w.lo, w.hi, "wilson")
    assert s.interval.warning == (
        "only 5 units: an interval over fewer than 10 units is unreliable"
    )
    # ends that the t interval puts outside [0, 1] are kept inside it
    wide = proportion_scored(
        "acc", [1, 1, 1, 1, 0, 0, 0, 0, 1, 1], units=[0] * 4 + [1] * 4 + [2] * 2
    )
    assert (wide.interval.lo, wide.interval.hi) == (0.0, 1.0)
    # one item per unit: Wilson, no iid_interval, no unit ids kept
    t = proportion_scored("acc", correct, units=np.arange(20))
    assert (t.method, t.units, t.iid_interval, t.n_units) == ("wilson", None, None, 20)
    assert (t.interval.lo, t.interval.hi) == (w.lo, w.hi)


def test_the_lm_row_over_documents_is_the_definitions_worked_example():
    s = lm_scored(NLLS, 0, {"tokenizer": "byte"}, None, units=DOC_OF)
    assert (s.method, s.n, s.n_units) == ("cluster_ratio", 8, 4)
    assert s.interval.value == pytest.approx(3.4264, abs=1e-4)
    assert (s.interval.lo, s.interval.hi) == pytest.approx((2.0157, 4.8371), abs=1e-4)
    assert s.details["nll"] == pytest.approx({"value": 2.375, "lo": 1.3972, "hi": 3.3528}, abs=1e-4)
    assert s.details["ppl"] == pytest.approx(
        {"value": 10.751, "lo": 4.0439, "hi": 28.583}, abs=1e-3
    )
    assert "block_len" not in s.details and s.details["tokenizer"] == "byte"
    # the token-level reference: (1.5772, 3.1728) nats per token, in bits per byte
    assert (s.iid_interval.lo * LN2, s.iid_interval.hi * LN2) == pytest.approx(
        (1.5772, 3.1728), abs=1e-4
    )
    assert s.iid_interval.method == "iid"
    np.testing.assert_array_equal(s.units, DOC_OF)
    # ids of every token (token 0's, unscored, first) are taken too
    t = lm_scored(NLLS, 0, {}, None, units=np.concatenate([[9], DOC_OF]))
    assert (t.interval.lo, t.interval.hi) == (s.interval.lo, s.interval.hi)
    with pytest.raises(ValueError, match=r"expected one unit id per scored token \(8\) or per"):
        lm_scored(NLLS, 0, {}, None, units=DOC_OF[:5])


def test_a_text_without_boundaries_gets_blocks_of_a_stated_length():
    assert [block_length(n) for n in (50_000, 10_240, 2_000, 15, 5)] == [1024, 1024, 200, 1, 1]
    rng = np.random.default_rng(0)
    nlls = rng.gamma(2.0, 1.0, 2_000)
    s = lm_scored(nlls, 0, {}, None)
    blocks = stats.contiguous_blocks(2_000, 200)
    ci = stats.cluster_ratio(nlls, blocks)
    assert s.details["block_len"] == 200 and s.n_units == 10
    assert (s.interval.lo, s.interval.hi) == pytest.approx((ci.lo / LN2, ci.hi / LN2), rel=1e-12)
    assert s.interval.warning == (
        "no unit boundaries: 10 contiguous blocks of 200 items stand in for the units"
    )
    np.testing.assert_array_equal(s.units, blocks.index)


def test_unit_ids_are_written_beside_the_report_and_checked_on_read(tmp_path):
    entry = uniform_bigram(tmp_path)
    report = zoo.run_zoo({"entries": [entry]}, seed=0, base_dir=tmp_path)
    assert set(report.unit_ids) == {"uniform"}  # 18 tokens in blocks of 1
    out = report_files.write_report(report, tmp_path / "rep" / "report.json")
    row = json.loads(out.read_text())["rows"][0]
    assert row["units"] == "items/uniform.units.npy" and row["n_units"] == 18
    units = report_files.load_units(out, row)
    assert units.dtype == np.int64 and units.tolist() == list(range(18))
    np.save(tmp_path / "rep" / row["units"], np.arange(17))
    with pytest.raises(ValueError, match=r"expected one unit id per item \(18\), got 17 unit ids"):
        report_files.load_units(out, row)
    np.save(tmp_path / "rep" / row["units"], np.zeros(18))
    with pytest.raises(ValueError, match="expected 1-d integer unit ids, got float64"):
        report_files.load_units(out, row)
    # a row without a units file: every item its own unit, or units unknown (older reports)
    assert report_files.load_units(out, dict(row, units=None)) is None


def test_a_report_written_before_units_reads_and_writes_back_unchanged(tmp_path):
    entry = uniform_bigram(tmp_path)
    doc = zoo.run_zoo({"entries": [entry]}, seed=0, base_dir=tmp_path).to_json()
    row = doc["rows"][0]
    for key in ("n_units", "units", "iid_interval", "interval_warning"):
        row.pop(key)
    row["interval"] = "student_t"  # the name rows had before
    for key in ("p_adjusted", "n_units", "method", "se", "mde"):
        row["beats_baseline"].pop(key)
    report = Report.model_validate(doc)
    assert report.rows[0].n_units is None and report.rows[0].beats_baseline.p_adjusted is None
    assert report.to_json() == doc
