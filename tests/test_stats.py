"""tinyllm.stats against hand-computed values and scipy oracles (docs/definitions.md,
"Intervals" and "Paired tests")."""

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


# ---- argument errors, the smallest inputs, the defaults and each estimator's edges ---------------


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"^x: expected finite values, got nan at index 1"):
        stats.mean_ci([1.0, float("nan"), 2.0])
    with pytest.raises(ValueError, match=r"^x: expected finite"):
        stats.bootstrap_ci([1.0, float("inf")], np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"^x: expected at least 4 values, got 3"):
        stats.spearman_ci([1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match=r"^y: expected at least 4 values, got 3"):
        stats.spearman_ci([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"^expected x and y of equal length, got 4 and 5"):
        stats.spearman_ci([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0, 5.0])
    with (
        pytest.raises(ValueError, match=r"^spearman: expected x and y that both vary"),
        pytest.warns(sps.ConstantInputWarning),
    ):
        stats.spearman_ci([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match=r"^a: expected finite"):
        stats.paired_permutation_test([float("nan"), 1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"^b: expected finite"):
        stats.paired_permutation_test([1.0, 2.0], [1.0, float("inf")])
    with pytest.raises(ValueError, match=r"^n_perm: expected >= 1, got 0"):
        stats.paired_permutation_test([1.0, 2.0], [0.0, 0.0], n_perm=0)
    with pytest.raises(ValueError, match=r"^n_boot: expected >= 1, got 0"):
        stats.bootstrap_ci([1.0, 2.0], np.random.default_rng(0), n_boot=0)
    with pytest.raises(TypeError, match=r"got int$"):
        stats.bootstrap_ci([1.0, 2.0], 0)
    with pytest.raises(ValueError, match=r"^NLLAccumulator.add: expected finite NLLs"):
        stats.NLLAccumulator().add([float("nan")])


def test_smallest_valid_inputs_are_accepted():
    # the boundaries of each guard: one value for a bootstrap, four pairs for Fisher z
    assert stats.bootstrap_ci([5.0], np.random.default_rng(0)) == stats.Interval(5.0, 5.0, 5.0)
    with pytest.warns(RuntimeWarning):  # scipy's standard error of one resample divides by 0
        one = stats.bootstrap_ci([1.0, 3.0], np.random.default_rng(0), n_boot=1)
    assert one.value == 2.0 and one.lo == one.hi and one.lo in (1.0, 2.0, 3.0)
    assert stats.paired_permutation_test([1.0], [0.0], n_perm=1, rng=np.random.default_rng(0)) in (
        0.5,
        1.0,
    )
    # n = 4: se = 1/sqrt(1) = 1, z_0.975 = 1.959964
    fz = stats.fisher_z_interval(0.5, 4)
    assert fz.lo == pytest.approx(math.tanh(math.atanh(0.5) - 1.959963984540054), abs=1e-12)
    assert fz.hi == pytest.approx(math.tanh(math.atanh(0.5) + 1.959963984540054), abs=1e-12)
    assert stats.fisher_z_interval(-1.0, 10) == stats.Interval(-1.0, -1.0, -1.0)
    with pytest.raises(ValueError, match="rho"):
        stats.fisher_z_interval(-1.5, 10)
    sp = stats.spearman_ci([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0])  # rho = 0.8 on 4 pairs
    assert sp.value == pytest.approx(0.8)
    assert sp.lo == pytest.approx(math.tanh(math.atanh(0.8) - 1.959963984540054))
    with pytest.raises(ValueError, match="integer counts"):
        stats.wilson_interval(True, 10)


def test_confidence_reaches_every_interval():
    # c = 0.5: z = 0.674490, the t/percentile ends move in accordingly
    x = [0.3, 1.1, 2.5, 0.7, 1.9, 1.4, 0.2, 2.2]
    sp = stats.spearman_ci(x, [0.1, 1.0, 2.0, 0.9, 1.5, 1.6, 0.0, 2.4], confidence=0.5)
    rho = sps.spearmanr(x, [0.1, 1.0, 2.0, 0.9, 1.5, 1.6, 0.0, 2.4]).statistic
    assert sp.hi == pytest.approx(math.tanh(math.atanh(rho) + 0.6744897501960817 / math.sqrt(5)))
    ours = stats.bootstrap_ci(x, np.random.default_rng(5), n_boot=400, confidence=0.5)
    ref = sps.bootstrap(
        (np.asarray(x),),
        np.mean,
        n_resamples=400,
        confidence_level=0.5,
        method="percentile",
        rng=np.random.default_rng(5),
    ).confidence_interval
    assert (ours.lo, ours.hi) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_wilson_all_successes_upper_end_is_one():
    for n in (1, 3, 7, 10, 16, 40, 49, 1000):  # 16/16 and 40/40 overshoot 1 by 2e-16 unclipped
        iv = stats.wilson_interval(n, n)
        assert iv.hi <= 1.0 and iv.hi == pytest.approx(1.0, abs=1e-15)


def test_permutation_exact_or_monte_carlo_by_the_documented_rule():
    # d = all ones: exactly two of the 2**n sign patterns reach |sum| = n, so the exact p = 2 / 2**n;
    # the Monte Carlo p is (1 + count) / (n_perm + 1) and is never that
    rng = np.random.default_rng(0)
    assert (
        stats.paired_permutation_test(np.ones(3), np.zeros(3), n_perm=8) == 2 / 8
    )  # 2**n == n_perm
    p = stats.paired_permutation_test(np.ones(3), np.zeros(3), n_perm=7, rng=rng)
    assert p * 8 == round(p * 8)  # Monte Carlo below 2**n
    p10 = stats.paired_permutation_test(np.ones(10), np.zeros(10), n_perm=100, rng=rng)
    assert p10 * 101 == pytest.approx(round(p10 * 101))  # 2**10 > 100: Monte Carlo, not 2/1024
    assert stats.paired_permutation_test(np.ones(20), np.zeros(20), n_perm=2**20) == 2 / 2**20


def test_permutation_monte_carlo_when_every_flip_ties():
    # one nonzero difference: every sign pattern gives |sum| = 1 = observed, so count = n_perm and
    # p = (1 + n_perm) / (n_perm + 1) = 1 exactly; the nonzero item sits in the LAST group of 8
    for n, n_perm in ((21, 1000), (160_000, 500)):  # the second needs 3 batches of <= 200 draws
        d = np.zeros(n)
        d[-1] = 1.0
        rng = np.random.default_rng(1)
        assert stats.paired_permutation_test(d, np.zeros(n), n_perm=n_perm, rng=rng) == 1.0


def test_permutation_monte_carlo_sign_bytes_are_uniform():
    # d = eight ones then 13 zeros (n = 21, Monte Carlo): |sum| = 8 iff the first byte is 0 or 255,
    # p = 2/256 = 0.0078; with 20000 draws the standard error is 0.00062
    d = np.concatenate([np.ones(8), np.zeros(13)])
    p = stats.paired_permutation_test(d, np.zeros(21), n_perm=20_000, rng=np.random.default_rng(2))
    assert abs(p - 2 / 256) < 0.0025


def test_accumulator_neumaier_keeps_small_terms_next_to_huge_ones():
    # Neumaier (unlike Kahan) gets 1 + 1e100 + 1 - 1e100 = 2 exactly, in either order of size
    for chunks in ([1.0], [1e100], [1.0], [-1e100]), ([1e100], [1.0], [-1e100], [1.0]):
        acc = stats.NLLAccumulator()
        for c in chunks:
            acc.add(c)
        assert acc.total == 2.0 and acc.n == 4
        assert acc.mean == 0.5


def test_accumulator_first_chunk_mean_and_interval_point():
    acc = stats.NLLAccumulator()
    acc.add(np.array([[1.0, 2.0], [3.0, 6.0]]))  # any shape: flattened to 4 tokens
    assert acc.n == 4 and acc.mean == 3.0
    assert acc.std() == pytest.approx(math.sqrt(14 / 3))  # squared deviations 4+1+0+9 over n-1
    iv = acc.mean_ci()
    assert iv.value == 3.0
    assert iv.hi - 3.0 == pytest.approx(3.182446305284263 * math.sqrt(14 / 3) / 2)
    assert acc.bpb(1) == pytest.approx(12.0 / math.log(2))


def test_bootstrap_default_is_1000_resamples():
    x = np.random.default_rng(8).normal(size=40)  # continuous: 1000 vs 1001 resamples differ
    ours = stats.bootstrap_ci(x, np.random.default_rng(9))
    ref = sps.bootstrap(
        (np.asarray(x),),
        np.mean,
        n_resamples=1000,
        method="percentile",
        rng=np.random.default_rng(9),
    ).confidence_interval
    assert (ours.lo, ours.hi) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_permutation_defaults_and_boolean_scores():
    # without an rng and with the default n_perm = 10000: n = 30 equal differences reach
    # |sum| = 30 only at all-plus / all-minus (2 in 2**30), so count = 0 and p = 1 / 10001
    assert stats.paired_permutation_test(np.ones(30), np.zeros(30)) == 1 / 10_001
    # 0/1 correctness as booleans: converted to floats, d = [1, 1, 1], exact p = 2/8
    t, f = np.ones(3, dtype=bool), np.zeros(3, dtype=bool)
    assert stats.paired_permutation_test(t, f) == 0.25
    # n = 21 is past the exact limit of 20 even with n_perm >= 2**21: Monte Carlo
    p = stats.paired_permutation_test(np.ones(21), np.zeros(21), 2**21, np.random.default_rng(4))
    assert p != 2 / 2**21 and p * (2**21 + 1) == pytest.approx(round(p * (2**21 + 1)))


def test_permutation_tie_tolerance_scales_with_the_data():
    # differences of about 5e5: the float sums of the two tied sign patterns (all + / all -)
    # differ from fsum's observed |sum| by rounding (~1e-10), inside the 1e-9 * sum|d| tolerance:
    # p is the exact 2 / 2**12, not 0
    d = [600000.8968012322, 100000.58332004692, 400000.0402182209, 100000.71148682412,
         500000.5690258543, 400000.82595722214, 400000.53216047346, 600000.8132440954,
         100000.99701029307, 900000.3505548114, 700000.1710214401, 800000.3916747995]  # fmt: skip
    assert stats.paired_permutation_test(d, np.zeros(12)) == 2 / 2**12


def test_accumulator_sums_float32_chunks_in_float64():
    # NLLs often arrive as float32 (torch); the total must be the float64 sum of those values
    x = np.full(100_000, 0.1, dtype=np.float32)
    acc = stats.NLLAccumulator()
    acc.add(x)
    assert acc.total == pytest.approx(math.fsum(x.astype(np.float64).tolist()), rel=1e-13)


def test_accumulator_two_tokens_are_enough_for_std_and_interval():
    acc = stats.NLLAccumulator()
    acc.add([1.0, 3.0])  # mean 2, s = sqrt(2), t_{0.975, 1} = 12.7062
    assert acc.std() == pytest.approx(math.sqrt(2.0))
    assert acc.mean_ci().hi == pytest.approx(
        2.0 + 12.706204736174698 * math.sqrt(2.0) / math.sqrt(2)
    )


# ---- two Spearman correlations on the same items (compare's spearman rows) -----------------------


def test_spearman_along_is_scipys_spearmanr_row_by_row():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 5, size=(6, 30)).astype(float)  # ties: average ranks
    y = rng.normal(size=30)
    want = [sps.spearmanr(row, y).statistic for row in x]
    assert stats.spearman_along(x, y) == pytest.approx(want, abs=1e-12)
    assert stats.spearman_along([[1, 2, 3], [3, 2, 1]], [1, 2, 3]).tolist() == [1.0, -1.0]
    assert math.isnan(stats.spearman_along([2.0, 2.0, 2.0], [1, 2, 3]))  # constant: no rho


def test_spearman_difference_hand_value():
    # rho(x, h) = 1; y has its first two items swapped: sum d^2 = 2, rho = 1 - 6*2/(10*99)
    h = np.arange(1.0, 11.0)
    y = h.copy()
    y[[0, 1]] = y[[1, 0]]
    assert stats.spearman_difference(h, y, h) == pytest.approx(12 / 990, abs=1e-15)
    assert stats.spearman_difference([1, 2, 3, 4], [4, 3, 2, 1], [1, 2, 3, 4]) == 2.0


def _correlated(n: int, seed: int, noise_x: float, noise_y: float):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=n)
    return h + noise_x * rng.normal(size=n), h + noise_y * rng.normal(size=n), h


def test_spearman_difference_ci_is_scipys_paired_bootstrap():
    """Differential: scipy.stats.bootstrap(paired=True) with a statistic written independently
    (scipy's spearmanr, one resample at a time) draws the same resamples from the same seed and
    gives the same percentile interval."""
    x, y, h = _correlated(60, 0, 0.5, 1.5)

    def delta(a, b, c):
        return sps.spearmanr(a, c).statistic - sps.spearmanr(b, c).statistic

    ref = sps.bootstrap(
        (x, y, h),
        delta,
        paired=True,
        vectorized=False,
        n_resamples=299,
        method="percentile",
        rng=np.random.default_rng(5),
    )
    got = stats.spearman_difference_ci(x, y, h, np.random.default_rng(5), n_boot=299)
    assert got.value == pytest.approx(delta(x, y, h), abs=1e-12)
    assert (got.lo, got.hi) == pytest.approx(
        (ref.confidence_interval.low, ref.confidence_interval.high), abs=1e-12
    )
    # the same pairs for both: an interval of the difference far narrower than unpaired noise
    assert 0 < got.lo < got.value < got.hi
    again = stats.spearman_difference_ci(x, y, h, np.random.default_rng(5), n_boot=299)
    assert again == got  # the caller's rng decides everything


def test_spearman_difference_ci_of_equal_scores_is_zero_width_and_checks_inputs():
    x, _, h = _correlated(20, 1, 0.5, 0.5)
    assert stats.spearman_difference_ci(x, x, h, np.random.default_rng(0)) == stats.Interval(
        0.0, 0.0, 0.0
    )
    with pytest.raises(ValueError, match=r"expected x, y and h scored on the same items"):
        stats.spearman_difference_ci(x, x[:-1], h, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"^h: expected scores that vary, got a constant input$"):
        stats.spearman_difference_ci(x, x, np.ones(20), np.random.default_rng(0))
    with pytest.raises(TypeError, match="rng: expected a numpy.random.Generator"):
        stats.spearman_difference_ci(x, x, h, 0)


def _perm_both_by_enumeration(x, y, h) -> float:
    """PERM-BOTH written out: every swap pattern of the two within-model ranks, scipy's rho."""
    rx, ry = sps.rankdata(x), sps.rankdata(y)
    t = abs(sps.spearmanr(rx, h).statistic - sps.spearmanr(ry, h).statistic)
    n, hits = len(x), 0
    for code in range(2**n):
        swap = np.array([(code >> i) & 1 for i in range(n)], dtype=bool)
        xs, ys = np.where(swap, ry, rx), np.where(swap, rx, ry)
        ts = abs(sps.spearmanr(xs, h).statistic - sps.spearmanr(ys, h).statistic)
        hits += ts >= t - 1e-9
    return hits / 2**n


def test_spearman_difference_test_hand_value_and_enumeration():
    # n = 4, x = h, y reversed: T = 2, reached only by swapping all items or none: 2/16
    assert stats.spearman_difference_test([1, 2, 3, 4], [4, 3, 2, 1], [1, 2, 3, 4]) == 0.125
    x, y, h = _correlated(8, 2, 0.3, 1.0)
    exact = _perm_both_by_enumeration(x, y, h)
    assert stats.spearman_difference_test(x, y, h, n_perm=256) == pytest.approx(exact, abs=1e-15)
    # fewer permutations than patterns: random patterns, p within 4 standard errors of exact
    p = stats.spearman_difference_test(x, y, h, n_perm=4000, rng=np.random.default_rng(0))
    assert abs(p - exact) < 4 * math.sqrt(exact * (1 - exact) / 4000) + 1 / 4001


def test_spearman_difference_test_separates_a_better_model_and_not_an_equal_one():
    x, y, h = _correlated(150, 4, 0.4, 1.5)  # x ranks the items far better than y
    p = stats.spearman_difference_test(x, y, h, n_perm=2000, rng=np.random.default_rng(0))
    assert p == 1 / 2001  # no random swap pattern reaches the observed difference
    assert stats.spearman_difference_test(x, x, h) == 1.0
    assert stats.spearman_difference_test(x, 2 * x + 1, h) == 1.0  # the same ranks
    with pytest.raises(ValueError, match=r"n_perm: expected an integer >= 1, got 0"):
        stats.spearman_difference_test(x, y, h, n_perm=0)
    with pytest.raises(ValueError, match=r"x: expected at least 4 values, got 3"):
        stats.spearman_difference_test([1, 2, 3], [1, 2, 3], [1, 2, 3])


def test_spearman_difference_ci_docstring_example():
    h = np.arange(1.0, 11.0)
    y = h.copy()
    y[[0, 1]] = y[[1, 0]]
    r = stats.spearman_difference_ci(h, y, h, np.random.default_rng(0))
    assert r.value == pytest.approx(0.01212, abs=1e-5)
    assert (r.lo, r.hi) == pytest.approx((0.0, 0.1307), abs=1e-4)
