"""tinyllm/eval/lm/paired.py: compare, the paired permutation test of SPEC.md section 5, against
tinyllm.stats.paired_permutation_test and exact sign-flip counts.
"""

from __future__ import annotations

import numpy as np
import pytest

from tinyllm import stats
from tinyllm.eval import lm


def _result(per_item) -> lm.Result:
    x = np.asarray(per_item, dtype=np.float64)
    return lm.Result(float(x.mean()), 0.0, 1.0, x.size, x)


def test_compare_is_the_paired_permutation_test():
    a = _result([1] * 6 + [0] * 6)
    b = _result([0] * 5 + [1] + [0] * 6)
    # five paired differences of +1: exact, 2 of the 2**5 sign patterns reach |sum| = 5
    assert lm.compare(a, b) == pytest.approx(2 / 32)
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    x = _result(np.random.default_rng(0).integers(0, 2, 200))
    y = _result(np.random.default_rng(1).integers(0, 2, 200))
    want = stats.paired_permutation_test(x.per_item, y.per_item, n_perm=500, rng=rng_b)
    assert lm.compare(x, y, n_perm=500, rng=rng_a) == want


def test_compare_refuses_mismatched_items():
    with pytest.raises(ValueError, match="same items"):
        lm.compare(_result([1, 0, 1]), _result([1, 0]))


def test_compare_default_is_10000_sign_flips():
    a = _result([1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1])  # 2**16 > 10 000: sampled
    b = _result([0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1])
    got = lm.compare(a, b, rng=np.random.default_rng(3))
    want = stats.paired_permutation_test(
        a.per_item, b.per_item, n_perm=10_000, rng=np.random.default_rng(3)
    )
    assert got == want


def test_compare_names_the_argument_that_is_not_a_result():
    r = _result([1, 0])
    with pytest.raises(TypeError) as e:
        lm.compare([1, 0], r)
    assert str(e.value) == "a: expected a Result, got list"
    with pytest.raises(TypeError) as e:
        lm.compare(r, None)
    assert str(e.value) == "b: expected a Result, got NoneType"
