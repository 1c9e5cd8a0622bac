"""Intervals over sampling units (docs/definitions.md, "Intervals"): the cluster-robust ratio
estimator for means over positions (mean NLL, bpb, ppl, accuracy over positions) and the
percentile bootstrap that resamples units for any other statistic.

Both take per-item values and :class:`~tinyllm.stats.units.Units` (or unit ids); the spread
they measure is the spread between units, so items inside one unit may be as dependent as they
like (tokens of one document, positions of one row).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from tinyllm.stats.core import (
    CONFIDENCE,
    LN2,
    Interval,
    Method,
    check_1d,
    check_count,
    check_rng,
    t_quantile,
)
from tinyllm.stats.units import Units, as_units, few_units_warning


def ratio_from_sums(
    S, N, confidence: float = CONFIDENCE, *, warning: str | None = None
) -> Interval:
    """Cluster-robust interval of the ratio ``r = sum_g S_g / sum_g N_g`` from per-unit sums.

    ``S_g``: the unit's numerator (its summed NLL in nats, its correct positions), ``N_g``: its
    denominator (its tokens, bytes or positions), G units. Formula (the linearised ratio
    estimator with the CR1 small-sample factor)::

        u_g = S_g - r N_g
        se  = sqrt(G / (G - 1) * sum_g u_g^2) / sum_g N_g
        r ± t_{(1+c)/2, G-1} * se

    Units of ``r`` (nats per token, a proportion). When every unit has the same ratio
    (``u_g = 0``, to 1e-12 of the largest ``|S_g|``) the interval has zero width. ``warning``:
    the row's line (``None``: the fewer-than-10-units warning when G < 10).

    Example: ``S = [3, 1, 2]``, ``N = [2, 2, 2]`` -> ``r = 1``, ``u = [1, -1, 0]``,
    ``se = sqrt(3/2 * 2) / 6 = 0.2887``, ``t_{.975, 2} = 4.3027``: (-0.2421, 2.2421).

    Raises ValueError for fewer than 2 units, lengths that differ, a negative ``N_g`` or a zero
    total.
    """
    s = check_1d(S, "S", min_len=2)
    n = check_1d(N, "N", min_len=2)
    if s.size != n.size:
        raise ValueError(f"expected S and N with one value per unit, got {s.size} and {n.size}")
    if np.any(n < 0) or not n.sum() > 0:
        raise ValueError(f"N: expected denominators >= 0 with a positive total, got sum {n.sum()}")
    g = s.size
    if warning is None:
        warning = few_units_warning(g)
    total_n = math.fsum(n)
    r = math.fsum(s) / total_n
    u = s - r * n
    if np.all(np.abs(u) <= 1e-12 * float(np.abs(s).max())):
        se = 0.0
    else:
        se = math.sqrt(g / (g - 1) * math.fsum(u * u)) / total_n
    half = t_quantile(g, confidence) * se
    return Interval(r, r - half, r + half, Method.CLUSTER_RATIO, g, g - 1, se, warning)


def cluster_ratio(
    items, units, rng=None, *, weights=None, confidence: float = CONFIDENCE
) -> Interval:
    """Cluster-robust interval of a mean over positions: ``sum(items) / sum(weights)``.

    ``items``: per-item values (per-token NLLs in nats, 0/1 per position); ``units``: each
    item's unit (:class:`Units` or ids); ``weights``: each item's share of the denominator (one
    per item by default, so the value is the mean of the items; the UTF-8 bytes of each token
    for nats per byte). ``S_g`` and ``N_g`` are the per-unit sums of ``items`` and ``weights``,
    then :func:`ratio_from_sums`. ``rng`` is not used (the estimator is closed form). The row's
    warning (fewer than 10 units, blocks for units) is carried in ``Interval.warning``.

    Items all equal: ``value`` is that item exactly and the interval has zero width (a bigram
    giving every byte ``1/256``: ``ln 256`` nats, bpb 8 exactly).

    Example: NLLs ``[1, 2, 0.5, 0.5, 1, 1]`` in documents ``[a, a, b, b, c, c]`` ->
    ``S = [3, 1, 2]``, ``N = [2, 2, 2]``: value 1.0, (-0.2421, 2.2421) nats per token.
    """
    x = check_1d(items, "items", min_len=2)
    u = as_units(units, x.size)
    w = np.ones_like(x) if weights is None else check_1d(weights, "weights")
    if w.size != x.size:
        raise ValueError(f"weights: expected one per item ({x.size}), got {w.size}")
    S, N = u.sums(x), u.sums(w, "weights")
    iv = ratio_from_sums(S, N, confidence, warning=u.warning)
    if weights is None and np.all(x == x[0]):
        v = float(x[0])
        return dataclasses.replace(iv, value=v, lo=v, hi=v, se=0.0)
    if weights is None:  # the mean of the items themselves (pairwise summation)
        v = float(np.mean(x))
        return dataclasses.replace(iv, value=v, lo=iv.lo - iv.value + v, hi=iv.hi - iv.value + v)
    return iv


def scale_interval(iv: Interval, factor: float) -> Interval:
    """``iv`` in other units: value, ends and standard error times ``factor`` (> 0)."""
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"factor: expected a finite number > 0, got {factor!r}")
    se = None if iv.se is None else iv.se * factor
    return dataclasses.replace(
        iv, value=iv.value * factor, lo=iv.lo * factor, hi=iv.hi * factor, se=se
    )


def bpb_interval(nll: Interval, n_tokens: int, n_bytes: int = 0) -> Interval:
    """Bits per byte from an interval of the mean NLL in nats per token: value and ends times
    ``n_tokens / (n_bytes ln 2)`` (``n_bytes = 0``: one token is one byte, ``n_bytes = N``).

    ``bpb = sum(l_t) / (n_bytes ln 2) = mean NLL * N / (n_bytes ln 2)``, the rescaling of
    :func:`tinyllm.eval.lm.summarize_nlls`. Example: mean NLL ``ln 256`` over 10 byte tokens ->
    bpb 8.0.
    """
    n = check_count(n_tokens, "n_tokens", 1)
    b = check_count(n_bytes, "n_bytes", 0) or n
    return scale_interval(nll, n / (b * LN2))


def ppl_interval(nll: Interval) -> Interval:
    """Perplexity from an interval of the mean NLL (nats): ``exp`` of value and ends (never in
    log space); the standard error is not carried (``se = None``: it is not one in ppl units).

    Example: mean NLL ``ln 4`` with ends ``ln 2``, ``ln 8`` -> ppl 4 in (2, 8).
    """
    return dataclasses.replace(
        nll, value=math.exp(nll.value), lo=math.exp(nll.lo), hi=math.exp(nll.hi), se=None
    )


def _members(units: Units) -> list[np.ndarray]:
    order = np.argsort(units.index, kind="stable")
    return np.split(order, np.cumsum(units.sizes)[:-1])


def cluster_bootstrap(
    items,
    units,
    rng: np.random.Generator,
    *,
    statistic: Callable[[np.ndarray], float] | None = None,
    n_boot: int = 1000,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Percentile bootstrap interval of a statistic, resampling units (not items).

    Each of ``n_boot`` resamples draws G unit numbers with replacement from ``rng``
    (``rng.integers(0, G, size=(n_boot, G))``, one call), takes every item of each drawn unit
    (a unit drawn twice counts twice) and computes the statistic; the ends are the
    ``(1-c)/2`` and ``(1+c)/2`` quantiles of the ``n_boot`` values (numpy's linear
    interpolation), ``value`` the statistic on all items, ``se`` the standard deviation
    (``ddof=1``) of the resampled values, ``df = G - 1``.

    ``items``: ``[n]`` values, or ``[n, k]`` rows (one row per item, the statistic reads rows:
    ``(model score, human score)`` pairs, indices into the caller's arrays);
    ``statistic(x) -> float`` of the resampled items; ``None`` is the mean of ``[n]`` items
    (the ratio of the drawn units' sums, computed without gathering items). With one item per
    unit and the mean, the draws and ends are those of :func:`tinyllm.stats.bootstrap_ci`.

    Example: items ``[0, 1, 1, 1]`` in units ``[0, 0, 1, 1]`` -> value 0.75; every resample is
    two of the unit means 0.5 and 1.0, so the ends lie in {0.5, 0.75, 1.0}.

    Raises ValueError for resampled statistics that are not finite.
    """
    rng = check_rng(rng)
    n_boot = check_count(n_boot, "n_boot", 1)
    x = np.asarray(items, dtype=np.float64)
    if x.ndim not in (1, 2) or x.shape[0] < 1:
        raise ValueError(f"items: expected [n] values or [n, k] rows, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("items: expected finite values, got inf or nan")
    u = as_units(units, x.shape[0])
    g = u.n_units
    draws = rng.integers(0, g, size=(n_boot, g))
    if statistic is None:
        if x.ndim != 1:
            raise ValueError(f"items: the mean needs [n] values, got shape {x.shape}")
        S, N = u.sums(x), u.sizes.astype(np.float64)
        value = float(np.mean(x))
        boot = S[draws].sum(axis=1) / N[draws].sum(axis=1)
    else:
        value = float(statistic(x))
        members = _members(u)
        boot = np.array(
            [float(statistic(x[np.concatenate([members[j] for j in d])])) for d in draws]
        )
    if not np.all(np.isfinite(boot)):
        raise ValueError(
            f"cluster bootstrap: expected a finite statistic on every resample of the {g} units, "
            f"got {int(np.count_nonzero(~np.isfinite(boot)))} of {n_boot} that are not"
        )
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    if np.all(boot == boot[0]):
        lo = hi = boot[0]
    se = float(np.std(boot, ddof=1)) if n_boot > 1 else 0.0
    return Interval(value, float(lo), float(hi), Method.CLUSTER_BOOTSTRAP, g, g - 1, se, u.warning)
