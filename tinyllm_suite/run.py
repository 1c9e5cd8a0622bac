"""Run the EvalSuite flow from a command (`tinyllm eval --suite zoo --release R`, `make demo`).

:func:`run_suite_flow` picks the Prefect server (:func:`tinyllm_suite.server.choose_server`),
keeps Prefect's console log to progress (:func:`quiet_prefect_console`), makes sure killed runs
are marked Crashed, runs the flow and returns its result; the caller prints it
(:func:`tinyllm.console.print_suite_run`).
"""

from __future__ import annotations

import logging
import os

from rich.console import Console

from tinyllm.console import error_line
from tinyllm_suite.server import choose_server


class BelowError(logging.Filter):
    """A logging filter that lets progress (INFO, WARNING) through and holds back errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


def quiet_prefect_console(quiet: bool = False, debug: bool = False) -> None:
    """Prefect's console log handler (on the root logger) prints each task's progress, and each
    failure's traceback. A command reports errors itself (one line), so the console shows
    progress only; ``quiet`` hides that too, ``debug`` shows everything. The logs still reach the
    Prefect server and its UI."""
    if debug:
        return
    from prefect.logging.configuration import ensure_logging_setup  # prefect: only for a run

    ensure_logging_setup()
    names = ["", *(n for n in logging.root.manager.loggerDict if n.startswith("prefect"))]
    for name in names:
        for h in logging.getLogger(name).handlers:
            if type(h).__name__ == "PrefectConsoleHandler":
                if quiet:
                    h.setLevel(logging.CRITICAL)
                elif not any(isinstance(f, BelowError) for f in h.filters):
                    h.addFilter(BelowError())


def run_suite_flow(
    manifest: str,
    release: str,
    store: str,
    only: list[str] | None = None,
    previous: str | None = None,
    seed: int = 0,
    quiet: bool = False,
    runner: tuple[str | None, int | None] = (None, None),
    debug: bool = False,
    refresh: bool = False,
    track: list[str] | None = None,
) -> dict:
    """The EvalSuite flow for ``release`` of ``manifest`` into ``store``; returns its result,
    ``{"run_id", "report", "compare", "store", "dashboard", "cached"}``.

    The flow reports to the same Prefect server as `make demo` (:func:`choose_server`: the one
    ``PREFECT_API_URL`` names, else the local server, started if none answers); ``runner`` is
    ``(dask_address, workers)`` (both None: threads); ``only`` rescoring those entries alone,
    ``previous`` the release to compare with (default: the latest), ``refresh`` scoring every
    entry without reading the result cache, ``track`` the trackers the published release is
    logged to (:mod:`tinyllm.trackers`). Progress and warnings go to stderr unless
    ``quiet``; ``debug`` keeps Prefect's full console log.
    """
    err = Console(stderr=True, quiet=quiet)
    api = choose_server(err)
    # prefect is imported here, after choose_server exported PREFECT_API_URL for it
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        temporary_settings,
    )

    # the flow: prefect and the eval stack, loaded only for a run
    from tinyllm_suite.eval_suite import configured_suite, ensure_crash_detection

    suite_flow = configured_suite(*runner)  # threads, or Dask (--dask-address / --workers)
    quiet_prefect_console(quiet, debug)
    if not quiet:
        err.print(f"running the EvalSuite flow for release {release} on {api} ...")
    beat = int(os.environ["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"])
    settings = {PREFECT_API_URL: api, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: beat}
    with temporary_settings(updates=settings):
        try:
            ensure_crash_detection()
        except Exception as e:  # noqa: BLE001 - a missing automation must not stop the run
            err.print(f"warning: killed runs will not be marked Crashed: {error_line(e)}")
        return suite_flow(
            manifest=manifest,
            release=release,
            store=store,
            only=only,
            previous=previous,
            seed=seed,
            refresh=refresh,
            track=track or None,
        )
