"""Thin Prefect tasks around library calls: score one entry, write the release, compare.

Each task is a wrapper: the work is done by ``tinyllm.eval.zoo.score_entry_result`` (the same
scoring path as ``run_zoo``), ``tinyllm.store`` and ``tinyllm.compare``. What lives here is only
what Prefect adds: retries of transient failures, the cache key, result persistence as JSON.

The cache holds ok rows only: a task run whose row is an error (or skipped) returns it to the
flow but writes no cache record (:func:`keep_out_of_cache`), so the next run with the same key
scores the entry again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from prefect import task
from prefect.context import TaskRunContext
from prefect.transactions import get_transaction

from tinyllm import dashboard
from tinyllm.eval import zoo
from tinyllm.eval.kinds.lmeval import entry_data_sha256
from tinyllm.report import Entry, sha256_path
from tinyllm.store import open_store

RETRY_DELAYS = [1, 5]
"""Seconds before the first and the second retry (backoff)."""


def is_transient_state(task, task_run, state) -> bool:
    """``retry_condition_fn``: retry only when the attempt failed with a transient error.

    ``state.result()`` re-raises the attempt's exception; :func:`tinyllm.eval.zoo.is_transient`
    decides (OSError other than "not found"/permission, timeouts, botocore connection and 5xx
    errors). A deterministic error (a corrupt checkpoint, a bad config) is not retried.
    """
    try:
        state.result()
    except BaseException as exc:  # noqa: BLE001 - we classify, never swallow: the state stays failed
        return zoo.is_transient(exc)
    return False


def _code_version() -> str:
    """sha256 over the source files of the library and of this package (the task's result
    shape lives here): a code change invalidates every cached score."""
    h = hashlib.sha256()
    for root in (Path(zoo.__file__).resolve().parents[1], Path(__file__).resolve().parent):
        for p in sorted(root.rglob("*.py")):
            h.update(f"{root.name}/{p.relative_to(root)}".encode())
            h.update(p.read_bytes())
    return h.hexdigest()


_CODE_VERSION: str | None = None


def entry_cache_key(context: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """Cache key of one entry's score: its spec, the bytes of its checkpoint and data, the seed
    and the code version. Paths alone are not enough: a checkpoint retrained in place has a new
    sha256 and is rescored; an lmeval entry's data counts every file of its task
    (:func:`tinyllm.eval.kinds.lmeval.entry_data_sha256`). No key (no caching) when a file is
    missing or a task folder is refused: that entry is an error row.
    """
    global _CODE_VERSION
    if _CODE_VERSION is None:
        _CODE_VERSION = _code_version()
    entry = Entry.model_validate(parameters["entry"])
    base = Path(parameters["base_dir"])
    parts = {"entry": entry.model_dump(mode="json"), "seed": parameters["seed"]}
    for what in ("checkpoint", "data"):
        try:  # an hf checkpoint named by a hub id not in the local cache: no key
            p = zoo.resolve_input(entry, what, base)
        except (OSError, ValueError):
            return None
        if not p.exists():
            return None
        try:  # an lmeval task's data is its YAMLs and data files, not the YAML alone
            parts[what] = sha256_path(p) if what == "checkpoint" else entry_data_sha256(entry, p)
        except (OSError, ValueError):  # a refused task folder: no key, the entry is an error row
            return None
    parts["code"] = _CODE_VERSION
    blob = json.dumps(parts, sort_keys=True).encode()
    return "tinyllm-entry-" + hashlib.sha256(blob).hexdigest()


def cache_storage() -> Path:
    """Where cached entry results live (JSON files named by the cache key):
    ``$TINYLLM_CACHE_DIR``, else ``$PREFECT_HOME/tinyllm-cache`` (``.prefect/tinyllm-cache``).
    A path is a local result store Prefect accepts without a saved block."""
    default = Path(os.environ.get("PREFECT_HOME", ".prefect")) / "tinyllm-cache"
    return Path(os.environ.get("TINYLLM_CACHE_DIR", default)).resolve()


def keep_out_of_cache() -> None:
    """Inside a task run: its result is returned (to the flow, in memory) but not written under
    its cache key, so no later run reuses it.

    Prefect runs every task run in a transaction whose key is the cache key; on commit the
    transaction writes the result record under that key unless its ``write_on_commit`` is off
    (``prefect.transactions.transaction(write_on_commit=...)``), and a later run with the same
    key finds the record and ends ``Cached``. Turning it off here, before the task returns,
    leaves the task run ``Completed`` with its result and the cache without a record. Outside a
    task run (``score_entry_task.fn``) there is no transaction and nothing to do.
    """
    txn = get_transaction()
    if txn is not None:
        txn.write_on_commit = False


@task(
    name="score-entry",
    task_run_name="score-{entry[name]}",
    retries=2,
    retry_delay_seconds=RETRY_DELAYS,
    retry_condition_fn=is_transient_state,
    cache_key_fn=entry_cache_key,
    persist_result=True,
    result_serializer="json",  # never pickle: cached results are plain JSON
)
def score_entry_task(entry: dict, seed: int, base_dir: str) -> dict:
    """Score one manifest entry: ``{"row": row, "items": [float, ...] | None, "baseline_items":
    [float, ...] | None, "units": [int, ...] | None}`` (the row's per-item scores, its
    baseline's on the same items and the sampling unit of each item,
    :func:`tinyllm.eval.zoo.score_entry_result`; ``units`` None when every item is its own unit;
    JSON lists, so the cached result is JSON).

    Deterministic failures come back as error rows (from the library); transient ones raise so
    that Prefect retries them. Only an ok row is cached: an error or skipped row is returned
    without a cache record (:func:`keep_out_of_cache`), so the next run scores the entry again
    (a failure that went away, like a broken install fixed, is not served from the cache).
    """
    row, items, base, units = zoo.score_entry_result(
        entry, seed=seed, base_dir=base_dir, raise_transient=True
    )
    if row["status"] != "ok":
        keep_out_of_cache()
    return {
        "row": row,
        "items": None if items is None else items.tolist(),
        "baseline_items": None if base is None else base.tolist(),
        "units": None if units is None else units.tolist(),
    }


def result_arrays(result: dict) -> tuple[list | None, list | None, list | None]:
    """``(items, baseline items, unit ids)`` of a :func:`score_entry_task` result. A result
    without a ``baseline_items`` or ``units`` key (one cached by a task that did not return it)
    has none: its row is published with ``units`` null, and a row whose units hold several
    items is then compared item by item, with the note that its units are unknown
    (:func:`tinyllm.compare.compare_row`)."""
    return result.get("items"), result.get("baseline_items"), result.get("units")


@task(
    name="publish-dashboard",
    retries=2,
    retry_delay_seconds=RETRY_DELAYS,
    retry_condition_fn=is_transient_state,
)
def publish_dashboard_task(store: str) -> str:
    """Rebuild the store's dashboard (:mod:`tinyllm.dashboard`) under ``dashboard/`` beside
    ``releases/``; return where its index is (``file://`` for a local store, else ``s3://``)."""
    st = open_store(store)
    dashboard.publish_site(st)
    return dashboard.site_location(st)
