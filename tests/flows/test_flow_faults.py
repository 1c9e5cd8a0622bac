"""EvalSuite flow runs and the faults of their workers, under Prefect's test harness:

* (b) the reader of the flow run's stdout/stderr goes away mid-run (a process worker killed
  while its flow run goes on): the run still publishes and ends Completed;
* (a) a run whose engine sends heartbeats less often than the crash detection expects
  (PREFECT_FLOWS_HEARTBEAT_FREQUENCY=180, Prefect's default) sends its own every 30 s;
* (c) a retried flow run ends the task runs its killed attempt left RUNNING.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from standing import build_zoo

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))


def _env(**extra: str) -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    env = {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "OMP_NUM_THREADS": "1",
    }
    env.update(extra)
    return env


async def _flow_run(name: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    async with get_client() as client:
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name]))
        )
        return runs


def test_a_flow_run_whose_output_reader_goes_away_still_publishes(tmp_path):
    """The flow run's stdout and stderr are one pipe; the reader closes it once the run has
    begun, as a killed worker does: every later write gets EPIPE. Prefect's console handler
    (rich) raised SystemExit on it, crashing the run before it published."""
    manifest = build_zoo(tmp_path / "zoo")
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "flows/eval_suite.py", manifest, "gone1", "--store", str(store)],
        cwd=ROOT,
        env=_env(PREFECT_LOGGING_LEVEL="INFO"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    seen = b""
    t0 = time.monotonic()
    while b"Beginning flow run" not in seen:
        line = proc.stdout.readline()
        assert line, f"the flow run ended before it began: {seen.decode()[-2000:]}"
        seen += line
        assert time.monotonic() - t0 < 300
    proc.stdout.close()  # the reader is gone
    assert proc.wait(timeout=300) == 0
    report = json.loads((store / "releases" / "gone1" / "report.json").read_text())
    assert [r["status"] for r in report["rows"]] == ["ok", "ok", "ok"]
    (run,) = asyncio.run(_flow_run("eval-gone1"))
    assert run.state.is_completed(), run.state


def test_a_lost_stream_drops_output_instead_of_raising(tmp_path):
    """The mechanism: _LossyStream in front of a pipe whose reader is gone never raises, and
    points the descriptor at /dev/null so later writes (and the final flush) succeed too."""
    from tinyllm_suite.eval_suite import _LossyStream

    r, w = os.pipe()
    os.close(r)
    inner = os.fdopen(w, "w", buffering=1)
    s = _LossyStream(inner)
    assert s.write("a line\n") == len("a line\n")
    assert s.lost
    s.write("more\n")
    s.flush()
    inner.write("straight to the descriptor\n")  # /dev/null now: no EPIPE
    inner.flush()
    inner.close()


async def _heartbeat_events(flow_run_id) -> list:
    from prefect.client.orchestration import get_client
    from prefect.events.filters import (
        EventFilter,
        EventNameFilter,
        EventResourceFilter,
    )

    async with get_client() as client:
        resp = await client._client.post(
            "/events/filter",
            json={
                "filter": EventFilter(
                    event=EventNameFilter(name=["prefect.flow-run.heartbeat"]),
                    resource=EventResourceFilter(id=[f"prefect.flow-run.{flow_run_id}"]),
                ).model_dump(mode="json"),
                "limit": 50,
            },
        )
        resp.raise_for_status()
        return resp.json()["events"]


async def _logs(flow_run_id) -> str:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    async with get_client() as client:
        logs = await client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
        )
        return "\n".join(x.message for x in logs)


def test_a_run_with_slow_engine_heartbeats_sends_its_own(tmp_path):
    """With PREFECT_FLOWS_HEARTBEAT_FREQUENCY=180 (a worker or a `prefect flow-run retry`
    without the setting) the engine sends one heartbeat when the run starts and the next after
    180 s, and the crash detection (90 s) would mark a healthy run Crashed in between. The flow
    sends its own (every 30 s, the first at once): two heartbeats at the start, and it says so.
    The period itself was measured by hand (deployments/README.md)."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from tinyllm_suite.eval_suite import eval_suite

    manifest = build_zoo(tmp_path / "zoo")
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 180}):
        state = eval_suite(manifest=manifest, release="beat1", store=str(tmp_path / "s"),
                           return_state=True)  # fmt: skip
    assert state.is_completed()
    run_id = state.state_details.flow_run_id
    t0 = time.monotonic()
    while len(events := asyncio.run(_heartbeat_events(run_id))) < 2:
        assert time.monotonic() - t0 < 60, f"expected 2 heartbeats, got {len(events)}"
        time.sleep(1)
    flows = {
        r["prefect.resource.name"]
        for e in events
        for r in e["related"]
        if r["prefect.resource.role"] == "flow"
    }
    assert flows == {"EvalSuite"}  # what the crash detection matches on
    while "too few for the crash detection" not in asyncio.run(_logs(run_id)):
        assert time.monotonic() - t0 < 60, "expected the flow run to say it sends heartbeats"
        time.sleep(1)
    # with 30 s heartbeats (what prefect.yaml gives the deployment's runs) nothing is added
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 30}):
        state = eval_suite(manifest=manifest, release="beat2", store=str(tmp_path / "s"),
                           return_state=True)  # fmt: skip
    run_id = state.state_details.flow_run_id
    time.sleep(8)  # the logs and events of the first run reached the server within this
    assert len(asyncio.run(_heartbeat_events(run_id))) == 1
    assert "too few for the crash detection" not in asyncio.run(_logs(run_id))


async def _orphan_attempt(manifest: str, store: str):
    """The state a SIGKILLed attempt of an EvalSuite flow run leaves on the server: the flow
    run Crashed (by the crash detection) above one score-entry task run still RUNNING."""
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed, Pending, Running

    from tinyllm_suite.eval_suite import eval_suite
    from tinyllm_suite.eval_tasks import score_entry_task

    async with get_client() as client:
        run = await client.create_flow_run(
            eval_suite,
            name="eval-orphan1",
            parameters={"manifest": manifest, "release": "orphan1", "store": store},
        )
        await client.set_flow_run_state(run.id, Pending())
        await client.set_flow_run_state(run.id, Running())
        tr = await client.create_task_run(
            score_entry_task, flow_run_id=run.id, dynamic_key="0", name="score-bigram"
        )
        await client.set_task_run_state(tr.id, Running(), force=True)
        await client.set_flow_run_state(
            run.id, Crashed(message="No heartbeat for 90 s"), force=True
        )
        return run.id, tr.id


async def _task_runs(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterFlowRunId

    async with get_client() as client:
        fr = await client.read_flow_run(flow_run_id)
        trs = await client.read_task_runs(
            task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[flow_run_id]))
        )
        return fr, trs


def test_a_retried_run_ends_the_task_runs_its_killed_attempt_left_running(tmp_path):
    """`prefect flow-run retry <id> --entrypoint flows/eval_suite.py:eval_suite` (the command for
    a run that has no deployment) runs the flow again in the same flow run; its new attempt
    makes new task runs, so the old RUNNING one would stay RUNNING under a Completed run."""
    manifest = build_zoo(tmp_path / "zoo")
    store = str(tmp_path / "store")
    run_id, orphan_id = asyncio.run(_orphan_attempt(manifest, store))
    retry = subprocess.run(
        [PREFECT, "flow-run", "retry", str(run_id), "--entrypoint", "flows/eval_suite.py:eval_suite"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert retry.returncode == 0, retry.stdout + retry.stderr
    fr, trs = asyncio.run(_task_runs(run_id))
    assert fr.state.is_completed(), fr.state
    by_id = {t.id: t for t in trs}
    assert by_id[orphan_id].state.type.value == "CRASHED"
    assert "earlier attempt" in by_id[orphan_id].state.message
    assert all(t.state.is_final() for t in trs), [(t.name, t.state.type.value) for t in trs]
    scored = sorted(t.name for t in trs if t.id != orphan_id and t.name.startswith("score-"))
    assert scored == ["score-bigram", "score-bigram2", "score-kn3"]
    assert (Path(store) / "releases" / "orphan1" / "report.json").is_file()
