"""What every kind's scorer returns (:class:`Scored`, its trivial baseline a
:class:`tinyllm.baselines.Baseline`), and the 0/1 accuracy row they share."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tinyllm.baselines import Baseline
from tinyllm.stats import Interval, wilson_interval

PROPORTION_INTERVAL = "wilson"
"""The interval of every proportion row :func:`proportion_scored` builds."""


@dataclass(frozen=True)
class Scored:
    """What a kind's scorer returns: the metric with its interval, and the per-item scores."""

    metric: str
    interval: Interval
    method: str  # "student_t" | "wilson" | "fisher_z" | "bootstrap_percentile"
    n: int
    items: np.ndarray | None  # float64 per-item scores (lm: per-token NLLs, nats; acc: 0/1)
    details: dict = field(default_factory=dict)
    baseline: Baseline | None = None  # the row's trivial baseline on the same items


def proportion_scored(
    metric: str, correct, details: dict | None = None, baseline: Baseline | None = None
) -> Scored:
    """A proportion row from per-item 0/1 scores: value ``k / n`` with its Wilson interval
    (:func:`tinyllm.stats.wilson_interval`), the 0/1 scores kept as the items so that ``compare``
    can run the paired test on them.

    ``correct``: 1-d array of 0/1 (or bool), one per scored item; n >= 1.

    Example: ``proportion_scored("acc", [1, 1, 0, 1, 1, 1, 1, 1, 0, 1])`` -> value 0.8,
    interval (0.4902, 0.9433), n 10.
    """
    a = np.asarray(correct)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{metric}: expected a non-empty 1-d array of 0/1 scores, got {a.shape}")
    a = a.astype(np.float64)
    if not np.all((a == 0) | (a == 1)):
        raise ValueError(
            f"{metric}: expected per-item scores 0 or 1, got {sorted(set(a.tolist()))[:5]}"
        )
    k = int(a.sum())
    return Scored(
        metric=metric,
        interval=wilson_interval(k, int(a.size)),
        method=PROPORTION_INTERVAL,
        n=int(a.size),
        items=a,
        details=dict(details or {}),
        baseline=baseline,
    )
