"""`tinyllm eval --suite zoo`, the ``eval`` group's own call: the zoo scored in this process into a
report file (``--out``), or the EvalSuite flow for a release into the store (``--release``).

The flow's runner imports :mod:`tinyllm_suite` (and so prefect, seconds of start-up) inside
:func:`run_flow`: ``eval --help`` and the ``eval`` sub-commands start without it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

import typer

from tinyllm import safeio
from tinyllm.cli.app import DEBUG, console, eval_app
from tinyllm.cli.common import DEFAULT_STORE, Quiet, RunSeed, check_target, fail, store_option
from tinyllm.cli.export import Track, check_track, print_tracked
from tinyllm.console import Progress, print_report, print_suite_run


def check_out(out: str) -> None:
    """``eval --out``: the report's target (:func:`check_target`), and ``items/`` beside it a
    folder or a new path."""
    p = check_target(out)
    items = p.parent / "items"
    got = safeio.path_kind(items)
    if got not in (None, "a folder"):
        raise fail(
            f"--out {out}: expected {items} (the per-item scores beside the report) to be a "
            f"folder or a new path, got {got}"
        )


def check_suite_args(
    suite: str, manifest: str | None, release: str | None, out: str | None, a: dict
) -> Any:
    """Everything about `eval --suite` that can be checked before scoring; the manifest.

    ``a``: ``only``, ``previous``, ``refresh``, ``dask_address``, ``workers``, ``store`` and
    ``track`` as given. ``--release`` (the EvalSuite flow into the store) and ``--out`` (a report file
    written here) are two modes: both at once is refused. In flow mode the store must be
    reachable and writable and ``--previous`` one of its releases."""
    from tinyllm.publish import check_publish_args  # the store and numpy: after parsing
    from tinyllm.report import ManifestError, load_manifest
    from tinyllm.store import StoreError

    if suite != "zoo":
        raise fail(f"--suite: expected one of ['zoo'], got {suite!r}")
    if manifest is None:
        raise fail("--suite zoo: expected --manifest FILE, got none")
    if release is not None and out is not None:
        raise fail(
            f"expected --release (the EvalSuite flow into --store) or --out (a report file, "
            f"no store), got both (--release {release} --out {out})"
        )
    flow_mode = release is not None
    if (a["only"] or a["previous"] is not None) and not flow_mode:
        raise fail("--only and --previous need --release without --out (the EvalSuite flow)")
    if a["refresh"] and not flow_mode:
        raise fail("--refresh needs --release (the EvalSuite flow's result cache)")
    if a["track"] and not flow_mode:
        raise fail("--track needs --release (a release in the store, logged once published)")
    a["track"] = check_track(a["track"])  # unknown tracker, missing extra: before scoring
    runner = (a["dask_address"], a["workers"])
    if runner != (None, None) and not flow_mode:
        raise fail("--dask-address and --workers need --release without --out (the flow)")
    if None not in runner:
        raise fail(f"expected --dask-address or --workers, got both ({runner[0]}, {runner[1]})")
    try:
        m = load_manifest(manifest)
        names = [e.name for e in m.entries]
        unknown = [n for n in a["only"] or [] if n not in names]
        if unknown:
            raise ManifestError(
                f"--only: expected entry names from {manifest} {names}, got {unknown}"
            )
        if flow_mode:
            check_publish_args(a["store"], release, a["previous"])
    except (ManifestError, StoreError) as e:
        raise fail(str(e)) from None
    return m


def run_flow(manifest: str, release: str, a: dict, seed: int, as_json: bool, quiet: bool) -> None:
    """`eval --suite zoo --release R`: the EvalSuite flow, then its report and comparison,
    which rows came from the result cache and where ``--track`` logged it (or its result as
    JSON). A tracker that failed is a warning line: the release is in the store."""
    from tinyllm_suite.run import run_suite_flow  # prefect, seconds of start-up: only here

    runner = (a["dask_address"], a["workers"])
    out = run_suite_flow(
        manifest,
        release,
        a["store"],
        a["only"] or None,
        a["previous"],
        seed,
        quiet,
        runner,
        DEBUG["on"],
        a["refresh"],
        list(a["track"]),
    )
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    print_suite_run(console, out, release)
    cached = out.get("cached") or []
    if cached:
        console.print(
            f"{len(cached)} of {len(out['report']['rows'])} rows from the result cache (scored ok "
            f"before, nothing changed since): {', '.join(cached)}; --refresh scores them again"
        )
    print_tracked(release, [SimpleNamespace(**t) for t in out.get("tracked") or []])


Release = Annotated[
    str | None,
    typer.Option(
        "--release",
        help="Run the EvalSuite flow (Prefect) for this release into --store and compare it "
        "with the previous release. Not with --out.",
    ),
]
Out = Annotated[
    str | None,
    typer.Option(
        "--out",
        help="Score in this process and write the report here (default report.json): a new "
        "path or a regular file. Nothing is written to a store; not with --release.",
    ),
]
Manifest = Annotated[
    str | None,
    typer.Option(
        "--manifest", help="Zoo manifest (YAML or JSON); paths are relative to its folder."
    ),
]
SuiteStore = Annotated[str, store_option("--release")]
Only = Annotated[
    list[str] | None,
    typer.Option(
        "--only",
        help="With --release: score only this entry (repeatable); an ok row whose files, seed "
        "and code are unchanged comes from the result cache (--refresh scores it again).",
    ),
]
Previous = Annotated[
    str | None,
    typer.Option("--previous", help="With --release: compare with this release (default: latest)."),
]
DaskAddress = Annotated[
    str | None,
    typer.Option(
        "--dask-address",
        help="With --release: fan the entries out to this Dask scheduler (tcp://host:8786; "
        "default $TINYLLM_DASK_ADDRESS, else 2 threads).",
    ),
]
Workers = Annotated[
    int | None,
    typer.Option("--workers", min=1, help="With --release: a local Dask cluster of N processes."),
]
Refresh = Annotated[
    bool,
    typer.Option(
        "--refresh",
        help="With --release: score every entry again, reading nothing from the result cache "
        "(without it an entry scored ok before, with the same files, seed and code, comes from "
        "the cache; error rows are always scored again).",
    ),
]


Suite = Annotated[str | None, typer.Option("--suite", help="The suite to run: zoo.")]
Json = Annotated[bool, typer.Option("--json", help="Print the report as JSON, not a table.")]


@eval_app.callback(invoke_without_command=True)
def eval_suite(
    ctx: typer.Context,
    suite: Suite = None,
    manifest: Manifest = None,
    release: Release = None,
    out: Out = None,
    as_json: Json = False,
    seed: RunSeed = 0,
    store: SuiteStore = DEFAULT_STORE,
    only: Only = None,
    previous: Previous = None,
    quiet: Quiet = False,
    dask_address: DaskAddress = None,
    workers: Workers = None,
    refresh: Refresh = False,
    track: Track = None,
) -> None:
    """Score a suite: `tinyllm eval --suite zoo --manifest zoo.yaml` scores every entry and writes the report (plus items/<name>.npy beside it); with `--release R` (not with `--out`) it runs the EvalSuite flow into the store instead; or use a sub-command.

    Every argument is checked before anything is scored: the manifest, the release name, --only names, --out, and in flow mode the store (reachable and writable) and --previous (a release in the store).
    """
    if ctx.invoked_subcommand is not None:
        return
    if suite is None:
        console.print(ctx.get_help())
        raise typer.Exit(0)
    a = {"only": only, "previous": previous, "dask_address": dask_address, "workers": workers}
    a.update(store=store, refresh=refresh, track=track)
    m = check_suite_args(suite, manifest, release, out, a)
    if release is not None:
        return run_flow(manifest, release, a, seed, as_json, quiet)
    out = out or "report.json"
    check_out(out)
    from tinyllm.eval import report_files, zoo  # torch and the models: after the checks

    rep = zoo.run_zoo(m, seed=seed, base_dir=Path(manifest).parent, progress=Progress.rows(quiet))
    path = report_files.write_report(rep, out)
    if as_json:
        return typer.echo(json.dumps(rep.to_json(), indent=2))
    print_report(console, rep, f"report written to {path}")
