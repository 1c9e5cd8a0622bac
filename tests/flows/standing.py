"""Shared by the multi-machine tests: one PostgreSQL-backed Prefect server per pytest process,
a tiny zoo trained in milliseconds, and helpers to run the `prefect` / `tinyllm` commands.

The server is started on first use with `tinyllm server start --db postgres` (a PostgreSQL
cluster from scratch under a temporary folder, a Prefect server on a free port) and stopped when
the pytest process exits, so the test modules that need it (test_postgres_server.py,
test_workers.py, in that order; the last test of test_workers.py stops it with `tinyllm server
stop`) share one: it costs 20-40 s to start on this 2-core machine.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from tinyllm.models import bigram, ngram
from tinyllm.tokens import write_tokens
from tinyllm_suite import pgserver

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TEXT = (
    b"the cat sat on the mat. the dog sat on the log. a cat and a dog met on a mat by the log. "
) * 8
ENTRIES = [
    {"name": "bigram", "family": "bigram", "checkpoint": "bigram", "data": "val.tok"},
    {"name": "bigram2", "family": "bigram", "checkpoint": "bigram2", "data": "val.tok"},
    {"name": "kn3", "family": "ngram", "checkpoint": "kn3.safetensors", "data": "val.tok"},
]


def build_zoo(folder: Path, entries: list[dict] | None = None) -> str:
    """Two bigrams and a 3-gram trained from counts, a val token file, a manifest; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    data = np.frombuffer(TEXT, dtype=np.uint8)
    write_tokens(folder / "val.tok", data[:300])
    bigram.save(bigram.train(bigram.Config(k=0.5), data, seed=0), folder / "bigram")
    bigram.save(bigram.train(bigram.Config(k=2.0), data, seed=0), folder / "bigram2")
    ngram.save(ngram.train(ngram.Config(order=3), data, seed=0), folder / "kn3.safetensors")
    (folder / "zoo.yaml").write_text(
        yaml.safe_dump({"suite": "zoo", "entries": entries or ENTRIES})
    )
    return str(folder / "zoo.yaml")


def strip(rows: list[dict]) -> list[dict]:
    """Rows without the one field that differs between two runs of the same scoring (time)."""
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


@dataclass
class Standing:
    """The shared server, as `tinyllm server start` left it (``<home>/server.json``)."""

    api_url: str
    pid: int
    pg_port: int
    home: Path
    start_output: str


_SERVER: Standing | None = None


def server_cli_env(home: Path) -> dict[str, str]:
    """Environment of `tinyllm server start/stop` for the server whose state is in ``home``."""
    env = client_env("", PREFECT_HOME=str(home))
    env.pop("PREFECT_API_URL")
    return env


def pg_server() -> Standing:
    """The process-wide PostgreSQL-backed Prefect server, started from scratch on first use with
    `tinyllm server start --db postgres --port 0` (a new cluster in a temporary folder) and
    stopped when the pytest process exits (or earlier by a test: see test_workers.py).

    Skips (with the reason) only when PostgreSQL's binaries are absent from this machine.
    """
    global _SERVER
    if _SERVER is not None:
        return _SERVER
    reason = pgserver.pg_available()
    if reason is not None:
        pytest.skip(f"PostgreSQL server binaries are not installed: {reason}")
    # not pytest's tmp_path: it is 0700 root's, and the postgres user must reach the cluster
    base = Path(tempfile.mkdtemp(prefix="tinyllm-pg-"))
    base.chmod(0o755)
    home = base / "prefect-home"
    start = subprocess.run(
        [str(BIN / "tinyllm"), "server", "start", "--db", "postgres", "--port", "0"],
        cwd=ROOT,
        env=server_cli_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert start.returncode == 0, start.stdout + start.stderr

    def _stop() -> None:
        pgserver.stop(home)
        shutil.rmtree(base, ignore_errors=True)

    atexit.register(_stop)
    state = json.loads((home / "server.json").read_text())
    _SERVER = Standing(state["api_url"], state["pid"], state["pg_port"], home, start.stdout)
    return _SERVER


def forget_server() -> None:
    """After a test stopped the shared server: the next pg_server() starts a new one."""
    global _SERVER
    _SERVER = None


def client_env(api_url: str, **extra: str) -> dict[str, str]:
    """Environment of a client process (flow run, worker, CLI) of the server at ``api_url``."""
    env = {
        **os.environ,
        "PREFECT_API_URL": api_url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "OMP_WAIT_POLICY": "PASSIVE",
        "OMP_NUM_THREADS": "1",
    }
    env.update(extra)
    return env


def prefect(*args: str, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the `prefect` command from the repository root."""
    return subprocess.run(
        [str(BIN / "prefect"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
