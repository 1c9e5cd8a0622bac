"""The ``lmeval`` kind: one lm-eval task run by our engine on an lm checkpoint (issue 23).

A manifest entry with ``kind: lmeval`` names an lm checkpoint (any family of kind ``lm`` with
the lm-eval backend's model API: ``gpt``, ``hf``) and, as its ``data``, a local task YAML
(lm-eval's format; it may ``include`` one of lm-eval's bundled configs). The YAML's own task
is built from :func:`task_config`: its ``include`` and ``dataset_kwargs.data_files`` paths are
relative to the YAML's folder and resolved against it when scoring (a path that leaves the
folder or passes through a link is refused), an include not found there is one of lm-eval's
bundled configs of the installed lm-eval, so the task folder and the venv can each be moved.
``options.task`` naming another task of the folder is found by lm-eval's TaskManager over
``options.include_path`` (relative to the YAML's folder; default that folder), WITHOUT
indexing lm-eval's 13k bundled configs (that alone takes about a minute). The task is scored
by :func:`tinyllm.eval.lmeval.run.evaluate` with ``options.num_fewshot`` and
``options.limit``; lm-eval's few-shot and random seeds are drawn from the entry's rng. The
row's ``data_sha256`` is :func:`task_data_sha256` (the YAML, what it includes from its folder,
the data files, the lm-eval version for a bundled include).

The row's metric is the task's main metric (``options.metric``; default the first of ``acc``,
``acc_norm``, ``exact_match`` that the task reports on its ``none`` filter, else on its first
filter), its per-document 0/1 scores the row's items (lm-eval's document order), with the
Wilson interval. Every metric the task reports, each with its interval and n, goes in the row's
``details.metrics``. A multiple-choice task's baseline is "chance": document ``i`` with
``k_i`` choices scores ``1 / k_i`` (a uniform guess's expected accuracy, acc and acc_norm
alike). A task config is code here as in lm-eval (``!function`` hooks are imported, templates
rendered): only list configs you trust in a manifest.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from tinyllm import metrics, safeio
from tinyllm.baselines import Baseline
from tinyllm.eval.kinds.common import Scored, proportion_scored
from tinyllm.eval.lmeval import demo_task
from tinyllm.eval.text import model_tokenizer
from tinyllm.models import FAMILIES
from tinyllm.report import Entry, sha256_path

KIND = "lmeval"
METRIC = metrics.ACC.name
DIRECTION = metrics.ACC.direction
ITEM_SCALE = metrics.ACC.item_scale
MEAN_OF_ITEMS = metrics.ACC.mean_of_items
INTERVAL = "wilson"
ROW_METRICS = (metrics.ACC.name, metrics.ACC_NORM.name, metrics.EXACT_MATCH.name)
"""The metrics a row can report: proportions, 0/1 per document (paired comparison)."""
N_BOOT = 1000
"""Bootstrap resamples behind the intervals of the task's non-0/1 metrics (details)."""
SEED_DRAW = 2**31 - 1
MAX_YAML_BYTES = 1 << 20
"""A task YAML (or one it includes) larger than this is refused before it is read."""


class _TagIgnoringLoader(yaml.SafeLoader):
    """Reads a task YAML's keys without constructing its ``!function`` tags (they become None)."""


_TagIgnoringLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _read_yaml(path: Path) -> object:
    """The YAML at ``path`` with its ``!function`` tags as None (alias bombs and oversized or
    special files refused: :mod:`tinyllm.safeio`)."""
    try:
        text = safeio.read_regular(path, max_bytes=MAX_YAML_BYTES, what="task YAML")
        return safeio.load_yaml(text, str(path), loader=_TagIgnoringLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: expected an lm-eval task YAML, got {e}") from None


def task_name(yaml_path: Path) -> str:
    """The ``task:`` of the task YAML at ``yaml_path`` (one name)."""
    doc = _read_yaml(yaml_path)
    name = doc.get("task") if isinstance(doc, dict) else None
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"{yaml_path}: expected a 'task:' name (or options.task naming the task), got {name!r}"
        )
    return name


def _inside(root: Path, folder: Path, rel: object, what: str, where: Path) -> Path:
    """``folder / rel`` (lexically normalized) as a path inside ``root`` reached through real
    folders: an absolute path, one that leaves ``root`` or one through a symbolic link is
    refused, so a task folder reads only its own files wherever it is copied."""
    if not isinstance(rel, str) or not rel:
        raise ValueError(f"{where}: {what}: expected a path relative to its folder, got {rel!r}")
    if os.path.isabs(rel):
        raise ValueError(
            f"{where}: {what}: expected a path relative to its folder, got the absolute {rel!r}"
        )
    p = Path(os.path.normpath(folder / rel))
    try:
        parts = p.relative_to(root).parts
    except ValueError:
        raise ValueError(
            f"{where}: {what}: expected a path inside the task folder {root}, got {rel!r}"
        ) from None
    cur = root
    for part in parts:
        cur = cur / part
        if safeio.path_kind(cur) == "a symbolic link":
            raise safeio.UnsafePathError(
                f"{where}: {what}: expected a path through real folders, got {rel!r} "
                f"({cur} is a symbolic link)"
            )
    return p


def _bundled(name: str, where: Path) -> Path:
    """lm-eval's bundled task YAML ``name`` (relative to ``lm_eval/tasks`` of the installed
    lm-eval, :func:`tinyllm.eval.lmeval.demo_task.bundled_tasks_dir`)."""
    tasks = demo_task.bundled_tasks_dir()
    p = Path(os.path.normpath(tasks / name))
    if tasks not in p.parents or not p.is_file():
        raise ValueError(
            f"{where}: include: expected a file in the task's folder or one of lm-eval's "
            f"bundled task YAMLs (relative to {tasks}), got {name!r}"
        )
    return p


def _data_files(cfg: dict, where: Path, root: Path, seen: list[Path]) -> None:
    """``cfg``'s ``dataset_kwargs.data_files`` (a path, a list, or split -> path or list)
    resolved in place against ``where``'s folder (:func:`_inside`), each a regular file;
    ``seen`` gets every resolved path."""
    kwargs = cfg.get("dataset_kwargs")
    if not isinstance(kwargs, dict) or kwargs.get("data_files") is None:
        return

    def one(rel: object, key: str) -> str:
        what = f"dataset_kwargs.data_files{key}"
        p = _inside(root, where.parent, rel, what, where)
        kind = safeio.path_kind(p)
        if kind != "a regular file":
            raise ValueError(f"{where}: {what}: expected a regular file, got {kind or 'none'}")
        seen.append(p)
        return str(p)

    def paths(v: object, key: str) -> str | list[str]:
        if isinstance(v, list):
            return [one(x, f"{key}[{i}]") for i, x in enumerate(v)]
        return one(v, key)

    files = kwargs["data_files"]
    if isinstance(files, dict):
        files = {k: paths(v, f".{k}") for k, v in files.items()}
    else:
        files = paths(files, "")
    cfg["dataset_kwargs"] = {**kwargs, "data_files": files}


def _merged(
    path: Path,
    root: Path,
    load: Callable[[Path], object],
    load_bundled: Callable[[Path], dict],
    trail: dict,
    stack: tuple[Path, ...] = (),
) -> dict:
    """The task config of the YAML ``path`` the way lm-eval merges one (each ``include``d
    config in order, then the file's own keys over them; ``task_list`` not inherited), with
    each file's ``data_files`` resolved against that file's folder and each ``include``
    resolved against it too, else against lm-eval's bundled tasks (:func:`_bundled`).
    ``trail`` gets ``"yamls"`` (the task folder's files read), ``"bundled"`` (the bundled
    names) and ``"data"`` (resolved data files)."""
    if path in stack:
        raise ValueError(
            f"{path}: include: expected no include cycle, got {' -> '.join(map(str, (*stack, path)))}"
        )
    cfg = load(path)
    if not isinstance(cfg, dict):
        raise ValueError(
            f"{path}: expected an lm-eval task YAML (a mapping), got {type(cfg).__name__}"
        )
    trail["yamls"].append(path)
    _data_files(cfg, path, root, trail["data"])
    includes = cfg.pop("include", None)
    merged: dict = {}
    for inc in [] if includes is None else includes if isinstance(includes, list) else [includes]:
        local = path.parent / inc if isinstance(inc, str) and not os.path.isabs(inc) else None
        if local is not None and safeio.path_kind(os.path.normpath(local)) is None:
            trail["bundled"].append(inc)
            sub = load_bundled(_bundled(inc, path))
        else:
            sub_path = _inside(root, path.parent, inc, "include", path)
            sub = _merged(sub_path, root, load, load_bundled, trail, (*stack, path))
        sub.pop("task_list", None)
        merged.update(sub)
    merged.update(cfg)
    return merged


def _walk(yaml_path: Path, load, load_bundled) -> tuple[dict, dict]:
    root = Path(os.path.abspath(yaml_path)).parent
    trail: dict = {"yamls": [], "bundled": [], "data": []}
    cfg = _merged(root / Path(yaml_path).name, root, load, load_bundled, trail)
    return cfg, trail


def task_config(yaml_path: str | os.PathLike) -> dict:
    """The task config of the task YAML ``yaml_path``, ready for lm-eval's TaskManager (a dict
    with its ``task`` key): ``include`` and ``data_files`` resolved against the YAML's folder,
    wherever that folder is (neither may leave it or pass through a link), and an include not
    found there read from lm-eval's bundled tasks of the installed lm-eval (so a moved venv
    still works). ``!function`` hooks are imported as lm-eval imports them (a config is code).

    Example: a YAML ``{include: hellaswag/hellaswag.yaml, task: t, dataset_kwargs:
    {data_files: {validation: t.jsonl}}}`` in folder ``D`` -> lm-eval's HellaSwag config with
    ``task: t`` and ``data_files: {validation: "D/t.jsonl"}``.
    """
    # lm-eval's own YAML loader (its !function constructor, imports relative to each file):
    # the config it builds from a file is the config it builds here
    from lm_eval.tasks._yaml_loader import load_yaml as lm_load_yaml

    def load(p: Path) -> object:
        safeio.read_regular(p, max_bytes=MAX_YAML_BYTES, what="task YAML")  # refuse a FIFO first
        return lm_load_yaml(p, resolve_func=True, recursive=False)

    cfg, _ = _walk(Path(yaml_path), load, lambda p: lm_load_yaml(p, resolve_func=True))
    return cfg


def task_data_sha256(yaml_path: str | os.PathLike) -> str:
    """sha256 (hex) of what defines the documents of the task YAML ``yaml_path``: the sha256 of
    the text made of one line per file :func:`task_config` reads from the task's folder -- the
    YAML, each YAML it includes from there (``"yaml\\0<relpath>\\0<sha256>"``), each data file
    (``"data\\0<relpath>\\0<sha256>"``), each ``.py`` file beside one of those YAMLs (the
    ``!function`` hooks lm-eval imports from there: ``"hook\\0<relpath>\\0<sha256>"``), paths
    relative to the YAML's folder -- and one line per bundled include
    (``"bundled\\0<name>\\0lm_eval==<version>"``: lm-eval's own file is fixed by its version). Changing, adding or renaming any of them changes the hash; moving the folder
    does not. lm-eval is not imported.
    """
    cfg, trail = _walk(Path(yaml_path), _read_yaml, lambda p: {})
    root = Path(os.path.abspath(yaml_path)).parent
    try:
        version = importlib.metadata.version("lm_eval")
    except importlib.metadata.PackageNotFoundError:
        version = None
    lines = [f"yaml\0{p.relative_to(root).as_posix()}\0{sha256_path(p)}" for p in trail["yamls"]]
    lines += [f"bundled\0{name}\0lm_eval=={version}" for name in trail["bundled"]]
    lines += [f"data\0{p.relative_to(root).as_posix()}\0{sha256_path(p)}" for p in trail["data"]]
    hooks = sorted(
        {
            h
            for y in trail["yamls"]
            for h in y.parent.glob("*.py")
            if h.is_file() and not h.is_symlink()
        }
    )
    lines += [f"hook\0{h.relative_to(root).as_posix()}\0{sha256_path(h)}" for h in hooks]
    return hashlib.sha256("".join(f"{x}\n" for x in lines).encode()).hexdigest()


MAX_FOLDER_YAMLS = 1000
"""Task YAMLs :func:`folder_tasks` reads from one folder at most."""


def folder_tasks(names: list[str], folder: str | os.PathLike) -> list[str | dict]:
    """``names`` with each task that a YAML directly in ``folder`` names (its ``task:``) replaced
    by that YAML's :func:`task_config`: a task folder written for the zoo (``include`` and
    ``data_files`` relative to the folder, as :mod:`tinyllm.eval.lmeval.demo_task` writes them)
    then runs from anywhere. Other names stay names, for lm-eval's index of ``folder``.

    Example: ``folder_tasks(["lee_cloze", "arc_easy"], "zoo/data/lee_cloze")`` ->
    ``[{"task": "lee_cloze", ...}, "arc_easy"]``.
    """
    root = Path(folder)
    yamls = sorted(p for p in root.glob("*.yaml") if p.is_file() and not p.is_symlink())
    if len(yamls) > MAX_FOLDER_YAMLS:
        raise ValueError(
            f"{root}: expected at most {MAX_FOLDER_YAMLS} task YAMLs, got {len(yamls)}"
        )
    own = {}
    for y in yamls:
        doc = _read_yaml(y)
        name = doc.get("task") if isinstance(doc, dict) else None
        if isinstance(name, str) and name in names:
            own.setdefault(name, y)
    return [task_config(own[n]) if n in own else n for n in names]


def entry_data_sha256(entry: Entry, data_path: str | os.PathLike) -> str:
    """The ``data_sha256`` of a manifest entry's data at ``data_path``: for kind ``lmeval`` its
    task's (:func:`task_data_sha256`), for every other kind the file's
    (:func:`tinyllm.report.sha256_path`)."""
    if entry.kind == KIND:
        return task_data_sha256(data_path)
    return sha256_path(data_path)


def _check_options(entry: Entry) -> None:
    fam = FAMILIES[entry.family]
    if fam.KIND != "lm":
        raise ValueError(
            f"entry {entry.name!r}: kind lmeval: expected a family of kind lm (gpt, hf, ...), "
            f"got {entry.family!r} of kind {fam.KIND!r}"
        )
    opts = entry.options
    unused = {k: getattr(opts, k) for k in ("beam", "split") if getattr(opts, k) is not None}
    if unused:
        raise ValueError(
            f"entry {entry.name!r}: expected no {sorted(unused)} options for kind lmeval "
            f"(options task, include_path, num_fewshot, limit, metric, ctx_len), got {unused}"
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


def _own_task(data_path: Path, wanted: str | None) -> str | None:
    """The data YAML's ``task:`` name; None when ``wanted`` names a task and the YAML has no
    single name (a group's YAML, say)."""
    if wanted is None:
        return task_name(data_path)
    doc = _read_yaml(data_path)
    name = doc.get("task") if isinstance(doc, dict) else None
    return name if isinstance(name, str) else None


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator) -> Scored:
    """The task of the YAML ``data_path`` run through lm-eval on ``model``: the row's metric
    (:func:`main_metric`) ``value = (1/n) sum_i s_i`` over the ``n`` scored documents, ``s_i``
    in {0, 1}, with its Wilson 95% interval; the ``s_i`` are the items.

    lm-eval's seeds (few-shot sampling, random, numpy, torch) are one integer drawn from
    ``rng``. The model is read in its own tokenizer
    (:func:`tinyllm.eval.text.model_tokenizer`); ``options.ctx_len`` caps the backend's
    ``max_length`` (default: the model's own context). Details: ``task``, ``metric_key``
    (``"METRIC,FILTER"``), ``metrics`` (every metric of the task: ``{value, lo, hi, interval,
    n}``, :func:`tinyllm.eval.lmeval.run.evaluate`), ``doc_ids``, ``num_fewshot``, ``limit``,
    ``lm_eval_version``, ``tokenizer_class``. Baseline: :func:`chance_baseline`.

    Example: 20 documents of which 9 are right -> value 0.45, interval (0.2582, 0.6579).
    """
    from tinyllm.eval.lmeval.run import evaluate  # lm-eval and its backend: only for this kind

    _check_options(entry)
    opts = entry.options
    own = _own_task(data_path, opts.task)
    task = opts.task or own
    include = None
    if opts.include_path is not None:
        p = Path(opts.include_path)
        include = p if p.is_absolute() else data_path.parent / p
    elif task != own:  # another task of the folder: found by lm-eval's index of it
        include = data_path.parent
    if include is not None and not include.is_dir():
        raise FileNotFoundError(f"{include}: options.include_path: expected a folder of task YAMLs")
    # the YAML's own task: its config resolved against its folder (:func:`task_config`)
    spec = task_config(data_path) if task == own else task
    seed = int(rng.integers(0, SEED_DRAW))
    tok = model_tokenizer(model, entry.family)
    samples: dict = {}
    run = evaluate(
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
        "num_fewshot": opts.num_fewshot,
        "limit": opts.limit,
        "seed": seed,
        "lm_eval_version": run["lm_eval_version"],
        "tokenizer_class": type(tok).__name__,  # documents pair across tokenizers
    }
    baseline = chance_baseline(samples.get(task, []), res["doc_ids"])
    scored = proportion_scored(key.partition(",")[0], res["per_item"][key], details, baseline)
    lm_value = res["metrics"][key]["value"]
    assert abs(scored.interval.value - lm_value) < 1e-9, (scored.interval.value, lm_value)
    return scored
