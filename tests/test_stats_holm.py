"""tinyllm.stats.holm: Holm-adjusted p-values and the verdict read from them (docs/definitions.md,
"Holm"), against a hand oracle, the step-down procedure itself and Bonferroni/BH bounds."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from tinyllm import stats


def step_down_rejects(ps: list[float], alpha: float) -> set[int]:
    """Holm's procedure as written (a reference implementation): sort the m p-values, reject
    while ``p_(k) <= alpha / (m - k + 1)`` (k = 1 .. m), stop at the first that is not."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    m = len(ps)
    rejected = set()
    for k, i in enumerate(order):
        if ps[i] < alpha / (m - k):
            rejected.add(i)
        else:
            break
    return rejected


def test_hand_oracle_with_a_missing_row():
    # m = 3: 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> monotone 0.06
    adj = stats.holm_adjust([0.01, 0.04, None, 0.03])
    assert adj[2] is None
    assert adj[0] == pytest.approx(0.03) and adj[1] == pytest.approx(0.06)
    assert adj[3] == pytest.approx(0.06)


def test_capped_at_one_ties_equal_and_nan_is_a_missing_row():
    adj = stats.holm_adjust([0.5, 0.2, 0.2, float("nan"), 0.9])
    # m = 4: sorted 0.2, 0.2, 0.5, 0.9 times 4, 3, 2, 1 -> 0.8, 0.6 -> 0.8, 1.0, 0.9 -> 1.0
    assert adj == [pytest.approx(1.0), pytest.approx(0.8), pytest.approx(0.8), None, 1.0]
    assert stats.holm_adjust([]) == [] and stats.holm_adjust([None]) == [None]
    assert stats.holm_adjust([0.04]) == [0.04]  # one row: nothing to adjust


@pytest.mark.parametrize("bad", [1.5, -0.1, "0.1", True])
def test_values_that_are_not_p_values_are_refused(bad):
    with pytest.raises(ValueError, match=r"^pvalues: expected .* at index 1$"):
        stats.holm_adjust([0.1, bad])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.floats(0.0, 1.0)), min_size=1, max_size=25),
    st.floats(0.001, 0.2),
)
def test_adjusted_p_below_alpha_is_exactly_the_step_down_rejection(ps, alpha):
    adj = stats.holm_adjust(ps)
    present = [i for i, p in enumerate(ps) if p is not None]
    rejected = step_down_rejects([ps[i] for i in present], alpha)
    called = {k for k, i in enumerate(present) if adj[i] < alpha}
    # equal only off the boundary (p * k == alpha decides by rounding)
    if all(not math.isclose(ps[i] * k, alpha) for i in present for k in range(1, 26)):
        assert called == rejected
    m = len(present)
    for i in present:  # raw <= Holm <= Bonferroni
        assert ps[i] <= adj[i] + 1e-15 and adj[i] <= min(1.0, m * ps[i]) + 1e-15
    by_p = sorted(present, key=lambda i: ps[i])
    assert all(adj[a] <= adj[b] for a, b in zip(by_p, by_p[1:], strict=False))  # monotone


def test_holm_is_never_below_benjamini_hochberg():
    # BH controls the false discovery rate, Holm the family-wise error: Holm is the stricter one
    ps = np.random.default_rng(0).uniform(0, 0.2, size=21)
    bh = sps.false_discovery_control(ps, method="bh")
    assert np.all(np.asarray(stats.holm_adjust(ps.tolist())) >= bh - 1e-15)


def test_a_release_where_nothing_changed_flags_no_row_in_95_percent():
    # 21 rows of null p-values (uniform), 4,000 releases: raw calls flag some row in most
    # releases, Holm's in at most 5% (1 - (1 - 0.05/21)**21 = 0.0488 for independent rows)
    ps = np.random.default_rng(1).uniform(size=(4000, 21))
    raw = np.mean((ps < 0.05).any(axis=1))
    holm = np.mean([min(stats.holm_adjust(row.tolist())) < 0.05 for row in ps])
    assert raw == pytest.approx(1 - 0.95**21, abs=0.03)
    assert 0.035 < holm <= 0.06


def test_verdict_reads_the_adjusted_p_and_the_direction():
    assert stats.verdict(0.03, -0.02, "lower") == "improved"
    assert stats.verdict(0.03, -0.02, "higher") == "regressed"
    assert stats.verdict(0.03, 0.02, "higher") == "improved"
    assert stats.verdict(0.05, 0.02, "higher") == "unchanged"  # p < alpha, strictly
    assert stats.verdict(0.0, 0.0, "higher") == "unchanged"
    assert stats.verdict(None, 0.3, "higher") == "unchanged"
    words = stats.BASELINE_WORDS
    assert stats.verdict(0.06, -0.02, "lower", words=words) == "not distinguishable"
    assert stats.verdict(0.01, 0.02, "lower", words=words) == "worse"
    assert stats.verdict(0.08, 0.02, "lower", alpha=0.1) == "regressed"
    with pytest.raises(ValueError, match=r"^direction: expected 'lower' or 'higher', got 'up'"):
        stats.verdict(0.01, 1.0, "up")


def test_a_raw_call_can_become_no_call_after_adjustment():
    raw = [0.02, 0.03, 0.5]
    adj = stats.holm_adjust(raw)  # 0.06, 0.06, 0.5
    assert [stats.verdict(p, 1.0, "higher") for p in raw][:2] == ["improved", "improved"]
    assert [stats.verdict(p, 1.0, "higher") for p in adj] == ["unchanged"] * 3
