"""`make demo`: the main job on the embedded defaults.

1. a local Prefect server (SQLite under ``.prefect/``, analytics off) is started if none answers
   (:func:`tinyllm_suite.server.choose_server`), while the zoo trains when it has to;
2. the demo zoo is trained into ``zoo/`` if ``zoo/zoo.yaml`` is missing (a few minutes);
3. the EvalSuite flow scores it as a new release into ``./evalstore`` and compares it with the
   previous release (:func:`tinyllm_suite.run.run_suite_flow`);
4. the table, the comparison and the address of the Prefect UI (run history) are printed.

This module is the orchestration layer's entry point (it runs the Prefect flow); the library
itself never imports prefect.
"""

from __future__ import annotations

import io
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from tinyllm.console import Progress, print_suite_run
from tinyllm_suite.run import run_suite_flow
from tinyllm_suite.server import SERVER_START_TIMEOUT_S, choose_server

ZOO_DIR = Path("zoo")
STORE = "./evalstore"


def _server_in_background() -> Callable[[Console], str]:
    """Start :func:`choose_server` in a thread (a server's start-up, ~20 s, then overlaps the
    training); the returned function waits for it, prints what it said on the console given and
    returns its API address, or raises its error."""
    out = io.StringIO()
    said = Console(file=out, width=120)
    got: dict[str, object] = {}

    def start() -> None:
        try:  # beside the two training workers the start-up takes longer than alone
            got["api"] = choose_server(said, wait_s=3 * SERVER_START_TIMEOUT_S)
        except BaseException as e:  # handed to the waiting thread
            got["error"] = e

    thread = threading.Thread(target=start, name="prefect-server-start", daemon=True)
    thread.start()

    def wait(console: Console) -> str:
        thread.join()
        console.print(out.getvalue(), end="", markup=False, highlight=False)
        if "error" in got:
            raise got["error"]  # type: ignore[misc]
        return str(got["api"])

    return wait


def run_demo(console: Console) -> int:
    """Run the demo, printing on ``console``; returns the process exit status."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    console.rule("[bold]tinyllm demo")

    manifest = ZOO_DIR / "zoo.yaml"
    if manifest.is_file():
        ui = choose_server(console).removesuffix("/api")
        console.print(f"demo zoo found: {manifest} (delete {ZOO_DIR}/ to retrain)")
    else:
        server = _server_in_background()
        # GNU OpenMP spin-waits by default: with 2 threads on a busy 2-core box that is slow
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from tinyllm.train import build_zoo  # torch: after OMP_WAIT_POLICY is set

        console.print(
            f"training the demo zoo into {ZOO_DIR}/ (two models side by side, a few minutes) ..."
        )
        t0 = time.perf_counter()
        # live bars on a terminal, a plain line per model every 10 s when piped (CI, logs)
        built = build_zoo(ZOO_DIR, seed=0, progress=Progress.training())
        console.print(f"trained {len(built)} models in {time.perf_counter() - t0:.0f} s")
        ui = server(console).removesuffix("/api")

    release = "demo-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    console.print(f"running the EvalSuite flow for release {release} (store {STORE}) ...")
    print_suite_run(console, run_suite_flow(str(manifest), release, STORE), release)
    console.rule()
    console.print(f"Run history in the Prefect UI: {ui}/runs  (artifacts: {ui}/artifacts)")
    console.print(f"Release history in the terminal: .venv/bin/tinyllm history --store {STORE}")
    dashboard = (Path(STORE) / "dashboard" / "index.html").resolve()
    console.print(f"Dashboard of the run history (open it in a browser): {dashboard}")
    console.print("Run `make demo` again for a new release compared with this one.")
    return 0
