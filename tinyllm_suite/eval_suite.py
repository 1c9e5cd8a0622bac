"""The EvalSuite flow: one retried task per manifest entry, a report in the store, a comparison.

::

    eval_suite(manifest, release, store="./evalstore", only=None, previous=None, seed=0,
               refresh=False, track=None)
      release = the name, or a template of the run's scheduled start: "nightly-{scheduled_time}"
      entries = the manifest, validated (a bad manifest fails before anything runs)
      futures = score_entry_task.map(entries)   # retries transient failures; an ok row is
                                                # cached by content, an error row never is;
                                                # refresh: every entry scored, none read
      rows    = [row, or an error row for a task that failed after its retries]
      publish = write the run + merged release report + per-item scores (the rows' and their
                baselines') and unit ids, compare with previous
      artifacts: a table of the rows, a markdown summary of the comparison (fixed keys), every
                 user-derived string in them escaped (the UI renders both as markdown)
      track   = the published release logged to MLflow / W&B (tinyllm.trackers); a tracker that
                fails is a warning, the release stays published

While it runs, the flow run sends heartbeats at least every ``tinyllm_suite.server.HEARTBEAT_S``
seconds (whatever the worker's ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY``), so the crash detection
(:func:`ensure_crash_detection`) never marks a healthy run Crashed; a reader of its stdout or
stderr that goes away (a killed worker) never ends it; task runs an earlier, killed attempt of
the same flow run left unfinished are set Crashed when it is retried.

Run it directly (``python flows/eval_suite.py --help``), through ``tinyllm eval --suite zoo
--release R`` or as the ``release-eval`` deployment in prefect.yaml.
"""

from __future__ import annotations

import os

from tinyllm_suite.server import HEARTBEAT_S, ZOMBIE_AFTER_S  # no prefect import there

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # before prefect is imported
# `python flows/eval_suite.py`: heartbeats the crash detection can rely on (a worker's runs get
# it from prefect.yaml's job variables; the flow sends its own when it is slower: liveness.py)
os.environ.setdefault("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", str(HEARTBEAT_S))

import contextlib
import io
import logging
import string
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from prefect import flow, get_client, get_run_logger, task, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import EventTrigger, Posture
from prefect.events.schemas.events import ResourceSpecification
from prefect.futures import wait
from prefect.runtime import flow_run
from prefect.states import Crashed
from prefect.task_runners import ThreadPoolTaskRunner

from tinyllm.compare_render import compare_markdown
from tinyllm.eval import zoo
from tinyllm.publish import check_publish_args, publish_run
from tinyllm.report import Manifest, ManifestError, load_manifest, stored_report
from tinyllm.store import new_run_id, open_store
from tinyllm.trackers import check_trackers, track_rows
from tinyllm_suite.artifacts import artifact_rows, md_link, md_safe_comparison, md_text
from tinyllm_suite.eval_tasks import (
    RETRY_DELAYS,
    cache_storage,
    is_transient_state,
    publish_dashboard_task,
    result_arrays,
    score_entry_task,
)
from tinyllm_suite.liveness import crash_leftover_task_runs, heartbeats

ROWS_ARTIFACT = "eval-suite-rows"
COMPARE_ARTIFACT = "eval-suite-compare"


# ---- release names of scheduled runs ---------------------------------------------------------------

RELEASE_FIELDS = ("date", "time", "scheduled_time")


def resolve_release(release: str, scheduled: datetime | None = None) -> str:
    """The release name: ``release`` itself, or ``release`` with its fields filled in from the
    flow run's scheduled start time ``scheduled`` (UTC; default: the current flow run's):

    - ``{date}``: ``20250101``; ``{time}``: ``030000``; ``{scheduled_time}``: ``20250101-030000``.

    prefect.yaml's nightly deployment writes ``nightly-{scheduled_time}``: every night its own
    release, compared with the night before; a manual run of the deployment gets the time it
    was started. A retry of a flow run keeps its scheduled start, so its release. Anything else
    in braces is refused.
    """
    if "{" not in release and "}" not in release:
        return release
    try:
        parts = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(release)]
    except ValueError as e:  # a lone '{' or '}'
        raise ValueError(f"release: expected a name or a template, got {release!r} ({e})") from None
    if any(f is not None and (f not in RELEASE_FIELDS or spec or conv) for f, spec, conv in parts):
        raise ValueError(
            f"release: expected a name or a template of the fields "
            f"{', '.join('{' + f + '}' for f in RELEASE_FIELDS)}, got {release!r}"
        )
    if scheduled is None:
        scheduled = flow_run.scheduled_start_time
    at = scheduled.astimezone(UTC)
    return release.format(
        date=at.strftime("%Y%m%d"),
        time=at.strftime("%H%M%S"),
        scheduled_time=at.strftime("%Y%m%d-%H%M%S"),
    )


def _flow_run_name() -> str:
    """``eval-<release>``, the release resolved as the flow resolves it."""
    release = str(flow_run.parameters.get("release", ""))
    try:
        return f"eval-{resolve_release(release)}"
    except ValueError:  # the flow itself reports it
        return f"eval-{release}"


# ---- a flow run that outlives its reader and its worker's settings -------------------------------


class _LossyStream(io.TextIOBase):
    """The process's stdout or stderr, whose writes never raise: once the other end is gone (the
    worker reading the pipe was killed: EPIPE) the file descriptor is pointed at /dev/null and
    output is dropped, so a log line or a print never ends a flow run (rich, under Prefect's
    console log handler, raises SystemExit on a broken pipe)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.lost = False

    def _lose(self, exc: BaseException) -> None:
        self.lost = True
        if isinstance(exc, BrokenPipeError):
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self._inner.fileno())  # C-level writes and the final flush too
                os.close(devnull)

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                self._inner.write(text)
            except (OSError, ValueError) as e:
                self._lose(e)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.lost:
            try:
                self._inner.flush()
            except (OSError, ValueError) as e:
                self._lose(e)

    def isatty(self) -> bool:
        try:
            return self._inner.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self._inner.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._inner, "errors", None)

    @property
    def buffer(self) -> Any:
        return self._inner.buffer


_LOSSY: dict[int, _LossyStream] = {}


def guard_output_streams() -> None:
    """Put a :class:`_LossyStream` in front of the process's own stdout and stderr: as
    ``sys.stdout`` / ``sys.stderr`` and in every logging handler that writes to them (Prefect's
    console handler writes through a rich Console holding the stream it was created with).
    Other streams (a test's capture, a file) are left as they are. Idempotent."""
    real = [s for s in (sys.__stdout__, sys.__stderr__) if s is not None]

    def lossy(stream: Any) -> Any:
        if not any(stream is r for r in real):
            return stream
        return _LOSSY.setdefault(id(stream), _LossyStream(stream))

    sys.stdout, sys.stderr = lossy(sys.stdout), lossy(sys.stderr)
    loggers = [logging.getLogger(), *logging.root.manager.loggerDict.values()]
    for lg in loggers:
        for h in getattr(lg, "handlers", ()):
            if isinstance(h, logging.StreamHandler) and lossy(h.stream) is not h.stream:
                h.stream = lossy(h.stream)  # not setStream: it flushes the old stream
            console = getattr(h, "console", None)  # a rich Console
            file = getattr(console, "file", None)
            if file is not None and lossy(file) is not file:
                console.file = lossy(file)


guard_output_streams()  # a deployment's flow run: the engine loads this module before it logs


def select_entries(manifest: Manifest, only: list[str] | None) -> list:
    """The entries to score: all, or those named in ``only`` (unknown names are refused)."""
    if not only:
        return list(manifest.entries)
    names = [e.name for e in manifest.entries]
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ManifestError(f"only: expected entry names from the manifest {names}, got {unknown}")
    return [e for e in manifest.entries if e.name in set(only)]


@task(
    name="publish-release",
    retries=2,
    retry_delay_seconds=RETRY_DELAYS,
    retry_condition_fn=is_transient_state,  # the score tasks' condition: transient errors only
)
def publish_release(
    manifest: Manifest,
    rows: list[dict],
    items: dict[str, list[float]],
    release: str,
    store: str,
    seed: int,
    previous: str | None,
    run_id: str | None = None,
    created_at: str | None = None,
    baseline_items: dict[str, list[float]] | None = None,
    units: dict[str, list[int]] | None = None,
) -> dict:
    """Write the run's raw rows (never overwritten), the per-item scores of the rows and of
    their baselines and the rows' unit ids (content-addressed), the merged release report
    (compare-and-swap, the rows' "beats baseline" verdicts adjusted by Holm over the merged
    report); then compare with the previous release. Returns ``{run_id, report, compare, store}``. A retry
    after a transient store failure rewrites the same items (same names) and a new run file;
    scores come from the cache."""
    st = open_store(store)
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in items.items()}
    base = {k: np.asarray(v, dtype=np.float64) for k, v in (baseline_items or {}).items()}
    unit_ids = {k: np.asarray(v, dtype=np.int64) for k, v in (units or {}).items()}
    order = [e.name for e in manifest.entries]
    run = zoo.build_run_report(manifest, rows, seed=seed, release=release, created_at=created_at)
    return publish_run(
        st,
        release,
        run,
        arrays,
        baseline_items=base,
        units=unit_ids,
        order=order,
        previous=previous,
        seed=seed,
        run_id=run_id,
    )


CRASH_AUTOMATION = "tinyllm: crash flow runs that stop sending heartbeats"
FLOW_NAME = "EvalSuite"


def ensure_crash_detection(after_s: float | None = None) -> str:
    """Make sure the server marks an EvalSuite flow run Crashed when its heartbeats stop; return
    the automation's name.

    Prefect 3's own mechanism (docs: "detect zombie flows"): a running flow run emits a
    ``prefect.flow-run.heartbeat`` event every ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds;
    EvalSuite runs send one at least every tinyllm_suite.server.HEARTBEAT_S (30) seconds whatever
    that setting is (:func:`tinyllm_suite.liveness.heartbeats`). This proactive automation
    expects, after each heartbeat of an EvalSuite run, another heartbeat or a terminal state
    within ``after_s`` seconds (default tinyllm_suite.server.ZOMBIE_AFTER_S, three missed
    heartbeats) and otherwise sets the run to CRASHED.
    A run killed with SIGKILL, by the OOM killer or with its machine cannot report its own end;
    without this it stays RUNNING forever. Runs of other flows on the same server are left
    alone: their heartbeat period is not ours to know (Prefect's default, 180 s, is longer than
    the window). Idempotent: an automation of the same name and trigger is kept, one with
    another window or scope replaced.
    """
    from prefect.automations import Automation  # loaded by no other import: only this call

    within = timedelta(seconds=after_s if after_s is not None else ZOMBIE_AFTER_S)
    trigger = EventTrigger(
        after={"prefect.flow-run.heartbeat"},
        expect={
            "prefect.flow-run.heartbeat",
            "prefect.flow-run.Completed",
            "prefect.flow-run.Failed",
            "prefect.flow-run.Cancelled",
            "prefect.flow-run.Crashed",
        },
        match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
        match_related=ResourceSpecification(
            {"prefect.resource.role": "flow", "prefect.resource.name": FLOW_NAME}
        ),
        for_each={"prefect.resource.id"},
        posture=Posture.Proactive,
        threshold=1,
        within=within,
    )
    try:
        old = Automation.read(name=CRASH_AUTOMATION)
    except ValueError:  # not found
        old = None
    if old is not None:
        same = (
            old.enabled
            and old.trigger.within == within
            and getattr(old.trigger, "match_related", None) == trigger.match_related
        )
        if same:
            return CRASH_AUTOMATION
        old.delete()
    Automation(
        name=CRASH_AUTOMATION,
        description=f"{FLOW_NAME} flow runs that stop sending heartbeats (killed, OOM, machine "
        "lost) are marked Crashed. See deployments/README.md.",
        trigger=trigger,
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"No heartbeat for {within.total_seconds():.0f} s: the process running "
                "this flow run died (SIGKILL, out of memory, machine lost).",
            )
        ],
    ).create()
    return CRASH_AUTOMATION


DASK_ADDRESS_ENV = "TINYLLM_DASK_ADDRESS"


def make_task_runner(dask_address: str | None = None, workers: int | None = None):
    """The fan-out's task runner; the flow is the same whichever is chosen.

    - ``dask_address`` (``tcp://host:8786``, or ``$TINYLLM_DASK_ADDRESS`` when not given): the
      tasks go to that Dask cluster (prefect-dask's ``DaskTaskRunner``); its workers must import
      tinyllm and reach the same Prefect API and store;
    - ``workers=N``: a local Dask cluster of N single-threaded worker processes, started for
      the flow run and stopped after it (one big machine);
    - neither: a pool of 2 threads in the flow's process (the default).

    Dask runners need a standing Prefect server (``PREFECT_API_URL``): each worker process
    reports its task runs to it.
    """
    address = dask_address or os.environ.get(DASK_ADDRESS_ENV) or None
    if address is not None and workers is not None:
        raise ValueError(
            f"expected a Dask scheduler address or a number of local workers, got both "
            f"({address!r} and workers={workers})"
        )
    if workers is not None and workers < 1:
        raise ValueError(f"workers: expected a number of Dask worker processes >= 1, got {workers}")
    if address is None and workers is None:
        return ThreadPoolTaskRunner(max_workers=2)
    from prefect_dask import DaskTaskRunner  # loads dask.distributed: a Dask runner only

    if address is not None:
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(
        cluster_kwargs={
            "n_workers": workers,
            "threads_per_worker": 1,  # one entry at a time per process: torch uses one thread
            "processes": True,
            "dashboard_address": ":0",  # a free port: two clusters never collide
        }
    )


@flow(
    name=FLOW_NAME,
    task_runner=make_task_runner(),  # threads, or $TINYLLM_DASK_ADDRESS's cluster
    flow_run_name=_flow_run_name,  # eval-<release>, a template resolved
    validate_parameters=True,
)
def eval_suite(
    manifest: str,
    release: str,
    store: str = "./evalstore",
    only: list[str] | None = None,
    previous: str | None = None,
    seed: int = 0,
    refresh: bool = False,
    track: list[str] | None = None,
) -> dict:
    """Score every entry of ``manifest`` (or only the named ones) as release ``release``.

    ``release`` is a name or a template of the flow run's scheduled start (UTC): ``{date}``,
    ``{time}``, ``{scheduled_time}`` (:func:`resolve_release`; prefect.yaml's nightly run writes
    ``nightly-{scheduled_time}``). Returns ``{"run_id", "report", "compare", "store",
    "dashboard", "cached", "tracked"}``, JSON-native (``compare``: the comparison's compare.json
    document, None for the first release; the report's ``release`` is the resolved name;
    ``cached``: the names of the entries whose row came from the result cache; ``tracked``: per
    tracker of ``track`` (``mlflow``, ``wandb``; checked before anything is scored) where the
    published release was logged or why it was not, :class:`tinyllm.trackers.Tracked` as a
    dict). An entry that fails becomes an
    error row; the flow itself fails only on a bad manifest or a store it cannot write.

    Caching: an entry whose spec, checkpoint and data bytes, seed and tinyllm source are those
    of an earlier ok row gets that row back (its task run ends ``Cached``); error and skipped
    rows are never cached, so a rerun scores those entries again. ``refresh=True`` scores every
    entry, reading nothing from the cache (its ok rows replace the cached ones).
    """
    logger = get_run_logger()
    guard_output_streams()  # handlers set up after this module was imported
    release = resolve_release(release)
    trackers = check_trackers(track)  # an unknown tracker or a missing extra: before anything
    with heartbeats(logger, HEARTBEAT_S, ZOMBIE_AFTER_S):
        crash_leftover_task_runs(logger)
        out = _score_and_publish(logger, manifest, release, store, only, previous, seed, refresh)
        out["tracked"] = track_published(logger, release, out, trackers)
        # the flow's result is JSON (what `eval --json` prints, what Prefect keeps): the
        # comparison as its compare.json document
        cmp = out["compare"]
        return out | {"compare": None if cmp is None else cmp.to_json()}


def track_published(logger, release: str, out: dict, trackers: tuple[str, ...]) -> list[dict]:
    """Log the published release (``out``: :func:`publish_run`'s result) to each tracker; a
    tracker that fails is logged as a warning, one line (the release is already in the store)."""
    report = stored_report(out["report"])
    results = track_rows(release, report, out["compare"], trackers, out["store"])
    for t in results:
        if t.error is None:
            logger.info("release %s logged to %s: %s", release, t.tracker, t.where)
        else:
            logger.warning("release %s not logged to %s: %s", release, t.tracker, t.error)
    return [asdict(t) for t in results]


def _score_and_publish(logger, manifest, release, store, only, previous, seed, refresh) -> dict:
    m = load_manifest(manifest)  # ManifestError before anything runs
    entries = select_entries(m, only)
    check_publish_args(store, release, previous)  # bad release / store / previous: before scoring
    base_dir = str(Path(manifest).resolve().parent)
    t0 = time.perf_counter()
    # refresh_cache: the cache key is computed but no record is read; an ok result is written
    options: dict[str, Any] = {"result_storage": cache_storage()}
    if refresh:
        options["refresh_cache"] = True
    scorer = score_entry_task.with_options(**options)
    futures = scorer.map(
        [e.model_dump(mode="json") for e in entries],
        seed=unmapped(seed),
        base_dir=unmapped(base_dir),
    )
    wait(futures)
    rows: list[dict] = []
    items: dict[str, list[float]] = {}
    base_items: dict[str, list[float]] = {}
    unit_ids: dict[str, list[int]] = {}
    cached: list[str] = []
    for entry, fut in zip(entries, futures, strict=True):
        if not fut.state.is_final():  # the runner lost it (a Dask worker died on each attempt)
            rows.append(zoo.error_row(entry, lost_task(fut)))
            continue
        result = fut.state.result(raise_on_failure=False)
        if fut.state.is_completed() and isinstance(result, dict):
            rows.append(result["row"])
            if fut.state.name == "Cached":  # Prefect's name for a result read from the cache
                cached.append(entry.name)
            arrays = zip((items, base_items, unit_ids), result_arrays(result), strict=True)
            for kept, arr in arrays:
                if arr is not None:
                    kept[entry.name] = arr
        else:  # failed after its retries: an error row with the exception's type and message
            exc = result if isinstance(result, BaseException) else RuntimeError(str(fut.state))
            rows.append(zoo.error_row(entry, exc))
    logger.info(
        "scored %d entries in %.1f s, %d of them from the cache",
        len(rows),
        time.perf_counter() - t0,
        len(cached),
    )
    # fixed before the first attempt: a retried publish writes the very same run file
    run_id = new_run_id()
    created_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    out = publish_release(
        m, rows, items, release, store, seed, previous, run_id, created_at, base_items, unit_ids
    )
    out["cached"] = cached
    create_table_artifact(
        key=ROWS_ARTIFACT,
        table=artifact_rows(out["report"]["rows"]),
        description=f"EvalSuite release {md_text(release)}: rows of {md_text(out['store'])}",
    )
    md = (
        compare_markdown(md_safe_comparison(out["compare"]))
        if out["compare"]
        else f"Release `{release}`: no earlier release in {md_text(out['store'])} to compare with."
    )
    # the dashboard of the whole history, rebuilt into the store beside releases/; the release is
    # already written, so a dashboard that cannot be built is reported, not a failed release
    dash = publish_dashboard_task(store, return_state=True)
    if dash.is_completed():
        out["dashboard"] = dash.result()
        md += f"\n\nDashboard of the run history: {md_link(out['dashboard'])}\n"
    else:
        out["dashboard"] = None
        logger.error("dashboard not written: %s", dash.message)
        md += f"\n\nDashboard not written: {md_text(dash.message)}\n"
    create_markdown_artifact(
        key=COMPARE_ARTIFACT, markdown=md, description=f"release {md_text(release)}"
    )
    return out


def lost_task(fut) -> BaseException:
    """The exception of a task run that never reached a final state because the process running
    it died (Dask gives up with ``KilledWorker`` once ``distributed.scheduler.allowed-failures``
    workers died running it). Its task run, left RUNNING by the dead process, is set CRASHED."""
    exc: BaseException = RuntimeError(f"task run {fut.task_run_id} never finished")
    wrapped = getattr(fut, "wrapped_future", None)
    if wrapped is not None:
        try:
            exc = wrapped.exception(timeout=30) or exc  # done: wait() saw it fail
        except Exception as e:  # noqa: BLE001 - the runner's own error is the best message
            exc = e
    try:  # best effort: a killed process may not have reported the run at all (404)
        with get_client(sync_client=True) as client:
            client.set_task_run_state(fut.task_run_id, Crashed(message=str(exc)), force=True)
    except Exception as e:  # noqa: BLE001 - the error row below is what matters
        get_run_logger().warning("could not mark task run %s crashed: %s", fut.task_run_id, e)
    return exc


def configured_suite(dask_address: str | None = None, workers: int | None = None):
    """The EvalSuite flow with the task runner :func:`make_task_runner` picks (same flow)."""
    return eval_suite.with_options(task_runner=make_task_runner(dask_address, workers))


if __name__ == "__main__":
    import typer

    typer.run(eval_suite)
