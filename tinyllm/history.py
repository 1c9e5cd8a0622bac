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
``name``, ``report`` (a :class:`tinyllm.report.StoredReport`, None when unreadable),
``has_report_file``, ``error``, ``compare``, ``compare_error``), so the command line and the
dashboard read one history.

Checkpoints of a training run (``tinyllm sweep``: reports with ``run`` and ``step``) are read
in step order (:func:`order_by_step`), each compared with the run's checkpoint before it; when
every release is a checkpoint of one run, the step is the history's x axis (:func:`steps_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from typing import Any

from tinyllm.compare import compare_reports
from tinyllm.comparison import Comparison, ComparisonRow
from tinyllm.console import Progress
from tinyllm.report import StoredReport
from tinyllm.store import Store


def compare_stored(
    store: Store,
    prev: tuple[str, StoredReport],
    cur: tuple[str, StoredReport],
    **kw: Any,
) -> Comparison:
    """:func:`tinyllm.compare.compare_reports` of two releases of ``store``, each given as
    ``(name, report)`` (a :class:`tinyllm.report.StoredReport`: as the store reads it, or the
    report a publish has just merged), with their per-item scores and unit ids read from the
    store through the reports' references; ``kw``: ``n_perm``, ``seed``, ``alpha``."""
    (a, ra), (b, rb) = prev, cur
    return compare_reports(
        ra,
        rb,
        store.items_loader(a, ra),
        store.items_loader(b, rb),
        load_units_prev=store.units_loader(a, ra),
        load_units_cur=store.units_loader(b, rb),
        **kw,
    )


def run_step(report: StoredReport | None) -> tuple[str, int] | None:
    """``(run, step)`` of a checkpoint's release (``tinyllm sweep``), None for any other (and
    for an unreadable release, None)."""
    return None if report is None else report.run_step


def order_by_step(views: Iterable[Any]) -> list[Any]:
    """``views`` (oldest first) with each training run's checkpoints in step order.

    The releases of one run keep the places they hold in the history, and fill them in step
    order (then name): a checkpoint swept after a later one (step 500 after step 1000) is read
    before it; every other release stays where it is. Example: ``a@1000, v1, a@500`` ->
    ``a@500, v1, a@1000``.
    """
    out = list(views)
    slots: dict[str, list[int]] = {}
    for i, v in enumerate(out):
        rs = run_step(v.report)
        if rs is not None:
            slots.setdefault(rs[0], []).append(i)
    for places in slots.values():
        by_step = sorted((out[i] for i in places), key=lambda v: (run_step(v.report)[1], v.name))
        for i, v in zip(places, by_step, strict=True):
            out[i] = v
    return out


def step_comparisons(
    store: Store, views: Iterable[Any], *, n_perm: int = 10_000, seed: int = 0
) -> dict[str, Comparison | None]:
    """The comparisons to read instead of the stored ones, by release: each checkpoint of a run
    (``views`` in step order, :func:`order_by_step`) is compared with the run's checkpoint
    before it. A checkpoint whose stored ``compare.json`` is with another release of its run (a
    step swept in between since: step 1000 stored against step 400, step 500 swept after it)
    gets one computed here (:func:`tinyllm.compare.compare_reports`, nothing written); the
    run's first checkpoint compared with a later one of its run gets None. Every other release
    keeps its stored comparison (it is not in the result)."""
    views = list(views)
    runs = {v.name: run_step(v.report) for v in views}
    before: dict[str, Any] = {}  # run -> its last checkpoint's view so far
    out: dict[str, Comparison | None] = {}
    for v in views:
        rs = runs[v.name]
        if rs is None:
            continue
        prev = before.get(rs[0])
        have = v.compare.previous if v.compare is not None else None
        of_run = runs.get(have) is not None and runs[have][0] == rs[0]
        if prev is not None and have != prev.name:
            out[v.name] = compare_stored(
                store, (prev.name, prev.report), (v.name, v.report), n_perm=n_perm, seed=seed
            )
        elif prev is None and of_run:
            out[v.name] = None
        before[rs[0]] = v
    return out


def steps_of(views: Iterable[Any]) -> list[int] | None:
    """The training step of each view when every one is a readable checkpoint of one run (the
    x axis of the history is then the step), else None."""
    keys = [run_step(getattr(v, "report", None)) for v in views]
    if not keys or None in keys or len({k[0] for k in keys}) != 1:
        return None
    return [k[1] for k in keys]


STATES = ("ok", "unreadable", "no report")
"""A step's :attr:`ReleaseStep.state`: a readable report, a report.json that cannot be read,
or a release folder without one."""


@dataclass
class ReleaseStep:
    """One release of the history and its comparison with the release before it."""

    view: Any
    """The release as read from the store (its ``name``, ``report``, ``error`` ...)."""
    compare: Comparison | None = None
    """The comparison: the stored comparison, or one computed against :attr:`previous`;
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
        return {r.name: r.verdict for r in self.compare.rows}

    @property
    def baseline_verdicts(self) -> dict[str, str]:
        """Entry name -> its row's ``beats_baseline`` verdict ("better", "worse", "not
        distinguishable"), for the rows of this release that carry one (reports written
        before rows carried a baseline have none)."""
        rows = [] if self.view.report is None else self.view.report.rows
        return {r.name: r.beats_baseline.verdict for r in rows if r.beats_baseline is not None}

    def regressions(self) -> list[ComparisonRow]:
        """The comparison's rows whose verdict is "regressed"
        (:meth:`tinyllm.comparison.Comparison.regressions`)."""
        return [] if self.compare is None else self.compare.regressions()


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
    previous: tuple[str, StoredReport] | None = None  # the last readable release, its report
    for v in views:
        if v.report is None:
            yield ReleaseStep(v)
            continue
        step = ReleaseStep(v, v.compare, previous=previous[0] if previous else None)
        if _against_another_step(step.compare, previous, v.report):
            step.compare = None  # a checkpoint swept in between: compared with its new neighbour
        if step.compare is None and previous is not None:
            step.computed = True
            step.compare = compare_stored(
                store, previous, (v.name, v.report), n_perm=n_perm, seed=seed
            )
        yield step
        previous = (v.name, v.report)


def _against_another_step(
    cmp: Comparison | None, previous: tuple[str, StoredReport] | None, report: StoredReport
) -> bool:
    """Whether a checkpoint's stored comparison is with another release than the checkpoint of
    its run just before it in the history."""
    if cmp is None or previous is None:
        return False
    here, there = run_step(report), run_step(previous[1])
    return (
        here is not None
        and there is not None
        and here[0] == there[0]
        and cmp.previous != previous[0]
    )


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
) -> Comparison:
    """The comparison of release ``b`` against the earlier release ``a`` of ``store`` (nothing
    written): :func:`tinyllm.compare.compare_reports` on their reports, per-item scores and unit
    ids, a paired permutation test per row over its units with ``n_perm`` sign patterns, the
    verdicts from the Holm-adjusted p at level ``alpha``.

    ``progress(total)``: a context manager around the comparison, told the number of ``b``'s
    rows when it starts (``update(0)``) and when it ends (``update(total)``); compare_reports
    has no per-row callback. Raises StoreError for a release the store does not have, and
    ValueError when ``a`` and ``b`` are checkpoints of one training run and ``a``'s step is not
    before ``b``'s (a run is read in step order: the earlier checkpoint is the baseline).
    """
    prev, cur = store.read_stored_report(a), store.read_stored_report(b)
    here, there = run_step(prev), run_step(cur)
    if here is not None and there is not None and here[0] == there[0] and here[1] >= there[1]:
        raise ValueError(
            f"expected A to be an earlier checkpoint of run {here[0]!r} than B, got step "
            f"{here[1]} ({a}) and step {there[1]} ({b}): compare {b} {a}"
        )
    total = len(cur.rows)
    bar_of = progress or (lambda n: Progress("comparing", n, quiet=True))
    with bar_of(total) as bar:
        cmp = compare_stored(store, (a, prev), (b, cur), n_perm=n_perm, seed=seed, alpha=alpha)
        bar.update(total)
    return cmp
