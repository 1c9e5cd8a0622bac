"""prefect.yaml deploys against a real Prefect API (the test harness's server), and its nightly
runs, executed by a real process worker, each write their own release."""

import asyncio
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from standing import build_zoo

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))
HEARTBEAT_WARNING = "are too few for the crash detection"


def _env() -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    env = {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PWD": str(ROOT),  # prefect.yaml's pull step: the worker runs this checkout's code
    }
    # a worker started as deployments/README.md's "Worker hosts" block says: no heartbeat setting
    env.pop("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", None)
    env.pop("PREFECT_RUNNER_HEARTBEAT_FREQUENCY", None)
    return env


def _prefect(*args, env):
    return subprocess.run(
        [PREFECT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _deploy(env) -> None:
    pool = _prefect("work-pool", "create", "eval-pool", "--type", "process", env=env)
    assert pool.returncode == 0 or "already exists" in pool.stdout + pool.stderr, pool.stderr
    dep = _prefect("--no-prompt", "deploy", "--all", env=env)
    assert dep.returncode == 0, dep.stdout + dep.stderr
    assert "release-eval" in dep.stdout


def test_prefect_yaml_deploys_release_eval_with_schedule():
    env = _env()
    _deploy(env)
    inspect = _prefect(
        "deployment", "inspect", "EvalSuite/release-eval", "--output", "json", env=env
    )
    assert inspect.returncode == 0, inspect.stderr
    doc = json.loads(inspect.stdout)
    assert doc["work_pool_name"] == "eval-pool"
    assert doc["parameters"]["release"] == "nightly-{scheduled_time}"  # a release per night
    assert doc["parameters"]["manifest"] == "zoo/zoo.yaml"
    assert [s["schedule"]["cron"] for s in doc["schedules"]] == ["0 3 * * *"]
    assert doc["entrypoint"] == "flows/eval_suite.py:eval_suite"
    assert doc["job_variables"]["env"]["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == "30"
    steps = doc["pull_steps"]
    assert steps[0]["prefect.deployments.steps.set_working_directory"]["directory"] == str(ROOT)
    # the cron, as deployments/README.md says to look at it
    ls = _prefect("deployment", "schedule", "ls", "EvalSuite/release-eval", env=env)
    assert ls.returncode == 0 and "0 3 * * *" in ls.stdout, ls.stdout + ls.stderr


async def _runs_and_logs(names: list[str]):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterName,
        LogFilter,
        LogFilterFlowRunId,
    )

    async with get_client() as client:
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=names))
        )
        logs = {}
        for r in runs:
            got = await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[r.id]))
            )
            logs[r.name] = "\n".join(x.message for x in got)
        return {r.name: r for r in runs}, logs


def _schedule(deployment: str, when: datetime, params: dict) -> str:
    from prefect.client.orchestration import get_client
    from prefect.states import Scheduled

    async def go() -> str:
        async with get_client() as client:
            dep = await client.read_deployment_by_name(deployment)
            run = await client.create_flow_run_from_deployment(
                dep.id, parameters=params, state=Scheduled(scheduled_time=when)
            )
            return str(run.id)

    return asyncio.run(go())


def _worker_once(env) -> subprocess.CompletedProcess:
    """A process worker that takes the earliest scheduled run, runs it to its end and exits."""
    return _prefect("worker", "start", "--pool", "eval-pool", "--run-once", "--limit", "1", env=env)


def test_nightly_runs_on_two_days_are_two_releases_the_second_compared_with_the_first(tmp_path):
    """Two runs of the deployment, as its schedule makes them on 2025-01-01 and 2025-01-02
    (03:00 UTC), each executed by a real process worker started without
    PREFECT_FLOWS_HEARTBEAT_FREQUENCY, then a manual `prefect deployment run`: three releases,
    each compared with the one before; and the runs' heartbeats came every 30 s from prefect.yaml's
    job variables (the flow would otherwise warn that it sends its own)."""
    env = _env()
    _deploy(env)
    params = {"manifest": build_zoo(tmp_path / "zoo"), "store": str(tmp_path / "store")}
    for day in (1, 2):
        _schedule("EvalSuite/release-eval", datetime(2025, 1, day, 3, 0, tzinfo=UTC), params)
        w = _worker_once(env)
        assert w.returncode == 0, w.stdout + w.stderr
    manual = _prefect(
        "deployment", "run", "EvalSuite/release-eval",
        "--param", f"manifest={params['manifest']}", "--param", f"store={params['store']}",
        env=env,
    )  # fmt: skip
    assert manual.returncode == 0, manual.stdout + manual.stderr
    w = _worker_once(env)
    assert w.returncode == 0, w.stdout + w.stderr

    releases = tmp_path / "store" / "releases"
    first, second = "nightly-20250101-030000", "nightly-20250102-030000"
    third = sorted(p.name for p in releases.iterdir() if p.name not in (first, second))
    assert len(third) == 1 and re.fullmatch(r"nightly-\d{8}-\d{6}", third[0]), third
    assert third[0] > f"nightly-{datetime.now(UTC):%Y%m%d}"  # today: when it was started
    for name in (first, second, third[0]):
        report = json.loads((releases / name / "report.json").read_text())
        assert report["release"] == name
        assert [r["status"] for r in report["rows"]] == ["ok", "ok", "ok"]
    assert not (releases / first / "compare.json").exists()  # nothing before the first
    assert json.loads((releases / second / "compare.json").read_text())["previous"] == first
    assert json.loads((releases / third[0] / "compare.json").read_text())["previous"] == second

    names = [f"eval-{n}" for n in (first, second, third[0])]
    runs, logs = asyncio.run(_runs_and_logs(names))
    assert sorted(runs) == sorted(names)
    assert all(r.state.is_completed() for r in runs.values())
    assert all(HEARTBEAT_WARNING not in text for text in logs.values()), logs


def test_a_release_template_with_another_field_is_refused_before_scoring(tmp_path):
    from tinyllm_suite.eval_suite import eval_suite

    manifest = build_zoo(tmp_path / "zoo")
    for bad in ("nightly-{hostname}", "nightly-{date:%Y}", "nightly-{"):
        with pytest.raises(
            ValueError, match="release: expected a name or a template.*" + re.escape(repr(bad))
        ):
            eval_suite(manifest=manifest, release=bad, store=str(tmp_path / "store"))
    assert not (tmp_path / "store").exists()
