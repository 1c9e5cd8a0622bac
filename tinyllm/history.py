"""The history of releases in a store, each compared with the one before it.

::

    views = tinyllm.dashboard.load_history(store)       # every release folder, oldest first
    for step in release_history(store, views, n_perm=10_000, seed=0):
        step.view.name, step.state, step.previous, step.verdicts, step.regressions()

Each readable release is compared with the last READABLE release before it: its stored
``compare.json`` when there is a valid one, else a comparison computed here from the per-item
scores (:func:`tinyllm.compare.compare_reports`, nothing written). An unreadable release is
passed over (and named by :func:`unreadable`); a release folder without ``report.json`` (a run
that never finished, or one in progress) is a step of its own and not an error.

``views`` are the release views of :func:`tinyllm.dashboard.load_history` (any objects with
``name``, ``report``, ``has_report_file``, ``error``, ``compare``, ``compare_error``), so the
command line and the dashboard read one history.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from typing import Any

from tinyllm.compare import compare_reports, regressions
from tinyllm.console import Progress
from tinyllm.store import Store

STATES = ("ok", "unreadable", "no report")
"""A step's :attr:`ReleaseStep.state`: a readable report, a report.json that cannot be read,
or a release folder without one."""


@dataclass
class ReleaseStep:
    """One release of the history and its comparison with the release before it."""

    view: Any
    """The release as read from the store (its ``name``, ``report``, ``error`` ...)."""
    compare: dict | None = None
    """compare.json's content: the stored comparison, or one computed against :attr:`previous`;
    None for the first readable release and for a release without a readable report."""
    computed: bool = False
    """Whether :attr:`compare` was computed here (no valid stored compare.json)."""
    previous: str | None = None
    """The last readable release before this one (None: there is none)."""

    @property
    def state(self) -> str:
        """One of :data:`STATES`."""
        if self.view.report is not None:
            return "ok"
        return "unreadable" if self.view.has_report_file else "no report"

    @property
    def verdicts(self) -> dict[str, str]:
        """Entry name -> its verdict against the previous release (empty without a comparison)."""
        if self.compare is None:
            return {}
        return {r["name"]: r["verdict"] for r in self.compare["rows"]}

    @property
    def baseline_verdicts(self) -> dict[str, str]:
        """Entry name -> its row's ``beats_baseline`` verdict ("better", "worse", "not
        distinguishable"), for the rows of this release that carry one (reports written
        before rows carried a baseline have none)."""
        rows = [] if self.view.report is None else self.view.report["rows"]
        return {r["name"]: r["beats_baseline"]["verdict"] for r in rows if r.get("beats_baseline")}

    def regressions(self) -> list[dict]:
        """The comparison's rows whose verdict is "regressed" (:func:`tinyllm.compare.regressions`)."""
        return [] if self.compare is None else regressions(self.compare)


def release_history(
    store: Store, views: Iterable[Any], *, n_perm: int = 10_000, seed: int = 0
) -> Iterator[ReleaseStep]:
    """One :class:`ReleaseStep` per view, in the views' order (oldest first).

    A readable release without a valid stored comparison is compared with the last readable
    release before it by :func:`tinyllm.compare.compare_reports` (``n_perm`` sign patterns,
    ``seed``; an unreadable items file makes its row "not comparable", not an error), when it
    is reached: a caller printing each step shows the earlier ones while a later one computes.
    Raises what the store raises (StoreError) and ValueError for an invalid comparison input.
    """
    previous: tuple[str, dict] | None = None  # (name, report) of the last readable release
    for v in views:
        if v.report is None:
            yield ReleaseStep(v)
            continue
        step = ReleaseStep(v, v.compare, previous=previous[0] if previous else None)
        if step.compare is None and previous is not None:
            step.computed = True
            step.compare = compare_reports(
                previous[1],
                v.report,
                store.items_loader(previous[0]),
                store.items_loader(v.name),
                n_perm=n_perm,
                seed=seed,
                load_units_prev=store.units_loader(previous[0], previous[1]),
                load_units_cur=store.units_loader(v.name, v.report),
            )
        yield step
        previous = (v.name, v.report)


def unreadable(views: Iterable[Any]) -> list[str]:
    """The names of the releases whose report.json is there but cannot be read, in order."""
    return [v.name for v in views if v.report is None and v.has_report_file]


def compare_releases(
    store: Store,
    a: str,
    b: str,
    *,
    n_perm: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
    progress: Callable[[int], ContextManager[Any]] | None = None,
) -> dict:
    """compare.json of release ``b`` against the earlier release ``a`` of ``store`` (nothing
    written): :func:`tinyllm.compare.compare_reports` on their reports, per-item scores and unit
    ids, a paired permutation test per row over its units with ``n_perm`` sign patterns, the
    verdicts from the Holm-adjusted p at level ``alpha``.

    ``progress(total)``: a context manager around the comparison, told the number of ``b``'s
    rows when it starts (``update(0)``) and when it ends (``update(total)``); compare_reports
    has no per-row callback. Raises StoreError for a release the store does not have.
    """
    prev, cur = store.read_report(a), store.read_report(b)
    total = len(cur["rows"])
    bar_of = progress or (lambda n: Progress("comparing", n, quiet=True))
    with bar_of(total) as bar:
        cmp = compare_reports(
            prev,
            cur,
            store.items_loader(a),
            store.items_loader(b),
            n_perm=n_perm,
            seed=seed,
            alpha=alpha,
            load_units_prev=store.units_loader(a, prev),
            load_units_cur=store.units_loader(b, cur),
        )
        bar.update(total)
    return cmp
