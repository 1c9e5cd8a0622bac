"""Two rank correlations on the same items (compare's Spearman rows; docs/definitions.md,
"Paired tests"): batched Spearman, the difference of two correlations with a paired bootstrap
interval and a paired swap permutation test.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from tinyllm.stats.core import CONFIDENCE, Interval, check_1d
from tinyllm.stats.units import as_units


def spearman_along(x, y) -> np.ndarray:
    """Spearman's rho of ``x`` and ``y`` along their last axis (batched; broadcasting).

    Formula: the Pearson correlation of the average ranks (``scipy.stats.rankdata``, ties share
    their mean rank) of each row, ``sum(rx' ry') / sqrt(sum(rx'^2) sum(ry'^2))`` with ``r'`` the
    centred ranks: what ``scipy.stats.spearmanr`` gives for one row (to rounding). A row where
    either input is constant has no correlation: NaN. Unitless, in [-1, 1].

    Example: ``spearman_along([[1, 2, 3], [3, 2, 1]], [1, 2, 3])`` -> ``[1.0, -1.0]``.
    """
    rx = sps.rankdata(np.asarray(x, dtype=np.float64), axis=-1)
    ry = sps.rankdata(np.asarray(y, dtype=np.float64), axis=-1)
    rx, ry = np.broadcast_arrays(rx, ry)
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    den = np.sqrt((rx * rx).sum(axis=-1) * (ry * ry).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (rx * ry).sum(axis=-1) / den
    return np.where(den > 0, np.clip(out, -1.0, 1.0), np.nan)


def spearman_difference(x, y, h, axis: int = -1) -> np.ndarray:
    """``rho(x, h) - rho(y, h)`` along ``axis`` (:func:`spearman_along`): how much better the
    scores ``x`` rank the items by the reference ``h`` than the scores ``y`` do. Batched, so it
    is a vectorized statistic for ``scipy.stats.bootstrap``.

    Example: ``spearman_difference([1, 2, 3, 4], [4, 3, 2, 1], [1, 2, 3, 4])`` -> 2.0.
    """
    x, y, h = (np.moveaxis(np.asarray(a, dtype=np.float64), axis, -1) for a in (x, y, h))
    return spearman_along(x, h) - spearman_along(y, h)


def _check_three(x, y, h, min_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, b, c = check_1d(x, "x", min_len), check_1d(y, "y", min_len), check_1d(h, "h", min_len)
    if not a.size == b.size == c.size:
        raise ValueError(
            f"paired correlations: expected x, y and h scored on the same items (equal "
            f"length), got {a.size}, {b.size} and {c.size}"
        )
    for arr, name in ((a, "x"), (b, "y"), (c, "h")):
        if np.all(arr == arr[0]):
            raise ValueError(f"{name}: expected scores that vary, got a constant input")
    return a, b, c


def spearman_difference_ci(
    x, y, h, rng: np.random.Generator, n_boot: int = 10_000, confidence: float = CONFIDENCE
) -> Interval:
    """Paired percentile bootstrap interval of ``rho(x, h) - rho(y, h)`` over items.

    ``x`` and ``y``: two models' scores of the same n items (item i in both), ``h``: the
    reference scores (human judgements). Formula: draw ``n_boot`` resamples of the n item
    indices with replacement from ``rng``; each resample takes the SAME items from x, y and h
    and gives ``rho(x*, h*) - rho(y*, h*)`` (:func:`spearman_difference`); the ends are the
    ``(1-c)/2`` and ``(1+c)/2`` quantiles of those differences, ``value`` the difference on the
    items themselves. This is ``scipy.stats.bootstrap((x, y, h), paired=True,
    method="percentile")``, which does the work. Unitless (a difference of correlations, in
    [-2, 2]). When ``x`` and ``y`` are equal every resample gives 0: a zero-width interval at 0.

    Needs n >= 4 and inputs that vary (ValueError otherwise); a resample in which a model's
    scores or ``h`` are constant has no correlation, so an interval that comes out NaN (only
    possible for a handful of items) is a ValueError.

    Example: ``x = h = [1, ..., 10]`` and ``y`` the same with its first two items swapped ->
    value ``1 - 0.98788 = 0.01212``; with ``default_rng(0)`` the interval is (0.0, 0.1307).
    """
    a, b, c = _check_three(x, y, h, 4)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot: expected an integer >= 1, got {n_boot!r}")
    value = float(spearman_difference(a, b, c))
    if np.array_equal(a, b):
        return Interval(value, value, value)
    res = sps.bootstrap(
        (a, b, c),
        spearman_difference,
        n_resamples=n_boot,
        confidence_level=confidence,
        method="percentile",
        paired=True,
        vectorized=True,
        batch=max(1, min(n_boot, 1_000_000 // a.size)),  # bounds memory at ~100 MB a batch
        rng=rng,
    )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(
            f"bootstrap: expected a finite interval, got [{lo}, {hi}] (resamples of the {a.size} "
            "items with constant scores have no correlation)"
        )
    return Interval(value, lo, hi)


def spearman_difference_test(
    x, y, h, n_perm: int = 10_000, rng: np.random.Generator | None = None, *, units=None
) -> float:
    """Two-sided paired permutation test of "x and y correlate equally with h"; the p-value.

    ``x``, ``y``: two models' scores of the same n items, ``h``: the reference. The statistic is
    ``T = |rho(x, h) - rho(y, h)|`` (:func:`spearman_difference`). Under "no difference" the two
    models' standardized scores of an item are exchangeable, so the null distribution swaps them
    item by item (Deutsch, Dror & Roth 2021, "A Statistical Analysis of Summarization Evaluation
    Metrics using Resampling Methods", PERM-BOTH, here with one level of items): each model's
    scores are replaced by their within-model ranks (ranks put the two on one scale, and rho only
    sees ranks), item i's two ranks are swapped with probability 1/2, and ``T_s`` is the
    statistic of the swapped rank vectors (re-ranked, ties averaged).

    ``units`` (:class:`~tinyllm.stats.units.Units` or ids, ``None``: each item its own unit):
    the swap is drawn per unit, so all items of a unit swap together, over G units instead of n
    items; with one item per unit the draws and p are those of ``units=None``.

    p-value convention, as :func:`paired_permutation_test`: all ``2**G`` swap patterns when
    ``2**G <= n_perm`` (G <= 20), ``p = #{T_s >= T} / 2**G``; otherwise ``n_perm`` random
    patterns from ``rng`` and ``p = (1 + #{T_s >= T}) / (n_perm + 1)``. ``T_s >= T`` has a
    tolerance of 1e-9 (floating-point noise decides no tie). Equal rankings give p = 1.

    Example: n = 4, ``h = x = [1, 2, 3, 4]``, ``y = [4, 3, 2, 1]`` -> T = 2; only the two
    patterns that swap all items or none reach it: exact p = 2/16 = 0.125.

    Needs n >= 4 and inputs that vary (ValueError otherwise).
    """
    a, b, c = _check_three(x, y, h, 4)
    if isinstance(n_perm, bool) or not isinstance(n_perm, int) or n_perm < 1:
        raise ValueError(f"n_perm: expected an integer >= 1, got {n_perm!r}")
    ra, rb = sps.rankdata(a), sps.rankdata(b)  # within-model ranks: the standardized scores
    n = a.size
    u = None if units is None else as_units(units, n)
    g = n if u is None else u.n_units
    observed = abs(float(spearman_difference(ra, rb, c)))
    tol = 1e-9
    if np.array_equal(ra, rb) or observed <= tol:
        return 1.0

    def null(swap: np.ndarray) -> np.ndarray:  # swap [m, G] bool -> |T_s| [m]
        if u is not None:
            swap = swap[:, u.index]  # each item swaps with its unit: [m, n]
        xs, ys = np.where(swap, rb, ra), np.where(swap, ra, rb)
        return np.abs(spearman_difference(xs, ys, c))

    if g <= 20 and 2**g <= n_perm:
        codes = np.arange(2**g, dtype=np.int64)[:, None]
        count = 0
        for start in range(0, 2**g, 65_536):  # [2**G, G] patterns, 65,536 at a time
            swap = ((codes[start : start + 65_536] >> np.arange(g)) & 1).astype(bool)
            count += int(np.count_nonzero(null(swap) >= observed - tol))
        return count / 2**g
    if rng is None:
        rng = np.random.default_rng()
    count, done = 0, 0
    batch = max(1, min(n_perm, 1_000_000 // n))  # bounds memory at ~100 MB a batch
    while done < n_perm:
        m = min(batch, n_perm - done)
        swap = rng.random((m, g)) < 0.5
        count += int(np.count_nonzero(null(swap) >= observed - tol))
        done += m
    return (1.0 + count) / (n_perm + 1.0)
