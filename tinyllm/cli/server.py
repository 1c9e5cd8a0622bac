"""`tinyllm server start|stop`: a standing Prefect server on PostgreSQL
(:mod:`tinyllm_suite.pgserver`, imported inside each command: it is the orchestration layer)."""

from __future__ import annotations

from typing import Annotated

import typer

from tinyllm.cli.app import console, server_app


@server_app.command("start")
def server_start_cmd(
    db: Annotated[
        str,
        typer.Option("--db", help="postgres: a PostgreSQL cluster in $PREFECT_HOME/pg; or sqlite."),
    ] = "postgres",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="The API/UI port (0: free).")
    ] = 4200,
    pg_port: Annotated[
        int,
        typer.Option(
            "--pg-port",
            min=0,
            max=65535,
            help="PostgreSQL's port (0: the cluster's recorded port if free, else a free one).",
        ),
    ] = 0,
) -> None:
    """Start PostgreSQL (under $PREFECT_HOME/pg) and a Prefect server on it; `server stop` (or
    `make stop`) stops both. Prints the PREFECT_API_URL for workers and flow runs."""
    from tinyllm_suite import pgserver  # orchestration, never loaded by other commands

    s = pgserver.start(db=db, port=port, pg_port=pg_port or None)
    where = f"PostgreSQL {s.pg_dir} on 127.0.0.1:{s.pg_port}" if s.db == "postgres" else "SQLite"
    console.print(f"Prefect server (pid {s.pid}) on {where}; log {s.home / 'server.log'}")
    console.print(f"export PREFECT_API_URL={s.api_url}", highlight=False, soft_wrap=True)


@server_app.command("stop")
def server_stop_cmd() -> None:
    """Stop the Prefect server and the PostgreSQL cluster `server start` started (quiet when
    nothing runs)."""
    from tinyllm_suite import pgserver  # as in server_start_cmd

    for what in pgserver.stop():
        console.print(f"stopped {what}", highlight=False)
