"""The processes and ports of this machine that the servers' management needs.

* which process a pid names: :func:`process_identity` (its start time, boot and command line
  from ``/proc``) and :func:`why_not_ours` (is the live process the recorded one?), so a pid file
  left by a reboot or naming a reused pid never gets another process signalled;
* :func:`stop_pid`: SIGTERM a process group, SIGKILL after a wait;
* :func:`free_port` / :func:`port_free`: TCP ports on 127.0.0.1.

Linux only (``/proc``); imports nothing of the project.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path

HOST = "127.0.0.1"


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


GONE = "not running"


def why_not_ours(pid: int, recorded: dict | None, where: Path) -> str | None:
    """None when the live process ``pid`` is the one ``recorded`` (a :func:`process_identity`,
    from ``where``) describes; :data:`GONE` when no process ``pid`` runs; else why not."""
    now = process_identity(pid)
    if now is None:
        return GONE
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
