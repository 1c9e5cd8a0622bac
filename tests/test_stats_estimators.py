"""The estimator registry of tinyllm.stats against hand-computed values and scipy
(docs/definitions.md, "Intervals"): the cluster-robust ratio estimator, the cluster bootstrap,
Wilson, Fisher z and the token-level reference, each under its method's one name."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from tinyllm import stats
from tinyllm.stats import Method

T_975_2 = 4.302652729749464  # t_{0.975} with 2 df (tables)


# ---- names ---------------------------------------------------------------------------------


def test_every_method_has_one_name_and_the_registry_holds_the_one_sample_ones():
    assert [m.value for m in Method] == [
        "cluster_ratio",
        "wilson",
        "cluster_bootstrap",
        "fisher_z",
        "iid",
        "paired_t",
        "paired_bootstrap",
    ]
    assert list(stats.ESTIMATORS) == [
        "cluster_ratio",
        "wilson",
        "cluster_bootstrap",
        "fisher_z",
        "iid",
    ]
    assert Method.IID == "iid" and json.dumps({"interval": Method.CLUSTER_RATIO}) == (
        '{"interval": "cluster_ratio"}'
    )
    with pytest.raises(TypeError):
        stats.ESTIMATORS["mine"] = stats.iid  # read-only


def test_legacy_names_read_as_what_they_computed():
    assert stats.read_method("student_t") is Method.IID
    assert stats.read_method("bootstrap_percentile") is Method.CLUSTER_BOOTSTRAP
    assert stats.read_method("bootstrap") is Method.CLUSTER_BOOTSTRAP
    assert stats.read_method("student_t_paired") is Method.PAIRED_T
    assert stats.read_method("wilson") is Method.WILSON
    assert stats.read_method("cluster_ratio") is Method.CLUSTER_RATIO
    with pytest.raises(ValueError, match=r"^interval method: expected one of \['cluster_ratio'"):
        stats.read_method("normal")
    with pytest.raises(ValueError, match=r"got 'normal'$"):
        stats.estimate("normal", [1.0, 2.0], [0, 1])


def test_a_plain_interval_is_still_three_numbers():
    assert stats.Interval(2.0, 1.5, 2.5) == stats.Interval(2.0, 1.5, 2.5, method="")
    assert stats.Interval(2.0, 1.5, 2.5).n_units is None


# ---- cluster_ratio -------------------------------------------------------------------------


def test_ratio_from_sums_hand_computed():
    # r = 6/6 = 1, u = [1, -1, 0], se = sqrt(3/2 * 2) / 6, t_{.975, 2}
    iv = stats.ratio_from_sums([3.0, 1.0, 2.0], [2.0, 2.0, 2.0])
    se = math.sqrt(1.5 * 2.0) / 6.0
    assert (iv.value, iv.se, iv.n_units, iv.df) == (1.0, pytest.approx(se, abs=1e-15), 3, 2)
    assert (iv.lo, iv.hi) == pytest.approx((1 - T_975_2 * se, 1 + T_975_2 * se), abs=1e-12)
    assert (iv.lo, iv.hi) == pytest.approx((-0.2421, 2.2421), abs=1e-4)  # the docstring's
    assert iv.method == "cluster_ratio" and iv.warning.startswith("only 3 units")


def test_ratio_from_sums_unequal_units_by_a_loop():
    S = [10.0, 3.0, 7.5, 1.0, 4.0]
    N = [8.0, 2.0, 5.0, 1.0, 6.0]
    r = sum(S) / sum(N)
    u2 = sum((s - r * n) ** 2 for s, n in zip(S, N, strict=True))
    se = math.sqrt(5 / 4 * u2) / sum(N)
    t = sps.t.ppf(0.975, 4)
    iv = stats.ratio_from_sums(S, N)
    assert iv.value == pytest.approx(r, abs=1e-15) and iv.se == pytest.approx(se, abs=1e-15)
    assert (iv.lo, iv.hi) == pytest.approx((r - t * se, r + t * se), abs=1e-13)


def test_cluster_ratio_of_equal_sized_units_is_the_t_interval_of_the_unit_means():
    # u_g = n (m_g - r): the CR1 standard error is the standard error of the G unit means
    rng = np.random.default_rng(5)
    x = rng.gamma(2.0, 1.0, size=(13, 7))  # 13 units of 7 items
    ids = np.repeat(np.arange(13), 7)
    iv = stats.cluster_ratio(x.reshape(-1), ids)
    m = x.mean(axis=1)
    lo, hi = sps.t.interval(0.95, df=12, loc=m.mean(), scale=sps.sem(m))
    assert (iv.value, iv.lo, iv.hi) == pytest.approx((m.mean(), lo, hi), abs=1e-12)
    assert iv.warning == "" and iv.df == 12


def test_cluster_ratio_of_one_item_units_is_the_t_interval_of_the_items():
    x = np.random.default_rng(1).gamma(2.0, 1.5, size=137)
    iv = stats.cluster_ratio(x, np.arange(x.size))
    lo, hi = sps.t.interval(0.95, df=136, loc=x.mean(), scale=sps.sem(x))
    assert (iv.lo, iv.hi) == pytest.approx((lo, hi), abs=1e-12)
    ref = stats.iid(x)
    assert (ref.lo, ref.hi, ref.se) == pytest.approx((lo, hi, sps.sem(x)), abs=1e-12)
    assert ref.method == "iid" and (ref.n_units, ref.df) == (137, 136)


def test_cluster_ratio_docstring_example_and_units_in_any_order():
    iv = stats.cluster_ratio([1.0, 2.0, 0.5, 0.5, 1.0, 1.0], list("aabbcc"))
    shuffled = stats.cluster_ratio([1.0, 0.5, 1.0, 2.0, 0.5, 1.0], list("abcabc"))
    assert (iv.lo, iv.hi) == pytest.approx((-0.2420689, 2.2420689), abs=1e-7)
    assert (shuffled.value, shuffled.lo, shuffled.hi) == pytest.approx((iv.value, iv.lo, iv.hi))


def test_clustered_items_widen_the_interval_over_the_iid_one():
    # strongly clustered: each document has its own level, tokens scatter little around it
    rng = np.random.default_rng(3)
    levels = rng.normal(3.0, 1.0, size=20)
    x = np.repeat(levels, 50) + rng.normal(0, 0.1, size=1000)
    ids = np.repeat(np.arange(20), 50)
    clustered, token = stats.cluster_ratio(x, ids), stats.iid(x, ids)
    assert clustered.value == pytest.approx(token.value, abs=1e-12)
    assert (clustered.hi - clustered.lo) / (token.hi - token.lo) > 5


def test_weights_give_a_ratio_per_byte():
    # two documents: NLLs [1, 3] over tokens of 1 and 3 bytes, [2, 2] over 2 and 2 bytes
    iv = stats.cluster_ratio([1.0, 3.0, 2.0, 2.0], [0, 0, 1, 1], weights=[1, 3, 2, 2])
    assert iv.value == pytest.approx(8 / 8)
    # S = [4, 4], N = [4, 4]: every unit has ratio 1, zero width
    assert iv.lo == iv.hi == iv.value and iv.se == 0.0
    with pytest.raises(ValueError, match=r"^weights: expected one per item \(4\), got 3"):
        stats.cluster_ratio([1.0, 3.0, 2.0, 2.0], [0, 0, 1, 1], weights=[1, 3, 2])


def test_units_with_equal_ratios_give_zero_width():
    iv = stats.cluster_ratio([1.0, 3.0, 2.0, 2.0, 0.0, 4.0], [0, 0, 1, 1, 2, 2])
    assert iv.value == 2.0 and iv.lo == iv.hi == 2.0 and iv.se == 0.0


def test_uniform_bytes_are_8_bits_per_byte_with_zero_width_and_ppl_256():
    nll = stats.cluster_ratio(np.full(60, math.log(256)), np.repeat(np.arange(12), 5))
    assert stats.bpb_interval(nll, 60) == stats.Interval(
        8.0, 8.0, 8.0, Method.CLUSTER_RATIO, 12, 11, 0.0, ""
    )
    ppl = stats.ppl_interval(nll)
    assert (ppl.value, ppl.lo, ppl.hi, ppl.se) == pytest.approx((256.0, 256.0, 256.0, None))


def test_ppl_and_bpb_ends_are_the_nll_ends_transformed():
    nll = stats.Interval(math.log(4), math.log(2), math.log(8), Method.CLUSTER_RATIO, 30, 29, 0.1)
    ppl = stats.ppl_interval(nll)
    assert (ppl.value, ppl.lo, ppl.hi) == pytest.approx((4.0, 2.0, 8.0), abs=1e-12)
    assert ppl.se is None and ppl.method == "cluster_ratio" and ppl.n_units == 30
    # 100 tokens over 250 bytes: bits per byte = nats per token * 100 / (250 ln 2)
    bpb = stats.bpb_interval(nll, 100, 250)
    f = 100 / (250 * math.log(2))
    assert (bpb.value, bpb.lo, bpb.hi, bpb.se) == pytest.approx(
        (math.log(4) * f, math.log(2) * f, math.log(8) * f, 0.1 * f), abs=1e-12
    )
    with pytest.raises(ValueError, match=r"^n_tokens: expected an integer >= 1, got 0"):
        stats.bpb_interval(nll, 0)
    with pytest.raises(ValueError, match=r"^factor: expected a finite number > 0"):
        stats.scale_interval(nll, -1.0)


def test_ratio_refusals():
    with pytest.raises(ValueError, match=r"^S: expected at least 2 values, got 1"):
        stats.ratio_from_sums([1.0], [1.0])
    with pytest.raises(ValueError, match=r"expected S and N with one value per unit, got 2 and 3"):
        stats.ratio_from_sums([1.0, 2.0], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"^N: expected denominators >= 0 with a positive"):
        stats.ratio_from_sums([1.0, 2.0], [0.0, 0.0])
    with pytest.raises(ValueError, match=r"^units: expected one unit id per item \(3\), got 2"):
        stats.cluster_ratio([1.0, 2.0, 3.0], [0, 1])
    with pytest.raises(ValueError, match=r"^units: expected at least 2 units"):
        stats.cluster_ratio([1.0, 2.0, 3.0], [4, 4, 4])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.floats(0, 10, allow_nan=False)), min_size=3, max_size=40
    ),
    st.randoms(use_true_random=False),
)
def test_cluster_ratio_depends_on_units_not_on_item_order_or_unit_names(pairs, random):
    ids = [u for u, _ in pairs]
    if len(set(ids)) < 2:
        return
    x = [v for _, v in pairs]
    iv = stats.cluster_ratio(x, ids)
    order = list(range(len(x)))
    random.shuffle(order)
    renamed = stats.cluster_ratio([x[i] for i in order], [f"doc{ids[i] * 7}" for i in order])
    assert (renamed.value, renamed.lo, renamed.hi) == pytest.approx(
        (iv.value, iv.lo, iv.hi), abs=1e-9
    )
    assert iv.lo <= iv.value <= iv.hi
    scaled = stats.cluster_ratio([3 * v for v in x], ids)
    assert (scaled.lo, scaled.hi) == pytest.approx((3 * iv.lo, 3 * iv.hi), abs=1e-9)


# ---- cluster_bootstrap -----------------------------------------------------------------------


def test_cluster_bootstrap_of_one_item_units_is_the_item_bootstrap():
    x = np.random.default_rng(2).integers(0, 2, size=80).astype(float)
    ours = stats.cluster_bootstrap(x, np.arange(80), np.random.default_rng(7), n_boot=2000)
    ref = stats.bootstrap_ci(x, np.random.default_rng(7), n_boot=2000)
    assert (ours.value, ours.lo, ours.hi) == (ref.value, ref.lo, ref.hi)
    assert ours.method == "cluster_bootstrap" and (ours.n_units, ours.df) == (80, 79)


def test_cluster_bootstrap_resamples_whole_units_by_hand():
    x = np.array([0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    ids = np.array([0, 0, 1, 1, 2, 2, 2])
    ours = stats.cluster_bootstrap(x, ids, np.random.default_rng(3), n_boot=400)
    draws = np.random.default_rng(3).integers(0, 3, size=(400, 3))
    S, N = np.array([1.0, 2.0, 1.0]), np.array([2.0, 2.0, 3.0])
    boot = S[draws].sum(axis=1) / N[draws].sum(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    assert ours.value == pytest.approx(4 / 7)
    assert (ours.lo, ours.hi, ours.se) == pytest.approx((lo, hi, np.std(boot, ddof=1)), abs=1e-12)
    # any statistic: the same draws gather the same items
    general = stats.cluster_bootstrap(
        x, ids, np.random.default_rng(3), n_boot=400, statistic=np.mean
    )
    assert (general.lo, general.hi) == pytest.approx((lo, hi), abs=1e-12)


def test_cluster_bootstrap_of_rows_with_a_spearman_statistic():
    rng = np.random.default_rng(4)
    h = rng.normal(size=60)
    rows = np.column_stack([h + rng.normal(size=60), h])
    ids = np.repeat(np.arange(20), 3)

    def rho(r):
        return sps.spearmanr(r[:, 0], r[:, 1]).statistic

    iv = stats.cluster_bootstrap(rows, ids, np.random.default_rng(0), statistic=rho, n_boot=300)
    assert iv.value == pytest.approx(rho(rows)) and iv.lo < iv.value < iv.hi
    with pytest.raises(ValueError, match=r"^items: the mean needs \[n\] values"):
        stats.cluster_bootstrap(rows, ids, np.random.default_rng(0))


def test_cluster_bootstrap_uses_the_callers_rng_and_refuses_nan_statistics():
    x = np.random.default_rng(4).normal(size=60)
    ids = np.repeat(np.arange(15), 4)
    a = stats.cluster_bootstrap(x, ids, np.random.default_rng(11))
    b = stats.cluster_bootstrap(x, ids, np.random.default_rng(11))
    c = stats.cluster_bootstrap(x, ids, np.random.default_rng(12))
    assert (a.lo, a.hi) == (b.lo, b.hi) != (c.lo, c.hi)
    with pytest.raises(TypeError, match=r"^rng: expected a numpy.random.Generator, got NoneType"):
        stats.cluster_bootstrap(x, ids, None)
    with pytest.raises(ValueError, match=r"expected a finite statistic on every resample"):
        stats.cluster_bootstrap(x, ids, np.random.default_rng(0), statistic=lambda v: np.nan)
    same = stats.cluster_bootstrap(np.ones(8), [0, 0, 1, 1, 2, 2, 3, 3], np.random.default_rng(0))
    assert same.lo == same.hi == same.value == 1.0


# ---- wilson, fisher_z, iid through the registry ------------------------------------------


def test_wilson_needs_one_01_item_per_unit():
    iv = stats.estimate("wilson", [1] * 8 + [0, 0], range(10))
    assert (iv.value, iv.lo, iv.hi) == pytest.approx((0.8, 0.4902, 0.9433), abs=1e-4)
    assert (iv.method, iv.n_units, iv.df) == ("wilson", 10, None)
    assert iv.se == pytest.approx(math.sqrt(0.8 * 0.2 / 10))
    with pytest.raises(ValueError, match=r"^wilson: expected one 0/1 item per unit, got unit 0 "):
        stats.wilson([1, 0, 1], [0, 0, 1])
    with pytest.raises(ValueError, match=r"^wilson: expected 0/1 items, got 0.5 at index 1"):
        stats.wilson([1, 0.5], [0, 1])


def test_fisher_z_over_pairs_is_spearman_ci():
    rng = np.random.default_rng(8)
    x = rng.normal(size=30)
    y = x + rng.normal(size=30)
    iv = stats.estimate("fisher_z", np.column_stack([x, y]), range(30))
    ref = stats.spearman_ci(x, y)
    assert (iv.value, iv.lo, iv.hi) == (ref.value, ref.lo, ref.hi)
    assert (iv.method, iv.n_units, iv.se) == ("fisher_z", 30, None)
    with pytest.raises(ValueError, match=r"^fisher_z: expected one pair per unit, got 30 pairs"):
        stats.fisher_z(np.column_stack([x, y]), np.repeat(np.arange(10), 3))
    with pytest.raises(ValueError, match=r"^fisher_z: expected \[n, 2\]"):
        stats.fisher_z(x, range(30))


def test_iid_checks_units_belong_to_the_items_and_is_zero_width_when_equal():
    assert stats.iid([2.0] * 5) == stats.Interval(2.0, 2.0, 2.0, Method.IID, 5, 4, 0.0)
    with pytest.raises(ValueError, match=r"^units: expected one unit id per item \(3\), got 2"):
        stats.iid([1.0, 2.0, 3.0], [0, 1])


def test_every_registered_estimator_takes_items_units_rng():
    rng = np.random.default_rng(0)
    x = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    pairs = np.column_stack([np.arange(12.0), np.arange(12.0) ** 2])
    for name, fn in stats.ESTIMATORS.items():
        iv = fn(pairs if name == "fisher_z" else x, np.arange(12), rng)
        assert iv.method == name and iv.lo <= iv.value <= iv.hi and iv.n_units == 12
