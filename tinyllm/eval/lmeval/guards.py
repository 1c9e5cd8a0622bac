"""What an lm-eval run may touch, checked before lm-eval touches it (:mod:`~tinyllm.eval.lmeval.run`).

* :func:`offline_data` -- datasets and the Hugging Face hub offline for the run, unless the
  user set ``HF_DATASETS_OFFLINE`` or ``HF_HUB_OFFLINE`` (their value then wins): data come
  from local files or the datasets cache, never a download;
* :func:`guarded_files` -- every task YAML lm-eval's TaskManager opens, and every local data
  file datasets reads, is a regular file within its size limit
  (:mod:`tinyllm.eval.lmeval.task_files`) before it is opened: a FIFO would block its reader
  forever, a 2 GB file would be parsed for minutes; a dataset that is not local is one
  :class:`DatasetNotLocalError` line naming it and how to give local files;
* :func:`check_num_fewshot` -- at most as many few-shot examples as the task has.

Each replacement of a function or constant of lm-eval, datasets or the hub holds while a run is
inside (:func:`swapped`): runs that overlap in threads put the original back once, when the
last one leaves.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tinyllm.eval.lmeval import task_files

OFFLINE_VARS = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
"""Environment variables that, when the user sets either, decide offline mode instead of us."""

_SWAP_LOCK = threading.Lock()
_SWAP_DEPTH: dict[str, int] = {}
_SWAP_SAVED: dict[str, Any] = {}


@contextlib.contextmanager
def while_running(key: str, on: Callable[[], Any], off: Callable[[Any], Any]) -> Iterator[None]:
    """``on()`` when the first run (of any thread) enters, ``off(what on returned)`` when the
    last one leaves, so runs that overlap in threads restore the true original, once."""
    with _SWAP_LOCK:
        if not _SWAP_DEPTH.get(key):
            _SWAP_SAVED[key] = on()
        _SWAP_DEPTH[key] = _SWAP_DEPTH.get(key, 0) + 1
    try:
        yield
    finally:
        with _SWAP_LOCK:
            _SWAP_DEPTH[key] -= 1
            if not _SWAP_DEPTH[key]:
                off(_SWAP_SAVED.pop(key))


def swapped(module: Any, name: str, make: Callable[[Any], Any]):
    """``module.name`` replaced by ``make(original)`` while a run is inside (:func:`while_running`)."""

    def on() -> Any:
        real = getattr(module, name)
        setattr(module, name, make(real))
        return real

    return while_running(f"{module.__name__}.{name}", on, lambda real: setattr(module, name, real))


@contextlib.contextmanager
def offline_data() -> Iterator[None]:
    """datasets (``datasets.config.HF_HUB_OFFLINE``) and the hub
    (``huggingface_hub.constants.HF_HUB_OFFLINE``) offline while a run is inside, so a dataset
    that is not local fails at once instead of after the hub's retries; nothing changes when
    the user set ``HF_DATASETS_OFFLINE`` or ``HF_HUB_OFFLINE`` (their choice wins)."""
    if any(v in os.environ for v in OFFLINE_VARS):
        yield
        return
    import datasets.config  # lm-eval's dependencies
    import huggingface_hub.constants

    with (
        swapped(datasets.config, "HF_HUB_OFFLINE", lambda real: True),
        swapped(datasets.config, "HF_DATASETS_OFFLINE", lambda real: True),
        swapped(huggingface_hub.constants, "HF_HUB_OFFLINE", lambda real: True),
    ):
        yield


def _offline_now() -> bool:
    import datasets.config  # lm-eval's dependency

    return bool(datasets.config.HF_HUB_OFFLINE)


class DatasetNotLocalError(FileNotFoundError):
    """A task's dataset is neither local nor in the datasets cache, and nothing is downloaded:
    the message names the dataset and how to give local files."""

    def __init__(self, task: str, dataset: Any, name: Any, splits: list[str], include=None):
        self.task, self.dataset, self.name, self.splits = task, dataset, name, splits
        self.include = include
        which = f"{dataset!r}" + (f" ({name!r})" if name else "")
        files = ", ".join(f"{s}: FILE.jsonl" for s in splits) or "test: FILE.jsonl"
        super().__init__(
            f"{task}: dataset {which} is not in the local datasets cache and is never downloaded "
            "(HF_DATASETS_OFFLINE; HF_DATASETS_OFFLINE=0 allows it); give local files: a task "
            f"YAML with include: {include or 'its YAML'}, dataset_path: json and "
            f"dataset_kwargs: {{data_files: {{{files}}}}} (in --include-path, or as a manifest "
            "entry's data)"
        )

    def with_include(self, include: str | None) -> DatasetNotLocalError:
        """The same error naming the YAML to ``include``."""
        return DatasetNotLocalError(self.task, self.dataset, self.name, self.splits, include)


def _splits(cfg: Any) -> list[str]:
    names = (getattr(cfg, k, None) for k in ("test_split", "validation_split", "training_split"))
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and n))


def _guarded_download(real: Callable) -> Callable:
    def download(self, dataset_kwargs: dict | None = None, **kwargs):
        cfg = self.config
        task_files.check_data_files(cfg.dataset_path, dataset_kwargs, cfg.task)
        try:
            return real(self, dataset_kwargs, **kwargs)
        except (ConnectionError, FileNotFoundError) as e:
            local = isinstance(dataset_kwargs, dict) and dataset_kwargs.get("data_files")
            if local or isinstance(e, DatasetNotLocalError) or not _offline_now():
                raise
            raise DatasetNotLocalError(
                cfg.task, cfg.dataset_path, cfg.dataset_name, _splits(cfg)
            ) from None

    return download


def _guarded_load_yaml(real: Callable) -> Callable:
    def load_yaml(path, *args, **kwargs):
        task_files.check_yaml_file(Path(path).expanduser())
        return real(path, *args, **kwargs)

    return load_yaml


@contextlib.contextmanager
def guarded_files() -> Iterator[None]:
    """lm-eval's YAML loader (its index, its task factory, includes) and its tasks' dataset
    download check each file first (:func:`tinyllm.eval.lmeval.task_files.check_yaml_file`,
    :func:`~tinyllm.eval.lmeval.task_files.check_data_files`); a hub dataset that cannot be
    read offline is a :class:`DatasetNotLocalError`."""
    import lm_eval.api.task  # optional dependency: run.evaluate has checked it is there
    import lm_eval.tasks._factory
    import lm_eval.tasks._index
    import lm_eval.tasks._yaml_loader
    import lm_eval.tasks.manager

    loaders = (
        lm_eval.tasks._yaml_loader,
        lm_eval.tasks._index,
        lm_eval.tasks._factory,
        lm_eval.tasks.manager,
    )
    with contextlib.ExitStack() as stack:
        for module in loaders:
            stack.enter_context(swapped(module, "load_yaml", _guarded_load_yaml))
        task_cls = lm_eval.api.task.ConfigurableTask
        stack.enter_context(swapped(task_cls, "download", _guarded_download))
        yield


def check_num_fewshot(tasks: Iterable[Any], num_fewshot: int | None) -> None:
    """Refuse more few-shot examples than a task can draw: lm-eval samples them without
    replacement from the task's few-shot documents, drawing one more to drop the scored
    document when the few-shot split is the test split (or neither is named), so a larger
    ``num_fewshot`` (else the task's own) is one line naming the most it can be."""
    for t in tasks:
        cfg = getattr(t, "config", None)
        n = num_fewshot if num_fewshot is not None else getattr(cfg, "num_fewshot", None)
        if not n or n <= 0:
            continue
        sampler = getattr(t, "sampler", None)
        pool = len(sampler.fewshot_docs()) if sampler is not None else 0
        split = getattr(getattr(t, "fewshot_cfg", None), "split", None)
        same = split == getattr(cfg, "test_split", None)
        most = max(pool - 1, 0) if same else pool
        if n > most:
            which = (
                f"{pool} few-shot documents, one held back for the scored document"
                if same
                else "few-shot documents"
            )
            raise ValueError(
                f"{getattr(cfg, 'task', '?')}: num_fewshot: expected at most {most} (the "
                f"task's {which}), got {n}"
            )
