"""One PostgreSQL cluster on this machine, for a Prefect server past one machine's SQLite.

:class:`PgCluster`:

1. finds the machine's PostgreSQL binaries (``initdb``, ``pg_ctl``: on ``PATH``, else the
   newest ``/usr/lib/postgresql/<version>/bin``);
2. creates a cluster (``$PREFECT_HOME/pg`` when :mod:`tinyllm_suite.pgserver` starts one) with
   ``initdb -A trust``, listening on 127.0.0.1 only (trust is safe there: the TCP port is not
   reachable from other machines; put a password and ``-A scram-sha-256`` on a cluster other
   machines reach);
3. starts it on its recorded port (the cluster's ``tinyllm.conf``, so a restart, by this module
   or by hand with ``pg_ctl start``, keeps the port the Prefect server's URL names), a free one
   the first time or when the recorded one is taken, and creates the ``prefect`` database;
4. stops it only when ``postmaster.pid`` names this cluster's live server.

PostgreSQL refuses to run as root. As root (CI, these sessions) every ``initdb``/``pg_ctl`` call
runs as the ``postgres`` user through ``runuser -u postgres --``, on a data folder it owns.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tinyllm.safeio import write_atomic
from tinyllm_suite.procs import HOST, free_port, port_free, process_identity

PG_SEARCH = "/usr/lib/postgresql/*/bin"
PG_USER = "postgres"
DB_NAME = "prefect"
PORT_CONF = "tinyllm.conf"  # in the cluster's folder: `port = N`, included by postgresql.conf


class PgError(RuntimeError):
    """PostgreSQL could not be found, created, started or stopped (the message says which)."""


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
        write_atomic(
            self.port_conf,
            f"# tinyllm_suite.pgserver: the cluster's port\nport = {port}\n".encode(),
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
