"""`make demo` starts the Prefect server while the zoo trains (tinyllm_suite.demo): the waiting
function returns choose_server's address and prints what it said, or raises its error.

Each case runs in a fresh interpreter with no PREFECT_ settings, so that no test harness of this
pytest process (tests/flows) decides the server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import sys
from rich.console import Console
from tinyllm_suite.demo import _server_in_background
wait = _server_in_background()
try:
    print("API", wait(Console(width=200)))
except Exception as e:
    print("ERROR", type(e).__name__, e)
"""


def _run(env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(env_extra)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_background_start_returns_the_configured_server(tmp_path):
    out = _run({"PREFECT_API_URL": "http://127.0.0.1:9/api", "PREFECT_HOME": str(tmp_path)})
    assert out.splitlines() == ["API http://127.0.0.1:9/api"]


def test_the_background_start_hands_its_error_to_the_waiting_thread(tmp_path):
    home = tmp_path / "not-a-folder"
    home.write_text("x")  # PREFECT_HOME is a file: choose_server's mkdir fails in the thread
    out = _run({"PREFECT_HOME": str(home)})
    assert out.startswith("ERROR FileExistsError"), out
    assert str(home) in out
