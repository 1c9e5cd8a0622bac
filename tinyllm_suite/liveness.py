"""A flow run's liveness: heartbeats the crash detection can rely on, and the task runs an
earlier, killed attempt of the same flow run left unfinished.

Both act on the flow run in progress (Prefect's run context) through its Prefect server; outside
a flow run they do nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Any

import prefect
from prefect import get_client
from prefect.client.schemas.filters import (
    TaskRunFilter,
    TaskRunFilterFlowRunId,
    TaskRunFilterState,
    TaskRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.context import FlowRunContext
from prefect.events import emit_event
from prefect.settings import get_current_settings
from prefect.states import Crashed


@contextlib.contextmanager
def heartbeats(logger: Any, every_s: int, crash_after_s: int):
    """Heartbeats of this flow run at least every ``every_s`` seconds while the block runs.

    Prefect's engine sends them every ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` seconds (default 180);
    the crash detection expects one within ``crash_after_s`` (90 for EvalSuite runs). When the
    engine's period is longer (a worker or a `prefect flow-run retry` without the setting), this
    sends the same ``prefect.flow-run.heartbeat`` event from a thread, so a healthy run is never
    marked Crashed. Nothing is added when the engine's period is short enough.
    """
    engine_s = get_current_settings().flows.heartbeat_frequency
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None or (engine_s is not None and engine_s <= every_s):
        yield
        return
    run = ctx.flow_run
    resource = {
        "prefect.resource.id": f"prefect.flow-run.{run.id}",
        "prefect.resource.name": run.name or "",
        "prefect.version": prefect.__version__,
    }
    related = [
        {
            "prefect.resource.id": f"prefect.flow.{run.flow_id}",
            "prefect.resource.role": "flow",
            "prefect.resource.name": ctx.flow.name if ctx.flow else "",
        }
    ]
    logger.warning(
        "flow-run heartbeats every %s s (PREFECT_FLOWS_HEARTBEAT_FREQUENCY) are too few for the "
        "crash detection (%d s without one): this run also sends one every %d s",
        engine_s,
        crash_after_s,
        every_s,
    )
    stop = threading.Event()

    def beat() -> None:
        while True:
            with contextlib.suppress(Exception):  # a lost heartbeat is retried next period
                emit_event(event="prefect.flow-run.heartbeat", resource=resource, related=related)
            if stop.wait(every_s):
                return

    thread = threading.Thread(
        target=contextvars.copy_context().run, args=(beat,), daemon=True, name="tinyllm-heartbeat"
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


_UNFINISHED = ("SCHEDULED", "PENDING", "RUNNING", "PAUSED", "CANCELLING")


def crash_leftover_task_runs(logger: Any) -> int:
    """Set Crashed the task runs of this flow run that are not final when it starts: an earlier
    attempt (killed with its process, then retried with ``prefect flow-run retry``) left them
    RUNNING, and each attempt makes new task runs, so nothing else would ever end them (the
    flow run would end Completed above task runs RUNNING forever). Returns how many."""
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return 0
    flt = TaskRunFilter(
        flow_run_id=TaskRunFilterFlowRunId(any_=[ctx.flow_run.id]),
        state=TaskRunFilterState(
            type=TaskRunFilterStateType(any_=[StateType(t) for t in _UNFINISHED])
        ),
    )
    done = 0
    try:
        with get_client(sync_client=True) as client:
            while True:
                left = client.read_task_runs(task_run_filter=flt, limit=200)
                for tr in left:
                    client.set_task_run_state(
                        tr.id,
                        Crashed(
                            message=f"left {tr.state_type.value if tr.state_type else 'unfinished'}"
                            f" by an earlier attempt of flow run {ctx.flow_run.name} that died; "
                            f"attempt {ctx.flow_run.run_count} scores its entry again"
                        ),
                        force=True,
                    )
                done += len(left)
                if len(left) < 200:
                    break
    except Exception as e:  # noqa: BLE001 - a stale task run must not stop the release
        logger.warning("could not mark the task runs of an earlier attempt crashed: %s", e)
    if done:
        logger.warning("set %d task run(s) of an earlier attempt of this flow run Crashed", done)
    return done
