"""lm-eval tasks scored by our engine, every metric with its 95% interval (``tinyllm eval lmeval``).

:func:`evaluate` builds the tasks with lm-eval's TaskManager (so ``process_docs``,
``!function`` hooks, ``include``, ``description``, few-shot, multiple-input tasks and filters
are lm-eval's own), runs ``lm_eval.simple_evaluate`` on :class:`~tinyllm.eval.lmeval.backend.TinyLLM`
and reads the per-document scores back from its samples. A task config is code here, as in
lm-eval: it imports ``!function`` hooks and renders Jinja templates unsandboxed, so only run
configs you trust.

Intervals (SPEC.md section 4, lm-eval tasks): Wilson for a metric every document scores 0 or 1;
otherwise the percentile bootstrap over documents, drawn from ``numpy.random.default_rng(seed)``
(:func:`tinyllm.stats.bootstrap_ci`), of the metric's own aggregate -- the mean, or for corpus
metrics lm-eval's aggregation of the resampled documents' ``(LL, weight)`` pairs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tinyllm import stats
from tinyllm.eval.lmeval import require_lm_eval

CORPUS = {
    # lm-eval's corpus-level aggregations of per-document (LL, weight) pairs, vectorized over
    # bootstrap resamples: ll, w are [..., n]
    "perplexity": lambda ll, w: np.exp(-ll.mean(axis=-1)),
    "word_perplexity": lambda ll, w: np.exp(-ll.sum(axis=-1) / w.sum(axis=-1)),
    "byte_perplexity": lambda ll, w: np.exp(-ll.sum(axis=-1) / w.sum(axis=-1)),
    "bits_per_byte": lambda ll, w: -ll.sum(axis=-1) / (w.sum(axis=-1) * math.log(2)),
}
"""Corpus metrics by lm-eval's name: ``perplexity`` = ``exp(-mean LL)`` (per document LL,
lambada), ``word_perplexity`` / ``byte_perplexity`` = ``exp(-sum LL / sum words|bytes)``,
``bits_per_byte`` = ``-sum LL / (sum bytes * ln 2)``; LL in nats."""


def _check_tasks(tasks: Any) -> list[str]:
    if isinstance(tasks, str):
        tasks = [t for t in tasks.split(",") if t]
    if not tasks or not all(isinstance(t, str) and t for t in tasks):
        raise ValueError(f"tasks: expected a non-empty list of task names, got {tasks!r}")
    return list(tasks)


def load(
    hf: str | os.PathLike | None = None,
    ckpt: str | os.PathLike | None = None,
    *,
    device: str = "auto",
    dtype: str = "auto",
):
    """``(model, tokenizer)`` of a local Hugging Face folder (``hf``, its own tokenizer) or of
    one of our lm checkpoints (``ckpt``, byte tokens), exactly one of the two, on ``device`` in
    ``dtype`` by the rule of :mod:`tinyllm.device` the CLI and the zoo follow (``"auto"``: cuda
    when available, else cpu; float32 on CPU)."""
    if (hf is None) == (ckpt is None):
        raise ValueError(
            f"expected exactly one of hf=DIR or ckpt=DIR, got hf={hf!r}, ckpt={ckpt!r}"
        )
    if hf is not None:
        from tinyllm.models import hf as hf_family  # transformers: only for HF folders

        model = hf_family.load(hf, device=device, dtype=dtype, quiet=True)
        return model, hf_family.load_tokenizer(hf)
    from tinyllm.eval.single import open_lm  # our checkpoints: the CLI's and the zoo's rule
    from tinyllm.tokens import ByteTokenizer

    return open_lm(model=str(ckpt), device=device, dtype=dtype).model, ByteTokenizer()


def evaluate(
    tasks: Sequence[str] | str,
    model: Any,
    tokenizer: Any,
    *,
    include_path: str | os.PathLike | None = None,
    include_defaults: bool = True,
    num_fewshot: int | None = None,
    limit: int | None = None,
    seed: int = 0,
    n_boot: int = 1000,
    backend: dict | None = None,
    simple_evaluate: Callable | None = None,
) -> dict:
    """Score lm-eval ``tasks`` with our engine; every metric with its 95% interval and n.

    ``include_path``: a folder of task YAMLs (a YAML there may ``include`` a bundled one);
    ``include_defaults``: also index lm-eval's bundled tasks (lm-eval's default; indexing all
    of them takes about a minute). ``num_fewshot``, ``limit`` (documents per task) and ``seed``
    (lm-eval's few-shot and random seeds, and the bootstrap's) as in
    ``lm_eval.simple_evaluate``. ``backend``: keyword arguments of
    :class:`~tinyllm.eval.lmeval.backend.TinyLLM` (``rolling``, ``stride``, ``max_length``, ...).

    Returns ``{"lm_eval_version", "seed", "num_fewshot", "limit", "n_boot", "tasks": {task:
    {"n", "doc_ids", "metrics": {"METRIC,FILTER": {"value", "lo", "hi", "interval", "n"}},
    "per_item": {"METRIC,FILTER": [...]}}}}``. ``value`` is lm-eval's own aggregate;
    ``interval`` is ``"wilson"`` or ``"bootstrap"`` (SPEC.md section 4). ``per_item`` holds
    each document's score in ``doc_ids`` order (for a corpus metric its ``[LL, weight]``
    pair), for the paired permutation test between two runs.

    Example: ``evaluate(["arc_easy"], model, tok, limit=20)["tasks"]["arc_easy"]["metrics"]
    ["acc,none"]`` -> ``{"value": 0.25, "lo": 0.11, "hi": 0.47, "interval": "wilson", "n": 20}``.
    """
    require_lm_eval()
    import lm_eval  # optional dependency: the lmeval extra
    from lm_eval.tasks import TaskManager, get_task_dict

    from tinyllm.eval.lmeval.backend import TinyLLM

    names = _check_tasks(tasks)
    if include_path is not None and not os.path.isdir(include_path):
        raise ValueError(f"include_path: expected a folder of task YAMLs, got {include_path!r}")
    tm = TaskManager(
        include_path=None if include_path is None else str(include_path),
        include_defaults=include_defaults,
    )
    kw = dict(backend or {})
    if _needs_all_greedy(get_task_dict(names, tm)):
        kw.setdefault("greedy", "all")
    lm = TinyLLM(model, tokenizer, **kw)
    run = (simple_evaluate or lm_eval.simple_evaluate)(
        model=lm,
        tasks=names,
        task_manager=tm,
        num_fewshot=num_fewshot,
        limit=limit,
        log_samples=True,
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
        bootstrap_iters=0,  # our intervals replace lm-eval's stderr
    )
    rng = np.random.default_rng(seed)
    out_tasks = {}
    for task, samples in run["samples"].items():
        out_tasks[task] = summarize(samples, run["results"].get(task, {}), rng, n_boot)
    return {
        "lm_eval_version": getattr(lm_eval, "__version__", None),
        "seed": seed,
        "num_fewshot": num_fewshot,
        "limit": limit,
        "n_boot": n_boot,
        "tasks": out_tasks,
    }


def _needs_all_greedy(task_dict: dict) -> bool:
    """True when a multiple-choice task reports ``exact_match`` (lm-eval reads it from
    ``is_greedy``, which the backend then computes for every request)."""
    for v in task_dict.values():
        if isinstance(v, dict):
            if _needs_all_greedy(v):
                return True
            continue
        cfg = getattr(v, "config", None)
        metrics = [m.get("metric") for m in (getattr(cfg, "metric_list", None) or [])]
        if getattr(cfg, "output_type", None) == "multiple_choice" and "exact_match" in metrics:
            return True
    return False


def summarize(samples: list[dict], results: dict, rng: np.random.Generator, n_boot: int) -> dict:
    """One task's metrics from lm-eval's logged samples: for each ``"METRIC,FILTER"`` in
    ``results`` (lm-eval's aggregates), the per-document scores, n, and the 95% interval
    (Wilson for 0/1 scores, else the bootstrap of the aggregate over documents).

    Example: samples whose ``acc`` are ``[1, 0, 1, 1]`` -> ``{"value": 0.75, "lo": 0.30,
    "hi": 0.95, "interval": "wilson", "n": 4}``.
    """
    per: dict[str, dict[int, Any]] = {}
    for s in samples:
        filt = s.get("filter", "none")
        for key in results:
            metric, _, f = key.partition(",")
            if f == filt and metric in s:
                per.setdefault(key, {})[int(s["doc_id"])] = s[metric]
    doc_ids = sorted({int(s["doc_id"]) for s in samples})
    metrics, per_item = {}, {}
    for key, by_doc in per.items():
        metric = key.partition(",")[0]
        vals = [by_doc[d] for d in sorted(by_doc)]
        value = results[key]
        if isinstance(vals[0], list | tuple):
            pairs = np.asarray(vals, dtype=np.float64).reshape(len(vals), -1)
            per_item[key] = pairs.tolist()
            metrics[key] = _corpus_interval(metric, value, pairs, rng, n_boot)
        else:
            x = np.asarray(vals, dtype=np.float64)
            per_item[key] = x.tolist()
            metrics[key] = _mean_interval(value, x, rng, n_boot)
    return {"n": len(doc_ids), "doc_ids": doc_ids, "metrics": metrics, "per_item": per_item}


def _mean_interval(value: Any, x: np.ndarray, rng: np.random.Generator, n_boot: int) -> dict:
    if np.isin(x, (0.0, 1.0)).all():
        iv = stats.wilson_interval(int(x.sum()), x.size)
        kind = "wilson"
    else:
        iv = stats.bootstrap_ci(x, rng, n_boot)
        kind = "bootstrap"
    return {"value": float(value), "lo": iv.lo, "hi": iv.hi, "interval": kind, "n": int(x.size)}


def _corpus_interval(metric: str, value: Any, pairs: np.ndarray, rng, n_boot: int) -> dict:
    agg = CORPUS.get(metric)
    if agg is None:  # an aggregation we do not know: lm-eval's value, no interval
        return {"value": float(value), "lo": None, "hi": None, "interval": None, "n": len(pairs)}
    ll = pairs[:, 0]
    w = pairs[:, 1] if pairs.shape[1] > 1 else np.ones_like(ll)

    def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        i = idx.astype(np.int64)
        return agg(ll[i], w[i])

    iv = stats.bootstrap_ci(np.arange(len(ll), dtype=np.float64), rng, n_boot, statistic)
    return {"value": float(value), "lo": iv.lo, "hi": iv.hi, "interval": "bootstrap", "n": len(ll)}
