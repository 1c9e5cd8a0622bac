"""A Prefect server on PostgreSQL, on this machine: ``tinyllm server start --db postgres``.

The embedded default (``make demo``) is a Prefect server on SQLite. Past one machine (several
Prefect workers, a Dask cluster, many flow runs at once) SQLite serialises every write and
answers "database is locked"; Prefect's server then wants PostgreSQL. This module:

1. creates and starts a PostgreSQL cluster under ``$PREFECT_HOME/pg`` (``.prefect/pg``) on
   127.0.0.1, on the port it had before (:class:`tinyllm_suite.pgcluster.PgCluster`), and creates
   the ``prefect`` database;
2. starts ``prefect server start`` with
   ``PREFECT_API_DATABASE_CONNECTION_URL=postgresql+asyncpg://postgres@127.0.0.1:<port>/prefect``;
3. stops both (``tinyllm server stop``, ``make stop``), each only after checking that the process
   its pid file names is the one that was started (its start time and command line, from
   ``/proc``): a pid file left by a reboot never gets another process signalled.

This is orchestration plumbing: it starts processes and never imports prefect.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tinyllm.safeio import read_regular, write_atomic
from tinyllm_suite.pgcluster import PgCluster, PgError, pg_available
from tinyllm_suite.procs import (
    GONE,
    HOST,
    free_port,
    port_free,
    process_identity,
    stop_pid,
    why_not_ours,
)

STATE_NAME = "server.json"  # beside server.pid in $PREFECT_HOME: what `stop` must stop
PID_NAME = "server.pid"  # the server's pid alone, one line (server.json has its identity too)
MAX_STATE_BYTES = 64 * 1024


def prefect_home() -> Path:
    """``$PREFECT_HOME``, else ``./.prefect`` (the Makefile's choice), absolute."""
    return Path(os.environ.get("PREFECT_HOME") or ".prefect").resolve()


# ---- the Prefect server on top ----------------------------------------------------------------


def healthy(api_url: str, timeout: float = 2.0) -> bool:
    """True when ``<api_url>/health`` answers 200."""
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def server_env(db_url: str | None, home: Path) -> dict[str, str]:
    """Environment of a Prefect server process: offline, quiet, on ``db_url`` (None: SQLite in
    ``home``)."""
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT": "false",
    }
    env.pop("PREFECT_API_URL", None)  # the server itself is not a client of another server
    if db_url is not None:
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = db_url
    return env


def start_prefect_server(
    db_url: str | None, port: int, home: Path, log: Path, wait_s: float = 180.0
) -> subprocess.Popen:
    """``prefect server start`` on 127.0.0.1:``port`` in its own session, logging to ``log``;
    returns once ``/api/health`` answers (migrations included), raises PgError otherwise."""
    api = f"http://{HOST}:{port}/api"
    if healthy(api):
        raise PgError(
            f"expected port {port} to be free for a Prefect server, got one answering at {api} "
            "(`make stop` stops the project's server; or pass another --port)"
        )
    prefect = str(Path(sys.executable).with_name("prefect"))
    home.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [prefect, "server", "start", "--host", HOST, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server_env(db_url, home),
            start_new_session=True,  # outlives the command that started it
        )
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait_s:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise PgError(
                f"the Prefect server exited with status {proc.returncode}; {log}:\n{tail}"
            )
        if healthy(api):
            return proc
        time.sleep(0.5)
    stop_pid(proc.pid)
    raise PgError(f"expected the Prefect server at {api} within {wait_s:.0f} s; see {log}")


@dataclass
class Server:
    """A running Prefect server (and its PostgreSQL cluster when ``db == "postgres"``).

    ``process`` is the server process's :func:`process_identity` when it was started, so that
    :func:`stop` signals that process and no other; ``started`` is False when :func:`start`
    found it already running (and only started its stopped PostgreSQL, if that)."""

    api_url: str
    pid: int
    db: str
    home: Path
    pg_dir: Path | None = None
    pg_port: int | None = None
    process: dict | None = None
    started: bool = True

    def to_json(self) -> dict:
        return {
            "api_url": self.api_url,
            "pid": self.pid,
            "db": self.db,
            "pg_dir": None if self.pg_dir is None else str(self.pg_dir),
            "pg_port": self.pg_port,
            "process": self.process,
        }


def _state_error(path: Path, expected: str, got: object) -> PgError:
    return PgError(
        f"{path}: expected {expected}, got {got} (remove the file to forget the server it "
        "names; stop that server by hand if it still runs)"
    )


def read_state(home: Path) -> dict:
    """``<home>/server.json`` checked (:meth:`Server.to_json`'s keys and types); ``{}`` when
    there is none. Raises PgError naming the file when it is not such a document."""
    path = home / STATE_NAME
    try:
        raw = read_regular(path, max_bytes=MAX_STATE_BYTES, what="server state")
    except FileNotFoundError:
        return {}
    except ValueError as e:  # a FIFO, a device, a folder, too large
        raise PgError(str(e)) from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _state_error(path, "a JSON object", f"text that is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise _state_error(path, "a JSON object", type(doc).__name__)
    want: dict[str, tuple[type, ...]] = {
        "api_url": (str,),
        "pid": (int,),
        "db": (str,),
        "pg_dir": (str, type(None)),
        "pg_port": (int, type(None)),
        "process": (dict, type(None)),
    }
    for key, types in want.items():
        if key == "process" and key not in doc:  # written before the identity was recorded
            continue
        if key not in doc:
            raise _state_error(path, f"the key {key!r}", f"keys {sorted(doc)}")
        v = doc[key]
        if not isinstance(v, types) or isinstance(v, bool):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise _state_error(path, f"{key!r} to be {names}", repr(v)[:80])
    if doc["db"] not in ("postgres", "sqlite"):
        raise _state_error(path, "'db' to be 'postgres' or 'sqlite'", repr(doc["db"])[:80])
    proc = doc.get("process")
    if proc is not None:
        kinds = {"pid": int, "start_ticks": int, "boot_id": str, "cmdline": list}
        bad = [k for k, t in kinds.items() if not isinstance(proc.get(k), t)]
        if bad or not all(isinstance(a, str) for a in proc["cmdline"]):
            raise _state_error(
                path, "'process' with pid, start_ticks, boot_id and cmdline", repr(proc)[:80]
            )
    return doc


def read_pid(home: Path) -> int | None:
    """The pid in ``<home>/server.pid`` (None when there is none); PgError naming the file when
    it holds anything but one process id."""
    path = home / PID_NAME
    try:
        raw = read_regular(path, max_bytes=64, what="server pid file")
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise PgError(str(e)) from None
    text = raw.decode("utf-8", errors="replace").strip()
    if not text.isdigit() or int(text) < 1:
        raise PgError(
            f"{path}: expected a process id (digits), got {text[:40]!r} (remove the file; stop "
            "the server it meant by hand if it still runs)"
        )
    return int(text)


def record_server(server: Server) -> None:
    """Write ``<home>/server.pid`` (the pid) and ``<home>/server.json`` (:meth:`Server.to_json`,
    with the process's identity read from ``/proc`` now) for :func:`stop`."""
    if server.process is None:
        server.process = process_identity(server.pid)
    write_atomic(server.home / PID_NAME, f"{server.pid}\n".encode(), what="server pid file")
    doc = json.dumps(server.to_json(), indent=2) + "\n"
    write_atomic(server.home / STATE_NAME, doc.encode(), what="server state")


def _api_port(api_url: str) -> int:
    return int(api_url.rsplit(":", 1)[1].split("/", 1)[0])


def start(
    db: str = "postgres",
    home: Path | None = None,
    port: int = 4200,
    pg_dir: Path | None = None,
    fast: bool = False,
    pg_port: int | None = None,
) -> Server:
    """Start PostgreSQL (``db="postgres"``, in ``pg_dir``, default ``<home>/pg``) and a Prefect
    server on it at 127.0.0.1:``port`` (0: a free port); ``db="sqlite"``: the embedded database
    in ``home``. Records ``<home>/server.pid`` and ``<home>/server.json`` for :func:`stop`.

    PostgreSQL listens on ``pg_port`` when given (it must be free), else on the port it had
    before (the cluster's ``tinyllm.conf``, or ``server.json``'s ``pg_port``) when that is free,
    else on a free port. When ``server.json`` names a Prefect server of this ``home`` that still
    runs (checked as :func:`stop` checks it), nothing new is started but its PostgreSQL, if that
    stopped: it comes back on its recorded port, the one the server's database URL names.
    """
    if db not in ("postgres", "sqlite"):
        raise PgError(f"--db: expected one of ['postgres', 'sqlite'], got {db!r}")
    home = (home or prefect_home()).resolve()
    home.mkdir(parents=True, exist_ok=True)
    state = read_state(home)
    running = _running_server(home, state)
    if running is not None:
        return _restart_database(running, db, port, pg_port, fast)
    port = port or free_port()
    db_url = cluster = None
    if db == "postgres":
        cluster = PgCluster(pg_dir or home / "pg", fast=fast)
        pg_port = cluster.start(port=pg_port, prefer=state.get("pg_port"))
        db_url = cluster.url(pg_port)
    else:
        pg_port = None
    try:
        proc = start_prefect_server(db_url, port, home, home / "server.log")
    except BaseException:
        if cluster is not None:
            cluster.stop()
        raise
    server = Server(
        f"http://{HOST}:{port}/api",
        proc.pid,
        db,
        home,
        None if cluster is None else cluster.datadir,
        pg_port,
    )
    record_server(server)
    return server


def _running_server(home: Path, state: dict) -> Server | None:
    """The Prefect server ``server.json`` names when it still runs and is that process."""
    pid = state.get("pid")
    if not pid or why_not_ours(pid, state.get("process"), home / STATE_NAME) is not None:
        return None
    pg_dir = state.get("pg_dir")
    return Server(
        state["api_url"],
        pid,
        state["db"],
        home,
        None if pg_dir is None else Path(pg_dir),
        state.get("pg_port"),
        state.get("process"),
        started=False,
    )


def _restart_database(
    server: Server, db: str, port: int, pg_port: int | None, fast: bool
) -> Server:
    """:func:`start` when the recorded Prefect server runs: start its PostgreSQL if stopped."""
    where = f"{server.home / STATE_NAME}: a Prefect server (pid {server.pid}) runs at"
    if db != server.db:
        raise PgError(
            f"--db: expected {server.db!r} ({where} {server.api_url} on {server.db}), got {db!r}"
            " (`tinyllm server stop` first)"
        )
    if port and port != _api_port(server.api_url):
        raise PgError(
            f"--port: expected {_api_port(server.api_url)} ({where} {server.api_url}), got "
            f"{port} (`tinyllm server stop` first)"
        )
    if db == "postgres" and server.pg_dir is not None:
        cluster = PgCluster(server.pg_dir, fast=fast)
        want = server.pg_port
        if pg_port and want and pg_port != want:
            raise PgError(
                f"--pg-port: expected {want} (the port the running server's database URL names), "
                f"got {pg_port}"
            )
        if not cluster.running() and want and not port_free(want):
            raise PgError(
                f"PostgreSQL {cluster.datadir}: expected its port {want} free to restart it on "
                f"(the running Prefect server's database URL names it), got it in use"
            )
        got = cluster.start(port=None if cluster.running() else want)
        if want and got != want:
            raise PgError(
                f"PostgreSQL {cluster.datadir}: expected it on port {want}, got {got} (the "
                "Prefect server's database URL names the first; `tinyllm server stop` and start)"
            )
    return server


def stop(home: Path | None = None, warn=None) -> list[str]:
    """Stop what :func:`start` (or ``make demo``: ``server.pid``) started under ``home``: the
    Prefect server first, then PostgreSQL. Returns what was stopped (empty: nothing ran).

    The pid in ``server.pid`` is signalled only when it is the recorded server process (the
    start time, boot and command line in ``server.json`` match ``/proc``); otherwise ``warn``
    (default: a line on stderr) says why it was left alone, and the stale files are removed.
    A malformed ``server.pid`` or ``server.json`` is a PgError naming it (nothing is stopped).
    """
    if warn is None:

        def warn(msg: str) -> None:
            print(f"warning: {msg}", file=sys.stderr)

    home = (home or prefect_home()).resolve()
    stopped: list[str] = []
    state_file, pid_file = home / STATE_NAME, home / PID_NAME
    state = read_state(home)
    pid = read_pid(home)
    if pid is None and state.get("pid"):  # server.pid lost: server.json still names it
        pid = state["pid"]
    if pid is not None:
        why = why_not_ours(pid, state.get("process"), state_file)
        if why is None:
            try:  # started in its own session: its children go with it
                group = os.getpgid(pid) == pid
            except ProcessLookupError:
                group = False
            if stop_pid(pid, group=group):
                stopped.append(f"Prefect server (pid {pid})")
        elif why != GONE:
            warn(
                f"{pid_file}: pid {pid} is not the Prefect server that was started here: {why}; "
                f"left it running and removed the stale {pid_file.name}"
            )
        pid_file.unlink(missing_ok=True)
    pg_dir = Path(state["pg_dir"]) if state.get("pg_dir") else home / "pg"
    if PgCluster(pg_dir).initialized() and pg_available() is None and PgCluster(pg_dir).stop():
        stopped.append(f"PostgreSQL ({pg_dir})")
    state_file.unlink(missing_ok=True)
    return stopped
