"""What each reported metric is (docs/definitions.md, paired tests, the zoo): which way is better and how its per-item
scores give its value. The one table of these facts: each kind's definition
(:data:`tinyllm.eval.kinds.KINDS`) names its metric and reads the facts from here, and
:mod:`tinyllm.compare`, :mod:`tinyllm.dashboard` and :mod:`tinyllm.report` read their tables from
here. Which kind reports which metric is the kind's own definition, not this module's.

This module imports nothing of the project and no numerical library, so that learning a metric's
direction never loads the models.

* ``bpb``: per-item scores are per-token NLLs in nats and ``value = sum(items) / ln 2 / bytes``,
  the UTF-8 bytes the scored tokens cover (a byte-level token covers one byte:
  ``mean(items) / ln 2``); lower is better;
* ``acc``, ``acc_norm``, ``exact_match``: proportions, the mean of 0/1 per-item scores; higher
  is better;
* ``spearman``: a rank correlation of the model's per-pair cosines (its per-item scores, NaN for
  a pair out of vocabulary) with the human scores, not their mean; higher is better.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DIRECTIONS = ("lower", "higher")
ARROW = {"lower": " ↓", "higher": " ↑"}
"""How a table marks which way is better, after the metric's name (``bpb ↓``)."""


@dataclass(frozen=True)
class Metric:
    """The facts of one metric.

    * ``direction``: which way is better, ``"lower"`` or ``"higher"``;
    * ``item_scale``: what the mean of the per-item scores is multiplied by to give the value's
      unit (bpb: ``1 / ln 2``, nats per byte to bits per byte);
    * ``item_scale_text``: how a message writes that scale (``" / ln 2"``; empty for 1);
    * ``mean_of_items``: whether the value is ``mean(items) * item_scale``;
    * ``intervals``: the interval estimators a row of it may name (its ``interval``: names of
      :data:`tinyllm.stats.ESTIMATORS`, then the legacy names stored reports hold); a kind's
      estimator for it is one of them;
    * ``value_range``: ``(minimum, maximum)`` of its value, None where unbounded;
      ``interval_in_range``: whether ``lo`` and ``hi`` lie in that range too;
    * ``kind``: the one kind whose rows report it, or None when any kind may.

    The report schema's rule for a row of the metric is written from these facts
    (:func:`tinyllm.report.report_schema_text`).
    """

    name: str
    direction: str
    item_scale: float = 1.0
    item_scale_text: str = ""
    mean_of_items: bool = True
    intervals: tuple[str, ...] = ()
    value_range: tuple[float | None, float | None] = (None, None)
    interval_in_range: bool = True
    kind: str | None = None

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(
                f"metric {self.name!r}: expected direction one of {list(DIRECTIONS)}, "
                f"got {self.direction!r}"
            )


PROPORTION_INTERVALS = ("wilson", "cluster_ratio", "cluster_bootstrap", "bootstrap_percentile")
"""The estimators of a proportion's row: Wilson over 0/1 items, the ratio or the bootstrap over
units, and the legacy bootstrap over items."""

BPB = Metric(
    "bpb",
    "lower",
    item_scale=1.0 / math.log(2.0),
    item_scale_text=" / ln 2",
    intervals=("cluster_ratio", "iid", "student_t"),
    value_range=(0, None),
    interval_in_range=False,
    kind="lm",
)
ACC = Metric("acc", "higher", intervals=PROPORTION_INTERVALS, value_range=(0, 1))
ACC_NORM = Metric("acc_norm", "higher", intervals=PROPORTION_INTERVALS, value_range=(0, 1))
EXACT_MATCH = Metric("exact_match", "higher", intervals=PROPORTION_INTERVALS, value_range=(0, 1))
SPEARMAN = Metric(
    "spearman",
    "higher",
    mean_of_items=False,
    intervals=("fisher_z", "cluster_bootstrap"),
    value_range=(-1, 1),
)

METRICS: dict[str, Metric] = {m.name: m for m in (BPB, ACC, ACC_NORM, EXACT_MATCH, SPEARMAN)}
"""name -> :class:`Metric`, in the order the report schema lists the metrics: the one table of
metrics (a new metric is one entry here; the report's ``Metric`` type and the report schema's
``metric`` enum and per-metric rules are built from it)."""

NAMES = tuple(METRICS)
DIRECTION: dict[str, str] = {name: m.direction for name, m in METRICS.items()}
"""which way is better, per metric"""
ITEM_SCALE: dict[str, float] = {
    name: m.item_scale for name, m in METRICS.items() if m.item_scale != 1.0
}
"""per-item units -> metric units, for the metrics whose scale is not 1 (bpb)"""
MEAN_METRICS = tuple(name for name, m in METRICS.items() if m.mean_of_items)
"""metrics whose value is the mean of the row's per-item scores times their scale"""


def item_scale(metric: str | None, n: int | None, details: Mapping[str, Any] | None) -> float:
    """What the mean of a row's per-item scores is multiplied by to give its value, from the
    row's ``metric``, ``n`` and ``details``.

    The metric's ``item_scale`` (:data:`METRICS`), except for a ``bpb`` row whose tokens
    are not single bytes: its items are nats per token and ``bpb = sum(items) / (n_bytes ln 2)``,
    so the scale is ``n / (n_bytes ln 2)`` with ``n_bytes`` from the row's details (the UTF-8
    bytes its scored tokens cover). A byte-level row has ``n_bytes = n``: the scale is ``1 / ln 2``.
    """
    facts = METRICS.get(metric) if isinstance(metric, str) else None
    scale = facts.item_scale if facts is not None else 1.0
    n_bytes = details.get("n_bytes") if isinstance(details, Mapping) else None
    if (
        metric == BPB.name
        and isinstance(n_bytes, int)
        and isinstance(n, int)
        and not isinstance(n_bytes, bool)
        and 0 < n_bytes != n
    ):
        return n / (n_bytes * math.log(2.0))
    return scale


def tokenizer(details: Mapping[str, Any] | None) -> str:
    """The tokenizer a row's per-token items are in, from its ``details`` (``tokenizer``; byte
    if unnamed)."""
    tok = details.get("tokenizer") if isinstance(details, Mapping) else None
    return tok if isinstance(tok, str) else "byte"
