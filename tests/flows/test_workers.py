"""Many workers, one store: the commands of deployments/README.md on one machine standing in for
many. A PostgreSQL-backed Prefect server, the eval-pool process work pool, `prefect deploy`,
2 Prefect workers, 4 runs of the release-eval deployment triggered with `prefect deployment run`;
the workers share them and all 4 reports land in the one store."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
from standing import (
    BIN,
    ROOT,
    build_zoo,
    client_env,
    forget_server,
    pg_server,
    prefect,
    server_cli_env,
)

from tinyllm_suite import pgserver

pytestmark = pytest.mark.skipif(
    pgserver.pg_available() is not None,
    reason=f"PostgreSQL server binaries are not installed: {pgserver.pg_available()}",
)


async def _workers_online(api_url: str) -> list[str]:
    from prefect.client.orchestration import PrefectClient

    async with PrefectClient(api_url) as client:
        workers = await client.read_workers_for_work_pool("eval-pool")
        return sorted(w.name for w in workers if w.status.value == "ONLINE")


async def _flow_runs(api_url: str, ids: list[str]):
    from prefect.client.orchestration import PrefectClient

    async with PrefectClient(api_url) as client:
        return [await client.read_flow_run(i) for i in ids]


def test_two_workers_share_four_deployment_runs_into_one_store(tmp_path):
    server = pg_server()
    api = server.api_url
    manifest = build_zoo(tmp_path / "zoo")
    store = tmp_path / "store"
    env = client_env(
        api,
        PREFECT_HOME=str(tmp_path / "home"),
        PREFECT_WORKER_QUERY_SECONDS="1",
        PREFECT_WORKER_HEARTBEAT_SECONDS="2",
        PWD=str(ROOT),  # prefect.yaml's pull step: the workers run the code of this checkout
    )
    # the README's commands, in its order
    pool = prefect("work-pool", "create", "eval-pool", "--type", "process", env=env)
    assert pool.returncode == 0 or "already exists" in pool.stdout + pool.stderr, pool.stderr
    dep = prefect("--no-prompt", "deploy", "--all", env=env)
    assert dep.returncode == 0, dep.stdout + dep.stderr
    workers = [
        subprocess.Popen(
            [str(BIN / "prefect"), "worker", "start", "--pool", "eval-pool"]
            + ["--name", f"w{k}", "--limit", "1"],
            cwd=ROOT,
            env={**env, "PREFECT_LOGGING_LEVEL": "INFO"},  # it logs each run it submits
            stdout=open(tmp_path / f"w{k}.log", "w"),  # noqa: SIM115 - closed with the process
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for k in (1, 2)
    ]
    try:
        t0 = time.monotonic()
        while asyncio.run(_workers_online(api)) != ["w1", "w2"]:
            assert time.monotonic() - t0 < 120, "expected workers w1 and w2 online within 120 s"
            assert all(w.poll() is None for w in workers), "a worker exited"
            time.sleep(1)
        releases = [f"wk{k}" for k in range(4)]
        ids = []
        for r in releases:
            run = prefect(
                "deployment",
                "run",
                "EvalSuite/release-eval",
                "--param",
                f"manifest={manifest}",
                "--param",
                f"store={store}",
                "--param",
                f"release={r}",
                env=env,
            )
            assert run.returncode == 0, run.stdout + run.stderr
            ids.append(re.search(r"UUID: ([0-9a-f-]{36})", run.stdout).group(1))
        t0 = time.monotonic()
        while True:
            runs = asyncio.run(_flow_runs(api, ids))
            if all(r.state.is_final() for r in runs):
                break
            assert time.monotonic() - t0 < 400, [r.state.name for r in runs]
            time.sleep(2)
    finally:
        for w in workers:
            pgserver.stop_pid(w.pid)
    assert [r.state.name for r in runs] == ["Completed"] * 4
    for r in releases:  # all 4 reports in the one store
        report = json.loads((store / "releases" / r / "report.json").read_text())
        assert report["release"] == r
        assert [row["status"] for row in report["rows"]] == ["ok", "ok", "ok"]
        assert len(list((store / "releases" / r / "runs").glob("*.json"))) == 1
    # both workers took part, and each run ran once (a second worker's claim of a run is
    # refused by the server: "Aborted submission ... cannot transition to a PENDING state")
    began = {
        k: re.findall(r"Beginning flow run 'eval-(wk\d)'", (tmp_path / f"w{k}.log").read_text())
        for k in (1, 2)
    }
    assert began[1] and began[2], began
    assert sorted(began[1] + began[2]) == releases


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_server_stop_stops_prefect_and_postgres():
    """Last in this module: `tinyllm server stop` (what `make stop` runs) stops the shared server
    (test_postgres_server.py and the test above ran on it), then PostgreSQL; quiet after."""
    server = pg_server()
    api_port = int(server.api_url.rsplit(":", 1)[1].split("/")[0])
    assert _alive(server.pid) and _listening(api_port) and _listening(server.pg_port)
    stop = [str(BIN / "tinyllm"), "server", "stop"]
    env = server_cli_env(server.home)
    r = subprocess.run(stop, env=env, capture_output=True, text=True, timeout=120)
    forget_server()
    assert r.returncode == 0, r.stderr
    assert f"stopped Prefect server (pid {server.pid})" in r.stdout
    assert f"stopped PostgreSQL ({server.home / 'pg'})" in r.stdout
    assert not _alive(server.pid)
    assert not _listening(api_port) and not _listening(server.pg_port)
    assert not (server.home / "server.pid").exists()
    again = subprocess.run(stop, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout.strip() == ""  # quiet when nothing runs
