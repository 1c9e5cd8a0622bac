"""Scripted checks against a REAL local Prefect server, started the way `make demo` starts it.
They share one server (module fixture): about 1.5 minutes in all.

* `tinyllm eval --suite zoo --release R` with no PREFECT_API_URL uses
  tinyllm_suite.server.choose_server: it starts the project's server (PREFECT_HOME, 60 s start-up
  timeout), the run shows up in that server, nothing is written to ~/.prefect, and the next
  command finds the running server instead of starting another;
* a flow run killed with SIGKILL ends up Crashed, through Prefect's flow-run heartbeats
  and the crash-detection automation (tinyllm_suite.eval_suite.ensure_crash_detection).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from tinyllm.models import bigram
from tinyllm.tokens import write_tokens
from tinyllm_suite import pgserver

ROOT = Path(__file__).resolve().parents[2]
TINYLLM = str(Path(sys.executable).with_name("tinyllm"))
TEXT = b"the cat sat on the mat. the dog sat on the log. " * 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(url: str, path: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"{url}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def _clean_env(tmp: Path, port: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        HOME=str(tmp / "home"),  # anything written to ~/.prefect would land here
        TINYLLM_PREFECT_PORT=str(port),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        OMP_WAIT_POLICY="PASSIVE",
    )
    (tmp / "home").mkdir(exist_ok=True)
    return env


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A folder like a fresh checkout's: a tiny zoo, no .prefect, no server running."""
    tmp = tmp_path_factory.mktemp("project")
    data = np.frombuffer(TEXT, dtype=np.uint8)
    write_tokens(tmp / "val.tok", data[:200])
    bigram.save(bigram.train(bigram.Config(k=0.5), data, seed=0), tmp / "bigram")
    doc = {
        "suite": "zoo",
        "entries": [
            {"name": "bigram", "family": "bigram", "checkpoint": "bigram", "data": "val.tok"}
        ],
    }
    (tmp / "zoo.yaml").write_text(yaml.safe_dump(doc))
    port = _free_port()
    yield tmp, port, _clean_env(tmp, port)
    pid_file = tmp / ".prefect" / "server.pid"
    if pid_file.exists():  # the server the CLI started for us, stopped as `make stop` does
        pid = int(pid_file.read_text())
        assert pgserver.stop(tmp / ".prefect") == [f"Prefect server (pid {pid})"]


def test_cli_flow_mode_starts_and_then_reuses_the_project_server(project):
    tmp, port, env = project
    cmd = [TINYLLM, "eval", "--suite", "zoo", "--manifest", "zoo.yaml", "--store", "store"]
    res = subprocess.run(
        [*cmd, "--release", "r1"], cwd=tmp, env=env, capture_output=True, text=True, timeout=400
    )
    assert res.returncode == 0, res.stderr[-3000:]
    api = f"http://127.0.0.1:{port}/api"
    assert "starting a Prefect server" in res.stderr
    assert (tmp / ".prefect" / "server.pid").is_file()  # the project's PREFECT_HOME
    assert (tmp / ".prefect" / "server.log").is_file()
    assert not (tmp / "home" / ".prefect").exists()  # nothing in the user's home
    runs = _api(api, "/flow_runs/filter", {"flow_runs": {"name": {"any_": ["eval-r1"]}}})
    assert [r["state"]["type"] for r in runs] == ["COMPLETED"]  # in the UI make demo shows
    # the next command finds the running server instead of starting another one
    res = subprocess.run(
        [sys.executable, "-c", "from rich.console import Console; from tinyllm_suite.server import "
         "choose_server; print(choose_server(Console(stderr=True)))"],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == api and "already running" in res.stderr


# a stand-in for a long EvalSuite run: the crash detection watches runs of that flow name only
SLEEPER = """
import time
from prefect import flow

@flow(name="EvalSuite", flow_run_name="sleeper-{tag}")
def sleeper(tag: str):
    print("RUNNING", flush=True)
    time.sleep(600)

sleeper("{tag}")
"""


def test_a_run_killed_with_sigkill_ends_up_crashed(project):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from tinyllm_suite.eval_suite import ensure_crash_detection

    tmp, port, env = project
    api = f"http://127.0.0.1:{port}/api"
    if not (tmp / ".prefect" / "server.pid").exists():
        pytest.skip("needs the server of the previous test")
    # the check's window, short to keep the test short: this server has no other runs that a
    # window below the heartbeat period could crash; the project's default is 3 heartbeats (90 s)
    after_s = 10
    with temporary_settings(updates={PREFECT_API_URL: api}):
        ensure_crash_detection(after_s=after_s)
        ensure_crash_detection(after_s=after_s)  # idempotent: still one automation
    autos = _api(api, "/automations/filter", {})
    assert [a["name"] for a in autos].count(
        "tinyllm: crash flow runs that stop sending heartbeats"
    ) == 1
    tag = f"k{port}"
    (tmp / "sleeper.py").write_text(SLEEPER.replace("{tag}", tag, 1).replace('"{tag}"', f'"{tag}"'))
    run_env = {**env, "PREFECT_API_URL": api, "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30"}
    proc = subprocess.Popen(
        [sys.executable, "sleeper.py"], cwd=tmp, env=run_env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "RUNNING"
        name = f"sleeper-{tag}"
        run = _api(api, "/flow_runs/filter", {"flow_runs": {"name": {"any_": [name]}}})[0]
        assert run["state"]["type"] == "RUNNING"
        # wait until the server has the run's first heartbeat, then kill it without warning
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30:
            events = _api(
                api,
                "/events/filter",
                {
                    "filter": {
                        "event": {"name": ["prefect.flow-run.heartbeat"]},
                        "resource": {"id": [f"prefect.flow-run.{run['id']}"]},
                    }
                },
            )
            if events["events"]:
                break
            time.sleep(1)
        else:
            pytest.fail("no heartbeat event reached the server in 30 s")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    t_kill = time.monotonic()
    state = None
    while time.monotonic() - t_kill < after_s + 60:
        state = _api(api, f"/flow_runs/{run['id']}")["state"]
        if state["type"] != "RUNNING":
            break
        time.sleep(2)
    assert state is not None and state["type"] == "CRASHED", state
    assert "No heartbeat" in (state.get("message") or "")
