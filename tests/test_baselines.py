"""tinyllm.baselines: the verdict of a row against its trivial baseline, by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from tinyllm import baselines as bl


def _enumerated_p(a, b) -> float:
    """The two-sided sign-flip p-value by direct enumeration of every sign pattern."""
    d = np.asarray(a, float) - np.asarray(b, float)
    t = abs(d.sum())
    hits = sum(
        abs(sum(s * x for s, x in zip(signs, d, strict=True))) >= t - 1e-9
        for signs in itertools.product((-1, 1), repeat=d.size)
    )
    return hits / 2**d.size


def test_clearly_better_model_on_planted_items():
    rng = np.random.default_rng(0)
    a = np.ones(60)
    b = np.zeros(60)
    b[:6] = 1  # the baseline is right on 6 of 60 items, the model on all
    v = bl.paired_verdict(a, b, direction="higher", rng=rng)
    assert v["verdict"] == "better" and v["test"] == "paired permutation"
    assert v["delta"] == pytest.approx(54 / 60)
    # 54 items differ, all +1: no random sign pattern reaches |sum| = 54 but (almost) none
    assert v["p"] == pytest.approx(1 / 10_001)
    d = a - b
    half = sps.t.ppf(0.975, 59) * d.std(ddof=1) / math.sqrt(60)
    assert v["interval"] == pytest.approx([0.9 - half, 0.9 + half])


def test_worse_model_and_a_tie():
    a, b = np.zeros(40), np.ones(40)
    assert bl.paired_verdict(a, b, direction="higher")["verdict"] == "worse"
    tie = bl.paired_verdict(b, b, direction="higher")
    assert tie["verdict"] == "not distinguishable" and tie["p"] == 1.0 and tie["delta"] == 0.0
    # half the items won, half lost: a tie in the sum
    a = np.array([1, 0] * 20, float)
    b = np.array([0, 1] * 20, float)
    v = bl.paired_verdict(a, b, direction="higher", rng=np.random.default_rng(1))
    assert v["verdict"] == "not distinguishable" and v["p"] == 1.0


def test_lower_is_better_flips_the_verdict_and_item_scale_scales_delta():
    nll_model = np.full(50, 1.0)
    nll_base = np.full(50, 2.0)
    v = bl.paired_verdict(nll_model, nll_base, direction="lower", item_scale=1 / math.log(2))
    assert v["verdict"] == "better"
    assert v["delta"] == pytest.approx(-1 / math.log(2))
    assert v["interval"] == pytest.approx([-1 / math.log(2)] * 2)
    assert bl.paired_verdict(nll_base, nll_model, direction="lower")["verdict"] == "worse"


@pytest.mark.parametrize("seed", range(4))
def test_permutation_p_equals_direct_enumeration_for_small_n(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, 9).astype(float)
    b = rng.integers(0, 2, 9).astype(float)
    if np.array_equal(a, b):
        b[0] = 1 - b[0]
    v = bl.paired_verdict(a, b, direction="higher", n_perm=10_000)
    assert v["p"] == pytest.approx(_enumerated_p(a, b), abs=1e-12)


def test_nan_items_are_left_out_of_both():
    a = np.array([1, 1, np.nan, 1, 0], float)
    b = np.array([0, 0, 0, np.nan, 0], float)
    v = bl.paired_verdict(a, b, direction="higher")
    assert v["n"] == 3 and v["p"] == pytest.approx(_enumerated_p([1, 1, 0], [0, 0, 0]))


def test_paired_verdict_refuses_unpaired_items():
    with pytest.raises(ValueError, match="expected one per row item"):
        bl.paired_verdict(np.ones(3), np.ones(4), direction="higher")
    with pytest.raises(ValueError, match="expected one of"):
        bl.paired_verdict(np.ones(3), np.ones(3), direction="up")


def test_wilson_verdict_is_the_score_test_the_wilson_interval_inverts():
    v = bl.wilson_verdict(8, 10, 0.5)
    z = (0.8 - 0.5) / math.sqrt(0.25 / 10)
    assert v["p"] == pytest.approx(2 * sps.norm.sf(z)) and v["p"] == pytest.approx(0.0578, abs=1e-4)
    assert v["verdict"] == "not distinguishable" and v["test"] == "wilson"
    assert v["interval"] == pytest.approx([0.4902 - 0.5, 0.9433 - 0.5], abs=1e-4)
    # the interval excludes p0 exactly when p < 0.05, for every k of n = 30
    for k in range(31):
        w = bl.wilson_verdict(k, 30, 0.4)
        excludes = w["interval"][0] > 0 or w["interval"][1] < 0
        assert excludes == (w["p"] < 0.05), k
    zero = bl.wilson_verdict(30, 100, 0.0)
    assert zero == {
        "verdict": "better",
        "test": "wilson",
        "p": 0.0,
        "delta": 0.3,
        "interval": pytest.approx([bl.wilson_interval(30, 100).lo, bl.wilson_interval(30, 100).hi]),
        "n": 100,
        "p_adjusted": 0.0,  # until the report's rows are adjusted together
        "n_units": 100,
        "method": "wilson",
        "se": None,
        "mde": None,
    }
    assert bl.wilson_verdict(0, 100, 0.0)["verdict"] == "not distinguishable"
    assert bl.wilson_verdict(10, 100, 0.5)["verdict"] == "worse"


def test_fisher_verdict_against_zero_correlation():
    v = bl.fisher_verdict(0.5, 28)
    assert v["p"] == pytest.approx(2 * sps.norm.sf(math.atanh(0.5) * 5))
    assert v["p"] == pytest.approx(0.0060, abs=1e-4) and v["verdict"] == "better"
    assert v["interval"] == pytest.approx([0.1560, 0.7358], abs=1e-4)
    assert bl.fisher_verdict(0.04, 200)["verdict"] == "not distinguishable"
    assert bl.fisher_verdict(-0.4, 100)["verdict"] == "worse"


def test_judge_picks_the_test_and_the_field_is_json_native():
    base = bl.proportion_baseline("copy", [1, 0, 0, 0])
    assert (base.value, base.lo, base.hi) == pytest.approx((0.25, 0.0456, 0.6994), abs=1e-4)
    v = bl.judge(base, value=1.0, n=4, items=np.ones(4), metric="exact_match", direction="higher")
    assert v["test"] == "paired permutation" and v["p"] == pytest.approx(
        _enumerated_p([1] * 4, [1, 0, 0, 0])
    )
    const = bl.Baseline("zero accuracy", 0.0)
    assert (
        bl.judge(const, value=0.3, n=100, items=None, metric="acc", direction="higher")["test"]
        == "wilson"
    )
    assert (
        bl.judge(
            bl.Baseline("zero correlation", 0.0),
            value=0.5,
            n=28,
            items=np.ones(28),
            metric="spearman",
            direction="higher",
        )["test"]
        == "fisher z"
    )
    assert bl.baseline_field(base, "items/x.baseline.npy") == {
        "name": "copy",
        "value": 0.25,
        "interval": [pytest.approx(0.0456, abs=1e-4), pytest.approx(0.6994, abs=1e-4)],
        "items": "items/x.baseline.npy",
        "details": {},
    }
    assert bl.baseline_field(const, "items/x.baseline.npy")["items"] is None


def test_the_paired_verdict_is_over_the_rows_units():
    # 10 rows of 6 positions; the model beats the baseline on every position of rows 0-4 and
    # loses every position of row 5: over 60 positions as independent draws that is a clear
    # win (30 won, 6 lost), over the 10 rows it is 5 wins and 1 loss
    a = np.zeros(60)
    b = np.zeros(60)
    a[:30] = 1
    b[30:36] = 1
    units = np.repeat(np.arange(10), 6)
    items = bl.paired_verdict(a, b, direction="higher", rng=np.random.default_rng(0))
    rows = bl.paired_verdict(a, b, direction="higher", rng=np.random.default_rng(0), units=units)
    assert items["p"] < 0.05 and items["verdict"] == "better" and items["n_units"] == 60
    # D_g = [6 x 5, -6, 0 x 4]: |sum| = 24 is reached by the patterns with at most one of the
    # six signs against the others: 2 * (1 + 6) of 64 -> 14/64 (exact: 2**10 <= 10,000)
    assert rows["p"] == pytest.approx(14 / 64) and rows["verdict"] == "not distinguishable"
    assert (rows["n"], rows["n_units"], rows["method"]) == (60, 10, "paired_t")
    assert rows["delta"] == pytest.approx(24 / 60)
    # e_g = D_g - delta N_g = [3.6 x 5, -8.4, -2.4 x 4]: se = sqrt(10/9 sum e^2) / 60
    e = np.array([3.6] * 5 + [-8.4] + [-2.4] * 4)
    se = math.sqrt(10 / 9 * np.sum(e * e)) / 60
    assert rows["se"] == pytest.approx(se)
    half = sps.t.ppf(0.975, 9) * se
    assert rows["interval"] == pytest.approx([0.4 - half, 0.4 + half])
    assert rows["mde"] == pytest.approx((sps.t.ppf(0.975, 9) + sps.t.ppf(0.8, 9)) * se)
    with pytest.raises(ValueError, match=r"units: expected one unit id per row item"):
        bl.paired_verdict(a, b, direction="higher", units=units[:10])


def _row(name, metric, p, delta):
    v = {"verdict": "better", "test": "wilson", "p": p, "delta": delta, "interval": [0, 1], "n": 9}
    return {"name": name, "metric": metric, "beats_baseline": v}


def test_a_reports_verdicts_are_decided_together_by_holm():
    rows = [
        _row("a", "acc", 0.01, 0.2),
        _row("b", "bpb", 0.04, -0.3),  # lower is better: better at p 0.04 alone
        {"name": "c", "metric": "acc", "beats_baseline": None},  # no test: not counted
        _row("d", "acc", 0.03, -0.1),
    ]
    out = bl.adjust_verdicts(rows)
    # m = 3: sorted 0.01, 0.03, 0.04 times 3, 2, 1 -> 0.03, 0.06, 0.06 (monotone)
    assert [r["beats_baseline"] and r["beats_baseline"]["p_adjusted"] for r in out] == [
        pytest.approx(0.03),
        pytest.approx(0.06),
        None,
        pytest.approx(0.06),
    ]
    assert [r["beats_baseline"] and r["beats_baseline"]["verdict"] for r in out] == [
        "better",
        "not distinguishable",  # raw p 0.04 < 0.05: called "better" one row at a time
        None,
        "not distinguishable",
    ]
    assert [r["beats_baseline"] and r["beats_baseline"]["p"] for r in out] == [
        0.01,
        0.04,
        None,
        0.03,
    ]
    assert rows[1]["beats_baseline"]["verdict"] == "better"  # the input is left as it was


def test_typed_rows_are_decided_as_their_documents():
    """adjust_row_verdicts over report Rows: the same p_adjusted and verdicts as
    adjust_verdicts over the rows' documents, the Rows left as they were, and p_adjusted
    written (it is one of the verdict's set fields)."""
    from tinyllm.report import Row

    base = {"family": "classifier", "kind": "classifier", "value": 0.5, "lo": 0.1, "hi": 0.9,
            "interval": "wilson", "n": 9, "status": "ok", "error": None, "reason": None,
            "checkpoint_sha256": None, "data_sha256": None, "seconds": 0.0, "items": None,
            "checkpoint": "c", "data": "d", "options": {}}  # fmt: skip
    docs = [
        base | _row("a", "acc", 0.01, 0.2),
        base | _row("b", "bpb", 0.04, -0.3) | {"kind": "lm", "family": "bigram"},
        base | {"name": "c", "metric": "acc", "beats_baseline": None},
        base | _row("d", "acc", 0.03, -0.1),
    ]
    rows = [Row(**d) for d in docs]
    out = bl.adjust_row_verdicts(rows)
    want = bl.adjust_verdicts(docs)
    for got, w in zip(out, want, strict=True):
        bb = got.beats_baseline
        assert (bb and bb.model_dump(mode="json", exclude_unset=True)) == w["beats_baseline"]
    assert [r.beats_baseline and r.beats_baseline.verdict for r in out] == [
        "better", "not distinguishable", None, "not distinguishable",
    ]  # fmt: skip
    assert rows[0].beats_baseline.p_adjusted is None  # nothing changed in place
