"""A Prefect server on PostgreSQL, on this machine: ``tinyllm server start --db postgres``.

The embedded default (``make demo``) is a Prefect server on SQLite. Past one machine (several
Prefect workers, a Dask cluster, many flow runs at once) SQLite serialises every write and
answers "database is locked"; Prefect's server then wants PostgreSQL. This module:

1. finds the machine's PostgreSQL binaries (``initdb``, ``pg_ctl``: on ``PATH``, else the
   newest ``/usr/lib/postgresql/<version>/bin``);
2. creates a cluster under ``$PREFECT_HOME/pg`` (``.prefect/pg``) with ``initdb -A trust``,
   listening on 127.0.0.1 only (trust is safe there: the TCP port is not reachable from other
   machines; put a password and ``-A scram-sha-256`` on a cluster other machines reach);
3. starts it on a free port and creates the ``prefect`` database;
4. starts ``prefect server start`` with
   ``PREFECT_API_DATABASE_CONNECTION_URL=postgresql+asyncpg://postgres@127.0.0.1:<port>/prefect``;
5. stops both (``tinyllm server stop``, ``make stop``).

PostgreSQL refuses to run as root. As root (CI, these sessions) every ``initdb``/``pg_ctl`` call
runs as the ``postgres`` user through ``runuser -u postgres --``, on a data folder it owns.

This is orchestration plumbing: it starts processes and never imports prefect.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

PG_SEARCH = "/usr/lib/postgresql/*/bin"
PG_USER = "postgres"
DB_NAME = "prefect"
HOST = "127.0.0.1"
STATE_NAME = "server.json"  # beside server.pid in $PREFECT_HOME: what `stop` must stop


class PgError(RuntimeError):
    """PostgreSQL could not be found, created, started or stopped (the message says which)."""


def prefect_home() -> Path:
    """``$PREFECT_HOME``, else ``./.prefect`` (the Makefile's choice), absolute."""
    return Path(os.environ.get("PREFECT_HOME") or ".prefect").resolve()


def find_pg_bin(name: str) -> Path:
    """Path of PostgreSQL's ``name`` (``initdb``, ``pg_ctl``, ``createdb``): ``PATH`` first, then
    the newest version under ``/usr/lib/postgresql/*/bin``. Raises PgError listing both."""
    found = shutil.which(name)
    if found:
        return Path(found)

    def version(p: Path) -> tuple:
        v = p.parent.parent.name  # /usr/lib/postgresql/<v>/bin/<name>
        return tuple(int(x) if x.isdigit() else 0 for x in v.split("."))

    candidates = sorted(Path("/").glob(PG_SEARCH.lstrip("/") + "/" + name), key=version)
    if candidates:
        return candidates[-1]
    raise PgError(
        f"expected PostgreSQL's {name} on PATH or under {PG_SEARCH}, found neither "
        "(install the PostgreSQL server package, e.g. postgresql-15)"
    )


def pg_available() -> str | None:
    """None when initdb, pg_ctl and createdb are found (and, as root, the postgres user exists);
    else the reason they cannot be used."""
    try:
        for name in ("initdb", "pg_ctl", "createdb"):
            find_pg_bin(name)
    except PgError as e:
        return str(e)
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(PG_USER)
        except KeyError:
            return f"running as root: expected a '{PG_USER}' user to run PostgreSQL as, got none"
        if shutil.which("runuser") is None:
            return "running as root: expected runuser (util-linux) to run PostgreSQL as postgres"
    return None


def free_port(host: str = HOST) -> int:
    """A TCP port nobody listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _as_pg_user(cmd: list[str]) -> list[str]:
    """``cmd`` run as the postgres user when we are root (initdb and pg_ctl refuse root)."""
    if os.geteuid() == 0:
        return ["runuser", "-u", PG_USER, "--", *cmd]
    return cmd


def _run(cmd: list[str], what: str, timeout: float = 120) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise PgError(
            f"{what}: expected exit status 0, got {r.returncode} from {' '.join(cmd)}\n"
            f"{(r.stdout + r.stderr).strip()}"
        )
    return r


@dataclass
class PgCluster:
    """One PostgreSQL cluster in ``datadir``, listening on 127.0.0.1 only.

    ``fast=True`` turns fsync off (tests, benchmarks: a crash may lose the database).
    """

    datadir: Path
    fast: bool = False

    def __post_init__(self) -> None:
        self.datadir = Path(self.datadir).resolve()

    @property
    def log(self) -> Path:
        return self.datadir / "postgres.log"

    def initialized(self) -> bool:
        return (self.datadir / "PG_VERSION").is_file()

    def init(self) -> None:
        """``initdb -A trust -U postgres`` into ``datadir`` unless it already holds a cluster."""
        if self.initialized():
            return
        self.datadir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            pw = pwd.getpwnam(PG_USER)
            os.chown(self.datadir, pw.pw_uid, pw.pw_gid)
            self._check_reachable()
        os.chmod(self.datadir, 0o700)
        cmd = [str(find_pg_bin("initdb")), "-D", str(self.datadir), "-A", "trust"]
        cmd += ["-U", PG_USER, "-E", "UTF8", "--no-locale"]
        if self.fast:
            cmd.append("--no-sync")
        _run(_as_pg_user(cmd), f"initdb {self.datadir}")
        conf = ["listen_addresses = '127.0.0.1'", "unix_socket_directories = ''"]
        if self.fast:
            conf += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        with open(self.datadir / "postgresql.conf", "a", encoding="utf-8") as f:
            f.write("\n# tinyllm.pgserver\n" + "\n".join(conf) + "\n")

    def _check_reachable(self) -> None:
        """As root: the postgres user must be able to walk down to ``datadir``."""
        r = subprocess.run(
            ["runuser", "-u", PG_USER, "--", "test", "-w", str(self.datadir)], capture_output=True
        )
        if r.returncode != 0:
            blocked = [
                str(p)
                for p in self.datadir.parents
                if p.exists() and not (p.stat().st_mode & 0o001)
            ]
            raise PgError(
                f"{self.datadir}: expected a folder the '{PG_USER}' user can reach and write, "
                f"got one it cannot (folders above it without o+x: {blocked or 'none'})"
            )

    def port(self) -> int | None:
        """The port of the running server, from ``postmaster.pid`` (None when not running)."""
        pid_file = self.datadir / "postmaster.pid"
        if not pid_file.is_file() or not self.running():
            return None
        lines = pid_file.read_text().splitlines()
        return int(lines[3]) if len(lines) > 3 and lines[3].strip().isdigit() else None

    def running(self) -> bool:
        if not self.initialized():
            return False
        cmd = _as_pg_user([str(find_pg_bin("pg_ctl")), "status", "-D", str(self.datadir)])
        return subprocess.run(cmd, capture_output=True).returncode == 0

    def start(self, port: int | None = None) -> int:
        """Start the server (``pg_ctl start -w``) on ``port`` (a free one by default), create
        the ``prefect`` database if missing; return the port. Already running: its port."""
        self.init()
        running = self.port()
        if running is not None:
            return running
        port = port or free_port()
        cmd = [str(find_pg_bin("pg_ctl")), "start", "-D", str(self.datadir), "-l", str(self.log)]
        cmd += ["-w", "-t", "120", "-o", f"-p {port}"]
        try:
            _run(_as_pg_user(cmd), f"pg_ctl start {self.datadir}", timeout=180)
        except PgError as e:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.is_file() else ""
            raise PgError(f"{e}\n{self.log}:\n{tail}") from None
        createdb = [str(find_pg_bin("createdb")), "-h", HOST, "-p", str(port), "-U", PG_USER]
        r = subprocess.run([*createdb, DB_NAME], capture_output=True, text=True, timeout=60)
        if r.returncode != 0 and "already exists" not in r.stderr:
            raise PgError(f"createdb {DB_NAME} on port {port}: {r.stderr.strip()}")
        return port

    def url(self, port: int | None = None) -> str:
        """SQLAlchemy URL of the ``prefect`` database for Prefect's server (asyncpg driver)."""
        port = port or self.port()
        if port is None:
            raise PgError(f"{self.datadir}: expected a running PostgreSQL, got none")
        return f"postgresql+asyncpg://{PG_USER}@{HOST}:{port}/{DB_NAME}"

    def stop(self) -> bool:
        """``pg_ctl stop -m fast``; False (and quiet) when it was not running."""
        if not self.running():
            return False
        cmd = [str(find_pg_bin("pg_ctl")), "stop", "-D", str(self.datadir), "-m", "fast", "-w"]
        _run(_as_pg_user(cmd), f"pg_ctl stop {self.datadir}")
        return True


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


def stop_pid(pid: int, wait_s: float = 20.0) -> bool:
    """SIGTERM the process group led by ``pid`` (the server and its children), SIGKILL after
    ``wait_s``; False when it was not running."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    except PermissionError:
        os.kill(pid, signal.SIGTERM)
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait_s:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # reap it when it is our child
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return True


@dataclass
class Server:
    """A running Prefect server (and its PostgreSQL cluster when ``db == "postgres"``)."""

    api_url: str
    pid: int
    db: str
    home: Path
    pg_dir: Path | None = None
    pg_port: int | None = None

    def to_json(self) -> dict:
        return {
            "api_url": self.api_url,
            "pid": self.pid,
            "db": self.db,
            "pg_dir": None if self.pg_dir is None else str(self.pg_dir),
            "pg_port": self.pg_port,
        }


def start(
    db: str = "postgres",
    home: Path | None = None,
    port: int = 4200,
    pg_dir: Path | None = None,
    fast: bool = False,
) -> Server:
    """Start PostgreSQL (``db="postgres"``, in ``pg_dir``, default ``<home>/pg``) and a Prefect
    server on it at 127.0.0.1:``port`` (0: a free port); ``db="sqlite"``: the embedded database
    in ``home``. Records ``<home>/server.pid`` and ``<home>/server.json`` for :func:`stop`."""
    if db not in ("postgres", "sqlite"):
        raise PgError(f"--db: expected one of ['postgres', 'sqlite'], got {db!r}")
    home = (home or prefect_home()).resolve()
    home.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    db_url = cluster = pg_port = None
    if db == "postgres":
        cluster = PgCluster(pg_dir or home / "pg", fast=fast)
        pg_port = cluster.start()
        db_url = cluster.url(pg_port)
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
    (home / "server.pid").write_text(f"{proc.pid}\n")
    (home / STATE_NAME).write_text(json.dumps(server.to_json(), indent=2) + "\n")
    return server


def stop(home: Path | None = None) -> list[str]:
    """Stop what :func:`start` (or ``make demo``: ``server.pid``) started under ``home``: the
    Prefect server first, then PostgreSQL. Returns what was stopped (empty: nothing ran)."""
    home = (home or prefect_home()).resolve()
    stopped: list[str] = []
    state_file, pid_file = home / STATE_NAME, home / "server.pid"
    state = json.loads(state_file.read_text()) if state_file.is_file() else {}
    if pid_file.is_file():
        text = pid_file.read_text().strip()
        if text.isdigit() and stop_pid(int(text)):
            stopped.append(f"Prefect server (pid {text})")
        pid_file.unlink(missing_ok=True)
    pg_dir = Path(state["pg_dir"]) if state.get("pg_dir") else home / "pg"
    if PgCluster(pg_dir).initialized() and pg_available() is None and PgCluster(pg_dir).stop():
        stopped.append(f"PostgreSQL ({pg_dir})")
    state_file.unlink(missing_ok=True)
    return stopped
