"""The PostgreSQL-backed Prefect server, from scratch through the CLI (`tinyllm server start --db
postgres`, in standing.py: the server is shared with test_workers.py, whose last test stops it
with `tinyllm server stop`), 4 EvalSuite flow runs at once against it, their states, task runs
and artifacts read back through the API."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from standing import BIN, ROOT, build_zoo, client_env, pg_server, server_cli_env, strip

from tinyllm_suite import pgcluster

pytestmark = pytest.mark.skipif(
    pgcluster.pg_available() is not None,
    reason=f"PostgreSQL server binaries are not installed: {pgcluster.pg_available()}",
)


async def _read_back(api_url: str, releases: list[str]):
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterName,
        TaskRunFilter,
        TaskRunFilterFlowRunId,
    )

    async with PrefectClient(api_url) as client:
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=[f"eval-{r}" for r in releases])
            )
        )
        out = {}
        for run in runs:
            tasks = await client.read_task_runs(
                task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[run.id]))
            )
            arts = await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
            )
            out[run.name] = (run, tasks, {a.key: a for a in arts})
        return out


def test_postgres_server_from_scratch_four_flow_runs_at_once(tmp_path):
    server = pg_server()  # `tinyllm server start --db postgres` in a new temporary folder
    api, pg_port, home = server.api_url, server.pg_port, server.home
    tinyllm = str(BIN / "tinyllm")
    assert f"export PREFECT_API_URL={api}" in server.start_output
    assert (home / "pg" / "PG_VERSION").is_file()  # a cluster created from scratch
    manifest = build_zoo(tmp_path / "zoo")
    store = tmp_path / "store"
    releases = [f"pg{k}" for k in range(4)]
    procs = [
        subprocess.Popen(
            [tinyllm, "eval", "--suite", "zoo", "--manifest", manifest, "--release", r]
            + ["--store", str(store), "--json"]
            # one of them fans out to a local Dask cluster (1 process) reporting here too
            + (["--workers", "1"] if r == "pg3" else []),
            cwd=ROOT,
            env=client_env(api, PREFECT_HOME=str(home)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in releases
    ]
    outs = [p.communicate(timeout=400) for p in procs]
    logs = "".join(o + e for o, e in outs) + (home / "server.log").read_text()
    assert "database is locked" not in logs
    for p, (_, e) in zip(procs, outs, strict=True):
        assert p.returncode == 0, e[-3000:]
    results = {json.loads(o)["report"]["release"]: json.loads(o) for o, _ in outs}
    assert sorted(results) == releases
    # the Dask run scored the same rows as the thread runs
    assert strip(results["pg3"]["report"]["rows"]) == strip(results["pg0"]["report"]["rows"])
    for r in releases:  # all 4 reports landed in the one store
        report = json.loads((store / "releases" / r / "report.json").read_text())
        assert [row["status"] for row in report["rows"]] == ["ok", "ok", "ok"]

    back = asyncio.run(_read_back(api, releases))
    assert sorted(back) == [f"eval-{r}" for r in releases]
    for r in releases:
        run, tasks, arts = back[f"eval-{r}"]
        assert run.state.is_completed(), run.state
        scored = sorted(t.name for t in tasks if t.name.startswith("score-"))
        assert scored == ["score-bigram", "score-bigram2", "score-kn3"]
        assert all(t.state.is_completed() for t in tasks)
        table = arts["eval-suite-rows"].data
        table = json.loads(table) if isinstance(table, str) else table
        report = results[r]["report"]
        assert [row["name"] for row in table] == ["bigram", "bigram2", "kn3"]
        assert [row["value"] for row in table] == [round(row["value"], 4) for row in report["rows"]]
        assert "eval-suite-compare" in arts

    # the runs are in PostgreSQL's tables, not in a SQLite file
    psql = [str(pgcluster.find_pg_bin("psql")), "-h", "127.0.0.1", "-p", str(pg_port)]
    count = subprocess.run(
        [*psql, "-U", "postgres", "-d", "prefect", "-tAc", "select count(*) from flow_run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert count.returncode == 0, count.stderr
    assert int(count.stdout) >= 4
    assert not list(home.glob("*.db"))


@pytest.mark.skipif(
    not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")),
    reason="no PostgreSQL under /usr/lib/postgresql (the binaries are only on PATH here)",
)
def test_binaries_are_found_under_usr_lib_when_not_on_path(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    initdb = pgcluster.find_pg_bin("initdb")
    assert initdb.parent.match("/usr/lib/postgresql/*/bin") and initdb.is_file()
    with pytest.raises(pgcluster.PgError, match="expected PostgreSQL's no-such-tool on PATH"):
        pgcluster.find_pg_bin("no-such-tool")


def _status(api_url: str, path: str, body: dict | None = None) -> int:
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{api_url}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_a_stopped_postgres_is_restarted_on_its_port_under_the_running_server():
    """deployments/README.md's "PostgreSQL stopped" steps: /api/health stays 200 while the
    database is down (/api/ready says 503, every API call that reads the database 500), and
    `tinyllm server start --db postgres` starts it again on the port the running Prefect
    server's database URL names; the server (same pid) serves again."""
    server = pg_server()
    api, home = server.api_url, server.home
    runs = {"flow_runs": {"name": {"any_": ["eval-pg0"]}}}
    assert _status(api, "/flow_runs/filter", runs) == 200
    assert pgcluster.PgCluster(home / "pg").stop()
    assert _status(api, "/health") == 200  # says nothing of the database
    assert _status(api, "/ready") == 503
    assert _status(api, "/flow_runs/filter", runs) == 500
    start = subprocess.run(
        [str(BIN / "tinyllm"), "server", "start", "--db", "postgres", "--port", "0"],
        cwd=ROOT,
        env=server_cli_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert start.returncode == 0, start.stdout + start.stderr
    assert f"Prefect server (pid {server.pid})" in start.stdout
    assert f"on 127.0.0.1:{server.pg_port}" in start.stdout
    assert pgcluster.PgCluster(home / "pg").port() == server.pg_port
    assert _status(api, "/ready") == 200
    assert _status(api, "/flow_runs/filter", runs) == 200
    state = json.loads((home / "server.json").read_text())
    assert (state["pid"], state["pg_port"]) == (server.pid, server.pg_port)
