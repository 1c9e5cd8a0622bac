"""lm-eval's own results files for a run of :func:`tinyllm.eval.lmeval.run.evaluate`
(``eval lmeval --output_path DIR [--log_samples]``), written by lm-eval's ``EvaluationTracker``:

```text
<output_path>/<model_name_sanitized>/results_<date_id>.json
<output_path>/<model_name_sanitized>/samples_<task>_<date_id>.jsonl     with --log_samples
```

The results file is lm-eval's (``results`` -> task -> ``"METRIC,FILTER"`` and
``"METRIC_stderr,FILTER"``, ``n-samples``, ``configs``, ``versions``, ``config``, ...), with
two changes: a metric that is a mean over documents gets our standard error as its
``METRIC_stderr`` (lm-eval's own bootstrap is off in our run: ``"N/A"`` stays for the ratio
metrics, whose intervals are in ``tinyllm``), and a ``tinyllm`` block beside ``results`` holds
each task's and group's metrics with our 95% interval and n (``{"seed", "n_boot",
"cluster_key", "tasks": {task: {"METRIC,FILTER": {"value", "lo", "hi", "interval", "n",
"n_units", "se", "warning"}}}, "groups": {...}}``). lm-eval's readers and
:mod:`tinyllm.lmeval_logs` (``tinyllm judge``) read these files as any lm-eval run's.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

RATIO_METRICS = frozenset({"perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte"})
"""lm-eval's corpus metrics: their ``se`` is not in the metric's own units, so their
``METRIC_stderr`` is left as lm-eval wrote it."""

OURS = ("value", "lo", "hi", "interval", "n", "n_units", "se", "warning")
"""The keys of each metric in the ``tinyllm`` block."""


def model_args_string(model_args: str | None, hf: str | None, ckpt: str | None) -> str:
    """The ``model_args`` lm-eval records (and names the model folder by): the user's
    ``--model_args``, else ``pretrained=DIR`` of ``--hf`` or ``--model``."""
    if model_args:
        return model_args
    return f"pretrained={hf if hf is not None else ckpt}"


def write(
    lm_eval_run: dict,
    out: dict,
    output_path: str | os.PathLike,
    *,
    model_args: str,
    log_samples: bool = False,
) -> list[Path]:
    """Write ``lm_eval_run`` (``simple_evaluate``'s answer, from ``evaluate(lm_eval_run=...)``)
    with ``out``'s intervals (``evaluate``'s answer) under ``output_path`` as lm-eval's CLI
    does (``EvaluationTracker.save_results_aggregated``, then ``save_results_samples`` per
    task with ``log_samples``); returns the files written, the results file first.

    ``output_path`` ending in ``.json`` is lm-eval's other form: ``<stem>_<date_id>.json``
    beside it. lm-eval logs a failed write and goes on; here a file that is not there after
    the write is an OSError naming it."""
    from lm_eval.loggers import EvaluationTracker  # the lmeval extra

    if not lm_eval_run.get("results"):
        raise ValueError("lm_eval_run: expected simple_evaluate's answer with results, got none")
    run = {k: v for k, v in lm_eval_run.items() if k != "samples"}
    samples = lm_eval_run.get("samples") or {}
    run["results"] = with_stderr(lm_eval_run["results"], out)
    run["tinyllm"] = ours(out)
    tracker = EvaluationTracker(output_path=str(output_path))
    tracker.general_config_tracker.log_experiment_args(
        model_source="tinyllm",
        model_args=model_args,
        system_instruction=None,
        chat_template=None,
        fewshot_as_multiturn=False,
    )
    tracker.save_results_aggregated(results=run, samples=samples if log_samples else None)
    folder, results_file = _where(tracker, Path(output_path))
    files = [results_file]
    if log_samples:
        for task, task_samples in samples.items():
            tracker.save_results_samples(task_name=task, samples=task_samples)
            files.append(folder / f"samples_{task}_{tracker.date_id}.jsonl")
    for f in files:
        if not f.is_file():
            raise OSError(f"output_path: expected lm-eval to write {f}, got no such file")
    return files


def with_stderr(results: dict, out: dict) -> dict:
    """lm-eval's ``results`` with ``METRIC_stderr,FILTER`` our ``se`` for every metric of
    ``out`` (tasks and groups) that is a mean over documents (not in :data:`RATIO_METRICS`)
    and has one."""
    results = copy.deepcopy(results)
    for name, entry in (*out["tasks"].items(), *out["groups"].items()):
        row = results.get(name)
        if row is None:
            continue
        for key, m in entry["metrics"].items():
            metric, _, flt = key.partition(",")
            if metric not in RATIO_METRICS and m.get("se") is not None:
                row[f"{metric}_stderr,{flt}"] = float(m["se"])
    return results


def ours(out: dict) -> dict[str, Any]:
    """The ``tinyllm`` block: each task's and group's metrics with our interval and n."""

    def metrics(entry: dict) -> dict:
        return {k: {f: m.get(f) for f in OURS} for k, m in entry["metrics"].items()}

    return {
        "seed": out["seed"],
        "n_boot": out["n_boot"],
        "cluster_key": out["cluster_key"],
        "tasks": {t: metrics(e) for t, e in out["tasks"].items()},
        "groups": {g: metrics(e) for g, e in out["groups"].items()},
    }


def _where(tracker: Any, path: Path) -> tuple[Path, Path]:
    """The folder and results file ``save_results_aggregated`` wrote (its own rule)."""
    date_id = getattr(tracker, "date_id", None)
    if date_id is None:
        raise OSError(
            f"output_path: expected lm-eval to write a results file under {path}, got none"
        )
    if path.suffix == ".json":
        return path.parent, path.with_name(f"{path.stem}_{date_id}.json")
    folder = path / str(tracker.general_config_tracker.model_name_sanitized)
    return folder, folder / f"results_{date_id}.json"
