"""What the dashboard's pages show, read from the store: every release (readable or not) with
its comparison and runs, each row with its verdict, and the numbers formatted as the CLI prints
them. Nothing here renders HTML or draws."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from tinyllm import metrics
from tinyllm.compare_render import format_number, format_p, mde_text
from tinyllm.comparison import Comparison, ComparisonRow
from tinyllm.history import order_by_step, step_comparisons
from tinyllm.report import StoredReport, StoredRow, stored_rows
from tinyllm.store import Store, StoreError, history_order, parse_created_at

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""A name that is its own file name on the site (a valid store key segment)."""

# the CSS class (and the legend's words) of a row's verdict against the previous release
VERDICT_CLASS = {
    "improved": "v-improved",
    "regressed": "v-regressed",
    "unchanged": "v-unchanged",
    "not comparable": "v-nc",
    "added": "v-added",
    "removed": "v-removed",
    "error": "v-error",
    "skipped": "v-skipped",
    "no comparison": "v-none",
}


# ---- reading the store --------------------------------------------------------------------------


@dataclass
class RunView:
    """One ``runs/<run-id>.json``: when it ran and which entries it scored (its rows as
    :class:`tinyllm.report.StoredRow`), or why unreadable."""

    run_id: str
    created_at: str | None = None
    rows: list[StoredRow] = field(default_factory=list)
    error: str | None = None


@dataclass
class ReleaseView:
    """One release folder under ``releases/``, readable or not: ``report`` is the stored report
    as a :class:`tinyllm.report.StoredReport` (None when unreadable), :attr:`rows` its rows."""

    name: str
    slug: str
    report: StoredReport | None = None
    error: str | None = None  # why the report is unreadable, or that there is none
    has_report_file: bool = False  # a report.json is there (readable or not)
    created_at: _dt.datetime | None = None
    compare: Comparison | None = None
    compare_error: str | None = None
    runs: list[RunView] = field(default_factory=list)

    @property
    def rows(self) -> list[StoredRow]:
        """The report's rows as :class:`tinyllm.report.StoredRow`; empty without a report."""
        return [] if self.report is None else list(self.report.rows)

    def verdicts(self) -> dict[str, ComparisonRow]:
        """Entry name -> its comparison row (empty when there is no readable comparison)."""
        return {} if self.compare is None else self.compare.by_name()

    def compare_json(self) -> str | None:
        """The comparison's compare.json, indented, as the release page shows it in full."""
        if self.compare is None:
            return None
        return json.dumps(self.compare.to_json(), indent=2, ensure_ascii=False)


def slug(name: str) -> str:
    """A file name for a release or entry page: the name itself when it is a valid store key
    segment (``[A-Za-z0-9][A-Za-z0-9._-]*``), else ``x-`` + 12 hex of its sha256."""
    if SAFE_NAME.match(name) and not name.startswith("x-"):
        return name
    return "x-" + hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def load_history(store: Store) -> list[ReleaseView]:
    """Every release folder under ``releases/``, in history order, each read as far as it can be.

    The order is the store's (:func:`tinyllm.store.history_order`): readable releases by
    ``created_at`` then name; unreadable ones by the time in their first run id when it has
    one, else after all the others (by name); the checkpoints of a training run in step order
    (:func:`tinyllm.history.order_by_step`), each with its comparison with the run's checkpoint
    before it (:func:`tinyllm.history.step_comparisons`: computed when a step was swept in
    between since it was stored). Nothing raises for a bad file: the reason is kept on the view.
    """
    folders: dict[str, dict[str, list[str]]] = {}
    keys = store.list("releases/")
    for name in sorted(store.report_folders(keys)):  # read below: unreadable, not "no report"
        folders.setdefault(name, {"files": ["report.json"], "runs": [], "compares": []})
    for key in keys:
        parts = key.split("/")
        if len(parts) < 3 or not parts[1]:
            continue
        f = folders.setdefault(parts[1], {"files": [], "runs": [], "compares": []})
        if len(parts) == 3:
            f["files"].append(parts[2])
        elif len(parts) == 4 and parts[2] == "runs" and parts[3].endswith(".json"):
            f["runs"].append(parts[3][: -len(".json")])
        elif len(parts) == 4 and parts[2] == "compares":
            f["compares"].append(parts[3])
    views = []
    slugs: set[str] = set()
    for name, f in folders.items():
        s = slug(name)
        while s in slugs:  # two odd names with one hash prefix: practically never
            s += "_"
        slugs.add(s)
        v = ReleaseView(name=name, slug=s, has_report_file="report.json" in f["files"])
        # each document is read on its own: a bad one (a StoreError naming its key) is kept on
        # the view as the reason and the others are still read
        if not v.has_report_file:
            v.error = "no report.json (a run that never finished, or one still in progress)"
        else:
            try:
                v.report = store.read_stored_report(name)
                v.created_at = parse_created_at(v.report.created_at, store.where(name))
            except (StoreError, ValueError, OSError) as e:
                v.report, v.error = None, _error_text(e)
        if "compare.json" in f["files"] or f["compares"]:
            try:  # validated against compare.schema.json: the pages read every key of it
                v.compare = store.read_compare(name)
            except (StoreError, ValueError, OSError) as e:
                v.compare_error = _error_text(e)
        for run_id in sorted(f["runs"]):
            run = RunView(run_id=run_id)
            try:  # read_run checks created_at and that every row is an object with a name
                doc = store.read_run(name, run_id)
                run.created_at = str(doc.get("created_at"))
                run.rows = stored_rows(doc)
            except (StoreError, ValueError, OSError) as e:
                run.error = _error_text(e)
            v.runs.append(run)
        views.append(v)

    views.sort(key=lambda v: history_order(v.name, v.created_at, [r.run_id for r in v.runs]))
    views = order_by_step(views)
    for name, cmp in step_comparisons(store, views).items():  # a step swept in between
        v = next(v for v in views if v.name == name)
        v.compare = cmp
    return views


# ---- numbers, as the CLI prints them ------------------------------------------------------------


def number(x: Any) -> float | None:
    """``x`` as a float when it is a finite int or float (not a bool), else None."""
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def fmt_value(x: Any) -> str:
    """``0.1234`` (4 decimals, like ``tinyllm history``); ``-`` for none."""
    return format_number(number(x))


def fmt_interval(lo: Any, hi: Any, signed: bool = False) -> str:
    """``[0.1200, 0.1300]``; ``-`` when either end is missing."""
    lo, hi = number(lo), number(hi)
    if lo is None or hi is None:
        return "-"
    return f"[{format_number(lo, signed)}, {format_number(hi, signed)}]"


def fmt_delta(r: ComparisonRow | None) -> str:
    """``+0.0721 [+0.0650, +0.0790]`` (delta and its interval, like ``tinyllm compare``)."""
    if r is None or number(r.delta) is None:
        return "-"
    return f"{format_number(r.delta, True)} {fmt_interval(r.lo, r.hi, True)}"


def fmt_p(p: Any) -> str:
    """A p-value as ``tinyllm compare`` prints it; ``-`` for none."""
    return format_p(number(p))


def fmt_mde(x: Any) -> str:
    """A minimum detectable difference as ``tinyllm compare`` prints it, ``±0.0123``; ``-``."""
    return mde_text(number(x))


def could_see(r: ComparisonRow | None) -> str:
    """What an "unchanged" comparison row could have seen: ``(could see ±0.0123)``, its minimum
    detectable difference at 80% power in the metric's units (docs/definitions.md, "The
    detectable difference"); ``""`` for any other row and for comparisons stored without one."""
    if r is None or r.verdict != "unchanged" or number(r.mde) is None:
        return ""
    return f"(could see {mde_text(r.mde)})"


def metric_text(metric: Any) -> str:
    """``bpb ↓`` / ``acc ↑``: the metric and which way is better."""
    if not isinstance(metric, str):
        return "-"
    return metric + metrics.ARROW.get(metrics.DIRECTION.get(metric, ""), "")


def direction_text(metric: Any) -> str:
    """``lower is better`` / ``higher is better``; ``direction unknown`` for another metric."""
    d = metrics.DIRECTION.get(metric) if isinstance(metric, str) else None
    return f"{d} is better" if d else "direction unknown"


def row_reason(row: StoredRow) -> str | None:
    """An error row's ``Type: message``, a skipped row's reason."""
    if row.error is not None:
        return f"{row.error.type}: {row.error.message}"
    if row.reason:
        return row.reason
    return None


def row_verdict(row: StoredRow, cmp_row: ComparisonRow | None, has_compare: bool) -> str:
    """The row's verdict word: its status when not ok, else the comparison's verdict."""
    if row.status in ("error", "skipped"):
        return row.status
    if cmp_row is not None:
        return cmp_row.verdict
    return "no comparison" if not has_compare else "not comparable"


# ---- the rows of the tables ------------------------------------------------------------------


def entry_names(history: list[ReleaseView]) -> list[str]:
    """Every entry in the history: the newest readable release's order, then older ones'."""
    names: list[str] = []
    for v in reversed(history):
        for r in v.rows:
            if r.name not in names:
                names.append(r.name)
    return names


def table_rows(v: ReleaseView) -> list[dict]:
    """A release's rows with what the tables show: the row, its verdict, the comparison row."""
    verdicts = v.verdicts()
    out = []
    for r in v.rows:
        c = verdicts.get(r.name)
        verdict = row_verdict(r, c, v.compare is not None)
        out.append(
            {
                "row": r,
                "cmp": c,
                "verdict": verdict,
                "reason": row_reason(r),
            }
        )
    return out


def summary(v: ReleaseView) -> dict[str, int]:
    """How many of the release's rows have each verdict."""
    counts: dict[str, int] = {}
    for t in table_rows(v):
        counts[t["verdict"]] = counts.get(t["verdict"], 0) + 1
    return counts
