"""`tinyllm plan` and tinyllm.plan.plan_row: how many units a row needs to detect a change, from
a stored release's spread over its units (docs/definitions.md, "The detectable difference")."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from store_helpers import make_report
from test_store_units import DOC_OF, _publish_pair, bpb_row, nlls_pair
from typer.testing import CliRunner

from tinyllm import stats
from tinyllm.cli import app
from tinyllm.plan import plan_row
from tinyllm.publish import publish_run
from tinyllm.store import StoreError, open_store

LN2 = math.log(2.0)


@pytest.fixture
def store(tmp_path):
    prev, cur = nlls_pair()
    st = open_store(tmp_path / "store")
    _publish_pair(st, prev, cur, {"gpt": DOC_OF}, {"gpt": DOC_OF})
    return st


def test_a_compared_row_plans_from_its_paired_differences(store):
    c = store.read_compare("r2").rows[0]
    p = plan_row(store, "r2", "gpt", 0.05)
    sd = c.se * math.sqrt(20)  # one document's difference, bits per byte
    assert (p.source, p.paired, p.n_units, p.metric) == ("comparison with r1", True, 20, "bpb")
    assert p.se == c.se and p.sd_unit == pytest.approx(sd)
    assert p.mde_now == pytest.approx(c.mde)  # what the 20 documents could see
    assert p.units == stats.units_needed(sd, 0.05)
    # the answer is the smallest G whose t-based mde reaches D, checked by a scan
    scan = next(g for g in range(2, 10_000) if stats.mde(sd / math.sqrt(g), g - 1) <= 0.05)
    assert p.units == scan and p.units > 20  # these 20 documents could not see 0.05 bpb
    assert plan_row(store, "r2", "gpt", -0.05).units == p.units  # a change either way


def test_the_first_release_plans_from_the_rows_own_units(store):
    prev, _ = nlls_pair()
    p = plan_row(store, "r1", "gpt", 0.05)
    se = stats.cluster_ratio(prev, DOC_OF).se / LN2  # the value's se over its 20 documents
    assert (p.source, p.paired, p.n_units) == ("the row's own units", False, 20)
    assert p.se == pytest.approx(se)
    assert p.sd_unit == pytest.approx(math.sqrt(2) * se * math.sqrt(20))
    assert p.units == stats.units_needed(p.sd_unit, 0.05)


def test_what_cannot_be_planned_is_refused_in_one_line(tmp_path, store):
    with pytest.raises(StoreError, match=r"plan: expected a row of r2 \(rows: gpt\), got 'bert'"):
        plan_row(store, "r2", "bert", 0.01)
    with pytest.raises(ValueError, match="delta: expected a finite nonzero change"):
        plan_row(store, "r2", "gpt", 0.0)
    # a release stored before units, never compared: its spread over units is unknown
    prev, _ = nlls_pair()
    old = open_store(tmp_path / "old")
    row = bpb_row("gpt", prev)
    row.pop("units")
    publish_run(old, "r1", make_report("r1", "2026-01-01T00:00:00Z", [row]), {"gpt": prev})
    with pytest.raises(StoreError, match=r"expected its unit ids \(n_units 20 for 1000 items\)"):
        plan_row(old, "r1", "gpt", 0.01)


def test_the_plan_command(store):
    s = store.uri
    res = CliRunner().invoke(app, ["plan", "r2", "gpt", "--delta", "0.05", "--store", s])
    assert res.exit_code == 0, res.output
    p = plan_row(store, "r2", "gpt", 0.05)
    assert "gpt (bpb) in r2: 20 units now" in res.output and "from comparison with r1" in res.output
    assert f"to see 0.05 (80% power, alpha 0.05): {p.units} units" in res.output
    res = CliRunner().invoke(app, ["plan", "r2", "gpt", "--delta", "0.05", "--store", s, "--json"])
    assert json.loads(res.output)["units"] == p.units
    res = CliRunner().invoke(app, ["plan", "r2", "nope", "--delta", "0.05", "--store", s])
    assert res.exit_code == 2 and "plan: expected a row of r2" in res.output
    np.testing.assert_array_equal(store.units_loader("r2")("gpt"), DOC_OF)
