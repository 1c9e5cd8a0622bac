"""The ``lmeval`` kind: one lm-eval task run by our engine on an lm checkpoint.

A manifest entry with ``kind: lmeval`` names an lm checkpoint (any family of kind ``lm`` with
the lm-eval backend's model API: ``gpt``, ``hf``) and, as its ``data``, a local task YAML
(lm-eval's format; it may ``include`` one of lm-eval's bundled configs, and take its ``task:``
from an include). The YAML's own task is built from
:func:`tinyllm.eval.lmeval.task_files.task_config`: its ``include`` and
``dataset_kwargs.data_files`` paths, relative to the YAML's folder or absolute, are resolved
when scoring; each must lie in the task's folder, lm-eval's bundled tasks (an include) or the
folder ``options.include_path`` names, through no link there. A relative include not found in
the folder is one of lm-eval's bundled configs of the installed lm-eval, so the task folder
and the venv can each be moved.
``options.task`` naming another task of the folder is found by lm-eval's TaskManager over
``options.include_path`` (relative to the YAML's folder; default that folder), WITHOUT
indexing lm-eval's 13k bundled configs (that alone takes about a minute). The task is scored
by :func:`tinyllm.eval.lmeval.run.evaluate` with ``options.num_fewshot`` and
``options.limit``; lm-eval's few-shot and random seeds are drawn from the entry's rng. The
row's ``data_sha256`` is :func:`~tinyllm.eval.lmeval.task_files.task_data_sha256` (the YAML,
what it includes from the allowed folders, the data files, the lm-eval version for a bundled
include).

The row's metric is the task's main metric (``options.metric``; default the first of ``acc``,
``acc_norm``, ``exact_match`` that the task reports on its ``none`` filter, else on its first
filter), its per-document 0/1 scores the row's items (lm-eval's document order). Each document
is its own unit, with the Wilson interval; with ``options.cluster_key`` a document's unit is
the value of that field of the document (docs/definitions.md, "Units"), the row's units are
those clusters and its interval the cluster bootstrap over them (the Wilson interval over
documents kept as ``iid_interval``). Every metric the task reports, each with its interval
over the units and n, goes in the row's ``details.metrics``. A multiple-choice task's baseline is "chance": document ``i`` with
``k_i`` choices scores ``1 / k_i`` (a uniform guess's expected accuracy, acc and acc_norm
alike). A task config is code here as in lm-eval (``!function`` hooks are imported, templates
rendered): only list configs you trust in a manifest.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tinyllm import metrics
from tinyllm.baselines import Baseline
from tinyllm.eval.kinds.common import Kind, Scored, options_model, proportion_scored
from tinyllm.eval.lmeval import run as lmeval_run
from tinyllm.eval.lmeval.intervals import as_interval, unit_numbers
from tinyllm.eval.lmeval.task_files import (
    task_config,
    task_data_sha256,
    task_name,
)
from tinyllm.eval.text import model_tokenizer
from tinyllm.models import FAMILIES
from tinyllm.report import Entry, sha256_path
from tinyllm.stats import Method, wilson

KIND = "lmeval"
METRIC = metrics.ACC.name
INTERVAL = Method.WILSON
"""The row's interval when every unit is one document; :data:`CLUSTERED_INTERVAL` with a
cluster key whose clusters hold several documents."""
CLUSTERED_INTERVAL = Method.CLUSTER_BOOTSTRAP
ROW_METRICS = (metrics.ACC.name, metrics.ACC_NORM.name, metrics.EXACT_MATCH.name)
"""The metrics a row can report: proportions, 0/1 per document (paired comparison)."""
N_BOOT = 1000
"""Bootstrap resamples behind the intervals of the task's non-0/1 metrics (details)."""
SEED_DRAW = 2**31 - 1

Options = options_model(
    KIND, "task", "include_path", "num_fewshot", "limit", "metric", "ctx_len", "cluster_key"
)
"""The entry options the lmeval kind reads: the task and the folder of its files, the few-shot
count, the document limit, the row's metric, the backend's context length and the units' key."""


def entry_roots(opts: Options, data_path: str | os.PathLike) -> tuple[Path, ...]:
    """The folders besides its own that an lmeval entry's task files may lie in: the entry's
    ``options.include_path`` (of its :data:`Options` ``opts``, relative to the data YAML's
    folder), the user's own choice."""
    inc = opts.include_path
    if inc is None:
        return ()
    p = Path(inc)
    return (p if p.is_absolute() else Path(data_path).parent / p,)


def entry_data_sha256(entry: Entry, data_path: str | os.PathLike) -> str:
    """The ``data_sha256`` of a manifest entry's data at ``data_path``: for kind ``lmeval`` its
    task's (:func:`task_data_sha256`; its options read by
    :meth:`~tinyllm.eval.kinds.common.Kind.read_options`, so an option the kind does not read
    is a ValueError), for every other kind the file's (:func:`tinyllm.report.sha256_path`)."""
    if entry.kind == KIND:
        return task_data_sha256(data_path, entry_roots(DEFINITION.read_options(entry), data_path))
    return sha256_path(data_path)


def _check_entry(entry: Entry, opts: Options) -> None:
    fam = FAMILIES[entry.family]
    if fam.KIND != "lm":
        raise ValueError(
            f"entry {entry.name!r}: kind lmeval: expected a family of kind lm (gpt, hf, ...), "
            f"got {entry.family!r} of kind {fam.KIND!r}"
        )
    if opts.metric is not None and opts.metric not in ROW_METRICS:
        raise ValueError(
            f"entry {entry.name!r}: options.metric: expected one of {list(ROW_METRICS)}, "
            f"got {opts.metric!r}"
        )


def main_metric(metric_keys: list[str], wanted: str | None = None) -> str:
    """The ``"METRIC,FILTER"`` key a row reports, out of a task's ``metric_keys``: ``wanted``
    (or each of :data:`ROW_METRICS` in turn) on the ``none`` filter, else on the first filter
    that has it.

    Example: ``main_metric(["acc,none", "acc_norm,none"])`` -> ``"acc,none"``;
    ``main_metric(["exact_match,strict-match"])`` -> ``"exact_match,strict-match"``.
    """
    for m in (wanted,) if wanted else ROW_METRICS:
        keys = [k for k in metric_keys if k.partition(",")[0] == m]
        if keys:
            return next((k for k in keys if k == f"{m},none"), keys[0])
    want = [wanted] if wanted else list(ROW_METRICS)
    raise ValueError(f"expected the task to report one of {want}, got metrics {metric_keys}")


def _capture(samples: dict):
    """``lm_eval.simple_evaluate`` that keeps the run's logged samples in ``samples`` (the
    number of choices of each document, for the chance baseline)."""

    def run(**kw):
        # optional dependency, imported once evaluate has checked it is there (naming the extra)
        import lm_eval

        out = lm_eval.simple_evaluate(**kw)
        samples.update(out.get("samples") or {})
        return out

    return run


def chance_baseline(samples: list[dict], doc_ids: list[int]) -> Baseline | None:
    """The "chance" baseline of a multiple-choice task: document ``i`` (``doc_ids`` order)
    with ``k_i`` choices (its logged request arguments) scores ``1 / k_i``; value
    ``mean(1 / k_i)``, no interval (an expectation). None when a document has no choices
    (a generation task).

    Example: two documents of 4 choices -> items ``[0.25, 0.25]``, value 0.25.
    """
    k = {int(s["doc_id"]): len(s.get("arguments") or ()) for s in samples}
    counts = np.array([k.get(d, 0) for d in doc_ids], dtype=np.float64)
    if counts.size == 0 or (counts < 2).any():
        return None
    items = 1.0 / counts
    return Baseline(
        name="chance",
        value=float(items.mean()),
        items=items,
        details={"choices": sorted({int(c) for c in counts})},
    )


def _own_task(data_path: Path, wanted: str | None, roots: tuple) -> str | None:
    """The data YAML's ``task:`` name, its own or inherited through its includes; None when
    ``wanted`` names a task and the YAML has no single name (a group's YAML, say)."""
    name = task_name(data_path, roots)
    if name is None and wanted is None:
        raise ValueError(
            f"{data_path}: expected a 'task:' name, its own or an include's (or options.task "
            "naming the task), got none"
        )
    return name


def row_scored(res: dict, key: str, details: dict, baseline: Baseline | None, where: str) -> Scored:
    """The row of one task's result (:func:`tinyllm.eval.lmeval.run.evaluate`'s
    ``tasks[task]``) on its metric ``key``: the per-document 0/1 scores as items.

    Every unit one document (no cluster key, or one document per cluster): the Wilson interval
    (:func:`tinyllm.eval.kinds.common.proportion_scored`), no units. Clusters holding several
    documents: the units are the clusters (int64, numbered in the order they first appear among
    the documents), the interval is the task's own ``cluster_bootstrap`` entry for ``key`` (drawn
    once, from the task's stream), and the Wilson interval over documents is ``iid_interval``.
    """
    items = np.asarray(res["per_item"][key], dtype=np.float64)
    units = unit_numbers(res.get("units"))
    if units is not None and units.size != items.size:
        raise ValueError(
            f"{where}: cluster key {res['cluster_key']!r}: expected {key} on all "
            f"{units.size} documents, got {items.size}"
        )
    if units is None or np.unique(units).size == units.size:
        return proportion_scored(key.partition(",")[0], items, details, baseline)
    m = res["metrics"][key]
    iv = as_interval(m)
    iid = wilson(items, np.arange(items.size))
    return Scored(
        metric=key.partition(",")[0],
        interval=iv,
        method=iv.method,
        n=int(items.size),
        items=items,
        details=details,
        baseline=baseline,
        units=units,
        iid_interval=iid,
    )


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator, opts: Options) -> Scored:
    """The task of the YAML ``data_path`` run through lm-eval on ``model``: the row's metric
    (:func:`main_metric`) ``value = (1/n) sum_i s_i`` over the ``n`` scored documents, ``s_i``
    in {0, 1}, with its 95% interval over units (:func:`row_scored`: Wilson when every unit is
    one document, the cluster bootstrap over ``options.cluster_key``'s clusters otherwise); the
    ``s_i`` are the items.

    lm-eval's seeds (few-shot sampling, random, numpy, torch) are one integer drawn from
    ``rng``. The model is read in its own tokenizer
    (:func:`tinyllm.eval.text.model_tokenizer`); ``options.ctx_len`` caps the backend's
    ``max_length`` (default: the model's own context). Details: ``task``, ``metric_key``
    (``"METRIC,FILTER"``), ``metrics`` (every metric of the task: ``{value, lo, hi, interval,
    n, n_units, ...}``, :func:`tinyllm.eval.lmeval.run.evaluate`), ``doc_ids``,
    ``cluster_key``, ``num_fewshot``, ``limit``, ``lm_eval_version``, ``tokenizer_class``.
    Baseline: :func:`chance_baseline`.

    Example: 20 documents of which 9 are right -> value 0.45, interval (0.2582, 0.6579).
    """
    _check_entry(entry, opts)
    roots = entry_roots(opts, data_path)
    own = _own_task(data_path, opts.task, roots)
    task = opts.task or own
    include = roots[0] if roots else None
    if (
        include is None and task != own
    ):  # another task of the folder: found by lm-eval's index of it
        include = data_path.parent
    if include is not None and not include.is_dir():
        raise FileNotFoundError(f"{include}: options.include_path: expected a folder of task YAMLs")
    # the YAML's own task: its config resolved against its folder (:func:`task_config`)
    spec = task_config(data_path, roots) if task == own else task
    seed = int(rng.integers(0, SEED_DRAW))
    cluster_key = opts.cluster_key
    tok = model_tokenizer(model, entry.family)
    samples: dict = {}
    run = lmeval_run.evaluate(
        [spec],
        model,
        tok,
        include_path=include,
        include_defaults=False,
        num_fewshot=opts.num_fewshot,
        limit=opts.limit,
        seed=seed,
        n_boot=N_BOOT,
        backend={"max_length": opts.ctx_len} if opts.ctx_len is not None else {},
        simple_evaluate=_capture(samples),
        cluster_key=cluster_key,
    )
    if set(run["tasks"]) != {task}:
        raise ValueError(
            f"{data_path}: expected task {task!r} to run alone, got tasks {sorted(run['tasks'])}"
        )
    res = run["tasks"][task]
    key = main_metric(list(res["metrics"]), opts.metric)
    details = {
        "task": task,
        "metric_key": key,
        "metrics": res["metrics"],
        "doc_ids": res["doc_ids"],
        "cluster_key": cluster_key,
        "num_fewshot": opts.num_fewshot,
        "limit": opts.limit,
        "seed": seed,
        "lm_eval_version": run["lm_eval_version"],
        "tokenizer_class": type(tok).__name__,  # documents pair across tokenizers
    }
    baseline = chance_baseline(samples.get(task, []), res["doc_ids"])
    scored = row_scored(res, key, details, baseline, f"entry {entry.name!r}: task {task!r}")
    lm_value = res["metrics"][key]["value"]
    assert abs(scored.interval.value - lm_value) < 1e-9, (scored.interval.value, lm_value)
    return scored


DEFINITION = Kind(
    KIND,
    METRIC,
    INTERVAL,
    score,
    interval_options={"n_boot": N_BOOT},
    options=Options,
    also=tuple(
        (m, i)
        for m in ROW_METRICS
        for i in (INTERVAL, CLUSTERED_INTERVAL)
        if (m, i) != (METRIC, INTERVAL)
    ),
)
"""The lmeval kind (:class:`tinyllm.eval.kinds.common.Kind`): the task's main metric
(``options.metric``), the cluster bootstrap over ``options.cluster_key``'s clusters."""
