"""`tinyllm server stop` / `make stop` signal only the server they started, state files that are not
what they must be are named, and PostgreSQL comes back on the port it had: a pid file left by a
reboot, or naming a pid some other process reuses, never gets that process killed.

The "other process" is a `sleep 60` this test starts in its own process group (as the server
is); the real server is a Prefect server on SQLite started by tinyllm_suite.pgserver.start.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tinyllm_suite import pgcluster, pgserver, procs

ROOT = Path(__file__).resolve().parents[2]
TINYLLM = str(Path(sys.executable).with_name("tinyllm"))


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    return env


def _server_stop(home: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TINYLLM, "server", "stop"], env=_env(home), capture_output=True, text=True, timeout=120
    )


def _identity(pid: int) -> dict:
    """What /proc says of ``pid``, independently of the code under test: its start time in
    clock ticks since boot (field 22 of /proc/<pid>/stat), this boot's id, its command line."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return {
        "pid": pid,
        "start_ticks": int(stat[stat.rindex(")") + 2 :].split()[19]),
        "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        "cmdline": Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1],
    }


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] not in "ZX"
    except FileNotFoundError:
        return False


@pytest.fixture
def other_process():
    """A live process of ours that is not the server: `sleep 60` leading its own group."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    t0 = time.monotonic()
    while _identity(proc.pid)["cmdline"] != ["sleep", "60"]:  # exec'd
        assert time.monotonic() - t0 < 10
        time.sleep(0.05)
    yield proc
    proc.kill()
    proc.wait()


def _record(proc: subprocess.Popen, **changed) -> dict:
    """server.json as pgserver.start writes it, for a server whose identity is ``proc``'s with
    ``changed`` fields (the server that had this pid before it was reused)."""
    ident = {**_identity(proc.pid), **changed}
    return {
        "api_url": "http://127.0.0.1:4200/api",
        "pid": proc.pid,
        "db": "sqlite",
        "pg_dir": None,
        "pg_port": None,
        "process": ident,
    }


STALE = {
    # server.pid alone, as `make demo` wrote it before the identity was recorded
    "pid file only": (None, "records no start time and command line"),
    # the recorded server had this pid before the machine restarted
    "another boot": ({"boot_id": "00000000-0000-0000-0000-000000000000"}, "restarted"),
    # the pid is reused within this boot: another start time
    "another start time": ({"start_ticks": 1}, "the pid is reused"),
    "another command line": ({"cmdline": ["prefect", "server", "start"]}, "its command line"),
}


@pytest.mark.parametrize("case", list(STALE))
def test_server_stop_leaves_a_process_it_did_not_start_running(case, other_process, tmp_path):
    changed, why = STALE[case]
    home = tmp_path / "home"
    home.mkdir()
    (home / "server.pid").write_text(f"{other_process.pid}\n")
    if changed is not None:
        (home / "server.json").write_text(json.dumps(_record(other_process, **changed)))
    r = _server_stop(home)
    assert r.returncode == 0, r.stderr
    assert other_process.poll() is None  # still running: not signalled
    assert r.stdout.strip() == ""  # nothing "stopped"
    assert f"pid {other_process.pid} is not the Prefect server that was started here" in r.stderr
    assert why in r.stderr and str(home / "server.pid") in r.stderr
    assert not (home / "server.pid").exists() and not (home / "server.json").exists()


def test_make_stop_leaves_a_process_it_did_not_start_running(other_process, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "server.pid").write_text(f"{other_process.pid}\n")
    r = subprocess.run(
        ["make", "-s", "stop", f"PREFECT_HOME={home}"],
        cwd=ROOT,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert other_process.poll() is None
    assert "is not the Prefect server that was started here" in r.stderr
    assert not (home / "server.pid").exists()


MALFORMED = {
    "server.json": [
        ("{not json", "expected a JSON object, got text that is not JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"pid": 12}', "expected the key 'api_url'"),
        (
            '{"api_url": "u", "pid": "12", "db": "sqlite", "pg_dir": null, "pg_port": null}',
            "expected 'pid' to be int, got '12'",
        ),
        (
            '{"api_url": "u", "pid": 12, "db": "mysql", "pg_dir": null, "pg_port": null}',
            "expected 'db' to be 'postgres' or 'sqlite'",
        ),
        (
            '{"api_url": "u", "pid": 12, "db": "sqlite", "pg_dir": null, "pg_port": null, '
            '"process": {"pid": 12}}',
            "expected 'process' with pid, start_ticks, boot_id and cmdline",
        ),
    ],
    "server.pid": [
        ("x12\n", "expected a process id (digits), got 'x12'"),
        ("", "expected a process id (digits), got ''"),
        ("12 13\n", "expected a process id (digits), got '12 13'"),
    ],
}


@pytest.mark.parametrize(
    "name,text,message", [(n, t, m) for n, cases in MALFORMED.items() for t, m in cases]
)
def test_a_malformed_state_file_is_named_in_one_line(name, text, message, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / name).write_text(text)
    r = _server_stop(home)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert f"{home / name}: {message}" in lines[0]
    assert "Traceback" not in r.stderr and "JSONDecodeError" not in r.stderr
    assert (home / name).exists()  # left for the operator to look at


def test_a_fifo_as_server_json_is_refused_at_once(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.mkfifo(home / "server.json")
    t0 = time.monotonic()
    r = _server_stop(home)
    assert r.returncode == 1 and time.monotonic() - t0 < 60
    assert f"{home / 'server.json'}: expected a regular file, got a FIFO" in r.stderr


def _healthy(api: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_a_server_started_here_is_stopped(tmp_path):
    home = tmp_path / "home"
    server = pgserver.start(db="sqlite", home=home, port=0)
    try:
        assert _healthy(server.api_url)
        state = json.loads((home / "server.json").read_text())
        assert state["process"]["pid"] == server.pid
        assert state["process"] == _identity(server.pid)  # what /proc says of it, still
        assert (home / "server.pid").read_text() == f"{server.pid}\n"
        r = _server_stop(home)
    finally:
        if _alive(server.pid):  # the test failed: clean up
            procs.stop_pid(server.pid)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"stopped Prefect server (pid {server.pid})"
    assert not _alive(server.pid)
    assert not _healthy(server.api_url)
    assert not (home / "server.pid").exists() and not (home / "server.json").exists()


# ---- PostgreSQL: its own pid file (postmaster.pid) and its port --------------------------------

needs_pg = pytest.mark.skipif(
    pgcluster.pg_available() is not None,
    reason=f"PostgreSQL server binaries are not installed: {pgcluster.pg_available()}",
)


@pytest.fixture
def cluster():
    """A new PostgreSQL cluster in a folder the postgres user can reach (not tmp_path: 0700)."""
    base = Path(tempfile.mkdtemp(prefix="tinyllm-pg-"))
    base.chmod(0o755)
    c = pgcluster.PgCluster(base / "pg", fast=True)
    yield c
    c.stop()
    subprocess.run(["rm", "-rf", str(base)], check=False)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@needs_pg
def test_postgres_restarts_on_its_recorded_port(cluster):
    first = cluster.start()
    assert _listening(first) and cluster.configured_port() == first
    assert cluster.stop() and not _listening(first)
    assert cluster.start() == first  # the same port again
    cluster.stop()
    # by hand, as deployments/README.md says: pg_ctl reads the port from the cluster's config
    pg_ctl = [str(pgcluster.find_pg_bin("pg_ctl")), "start", "-w", "-D", str(cluster.datadir)]
    r = subprocess.run(
        ["runuser", "-u", "postgres", "--", *pg_ctl, "-l", str(cluster.log)]
        if os.geteuid() == 0
        else [*pg_ctl, "-l", str(cluster.log)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert cluster.port() == first and _listening(first)
    cluster.stop()
    # taken by someone else meanwhile: a free port, recorded for the next start
    with socket.socket() as taken:
        # the port may be in TIME_WAIT from _listening's probe: bind anyway, listening still takes it
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", first))
        taken.listen()
        moved = cluster.start()
        assert moved != first and cluster.configured_port() == moved
        cluster.stop()
        # asked for by number (`make server-pg PG_PORT=N`): that port, or a clear error
        with pytest.raises(pgcluster.PgError, match=f"--pg-port: expected a free port .* {first}"):
            cluster.start(port=first)
    wanted = procs.free_port()
    assert cluster.start(port=wanted) == wanted and cluster.configured_port() == wanted


@needs_pg
def test_a_cluster_without_a_recorded_port_takes_server_json_s(cluster):
    """A cluster made before the port was recorded in it: server.json's pg_port (prefer)."""
    cluster.start()
    cluster.stop()
    cluster.port_conf.unlink()
    wanted = procs.free_port()
    assert cluster.start(prefer=wanted) == wanted


@pytest.fixture
def pg_user_process():
    """A live `sleep 60` of the user PostgreSQL runs as (pg_ctl can signal it)."""
    as_pg = {"user": pgcluster.PG_USER, "group": pgcluster.PG_USER} if os.geteuid() == 0 else {}
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True, **as_pg)
    t0 = time.monotonic()
    while _identity(proc.pid)["cmdline"] != ["sleep", "60"]:
        assert time.monotonic() - t0 < 10
        time.sleep(0.05)
    yield proc
    proc.kill()
    proc.wait()


@needs_pg
def test_a_stale_postmaster_pid_is_never_signalled(cluster, pg_user_process):
    """postmaster.pid naming a live process of the postgres user that is not this cluster's
    server (a pid reused after a restart of the machine): not running, `stop` signals nothing
    (`pg_ctl stop` would send it SIGINT), `start` starts."""
    other_process = pg_user_process
    port = cluster.start()
    lock = cluster.datadir / "postmaster.pid"
    lines = lock.read_text().splitlines()
    cluster.stop()
    lines[0] = str(other_process.pid)
    lock.write_text("\n".join(lines) + "\n")
    assert not cluster.running() and cluster.port() is None
    assert cluster.stop() is False
    assert other_process.poll() is None
    assert cluster.start() == port and cluster.running()
    assert other_process.poll() is None
