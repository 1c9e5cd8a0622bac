"""lm-eval runs made anywhere, read back from their ``--output_path`` folders
(formats/lmeval-logs.md): the results JSON and, from ``--log_samples``, each task's per-document
samples, so that :mod:`tinyllm.lmeval_judge` can give their intervals and paired tests.

lm-evaluation-harness 0.4 (``EvaluationTracker``) writes, for one run::

    <output_path>/<model_name_sanitized>/results_<date_id>.json
    <output_path>/<model_name_sanitized>/samples_<task>_<date_id>.jsonl   (one per task)

Each samples line is one document under one filter: ``doc_id``, ``doc``, ``filter``,
``metrics`` (the names scored), ``doc_hash``, ``prompt_hash``, ``target_hash`` and each metric's
per-document value: a number (``acc``, ``exact_match``; ``perplexity``: the log-likelihood) or
a ``[log-likelihood, weight]`` pair (``word_perplexity``, ``byte_perplexity``,
``bits_per_byte``). :func:`read_run` reads one run into a :class:`Run`: per task and filter
(:class:`TaskLog`) the documents in ``doc_id`` order with their hashes and every metric's
per-document values, each metric's aggregation (:data:`AGGREGATIONS`) and direction, and
lm-eval's own value from the results file.

Every file is untrusted: a regular file reached through no symbolic link (opened with
``O_NOFOLLOW``, a FIFO or a device refused before anything is read), of bounded size
(:data:`MAX_RESULTS_BYTES`, :data:`MAX_SAMPLES_BYTES`, :data:`MAX_LINE_BYTES`); a task name from
the results file must be a plain file-name part. Every refusal is a :class:`LogError`, one line
naming the file: another lm-eval version or layout, a results file without samples (a run
without ``--log_samples``), samples that do not give the results file's values.

Imports nothing of the project but :mod:`tinyllm.safeio`.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tinyllm import safeio

MAX_RESULTS_BYTES = 64 << 20
MAX_SAMPLES_BYTES = int(os.environ.get("TINYLLM_LMEVAL_MAX_SAMPLES_BYTES", 2 << 30))
"""The largest samples file read (2 GiB; ``TINYLLM_LMEVAL_MAX_SAMPLES_BYTES`` sets another)."""
MAX_LINE_BYTES = 64 << 20
MAX_ENTRIES = 100_000
"""The most entries of a folder looked at while finding a run's files."""

MEAN, PERPLEXITY, WEIGHTED_PERPLEXITY, BITS_PER_BYTE = (
    "mean",
    "perplexity",
    "weighted_perplexity",
    "bits_per_byte",
)
AGGREGATIONS = (MEAN, PERPLEXITY, WEIGHTED_PERPLEXITY, BITS_PER_BYTE)
"""The aggregations judged, as lm-eval computes them from per-document values ``x_i``
(``(ll_i, w_i)`` pairs for the weighted two):

* ``mean``: ``sum x_i / n`` (acc, acc_norm, exact_match, ...);
* ``perplexity``: ``exp(-sum ll_i / n)``;
* ``weighted_perplexity``: ``exp(-sum ll_i / sum w_i)`` (words or bytes);
* ``bits_per_byte``: ``-sum ll_i / (sum w_i ln 2)``.

Other aggregations (f1, mcc, bleu, ...: corpus statistics) are read and listed, not judged."""

DEFAULT_AGGREGATION = {
    "perplexity": PERPLEXITY,
    "word_perplexity": WEIGHTED_PERPLEXITY,
    "byte_perplexity": WEIGHTED_PERPLEXITY,
    "bits_per_byte": BITS_PER_BYTE,
    "mcc": "matthews_corrcoef",
    "f1": "f1",
    "bleu": "bleu",
    "chrf": "chrf",
    "ter": "ter",
    "brier_score": "brier_score",
}
"""lm-eval's registered aggregation of a metric whose config names none; every other metric is
a ``mean`` (lm_eval/api/metrics.py)."""
LOWER_IS_BETTER = frozenset(
    {"perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte", "ter", "brier_score"}
)

SAMPLE_FIELDS = ("doc_id", "doc", "filter", "metrics", "doc_hash", "prompt_hash", "target_hash")
"""What every samples line of lm-eval 0.4.x (``--log_samples``) holds."""
RESULT_KEYS = ("results", "configs")
NOT_METRICS = frozenset({"alias", "name", "sample_len", "samples", " "})
DATE = re.compile(r"[0-9T:.\-]+")


class LogError(ValueError):
    """An lm-eval output folder or file that cannot be read as a run: one line naming it."""


@dataclass(frozen=True, eq=False)
class TaskLog:
    """One task of one run under one filter, its documents in ``doc_id`` order.

    * ``doc_ids``: ``[n]`` int64; ``doc_hash``, ``target_hash``, ``prompt_hash``: one per doc;
    * ``values``: metric -> per-document values, ``[n]`` (``mean``, ``perplexity``) or
      ``[n, 2]`` (log-likelihood, weight) float64;
    * ``aggregation``, ``higher_is_better``: metric -> lm-eval's aggregation and direction;
    * ``reported``: metric -> lm-eval's value in the results file (None where it has none);
    * ``clusters``: the declared cluster of each document (``cluster_key``), else None;
      ``unclustered``: a cluster key was asked for and none of the task's documents has it (each
      document is then its own unit);
    * ``samples_file``: where the documents came from.
    """

    task: str
    filter: str
    doc_ids: np.ndarray
    doc_hash: tuple[str, ...]
    target_hash: tuple[str, ...]
    prompt_hash: tuple[str, ...]
    values: dict[str, np.ndarray]
    aggregation: dict[str, str]
    higher_is_better: dict[str, bool]
    reported: dict[str, float | None]
    samples_file: Path
    clusters: tuple | None = None
    unclustered: bool = False

    @property
    def n(self) -> int:
        """The number of documents."""
        return int(self.doc_ids.size)


@dataclass(frozen=True)
class Run:
    """One lm-eval run: its results file, model name, lm-eval version, n-shot per task, its
    :class:`TaskLog` per ``(task, filter)``, and when it ran (``date``: the results file's,
    seconds since the epoch; None without one)."""

    results_file: Path
    model: str
    lm_eval_version: str
    n_shot: dict
    date: float | None = None
    tasks: dict[tuple[str, str], TaskLog] = field(default_factory=dict)


# ---------------------------------------------------------------------- bounded reads


def _open(path: Path, max_bytes: int, what: str) -> tuple[int, int]:
    """An fd of the regular file ``path`` opened through no symbolic link, and its size."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise LogError(f"{what} {path}: not found") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise LogError(f"{what} {path}: expected a regular file, got a symbolic link") from None
        raise LogError(f"{what} {path}: expected a readable file, got: {e.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
        os.close(fd)
        got = safeio.mode_kind(st.st_mode)
        if stat.S_ISREG(st.st_mode):
            got = f"{st.st_size} bytes (at most {max_bytes})"
        raise LogError(f"{what} {path}: expected a regular file, got {got}")
    return fd, st.st_size


def _read_json(path: Path) -> dict:
    fd, size = _open(path, MAX_RESULTS_BYTES, "results file")
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_RESULTS_BYTES + 1)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise LogError(f"results file {path}: expected JSON, got: {e}") from None
    if not isinstance(doc, dict):
        raise LogError(f"results file {path}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _lines(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` of each non-empty line of the JSONL file ``path``."""
    fd, size = _open(path, MAX_SAMPLES_BYTES, "samples file")
    left = size + 1
    with os.fdopen(fd, "rb") as f:
        for i, line in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            left -= len(line)
            if len(line) > MAX_LINE_BYTES or left <= 0:
                raise LogError(
                    f"samples file {path}: line {i}: expected at most {MAX_LINE_BYTES} bytes"
                )
            if not line.strip():
                continue
            try:
                obj = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as e:
                raise LogError(f"samples file {path}: line {i}: expected JSON, got: {e}") from None
            if not isinstance(obj, dict):
                raise LogError(f"samples file {path}: line {i}: expected a JSON object")
            yield i, obj


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            out = []
            for e in it:
                out.append(e)
                if len(out) > MAX_ENTRIES:
                    raise LogError(f"{folder}: expected at most {MAX_ENTRIES} entries, got more")
            return out
    except (FileNotFoundError, NotADirectoryError):
        raise LogError(f"{folder}: not found (expected an lm-eval --output_path folder)") from None


# ------------------------------------------------------------------------ the layout


def _results_in(folder: Path) -> list[Path]:
    return [
        Path(e.path)
        for e in _entries(folder)
        if e.name.startswith("results_")
        and e.name.endswith(".json")
        and not e.is_symlink()
        and e.is_file(follow_symlinks=False)
    ]


def _date_id(name: str) -> str:
    return Path(name).stem.rsplit("_", 1)[-1]


def find_results(path: str | os.PathLike) -> Path:
    """The results file of the run at ``path``: the file itself; a folder holding
    ``results_<date>.json`` files (the latest, by its date, as lm-eval's own tools take it); or an
    ``--output_path`` folder whose one model folder (no symbolic link) holds them.

    Raises LogError naming the folder when there is no results file, or when results of more than
    one model are there (name the model's folder)."""
    p = Path(path)
    kind = safeio.path_kind(p)
    if kind is None:
        raise LogError(f"{p}: not found (expected an lm-eval --output_path folder or results file)")
    if kind != "a folder" and p.is_file():
        return p
    found = _results_in(p)
    if not found:
        models = [
            Path(e.path)
            for e in _entries(p)
            if e.is_dir(follow_symlinks=False) and _results_in(Path(e.path))
        ]
        if len(models) > 1:
            names = ", ".join(sorted(m.name for m in models)[:5])
            raise LogError(
                f"{p}: expected the results of one model, got {len(models)} model folders "
                f"({names}): name one of them"
            )
        if models:
            found = _results_in(models[0])
    if not found:
        raise LogError(
            f"{p}: expected lm-eval results (results_<date>.json, in the folder or in its model "
            f"folder), got none"
        )
    return max(found, key=lambda f: (_date_id(f.name), f.name))


def _task_file_part(task: str, where: Path) -> str:
    if not task or Path(task).name != task or task in (".", "..") or "\0" in task:
        raise LogError(
            f"results file {where}: expected task names that are file-name parts, got {task!r}"
        )
    return task


# --------------------------------------------------------------------- the results


def _version(doc: dict, where: Path) -> str:
    v = doc.get("lm_eval_version")
    if v is None:
        return ""
    if not isinstance(v, str) or not v.startswith("0.4."):
        raise LogError(
            f"results file {where}: expected results of lm-eval 0.4.x, got lm_eval_version {v!r}"
        )
    return v


def _metric_facts(cfg: dict, task: str, hib: dict) -> tuple[dict[str, str], dict[str, bool]]:
    agg: dict[str, str] = {}
    better: dict[str, bool] = {}
    for m in cfg.get("metric_list") or ():
        if isinstance(m, dict) and isinstance(m.get("metric"), str):
            a = m.get("aggregation")
            if isinstance(a, str):
                agg[m["metric"]] = a
            elif a is not None:
                agg[m["metric"]] = "custom"
    for name, v in (hib.get(task) or {}).items():
        if isinstance(v, bool):
            better[name] = v
    return agg, better


def _reported(results: dict, task: str, flt: str) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, v in (results.get(task) or {}).items():
        if not isinstance(key, str) or "," not in key:
            continue
        metric, f = key.split(",", 1)
        if f != flt or metric.endswith("_stderr") or metric in NOT_METRICS:
            continue
        number = isinstance(v, int | float) and not isinstance(v, bool)
        out[metric] = float(v) if number else None
    return out


# --------------------------------------------------------------------- the samples


def _value(v, agg: str, metric: str, where: str):
    """One document's value of ``metric``: a number (bool as 0/1), or a ``[ll, weight]`` pair."""
    if agg in (WEIGHTED_PERPLEXITY, BITS_PER_BYTE):
        ok = (
            isinstance(v, list)
            and len(v) == 2
            and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
        )
        if not ok:
            raise LogError(
                f"{where}: {metric}: expected a [log-likelihood, weight] pair, got {v!r:.60}"
            )
        return (float(v[0]), float(v[1]))
    if isinstance(v, bool):
        return float(v)
    if not isinstance(v, int | float):
        raise LogError(f"{where}: {metric}: expected a number, got {v!r:.60}")
    return float(v)


def _cluster(doc, key: str):
    """The document's cluster id: ``doc[key]`` (a list or an object as its JSON), or None."""
    v = doc.get(key) if isinstance(doc, dict) else None
    if v is None or isinstance(v, str | int | float | bool):
        return v
    return json.dumps(v, sort_keys=True)


def _clusters(f: dict, key: str | None, path: Path) -> tuple[list | None, bool]:
    """A filter's cluster ids, or None with ``unclustered`` when no document has the key; some
    documents without it is an error naming the first."""
    if key is None:
        return None, False
    ids = f["clusters"]
    if all(c is None for c in ids):
        return None, True
    if any(c is None for c in ids):
        j = next(i for i, c in enumerate(ids) if c is None)
        raise LogError(
            f"samples file {path}: doc_id {f['ids'][j]}: expected the cluster key {key!r} in "
            f"every document of the task (others have it), got none"
        )
    return ids, False


def _read_samples(path: Path, task: str, facts: dict, cluster_key: str | None) -> dict:
    """Per filter: ``{"ids": [...], "hash": [...], "target": [...], "prompt": [...],
    "values": {metric: [...]}, "clusters": [...]}``."""
    agg_of, _ = facts
    per: dict[str, dict] = {}
    for i, s in _lines(path):
        where = f"samples file {path}: line {i}"
        missing = [k for k in SAMPLE_FIELDS if k not in s]
        if missing:
            raise LogError(
                f"{where}: expected lm-eval 0.4 samples ({', '.join(SAMPLE_FIELDS)} on every "
                f"line), got none of {missing} (written by another lm-eval version?)"
            )
        doc_id, flt, metrics = s["doc_id"], s["filter"], s["metrics"]
        if isinstance(doc_id, bool) or not isinstance(doc_id, int) or not isinstance(flt, str):
            raise LogError(f"{where}: expected an integer doc_id and a string filter")
        if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
            raise LogError(f"{where}: expected metrics, a list of names")
        hashes = [s[k] for k in ("doc_hash", "target_hash", "prompt_hash")]
        if not all(isinstance(h, str) for h in hashes):
            raise LogError(f"{where}: expected doc_hash, target_hash and prompt_hash strings")
        f = per.setdefault(
            flt, {"ids": [], "hash": [], "target": [], "prompt": [], "values": {}, "clusters": []}
        )
        if f["ids"] and f["metrics"] != metrics:
            raise LogError(f"{where}: expected the metrics {f['metrics']} of line 1, got {metrics}")
        f["metrics"] = metrics
        f["ids"].append(doc_id)
        f["hash"].append(hashes[0])
        f["target"].append(hashes[1])
        f["prompt"].append(hashes[2])
        for m in metrics:
            if m not in s:
                raise LogError(f"{where}: expected the value of {m!r} (in metrics), got none")
            f["values"].setdefault(m, []).append(_value(s[m], aggregation(m, agg_of), m, where))
        if cluster_key is not None:
            f["clusters"].append(_cluster(s["doc"], cluster_key))
    if not per:
        raise LogError(f"samples file {path}: expected the documents of task {task!r}, got none")
    return per


def aggregation(metric: str, configured: dict[str, str]) -> str:
    """The aggregation of ``metric``: the task config's, else lm-eval's registered one
    (:data:`DEFAULT_AGGREGATION`), else ``mean``."""
    return configured.get(metric) or DEFAULT_AGGREGATION.get(metric, MEAN)


def lmeval_value(values: np.ndarray, agg: str) -> float:
    """A metric's value from its per-document values, as lm-eval aggregates them
    (:data:`AGGREGATIONS`). Example: ``lmeval_value([[-4, 2], [-2, 1]], "bits_per_byte")`` ->
    ``6 / (3 ln 2) = 2.8854``."""
    x = np.asarray(values, dtype=np.float64)
    if agg == MEAN:
        return math.fsum(x) / x.size
    if agg == PERPLEXITY:
        return exp_or_inf(-math.fsum(x) / x.size)
    ratio = -math.fsum(x[:, 0]) / math.fsum(x[:, 1])
    return exp_or_inf(ratio) if agg == WEIGHTED_PERPLEXITY else ratio / math.log(2)


def exp_or_inf(v: float) -> float:
    """``exp(v)``, or ``inf`` where it overflows."""
    try:
        return math.exp(v)
    except OverflowError:
        return math.inf


def _task_logs(path: Path, task: str, doc: dict, per: dict, facts, cluster_key) -> dict:
    agg_of, better = facts
    results = doc["results"]
    n_samples = (doc.get("n-samples") or {}).get(task) or {}
    out = {}
    for flt, f in per.items():
        ids = np.asarray(f["ids"], dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        ids = ids[order]
        dup = np.flatnonzero(ids[1:] == ids[:-1])
        if dup.size:
            raise LogError(
                f"samples file {path}: filter {flt!r}: expected each doc_id once, got doc_id "
                f"{int(ids[dup[0]])} twice"
            )
        effective = n_samples.get("effective")
        if isinstance(effective, int) and effective != ids.size:
            raise LogError(
                f"samples file {path}: filter {flt!r}: expected {effective} documents (the results "
                f"file's n-samples), got {ids.size}"
            )
        reported = _reported(results, task, flt)
        clusters, unclustered = _clusters(f, cluster_key, path)
        values, aggs, hib = {}, {}, {}
        for m, v in f["values"].items():
            a = aggregation(m, agg_of)
            arr = np.asarray(v, dtype=np.float64)[order]
            if not np.all(np.isfinite(arr)):
                raise LogError(
                    f"samples file {path}: {m}: expected finite values, got {arr[~np.isfinite(arr)][0]}"
                )
            values[m], aggs[m] = arr, a
            hib[m] = better.get(m, m not in LOWER_IS_BETTER)
            got, want = (lmeval_value(arr, a) if a in AGGREGATIONS else None), reported.get(m)
            if (
                got is not None
                and want is not None
                and not math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
            ):
                raise LogError(
                    f"samples file {path}: {task} {m} ({flt}): expected the samples to give the "
                    f"results file's {want!r}, got {got!r} (samples of another run?)"
                )
        pick = lambda xs, order=order: tuple(xs[j] for j in order)  # noqa: E731
        out[(task, flt)] = TaskLog(
            task=task,
            filter=flt,
            doc_ids=ids,
            doc_hash=pick(f["hash"]),
            target_hash=pick(f["target"]),
            prompt_hash=pick(f["prompt"]),
            values=values,
            aggregation=aggs,
            higher_is_better=hib,
            reported=reported,
            samples_file=path,
            clusters=None if clusters is None else pick(clusters),
            unclustered=unclustered,
        )
    return out


def read_run(path: str | os.PathLike, *, cluster_key: str | None = None) -> Run:
    """The lm-eval run at ``path`` (:func:`find_results`), every task of its results file with
    its samples (``samples_<task>_<date_id>.jsonl`` beside the results file).

    ``cluster_key``: a field of each document (``doc[cluster_key]``) whose value is the
    document's cluster; a task none of whose documents has it keeps each document its own unit
    (:attr:`TaskLog.unclustered`); a task where only some have it is an error.

    Every refusal is a LogError, one line naming the file: a results file of another lm-eval
    version or without ``results``/``configs``; a task without its samples file (a run without
    ``--log_samples``); a samples line without the fields of :data:`SAMPLE_FIELDS`; a doc_id
    twice; fewer or more documents than the results' ``n-samples``; samples whose aggregate
    differs from the results file's value (to 1e-9, relative).
    """
    results_file = find_results(path)
    doc = _read_json(results_file)
    version = _version(doc, results_file)
    missing = [k for k in RESULT_KEYS if not isinstance(doc.get(k), dict)]
    if missing:
        raise LogError(
            f"results file {results_file}: expected lm-eval 0.4 results with {' and '.join(RESULT_KEYS)}, "
            f"got none of {missing}"
        )
    date_id = _date_id(results_file.name)
    folder = results_file.parent
    hib_all = doc.get("higher_is_better") if isinstance(doc.get("higher_is_better"), dict) else {}
    run = Run(
        results_file=results_file,
        model=str(doc.get("model_name") or doc.get("model_name_sanitized") or folder.name),
        lm_eval_version=version,
        n_shot=doc.get("n-shot") if isinstance(doc.get("n-shot"), dict) else {},
        date=doc.get("date") if isinstance(doc.get("date"), int | float) else None,
    )
    for task, cfg in doc["configs"].items():
        name = _task_file_part(task, results_file)
        samples = folder / f"samples_{name}_{date_id}.jsonl"
        if safeio.path_kind(samples) is None:
            raise LogError(
                f"results file {results_file}: expected the samples of task {task!r} beside it "
                f"({samples.name}), got none (run lm-eval with --log_samples)"
            )
        facts = _metric_facts(cfg if isinstance(cfg, dict) else {}, task, hib_all)
        per = _read_samples(samples, task, facts, cluster_key)
        run.tasks.update(_task_logs(samples, task, doc, per, facts, cluster_key))
    if not run.tasks:
        raise LogError(f"results file {results_file}: expected at least one task, got none")
    return run
