"""The 95% interval of every lm-eval metric, in the metric's own units, over the task's sampling
units (docs/definitions.md, "Units" and "Intervals").

lm-eval logs each document's score of each metric and aggregates them by the task's
aggregation function; the value reported is always lm-eval's own aggregate, the interval is
drawn over units: each document its own unit, or, with a cluster key, the documents that share
the key's value (:func:`document_units`). Methods by their names in :class:`tinyllm.stats.Method`:

* ``mean`` (acc, acc_norm, exact_match, ...): ``wilson`` when every unit is one document and
  every document scores 0 or 1; otherwise ``cluster_bootstrap``, the percentile bootstrap of the
  mean resampling units (:func:`tinyllm.stats.cluster_bootstrap`); beside a clustered 0/1 metric
  the Wilson interval over documents is kept as ``iid_interval``;
* the corpus aggregations, each document an LL (nats) and a weight (1 for ``perplexity``,
  words or bytes for the others): ``cluster_bootstrap`` of ``r = sum LL / sum weight``, each
  resample drawing units and summing their documents' LL and weights (:func:`ratio_bootstrap`),
  its ends mapped to the metric (:data:`CORPUS`): ``perplexity`` and ``weighted_perplexity``
  ``exp(-r)``, ``bits_per_byte`` ``-r / ln 2`` -- a perplexity interval is in perplexity, its
  ends in increasing order;
* any other aggregation (f1, bleu, ...): lm-eval's value, no interval.

A group's aggregate (lm-eval's ``aggregate_metric_list``) is the mean of its leaf tasks'
values weighted by their sizes (``weight_by_size``, lm-eval's default) or not: Wilson on the
pooled documents when that mean is the pooled proportion of 0/1 scores and every unit is one
document, else the percentile bootstrap that resamples each task's units within the task
(:func:`group_summary`).

Each task's and each group's draws come from their own stream, :func:`task_rng` of
``(seed, name)``: an interval does not depend on which other tasks ran beside it. Reports
written before units name the bootstrap ``"bootstrap"``; :func:`as_interval` reads them
through :func:`tinyllm.stats.read_method`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tinyllm import stats
from tinyllm.stats import Interval, Method
from tinyllm.stats.units import few_units_warning

CORPUS: dict[str, Callable[[Any], Any]] = {
    "perplexity": lambda r: np.exp(-r),
    "weighted_perplexity": lambda r: np.exp(-r),
    "bits_per_byte": lambda r: -r / math.log(2),
}
"""lm-eval's corpus aggregations by name, each a map of ``r = sum LL / sum weight`` (nats per
document for ``perplexity``, per word or byte for the others) to the metric:
``perplexity(items) = exp(-mean LL)``, ``weighted_perplexity(items) = exp(-sum LL / sum w)``,
``bits_per_byte(items) = -sum LL / sum bytes / ln 2`` (lm_eval/api/metrics.py)."""

DEFAULT_AGGREGATION = {
    "perplexity": "perplexity",
    "word_perplexity": "weighted_perplexity",
    "byte_perplexity": "weighted_perplexity",
    "bits_per_byte": "bits_per_byte",
}
"""lm-eval's aggregation of a metric its task config names without one; any other metric
without a known aggregation is a mean."""

_LM_EVAL_AGGREGATIONS = ("mean", *CORPUS)


def stable_hash(name: str) -> int:
    """A 64-bit integer of ``name`` that is the same in every process (the first 8 bytes of its
    UTF-8 sha256, big-endian; Python's ``hash`` of a str changes from run to run)."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big")


def task_rng(seed: int, name: str) -> np.random.Generator:
    """The bootstrap's stream of task (or group) ``name`` under ``seed``:
    ``numpy.random.default_rng([seed mod 2**64, stable_hash(name)])``, so a task's intervals do
    not depend on which other tasks run in the same call, nor on their order."""
    return np.random.default_rng([int(seed) % 2**64, stable_hash(name)])


def aggregation_name(fn: Any) -> str | None:
    """The name of one of lm-eval's own aggregation functions (``mean``, ``perplexity``,
    ``weighted_perplexity``, ``bits_per_byte``, from ``lm_eval.api.metrics``); None for any
    other function (a task's own, f1, bleu, ...)."""
    if getattr(fn, "__module__", None) != "lm_eval.api.metrics":
        return None
    name = getattr(fn, "__qualname__", None)
    return name if name in _LM_EVAL_AGGREGATIONS else None


def aggregation_of(metric: str, aggregations: dict[str, str | None] | None) -> str | None:
    """lm-eval's aggregation of ``metric`` by name: ``aggregations[metric]`` (a task's, from
    :func:`aggregation_name`), else :data:`DEFAULT_AGGREGATION`'s, else ``"mean"``."""
    if aggregations is not None and metric in aggregations:
        return aggregations[metric]
    return DEFAULT_AGGREGATION.get(metric, "mean")


def per_document(samples: list[dict], results: dict) -> dict[str, dict[int, Any]]:
    """``{"METRIC,FILTER": {doc_id: score}}`` for each key of ``results`` that the logged
    ``samples`` score (a sample's ``filter`` names its filter)."""
    per: dict[str, dict[int, Any]] = {}
    for s in samples:
        filt = s.get("filter", "none")
        for key in results:
            metric, _, f = key.partition(",")
            if f == filt and metric in s:
                per.setdefault(key, {})[int(s["doc_id"])] = s[metric]
    return per


def document_units(
    samples: list[dict], doc_ids: list[int], cluster_key: str | None, task: str
) -> tuple[list | None, np.ndarray | None]:
    """Each document's unit: ``(labels, units)`` in ``doc_ids`` order.

    ``cluster_key`` None: every document its own unit, ``(None, None)``. Otherwise document
    ``d``'s unit is ``doc[cluster_key]`` of its logged sample (lm-eval's document, after the
    task's ``process_docs``), a string or an integer (``"3"`` and ``3`` are different units):
    ``labels[i]`` is document ``doc_ids[i]``'s value, ``units[i]`` its unit number (int64,
    ``0 .. G-1`` in the order the units first appear).

    Example: documents whose ``passage`` is ``"p1", "p1", "p2"`` -> ``(["p1", "p1", "p2"],
    [0, 0, 1])``.

    Raises ValueError naming the task and the field for a document without the field (or with
    ``null`` there: a JSON dataset gives the documents that lack a column ``None``), a value of
    another type, and a single unit for all documents.
    """
    if cluster_key is None:
        return None, None
    docs = {int(s["doc_id"]): s.get("doc") for s in samples}
    where = f"task {task!r}: cluster key {cluster_key!r}"
    labels = []
    for d in doc_ids:
        doc = docs.get(d)
        if not isinstance(doc, dict) or doc.get(cluster_key) is None:
            have = (
                sorted(k for k, v in doc.items() if v is not None)[:8]
                if isinstance(doc, dict)
                else type(doc).__name__
            )
            raise ValueError(
                f"{where}: expected the field in every document, got none in doc_id {d} "
                f"(its fields: {have})"
            )
        v = doc[cluster_key]
        if isinstance(v, bool) or not isinstance(v, str | int):
            raise ValueError(
                f"{where}: expected a string or an integer in every document, got {v!r:.60} in "
                f"doc_id {d}"
            )
        labels.append(v)
    units = unit_numbers(labels)
    if units.max() < 1:
        raise ValueError(
            f"{where}: expected at least 2 units (an interval over units needs their spread), "
            f"got 1 ({labels[0]!r}) holding all {len(labels)} documents"
        )
    return labels, units


def unit_numbers(labels: list | None) -> np.ndarray | None:
    """Each document's unit number (int64, ``0 .. G-1`` in the order the units first appear)
    from its unit label; None for None. Example: ``["p2", "p1", "p2"]`` -> ``[0, 1, 0]``."""
    if labels is None:
        return None
    number: dict = {}
    return np.asarray([number.setdefault(v, len(number)) for v in labels], dtype=np.int64)


def summarize(
    samples: list[dict],
    results: dict,
    rng: np.random.Generator,
    n_boot: int,
    aggregations: dict[str, str | None] | None = None,
    *,
    cluster_key: str | None = None,
    task: str = "task",
) -> dict:
    """One task's metrics from lm-eval's logged samples: for each ``"METRIC,FILTER"`` in
    ``results`` (lm-eval's aggregates), the per-document scores, n and the 95% interval over
    units by the metric's aggregation (``aggregations``: metric -> lm-eval's aggregation name,
    None for one of the task's own; a metric missing there: :data:`DEFAULT_AGGREGATION`, else
    ``mean``). ``cluster_key``: the document field whose value is the document's unit
    (:func:`document_units`; None: each document its own unit); ``task`` names the task in
    errors. The metrics draw from ``rng`` in ``results``' order.

    Returns ``{"n", "doc_ids", "cluster_key", "units", "n_units", "metrics": {key: {"value",
    "lo", "hi", "interval", "n", "n_units", "se", "warning", "iid_interval"}}, "per_item":
    {key: [...]}}``: ``value`` is ``results[key]``, ``interval`` the method's name
    (:class:`tinyllm.stats.Method`), ``se`` its standard error in the value's units where it
    has one, ``warning`` one line (fewer than 10 units) or None, ``iid_interval`` the Wilson
    interval over documents beside a clustered 0/1 metric (``{"lo", "hi", "method"}``) or
    None; ``units`` each document's cluster value in ``doc_ids`` order (None without a
    cluster key); ``per_item`` each document's score in ``doc_ids`` order (``[LL, weight]``
    pairs for a weighted corpus metric).

    Example: samples whose ``acc`` are ``[1, 0, 1, 1]`` -> ``{"value": 0.75, "lo": 0.30,
    "hi": 0.95, "interval": "wilson", "n": 4, "n_units": 4, ...}``; the same documents in
    clusters ``a a b b``: ``"cluster_bootstrap"`` over 2 units, lo 0.5, hi 1.0; lambada's
    ``perplexity`` (one LL per document, ``exp(-mean LL)``) -> an interval in perplexity around
    lm-eval's value.
    """
    per = per_document(samples, results)
    doc_ids = sorted({int(s["doc_id"]) for s in samples})
    labels, units = document_units(samples, doc_ids, cluster_key, task)
    position = {d: i for i, d in enumerate(doc_ids)}
    metrics, per_item = {}, {}
    for key, by_doc in per.items():
        metric = key.partition(",")[0]
        docs = sorted(by_doc)
        vals = [by_doc[d] for d in docs]
        agg = aggregation_of(metric, aggregations)
        value = results[key]
        u = None if units is None else units[[position[d] for d in docs]]
        if isinstance(vals[0], list | tuple):
            pairs = np.asarray(vals, dtype=np.float64).reshape(len(vals), -1)
            per_item[key] = pairs.tolist()
        else:
            x = np.asarray(vals, dtype=np.float64)
            per_item[key] = x.tolist()
        if agg in CORPUS:
            ll, w = corpus_arrays(per_item[key])
            metrics[key] = corpus_interval(agg, value, ll, w, rng, n_boot, u)
        elif agg == "mean" and not isinstance(vals[0], list | tuple):
            metrics[key] = mean_interval(value, np.asarray(per_item[key]), rng, n_boot, u)
        else:  # an aggregation we do not know: lm-eval's value, no interval
            metrics[key] = _no_interval(value, len(vals))
    return {
        "n": len(doc_ids),
        "doc_ids": doc_ids,
        "cluster_key": cluster_key,
        "units": labels,
        "n_units": _n_units(units, len(doc_ids)),
        "metrics": metrics,
        "per_item": per_item,
    }


def _no_interval(value: Any, n: int) -> dict:
    keys = ("lo", "hi", "interval", "n_units", "se", "warning", "iid_interval")
    return {"value": float(value), **dict.fromkeys(keys), "n": int(n)}


def _row(value: Any, iv: Interval, n: int, iid: Interval | None = None) -> dict:
    """A metric's entry: lm-eval's ``value`` with the ends, method, units and warning of
    ``iv`` (its value is ours, of the same documents), ``iid`` beside it."""
    return {
        "value": float(value),
        "lo": float(iv.lo),
        "hi": float(iv.hi),
        "interval": str(iv.method),
        "n": int(n),
        "n_units": iv.n_units,
        "se": iv.se,
        "warning": iv.warning or None,
        "iid_interval": None
        if iid is None
        else {"lo": iid.lo, "hi": iid.hi, "method": str(iid.method)},
    }


def as_interval(m: dict) -> Interval:
    """A metric's entry (:func:`summarize`) as a :class:`tinyllm.stats.Interval`: its method
    read through :func:`tinyllm.stats.read_method` (an old report's ``"bootstrap"`` is
    ``cluster_bootstrap``), ``df = n_units - 1`` for the bootstrap, the units ``n`` when an old
    entry does not say."""
    method = stats.read_method(m["interval"])
    g = m.get("n_units") or m["n"]
    df = g - 1 if method == Method.CLUSTER_BOOTSTRAP else None
    return Interval(
        m["value"], m["lo"], m["hi"], method, g, df, m.get("se"), m.get("warning") or ""
    )


def is_zero_one(x: np.ndarray) -> bool:
    """Every score is 0 or 1 (a proportion: Wilson)."""
    return bool(np.isin(x, (0.0, 1.0)).all())


def _n_units(units: np.ndarray | None, n: int) -> int:
    """G: the units of ``n`` documents (``units`` None: each its own)."""
    return n if units is None else int(units.max()) + 1


def _grouped(units: np.ndarray | None, n: int) -> np.ndarray | None:
    """``units`` when some unit holds several documents, else None (the documents are the
    units)."""
    if units is None or np.unique(units).size == n:
        return None
    return units


def _wilson_docs(x: np.ndarray) -> Interval:
    """Wilson over documents, each its own unit (one document: the plain Wilson of 1)."""
    if x.size < 2:
        iv = stats.wilson_interval(int(x.sum()), int(x.size))
        return Interval(iv.value, iv.lo, iv.hi, Method.WILSON, int(x.size), None, None)
    return stats.wilson(x, np.arange(x.size))


def mean_estimate(
    x: np.ndarray, units: np.ndarray | None, rng: np.random.Generator, n_boot: int
) -> tuple[Interval, Interval | None]:
    """The interval of the mean of per-document scores ``x`` over their units, and the
    item-level reference: ``(interval, iid)``.

    Every unit one document (``units`` None or all distinct) and every ``x`` 0 or 1: Wilson of
    ``(sum x, n)`` (:func:`tinyllm.stats.wilson`; ``rng`` not drawn), ``iid`` None. Otherwise
    the percentile bootstrap of the mean resampling units (:func:`tinyllm.stats.cluster_bootstrap`,
    ``n_boot`` draws from ``rng``; with one document per unit these are the draws and ends of
    :func:`tinyllm.stats.bootstrap_ci`), and, for 0/1 scores in clusters, the Wilson interval
    over documents as ``iid``. One document: its own value, zero width.
    """
    grouped = _grouped(units, x.size)
    if grouped is None and is_zero_one(x):
        return _wilson_docs(x), None
    if x.size < 2:
        v = float(x[0])
        return Interval(v, v, v, Method.CLUSTER_BOOTSTRAP, 1, 0, 0.0), None
    ids = np.arange(x.size) if units is None else units
    iv = stats.cluster_bootstrap(x, ids, rng, n_boot=n_boot)
    iid = _wilson_docs(x) if grouped is not None and is_zero_one(x) else None
    return iv, iid


def mean_interval(
    value: Any, x: np.ndarray, rng: np.random.Generator, n_boot: int, units=None
) -> dict:
    """A mean metric's entry: lm-eval's ``value`` with :func:`mean_estimate`'s interval."""
    iv, iid = mean_estimate(x, units, rng, n_boot)
    return _row(value, iv, x.size, iid)


def corpus_arrays(items: list) -> tuple[np.ndarray, np.ndarray]:
    """``(LL, weight)`` arrays of a corpus metric's per-document items: ``[LL, weight]`` pairs,
    or one LL per document (weight 1, lm-eval's ``perplexity``)."""
    a = np.asarray(items, dtype=np.float64)
    if a.ndim == 1:
        return a, np.ones_like(a)
    return a[:, 0], a[:, 1] if a.shape[1] > 1 else np.ones(len(a))


BATCH_INDICES = 4_000_000
"""At most this many unit indices are drawn at once (``n_boot x G`` in batches of rows)."""


def ratio_resamples(
    ll: np.ndarray, w: np.ndarray, units: np.ndarray | None, rng: np.random.Generator, n_boot: int
) -> np.ndarray:
    """``n_boot`` resampled ratios ``sum LL / sum w``: each resample draws G unit numbers with
    replacement (``rng.integers(0, G, size=(rows, G))`` in batches of at most
    :data:`BATCH_INDICES` indices, which continue one stream) and sums the drawn units' LL and
    weights (a unit drawn twice counts twice). ``units`` None: each document its own unit.

    These are the draws and values of :func:`tinyllm.stats.cluster_bootstrap` of the rows
    ``(LL, w)`` with the statistic ``sum LL / sum w``, computed from per-unit sums.
    """
    if units is None:
        S, W = ll, w
    else:
        S, W = np.bincount(units, weights=ll), np.bincount(units, weights=w)
    g = S.size
    out = np.empty(n_boot)
    step = max(1, min(n_boot, BATCH_INDICES // max(g, 1)))
    for lo in range(0, n_boot, step):
        idx = rng.integers(0, g, size=(min(step, n_boot - lo), g))
        out[lo : lo + len(idx)] = S[idx].sum(axis=-1) / W[idx].sum(axis=-1)
    return out


def ratio_bootstrap(
    ll: np.ndarray, w: np.ndarray, units: np.ndarray | None, rng: np.random.Generator, n_boot: int
) -> Interval:
    """The ``cluster_bootstrap`` interval of ``r = sum LL / sum w`` over units
    (:func:`ratio_resamples`): value ``r`` on all documents, ends the 2.5% and 97.5% quantiles
    of the resampled ratios, ``se`` their standard deviation, ``df = G - 1``, the
    fewer-than-10-units warning. One unit: zero width."""
    g = _n_units(units, ll.size)
    value = float(ll.sum() / w.sum())
    warning = few_units_warning(g)
    if g < 2:
        return Interval(value, value, value, Method.CLUSTER_BOOTSTRAP, g, 0, 0.0, warning)
    boot = ratio_resamples(ll, w, units, rng, n_boot)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    if np.all(boot == boot[0]):
        lo = hi = boot[0]
    se = float(np.std(boot, ddof=1)) if n_boot > 1 else 0.0
    return Interval(value, float(lo), float(hi), Method.CLUSTER_BOOTSTRAP, g, g - 1, se, warning)


def corpus_interval(
    agg: str,
    value: Any,
    ll: np.ndarray,
    w: np.ndarray,
    rng: np.random.Generator,
    n_boot: int,
    units: np.ndarray | None = None,
) -> dict:
    """A corpus metric's entry in its own units: :func:`ratio_bootstrap` of
    ``r = sum LL / sum w`` over units (``units`` None: each document its own unit, ``rng``),
    its ends mapped by :data:`CORPUS` ``[agg]`` and put in increasing order; ``se`` is not
    carried (it is one of ``r``, not of the metric)."""
    to_metric = CORPUS[agg]
    iv = ratio_bootstrap(ll, w, units, rng, n_boot)
    lo, hi = sorted((float(to_metric(iv.lo)), float(to_metric(iv.hi))))
    return _row(value, dataclasses.replace(iv, lo=lo, hi=hi, se=None), len(ll))


# ------------------------------------------------------------------------------- groups


def group_keys(agg_list: Iterable[Any], leaf_keys: Iterable[Iterable[str]]) -> list[tuple]:
    """The ``("METRIC,FILTER", weight_by_size)`` pairs a group aggregates, as lm-eval's
    ``Group.aggregate`` finds them: each entry of its ``aggregate_metric_list`` (objects with
    ``metric``, ``filter_list``, ``weight_by_size``) on its filters, or, where ``filter_list``
    is None, on every filter a leaf task reports that metric on (sorted)."""
    leaf_keys = [set(k) for k in leaf_keys]
    out = []
    for a in agg_list:
        filters = a.filter_list
        if filters is None:
            prefix = f"{a.metric},"
            filters = sorted(
                {k[len(prefix) :] for ks in leaf_keys for k in ks if k.startswith(prefix)}
            )
        out += [(f"{a.metric},{f}", bool(a.weight_by_size)) for f in filters]
    return out


def group_summary(
    value: Any,
    leaves: list[dict],
    weight_by_size: bool,
    rng: np.random.Generator,
    n_boot: int,
) -> dict:
    """A group's aggregate of one metric with its interval: lm-eval's ``value`` is
    ``sum_t v_t m_t / sum_t v_t`` over its leaf tasks t with the metric (``v_t`` = the task's
    n when ``weight_by_size``, else 1; ``m_t`` its value). ``leaves``: one dict per such task,
    ``{"items": per-document scores, "aggregation": lm-eval's name, "units": each document's
    unit number or None}`` (``units`` may be left out: each document its own unit).

    Mean metrics whose documents all score 0 or 1, weighted by size, every unit one document:
    that mean is the pooled proportion, with its Wilson interval over all the documents.
    Otherwise ``cluster_bootstrap``: the percentile bootstrap of the weighted mean, each task's
    units resampled within the task (``n_boot`` resamples from ``rng``, the tasks in order) and
    aggregated by the task's own aggregation; no interval when a task's aggregation is unknown.
    ``n_units`` is the units of all the tasks together.

    Example: two tasks of 0/1 scores, 3 of 10 and 4 of 11 right, weighted by size -> value
    ``7/21``, the Wilson interval of (7, 21).
    """
    n = sum(len(t["items"]) for t in leaves)
    aggs = {t["aggregation"] for t in leaves}
    if not aggs <= {"mean", *CORPUS}:
        return _no_interval(value, n)
    units = [t.get("units") for t in leaves]
    grouped = [_grouped(u, len(t["items"])) for u, t in zip(units, leaves, strict=True)]
    g = sum(_n_units(u, len(t["items"])) for u, t in zip(units, leaves, strict=True))
    if aggs == {"mean"} and weight_by_size and all(u is None for u in grouped):
        x = np.concatenate([np.asarray(t["items"], dtype=np.float64) for t in leaves])
        if is_zero_one(x):
            return _row(value, _wilson_docs(x), n)
    weights = np.array([len(t["items"]) if weight_by_size else 1 for t in leaves], dtype=float)
    total = np.zeros(n_boot)
    for t, v, u in zip(leaves, weights, grouped, strict=True):
        total += v * _resampled(t["aggregation"], t["items"], u, rng, n_boot)
    boot = total / weights.sum()
    lo, hi = np.quantile(boot, [0.025, 0.975])
    se = float(np.std(boot, ddof=1)) if n_boot > 1 else 0.0
    iv = Interval(value, lo, hi, Method.CLUSTER_BOOTSTRAP, g, g - 1, se, few_units_warning(g))
    return _row(value, iv, n)


def _resampled(
    agg: str, items: list, units: np.ndarray | None, rng: np.random.Generator, n_boot: int
) -> np.ndarray:
    """``n_boot`` values of one task's aggregate, each on a resample (with replacement) of its
    units (``units`` None: its documents), drawn from ``rng`` (:func:`ratio_resamples`)."""
    if agg == "mean":
        ll = np.asarray(items, dtype=np.float64)
        return ratio_resamples(ll, np.ones_like(ll), units, rng, n_boot)
    ll, w = corpus_arrays(items)
    return CORPUS[agg](ratio_resamples(ll, w, units, rng, n_boot))
