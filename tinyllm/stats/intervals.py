"""The plain intervals of one sample (docs/definitions.md, "Intervals"): Student t of a mean,
the percentile bootstrap, Wilson's score interval of a proportion, Fisher z of a correlation.

Each returns a plain :class:`~tinyllm.stats.core.Interval` ``(value, lo, hi)``; the registry
(:mod:`tinyllm.stats.registry`) wraps them with their method and units.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import stats as sps

from tinyllm.stats.core import CONFIDENCE, Interval, check_1d, t_quantile


def mean_ci(x, confidence: float = CONFIDENCE) -> Interval:
    """Student t interval of the mean of ``x``.

    Formula: ``mean ± t_{(1+c)/2, n-1} * s / sqrt(n)`` with ``s`` the sample standard deviation
    (``ddof=1``) and ``c`` the confidence (0.95). The interval is in the units of ``x``; when all
    values are equal ``s = 0`` and the interval has zero width.

    Example: ``mean_ci([1.0, 2.0, 3.0])`` -> value 2.0, ends ``2 ± 4.3027 * 1 / sqrt(3)``
    = (-0.4841, 4.4841).

    Raises ValueError for fewer than 2 values (no spread can be estimated) or non-finite values.
    """
    a = check_1d(x, "x", min_len=2)
    n = a.size
    m = float(np.mean(a))
    s = float(np.std(a, ddof=1))
    half = t_quantile(n, confidence) * s / math.sqrt(n)
    return Interval(m, m - half, m + half)


def bootstrap_ci(
    x,
    rng: np.random.Generator,
    n_boot: int = 1000,
    statistic: Callable[..., np.ndarray] = np.mean,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Percentile bootstrap interval of ``statistic(x)``, drawn from the caller's ``rng``.

    Formula: draw ``n_boot`` resamples of ``x`` with replacement (each of size n), compute the
    statistic on each, and take the ``(1-c)/2`` and ``(1+c)/2`` quantiles of those values as the
    ends. ``value`` is the statistic on ``x`` itself. This is exactly
    ``scipy.stats.bootstrap(method="percentile")``, which does the work; the same rng state
    always gives the same interval.

    ``statistic`` must accept ``axis=`` (numpy reductions do). Units are those of the statistic.

    Example: ``bootstrap_ci([0, 1, 1, 1], np.random.default_rng(0))`` -> value 0.75 and an
    interval inside [0, 1].
    """
    a = check_1d(x, "x", min_len=1)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    if n_boot < 1:
        raise ValueError(f"n_boot: expected >= 1, got {n_boot}")
    value = float(statistic(a, axis=-1))
    if np.all(a == a[0]):
        # every resample is the same sample: a zero-width interval (scipy warns and returns nan)
        return Interval(value, value, value)
    res = sps.bootstrap(
        (a,),
        statistic,
        n_resamples=n_boot,
        confidence_level=confidence,
        method="percentile",
        vectorized=True,
        batch=max(1, min(n_boot, 4_000_000 // a.size)),  # bounds memory at ~32 MB a batch
        rng=rng,
    )
    return Interval(value, float(res.confidence_interval.low), float(res.confidence_interval.high))


def wilson_interval(k: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson score interval of the proportion ``k / n``.

    Formula, with ``p = k/n`` and ``z`` the standard normal ``(1+c)/2`` quantile (1.95996):
    ``(p + z²/2n ± z * sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``. Stays inside [0, 1] and has the
    right coverage for small n and for p near 0 or 1, unlike ``p ± z*sqrt(p(1-p)/n)``.

    Example: ``wilson_interval(8, 10)`` -> value 0.8, interval (0.4902, 0.9433).
    """
    if isinstance(k, bool) or isinstance(n, bool) or int(k) != k or int(n) != n:
        raise ValueError(f"expected integer counts k and n, got k={k!r}, n={n!r}")
    k, n = int(k), int(n)
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"expected 0 <= k <= n and n >= 1, got k={k}, n={n}")
    z = float(sps.norm.ppf(0.5 + confidence / 2.0))
    p = k / n
    denom = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(p, max(0.0, center - half), min(1.0, center + half))


def fisher_z_interval(rho: float, n: int, confidence: float = CONFIDENCE) -> Interval:
    """Fisher z interval of a correlation ``rho`` measured on ``n`` pairs.

    Formula: ``tanh(atanh(rho) ± z / sqrt(n - 3))`` with ``z`` the standard normal
    ``(1+c)/2`` quantile (1.95996 for 95%). Needs n >= 4. ``rho = ±1`` gives a zero-width
    interval at ±1.

    Example: ``fisher_z_interval(0.5, 28)`` -> (0.1560, 0.7358).
    """
    if int(n) != n or n < 4:
        raise ValueError(
            f"n: expected an integer >= 4 (the interval divides by sqrt(n-3)), got {n}"
        )
    if not -1.0 <= rho <= 1.0 or math.isnan(rho):
        raise ValueError(f"rho: expected a correlation in [-1, 1], got {rho}")
    if abs(rho) == 1.0:
        return Interval(float(rho), float(rho), float(rho))
    z = float(sps.norm.ppf(0.5 + confidence / 2.0))
    c = math.atanh(rho)
    half = z / math.sqrt(n - 3)
    return Interval(float(rho), math.tanh(c - half), math.tanh(c + half))


def spearman_ci(x, y, confidence: float = CONFIDENCE) -> Interval:
    """Spearman rank correlation of paired ``x``, ``y`` with its Fisher z interval.

    ``rho`` is ``scipy.stats.spearmanr(x, y)`` (Pearson correlation of the average ranks); the
    interval is :func:`fisher_z_interval` ``(rho, n)``.
    """
    a = check_1d(x, "x", min_len=4)
    b = check_1d(y, "y", min_len=4)
    if a.size != b.size:
        raise ValueError(f"expected x and y of equal length, got {a.size} and {b.size}")
    rho = float(sps.spearmanr(a, b).statistic)
    if math.isnan(rho):
        raise ValueError("spearman: expected x and y that both vary, got a constant input")
    return fisher_z_interval(rho, a.size, confidence)
