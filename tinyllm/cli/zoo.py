"""`tinyllm zoo build`: train the demo zoo (:func:`tinyllm.train.build_zoo`)."""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer
from rich.table import Table

from tinyllm import safeio
from tinyllm.cli.app import console, zoo_app
from tinyllm.cli.common import Quiet, store_error
from tinyllm.console import Progress


@zoo_app.command("build")
def zoo_build_cmd(
    out: Annotated[
        str,
        typer.Option(
            "--out", help="Folder for checkpoints, data and zoo.yaml (a folder or a new path)."
        ),
    ],
    seed: Annotated[int, typer.Option("--seed", help="Seed of every model's training.")] = 0,
    jobs: Annotated[
        int, typer.Option("--jobs", help="Models trained side by side, one process each.")
    ] = 2,
    threads: Annotated[
        int, typer.Option("--threads", help="torch threads of each training process.")
    ] = 1,
    quiet: Quiet = False,
) -> None:
    """Train the demo zoo (every family with a recipe, small configs, fixed seeds) on real data."""
    # GNU OpenMP spin-waits by default: on a busy machine 2 threads then run many times slower.
    # Must be set before torch is first imported (this command imports it below).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from tinyllm.train import MANIFEST_NAME, build_zoo, check_out_dir  # torch: after OMP_...

    if threads < 1 or jobs < 1:
        raise typer.BadParameter(f"expected --jobs >= 1 and --threads >= 1, got {jobs}, {threads}")
    try:  # a file or a device is refused before anything is trained or written
        check_out_dir(out, "--out")
    except safeio.UnsafePathError as e:
        store_error(e)
    t0 = time.perf_counter()
    progress = Progress.training(quiet)
    results = build_zoo(out, seed=seed, progress=progress, threads=threads, jobs=jobs)
    table = Table(title=f"zoo built in {time.perf_counter() - t0:.0f} s (seed {seed})")
    table.add_column("name")
    table.add_column("checkpoint")
    for name, path in results:
        table.add_row(name, str(path))
    console.print(table)
    console.print(f"manifest: {os.path.join(out, MANIFEST_NAME)}")
