"""`tinyllm history` and `tinyllm dashboard`: the store's release history, in the terminal
(:mod:`tinyllm.history`) and as a static site (:mod:`tinyllm.dashboard`)."""

from __future__ import annotations

import time
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tinyllm import safeio
from tinyllm.cli.app import app, console
from tinyllm.cli.common import (
    DEFAULT_STORE,
    MAX_N_PERM,
    Store,
    check_n_perm,
    existing_store,
    store_error,
)
from tinyllm.compare_render import summary_line

if TYPE_CHECKING:  # numpy behind it: the command imports it once there is a release
    from tinyllm.report import StoredReport

STYLE = {"regressed": "bold red", "improved": "green", "error": "red", "skipped": "yellow"}
"""The colour of a row's status or verdict in the history table."""
COLUMNS = ("entry", "metric", "value", "95% interval", "n", "status", "vs previous")


def _line(text: str, style: str) -> None:
    console.print(text, style=style, highlight=False, markup=False, soft_wrap=True)


def _styled(word: str) -> str:
    return f"[{STYLE[word]}]{word}[/]" if word in STYLE else word


def _release_table(report: StoredReport, verdicts: dict[str, str]) -> Table:
    from tinyllm.dashboard import fmt_interval, fmt_value  # numpy: only once there is a release

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in ("value", "n") else "left", no_wrap=True)
    for r in report.rows:
        table.add_row(
            r.name,
            str(r.metric or "-"),
            fmt_value(r.value),
            fmt_interval(r.lo, r.hi),
            "-" if r.n is None else str(r.n),
            f"[{STYLE.get(r.status, 'green')}]{r.status}[/]",
            _styled(verdicts.get(r.name, "-")),
        )
    return table


def print_step(step: Any) -> None:
    """One release of `tinyllm history`: its title and comparison summary, its rows with their
    verdicts, then each regression on a line of its own."""
    v = step.view
    if step.state == "unreadable":
        return _line(f"{v.name}  unreadable: {v.error}", "bold red")
    if step.state == "no report":
        return _line(f"{v.name}  {v.error}", "dim")
    if v.compare_error is not None:
        note = f"{v.name}: compare.json unreadable: {v.compare_error} (compared here instead)"
        _line(note, "yellow")
    cmp = step.compare
    title = f"{v.name}  ({v.report.created_at})"
    if v.report.step is not None:  # a checkpoint of a training run (tinyllm sweep)
        title += f"  step {v.report.step} of run {v.report.run}"
    _line(title + (f"  {summary_line(cmp)}" if cmp is not None else "  (first release)"), "bold")
    console.print(_release_table(v.report, step.verdicts))
    for r in step.regressions():
        holm = "" if r.p_adjusted is None else f", Holm {r.p_adjusted:.2g}"
        console.print(
            f"[bold red]regressed[/] {v.name} {r.name}: {r.metric} "
            f"{r.previous_value:.4f} -> {r.current_value:.4f} "
            f"(delta {r.delta:+.4f} [{r.lo:+.4f}, {r.hi:+.4f}], "
            f"p {r.p:.2g}{holm}) vs {cmp.previous}",
            highlight=False,
            soft_wrap=True,
        )


NPerm = Annotated[
    int,
    typer.Option(
        "--n-perm",
        min=1,
        help=f"Permutations, for releases without a stored compare.json (at most {MAX_N_PERM}).",
    ),
]
Seed = Annotated[int, typer.Option("--seed", help="Seed, for releases without compare.json.")]


@app.command("history")
def history_cmd(store: Store = DEFAULT_STORE, n_perm: NPerm = 10_000, seed: Seed = 0) -> None:
    """Every release in the store, oldest first: its rows and its regressions.

    A release whose report.json cannot be read is listed in its place with the reason (the
    others are still shown, each compared with the last readable release before it), and the
    command then exits with 1. A release folder without a report (a run that never finished, or
    one in progress) is listed as such and is not an error. A compare.json that cannot be read
    (or is not a valid comparison) is named, and the comparison is computed instead.
    """
    from tinyllm import history  # numpy and the store: after the arguments are parsed
    from tinyllm.dashboard import load_history
    from tinyllm.store import StoreError

    check_n_perm(n_perm)
    st = existing_store(store)
    try:
        views = load_history(st)
        if not views:
            return console.print(f"no releases in {st.uri}")
        for step in history.release_history(st, views, n_perm=n_perm, seed=seed):
            print_step(step)
    except (StoreError, ValueError) as e:
        store_error(e)
    bad = history.unreadable(views)
    if bad:
        what = f"{len(bad)} of {len(views)} release(s) in {st.uri} unreadable: " + ", ".join(bad)
        Console(stderr=True).print(Text.assemble(("error: ", "red"), what), soft_wrap=True)
        raise typer.Exit(1)


def site_folder(st: Any, out: str | None) -> Path | None:
    """Where `dashboard` writes the site: ``--out`` (a folder or a new path), else a local
    store's ``dashboard/``; None for an s3:// store without ``--out`` (published into it)."""
    from tinyllm import dashboard  # matplotlib and jinja2: only for the dashboard
    from tinyllm.store import LocalStore

    if out is not None:
        got = safeio.path_kind(out)
        if got not in (None, "a folder"):
            store_error(ValueError(f"--out {out}: expected a folder or a new path, got {got}"))
        return Path(out)
    return st.root / dashboard.SITE_PREFIX if isinstance(st, LocalStore) else None


def bind_or_exit(folder: Path | None, port: int | None) -> Any:
    """``--serve PORT``'s server, bound before the site is built (a busy port is refused
    first); None without ``--serve``."""
    from tinyllm import dashboard  # as in site_folder

    if port is None:
        return None
    if folder is None:
        store_error(ValueError("--serve: expected --out DIR for an s3:// store"))
    try:
        return dashboard.bind(folder, port)
    except OSError as e:
        store_error(ValueError(f"--serve {port}: expected a free port on 127.0.0.1, got {e}"))


def write_site(st: Any, folder: Path | None, out: str | None) -> tuple[int, str]:
    """Build the site from ``st`` and write it into ``folder`` (``--out``) or publish it into
    the store; ``(pages, where)``, or exit 2 with the store's or the file system's error."""
    from tinyllm import dashboard  # as in site_folder
    from tinyllm.store import StoreError

    try:
        files = dashboard.build_site(st)
        if out is not None:
            return len(files), str(dashboard.write_site(files, folder))
        return len(files), dashboard.publish_site(st, files)
    except (StoreError, OSError, safeio.UnsafePathError) as e:
        store_error(e)


def _print(text: str, **kw: Any) -> None:
    console.print(text, highlight=False, soft_wrap=True, **kw)


Out = Annotated[
    str | None,
    typer.Option("--out", help="Write the site into this folder (default: <store>/dashboard/)."),
]
Open = Annotated[bool, typer.Option("--open", help="Open the overview in a web browser.")]
Serve = Annotated[
    int | None,
    typer.Option(
        "--serve",
        min=0,
        max=65535,
        help="Then serve it on http://127.0.0.1:PORT/ (0: a free port, printed).",
    ),
]


@app.command("dashboard")
def dashboard_cmd(
    store: Store = DEFAULT_STORE, out: Out = None, open_: Open = False, serve_port: Serve = None
) -> None:
    """Render the store's run history into a static site (overview, trends, releases, entries).

    Every argument is checked before anything is written: the store (a local one must exist),
    --out (a folder or a new path), and --serve (needs --out for an s3:// store; the port is
    bound first, so a busy one is refused before the site is built)."""
    from tinyllm.dashboard import serve_until_interrupted  # as in site_folder

    st = existing_store(store)
    folder = site_folder(st, out)
    server = bind_or_exit(folder, serve_port)
    try:
        t0 = time.perf_counter()
        pages, where = write_site(st, folder, out)
        took = time.perf_counter() - t0
        _print(f"dashboard: {pages} pages from {st.uri} in {took:.1f} s: {where}", markup=False)
        if open_ and folder is not None:
            webbrowser.open((folder / "index.html").resolve().as_uri())
        if server is not None:
            port = server.server_address[1]  # the bound port: the real one for --serve 0
            _print(f"serving {folder} on http://127.0.0.1:{port}/ (Ctrl-C stops)")
            serve_until_interrupted(server)  # Ctrl-C is how the server is stopped
    finally:
        if server is not None:
            server.server_close()
