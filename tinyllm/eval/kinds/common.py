"""What every kind shares: its definition (:class:`Kind`), its options model
(:class:`KindOptions`, built by :func:`options_model`), what its scorer returns
(:class:`Scored`, its trivial baseline a :class:`tinyllm.baselines.Baseline`), the 0/1 accuracy
row and the val rows of a rows file scored with each row a unit (:func:`val_sentences`,
:func:`check_row_units`).

Each item belongs to a sampling unit (docs/definitions.md, "Units"): the row (sentence) for mlm
and rtd, the pair or question for seq2seq, classifier rows, word pairs and analogies, the
document for text. A scorer gives the unit of each item (``Scored.units``) or None when every
item is its own unit; the interval is then computed over units by the estimator the registry
names (:data:`tinyllm.stats.ESTIMATORS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, create_model, model_validator

from tinyllm import metrics
from tinyllm.baselines import Baseline
from tinyllm.data import read_rows, rows_of_split
from tinyllm.report import Entry, EntryOptions
from tinyllm.stats import ESTIMATORS, Interval, Method, as_units, read_method, wilson_interval

PROPORTION_INTERVAL = Method.WILSON
"""The interval of a proportion row whose units are single 0/1 items (:func:`proportion_scored`);
a proportion over positions inside units is :data:`CLUSTERED_PROPORTION_INTERVAL`."""
CLUSTERED_PROPORTION_INTERVAL = Method.CLUSTER_RATIO
"""The interval of a proportion over positions grouped in units (mlm, rtd: positions of a row)."""


Scorer = Callable[..., "Scored"]
"""``score(entry, model, data_path, rng, opts) -> Scored``: a kind's scorer; ``rng`` is the
entry's own generator (:func:`tinyllm.eval.zoo.entry_rng`): every random draw comes from it;
``opts`` the entry's options of the kind (:meth:`Kind.read_options`, read once by the zoo)."""

ZOO_OPTIONS = ("device", "dtype")
"""The entry options the zoo reads for every kind (where and in which dtype the model is
loaded); no kind's options model holds them."""


class KindOptions(BaseModel):
    """A kind's options model, and the model of a kind that reads no option: frozen, strict,
    unknown fields refused. A kind's own is built by :func:`options_model`; the cross-field
    rules of :class:`tinyllm.report.EntryOptions` (``stride < ctx_len``) hold over its fields."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @model_validator(mode="after")
    def _entry_rules(self) -> KindOptions:
        EntryOptions(**self.model_dump())  # the manifest's rules, written once there
        return self


def options_model(kind: str, *names: str) -> type[KindOptions]:
    """The options model of ``kind``: the fields ``names`` of
    :class:`tinyllm.report.EntryOptions`, each with its type, bounds and description as written
    there (the manifest's schema is generated from that one model).

    Example: ``options_model("seq2seq", "beam")`` -> ``Seq2seqOptions``, whose ``beam`` is an
    int >= 1 or None; ``Seq2seqOptions(beam=0)`` and ``Seq2seqOptions(split="val")`` are
    refused (pydantic's ValidationError).
    """
    fields = EntryOptions.model_fields
    bad = [n for n in names if n not in fields or n in ZOO_OPTIONS]
    if bad:
        raise ValueError(
            f"kind {kind!r}: expected options among {[f for f in fields if f not in ZOO_OPTIONS]} "
            f"(tinyllm.report.EntryOptions), got {bad}"
        )
    return create_model(
        f"{kind[:1].upper()}{kind[1:]}Options",
        __base__=KindOptions,
        __module__=__name__,
        __doc__=f"The entry options the {kind} kind reads (tinyllm.report.EntryOptions).",
        **{n: (fields[n].annotation, fields[n]) for n in names},
    )


@dataclass(frozen=True)
class Kind:
    """One kind's definition, written once in the kind's own module (its ``DEFINITION``) and
    collected in :data:`tinyllm.eval.kinds.KINDS`:

    * ``name``: the kind, a row's ``kind`` (a family's ``KIND``; ``"classifier"`` for configs
      with ``tl_head``; ``"lmeval"`` for a manifest entry that names it as its ``kind``);
    * ``metric``: the metric its rows report (:data:`tinyllm.metrics.METRICS`), whose facts
      are read from there, never restated: :attr:`direction`, :attr:`item_scale`,
      :attr:`mean_of_items`;
    * ``interval``: the estimator of its rows' interval by registry name
      (:data:`tinyllm.stats.ESTIMATORS`), one of its metric's ``intervals``, called with
      ``interval_options`` (keyword arguments of :func:`tinyllm.stats.estimate`);
    * ``score``: its :data:`Scorer`;
    * ``options``: its options model (:func:`options_model`: the manifest entry options it
      reads, fields of :class:`tinyllm.report.EntryOptions`; ``device`` and ``dtype`` are the
      zoo's, for every kind, :data:`ZOO_OPTIONS`); :meth:`read_options` reads an entry's;
    * ``also``: the other ``(metric, interval)`` pairs a row of it may carry (a proportion
      whose units are single items has Wilson's interval; an embeddings analogy file reports
      acc); :attr:`rows` lists them all, :attr:`metrics` and :attr:`intervals` each once;
    * ``nan_items``: its items may be NaN (a pair out of vocabulary), so compare checks their
      coverage.

    Example: the lm kind is ``Kind("lm", "bpb", Method.CLUSTER_RATIO, score,
    options=options_model("lm", "ctx_len", "stride", "doc_sep"))``: ``direction`` ``"lower"``,
    ``item_scale`` ``1 / ln 2``.
    """

    name: str
    metric: str
    interval: Method
    score: Scorer = field(repr=False)
    interval_options: Mapping[str, Any] = field(default_factory=dict)
    options: type[KindOptions] = KindOptions
    also: tuple[tuple[str, Method], ...] = ()
    nan_items: bool = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "interval", read_method(self.interval))
        set_(self, "interval_options", MappingProxyType(dict(self.interval_options)))
        set_(self, "also", tuple((m, read_method(i)) for m, i in self.also))
        if not (isinstance(self.options, type) and issubclass(self.options, KindOptions)):
            raise ValueError(
                f"kind {self.name!r}: expected an options model (options_model), "
                f"got {self.options!r}"
            )
        for m, i in self.rows:
            if m not in metrics.METRICS:
                raise ValueError(
                    f"kind {self.name!r}: expected metrics of {list(metrics.METRICS)}, got {m!r}"
                )
            if i not in ESTIMATORS:
                raise ValueError(
                    f"kind {self.name!r}: expected intervals of {[str(e) for e in ESTIMATORS]}, "
                    f"got {str(i)!r}"
                )
            if str(i) not in metrics.METRICS[m].intervals:
                raise ValueError(
                    f"kind {self.name!r}: expected an interval of {m} among "
                    f"{list(metrics.METRICS[m].intervals)} (tinyllm.metrics), got {str(i)!r}"
                )

    def read_options(self, entry: Entry) -> KindOptions:
        """``entry``'s options of this kind (an instance of :attr:`options`): the options it
        sets (not null) but :data:`ZOO_OPTIONS`. An option this kind does not read is refused,
        a ValueError the zoo makes the entry's error row.

        Example: an lm entry with ``options: {beam: 4}`` -> ValueError "entry 'x':
        options.beam: expected options of kind lm (ctx_len, stride, doc_sep, device, dtype),
        got beam".
        """
        given = {k: v for k, v in entry.options if v is not None and k not in ZOO_OPTIONS}
        unread = [k for k in given if k not in self.options.model_fields]
        if unread:
            read = [*self.options.model_fields, *ZOO_OPTIONS]
            raise ValueError(
                f"entry {entry.name!r}: {', '.join(f'options.{k}' for k in unread)}: expected "
                f"options of kind {self.name} ({', '.join(read)}), got {', '.join(unread)}"
            )
        return self.options(**given)

    @property
    def rows(self) -> tuple[tuple[str, Method], ...]:
        """Every ``(metric, interval)`` a row of this kind may carry, its own first."""
        return ((self.metric, self.interval), *self.also)

    @property
    def metrics(self) -> tuple[str, ...]:
        """Every metric a row of this kind may report, :attr:`metric` first."""
        return tuple(dict.fromkeys(m for m, _ in self.rows))

    @property
    def intervals(self) -> tuple[Method, ...]:
        """Every estimator a row of this kind may carry, :attr:`interval` first."""
        return tuple(dict.fromkeys(i for _, i in self.rows))

    @property
    def facts(self) -> metrics.Metric:
        """The facts of :attr:`metric` (:data:`tinyllm.metrics.METRICS`)."""
        return metrics.METRICS[self.metric]

    @property
    def direction(self) -> str:
        """Which way its metric is better, ``"lower"`` or ``"higher"``."""
        return self.facts.direction

    @property
    def item_scale(self) -> float:
        """What the mean of its per-item scores is multiplied by to give the value's unit."""
        return self.facts.item_scale

    @property
    def mean_of_items(self) -> bool:
        """Whether its value is ``mean(items) * item_scale``."""
        return self.facts.mean_of_items


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


SPLIT = "val"
"""The split of a rows file that the row kinds (classifier, mlm, rtd) score."""


def val_sentences(data_path: Path) -> list[str]:
    """The sentences of the val rows of the rows file ``data_path`` (formats/rows.md), in file
    order; other splits are not read. ValueError naming the file when it has no val row."""
    return [r.sentence for r in rows_of_split(read_rows(data_path), SPLIT, data_path)]


def check_row_units(units: np.ndarray, n_rows: int, what: str, data_path: Path) -> None:
    """Refuse scored ``what`` (masked bytes, bytes) that lie in fewer than 2 val rows: each row
    is a unit, and an interval over units needs two. ``units``: the row of each scored item.

    Example: ``check_row_units([0, 0], 3, "bytes", p)`` -> ValueError "p: val rows: expected
    bytes in at least 2 rows (the rows are the units of the interval), got them in 1 row of 3".
    """
    n_units = int(np.unique(units).size)
    if n_units < 2:
        raise ValueError(
            f"{data_path}: val rows: expected {what} in at least 2 rows (the rows are the units "
            f"of the interval), got them in {n_units} row of {n_rows}"
        )
