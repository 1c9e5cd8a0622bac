"""What every kind's scorer returns (:class:`Scored`, its trivial baseline a
:class:`tinyllm.baselines.Baseline`), and the 0/1 accuracy row they share.

Each item belongs to a sampling unit (docs/definitions.md, "Units"): the row (sentence) for mlm
and rtd, the pair or question for seq2seq, classifier rows, word pairs and analogies, the
document for text. A scorer gives the unit of each item (``Scored.units``) or None when every
item is its own unit; the interval is then computed over units by the estimator the registry
names (:data:`tinyllm.stats.ESTIMATORS`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from tinyllm.baselines import Baseline
from tinyllm.stats import ESTIMATORS, Interval, Method, as_units, read_method, wilson_interval

PROPORTION_INTERVAL = Method.WILSON
"""The interval of a proportion row whose units are single 0/1 items (:func:`proportion_scored`);
a proportion over positions inside units is :data:`CLUSTERED_PROPORTION_INTERVAL`."""
CLUSTERED_PROPORTION_INTERVAL = Method.CLUSTER_RATIO
"""The interval of a proportion over positions grouped in units (mlm, rtd: positions of a row)."""


def unit_ids(units, n_items: int, name: str = "units") -> np.ndarray | None:
    """``units`` as an int64 array of one unit id per item, or None (each item its own unit).

    Ids are the caller's integers (row numbers, document numbers); they are checked to be a
    1-d integer array of ``n_items`` values. Example: ``unit_ids([0, 0, 1], 3)`` ->
    ``array([0, 0, 1])``.
    """
    if units is None:
        return None
    a = np.asarray(units)
    if a.ndim != 1 or a.size != n_items:
        raise ValueError(f"{name}: expected one unit id per item ({n_items}), got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name}: expected integer unit ids, got dtype {a.dtype}")
    out = np.ascontiguousarray(a, dtype=np.int64)
    out.setflags(write=False)
    return out


@dataclass(frozen=True)
class Scored:
    """What a kind's scorer returns: the metric with its interval, and the per-item scores.

    * ``interval``: the headline interval, over units;
    * ``method``: its estimator's name (:class:`tinyllm.stats.Method`; the names reports used
      before units, ``student_t`` and ``bootstrap_percentile``, are read through
      :func:`tinyllm.stats.read_method`);
    * ``items``: float64 per-item scores (lm: per-token NLLs, nats; acc: 0/1), or None;
    * ``units``: int64 ``[len(items)]``, the unit id of each item, or None when every item is
      its own unit (a pair, a question, a classified row);
    * ``iid_interval``: the item-level reference (every item taken as its own unit), kept
      beside the headline interval when the units hold more than one item; None otherwise.
    """

    metric: str
    interval: Interval
    method: str
    n: int
    items: np.ndarray | None  # float64 per-item scores (lm: per-token NLLs, nats; acc: 0/1)
    details: dict = field(default_factory=dict)
    baseline: Baseline | None = None  # the row's trivial baseline on the same items
    units: np.ndarray | None = None
    iid_interval: Interval | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", str(read_method(self.method)))
        if self.units is not None:
            if self.items is None:
                raise ValueError(f"{self.metric}: expected items with the units, got no items")
            object.__setattr__(self, "units", unit_ids(self.units, len(self.items)))

    @property
    def n_units(self) -> int:
        """G, the units the interval is over (``n`` when every item is its own unit)."""
        return self.n if self.interval.n_units is None else int(self.interval.n_units)


def wilson_items(a: np.ndarray) -> Interval:
    """The Wilson interval of 0/1 items, each its own unit (:func:`tinyllm.stats.wilson`:
    ``method``, ``n_units`` and ``se`` filled in); one item: the plain Wilson interval of 1."""
    if a.size < 2:  # one item: one unit, nothing to group
        iv = wilson_interval(int(a.sum()), int(a.size))
        return Interval(iv.value, iv.lo, iv.hi, Method.WILSON, int(a.size), None, None)
    return ESTIMATORS[Method.WILSON](a, np.arange(a.size), None)


def proportion_scored(
    metric: str,
    correct,
    details: dict | None = None,
    baseline: Baseline | None = None,
    *,
    units=None,
) -> Scored:
    """A proportion row from per-item 0/1 scores ``k / n``, the 0/1 scores kept as the items so
    that ``compare`` can run the paired test on them.

    ``correct``: 1-d array of 0/1 (or bool), one per scored item; n >= 1. ``units``: the unit
    id of each item (:func:`unit_ids`), None when each item is its own unit.

    * every unit one item: the Wilson interval (:func:`tinyllm.stats.wilson`);
    * units holding several items (positions of a row): the cluster-robust ratio estimator,
      ``r = sum_g S_g / sum_g N_g`` with ``S_g`` the unit's correct items and ``N_g`` its
      items, t with G - 1 df (:func:`tinyllm.stats.cluster_ratio`), its ends kept inside
      [0, 1]; ``iid_interval`` is then the item-level Wilson interval, for reference.

    Example: ``proportion_scored("acc", [1, 1, 0, 1, 1, 1, 1, 1, 0, 1])`` -> value 0.8,
    interval (0.4902, 0.9433), n 10, method "wilson".
    """
    a = np.asarray(correct)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{metric}: expected a non-empty 1-d array of 0/1 scores, got {a.shape}")
    a = a.astype(np.float64)
    if not np.all((a == 0) | (a == 1)):
        raise ValueError(
            f"{metric}: expected per-item scores 0 or 1, got {sorted(set(a.tolist()))[:5]}"
        )
    ids = unit_ids(units, a.size)
    item_level = wilson_items(a)
    interval, iid, method = item_level, None, PROPORTION_INTERVAL
    if ids is not None and as_units(ids, a.size).singletons:
        ids = None  # every unit one item: the items are the units
    if ids is not None:
        method = CLUSTERED_PROPORTION_INTERVAL
        iv = ESTIMATORS[method](a, ids, None)
        interval = dataclasses.replace(iv, lo=max(iv.lo, 0.0), hi=min(iv.hi, 1.0))
        iid = item_level
    return Scored(
        metric=metric,
        interval=interval,
        method=method,
        n=int(a.size),
        items=a,
        details=dict(details or {}),
        baseline=baseline,
        units=ids,
        iid_interval=iid,
    )
