"""The estimator registry: one mapping from an interval method's name to its estimator
(docs/definitions.md, "Intervals").

Every estimator has the signature ``(items, units, rng) -> Interval`` and fills in the
interval's ``method``, ``n_units``, ``df``, ``se`` and ``warning``:

========================  =====================================================================
name                      estimator
========================  =====================================================================
``cluster_ratio``         :func:`~tinyllm.stats.cluster.cluster_ratio` (mean NLL, bpb, ppl,
                          accuracy over positions)
``wilson``                :func:`wilson` (every unit one 0/1 item)
``cluster_bootstrap``     :func:`~tinyllm.stats.cluster.cluster_bootstrap` (any other statistic;
                          the mean by default)
``fisher_z``              :func:`fisher_z` (Spearman over pairs)
``iid``                   :func:`iid` (Student t over items: the token-level reference)
========================  =====================================================================

Adding an estimator: its function (here or in a module of its own below this one), its name in
:class:`~tinyllm.stats.core.Method`, its line in :data:`ESTIMATORS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from tinyllm.stats.cluster import cluster_bootstrap, cluster_ratio
from tinyllm.stats.core import CONFIDENCE, Interval, Method, check_1d
from tinyllm.stats.intervals import mean_ci, spearman_ci, wilson_interval
from tinyllm.stats.units import as_units

Estimator = Callable[[Any, Any, "np.random.Generator | None"], Interval]
"""``(items, units, rng) -> Interval``: per-item values, their units (:class:`Units` or ids),
the caller's rng (used by the resampling estimators only)."""


def wilson(items, units, rng=None, *, confidence: float = CONFIDENCE) -> Interval:
    """Wilson score interval of a proportion whose units are single 0/1 items
    (:func:`~tinyllm.stats.intervals.wilson_interval` of ``k = sum(items)``, ``n`` items).

    ``se = sqrt(p (1 - p) / n)``; no t, so ``df`` is ``None``. ``rng`` is not used.

    Example: 8 of 10 one-item units correct -> 0.8 in (0.4902, 0.9433).

    Raises ValueError when a unit holds more than one item (the items are not independent: use
    ``cluster_ratio``) or an item is not 0 or 1.
    """
    x = check_1d(items, "items")
    u = as_units(units, x.size)
    if not u.singletons:
        big = int(np.argmax(u.sizes))
        raise ValueError(
            f"wilson: expected one 0/1 item per unit, got unit {u.labels[big]!r} with "
            f"{int(u.sizes[big])} items (use cluster_ratio for items inside units)"
        )
    bad = np.flatnonzero((x != 0) & (x != 1))
    if bad.size:
        raise ValueError(f"wilson: expected 0/1 items, got {x[bad[0]]} at index {int(bad[0])}")
    k, n = int(x.sum()), x.size
    iv = wilson_interval(k, n, confidence)
    se = math.sqrt(iv.value * (1.0 - iv.value) / n)
    return Interval(iv.value, iv.lo, iv.hi, Method.WILSON, n, None, se, u.warning)


def fisher_z(items, units, rng=None, *, confidence: float = CONFIDENCE) -> Interval:
    """Fisher z interval of the Spearman correlation of ``items``, ``[n, 2]`` rows of
    (model score, reference score), one pair per unit:
    ``tanh(atanh(rho) ± z_{(1+c)/2} / sqrt(n - 3))``
    (:func:`~tinyllm.stats.intervals.spearman_ci`). ``se`` is ``None`` (the standard error
    ``1 / sqrt(n - 3)`` is on the z scale, not in the value's units). ``rng`` is not used.

    Example: 28 pairs with rho 0.5 -> (0.1560, 0.7358).

    Raises ValueError for rows that are not pairs and for a unit with more than one pair (use
    ``cluster_bootstrap`` with a Spearman statistic for clustered pairs).
    """
    x = np.asarray(items, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 2:
        raise ValueError(f"fisher_z: expected [n, 2] (score, reference) rows, got {x.shape}")
    u = as_units(units, x.shape[0])
    if not u.singletons:
        raise ValueError(
            f"fisher_z: expected one pair per unit, got {u.n_items} pairs in {u.n_units} units "
            "(use cluster_bootstrap for pairs inside units)"
        )
    iv = spearman_ci(x[:, 0], x[:, 1], confidence)
    return Interval(iv.value, iv.lo, iv.hi, Method.FISHER_Z, u.n_units, None, None, u.warning)


def iid(items, units=None, rng=None, *, confidence: float = CONFIDENCE) -> Interval:
    """Student t interval of the mean over items, each item taken as an independent draw:
    ``mean ± t_{(1+c)/2, n-1} * s / sqrt(n)`` (:func:`~tinyllm.stats.intervals.mean_ci`).

    The token-level reference reported beside the headline interval (``iid_interval``).
    ``units`` are not used for the interval (``None`` is allowed); ``n_units`` is the number of
    items (the units this interval assumes), ``df = n - 1``. Items all equal: zero width.

    Example: ``[1, 2, 3]`` -> 2 in (-0.4841, 4.4841).
    """
    x = check_1d(items, "items", min_len=2)
    if units is not None:
        as_units(units, x.size)  # the same items: refuses units of other items
    n = x.size
    if np.all(x == x[0]):
        v = float(x[0])
        return Interval(v, v, v, Method.IID, n, n - 1, 0.0)
    iv = mean_ci(x, confidence)
    se = float(np.std(x, ddof=1)) / math.sqrt(n)
    return Interval(iv.value, iv.lo, iv.hi, Method.IID, n, n - 1, se)


ESTIMATORS: Mapping[str, Estimator] = MappingProxyType(
    {
        Method.CLUSTER_RATIO: cluster_ratio,
        Method.WILSON: wilson,
        Method.CLUSTER_BOOTSTRAP: cluster_bootstrap,
        Method.FISHER_Z: fisher_z,
        Method.IID: iid,
    }
)
"""Interval method name -> its estimator ``(items, units, rng) -> Interval`` (read-only)."""


def estimate(method: str, items, units, rng: np.random.Generator | None = None, **kw) -> Interval:
    """The interval of ``items`` by the estimator named ``method`` (:data:`ESTIMATORS`);
    ``kw`` goes to the estimator (``confidence``, ``weights``, ``statistic``, ``n_boot``).

    Example: ``estimate("cluster_ratio", [1, 2, .5, .5, 1, 1], "aabbcc")`` -> 1.0 in
    (-0.2421, 2.2421).
    """
    try:
        fn = ESTIMATORS[method]
    except KeyError:
        raise ValueError(
            f"interval method: expected one of {[str(m) for m in ESTIMATORS]}, got {method!r}"
        ) from None
    return fn(items, units, rng, **kw)
