"""`tinyllm compare A B`: release B of a store against release A, a paired permutation test per
row (:func:`tinyllm.history.compare_releases`); nothing is written."""

from __future__ import annotations

import functools
import json
from typing import Annotated

import typer

from tinyllm.cli.app import app, console
from tinyllm.cli.common import (
    DEFAULT_STORE,
    LARGE_N_PERM,
    MAX_N_PERM,
    Store,
    check_n_perm,
    existing_store,
    store_error,
)
from tinyllm.compare_render import compare_table
from tinyllm.console import Progress

A = Annotated[str, typer.Argument(help="The earlier (baseline) release.")]
B = Annotated[str, typer.Argument(help="The release to judge against A.")]
NPerm = Annotated[
    int, typer.Option("--n-perm", min=1, help=f"Permutations per row (at most {MAX_N_PERM}).")
]
PermSeed = Annotated[int, typer.Option("--seed", help="Seed of the permutation test.")]
Alpha = Annotated[float, typer.Option("--alpha", min=0.0, max=1.0, help="Test level.")]
CompareJson = Annotated[bool, typer.Option("--json", help="Print compare.json, not a table.")]
FailOnRegression = Annotated[
    bool, typer.Option("--fail-on-regression", help="Exit with status 1 when a row regressed.")
]


@app.command("compare")
def compare_cmd(
    a: A,
    b: B,
    store: Store = DEFAULT_STORE,
    n_perm: NPerm = 10_000,
    seed: PermSeed = 0,
    alpha: Alpha = 0.05,
    as_json: CompareJson = False,
    fail_on_regression: FailOnRegression = False,
) -> None:
    """Compare release B with release A: a paired permutation test per row (nothing written)."""
    from tinyllm.history import compare_releases  # numpy and scipy: after parsing
    from tinyllm.store import StoreError

    check_n_perm(n_perm)
    st = existing_store(store)
    # compare_releases has no per-row callback: a large count gets a line when it starts and
    # one when it ends, so a long run does not look hung
    what = f"comparing {b} with {a}, {n_perm} permutations per row"
    bar = functools.partial(Progress, what, quiet=n_perm < LARGE_N_PERM)
    try:
        cmp = compare_releases(st, a, b, n_perm=n_perm, seed=seed, alpha=alpha, progress=bar)
    except (StoreError, ValueError) as e:
        store_error(e)
    if as_json:
        typer.echo(json.dumps(cmp.to_json(), indent=2))
    else:
        console.print(compare_table(cmp))
    if fail_on_regression and cmp.regressions():
        raise typer.Exit(1)
