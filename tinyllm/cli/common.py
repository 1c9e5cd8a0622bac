"""What several command modules of :mod:`tinyllm.cli` share: the two error exits (status 2),
the ``--store``, ``--quiet`` and
run ``--seed`` options, the store a command reads, the files a command writes, and the
``--n-perm`` bound."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from tinyllm import safeio

Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output on stderr.")]
"""``--quiet`` / ``-q``: no progress output on stderr."""
RunSeed = Annotated[
    int, typer.Option("--seed", min=0, help="Seed of the run (per entry: seed+name).")
]
"""``--seed`` of a zoo run: each entry's generator is seeded from it and the entry's name."""

DEFAULT_STORE = "./evalstore"
"""The store every command reads and writes when ``--store`` is not given: the library's
``tinyllm.store.DEFAULT_STORE`` (the same path, written here so that ``--help`` needs no boto3;
a test checks they agree)."""


def store_option(when: str | None = None) -> typer.models.OptionInfo:
    """The ``--store`` option; ``when`` names the flag it goes with (``"--release"``)."""
    where = "a folder or s3://bucket/prefix."
    return typer.Option("--store", help=f"With {when}: {where}" if when else f"A {where[2:]}")


Store = Annotated[str, store_option()]
"""``--store``: the store a command reads or writes (default :data:`DEFAULT_STORE`)."""

MAX_N_PERM = 1_000_000
"""The most permutations per row ``compare`` and ``history`` accept: the library's bound
``tinyllm.compare.MAX_N_PERM`` (the same number, written here so that ``--help`` needs no numpy;
a test checks they agree). One row of 500 items takes about 5 s at this count on one core
(``time tinyllm compare --n-perm 1000000``); 1e12 would run for weeks."""

LARGE_N_PERM = 100_000
"""From this many permutations per row, ``compare`` reports its progress on stderr."""


def fail(msg: str) -> typer.Exit:
    """Print ``error: <msg>`` (red ``error:``) on stderr; the exit (status 2) to raise."""
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {escape(msg)}", highlight=False)
    return typer.Exit(2)


def store_error(e: Exception) -> NoReturn:
    """Print ``error: <message>`` to stderr (message verbatim, unwrapped) and exit with 2."""
    Console(stderr=True).print(Text.assemble(("error: ", "red"), str(e)), soft_wrap=True)
    raise typer.Exit(2)


def open_store_or_exit(uri: str) -> Any:
    """:func:`tinyllm.store.open_store`, or exit 2 with its error."""
    from tinyllm.store import StoreError, open_store  # boto3 and numpy: only when a store is used

    try:
        return open_store(uri)
    except StoreError as e:
        store_error(e)


def existing_store(uri: str) -> Any:
    """The store of a command that reads it (compare, history, dashboard): a local store must be
    a folder that exists, so a mistyped ``--store`` is an error, not an empty store (and, for
    ``dashboard``, a new folder holding an empty site)."""
    if "://" not in uri and not os.path.exists(uri):  # a link to a store folder is fine
        store_error(
            ValueError(f"--store {uri}: expected an existing store folder, got no such path")
        )
    return open_store_or_exit(uri)


def check_n_perm(n_perm: int) -> None:
    """Refuse ``--n-perm`` above the library's maximum before the store is even opened."""
    from tinyllm import compare  # numpy and scipy: after the arguments are parsed

    most = compare.MAX_N_PERM
    if n_perm > most:
        store_error(
            ValueError(f"--n-perm: expected at most {most} permutations per row, got {n_perm}")
        )


def check_target(path: str, flag: str = "--out") -> Path:
    """A file the CLI writes (``--out``) must be a regular file or a new path whose parent is a
    folder (:func:`tinyllm.safeio.check_target`): a symlink, FIFO, device or folder is refused
    before any work, instead of being replaced by a regular file or written through."""
    try:
        return safeio.check_target(path, flag)
    except safeio.UnsafePathError as e:
        raise fail(str(e)) from None
