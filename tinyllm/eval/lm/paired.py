"""Paired comparison of two runs on the same items (SPEC.md section 5)."""

from __future__ import annotations

import numpy as np

from tinyllm import stats
from tinyllm.eval.lm.tasks import Result


def compare(
    a: Result, b: Result, n_perm: int = 10_000, rng: np.random.Generator | None = None
) -> float:
    """p-value of "A and B differ" on the same items: a paired sign-flip permutation test.

    With ``d_i = a.per_item[i] - b.per_item[i]``, the statistic is ``|sum d_i|`` and its null
    distribution comes from random sign flips of the ``d_i``
    (:func:`tinyllm.stats.paired_permutation_test`, exact when ``2**n <= n_perm``). Item i of
    ``a`` and item i of ``b`` must be the same item.

    Example: four items all right for A and all wrong for B -> exact p = 2/16 = 0.125.

    Raises ValueError (from the stats test) when the two results have different numbers of
    items: unpaired results cannot be compared this way.
    """
    for name, r in (("a", a), ("b", b)):
        if not isinstance(r, Result):
            raise TypeError(f"{name}: expected a Result, got {type(r).__name__}")
    return stats.paired_permutation_test(a.per_item, b.per_item, n_perm=n_perm, rng=rng)
