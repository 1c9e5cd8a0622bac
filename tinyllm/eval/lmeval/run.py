"""lm-eval tasks scored by our engine, every metric with its 95% interval (``tinyllm eval lmeval``).

:func:`evaluate` builds the tasks with lm-eval's TaskManager (so ``process_docs``,
``!function`` hooks, ``include``, ``description``, few-shot, multiple-input tasks and filters
are lm-eval's own), runs ``lm_eval.simple_evaluate`` on :class:`~tinyllm.eval.lmeval.backend.TinyLLM`
and reads the per-document scores back from its samples. A task config is code here, as in
lm-eval: it imports ``!function`` hooks and renders Jinja templates unsandboxed, so only run
configs you trust.

Intervals (docs/definitions.md, "Units", "Intervals"; :mod:`tinyllm.eval.lmeval.intervals`),
over the task's units: each document, or with ``cluster_key`` the documents sharing that
field's value. ``wilson`` for a mean metric every document scores 0 or 1 when every unit is one
document; otherwise ``cluster_bootstrap``, the percentile bootstrap over units of the metric's
own aggregate, a corpus metric's interval in its own units (a perplexity interval in
perplexity); group aggregates weighted as lm-eval weights them. Each task's and group's draws
come from ``numpy.random.default_rng([seed, hash(name)])``
(:func:`~tinyllm.eval.lmeval.intervals.task_rng`), so a task's interval does not depend on
the tasks beside it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import random
import subprocess
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tinyllm.eval.lmeval import demo_task, guards, intervals, require_lm_eval, task_files
from tinyllm.eval.lmeval.guards import swapped, while_running
from tinyllm.eval.single import open_lm
from tinyllm.models import hf as hf_family
from tinyllm.tokens import ByteTokenizer


def _check_tasks(tasks: Any) -> list[str | dict]:
    if isinstance(tasks, str):
        tasks = [t for t in tasks.split(",") if t]
    ok = tasks and all(
        (isinstance(t, str) and t) or (isinstance(t, dict) and isinstance(t.get("task"), str))
        for t in tasks
    )
    if not ok:
        raise ValueError(
            f"tasks: expected a non-empty list of task names or task configs, got {tasks!r}"
        )
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
        model = hf_family.load(hf, device=device, dtype=dtype, quiet=True)
        return model, hf_family.load_tokenizer(hf)

    return open_lm(model=str(ckpt), device=device, dtype=dtype).model, ByteTokenizer()


def evaluate(
    tasks: Sequence[str | dict] | str,
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
    quiet: bool = True,
    cluster_key: str | None = None,
    lm_eval_run: dict | None = None,
) -> dict:
    """Score lm-eval ``tasks`` with our engine; every metric with its 95% interval and n.

    ``tasks``: task, group or tag names (a comma-separated string or a list), or task configs
    (dicts with a ``task`` key, as lm-eval's TaskManager takes them). Each is built once by
    lm-eval's TaskManager and handed to ``lm_eval.simple_evaluate`` built.
    ``include_path``: a folder of task YAMLs (a YAML there may ``include`` a bundled one);
    ``include_defaults``: also index lm-eval's bundled tasks (lm-eval's default; indexing all
    of them takes about a minute). ``num_fewshot``, ``limit`` (documents per task) and ``seed``
    (lm-eval's few-shot and random seeds; each task's bootstrap draws from its own stream of
    ``(seed, task)``, :func:`~tinyllm.eval.lmeval.intervals.task_rng`) as in
    ``lm_eval.simple_evaluate``. ``backend``: keyword arguments of
    :class:`~tinyllm.eval.lmeval.backend.TinyLLM` (``rolling``, ``stride``, ``max_length``, ...).
    ``quiet``: lm-eval's progress bars and git probe off (:func:`quiet_lm_eval_run`).
    ``cluster_key``: a document field whose value (a string or an integer) is the document's
    sampling unit in every task (:func:`~tinyllm.eval.lmeval.intervals.document_units`; a
    document without it is one ValueError line naming the task and the field); None: each
    document its own unit. ``lm_eval_run``: a dict filled with ``lm_eval.simple_evaluate``'s own
    answer (``results``, ``configs``, ``samples``, ...), for its results files
    (:mod:`tinyllm.eval.lmeval.results_files`). Data
    come from local files or the datasets cache only: datasets and the hub are offline for the
    run unless the user set ``HF_DATASETS_OFFLINE`` or ``HF_HUB_OFFLINE``
    (:func:`tinyllm.eval.lmeval.guards.offline_data`), a dataset that is neither is one
    :class:`~tinyllm.eval.lmeval.guards.DatasetNotLocalError` line; every task YAML and data
    file is checked before lm-eval opens it (a FIFO, an oversized file:
    :func:`~tinyllm.eval.lmeval.guards.guarded_files`), and ``num_fewshot`` against the task's
    few-shot documents (:func:`~tinyllm.eval.lmeval.guards.check_num_fewshot`).

    Returns ``{"lm_eval_version", "seed", "num_fewshot", "limit", "n_boot", "cluster_key",
    "tasks": {task: {"n", "doc_ids", "cluster_key", "units", "n_units", "metrics":
    {"METRIC,FILTER": {"value", "lo", "hi", "interval", "n", "n_units", "se", "warning",
    "iid_interval"}}, "per_item": {"METRIC,FILTER": [...]}}}, "groups": {group: {"n", "tasks",
    "metrics"}}}`` (a group that aggregates its tasks: its aggregate rows, weighted as lm-eval
    weights them, with their intervals). ``value`` is lm-eval's own aggregate; ``interval`` is
    the method's name, ``"wilson"`` or ``"cluster_bootstrap"`` (:class:`tinyllm.stats.Method`;
    None, with no ends, for an aggregation other than lm-eval's mean and corpus ones), in the
    metric's own units (:func:`tinyllm.eval.lmeval.intervals.summarize`). ``units`` holds each
    document's cluster value in ``doc_ids`` order (None without ``cluster_key``), ``per_item``
    each document's score in the same order (for a weighted corpus metric its ``[LL, weight]``
    pair, for ``perplexity`` its LL), for the paired test over units between two runs.

    Example: ``evaluate(["arc_easy"], model, tok, limit=20)["tasks"]["arc_easy"]["metrics"]
    ["acc,none"]`` -> ``{"value": 0.25, "lo": 0.11, "hi": 0.47, "interval": "wilson", "n": 20,
    "n_units": 20, ...}``.
    """
    require_lm_eval()
    import lm_eval  # optional dependency: the lmeval extra
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import set_torch_seed

    specs = _check_tasks(tasks)
    if include_path is not None:
        if not os.path.isdir(include_path):
            raise ValueError(f"include_path: expected a folder of task YAMLs, got {include_path!r}")
        task_files.check_include_path(include_path)  # a FIFO there would hang lm-eval's index
    with guards.offline_data(), guards.guarded_files():
        tm = TaskManager(
            include_path=None if include_path is None else str(include_path),
            include_defaults=include_defaults,
        )
        # lm-eval's own seeding (simple_evaluate's), then each task built once: simple_evaluate
        # takes the built objects, so it does not seed again (it would reset the state the build
        # left, which its own seed -> build -> evaluate order never does)
        random.seed(seed)
        np.random.seed(seed)
        set_torch_seed(seed)
        with quiet_lm_eval_run(quiet), _no_env_report():
            built = [_build(tm, s) for s in specs]
            guards.check_num_fewshot((t for b in built for t in b["tasks"].values()), num_fewshot)
            run = _run(simple_evaluate or lm_eval.simple_evaluate, built, tm, model, tokenizer,
                       backend, num_fewshot, limit, seed)  # fmt: skip
    if lm_eval_run is not None:
        lm_eval_run.update(run)
    return _results(run, built, seed, n_boot, num_fewshot, limit, cluster_key)


def _build(tm: Any, spec: str | dict) -> dict:
    """``tm.load(spec)``; a dataset that is not local names the task's YAML to include."""
    try:
        return tm.load(spec)
    except guards.DatasetNotLocalError as e:
        entry = tm.task_index.get(e.task)
        where = getattr(entry, "yaml_path", None)
        tasks = demo_task.bundled_tasks_dir()
        if where is not None and tasks in Path(where).parents:
            raise e.with_include(Path(where).relative_to(tasks).as_posix()) from None
        raise e.with_include(None if where is None else str(where)) from None


def _run(evaluate_fn, built, tm, model, tokenizer, backend, num_fewshot, limit, seed) -> dict:
    """``lm_eval.simple_evaluate`` (or ``evaluate_fn``) on the built tasks, our backend."""
    from tinyllm.eval.lmeval.backend import TinyLLM  # subclasses lm-eval's LM: the lmeval extra

    kw = dict(backend or {})
    if _needs_all_greedy(t for b in built for t in b["tasks"].values()):
        kw.setdefault("greedy", "all")
    return evaluate_fn(
        model=TinyLLM(model, tokenizer, **kw),
        tasks=[obj for b in built for obj in _top_level(b)],
        task_manager=tm,
        num_fewshot=num_fewshot,
        limit=limit,
        log_samples=True,
        random_seed=None,  # seeded before the tasks were built
        numpy_random_seed=None,
        torch_random_seed=None,
        fewshot_random_seed=seed,
        bootstrap_iters=0,  # our intervals replace lm-eval's stderr
    )


def _results(
    run: dict, built: list, seed: int, n_boot: int, num_fewshot, limit, cluster_key=None
) -> dict:
    """evaluate's answer from lm-eval's run: each task's and group's metrics with intervals."""
    import lm_eval  # optional dependency: evaluate has checked it is there

    leaves = {t.task_name: t for b in built for t in b["tasks"].values()}
    out_tasks = {}
    for task, samples in run["samples"].items():
        out_tasks[task] = intervals.summarize(
            samples,
            run["results"].get(task, {}),
            intervals.task_rng(seed, task),
            n_boot,
            _aggregations(leaves.get(task)),
            cluster_key=cluster_key,
            task=task,
        )
    return {
        "lm_eval_version": getattr(lm_eval, "__version__", None),
        "seed": seed,
        "num_fewshot": num_fewshot,
        "limit": limit,
        "n_boot": n_boot,
        "cluster_key": cluster_key,
        "tasks": out_tasks,
        "groups": _groups(built, run["results"], out_tasks, leaves, seed, n_boot),
    }


def _aggregations(task: Any) -> dict[str, str | None] | None:
    """The task's aggregation of each metric by lm-eval's name
    (:func:`~tinyllm.eval.lmeval.intervals.aggregation_name`); None for no task."""
    agg = getattr(task, "aggregation", None)
    if agg is None:
        return None
    return {m: intervals.aggregation_name(fn) for m, fn in (agg() or {}).items()}


def _groups(
    built: list[dict], results: dict, tasks: dict, leaves: dict, seed: int, n_boot: int
) -> dict:
    """Each group that aggregates (lm-eval's ``aggregate_metric_list``), by name: ``{"n",
    "tasks" (its leaf tasks), "metrics": {"METRIC,FILTER": {"value", "lo", "hi", "interval",
    "n"}}}``, the value lm-eval's, the interval
    :func:`~tinyllm.eval.lmeval.intervals.group_summary`'s from the stream of ``(seed, group)``."""
    groups: dict[str, Any] = {}
    for b in built:
        for g in b["groups"].values():
            for x in (g, *g.get_all_groups()):
                groups.setdefault(x.name, x)
    out = {}
    for name, g in groups.items():
        if not g.has_aggregation or name not in results:
            continue
        names = [t.task_name for t in g.get_all_tasks() if t.task_name in tasks]
        keys = intervals.group_keys(g.aggregate_metric_list, (tasks[t]["metrics"] for t in names))
        rng = intervals.task_rng(seed, name)
        metrics = {}
        for key, by_size in keys:
            have = [t for t in names if key in tasks[t]["per_item"]]
            if key not in results[name] or not have:
                continue
            metric = key.partition(",")[0]
            parts = [
                {
                    "items": tasks[t]["per_item"][key],
                    "aggregation": intervals.aggregation_of(metric, _aggregations(leaves.get(t))),
                    "units": _metric_units(tasks[t], key, t),
                }
                for t in have
            ]
            metrics[key] = intervals.group_summary(results[name][key], parts, by_size, rng, n_boot)
        out[name] = {"n": sum(tasks[t]["n"] for t in names), "tasks": names, "metrics": metrics}
    return out


def _metric_units(task: dict, key: str, name: str):
    """The unit number of each document a task scores on ``key`` (None: each its own unit)."""
    units = intervals.unit_numbers(task["units"])
    if units is not None and len(task["per_item"][key]) != units.size:
        raise ValueError(
            f"task {name!r}: cluster key {task['cluster_key']!r}: expected {key} on every one of "
            f"the {units.size} documents to pool them in a group, got {len(task['per_item'][key])}"
        )
    return units


def _top_level(loaded: dict) -> list:
    """The groups and tasks of one ``TaskManager.load`` answer that no group there contains
    (what was asked for: a task, a tag's tasks, a group with its members)."""
    groups = list(loaded["groups"].values())
    inner = {id(x) for g in groups for x in (*g.get_all_tasks(), *g.get_all_groups())}
    return [o for o in (*groups, *loaded["tasks"].values()) if id(o) not in inner]


def _needs_all_greedy(tasks: Iterable[Any]) -> bool:
    """True when a multiple-choice task reports ``exact_match`` (lm-eval reads it from
    ``is_greedy``, which the backend then computes for every request)."""
    for t in tasks:
        cfg = getattr(t, "config", None)
        metrics = [m.get("metric") for m in (getattr(cfg, "metric_list", None) or [])]
        if getattr(cfg, "output_type", None) == "multiple_choice" and "exact_match" in metrics:
            return True
    return False


@contextlib.contextmanager
def quiet_lm_eval_run(quiet: bool = True) -> Iterator[None]:
    """lm-eval's noise on stderr off for one run: its git-hash probe (``git describe`` in the
    working directory, whose "fatal: not a git repository" goes straight to fd 2; here it runs
    with stderr discarded and returns the same hash), its per-document progress bar while it
    builds requests, and datasets' progress bars. Log records, warnings and exceptions pass
    as they are. ``quiet=False``: nothing changes (``--debug``)."""
    if not quiet:
        yield
        return
    # optional dependency: evaluate has checked it is there
    import lm_eval.api.task
    import lm_eval.evaluator

    with (
        swapped(lm_eval.api.task, "tqdm", lambda real: functools.partial(real, disable=True)),
        swapped(lm_eval.evaluator, "get_git_commit_hash", lambda real: _quiet_git_hash),
        while_running("datasets-bars", lambda: _datasets_bars(False), _datasets_bars),
    ):
        yield


@contextlib.contextmanager
def _no_env_report() -> Iterator[None]:
    """``simple_evaluate``'s environment report without torch's ``collect_env`` (it runs
    ``pip list`` and a dozen other programs, about 4.5 s of a 7 s run of 20 documents, for a
    ``pretty_env_info`` text no caller here reads): the results keep lm-eval's and
    transformers' versions and the ``upper_git_hash`` of the folder above, ``pretty_env_info``
    is None."""
    import lm_eval.evaluator  # optional dependency: evaluate has checked it is there

    with swapped(lm_eval.evaluator, "add_env_info", lambda real: _versions_only):
        yield


def _versions_only(storage: dict) -> None:
    try:
        import transformers  # lm-eval's dependency, when present
    except ImportError:
        transformers = None
    storage["pretty_env_info"] = None
    storage["lm_eval_version"] = importlib.metadata.version("lm_eval")
    storage["transformers_version"] = getattr(transformers, "__version__", "N/A")
    from lm_eval.loggers.utils import get_commit_from_path  # reads files, runs nothing

    storage["upper_git_hash"] = get_commit_from_path(Path(os.getcwd(), ".."))


def _quiet_git_hash() -> str | None:
    """lm-eval's ``get_git_commit_hash`` with git's stderr discarded: ``git describe --always``
    in the working directory, else the commit lm-eval reads from a ``.git`` folder there."""
    from lm_eval.loggers.utils import get_commit_from_path  # optional dependency, as above

    try:
        out = subprocess.run(
            ["git", "describe", "--always"],  # noqa: S607 -- lm-eval's own probe, as it runs it
            capture_output=True,
            check=True,
        )
        return out.stdout.strip().decode()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return get_commit_from_path(os.getcwd())


def _datasets_bars(on: bool) -> bool:
    """Turn datasets' progress bars on or off (nothing to do without datasets); returns
    whether they were on."""
    try:
        import datasets  # lm-eval's dependency, when present
    except ImportError:
        return False
    was = not datasets.are_progress_bars_disabled()
    if on != was:
        (datasets.enable_progress_bars if on else datasets.disable_progress_bars)()
    return was
