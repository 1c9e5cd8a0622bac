"""tinyllm.stats.paired_difference, the one paired comparison over units (docs/definitions.md,
"Paired tests"), against hand-computed values, the item-level test it generalises, and scipy."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from tinyllm import stats
from tinyllm.stats import Method


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_docstring_example_by_hand():
    r = stats.paired_difference([1, 2, 3, 4], [0, 1, 3, 3], [0, 0, 1, 1], rng())
    # d = [1.5 - 0.5, 3.5 - 3] = [1, 0.5]; se = sd([1, .5]) / sqrt 2 = 0.25; t_{.975, 1} = 12.706
    t975, t80 = sps.t.ppf(0.975, 1), sps.t.ppf(0.80, 1)
    assert (r.delta, r.se, r.df, r.n_units, r.n_items) == (0.75, 0.25, 1, 2, 4)
    assert (r.lo, r.hi) == pytest.approx((0.75 - t975 * 0.25, 0.75 + t975 * 0.25), abs=1e-12)
    assert (r.lo, r.hi) == pytest.approx((-2.4266, 3.9266), abs=1e-4)
    assert r.p == 0.5 and r.exact  # ++ and -- reach |1.5|: 2 of 4 patterns
    assert r.mde == pytest.approx((t975 + t80) * 0.25, abs=1e-12)
    assert r.mde == pytest.approx(3.5206, abs=1e-4)
    assert (r.value_a, r.value_b, r.kind, r.method) == (2.5, 1.75, "mean", Method.PAIRED_T)
    assert r.warning.startswith("only 2 units")
    assert r.interval == stats.Interval(0.75, r.lo, r.hi, "paired_t", 2, 1, 0.25, r.warning)


# ---- one item per unit: the item-level test, draw for draw --------------------------------


@pytest.mark.parametrize("kind", ["mean", "ratio"])
@pytest.mark.parametrize("n, n_perm", [(12, 10_000), (60, 3_000)])  # exact, Monte Carlo
def test_one_item_units_are_the_item_level_t_interval_and_sign_flip_test(kind, n, n_perm):
    g = np.random.default_rng(n)
    a = g.normal(1.0, 1.0, size=n)
    b = a - 0.3 + g.normal(0.0, 1.0, size=n)
    r = stats.paired_difference(a, b, np.arange(n), rng(9), kind=kind, n_perm=n_perm)
    ci = stats.mean_ci(a - b)
    p = stats.paired_permutation_test(a, b, n_perm=n_perm, rng=rng(9))
    assert (r.delta, r.lo, r.hi) == pytest.approx((ci.value, ci.lo, ci.hi), abs=1e-12)
    assert r.p == p and r.exact == (n == 12)
    assert r.se == pytest.approx(float(np.std(a - b, ddof=1)) / math.sqrt(n), abs=1e-13)


# ---- the mean kind is the paired t test on unit means -------------------------------------


def test_mean_kind_is_scipys_paired_t_test_on_unit_means():
    g = np.random.default_rng(3)
    ids = g.integers(0, 15, size=200)  # 15 documents of unequal length, items in any order
    a = g.normal(size=200) + ids * 0.1
    b = a + g.normal(0.05, 0.5, size=200)
    r = stats.paired_difference(a, b, ids, rng(1))
    units = stats.group_units(ids)
    ma, mb = units.means(a), units.means(b)
    rel = sps.ttest_rel(ma, mb)
    one = sps.ttest_1samp(ma - mb, 0.0)
    ci = rel.confidence_interval(0.95)
    assert r.delta / r.se == pytest.approx(rel.statistic, abs=1e-10)
    assert r.delta / r.se == pytest.approx(one.statistic, abs=1e-10)
    assert (r.lo, r.hi) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert r.df == rel.df == 14
    # the sign-flip p sits near the t test's p (same null, 15 units)
    assert r.p == pytest.approx(rel.pvalue, abs=0.03)


def test_sign_flips_over_units_not_items():
    # 4 documents; item-level flips would see 40 items and call this a clear difference
    ids = np.repeat(np.arange(4), 10)
    a = np.repeat([1.0, 1.0, 1.0, 0.0], 10)
    b = np.zeros(40)
    r = stats.paired_difference(a, b, ids, rng())
    assert r.p == pytest.approx(
        sum(
            abs(sum(s * d for s, d in zip(signs, [1, 1, 1, 0], strict=True))) >= 3
            for signs in itertools.product([-1, 1], repeat=4)
        )
        / 16
    )  # 4 of 16
    assert r.p == 0.25 and stats.paired_permutation_test(a, b) < 0.001


# ---- the ratio kind: linearised residuals --------------------------------------------------


def test_ratio_kind_by_hand_with_weights():
    # 3 documents; tokens' NLLs of A and B, each token's bytes as the weight
    ids = [0, 0, 1, 1, 1, 2]
    a = np.array([1.0, 2.0, 0.5, 0.5, 1.0, 3.0])
    b = np.array([1.5, 2.0, 0.5, 1.0, 1.0, 2.0])
    w = np.array([1.0, 2.0, 1.0, 1.0, 3.0, 2.0])
    r = stats.paired_difference(a, b, ids, rng(), kind="ratio", weights=w)
    SA, SB, N = np.array([3.0, 2.0, 3.0]), np.array([3.5, 2.5, 2.0]), np.array([3.0, 5.0, 2.0])
    rA, rB = SA.sum() / N.sum(), SB.sum() / N.sum()
    e = (SA - rA * N) - (SB - rB * N)
    se = math.sqrt(3 / 2 * (e**2).sum()) / N.sum()
    t = sps.t.ppf(0.975, 2)
    assert (r.value_a, r.value_b) == pytest.approx((0.8, 0.8), abs=1e-15)
    assert r.delta == pytest.approx(rA - rB, abs=1e-15) and r.delta == pytest.approx(0.0)
    assert r.se == pytest.approx(se, abs=1e-15)
    assert (r.lo, r.hi) == pytest.approx((r.delta - t * se, r.delta + t * se), abs=1e-14)
    # p: flips of D_g = S^A_g - S^B_g = [-0.5, -0.5, 1]; |sum| = 0 -> p = 1
    assert r.p == 1.0 and r.kind == "ratio"


def test_ratio_p_flips_the_unit_differences_of_sums():
    ids = np.repeat(np.arange(6), [3, 1, 4, 2, 5, 1])
    g = np.random.default_rng(2)
    a = g.gamma(2.0, size=ids.size)
    b = a * 0.8
    r = stats.paired_difference(a, b, ids, rng(), kind="ratio")
    D = np.bincount(ids, weights=a - b)
    assert r.p == stats.sign_flip_p(D) == 1 / 32  # all D_g > 0: only ++++++ and ------
    assert r.delta == pytest.approx(D.sum() / ids.size, abs=1e-15)


def test_equal_sides_give_zero_width_and_p_one():
    a = np.random.default_rng(0).normal(size=30)
    for kind in ("mean", "ratio"):
        r = stats.paired_difference(a, a.copy(), np.repeat(np.arange(10), 3), rng(), kind=kind)
        assert (r.delta, r.lo, r.hi, r.se, r.mde, r.p) == (0.0, 0.0, 0.0, 0.0, 0.0, 1.0)


def test_scaled_is_the_same_comparison_in_other_units():
    a, b = np.arange(12.0), np.arange(12.0)[::-1] * 0.5
    r = stats.paired_difference(a, b, np.repeat(np.arange(6), 2), rng(), kind="ratio")
    s = r.scaled(1 / math.log(2))
    assert s.delta == pytest.approx(r.delta / math.log(2))
    assert (s.lo, s.hi, s.se, s.mde) == pytest.approx(
        (r.lo / math.log(2), r.hi / math.log(2), r.se / math.log(2), r.mde / math.log(2))
    )
    flipped = r.scaled(-1.0)
    assert (flipped.lo, flipped.hi, flipped.se, flipped.p) == (-r.hi, -r.lo, r.se, r.p)
    with pytest.raises(ValueError, match=r"^factor: expected a finite nonzero number"):
        r.scaled(0.0)


# ---- refusals ------------------------------------------------------------------------------


def test_items_or_units_that_do_not_pair_are_refused():
    with pytest.raises(ValueError, match=r"expected a and b scored on the same items .* 3 and 4"):
        stats.paired_difference([1, 2, 3], [1, 2, 3, 4], [0, 1, 2], rng())
    with pytest.raises(ValueError, match=r"^units: expected one unit id per item \(3\), got 2$"):
        stats.paired_difference([1, 2, 3], [1, 2, 2], [0, 1], rng())
    with pytest.raises(ValueError, match=r"^units: expected at least 2 units"):
        stats.paired_difference([1, 2, 3], [1, 2, 2], [0, 0, 0], rng())
    with pytest.raises(ValueError, match=r"^kind: expected one of \['mean', 'ratio', 'spearman'\]"):
        stats.paired_difference([1, 2], [1, 3], [0, 1], rng(), kind="median")
    with pytest.raises(ValueError, match=r"^reference: expected reference scores for kind"):
        stats.paired_difference([1, 2, 3, 4], [1, 3, 2, 4], range(4), rng(), kind="spearman")
    with pytest.raises(ValueError, match=r"^reference: .* got kind 'mean' with the reference"):
        stats.paired_difference([1, 2], [1, 3], [0, 1], rng(), reference=[1, 2])
    with pytest.raises(ValueError, match=r"^weights: expected only for kind 'ratio'"):
        stats.paired_difference([1, 2], [1, 3], [0, 1], rng(), weights=[1, 1])
    with pytest.raises(TypeError, match=r"^rng: expected a numpy.random.Generator, got NoneType"):
        stats.paired_difference([1, 2], [1, 3], [0, 1], None)
    with pytest.raises(ValueError, match=r"^a: expected finite values, got nan at index 0"):
        stats.paired_difference([np.nan, 2], [1, 3], [0, 1], rng())


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.floats(-5, 5), st.floats(-5, 5)), min_size=3, max_size=25
    ),
    st.sampled_from(["mean", "ratio"]),
)
def test_swapping_the_sides_negates_the_delta_and_keeps_p(rows, kind):
    ids = [u for u, _, _ in rows]
    if len(set(ids)) < 2:
        return
    a = [x for _, x, _ in rows]
    b = [y for _, _, y in rows]
    ab = stats.paired_difference(a, b, ids, rng(4), kind=kind)
    ba = stats.paired_difference(b, a, ids, rng(4), kind=kind)
    assert ba.delta == pytest.approx(-ab.delta, abs=1e-9)
    assert (ba.lo, ba.hi) == pytest.approx((-ab.hi, -ab.lo), abs=1e-9)
    assert ba.p == ab.p and ba.exact  # at most 6 units: exact, the same patterns
    assert ab.lo <= ab.delta <= ab.hi and 0 < ab.p <= 1


# ---- the Spearman kind ---------------------------------------------------------------------


def _spearman_data(n: int, seed: int):
    g = np.random.default_rng(seed)
    h = g.normal(size=n)
    return h + g.normal(0, 0.5, size=n), h + g.normal(0, 1.0, size=n), h


def test_spearman_kind_with_one_pair_per_unit_is_compares_bootstrap_and_swap_test():
    x, y, h = _spearman_data(40, 1)
    r = stats.paired_difference(
        x, y, range(40), rng(5), kind="spearman", reference=h, n_perm=999, n_boot=500
    )
    ci = stats.spearman_difference_ci(x, y, h, rng(5), n_boot=500)
    after_boot = rng(5)
    after_boot.integers(0, 40, size=(500, 40))  # the bootstrap's draws come first
    p = stats.spearman_difference_test(x, y, h, n_perm=999, rng=after_boot)
    assert (r.delta, r.lo, r.hi) == pytest.approx((ci.value, ci.lo, ci.hi), abs=1e-12)
    assert r.p == p and r.method == Method.PAIRED_BOOTSTRAP and r.kind == "spearman"
    assert (r.value_a, r.value_b) == pytest.approx(
        (sps.spearmanr(x, h).statistic, sps.spearmanr(y, h).statistic), abs=1e-12
    )
    assert r.mde == pytest.approx(stats.mde(r.se, 39)) and r.se > 0


def test_spearman_swaps_whole_units_by_enumeration():
    x, y, h = _spearman_data(24, 2)
    ids = np.repeat(np.arange(6), 4)
    r = stats.paired_difference(x, y, ids, rng(), kind="spearman", reference=h, n_boot=50)
    ra, rb = sps.rankdata(x), sps.rankdata(y)
    t_obs = abs(stats.spearman_difference(ra, rb, h))
    count = 0
    for pattern in itertools.product([False, True], repeat=6):
        swap = np.asarray(pattern)[ids]
        xs, ys = np.where(swap, rb, ra), np.where(swap, ra, rb)
        count += abs(stats.spearman_difference(xs, ys, h)) >= t_obs - 1e-9
    assert r.exact and r.p == count / 64
