"""The EvalSuite flow: one retried task per manifest entry, a report in the store, a comparison.

::

    eval_suite(manifest, release, store="./evalstore", only=None, previous=None, seed=0)
      entries = the manifest, validated (a bad manifest fails before anything runs)
      futures = score_entry_task.map(entries)   # retries transient failures, cached by content
      rows    = [row, or an error row for a task that failed after its retries]
      publish = write the run + merged release report + per-item scores, compare with previous
      artifacts: a table of the rows, a markdown summary of the comparison (fixed keys)

Run it directly (``python flows/eval_suite.py --help``), through ``tinyllm eval --suite zoo
--release R`` or as the ``release-eval`` deployment in prefect.yaml.
"""

from __future__ import annotations

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # before prefect is imported

import time
from pathlib import Path
from typing import Any

import numpy as np
from prefect import flow, get_run_logger, task, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.futures import wait
from prefect.task_runners import ThreadPoolTaskRunner

from tasks.eval_tasks import cache_storage, score_entry_task
from tinyllm.compare import compare_markdown, compare_reports
from tinyllm.eval import zoo
from tinyllm.report import Manifest, ManifestError, load_manifest
from tinyllm.store import merge_report, new_run_id, open_store

ROWS_ARTIFACT = "eval-suite-rows"
COMPARE_ARTIFACT = "eval-suite-compare"


def select_entries(manifest: Manifest, only: list[str] | None) -> list:
    """The entries to score: all, or those named in ``only`` (unknown names are refused)."""
    if not only:
        return list(manifest.entries)
    names = [e.name for e in manifest.entries]
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ManifestError(f"only: expected entry names from the manifest {names}, got {unknown}")
    return [e for e in manifest.entries if e.name in set(only)]


@task(name="publish-release")
def publish_release(
    manifest: Manifest,
    rows: list[dict],
    items: dict[str, list[float]],
    release: str,
    store: str,
    seed: int,
    previous: str | None,
) -> dict:
    """Write the run's raw rows (never overwritten), the per-item scores, the merged release
    report; then compare with the previous release. Returns ``{run_id, report, compare}``."""
    st = open_store(store)
    run_id = new_run_id()
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in items.items()}
    order = [e.name for e in manifest.entries]
    run = zoo.build_run_report(manifest, rows, seed=seed, release=release)
    # items first, then the run, then the merged view: a reader never sees a row whose items
    # are missing
    for name, arr in arrays.items():
        st.write_items(release, name, arr)
    st.write_run(release, run_id, run)
    old = st.read_report(release) if st.has_report(release) else None
    merged = merge_report(old, run, order=order)
    zoo.validate_report_doc(merged)
    st.write_report(release, merged)
    prev = previous or st.previous_release(release)
    cmp = None
    if prev is not None:
        cmp = compare_reports(
            st.read_report(prev), merged, st.items_loader(prev), st.items_loader(release), seed=seed
        )
        st.write_compare(release, cmp)
    return {"run_id": run_id, "report": merged, "compare": cmp, "store": st.uri}


def _artifact_rows(rows: list[dict]) -> list[dict]:
    def fmt(x: Any) -> Any:
        return None if x is None else round(float(x), 4)

    return [
        {
            "name": r["name"],
            "family": r["family"],
            "metric": r["metric"],
            "value": fmt(r["value"]),
            "lo": fmt(r["lo"]),
            "hi": fmt(r["hi"]),
            "n": r["n"],
            "status": r["status"],
            "error": (r.get("error") or {}).get("message") or r.get("reason"),
        }
        for r in rows
    ]


@flow(
    name="EvalSuite",
    task_runner=ThreadPoolTaskRunner(max_workers=2),
    flow_run_name="eval-{release}",
    validate_parameters=True,
)
def eval_suite(
    manifest: str,
    release: str,
    store: str = "./evalstore",
    only: list[str] | None = None,
    previous: str | None = None,
    seed: int = 0,
) -> dict:
    """Score every entry of ``manifest`` (or only the named ones) as release ``release``.

    Returns ``{"run_id", "report", "compare", "store"}``. An entry that fails becomes an error
    row; the flow itself fails only on a bad manifest or a store it cannot write.
    """
    logger = get_run_logger()
    m = load_manifest(manifest)  # ManifestError before anything runs
    entries = select_entries(m, only)
    base_dir = str(Path(manifest).resolve().parent)
    t0 = time.perf_counter()
    scorer = score_entry_task.with_options(result_storage=cache_storage())
    futures = scorer.map(
        [e.model_dump(mode="json") for e in entries],
        seed=unmapped(seed),
        base_dir=unmapped(base_dir),
    )
    wait(futures)
    rows: list[dict] = []
    items: dict[str, list[float]] = {}
    for entry, fut in zip(entries, futures, strict=True):
        result = fut.state.result(raise_on_failure=False)
        if fut.state.is_completed() and isinstance(result, dict):
            rows.append(result["row"])
            if result["items"] is not None:
                items[entry.name] = result["items"]
        else:  # failed after its retries: an error row with the exception's type and message
            exc = result if isinstance(result, BaseException) else RuntimeError(str(fut.state))
            rows.append(zoo.error_row(entry, exc))
    logger.info("scored %d entries in %.1f s", len(rows), time.perf_counter() - t0)
    out = publish_release(m, rows, items, release, store, seed, previous)
    create_table_artifact(
        key=ROWS_ARTIFACT,
        table=_artifact_rows(out["report"]["rows"]),
        description=f"EvalSuite release {release}: rows of {out['store']}",
    )
    md = (
        compare_markdown(out["compare"])
        if out["compare"]
        else f"Release `{release}`: no earlier release in {out['store']} to compare with."
    )
    create_markdown_artifact(key=COMPARE_ARTIFACT, markdown=md, description=f"release {release}")
    return out


if __name__ == "__main__":
    import typer

    typer.run(eval_suite)
