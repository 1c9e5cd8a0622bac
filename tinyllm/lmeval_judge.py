"""Judging lm-eval runs made anywhere (formats/lmeval-logs.md): per task, filter and metric,
each run's value with its interval, and every later run paired with the first on the same
documents, with Holm across all the rows (docs/definitions.md, "Units", "Intervals", "Paired
tests", "Holm").

:func:`judge` takes runs read by :func:`tinyllm.lmeval_logs.read_run`:

* **units**: each document its own unit, or the declared cluster of each document
  (``cluster_key``, read from the document);
* **a run's interval**: a ``mean`` of 0/1 values over single documents: Wilson
  (:func:`tinyllm.stats.wilson`); any other ``mean`` (clusters, or values that are not 0/1): the
  cluster bootstrap over units (:func:`tinyllm.stats.cluster_bootstrap`, from a fresh
  ``default_rng(seed)``); bits per byte and the perplexities: the cluster-robust ratio over units
  (:func:`tinyllm.stats.cluster_ratio` of the NLL per word, byte or document; bits per byte
  divided by ``ln 2``, a perplexity ``exp`` of the ends);
* **the paired comparison** of run k with the first run (A): the documents must be the same
  (each ``doc_id`` in both, with the same ``doc_hash`` and ``target_hash``; anything else is a
  :class:`MismatchError` naming the task, never a partial pairing); then
  :func:`tinyllm.stats.paired_difference` with ``kind="ratio"`` over the units, run k as ``a``
  and A as ``b``: a ``mean`` and bits per byte give ``delta = value_k - value_A`` in the metric's
  units; a perplexity gives the ratio ``ppl_k / ppl_A = exp(delta NLL)`` with the ends ``exp`` of
  the NLL difference's ends (``delta_kind: "ratio"``). p is the sign-flip permutation test over
  units; ``p_adjusted`` is Holm over every tested row of the judgement; the verdict ("better",
  "worse", "not distinguishable") reads the adjusted p at ``alpha`` and the metric's direction.

Metrics with other aggregations (f1, bleu, ...) are listed with lm-eval's value and no interval.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from tinyllm import __version__
from tinyllm.lmeval_logs import (
    AGGREGATIONS,
    BITS_PER_BYTE,
    MEAN,
    PERPLEXITY,
    WEIGHTED_PERPLEXITY,
    LogError,
    Run,
    TaskLog,
    exp_or_inf,
    lmeval_value,
)
from tinyllm.report import StoredRow
from tinyllm.stats import (
    ALPHA,
    BASELINE_WORDS,
    LN2,
    Method,
    estimate,
    group_units,
    holm_adjust,
    paired_difference,
    ppl_interval,
    verdict,
)

N_PERM = 10_000
N_BOOT = 2_000
RATIO_AGGS = (PERPLEXITY, WEIGHTED_PERPLEXITY)
NOT_COMPARED = "not compared"
"""The verdict of a row without a test (its ``note`` says why)."""


class MismatchError(LogError):
    """Two runs that did not score the same documents of a task: they cannot be paired."""


@dataclass(frozen=True)
class RunValue:
    """One run's value of one metric: lm-eval's value, its interval over units (``lo``, ``hi``
    None where the aggregation is not judged or there are fewer than 2 units)."""

    run: str
    task: str
    filter: str
    metric: str
    value: float
    lo: float | None
    hi: float | None
    method: str
    n: int
    n_units: int
    aggregation: str
    warning: str = ""


@dataclass(frozen=True)
class Comparison:
    """Run ``b`` against run ``a`` on one metric: ``delta = value_b - value_a`` (``delta_kind``
    ``"difference"``) or ``ppl_b / ppl_a`` (``"ratio"``) with its interval, the raw and the
    Holm-adjusted p, the verdict on ``b``, the units and the minimum detectable difference
    (``mde``, differences only). ``note``: what else the reader should know (prompts that
    differ, few units); a row without a test has ``p`` None and says why in ``note``."""

    a: str
    b: str
    task: str
    filter: str
    metric: str
    value_a: float
    value_b: float
    delta: float | None
    lo: float | None
    hi: float | None
    delta_kind: str
    p: float | None
    p_adjusted: float | None
    verdict: str
    n: int
    n_units: int
    mde: float | None
    method: str
    higher_is_better: bool
    note: str = ""


@dataclass(frozen=True)
class Judgement:
    """Runs (label -> results file, model, lm-eval version), every run's values, and each later
    run compared with the first; ``only_in``: ``(task, filter)`` keys not in every run."""

    runs: list[dict]
    values: list[RunValue]
    comparisons: list[Comparison]
    cluster_key: str | None
    seed: int
    alpha: float
    only_in: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        """The judgement as a JSON document (formats/lmeval-logs.md); non-finite numbers are
        null."""

        def clean(d: dict) -> dict:
            return {
                k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in d.items()
            }

        return {
            "runs": self.runs,
            "cluster_key": self.cluster_key,
            "seed": self.seed,
            "alpha": self.alpha,
            "values": [clean(dataclasses.asdict(v)) for v in self.values],
            "comparisons": [clean(dataclasses.asdict(c)) for c in self.comparisons],
            "only_in": self.only_in,
        }


def labels(n: int) -> list[str]:
    """``A``, ``B``, ... for ``n`` runs (``R27``, ... past 26)."""
    return [chr(65 + i) if i < 26 else f"R{i + 1}" for i in range(n)]


def _units(log: TaskLog):
    ids = log.clusters if log.clusters is not None else log.doc_ids
    return group_units(ids, log.n, name=f"{log.task} units")


def _cluster_note(log: TaskLog) -> str:
    if not log.unclustered:
        return ""
    return f"the cluster key is in no document of {log.task}: each document is a unit"


def _ratio_items(x: np.ndarray, agg: str) -> tuple[np.ndarray, np.ndarray]:
    """The NLL numerators and weights of a ratio aggregation (bits, or nats for perplexity)."""
    if agg == PERPLEXITY:
        return -x, np.ones_like(x)
    nll, w = -x[:, 0], x[:, 1]
    return (nll / LN2 if agg == BITS_PER_BYTE else nll), w


def run_value(label: str, log: TaskLog, metric: str, seed: int) -> RunValue:
    """One run's value of ``metric`` with its interval over units (module docstring)."""
    x, agg = log.values[metric], log.aggregation[metric]
    common = {"run": label, "task": log.task, "filter": log.filter, "metric": metric, "n": log.n}
    if agg not in AGGREGATIONS:
        value = log.reported.get(metric)
        return RunValue(
            value=math.nan if value is None else value,
            lo=None,
            hi=None,
            method="",
            n_units=log.n,
            aggregation=agg,
            warning=f"aggregation {agg!r} is not judged (lm-eval's value only)",
            **common,
        )
    value = lmeval_value(x, agg)
    try:
        units = _units(log)
    except ValueError as e:
        return RunValue(
            value=value, lo=None, hi=None, method="", n_units=1, aggregation=agg,
            warning=str(e), **common,
        )  # fmt: skip
    if agg == MEAN:
        zero_one = bool(np.all((x == 0) | (x == 1)))
        if zero_one and units.singletons:
            iv = estimate(Method.WILSON, x, units)
        else:
            iv = estimate(
                Method.CLUSTER_BOOTSTRAP, x, units, np.random.default_rng(seed), n_boot=N_BOOT
            )
    else:
        nll, w = _ratio_items(x, agg)
        iv = estimate(Method.CLUSTER_RATIO, nll, units, weights=w)
        if agg in RATIO_AGGS:
            iv = ppl_interval(iv)
    return RunValue(
        value=value,
        lo=float(iv.lo),
        hi=float(iv.hi),
        method=str(iv.method),
        n_units=units.n_units,
        aggregation=agg,
        warning="; ".join(w for w in (_cluster_note(log), iv.warning) if w),
        **common,
    )


def check_same_documents(a: TaskLog, b: TaskLog, la: str, lb: str) -> None:
    """Raise :class:`MismatchError`, one line naming the task, unless ``a`` and ``b`` hold the
    same documents: the same doc_ids, each with the same ``doc_hash`` and ``target_hash``."""
    ia, ib = set(a.doc_ids.tolist()), set(b.doc_ids.tolist())
    only_a, only_b = sorted(ia - ib), sorted(ib - ia)
    differ = []
    if not only_a and not only_b:
        differ = [
            int(d)
            for d, ha, hb, ta, tb in zip(
                a.doc_ids, a.doc_hash, b.doc_hash, a.target_hash, b.target_hash, strict=True
            )
            if ha != hb or ta != tb
        ]
    if only_a or only_b or differ:
        parts = []
        if only_a:
            parts.append(f"{len(only_a)} doc_ids only in {la} (first {only_a[0]})")
        if only_b:
            parts.append(f"{len(only_b)} doc_ids only in {lb} (first {only_b[0]})")
        if differ:
            parts.append(
                f"{len(differ)} doc_ids with another document or target (first {differ[0]})"
            )
        raise MismatchError(
            f"task {a.task} (filter {a.filter}): expected runs {la} ({a.samples_file}) and {lb} "
            f"({b.samples_file}) to score the same documents, got {'; '.join(parts)}: not paired"
        )


def compare_logs(
    a: TaskLog, b: TaskLog, la: str, lb: str, metric: str, seed: int, n_perm: int, alpha: float
) -> Comparison:
    """Run ``lb`` (``b``) against run ``la`` (``a``) on ``metric``, on the same documents
    (:func:`check_same_documents` first); ``p_adjusted`` is ``p`` until :func:`judge` adjusts
    it across the rows."""
    agg = a.aggregation[metric]
    hib = a.higher_is_better[metric]
    va, vb = lmeval_value(a.values[metric], agg), lmeval_value(b.values[metric], agg)
    ratio = agg in RATIO_AGGS
    base = {
        "a": la, "b": lb, "task": a.task, "filter": a.filter, "metric": metric,
        "value_a": va, "value_b": vb, "n": a.n, "higher_is_better": hib,
        "delta_kind": "ratio" if ratio else "difference",
    }  # fmt: skip
    prompts = sum(pa != pb for pa, pb in zip(a.prompt_hash, b.prompt_hash, strict=True))
    notes = [f"prompts differ in {prompts} of {a.n} documents"] if prompts else []
    if a.unclustered:
        notes.append(_cluster_note(a))

    def untested(why: str, n_units: int = 0) -> Comparison:
        return Comparison(
            delta=None, lo=None, hi=None, p=None, p_adjusted=None,
            verdict=NOT_COMPARED, n_units=n_units, mde=None, method="",
            note="; ".join([*notes, why]), **base,
        )  # fmt: skip

    if agg not in AGGREGATIONS:
        return untested(f"aggregation {agg!r} is not judged")
    try:
        units = _units(a)
    except ValueError as e:
        return untested(str(e), 1)
    if agg == MEAN:
        xa, xb, w = a.values[metric], b.values[metric], None
    else:
        xa, w = _ratio_items(a.values[metric], agg)
        xb, wb = _ratio_items(b.values[metric], agg)
        if not np.array_equal(w, wb):
            return untested("weights (words or bytes) differ between the runs", units.n_units)
    pd = paired_difference(
        xb, xa, units, np.random.default_rng(seed), kind="ratio", weights=w,
        n_perm=n_perm, confidence=1.0 - alpha,
    )  # fmt: skip
    if pd.warning:
        notes.append(pd.warning)
    if ratio:
        delta, lo, hi, mde = exp_or_inf(pd.delta), exp_or_inf(pd.lo), exp_or_inf(pd.hi), None
        sign = pd.delta
    else:
        delta, lo, hi, mde, sign = pd.delta, pd.lo, pd.hi, pd.mde, pd.delta
    direction = "higher" if hib else "lower"
    return Comparison(
        delta=float(delta),
        lo=float(lo),
        hi=float(hi),
        p=float(pd.p),
        p_adjusted=float(pd.p),
        verdict=verdict(pd.p, sign, direction, alpha=alpha, words=BASELINE_WORDS),
        n_units=pd.n_units,
        mde=None if mde is None else float(mde),
        method=str(pd.method),
        note="; ".join(notes),
        **base,
    )


def judge(
    runs: Sequence[Run],
    *,
    cluster_key: str | None = None,
    seed: int = 0,
    n_perm: int = N_PERM,
    alpha: float = ALPHA,
) -> Judgement:
    """Every run's values with their intervals, and every later run paired with the first on
    each ``(task, filter, metric)`` both hold; Holm over all tested rows; the verdict of each row
    from its adjusted p (module docstring). ``runs`` must have been read with the same
    ``cluster_key``. Raises :class:`MismatchError` (one line naming the task) when two runs
    scored different documents of a task they share, and ValueError for fewer than 2 runs.
    """
    if len(runs) < 2:
        raise ValueError(f"judge: expected at least 2 runs, got {len(runs)}")
    names = labels(len(runs))
    first = runs[0]
    keys = sorted(k for k in first.tasks if all(k in r.tasks for r in runs[1:]))
    for r, lb in zip(runs[1:], names[1:], strict=True):
        for k in keys:
            check_same_documents(first.tasks[k], r.tasks[k], names[0], lb)
    values = [
        run_value(name, log, m, seed)
        for name, r in zip(names, runs, strict=True)
        for log in r.tasks.values()
        for m in log.values
    ]
    comparisons = []
    for r, lb in zip(runs[1:], names[1:], strict=True):
        for k in keys:
            a, b = first.tasks[k], r.tasks[k]
            for m in a.values:
                if m in b.values:
                    comparisons.append(compare_logs(a, b, names[0], lb, m, seed, n_perm, alpha))
    values.sort(key=lambda v: (v.task, v.filter, v.metric, v.run))
    comparisons.sort(key=lambda c: (c.task, c.filter, c.metric, c.b))
    adjusted = holm_adjust([c.p for c in comparisons])
    comparisons = [
        dataclasses.replace(
            c,
            p_adjusted=adj,
            verdict=verdict(
                adj,
                _sign(c),
                "higher" if c.higher_is_better else "lower",
                alpha=alpha,
                words=BASELINE_WORDS,
            ),
        )  # fmt: skip
        if c.p is not None
        else c
        for c, adj in zip(comparisons, adjusted, strict=True)
    ]
    every = set().union(*(r.tasks for r in runs))
    only_in = [
        {
            "task": t,
            "filter": f,
            "runs": [n for n, r in zip(names, runs, strict=True) if (t, f) in r.tasks],
        }
        for t, f in sorted(every - set(keys))
    ]
    info = [
        {
            "label": n,
            "results_file": str(r.results_file),
            "model": r.model,
            "lm_eval_version": r.lm_eval_version,
        }
        for n, r in zip(names, runs, strict=True)
    ]
    return Judgement(info, values, comparisons, cluster_key, seed, alpha, only_in)


def _sign(c: Comparison) -> float:
    """The sign the verdict reads: the difference, or the log of the ratio."""
    if c.delta is None:
        return 0.0
    if c.delta_kind == "ratio":
        return 0.0 if c.delta == 1.0 else (1.0 if c.delta > 1.0 else -1.0)
    return c.delta


# ------------------------------------------------------------ a run as a store release

RELEASE_METRICS = ("acc", "acc_norm", "exact_match")
"""The metrics a run imports as release rows: 0/1 per document, a mean (the report's metrics
with per-item scores: tinyllm/schemas/eval-results.schema.json)."""
ROW_NAME = re.compile(r"[^a-z0-9_-]+")


def row_name(task: str, flt: str, metric: str) -> str:
    """A release row's name: ``<task>-<metric>`` (``-<filter>`` unless ``none``), lower case,
    other characters as ``-``, at most 64 characters.

    Example: ``row_name("gsm8k", "strict-match", "exact_match")`` ->
    ``"gsm8k-exact_match-strict-match"``.
    """
    parts = [task, metric] + ([flt] if flt != "none" else [])
    return ROW_NAME.sub("-", "-".join(parts).lower()).strip("-_")[:64] or "task"


def _created_at(doc_date: Any) -> str:
    when = (
        doc_date if isinstance(doc_date, int | float) and not isinstance(doc_date, bool) else None
    )
    t = datetime.fromtimestamp(when, UTC) if when is not None else datetime.now(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def release_report(
    run: Run, release: str, *, cluster_key: str | None = None, seed: int = 0
) -> tuple[dict, dict[str, np.ndarray], dict[str, np.ndarray], list[str]]:
    """One run as a release of a store (:func:`tinyllm.publish.publish_run`'s arguments):
    ``(report, items, units, left_out)``.

    A row (kind ``lmeval``) per task, filter and metric of :data:`RELEASE_METRICS` whose values
    are 0/1: lm-eval's value, the run's interval (:func:`run_value`), ``n`` documents,
    ``n_units`` units, the per-document values as its items, the cluster of each document as its
    units (none when each document is a unit), ``data_sha256`` the sha256 of the documents'
    ``doc_hash`` and ``target_hash`` in doc_id order (so two releases compare a row only on the
    same documents), ``checkpoint`` the run's model; every other metric's name is in
    ``left_out``. ``created_at`` is the run's own date (the results file's ``date``).
    """
    rows: list[StoredRow] = []
    items, units, left_out = {}, {}, []
    for (task, flt), log in sorted(run.tasks.items()):
        for metric, x in log.values.items():
            ok = metric in RELEASE_METRICS and log.aggregation[metric] == MEAN
            if not ok or not np.all((x == 0) | (x == 1)):
                left_out.append(f"{task} {metric} ({flt})")
                continue
            name = row_name(task, flt, metric)
            if name in items:
                raise LogError(
                    f"{run.results_file}: two rows named {name!r}: expected unique names"
                )
            v = run_value("A", log, metric, seed)
            h = hashlib.sha256("".join(log.doc_hash + log.target_hash).encode()).hexdigest()
            items[name] = x
            if log.clusters is not None:
                units[name] = np.asarray(_units(log).index, dtype=np.int64)
            rows.append(
                StoredRow(
                    name=name, family="lm-eval", kind="lmeval", metric=metric,
                    value=v.value, lo=v.lo, hi=v.hi, interval=v.method or None,
                    n=log.n, n_units=v.n_units, status="ok", error=None,
                    reason=None, checkpoint_sha256=None, data_sha256=h,
                    seconds=0.0, items=None, units=None,
                    checkpoint=run.model, data=f"lm-eval task {task}",
                    options={"filter": flt, "num_fewshot": run.n_shot.get(task)},
                    interval_warning=v.warning or None,
                    details={
                        "lm_eval": {
                            "task": task, "filter": flt, "lm_eval_version": run.lm_eval_version,
                            "results_file": str(run.results_file), "cluster_key": cluster_key,
                        }
                    },
                )
            )  # fmt: skip
    if not rows:
        raise LogError(
            f"{run.results_file}: expected at least one task with a 0/1 metric of "
            f"{list(RELEASE_METRICS)} to import, got none ({', '.join(left_out[:5])})"
        )
    manifest = json.dumps(
        {"lm_eval": run.model, "tasks": sorted({t for t, _ in run.tasks})},
        sort_keys=True,
        separators=(",", ":"),
    )
    report = {
        "schema_version": 1,
        "suite": "lm-eval",
        "release": release,
        "created_at": _created_at(run.date),
        "seed": seed,
        "tinyllm_version": __version__,
        "manifest_sha256": hashlib.sha256(manifest.encode()).hexdigest(),
        "rows": [r.model_dump(exclude_unset=True) for r in rows],
    }
    return report, items, units, left_out
