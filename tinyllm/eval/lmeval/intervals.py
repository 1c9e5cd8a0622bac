"""The 95% interval of every lm-eval metric, in the metric's own units (SPEC.md section 4).

lm-eval logs each document's score of each metric and aggregates them by the task's
aggregation function; the value reported is always lm-eval's own aggregate, the interval is
drawn over documents (the sampling unit):

* ``mean`` (acc, acc_norm, exact_match, ...): Wilson when every document scores 0 or 1,
  else the percentile bootstrap of the mean;
* the corpus aggregations, each document an LL (nats) and a weight (1 for ``perplexity``,
  words or bytes for the others): the percentile bootstrap of ``r = sum LL / sum weight``,
  whose ends are mapped to the metric (:data:`CORPUS`): ``perplexity`` and
  ``weighted_perplexity`` ``exp(-r)``, ``bits_per_byte`` ``-r / ln 2`` -- a perplexity
  interval is in perplexity, its ends in increasing order;
* any other aggregation (f1, bleu, ...): lm-eval's value, no interval.

A group's aggregate (lm-eval's ``aggregate_metric_list``) is the mean of its leaf tasks'
values weighted by their sizes (``weight_by_size``, lm-eval's default) or not: Wilson on the
pooled documents when that mean is the pooled proportion of 0/1 scores, else the percentile
bootstrap that resamples each task's documents within the task (:func:`group_summary`).

Each task's and each group's draws come from their own stream, :func:`task_rng` of
``(seed, name)``: an interval does not depend on which other tasks ran beside it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tinyllm import stats

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


def summarize(
    samples: list[dict],
    results: dict,
    rng: np.random.Generator,
    n_boot: int,
    aggregations: dict[str, str | None] | None = None,
) -> dict:
    """One task's metrics from lm-eval's logged samples: for each ``"METRIC,FILTER"`` in
    ``results`` (lm-eval's aggregates), the per-document scores, n and the 95% interval by the
    metric's aggregation (``aggregations``: metric -> lm-eval's aggregation name, None for one
    of the task's own; a metric missing there: :data:`DEFAULT_AGGREGATION`, else ``mean``).

    Returns ``{"n", "doc_ids", "metrics": {key: {"value", "lo", "hi", "interval", "n"}},
    "per_item": {key: [...]}}``: ``value`` is ``results[key]``, ``per_item`` each document's
    score in ``doc_ids`` order (``[LL, weight]`` pairs for a weighted corpus metric).

    Example: samples whose ``acc`` are ``[1, 0, 1, 1]`` -> ``{"value": 0.75, "lo": 0.30,
    "hi": 0.95, "interval": "wilson", "n": 4}``; lambada's ``perplexity`` (one LL per document,
    ``exp(-mean LL)``) -> an interval in perplexity around lm-eval's value.
    """
    per = per_document(samples, results)
    doc_ids = sorted({int(s["doc_id"]) for s in samples})
    metrics, per_item = {}, {}
    for key, by_doc in per.items():
        metric = key.partition(",")[0]
        vals = [by_doc[d] for d in sorted(by_doc)]
        agg = aggregation_of(metric, aggregations)
        value = results[key]
        if isinstance(vals[0], list | tuple):
            pairs = np.asarray(vals, dtype=np.float64).reshape(len(vals), -1)
            per_item[key] = pairs.tolist()
        else:
            x = np.asarray(vals, dtype=np.float64)
            per_item[key] = x.tolist()
        if agg in CORPUS:
            ll, w = corpus_arrays(per_item[key])
            metrics[key] = corpus_interval(agg, value, ll, w, rng, n_boot)
        elif agg == "mean" and not isinstance(vals[0], list | tuple):
            metrics[key] = mean_interval(value, np.asarray(per_item[key]), rng, n_boot)
        else:  # an aggregation we do not know: lm-eval's value, no interval
            metrics[key] = _no_interval(value, len(vals))
    return {"n": len(doc_ids), "doc_ids": doc_ids, "metrics": metrics, "per_item": per_item}


def _no_interval(value: Any, n: int) -> dict:
    return {"value": float(value), "lo": None, "hi": None, "interval": None, "n": int(n)}


def is_zero_one(x: np.ndarray) -> bool:
    """Every score is 0 or 1 (a proportion: Wilson)."""
    return bool(np.isin(x, (0.0, 1.0)).all())


def mean_interval(value: Any, x: np.ndarray, rng: np.random.Generator, n_boot: int) -> dict:
    """A mean metric's interval: Wilson of ``(sum x, n)`` when every ``x`` is 0 or 1, else the
    percentile bootstrap of the mean of ``x`` (:func:`tinyllm.stats.bootstrap_ci`, ``rng``)."""
    if is_zero_one(x):
        iv = stats.wilson_interval(int(x.sum()), x.size)
        kind = "wilson"
    else:
        iv = stats.bootstrap_ci(x, rng, n_boot)
        kind = "bootstrap"
    return {"value": float(value), "lo": iv.lo, "hi": iv.hi, "interval": kind, "n": int(x.size)}


def corpus_arrays(items: list) -> tuple[np.ndarray, np.ndarray]:
    """``(LL, weight)`` arrays of a corpus metric's per-document items: ``[LL, weight]`` pairs,
    or one LL per document (weight 1, lm-eval's ``perplexity``)."""
    a = np.asarray(items, dtype=np.float64)
    if a.ndim == 1:
        return a, np.ones_like(a)
    return a[:, 0], a[:, 1] if a.shape[1] > 1 else np.ones(len(a))


def corpus_interval(
    agg: str, value: Any, ll: np.ndarray, w: np.ndarray, rng: np.random.Generator, n_boot: int
) -> dict:
    """A corpus metric's interval in its own units: the percentile bootstrap over documents
    of ``r = sum LL / sum w`` (:func:`tinyllm.stats.bootstrap_ci`, ``rng``), its ends mapped
    by :data:`CORPUS` ``[agg]`` and put in increasing order."""
    to_metric = CORPUS[agg]

    def ratio(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        i = idx.astype(np.int64)
        return ll[i].sum(axis=-1) / w[i].sum(axis=-1)

    iv = stats.bootstrap_ci(np.arange(len(ll), dtype=np.float64), rng, n_boot, ratio)
    lo, hi = sorted((float(to_metric(iv.lo)), float(to_metric(iv.hi))))
    return {"value": float(value), "lo": lo, "hi": hi, "interval": "bootstrap", "n": len(ll)}


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
    ``{"items": per-document scores, "aggregation": lm-eval's name}``.

    Mean metrics whose documents all score 0 or 1, weighted by size: that mean is the pooled
    proportion, with its Wilson interval over all the documents. Otherwise the percentile
    bootstrap of the weighted mean, each task's documents resampled within the task
    (``n_boot`` resamples from ``rng``) and aggregated by the task's own aggregation; no
    interval when a task's aggregation is unknown.

    Example: two tasks of 0/1 scores, 3 of 10 and 4 of 11 right, weighted by size -> value
    ``7/21``, the Wilson interval of (7, 21).
    """
    n = sum(len(t["items"]) for t in leaves)
    aggs = {t["aggregation"] for t in leaves}
    if not aggs <= {"mean", *CORPUS}:
        return _no_interval(value, n)
    if aggs == {"mean"} and weight_by_size:
        x = np.concatenate([np.asarray(t["items"], dtype=np.float64) for t in leaves])
        if is_zero_one(x):
            iv = stats.wilson_interval(int(x.sum()), x.size)
            return {"value": float(value), "lo": iv.lo, "hi": iv.hi, "interval": "wilson", "n": n}
    weights = np.array([len(t["items"]) if weight_by_size else 1 for t in leaves], dtype=float)
    total = np.zeros(n_boot)
    for t, v in zip(leaves, weights, strict=True):
        total += v * _resampled(t["aggregation"], t["items"], rng, n_boot)
    lo, hi = np.quantile(total / weights.sum(), [0.025, 0.975])
    return {"value": float(value), "lo": float(lo), "hi": float(hi), "interval": "bootstrap",
            "n": n}  # fmt: skip


def _resampled(agg: str, items: list, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """``n_boot`` values of one task's aggregate, each on a resample (with replacement) of its
    documents, drawn from ``rng`` in batches of at most ~4M indices."""
    if agg == "mean":
        ll, w = np.asarray(items, dtype=np.float64), None
    else:
        ll, w = corpus_arrays(items)
    size = ll.size
    out = np.empty(n_boot)
    step = max(1, min(n_boot, 4_000_000 // max(size, 1)))
    for lo in range(0, n_boot, step):
        idx = rng.integers(0, size, size=(min(step, n_boot - lo), size))
        if w is None:
            out[lo : lo + len(idx)] = ll[idx].mean(axis=-1)
        else:
            out[lo : lo + len(idx)] = CORPUS[agg](ll[idx].sum(axis=-1) / w[idx].sum(axis=-1))
    return out
