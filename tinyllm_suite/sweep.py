"""The Sweep flow: the checkpoints of one training run, each scored, published and compared.

::

    sweep(template, checkpoints, run, store="./evalstore", base_dir=".", seed=0, refresh=False)
      entries = every template entry on every checkpoint (tinyllm.sweep.checkpoint_entries)
      futures = score_entry_task.map(entries)  # the EvalSuite flow's task: an ok row is cached
                                               # by the bytes of its checkpoint and data, so a
                                               # rerun with one more checkpoint scores only it
      for each checkpoint, in step order:      # release <run>-step-<step>, report run + step,
          publish (compared with the run's previous step), unless the store already holds
          the very same rows compared with that step
      summary = tinyllm.sweep.summarize(store, run)   # consecutive paired verdicts, Holm over
                                                      # the run, the last step that improved
      the store's dashboard, rebuilt once; a markdown artifact of the summary

``tinyllm sweep`` runs it (:func:`run_sweep_flow`).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from prefect import flow, get_run_logger, task, unmapped
from prefect.artifacts import create_markdown_artifact
from prefect.futures import wait
from prefect.runtime import flow_run, task_run
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.task_runners import ThreadPoolTaskRunner
from rich.console import Console

from tinyllm import sweep as lib
from tinyllm.eval import zoo
from tinyllm.publish import check_publish_args
from tinyllm.report import parse_manifest, stored_report
from tinyllm.store import new_run_id, open_store
from tinyllm.store.keys import check_name
from tinyllm_suite.artifacts import md_text
from tinyllm_suite.eval_suite import guard_output_streams, lost_task
from tinyllm_suite.eval_tasks import (
    RETRY_DELAYS,
    cache_storage,
    is_transient_state,
    publish_dashboard_task,
    result_arrays,
    score_entry_task,
)
from tinyllm_suite.run import quiet_prefect_console
from tinyllm_suite.server import choose_server

FLOW_NAME = "Sweep"
SUMMARY_ARTIFACT = "sweep-summary"


def _flow_run_name() -> str:
    return f"sweep-{flow_run.parameters.get('run', '')}"


def _score_run_name() -> str:
    """``score-<entry>-<checkpoint folder>``: one task run per entry and checkpoint."""
    e = task_run.parameters.get("entry", {})
    return f"score-{e.get('name')}-{Path(str(e.get('checkpoint'))).name}"


@task(
    name="publish-checkpoint",
    retries=2,
    retry_delay_seconds=RETRY_DELAYS,
    retry_condition_fn=is_transient_state,  # transient store errors only
)
def publish_checkpoint_task(
    template: dict,
    run: str,
    ckpt: dict,
    scored: tuple[list[dict], dict, dict, dict],
    previous: str | None,
    store: str,
    seed: int,
    run_id: str,
    created_at: str,
) -> dict:
    """One checkpoint's release (:func:`tinyllm.sweep.publish_checkpoint`); a retry writes the
    same run file (same run id)."""
    rows, items, base, units = scored
    arrays = (
        rows,
        {k: np.asarray(v, dtype=np.float64) for k, v in items.items()},
        {k: np.asarray(v, dtype=np.float64) for k, v in base.items()},
        {k: np.asarray(v, dtype=np.int64) for k, v in units.items()},
    )
    return lib.publish_checkpoint(
        open_store(store),
        parse_manifest(template),
        run,
        lib.Checkpoint(**ckpt),
        arrays,
        previous=previous,
        seed=seed,
        run_id=run_id,
        created_at=created_at,
    )


def _gather(entries: list[dict], futures: list) -> tuple[tuple[list, dict, dict, dict], list[str]]:
    """The rows and arrays of one checkpoint's task runs (an error row for a failed one) and
    the names of the rows read from the cache."""
    rows: list[dict] = []
    kept: tuple[dict, dict, dict] = ({}, {}, {})
    cached: list[str] = []
    for entry, fut in zip(entries, futures, strict=True):
        if not fut.state.is_final():  # the runner lost it
            rows.append(zoo.error_row(entry, lost_task(fut)))
            continue
        result = fut.state.result(raise_on_failure=False)
        if fut.state.is_completed() and isinstance(result, dict):
            rows.append(result["row"])
            if fut.state.name == "Cached":
                cached.append(entry["name"])
            for into, arr in zip(kept, result_arrays(result), strict=True):
                if arr is not None:
                    into[entry["name"]] = arr
        else:
            exc = result if isinstance(result, BaseException) else RuntimeError(str(fut.state))
            rows.append(zoo.error_row(entry, exc))
    return (rows, *kept), cached


@flow(
    name=FLOW_NAME,
    task_runner=ThreadPoolTaskRunner(max_workers=2),
    flow_run_name=_flow_run_name,
    validate_parameters=True,
)
def sweep(
    template: dict,
    checkpoints: list[dict],
    run: str,
    store: str = "./evalstore",
    base_dir: str = ".",
    seed: int = 0,
    refresh: bool = False,
) -> dict:
    """Score every checkpoint (``[{"path", "step"}]``) of training run ``run`` on the template
    manifest's entries (``checkpoint: "{checkpoint}"``), publish each as release
    ``<run>-step-<step>`` compared with the run's previous step, and summarize the run.

    Returns ``{"run", "store", "checkpoints": [{"step", "release", "cached", "published"}],
    "summary", "dashboard"}``; ``cached``: the rows read from the result cache, ``published``:
    False when the store already held the release as it is (nothing written).
    """
    logger = get_run_logger()
    guard_output_streams()
    m = parse_manifest(template)
    ckpts = sorted((lib.Checkpoint(**c) for c in checkpoints), key=lambda c: c.step)
    lib.check_run(run, "run")
    if not ckpts:
        raise lib.SweepError("checkpoints: expected at least one, got none")
    for c in ckpts:
        check_name(lib.release_name(run, c.step), "release")
    st = check_publish_args(store, lib.release_name(run, ckpts[0].step))
    options: dict[str, Any] = {"result_storage": cache_storage(), "task_run_name": _score_run_name}
    if refresh:
        options["refresh_cache"] = True
    per_ckpt = [lib.checkpoint_entries(m, c) for c in ckpts]
    t0 = time.perf_counter()
    futures = score_entry_task.with_options(**options).map(
        [e for es in per_ckpt for e in es], seed=unmapped(seed), base_dir=unmapped(base_dir)
    )
    wait(futures)
    known = lib.run_releases(st, run)
    done, k = [], len(m.entries)
    for i, (c, entries) in enumerate(zip(ckpts, per_ckpt, strict=True)):
        scored, cached = _gather(entries, futures[i * k : (i + 1) * k])
        release = lib.release_name(run, c.step)
        previous = lib.previous_of(known, c.step, release)
        publish = len(cached) < k or not lib.up_to_date(st, release, scored[0], previous)
        if publish:
            created_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            ckpt = {"path": c.path, "step": c.step}
            out = publish_checkpoint_task(
                template, run, ckpt, scored, previous, store, seed, new_run_id(), created_at
            )
            known = [r for r in known if r.release != release]
            known.append(lib.RunRelease(c.step, release, stored_report(out["report"])))
            known.sort(key=lambda r: (r.step, r.release))
        done.append({"step": c.step, "release": release, "cached": cached, "published": publish})
    logger.info("swept %d checkpoints in %.1f s", len(ckpts), time.perf_counter() - t0)
    summary = lib.summarize(st, run, seed=seed)
    dash = publish_dashboard_task(store, return_state=True)
    dashboard = dash.result() if dash.is_completed() else None
    md = "\n\n".join(md_text(line) for line in lib.conclusion(summary))
    create_markdown_artifact(key=SUMMARY_ARTIFACT, markdown=md, description=f"run {md_text(run)}")
    out = {"run": run, "store": st.uri, "checkpoints": done, "summary": summary}
    return out | {"dashboard": dashboard}


def run_sweep_flow(
    template: dict,
    checkpoints: list[dict],
    run: str,
    store: str,
    *,
    base_dir: str = ".",
    seed: int = 0,
    refresh: bool = False,
    quiet: bool = False,
    debug: bool = False,
) -> dict:
    """The Sweep flow on the Prefect server the EvalSuite flow uses
    (:func:`tinyllm_suite.server.choose_server`), Prefect's console log kept to progress;
    returns the flow's result."""
    err = Console(stderr=True, quiet=quiet)
    api = choose_server(err)

    quiet_prefect_console(quiet, debug)
    if not quiet:
        err.print(
            f"running the Sweep flow for run {run} ({len(checkpoints)} checkpoints) on {api} ..."
        )
    with temporary_settings(updates={PREFECT_API_URL: api}):
        return sweep(
            template=template,
            checkpoints=checkpoints,
            run=run,
            store=store,
            base_dir=base_dir,
            seed=seed,
            refresh=refresh,
        )
