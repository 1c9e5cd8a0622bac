"""The files of an lm-eval task: a task YAML read the way lm-eval reads it, inside the places
it may read, in bounded reads.

A task YAML (lm-eval's format) may ``include`` other YAMLs (one or a list, merged in order,
its own keys over theirs, ``task_list`` not inherited: ``task:`` and everything else is) and
name its data in ``dataset_kwargs.data_files``. :func:`task_config` resolves both against
the YAML's folder, as lm-eval resolves an include (datasets would resolve a relative data file
against the working directory instead): a relative path is relative to the folder of the
file that names it, an absolute path is itself. Every path must lie inside an allowed place
-- the task's own folder, lm-eval's bundled tasks (an include only), or a folder the user
named (``roots``: a manifest entry's ``options.include_path``) -- and pass through no
symbolic link there; a relative include that is not in the task's folder is one of lm-eval's
bundled configs (relative to ``lm_eval/tasks`` of the installed lm-eval), so a task folder
and the venv can each be moved.

Bounded reads: a task YAML over :data:`MAX_YAML_BYTES`, a data file over
:func:`max_data_bytes` (:data:`MAX_DATA_BYTES`, or ``TINYLLM_LMEVAL_MAX_DATA_BYTES``), a FIFO,
a device or a socket is refused before anything opens it (:func:`check_yaml_file`,
:func:`check_include_path`, :func:`check_data_files`: lm-eval's TaskManager and datasets run
those checks too, :mod:`tinyllm.eval.lmeval.run`). Nothing here imports lm-eval but
:func:`task_config` (lm-eval's own loader imports the ``!function`` hooks: a config is code).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from tinyllm import safeio
from tinyllm.eval.lmeval import demo_task, require_lm_eval
from tinyllm.report import sha256_path

MAX_YAML_BYTES = 1 << 20
"""A task YAML (or one it includes) larger than this is refused before it is read (lm-eval's
largest bundled YAML is under 100 KB)."""
MAX_DATA_BYTES = 1 << 28
"""A task data file larger than this (256 MiB) is refused before datasets reads it (datasets
parses a JSON file whole: a 2 GB file ran for 10 minutes); ``TINYLLM_LMEVAL_MAX_DATA_BYTES``
sets another limit."""
MAX_FOLDER_YAMLS = 1000
"""Task YAMLs :func:`folder_tasks` reads from one folder at most."""
MAX_INDEX_YAMLS = 100_000
"""Task YAMLs :func:`check_include_path` checks in one folder tree at most (lm-eval's own
bundled tasks are about 13,000)."""
MAX_INCLUDE_DEPTH = 32
"""Nested includes followed at most (lm-eval's folders nest two or three deep)."""
_IGNORE_DIRS = {"__pycache__", ".ipynb_checkpoints"}  # lm-eval's index skips these


def max_data_bytes() -> int:
    """The largest task data file read: ``TINYLLM_LMEVAL_MAX_DATA_BYTES`` (bytes) when set,
    else :data:`MAX_DATA_BYTES`."""
    raw = os.environ.get("TINYLLM_LMEVAL_MAX_DATA_BYTES")
    if raw is None:
        return MAX_DATA_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"TINYLLM_LMEVAL_MAX_DATA_BYTES: expected a number of bytes >= 1, got {raw!r}"
        )
    return value


def _check_file(path: str | os.PathLike, max_bytes: int, what: str, hint: str = "") -> None:
    """Refuse ``path`` (a link is followed) unless it is a regular file of at most ``max_bytes``;
    ``os.stat`` only, so a FIFO is never opened. A missing path passes (its reader says so)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as e:
        raise safeio.UnsafePathError(f"{what} {path}: expected a regular file, got {e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise safeio.UnsafePathError(
            f"{what} {path}: expected a regular file, got {safeio.mode_kind(st.st_mode)}"
        )
    if st.st_size > max_bytes:
        raise safeio.UnsafePathError(
            f"{what} {path}: expected at most {max_bytes} bytes{hint}, got {st.st_size}"
        )


def check_yaml_file(path: str | os.PathLike) -> None:
    """Refuse a task YAML that is not a regular file of at most :data:`MAX_YAML_BYTES`."""
    _check_file(path, MAX_YAML_BYTES, "task YAML")


def check_include_path(folder: str | os.PathLike) -> None:
    """Refuse a folder of task YAMLs that lm-eval's TaskManager would hang or choke on: every
    ``**/*.yaml`` it indexes (lm-eval's own walk), and every file those include from outside
    the folder and lm-eval's bundled tasks, must be a regular file of at most
    :data:`MAX_YAML_BYTES` (a FIFO named ``x.yaml`` would block its reader forever), at most
    :data:`MAX_INDEX_YAMLS` of them. A YAML that does not parse is left to lm-eval (its index
    skips it)."""
    root = Path(os.path.abspath(folder))
    trusted = (root, demo_task.bundled_tasks_dir())
    seen: set[Path] = set()
    for i, p in enumerate(root.glob("**/*.yaml")):
        if i >= MAX_INDEX_YAMLS:
            raise ValueError(
                f"include_path {root}: expected at most {MAX_INDEX_YAMLS} task YAMLs, got more"
            )
        if not any(part in _IGNORE_DIRS for part in p.parts):
            _check_file(p, MAX_YAML_BYTES, "include_path: task YAML")
            _check_includes(p, trusted, seen, 0)


def _check_includes(path: Path, trusted: tuple[Path, ...], seen: set[Path], depth: int) -> None:
    """Check each file the YAML ``path`` includes from outside ``trusted`` folders (their own
    files are checked by the walk, or are lm-eval's), and what those include, in turn."""
    try:
        doc = read_yaml(path)
    except ValueError:
        return
    inc = doc.get("include") if isinstance(doc, dict) else None
    for i in [] if inc is None else inc if isinstance(inc, list) else [inc]:
        if not isinstance(i, str) or not i:
            continue
        p = Path(os.path.normpath(path.parent / os.path.expanduser(i)))
        if _within(p, trusted) is not None or p in seen or depth >= MAX_INCLUDE_DEPTH:
            continue
        seen.add(p)
        _check_file(p, MAX_YAML_BYTES, f"{path}: include: task YAML")
        if os.path.isfile(p):
            _check_includes(p, trusted, seen, depth + 1)


def _data_paths(files: object) -> Iterator[str]:
    if isinstance(files, str):
        yield files
    elif isinstance(files, list | tuple):
        for f in files:
            yield from _data_paths(f)
    elif isinstance(files, dict):
        for f in files.values():
            yield from _data_paths(f)


def check_data_files(dataset_path: object, dataset_kwargs: object, task: str) -> None:
    """Refuse the local data of a task before datasets reads it: each ``data_files`` path and a
    ``dataset_path`` that is a local file (or each file of a local folder, at most
    :data:`MAX_INDEX_YAMLS`) must be a regular file of at most :func:`max_data_bytes`. Paths that
    are not local files (hub names, patterns) pass: datasets reads nothing from the hub here."""
    limit = max_data_bytes()
    hint = " (TINYLLM_LMEVAL_MAX_DATA_BYTES sets another limit)"
    kw = dataset_kwargs if isinstance(dataset_kwargs, dict) else {}
    paths = list(_data_paths(kw.get("data_files")))
    if isinstance(dataset_path, str) and os.path.isdir(dataset_path):
        for i, p in enumerate(Path(dataset_path).rglob("*")):
            if i >= MAX_INDEX_YAMLS:
                break
            paths.append(str(p))
    elif isinstance(dataset_path, str):
        paths.append(dataset_path)
    for p in paths:
        if os.path.lexists(p) and not os.path.isdir(p):
            _check_file(p, limit, f"{task}: data file", hint)


class _TagIgnoringLoader(yaml.SafeLoader):
    """Reads a task YAML's keys without constructing its ``!function`` tags (they become None)."""


_TagIgnoringLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def read_yaml(path: Path) -> object:
    """The YAML at ``path`` with its ``!function`` tags as None (alias bombs and oversized or
    special files refused: :mod:`tinyllm.safeio`)."""
    try:
        text = safeio.read_regular(path, max_bytes=MAX_YAML_BYTES, what="task YAML")
        return safeio.load_yaml(text, str(path), loader=_TagIgnoringLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: expected an lm-eval task YAML, got {e}") from None


def _read_bundled(path: Path, depth: int = 0) -> dict:
    """A bundled task YAML with its own includes merged (lm-eval's rule), tags as None."""
    cfg = read_yaml(path)
    if not isinstance(cfg, dict) or depth > MAX_INCLUDE_DEPTH:
        return {}
    merged: dict = {}
    inc = cfg.pop("include", None)
    for i in [] if inc is None else inc if isinstance(inc, list) else [inc]:
        if isinstance(i, str) and i:
            sub = _read_bundled(Path(os.path.normpath(path.parent / i)), depth + 1)
            sub.pop("task_list", None)
            merged.update(sub)
    return {**merged, **cfg}


def _within(p: Path, roots: tuple[Path, ...]) -> Path | None:
    return next((r for r in roots if p == r or r in p.parents), None)


def _resolve(roots: tuple[Path, ...], folder: Path, rel: object, what: str, where: Path) -> Path:
    """``folder / rel`` (an absolute ``rel`` is itself; lexically normalized) as a path inside
    one of ``roots`` (the task folder first, then folders the user named) reached through real
    folders: one outside them all, or through a symbolic link below its root, is refused."""
    if not isinstance(rel, str) or not rel:
        raise ValueError(f"{where}: {what}: expected a path, got {rel!r}")
    p = Path(os.path.normpath(folder / rel))
    root = _within(p, roots)
    if root is None:
        named = "".join(f" or {r}" for r in roots[1:])
        raise ValueError(
            f"{where}: {what}: expected a path inside the task folder {roots[0]}{named} "
            f"(name another folder in options.include_path), got {rel!r}"
        )
    cur = root
    for part in p.relative_to(root).parts:
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
    check_yaml_file(p)
    return p


def _data_files(cfg: dict, where: Path, roots: tuple[Path, ...], seen: list[Path]) -> None:
    """``cfg``'s ``dataset_kwargs.data_files`` (a path, a list, or split -> path or list)
    resolved in place against ``where``'s folder (:func:`_resolve`), each a regular file of at
    most :func:`max_data_bytes`; ``seen`` gets every resolved path."""
    kwargs = cfg.get("dataset_kwargs")
    if not isinstance(kwargs, dict) or kwargs.get("data_files") is None:
        return
    limit = max_data_bytes()

    def one(rel: object, key: str) -> str:
        what = f"dataset_kwargs.data_files{key}"
        p = _resolve(roots, where.parent, rel, what, where)
        kind = safeio.path_kind(p)
        if kind != "a regular file":
            raise ValueError(f"{where}: {what}: expected a regular file, got {kind or 'none'}")
        size = p.stat().st_size
        if size > limit:
            raise ValueError(
                f"{where}: {what}: expected at most {limit} bytes (TINYLLM_LMEVAL_MAX_DATA_BYTES "
                f"sets another limit), got {size}"
            )
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
    roots: tuple[Path, ...],
    load: Callable[[Path], object],
    load_bundled: Callable[[Path], dict],
    trail: dict,
    stack: tuple[Path, ...] = (),
) -> dict:
    """The task config of the YAML ``path`` the way lm-eval merges one (each ``include``d
    config in order, then the file's own keys over them; ``task_list`` not inherited), with
    each file's ``data_files`` and ``include``s resolved against that file's folder, an
    include inside lm-eval's bundled tasks or relative and not in the folder read as bundled
    (:func:`_bundled`). ``trail`` gets ``"yamls"`` (the allowed folders' files read),
    ``"bundled"`` (the bundled names) and ``"data"`` (resolved data files)."""
    if path in stack:
        raise ValueError(
            f"{path}: include: expected no include cycle, got {' -> '.join(map(str, (*stack, path)))}"
        )
    if len(stack) > MAX_INCLUDE_DEPTH:
        raise ValueError(f"{path}: include: expected at most {MAX_INCLUDE_DEPTH} nested includes")
    cfg = load(path)
    if not isinstance(cfg, dict):
        raise ValueError(
            f"{path}: expected an lm-eval task YAML (a mapping), got {type(cfg).__name__}"
        )
    trail["yamls"].append(path)
    _data_files(cfg, path, roots, trail["data"])
    includes = cfg.pop("include", None)
    tasks = demo_task.bundled_tasks_dir()
    merged: dict = {}
    for inc in [] if includes is None else includes if isinstance(includes, list) else [includes]:
        if not isinstance(inc, str) or not inc:
            raise ValueError(
                f"{path}: include: expected a file name or a list of them, got {inc!r}"
            )
        p = Path(os.path.normpath(path.parent / inc))
        if tasks in p.parents or (not os.path.isabs(inc) and safeio.path_kind(p) is None):
            name = p.relative_to(tasks).as_posix() if tasks in p.parents else inc
            trail["bundled"].append(name)
            sub = load_bundled(_bundled(name, path))
        else:
            sub_path = _resolve(roots, path.parent, inc, "include", path)
            sub = _merged(sub_path, roots, load, load_bundled, trail, (*stack, path))
        sub.pop("task_list", None)
        merged.update(sub)
    merged.update(cfg)
    return merged


def _roots(yaml_path: str | os.PathLike, roots: tuple) -> tuple[Path, ...]:
    folder = Path(os.path.abspath(yaml_path)).parent
    return (folder, *(Path(os.path.abspath(r)) for r in roots))


def _walk(yaml_path, roots: tuple, load, load_bundled) -> tuple[dict, dict]:
    rs = _roots(yaml_path, roots)
    trail: dict = {"yamls": [], "bundled": [], "data": []}
    cfg = _merged(rs[0] / Path(yaml_path).name, rs, load, load_bundled, trail)
    return cfg, trail


def task_name(yaml_path: str | os.PathLike, roots: tuple = ()) -> str | None:
    """The ``task:`` the task YAML at ``yaml_path`` defines: its own, else the one it inherits
    through its includes (as lm-eval merges them); None when neither names one (a group's
    YAML, say)."""
    return _name(read_yaml(Path(yaml_path)), yaml_path, roots)


def _name(doc: object, yaml_path: str | os.PathLike, roots: tuple) -> str | None:
    own = doc.get("task") if isinstance(doc, dict) else None
    if own is None and isinstance(doc, dict) and doc.get("include") is not None:
        own = _walk(yaml_path, roots, read_yaml, _read_bundled)[0].get("task")
    return own if isinstance(own, str) and own else None


def task_config(yaml_path: str | os.PathLike, roots: tuple = ()) -> dict:
    """The task config of the task YAML ``yaml_path``, ready for lm-eval's TaskManager (a dict
    with its ``task`` key): ``include`` and ``data_files`` resolved against the YAML's folder,
    each inside that folder, lm-eval's bundled tasks (includes) or one of ``roots`` (folders
    the user named), through no link; an include not found in the folder read from lm-eval's
    bundled tasks of the installed lm-eval (so a moved venv still works). ``!function`` hooks
    are imported as lm-eval imports them (a config is code).

    Example: a YAML ``{include: hellaswag/hellaswag.yaml, task: t, dataset_kwargs:
    {data_files: {validation: t.jsonl}}}`` in folder ``D`` -> lm-eval's HellaSwag config with
    ``task: t`` and ``data_files: {validation: "D/t.jsonl"}``.
    """
    require_lm_eval()  # the extra's install hint, not a ModuleNotFoundError
    # lm-eval's own YAML loader (its !function constructor, imports relative to each file):
    # the config it builds from a file is the config it builds here
    from lm_eval.tasks._yaml_loader import load_yaml as lm_load_yaml

    def load(p: Path) -> object:
        safeio.read_regular(p, max_bytes=MAX_YAML_BYTES, what="task YAML")  # refuse a FIFO first
        return lm_load_yaml(p, resolve_func=True, recursive=False)

    cfg, _ = _walk(yaml_path, roots, load, lambda p: lm_load_yaml(p, resolve_func=True))
    if not isinstance(cfg.get("task"), str) or not cfg["task"]:
        raise ValueError(
            f"{yaml_path}: expected a 'task:' name (its own or an include's), got none"
        )
    return cfg


def _label(p: Path, folder: Path) -> str:
    """A file's name in the hash: relative to the task folder (which may move), else absolute
    (a file the user named outside it)."""
    return p.relative_to(folder).as_posix() if folder in p.parents else p.as_posix()


def task_data_sha256(yaml_path: str | os.PathLike, roots: tuple = ()) -> str:
    """sha256 (hex) of what defines the documents of the task YAML ``yaml_path``: the sha256 of
    the text made of one line per file :func:`task_config` reads from the allowed folders --
    the YAML, each YAML it includes from there (``"yaml\\0<path>\\0<sha256>"``), each data file
    (``"data\\0<path>\\0<sha256>"``), each ``.py`` file beside one of those YAMLs (the
    ``!function`` hooks lm-eval imports from there: ``"hook\\0<path>\\0<sha256>"``), paths
    relative to the YAML's folder (absolute for a file outside it) -- and one line per bundled
    include (``"bundled\\0<name>\\0lm_eval==<version>"``: lm-eval's own file is fixed by its
    version). Changing, adding or renaming any of them changes the hash; moving the folder
    does not. lm-eval is not imported.
    """
    _, trail = _walk(yaml_path, roots, read_yaml, lambda p: {})
    folder = _roots(yaml_path, ())[0]
    try:
        version = importlib.metadata.version("lm_eval")
    except importlib.metadata.PackageNotFoundError:
        version = None
    lines = [f"yaml\0{_label(p, folder)}\0{sha256_path(p)}" for p in trail["yamls"]]
    lines += [f"bundled\0{name}\0lm_eval=={version}" for name in trail["bundled"]]
    lines += [f"data\0{_label(p, folder)}\0{sha256_path(p)}" for p in trail["data"]]
    hooks = sorted(
        {
            h
            for y in trail["yamls"]
            for h in y.parent.glob("*.py")
            if h.is_file() and not h.is_symlink()
        }
    )
    lines += [f"hook\0{_label(h, folder)}\0{sha256_path(h)}" for h in hooks]
    return hashlib.sha256("".join(f"{x}\n" for x in lines).encode()).hexdigest()


def folder_tasks(names: list[str], folder: str | os.PathLike) -> list[str | dict]:
    """``names`` with each task that a YAML directly in ``folder`` defines (its ``task:``, its
    own or inherited, :func:`task_name`) replaced by that YAML's :func:`task_config`: a task
    folder written for the zoo (``include`` and ``data_files`` relative to the folder, as
    :mod:`tinyllm.eval.lmeval.demo_task` writes them) then runs from anywhere. Other names stay
    names, for lm-eval's index of ``folder``.

    Example: ``folder_tasks(["lee_cloze", "arc_easy"], "zoo/data/lee_cloze")`` ->
    ``[{"task": "lee_cloze", ...}, "arc_easy"]``.
    """
    require_lm_eval()
    root = Path(folder)
    yamls = sorted(p for p in root.glob("*.yaml") if p.is_file() and not p.is_symlink())
    if len(yamls) > MAX_FOLDER_YAMLS:
        raise ValueError(
            f"{root}: expected at most {MAX_FOLDER_YAMLS} task YAMLs, got {len(yamls)}"
        )
    own = {}
    for y in yamls:
        doc = read_yaml(y)
        try:
            name = _name(doc, y, ())
        except ValueError:  # an include that does not resolve: lm-eval's index says so if asked
            name = None
        if name in names:
            own.setdefault(name, y)
    return [task_config(own[n]) if n in own else n for n in names]
