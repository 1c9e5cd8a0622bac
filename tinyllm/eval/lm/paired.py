"""Paired comparison of two runs on the same items, over their sampling units
(docs/definitions.md, "Paired tests")."""

from __future__ import annotations

import numpy as np

from tinyllm import stats
from tinyllm.eval.lm.tasks import Result


def _scores(r, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """``(per-item scores, unit ids or None)`` of a :class:`Result` or a 1-d array of scores."""
    if isinstance(r, Result):
        return np.asarray(r.per_item, dtype=np.float64), r.units
    if isinstance(r, (np.ndarray, list, tuple)):
        x = np.asarray(r, dtype=np.float64)
        if x.ndim == 1:
            return x, None
    raise TypeError(
        f"{name}: expected a Result or a 1-d array of per-item scores, got {type(r).__name__}"
    )


def compare(
    a,
    b,
    n_perm: int = 10_000,
    rng: np.random.Generator | None = None,
    *,
    units=None,
) -> stats.PairedDifference:
    """Is A better than B on the same items? ``value(a) - value(b)`` over units, with its 95%
    interval, the sign-flip permutation p and the minimum detectable difference.

    ``a``, ``b``: two :class:`Result` of one task file (item i the same item in both), or two
    1-d arrays of per-item scores (0/1 accuracies, per-token NLLs in nats). The units are the
    results' own (``Result.units``, the task's ``cluster`` field; they must group the items
    the same way in both), else ``units`` (one id per item), else each item its own unit.
    The value is the mean over items, a ratio over positions when units hold several items:
    :func:`tinyllm.stats.paired_difference` with ``kind="ratio"`` -- per unit g, ``D_g =
    S^A_g - S^B_g``, ``delta = sum D_g / n``, the t interval from the linearised residuals with
    G - 1 df, p the sign-flip test on the ``D_g`` (exact when ``2**G <= n_perm``, else
    ``n_perm`` patterns from ``rng``; default ``numpy.random.default_rng(0)``), ``mde`` at 80%
    power. With each item its own unit this is the item-level paired t interval and sign-flip
    test.

    Example: four items all right for A and all wrong for B -> delta 1.0, exact p = 2/16 = 0.125.

    Raises ValueError when the two sides have different numbers of items or different units:
    unpaired results cannot be compared this way.
    """
    x, ux = _scores(a, "a")
    y, uy = _scores(b, "b")
    if x.size != y.size:
        raise ValueError(
            f"expected the same items on both sides, got {x.size} items in a and {y.size} in b"
        )
    if ux is not None or uy is not None:
        if ux is None or uy is None or not np.array_equal(ux, uy):
            raise ValueError("expected the same units on both sides, got units that differ")
        if units is not None:
            raise ValueError("expected units from the results or from units=, got both")
        units = ux
    if units is None:
        units = np.arange(x.size)
    if rng is None:
        rng = np.random.default_rng(0)
    return stats.paired_difference(x, y, units, rng, kind="ratio", n_perm=n_perm)
