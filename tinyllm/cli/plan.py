"""`tinyllm plan`: how many units a comparison of one row needs to detect a change
(:func:`tinyllm.plan.plan_row`)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from tinyllm.cli.app import app, console
from tinyllm.cli.common import DEFAULT_STORE, Store, existing_store, store_error

Release = Annotated[str, typer.Argument(help="The stored release whose spread is used.")]
Entry = Annotated[str, typer.Argument(help="The row (manifest entry) to plan for.")]
Delta = Annotated[
    float,
    typer.Option(
        "--delta", help="The change to detect, in the metric's units (bpb: bits per byte)."
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")]


@app.command("plan")
def plan_cmd(
    release: Release,
    entry: Entry,
    delta: Delta,
    store: Store = DEFAULT_STORE,
    as_json: AsJson = False,
) -> None:
    """How many units (documents, rows, pairs) a comparison of ENTRY needs to see a change of
    --delta at 80% power, two-sided alpha 0.05, from the spread RELEASE stored (its comparison
    with the previous release, else the row's own units)."""
    from tinyllm.plan import plan_row  # numpy and the store: after the arguments are parsed
    from tinyllm.store import StoreError

    st = existing_store(store)
    try:
        p = plan_row(st, release, entry, delta)
    except (StoreError, ValueError) as e:
        store_error(e)
    if as_json:
        return typer.echo(json.dumps(asdict(p), indent=2))
    what = "a paired difference" if p.paired else "the value (two independent releases)"
    console.print(
        f"{p.entry} ({p.metric}) in {p.release}: {p.n_units} units now, se of {what} "
        f"{p.se:.4g} from {p.source}, sd of one unit's difference {p.sd_unit:.4g}\n"
        f"{p.n_units} units could see ±{p.mde_now:.4g}; to see {abs(p.delta):.4g} "
        f"(80% power, alpha 0.05): {p.units} units",
        highlight=False,
        soft_wrap=True,
    )
