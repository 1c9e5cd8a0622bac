"""Which Prefect server a flow run reports to, and the local one `make demo` starts.

:func:`choose_server` is the one choice for `make demo` and `tinyllm eval --suite zoo --release
R`: ``$PREFECT_API_URL``, else a test harness's settings context, else the local server
(:func:`ensure_server`: SQLite under ``$PREFECT_HOME``, started in the background if none
answers, outliving the command; `make stop` stops it). Importing this module imports no prefect.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from tinyllm_suite.pgserver import Server, healthy, record_server

HOST, PORT = "127.0.0.1", 4200
API_URL = f"http://{HOST}:{PORT}/api"
UI_URL = f"http://{HOST}:{PORT}"
SERVER_START_TIMEOUT_S = 60.0
"""How long a starting Prefect server may take to answer (Prefect's own default, 20 s, times
out on a busy 2-core machine)."""
HEARTBEAT_S = 30
"""``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` for our flow runs (Prefect's minimum; its default is
180 s): a run killed with SIGKILL is marked Crashed after :data:`ZOMBIE_AFTER_S` without one."""
ZOMBIE_AFTER_S = 3 * HEARTBEAT_S


def local_api_url() -> str:
    """The local server's API address: port ``$TINYLLM_PREFECT_PORT`` (default 4200)."""
    return f"http://{HOST}:{os.environ.get('TINYLLM_PREFECT_PORT', PORT)}/api"


def prefect_home() -> Path:
    """``$PREFECT_HOME``, else the project's ``.prefect`` (as the Makefile sets it), exported so
    that nothing lands in ``~/.prefect``."""
    home = Path(os.environ.setdefault("PREFECT_HOME", str(Path(".prefect").resolve())))
    home.mkdir(parents=True, exist_ok=True)
    return home


def ensure_server(
    console: Console, api_url: str | None = None, wait_s: float = SERVER_START_TIMEOUT_S
) -> str:
    """Return the API address of a running local Prefect server, starting one in the background
    if none answers. Its database, log (``server.log``), pid (``server.pid``) and identity
    (``server.json``: pid, start time, command line, see :func:`tinyllm_suite.pgserver.stop`) are
    under :func:`prefect_home`; it outlives this process (``make stop`` stops it)."""
    api_url = api_url or local_api_url()
    if healthy(api_url):
        console.print(f"Prefect server already running at {api_url}")
        return api_url
    home = prefect_home()
    port = api_url.rsplit(":", 1)[1].split("/", 1)[0]
    env = {
        **os.environ,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT": "false",
    }
    env.pop("PREFECT_API_URL", None)  # the server itself is not a client of another server
    log = open(home / "server.log", "ab")  # noqa: SIM115 - handed to the detached server
    prefect = str(Path(sys.executable).with_name("prefect"))
    proc = subprocess.Popen(
        [prefect, "server", "start", "--host", HOST, "--port", port],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # outlives `make demo`, so the UI stays up
    )
    # server.pid and server.json (its start time and command line): what `make stop` may stop
    record_server(Server(api_url, proc.pid, "sqlite", home))
    console.print(f"starting a Prefect server (pid {proc.pid}, log {home / 'server.log'}) ...")
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait_s:
        if proc.poll() is not None:
            raise RuntimeError(
                f"the Prefect server exited with status {proc.returncode}; "
                f"see {home / 'server.log'}"
            )
        if healthy(api_url):
            console.print(f"Prefect server up in {time.monotonic() - t0:.0f} s")
            return api_url
        time.sleep(1.0)
    raise RuntimeError(
        f"expected the Prefect server at {api_url} within {wait_s:.0f} s; it did not answer "
        f"(see {home / 'server.log'})"
    )


def choose_server(console: Console, wait_s: float = SERVER_START_TIMEOUT_S) -> str:
    """THE choice of Prefect server, for `make demo` and `tinyllm eval --suite zoo --release R`.

    1. ``$PREFECT_API_URL`` when set (a team server, a deployment's worker);
    2. the server of an active Prefect settings context (a test harness), if prefect is loaded;
    3. the local server (:func:`ensure_server`): the running one when it answers, else started
       with the project's ``PREFECT_HOME`` and a start-up timeout of ``wait_s`` (60 s).

    Never Prefect's temporary per-process server: its runs would not show in the UI
    `make demo` points to. Also exports ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` (default
    :data:`HEARTBEAT_S`) so that the flow run sends heartbeats the crash detection needs.
    """
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", str(HEARTBEAT_S))
    api = os.environ.get("PREFECT_API_URL")
    if not api and "prefect.settings" in sys.modules:
        from prefect.settings import get_current_settings  # loaded already: nothing to pay

        api = get_current_settings().api.url  # a settings context (a test harness) decides
        if api:
            return api
    prefect_home()  # the client's files too: nothing lands in ~/.prefect
    if not api:
        api = ensure_server(console, wait_s=wait_s)
    os.environ["PREFECT_API_URL"] = api  # before prefect is imported: the flow reports here
    return api
