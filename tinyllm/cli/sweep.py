"""`tinyllm sweep`: the checkpoints of one training run, each a release recorded with its step
(:mod:`tinyllm.sweep`, run by the Sweep flow of :mod:`tinyllm_suite.sweep`)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from tinyllm.cli.app import DEBUG, app, console
from tinyllm.cli.common import DEFAULT_STORE, Quiet, RunSeed, Store, fail
from tinyllm.compare_render import format_number, format_p

Checkpoints = Annotated[
    list[str],
    typer.Argument(
        help="Checkpoint folders or files of one run, or globs of them ('runs/a/step-*', quoted "
        "or expanded by the shell).",
        show_default=False,
    ),
]
Run = Annotated[
    str | None,
    typer.Option("--run", help="The run's name (default: the checkpoints' folder's name)."),
]
Manifest = Annotated[
    str | None,
    typer.Option(
        "--manifest",
        help="Score each checkpoint on this manifest's entries, whose checkpoint is "
        "'{checkpoint}' (formats/manifest.md). Not with --data.",
    ),
]
Data = Annotated[
    str | None,
    typer.Option("--data", help="Score each checkpoint on this file (lm: a token file)."),
]
Family = Annotated[
    str | None,
    typer.Option("--family", help="With --data: the family (default: the checkpoint's tl_arch)."),
]
Name = Annotated[
    str | None,
    typer.Option("--name", help="With --data: the row's name (default: the data file's name)."),
]
Steps = Annotated[
    list[str] | None,
    typer.Option(
        "--step",
        help="NAME=N: the step of the checkpoint NAME (its path or folder name), for names that "
        "do not state it like step-1200, ckpt_1200 or checkpoint-1200 (repeatable).",
    ),
]
Refresh = Annotated[
    bool,
    typer.Option("--refresh", help="Score every checkpoint again, reading no cached result."),
]
Json = Annotated[bool, typer.Option("--json", help="Print the flow's result as JSON.")]


def parse_steps(pairs: list[str] | None) -> dict[str, int]:
    """``--step NAME=N`` options as ``{NAME: N}``; exit 2 naming a malformed one."""
    out: dict[str, int] = {}
    for pair in pairs or []:
        name, sep, step = pair.rpartition("=")
        if not sep or not name or not step.isdigit():
            raise fail(f"--step: expected NAME=N with N a step >= 0, got {pair!r}")
        out[name] = int(step)
    return out


def prepare(args: list[str], steps: dict[str, int], a: dict) -> tuple[Any, list, str, str]:
    """Everything a sweep needs, checked before anything is scored or written: the checkpoints
    and their steps, the run's name, the entries (``a``: manifest, data, family, name) and the
    store (reachable, writable, each release name valid). ``(template, checkpoints, run,
    base_dir)``; exit 2 with one line on a bad input."""
    from tinyllm import sweep  # torch, numpy and the store: after the arguments are parsed
    from tinyllm.publish import check_publish_args
    from tinyllm.store import StoreError
    from tinyllm.store.keys import check_name

    try:
        ckpts = sweep.resolve_checkpoints(args, steps)
        run = sweep.check_run(a["run"]) if a["run"] is not None else sweep.default_run(ckpts)
        template, base_dir = sweep.sweep_template(
            manifest=a["manifest"],
            family=a["family"],
            data=a["data"],
            name=a["name"],
            first=ckpts[0],
        )
        for c in ckpts:
            check_name(sweep.release_name(run, c.step), "release")
        check_publish_args(a["store"], sweep.release_name(run, ckpts[0].step))
    except (sweep.SweepError, StoreError) as e:
        raise fail(str(e)) from None
    return template, ckpts, run, base_dir


def print_sweep(out: dict) -> None:
    """The run's consecutive comparisons as a table, then what they conclude and where the
    releases went."""
    from tinyllm.sweep import conclusion  # numpy and the stats behind it: printed after a run

    s = out["summary"]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in ("step", "entry", "metric", "value", "delta [95% interval]", "p", "p (run, Holm)"):
        table.add_column(col, no_wrap=True)
    table.add_column("verdict")
    for pair in s["pairs"]:
        for r in pair["rows"]:
            value = f"{format_number(r['previous_value'])} -> {format_number(r['current_value'])}"
            delta = "-" if r["delta"] is None else format_number(r["delta"], True)
            if r["lo"] is not None:
                delta += f" [{format_number(r['lo'], True)}, {format_number(r['hi'], True)}]"
            table.add_row(
                f"{pair['previous_step']} -> {pair['step']}",
                r["name"],
                str(r["metric"] or "-"),
                value,
                delta,
                format_p(r["p"]),
                format_p(r["p_run"]),
                r["verdict"],
            )
    if s["pairs"]:
        console.print(table)
    for line in conclusion(s):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    new = [c["release"] for c in out["checkpoints"] if c["published"]]
    kept = len(out["checkpoints"]) - len(new)
    where = f"{out['store'].rstrip('/')}/releases/"
    console.print(
        f"{len(new)} release(s) written to {where}"
        + (f": {', '.join(new)}" if new else "")
        + (f"; {kept} already there as scored (rows from the result cache)" if kept else ""),
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


@app.command("sweep")
def sweep_cmd(
    checkpoints: Checkpoints,
    run: Run = None,
    manifest: Manifest = None,
    data: Data = None,
    family: Family = None,
    name: Name = None,
    step: Steps = None,
    store: Store = DEFAULT_STORE,
    seed: RunSeed = 0,
    refresh: Refresh = False,
    as_json: Json = False,
    quiet: Quiet = False,
) -> None:
    """Evaluate the checkpoints of one training run in one Sweep flow run: each is a release <run>-step-<step> of the store, compared with the run's previous step.

    Each checkpoint's step comes from --step or from its name (step-1200, ckpt_1200, checkpoint-1200). A checkpoint scored before, with the same bytes, seed and code, comes from the result cache: adding a checkpoint and sweeping again scores only it. The summary tests each step against the one before it (Holm over the run) and names the last step that improved significantly.
    """
    a = {"run": run, "manifest": manifest, "data": data, "family": family, "name": name}
    template, ckpts, run_name, base_dir = prepare(
        checkpoints, parse_steps(step), a | {"store": store}
    )
    from tinyllm_suite import sweep as flow  # prefect, seconds of start-up: only here

    out = flow.run_sweep_flow(
        template.model_dump(mode="json"),
        [{"path": c.path, "step": c.step} for c in ckpts],
        run_name,
        store,
        base_dir=base_dir,
        seed=seed,
        refresh=refresh,
        quiet=quiet,
        debug=DEBUG["on"],
    )
    if as_json:
        return typer.echo(json.dumps(out, indent=2))
    print_sweep(out)
