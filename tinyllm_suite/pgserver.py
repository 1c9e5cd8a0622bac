"""A Prefect server on PostgreSQL, on this machine: ``tinyllm server start --db postgres``.

The embedded default (``make demo``) is a Prefect server on SQLite. Past one machine (several
Prefect workers, a Dask cluster, many flow runs at once) SQLite serialises every write and
answers "database is locked"; Prefect's server then wants PostgreSQL. This module:

1. finds the machine's PostgreSQL binaries (``initdb``, ``pg_ctl``: on ``PATH``, else the
   newest ``/usr/lib/postgresql/<version>/bin``);
2. creates a cluster under ``$PREFECT_HOME/pg`` (``.prefect/pg``) with ``initdb -A trust``,
   listening on 127.0.0.1 only (trust is safe there: the TCP port is not reachable from other
   machines; put a password and ``-A scram-sha-256`` on a cluster other machines reach);
3. starts it on its recorded port (the cluster's ``tinyllm.conf``, so a restart, by this module
   or by hand with ``pg_ctl start``, keeps the port the Prefect server's URL names), a free one
   the first time or when the recorded one is taken, and creates the ``prefect`` database;
4. starts ``prefect server start`` with
   ``PREFECT_API_DATABASE_CONNECTION_URL=postgresql+asyncpg://postgres@127.0.0.1:<port>/prefect``;
5. stops both (``tinyllm server stop``, ``make stop``), each only after checking that the process
   its pid file names is the one that was started (its start time and command line, from
   ``/proc``): a pid file left by a reboot never gets another process signalled.

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
PID_NAME = "server.pid"  # the server's pid alone, one line (server.json has its identity too)
PORT_CONF = "tinyllm.conf"  # in the cluster's folder: `port = N`, included by postgresql.conf
MAX_STATE_BYTES = 64 * 1024


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


def port_free(port: int, host: str = HOST) -> bool:
    """True when ``port`` can be bound on ``host`` now (as a server binds it: SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


# ---- which process a pid names ------------------------------------------------------------------


def _boot_id() -> str:
    """This boot's id (``/proc/sys/kernel/random/boot_id``): a pid recorded under another boot
    names whatever process has that number now."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_identity(pid: int) -> dict | None:
    """``{"pid", "start_ticks", "boot_id", "cmdline"}`` of the live process ``pid`` from
    ``/proc`` (its start time in clock ticks since boot, ``/proc/<pid>/stat`` field 22, tells two
    processes of the same pid apart); None when no such process runs (a zombie included)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    rest = stat[stat.rindex(")") + 2 :].split()  # the name in (...) may hold spaces
    if rest[0] in ("Z", "X"):  # exited, not yet reaped
        return None
    args = raw[:-1].split(b"\0") if raw.endswith(b"\0") else raw.split(b"\0")
    return {
        "pid": pid,
        "start_ticks": int(rest[19]),  # field 22; rest starts at field 3
        "boot_id": _boot_id(),
        "cmdline": [a.decode(errors="replace") for a in args] if raw else [],
    }


_GONE = "not running"


def why_not_ours(pid: int, recorded: dict | None, where: Path) -> str | None:
    """None when the live process ``pid`` is the one ``recorded`` (a :func:`process_identity`,
    from ``where``) describes; :data:`_GONE` when no process ``pid`` runs; else why not."""
    now = process_identity(pid)
    if now is None:
        return _GONE
    if not recorded:
        return f"{where} records no start time and command line for it"
    if recorded.get("pid") != pid:
        return f"{where} records pid {recorded.get('pid')}, not {pid}"
    if recorded.get("boot_id") != now["boot_id"]:
        return "it was recorded before the machine restarted (another boot id)"
    if recorded.get("start_ticks") != now["start_ticks"]:
        return (
            f"the process of that pid started at tick {now['start_ticks']}, the recorded one at "
            f"tick {recorded.get('start_ticks')} (the pid is reused)"
        )
    if recorded.get("cmdline") != now["cmdline"]:
        return f"its command line is {' '.join(now['cmdline'])!r}"
    return None


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
        conf += [f"include_if_exists = '{PORT_CONF}'"]  # the port, see _record_port
        if self.fast:
            conf += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        with open(self.datadir / "postgresql.conf", "a", encoding="utf-8") as f:
            f.write("\n# tinyllm_suite.pgserver\n" + "\n".join(conf) + "\n")

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

    @property
    def port_conf(self) -> Path:
        return self.datadir / PORT_CONF

    def configured_port(self) -> int | None:
        """The port recorded in the cluster's ``tinyllm.conf`` (None before the first start)."""
        try:
            text = self.port_conf.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "port" and value.strip().isdigit():
                return int(value.strip())
        return None

    def _record_port(self, port: int) -> None:
        """Write ``port = N`` to ``tinyllm.conf`` and include it from ``postgresql.conf`` (once):
        every later start, ``pg_ctl start -D <datadir>`` by hand included, uses that port."""
        from tinyllm.safeio import write_atomic

        write_atomic(
            self.port_conf, f"# tinyllm_suite.pgserver: the cluster's port\nport = {port}\n".encode()
        )
        conf = self.datadir / "postgresql.conf"
        include = f"include_if_exists = '{PORT_CONF}'"
        if include not in conf.read_text(encoding="utf-8"):
            with open(conf, "a", encoding="utf-8") as f:
                f.write(f"\n# tinyllm_suite.pgserver: the port\n{include}\n")

    def _lock(self) -> tuple[int, int | None] | None:
        """``(pid, port)`` from ``postmaster.pid`` (None when there is no readable lock file)."""
        try:
            lines = (self.datadir / "postmaster.pid").read_text(errors="replace").splitlines()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not lines or not lines[0].strip().isdigit():
            return None
        port = lines[3].strip() if len(lines) > 3 else ""
        return int(lines[0]), int(port) if port.isdigit() else None

    def _is_postmaster(self, pid: int) -> bool:
        """True when the live process ``pid`` is a PostgreSQL server of this cluster: it runs in
        ``datadir`` (a postmaster's working folder is its data folder) or, where its working
        folder cannot be read, names ``datadir`` on its command line."""
        ident = process_identity(pid)
        if ident is None:
            return False
        try:
            return Path(os.readlink(f"/proc/{pid}/cwd")) == self.datadir
        except PermissionError:
            return str(self.datadir) in ident["cmdline"]
        except OSError:
            return False

    def port(self) -> int | None:
        """The port of the running server, from ``postmaster.pid`` (None when not running)."""
        lock = self._lock()
        if lock is None or not self._is_postmaster(lock[0]):
            return None
        return lock[1]

    def running(self) -> bool:
        """True when ``postmaster.pid`` names a live PostgreSQL server of this cluster (a lock
        file left by a crash or a restart of the machine, naming a pid that is gone or another
        process now, is not a running server)."""
        if not self.initialized():
            return False
        lock = self._lock()
        return lock is not None and self._is_postmaster(lock[0])

    def start(self, port: int | None = None, prefer: int | None = None) -> int:
        """Start the server (``pg_ctl start -w``), create the ``prefect`` database if missing;
        return the port. Already running: its port.

        The port: ``port`` when given (it must be free); else the cluster's recorded port
        (``tinyllm.conf``), else ``prefer`` (the ``pg_port`` of an earlier ``server.json``),
        whichever is free first; else a free one. It is recorded for the next start.
        """
        self.init()
        running = self.port()
        if running is not None:
            return running
        if port:
            if not port_free(port):
                raise PgError(f"--pg-port: expected a free port on {HOST}, got {port} in use")
        else:
            known = [p for p in (self.configured_port(), prefer) if p]
            port = next((p for p in known if port_free(p)), None) or free_port()
        lock = self._lock()
        if lock is not None and process_identity(lock[0]) is not None:
            # a stale lock naming a live process that is not our postmaster (a pid reused after
            # a restart of the machine): PostgreSQL would refuse to start while it is there
            (self.datadir / "postmaster.pid").unlink()
        self._record_port(port)
        cmd = [str(find_pg_bin("pg_ctl")), "start", "-D", str(self.datadir), "-l", str(self.log)]
        cmd += ["-w", "-t", "120"]
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
        """``pg_ctl stop -m fast``; False (and quiet) when it was not running. ``pg_ctl``
        signals the pid in ``postmaster.pid`` unchecked, so it runs only when that pid is this
        cluster's server."""
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


def stop_pid(pid: int, wait_s: float = 20.0, group: bool = True) -> bool:
    """SIGTERM the process group led by ``pid`` (the server and its children; ``group=False``:
    ``pid`` alone), SIGKILL after ``wait_s``; False when it was not running. It checks nothing:
    for a process this program just started, or one :func:`why_not_ours` cleared."""
    kill = os.killpg if group else os.kill
    try:
        kill(pid, signal.SIGTERM)
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
        kill(pid, signal.SIGKILL)
    return True


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
    from tinyllm.safeio import read_regular

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
    from tinyllm.safeio import read_regular

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
    from tinyllm.safeio import write_atomic

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
        elif why != _GONE:
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
