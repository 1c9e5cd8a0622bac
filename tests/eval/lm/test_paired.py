"""tinyllm/eval/lm/paired.py: compare, the paired comparison of docs/definitions.md ("Paired
tests") over units, against tinyllm.stats.paired_permutation_test, exact sign-flip counts and
scipy's paired t test.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from tinyllm import stats
from tinyllm.eval import lm


def _result(per_item, units=None) -> lm.Result:
    x = np.asarray(per_item, dtype=np.float64)
    u = None if units is None else np.asarray(units, dtype=np.int64)
    return lm.Result(float(x.mean()), 0.0, 1.0, x.size, x, units=u)


def test_compare_is_the_paired_permutation_test_when_each_item_is_its_unit():
    a = _result([1] * 6 + [0] * 6)
    b = _result([0] * 5 + [1] + [0] * 6)
    # five paired differences of +1: exact, 2 of the 2**5 sign patterns reach |sum| = 5
    got = lm.compare(a, b)
    assert got.p == pytest.approx(2 / 32) and got.exact
    assert got.delta == pytest.approx(5 / 12) and got.n_units == 12
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    x = _result(np.random.default_rng(0).integers(0, 2, 200))
    y = _result(np.random.default_rng(1).integers(0, 2, 200))
    want = stats.paired_permutation_test(x.per_item, y.per_item, n_perm=500, rng=rng_b)
    assert lm.compare(x, y, n_perm=500, rng=rng_a).p == want


def test_compare_interval_is_scipys_paired_t_on_items():
    x = np.random.default_rng(0).integers(0, 2, 60).astype(float)
    y = np.random.default_rng(1).integers(0, 2, 60).astype(float)
    got = lm.compare(x, y)
    ci = sps.ttest_rel(x, y).confidence_interval(0.95)
    assert (got.lo, got.hi) == pytest.approx((ci.low, ci.high), rel=1e-12)


def test_compare_pairs_over_the_results_units():
    # 6 units of 4 items: A right on the first 3 units, B on the last 3; over units there are
    # 6 differences of +-4 (exact test: every one of 2**6 patterns), not 24 item differences
    units = np.repeat(np.arange(6), 4)
    a = _result([1] * 12 + [0] * 12, units)
    b = _result([0] * 12 + [1] * 12, units)
    got = lm.compare(a, b)
    assert got.n_units == 6 and got.n_items == 24 and got.exact
    assert got.delta == 0.0 and got.p == 1.0
    a2 = _result([1] * 16 + [0] * 8, units)
    got2 = lm.compare(a2, _result([0] * 24, units))
    # D_g = 4 on units 0..3, 0 on 4, 5: |sum| = 16 is reached by 2 of the 16 sign patterns of
    # the four nonzero units (times the 4 of the zero ones): p = 8/64
    assert got2.p == pytest.approx(8 / 64) and got2.delta == pytest.approx(16 / 24)
    item_level = lm.compare(a2.per_item, np.zeros(24))
    assert item_level.hi - item_level.lo < got2.hi - got2.lo  # the clustered interval is wider


def test_compare_refuses_mismatched_items_and_units():
    with pytest.raises(ValueError, match="same items"):
        lm.compare(_result([1, 0, 1]), _result([1, 0]))
    with pytest.raises(ValueError, match="same units"):
        lm.compare(_result([1, 0, 1, 0], [0, 0, 1, 1]), _result([1, 0, 1, 0], [0, 1, 1, 1]))
    with pytest.raises(ValueError, match="same units"):
        lm.compare(_result([1, 0, 1, 0], [0, 0, 1, 1]), _result([1, 0, 1, 0]))


def test_compare_default_is_10000_sign_flips():
    a = _result([1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1])  # 2**16 > 10 000: sampled
    b = _result([0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1])
    got = lm.compare(a, b, rng=np.random.default_rng(3))
    want = stats.paired_permutation_test(
        a.per_item, b.per_item, n_perm=10_000, rng=np.random.default_rng(3)
    )
    assert got.p == want and not got.exact


def test_compare_names_the_argument_that_is_neither_a_result_nor_scores():
    r = _result([1, 0])
    assert lm.compare([1, 0], r).delta == 0.0  # plain per-item scores are accepted
    with pytest.raises(TypeError) as e:
        lm.compare(r, None)
    assert str(e.value) == "b: expected a Result or a 1-d array of per-item scores, got NoneType"
    with pytest.raises(TypeError) as e:
        lm.compare(np.zeros((2, 2)), r)
    assert str(e.value) == "a: expected a Result or a 1-d array of per-item scores, got ndarray"
