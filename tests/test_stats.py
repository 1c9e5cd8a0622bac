"""tinyllm.stats against hand-computed values and scipy oracles (SPEC.md sections 4-5)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from tinyllm import stats

# ---- mean_ci (Student t) -------------------------------------------------------------------


def test_mean_ci_hand_computed():
    # mean 2, s = 1, t_{0.975, 2} = 4.30265272975 (tables), half width = t / sqrt(3)
    r = stats.mean_ci([1.0, 2.0, 3.0])
    half = 4.30265272975 / math.sqrt(3)
    assert r.value == 2.0
    assert r.lo == pytest.approx(2.0 - half, abs=1e-10)
    assert r.hi == pytest.approx(2.0 + half, abs=1e-10)


def test_mean_ci_matches_scipy_t_interval():
    x = np.random.default_rng(1).gamma(2.0, 1.5, size=137)
    r = stats.mean_ci(x)
    lo, hi = sps.t.interval(0.95, df=x.size - 1, loc=x.mean(), scale=sps.sem(x))
    assert (r.lo, r.hi) == pytest.approx((lo, hi), abs=1e-12)


def test_mean_ci_zero_width_when_all_equal():
    r = stats.mean_ci([math.log(256)] * 50)
    assert r.lo == r.hi == r.value == pytest.approx(math.log(256))


@pytest.mark.parametrize("bad", [[1.0], [1.0, float("nan")], [[1.0, 2.0]]])
def test_mean_ci_refuses_bad_input(bad):
    with pytest.raises(ValueError, match="expected"):
        stats.mean_ci(bad)


# ---- bootstrap_ci ----------------------------------------------------------------------------


def test_bootstrap_equals_scipy_percentile_with_same_rng_state():
    x = np.random.default_rng(2).integers(0, 2, size=80).astype(float)
    ours = stats.bootstrap_ci(x, np.random.default_rng(7), n_boot=2000)
    ref = sps.bootstrap(
        (x,), np.mean, n_resamples=2000, method="percentile", rng=np.random.default_rng(7)
    ).confidence_interval
    assert ours.value == x.mean()
    assert (ours.lo, ours.hi) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_bootstrap_percentile_by_hand_on_tiny_sample():
    # the same draws done by hand: resample indices, means, numpy's default (linear) quantiles
    x = np.array([0.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    ours = stats.bootstrap_ci(x, np.random.default_rng(3), n_boot=500)
    means = x[np.random.default_rng(3).integers(0, x.size, size=(500, x.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    assert (ours.lo, ours.hi) == pytest.approx((lo, hi), abs=1e-12)


def test_bootstrap_same_rng_state_same_interval_and_rng_is_used():
    x = np.random.default_rng(4).normal(size=60)
    a = stats.bootstrap_ci(x, np.random.default_rng(11))
    b = stats.bootstrap_ci(x, np.random.default_rng(11))
    c = stats.bootstrap_ci(x, np.random.default_rng(12))
    assert (a.lo, a.hi) == (b.lo, b.hi)
    assert (a.lo, a.hi) != (c.lo, c.hi)
    rng = np.random.default_rng(11)
    stats.bootstrap_ci(x, rng)
    assert rng.bit_generator.state != np.random.default_rng(11).bit_generator.state


def test_bootstrap_constant_sample_zero_width_and_needs_generator():
    assert stats.bootstrap_ci([1.0] * 10, np.random.default_rng(0)) == stats.Interval(1, 1, 1)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        stats.bootstrap_ci([1.0, 0.0], 0)


# ---- Wilson ----------------------------------------------------------------------------------


def test_wilson_hand_computed():
    # k=8, n=10, z=1.959964: center (0.8 + z²/20)/(1 + z²/10), half z*sqrt(.016 + z²/400)/(1+z²/10)
    z = 1.959963984540054
    denom = 1 + z * z / 10
    center = (0.8 + z * z / 20) / denom
    half = z * math.sqrt(0.8 * 0.2 / 10 + z * z / 400) / denom
    r = stats.wilson_interval(8, 10)
    assert (r.lo, r.hi) == pytest.approx((center - half, center + half), abs=1e-12)
    assert (r.lo, r.hi) == pytest.approx((0.49016247, 0.94331785), abs=1e-8)


@pytest.mark.parametrize("k,n", [(0, 1), (0, 7), (7, 7), (3, 10), (50, 100), (999, 1000)])
def test_wilson_matches_scipy(k, n):
    r = stats.wilson_interval(k, n)
    ref = sps.binomtest(k, n).proportion_ci(method="wilson")
    assert (r.lo, r.hi) == pytest.approx((ref.low, ref.high), abs=1e-12)
    assert r.value == k / n


@pytest.mark.parametrize("k,n", [(3, 2), (-1, 5), (0, 0), (1.5, 3)])
def test_wilson_refuses_bad_counts(k, n):
    with pytest.raises(ValueError, match="expected"):
        stats.wilson_interval(k, n)


# ---- Fisher z / Spearman -----------------------------------------------------------------------


def test_fisher_z_hand_computed_uses_n_minus_3():
    r = stats.fisher_z_interval(0.5, 28)
    c, half = math.atanh(0.5), 1.959963984540054 / math.sqrt(25)
    assert (r.lo, r.hi) == pytest.approx((math.tanh(c - half), math.tanh(c + half)), abs=1e-12)
    wrong = 1.959963984540054 / math.sqrt(28)  # the sqrt(n) bug gives a narrower interval
    assert r.lo < math.tanh(c - wrong)


def test_fisher_z_edges_and_refusals():
    assert stats.fisher_z_interval(1.0, 10) == stats.Interval(1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="n: expected"):
        stats.fisher_z_interval(0.3, 3)
    with pytest.raises(ValueError, match="rho: expected"):
        stats.fisher_z_interval(1.2, 30)


def test_spearman_ci_matches_scipy_spearmanr():
    rng = np.random.default_rng(5)
    x = rng.normal(size=40)
    y = x + rng.normal(size=40)
    y[:5] = y[5:10]  # some ties
    r = stats.spearman_ci(x, y)
    ref = sps.spearmanr(x, y).statistic
    assert r.value == pytest.approx(ref, abs=1e-12)
    c, half = math.atanh(ref), 1.959963984540054 / math.sqrt(37)
    assert (r.lo, r.hi) == pytest.approx((math.tanh(c - half), math.tanh(c + half)), abs=1e-12)


# ---- paired permutation test -----------------------------------------------------------------


def test_permutation_exact_hand_computed():
    # d = [1,1,1,1]: of the 16 sign patterns only ++++ and ---- reach |sum| = 4
    assert stats.paired_permutation_test([1, 1, 1, 1], [0, 0, 0, 0]) == 0.125
    # d = [3, -1]: |sum| = 2; patterns give |2|, |4|, |-4|, |-2| -> all four reach 2
    assert stats.paired_permutation_test([3, 0], [0, 1]) == 1.0
    assert stats.paired_permutation_test([1, 2, 3], [1, 2, 3]) == 1.0


def test_permutation_monte_carlo_plus_one_correction():
    a = np.ones(40)
    b = np.zeros(40)
    # no random sign pattern of 40 reaches the observed |sum| = 40 (odds 2^-39): p = 1/(n+1)
    p = stats.paired_permutation_test(a, b, n_perm=999, rng=np.random.default_rng(0))
    assert p == 1 / 1000


def test_permutation_agrees_with_scipy_within_monte_carlo_error():
    rng = np.random.default_rng(8)
    a = rng.normal(size=60)
    b = a + rng.normal(0.25, 1.0, size=60)
    ours = stats.paired_permutation_test(a, b, n_perm=20000, rng=np.random.default_rng(1))
    ref = sps.permutation_test(
        (a, b),
        lambda x, y, axis: np.abs(np.sum(x - y, axis=axis)),
        permutation_type="samples",
        n_resamples=20000,
        vectorized=True,
        alternative="greater",
        rng=np.random.default_rng(2),
    ).pvalue
    se = math.sqrt(ref * (1 - ref) / 20000)
    assert 0.001 < ref < 0.5
    assert abs(ours - ref) < 5 * se + 1e-4


def test_permutation_exact_matches_scipy_exact():
    rng = np.random.default_rng(9)
    a, b = rng.normal(size=10), rng.normal(size=10)
    ours = stats.paired_permutation_test(a, b, n_perm=10_000)  # 2^10 <= 10000: exact
    ref = sps.permutation_test(
        (a, b),
        lambda x, y, axis: np.abs(np.sum(x - y, axis=axis)),
        permutation_type="samples",
        n_resamples=np.inf,
        vectorized=True,
        alternative="greater",
    ).pvalue
    assert ours == pytest.approx(ref, abs=1e-12)


def test_permutation_pairing_matters_and_unequal_lengths_refused():
    rng = np.random.default_rng(10)
    difficulty = rng.normal(0, 3, size=200)
    a = difficulty + rng.normal(0, 0.1, size=200)
    b = a + 0.05  # B a little worse on every item
    paired = stats.paired_permutation_test(a, b, n_perm=2000, rng=np.random.default_rng(0))
    shuffled = stats.paired_permutation_test(
        a, rng.permutation(b), n_perm=2000, rng=np.random.default_rng(0)
    )
    assert paired < 0.01 < shuffled
    with pytest.raises(ValueError, match="same items"):
        stats.paired_permutation_test([1, 2, 3], [1, 2])


def test_permutation_same_rng_state_same_p():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=50), rng.normal(size=50)
    p1 = stats.paired_permutation_test(a, b, n_perm=500, rng=np.random.default_rng(4))
    p2 = stats.paired_permutation_test(a, b, n_perm=500, rng=np.random.default_rng(4))
    assert p1 == p2


# ---- NLL accumulator ---------------------------------------------------------------------------


def test_accumulator_spec_worked_example():
    acc = stats.NLLAccumulator()
    acc.add([math.log(2), math.log(3), math.log(4)])
    acc.add([math.log(3), math.log(4)])
    assert acc.n == 5
    assert acc.ppl == pytest.approx(288 ** (1 / 5), rel=1e-14)
    assert acc.ppl == pytest.approx(3.1037, abs=1e-4)
    assert acc.bpb(5) == pytest.approx(math.log2(288) / 5, rel=1e-14)


def test_accumulator_uniform_bytes_is_8_bits_zero_width():
    acc = stats.NLLAccumulator()
    for _ in range(3):
        acc.add(np.full(1000, math.log(256)))
    assert acc.bpb(acc.n) == pytest.approx(8.0, abs=1e-12)
    ci = acc.mean_ci()
    assert ci.hi - ci.lo == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(0, 20, allow_nan=False), min_size=0, max_size=50), min_size=1, max_size=8
    )
)
def test_accumulator_chunks_equal_one_pass(chunks):
    flat = np.array([v for c in chunks for v in c], dtype=np.float64)
    acc = stats.NLLAccumulator()
    for c in chunks:
        acc.add(c)
    assert acc.n == flat.size
    if flat.size:
        assert acc.total == pytest.approx(math.fsum(flat), rel=1e-12, abs=1e-12)
    if flat.size >= 2:
        ref = stats.mean_ci(flat)
        got = acc.mean_ci()
        assert (got.lo, got.hi) == pytest.approx((ref.lo, ref.hi), rel=1e-9, abs=1e-9)


def test_accumulator_compensated_sum_does_not_drift():
    acc = stats.NLLAccumulator()
    chunk = np.full(10, 0.1)
    for _ in range(100_000):
        acc.add(chunk)
    assert acc.total == math.fsum([0.1] * 1_000_000)


def test_accumulator_refuses_nonfinite_and_empty_summary():
    acc = stats.NLLAccumulator()
    with pytest.raises(ValueError, match="expected at least 1"):
        _ = acc.mean
    with pytest.raises(ValueError, match="finite"):
        acc.add([1.0, float("inf")])
    with pytest.raises(ValueError, match="positive byte count"):
        acc.bpb(0)
