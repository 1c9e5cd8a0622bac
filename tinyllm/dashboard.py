"""The dashboard of run history: a static site rendered from the report store.

::

    files = build_site(open_store("./evalstore"))      # {"index.html": b"...", ...}
    write_site(files, "site/")                          # a local folder, or
    publish_site(store)                                 # <store>/dashboard/ beside releases/

Pages (every one says which store it was built from and when):

* ``index.html`` -- the overview: the newest readable release's rows (entry, family, kind, metric
  with its direction, value and 95% interval, n, status), each row coloured by its verdict against
  the previous release (improved / regressed / unchanged / not comparable / added / error /
  skipped) with delta, its interval and p from the stored ``compare.json``; error and skipped rows
  with their reason; then every release in the store, newest first, unreadable ones included.
* ``trends.html`` -- one small plot per entry over every release, in history order: the value as
  a line with its 95% interval as a band, regressions ringed in red, error releases as red crosses
  on the x axis, the metric's direction in the title.
* ``release/<release>.html`` -- its rows, its runs (every ``runs/<run-id>.json`` with the entries
  it scored, so a rerun of one entry is visible), its ``compare.json`` as a table and in full.
* ``entry/<entry>.html`` -- the entry's plot, its history table and its error messages over time
  (from the reports AND the runs, so an error later replaced by a rerun still shows).

Built from what the store holds: a release whose ``report.json`` is missing or corrupt is listed as
"unreadable" with the reason and the rest of the site is built; a corrupt ``compare.json`` or run
file is shown the same way on its release's page. The site is written under ``dashboard/`` (or a
folder of the caller's); nothing under ``releases/`` is ever written.

Safety: every name, message and JSON text goes through Jinja2's autoescape (templates in
``tinyllm/templates/``), matplotlib escapes the text it writes into SVG (and math text is off, so
a ``$`` in a name is just a dollar sign), and each page carries a Content-Security-Policy of
``default-src 'none'`` (inline styles and data: images allowed): the pages need no script and load
nothing, so even a planted ``<script>`` that slipped past escaping could not run or call out.

Why matplotlib SVG (measured with ``python bench/bench_dashboard.py --weights``, 12 entries;
the table is in docs/benchmarks.md): the trends page with 12 inline matplotlib SVGs weighs
117 kB for 3 releases and 229 kB for 200 (text kept as ``<text>``, path coordinates rounded to
0.1 pt, no per-release markers past 60 releases), with no JavaScript at all. The same page as
Vega-Lite through altair with vega, vega-lite and vega-embed inlined weighs 887 kB for 3
releases and 1138 kB for 200 (the three libraries come with every page, before any data), and
plotly with plotly.js inlined 4793 kB and 4968 kB. Both also run JavaScript on every page: one
more thing that can fail in the browser, that a ``script-src 'none'`` policy would have to allow,
and that every release and entry page would inline again (or load from a shared file). Inline
SVG needs no script, renders from ``file://`` and any static host, prints, scales with the page
(``viewBox``), and its points are plain SVG elements the browser test can count. What it gives
up is interactivity (hover values); the entry page's table has every number instead.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import http.server
import io
import json
import math
import os
import re
import socketserver
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tinyllm import metrics, safeio
from tinyllm.compare import format_number, format_p
from tinyllm.store import LocalStore, Store, StoreError, history_order, parse_created_at

SITE_PREFIX = "dashboard"
"""Where the site lives inside a store: ``<store>/dashboard/index.html`` beside ``releases/``."""

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8"}

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
    """One ``runs/<run-id>.json``: when it ran and which entries it scored, or why unreadable."""

    run_id: str
    created_at: str | None = None
    rows: list[dict] = field(default_factory=list)
    error: str | None = None


@dataclass
class ReleaseView:
    """One release folder under ``releases/``, readable or not."""

    name: str
    slug: str
    report: dict | None = None
    error: str | None = None  # why the report is unreadable, or that there is none
    has_report_file: bool = False  # a report.json is there (readable or not)
    created_at: _dt.datetime | None = None
    compare: dict | None = None
    compare_error: str | None = None
    runs: list[RunView] = field(default_factory=list)
    _verdicts: dict[str, dict] | None = field(default=None, repr=False)

    @property
    def rows(self) -> list[dict]:
        return list(self.report["rows"]) if self.report else []

    def verdicts(self) -> dict[str, dict]:
        """Entry name -> its compare.json row (empty when there is no readable comparison)."""
        if self._verdicts is None:
            rows = self.compare.get("rows") if self.compare else None
            rows = rows if isinstance(rows, list) else []
            self._verdicts = {r["name"]: r for r in rows if isinstance(r, dict) and "name" in r}
        return self._verdicts


def slug(name: str) -> str:
    """A file name for a release or entry page: the name itself when it is a valid store key
    segment (``[A-Za-z0-9][A-Za-z0-9._-]*``), else ``x-`` + 12 hex of its sha256."""
    if _SAFE.match(name) and not name.startswith("x-"):
        return name
    return "x-" + hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def load_history(store: Store) -> list[ReleaseView]:
    """Every release folder under ``releases/``, in history order, each read as far as it can be.

    The order is the store's (:func:`tinyllm.store.history_order`): readable releases by
    ``created_at`` then name; unreadable ones by the time in their first run id when it has
    one, else after all the others (by name). Nothing raises for a bad file: the reason is kept
    on the view.
    """
    folders: dict[str, dict[str, list[str]]] = {}
    for key in store.list("releases/"):
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
                v.report = store.read_report(name)
                v.created_at = parse_created_at(v.report["created_at"], store.where(name))
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
                run.rows = [_norm(r, ("name", "status")) for r in doc["rows"]]
            except (StoreError, ValueError, OSError) as e:
                run.error = _error_text(e)
            v.runs.append(run)
        views.append(v)

    views.sort(key=lambda v: history_order(v.name, v.created_at, [r.run_id for r in v.runs]))
    return views


# ---- numbers, as the CLI prints them ------------------------------------------------------------


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def fmt_value(x: Any) -> str:
    """``0.1234`` (4 decimals, like ``tinyllm history``); ``-`` for none."""
    return format_number(_num(x))


def fmt_interval(lo: Any, hi: Any, signed: bool = False) -> str:
    """``[0.1200, 0.1300]``; ``-`` when either end is missing."""
    lo, hi = _num(lo), _num(hi)
    if lo is None or hi is None:
        return "-"
    return f"[{format_number(lo, signed)}, {format_number(hi, signed)}]"


def fmt_delta(r: dict | None) -> str:
    """``+0.0721 [+0.0650, +0.0790]`` (delta and its interval, like ``tinyllm compare``)."""
    if not r or _num(r.get("delta")) is None:
        return "-"
    return f"{format_number(r['delta'], True)} {fmt_interval(r.get('lo'), r.get('hi'), True)}"


def fmt_p(p: Any) -> str:
    return format_p(_num(p))


def metric_text(metric: Any) -> str:
    """``bpb ↓`` / ``acc ↑``: the metric and which way is better."""
    if not isinstance(metric, str):
        return "-"
    return metric + metrics.ARROW.get(metrics.DIRECTION.get(metric, ""), "")


def direction_text(metric: Any) -> str:
    d = metrics.DIRECTION.get(metric) if isinstance(metric, str) else None
    return f"{d} is better" if d else "direction unknown"


def row_reason(row: dict) -> str | None:
    """An error row's ``Type: message``, a skipped row's reason."""
    err = row.get("error")
    if isinstance(err, dict):
        return f"{err.get('type', 'Error')}: {err.get('message', '')}"
    if row.get("reason"):
        return str(row["reason"])
    return None


def row_verdict(row: dict, cmp_row: dict | None, has_compare: bool) -> str:
    """The row's verdict word: its status when not ok, else the comparison's verdict."""
    status = row.get("status")
    if status in ("error", "skipped"):
        return status
    if cmp_row is not None and cmp_row.get("verdict") in VERDICT_CLASS:
        return cmp_row["verdict"]
    return "no comparison" if not has_compare else "not comparable"


# ---- plots --------------------------------------------------------------------------------------


@dataclass
class Series:
    """One entry's values over the history: one slot per release (None where there is none)."""

    entry: str
    metric: str | None
    releases: list[str]
    value: list[float | None]
    lo: list[float | None]
    hi: list[float | None]
    regressed: list[bool]
    error: list[bool]


def entry_series(entry: str, history: list[ReleaseView]) -> Series:
    """The values of ``entry`` in every release, in history order."""
    s = Series(entry, None, [], [], [], [], [], [])
    for v in history:
        row = next((r for r in v.rows if r.get("name") == entry), None)
        ok = row is not None and row.get("status") == "ok" and _num(row.get("value")) is not None
        s.releases.append(v.name)
        s.value.append(_num(row.get("value")) if ok else None)
        s.lo.append(_num(row.get("lo")) if ok else None)
        s.hi.append(_num(row.get("hi")) if ok else None)
        s.regressed.append(ok and v.verdicts().get(entry, {}).get("verdict") == "regressed")
        s.error.append(row is not None and row.get("status") == "error")
        if row is not None and isinstance(row.get("metric"), str):
            s.metric = row["metric"]
    return s


@functools.cache
def _mpl() -> Any:
    import matplotlib  # imported here: only the plots need it, and it costs start-up time

    matplotlib.use("svg", force=False)  # no GUI backend is ever needed
    return matplotlib


_RC = {
    "svg.fonttype": "none",  # text as <text>, not glyph paths: 3-4x smaller, selectable
    "text.parse_math": False,  # a '$' in a release name is a dollar sign, not math
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.image_inline": True,
}


MARKERS_UP_TO = 60
"""Plots of at most this many releases draw a marker per release (the ``-points`` group)."""
_ROUND = re.compile(r"(\d\.\d)\d+")


def trend_svg(s: Series, width_in: float = 4.2, height_in: float = 2.3) -> str:
    """An SVG plot of one entry over the history: value line, 95% band, regressions, errors.

    Element ids are salted with the entry's name so that many plots inline in one page never
    share a clip path id; the groups ``<slug>-points``, ``<slug>-band``, ``<slug>-regressed`` and
    ``<slug>-errors`` hold the markers (one ``<use>`` per drawn point).
    """
    mpl = _mpl()
    # imported here, after _mpl() has chosen the svg backend
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    gid = "t-" + slug(s.entry)
    n = len(s.releases)
    x = np.arange(n, dtype=float)
    nan = float("nan")
    y = np.array([nan if v is None else v for v in s.value])
    lo = np.array([nan if v is None else v for v in s.lo])
    hi = np.array([nan if v is None else v for v in s.hi])
    ok = np.isfinite(y) & np.isfinite(lo) & np.isfinite(hi)
    with mpl.rc_context({**_RC, "svg.hashsalt": gid}):
        # fixed margins: constrained layout measured every text twice (40% of the plot time)
        fig = Figure(figsize=(width_in, height_in))
        fig.subplots_adjust(left=0.15, right=0.98, bottom=0.2, top=0.88)
        FigureCanvasSVG(fig)
        ax = fig.add_subplot()
        band = ax.fill_between(x, lo, hi, where=ok, color="#4c78a8", alpha=0.25, lw=0)
        band.set_gid(f"{gid}-band")
        # a value with no scored neighbour has no band to speak of: draw its interval as a bar
        before = np.concatenate([[False], ok[:-1]])
        after = np.concatenate([ok[1:], [False]])
        alone = ok & ~before & ~after
        if alone.any():
            ax.vlines(x[alone], lo[alone], hi[alone], color="#4c78a8", lw=1.5)
        # NaN where there is no value: the line breaks at an error instead of bridging it
        (line,) = ax.plot(x, np.where(ok, y, nan), "-", color="#4c78a8", lw=1.2)
        line.set_gid(f"{gid}-line")
        if n <= MARKERS_UP_TO:  # one dot per release; past that the line alone is clearer
            (pts,) = ax.plot(x[ok], y[ok], "o", color="#1f4e79", ms=4, ls="none")
            pts.set_gid(f"{gid}-points")
        reg = np.array(s.regressed, dtype=bool) & ok
        if reg.any():
            (r,) = ax.plot(x[reg], y[reg], "o", ms=9, mfc="none", mec="#c0392b", mew=1.8)
            r.set_gid(f"{gid}-regressed")
        err = np.array(s.error, dtype=bool)
        if err.any():
            # error releases: a cross on the x axis (axes coordinates in y, data in x)
            (e,) = ax.plot(
                x[err],
                np.zeros(int(err.sum())),
                "x",
                color="#c0392b",
                ms=6,
                mew=1.5,
                transform=ax.get_xaxis_transform(),
                clip_on=False,
            )
            e.set_gid(f"{gid}-errors")
        ax.set_xlim(-0.5, max(n - 0.5, 0.5))
        if not ok.any():
            ax.text(0.5, 0.5, "no scored value", transform=ax.transAxes, ha="center", va="center")
            ax.set_yticks([])
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))

        def label(v: float, _pos: int) -> str:
            i = int(round(v))
            if 0 <= i < n:
                name = s.releases[i]
                return name if len(name) <= 14 else name[:6] + "…" + name[-7:]
            return ""

        ax.xaxis.set_major_formatter(FuncFormatter(label))
        ax.tick_params(axis="x", labelsize=7, labelrotation=20)
        ax.grid(axis="y", color="#dddddd", lw=0.6)
        ax.set_title(
            f"{s.entry} · {metric_text(s.metric)} ({direction_text(s.metric)})", loc="left"
        )
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    # drop the XML prolog and DOCTYPE: the SVG goes inline into HTML
    svg = svg[svg.index("<svg") :]
    # matplotlib numbers its groups per figure (figure_1, axes_1, line2d_3...): prefix every id
    # and every reference to one with the plot's own, so many plots share a page without clashes
    own = gid + "-"

    def prefix(m: re.Match) -> str:
        name = m.group(2)
        return m.group(0) if name.startswith(own) else f"{m.group(1)}{own}{name}{m.group(3)}"

    svg = re.sub(r'(\bid=")([^"]+)(")', prefix, svg)
    svg = re.sub(r'(href="#)([^"]+)(")', prefix, svg)
    svg = re.sub(r"(url\(#)([^)]+)(\))", prefix, svg)
    # path coordinates to 0.1 pt (matplotlib writes 6 decimals): a third smaller, same picture
    svg = re.sub(r'\bd="[^"]*"', lambda m: _ROUND.sub(r"\1", m.group(0)), svg)
    return svg


# ---- the site -----------------------------------------------------------------------------------


@functools.cache
def _env() -> Any:
    import jinja2  # imported here: only rendering pages needs it

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tinyllm", "templates"),
        autoescape=True,  # every {{ }} is HTML-escaped; only the SVG plots are marked safe
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        value=fmt_value,
        interval=fmt_interval,
        delta=fmt_delta,
        p=fmt_p,
        metric=metric_text,
        reason=row_reason,
        vclass=lambda v: VERDICT_CLASS.get(v, "v-none"),
    )
    return env


def _entry_names(history: list[ReleaseView]) -> list[str]:
    """Every entry in the history: the newest readable release's order, then older ones'."""
    names: list[str] = []
    for v in reversed(history):
        for r in v.rows:
            if isinstance(r.get("name"), str) and r["name"] not in names:
                names.append(r["name"])
    return names


_ROW_KEYS = ("name", "family", "kind", "metric", "value", "lo", "hi", "n", "status")
_CMP_KEYS = ("name", "verdict", "reason", "metric", "previous_value", "current_value")
_CMP_KEYS += ("delta", "lo", "hi", "p", "n")


def _norm(d: dict | None, keys: tuple[str, ...]) -> dict | None:
    """A row with every key the templates read (None where the stored row has none)."""
    if d is None:
        return None
    return {**{k: None for k in keys}, **d}


def _table_rows(v: ReleaseView) -> list[dict]:
    """A release's rows with what the tables show: verdict, its class, the comparison row."""
    verdicts = v.verdicts()
    out = []
    for r in v.rows:
        c = verdicts.get(r.get("name"))
        verdict = row_verdict(r, c, v.compare is not None)
        out.append(
            {
                "row": _norm(r, _ROW_KEYS),
                "cmp": _norm(c, _CMP_KEYS),
                "verdict": verdict,
                "reason": row_reason(r),
            }
        )
    return out


def _summary(v: ReleaseView) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in _table_rows(v):
        counts[t["verdict"]] = counts.get(t["verdict"], 0) + 1
    return counts


def build_site(
    store: Store, *, built_at: _dt.datetime | None = None, history: list[ReleaseView] | None = None
) -> dict[str, bytes]:
    """Render the whole site: ``{relative path: bytes}`` (``index.html``, ``trends.html``,
    ``release/<slug>.html``, ``entry/<slug>.html``). Reads the store, writes nothing."""
    history = load_history(store) if history is None else history
    built = (built_at or _dt.datetime.now(_dt.UTC)).astimezone(_dt.UTC)
    env = _env()
    readable = [v for v in history if v.report is not None]
    latest = readable[-1] if readable else None
    newest = history[-1] if history else None
    entries = _entry_names(history)
    series = {e: entry_series(e, history) for e in entries}
    svgs = {e: _markup(trend_svg(series[e])) for e in entries}
    entry_slugs = {e: slug(e) for e in entries}
    common = {
        "store_uri": store.uri,
        "built_at": built.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "n_releases": len(history),
        "entry_slugs": entry_slugs,
        "release_slugs": {v.name: v.slug for v in history},
        "vclasses": VERDICT_CLASS,
    }
    files: dict[str, bytes] = {}

    def render(path: str, template: str, **ctx: Any) -> None:
        root = "../" * path.count("/")
        html = env.get_template(template).render(root=root, **common, **ctx)
        files[path] = html.encode("utf-8")

    for v in history:
        render(
            f"release/{v.slug}.html",
            "release.html",
            title=f"release {v.name}",
            v=v,
            rows=_table_rows(v),
            compare_rows=[_norm(c, _CMP_KEYS) for c in v.verdicts().values()],
            compare_json=json.dumps(v.compare, indent=2, ensure_ascii=False) if v.compare else None,
        )
    for e in entries:
        hist = []
        errors = []
        for v in history:
            row = next((r for r in v.rows if r.get("name") == e), None)
            c = v.verdicts().get(e)
            verdict = row_verdict(row, c, v.compare is not None) if row else None
            hist.append(
                {
                    "v": v,
                    "row": _norm(row, _ROW_KEYS),
                    "cmp": _norm(c, _CMP_KEYS),
                    "verdict": verdict,
                }
            )
            seen = set()
            for run in v.runs:
                for r in run.rows:
                    if r.get("name") == e and r.get("status") in ("error", "skipped"):
                        text = row_reason(r)
                        seen.add(text)
                        errors.append({"v": v, "where": f"run {run.run_id}", "text": text})
            if row is not None and row.get("status") in ("error", "skipped"):
                text = row_reason(row)
                if text not in seen:
                    errors.append({"v": v, "where": "report.json", "text": text})
        render(
            f"entry/{entry_slugs[e]}.html",
            "entry.html",
            title=f"entry {e}",
            entry=e,
            metric=series[e].metric,
            svg=svgs[e],
            hist=hist,
            errors=errors,
        )
    render("trends.html", "trends.html", title="trends", entries=entries, svgs=svgs, series=series)
    render(
        "index.html",
        "overview.html",
        title="overview",
        latest=latest,
        newest=newest,
        rows=_table_rows(latest) if latest else [],
        summaries={v.name: _summary(v) for v in history},
        history=list(reversed(history)),
    )
    return files


def _markup(svg: str) -> Any:
    from markupsafe import Markup  # imported here, as jinja2 in _env

    return Markup(svg)  # matplotlib's own SVG writer escapes every text it puts in


def _check_site_paths(files: dict[str, bytes], root: Path) -> list[str]:
    """The site's paths, index last, once every one is known to be writable under ``root``
    without following a link: each name a safe one, every folder on the way a real folder or
    missing, every file a regular file or missing. A planted link is refused here, before
    anything is written (:func:`safeio.write_under` checks again as it writes)."""
    paths = sorted(files, key=lambda p: p == "index.html")  # the index last
    got = safeio.path_kind(root)
    if got not in (None, "a folder"):
        raise safeio.UnsafePathError(f"{root}: expected a folder or a new path, got {got}")
    for path in paths:
        parts = path.split("/")
        if any(not _SAFE.match(p) for p in parts):
            raise ValueError(f"site file: expected a relative path of safe names, got {path!r}")
        folder = root
        for part in parts[:-1]:
            folder = folder / part
            got = safeio.path_kind(folder)
            if got is None:
                break  # created by write_under; nothing below it exists yet
            if got != "a folder":
                raise safeio.UnsafePathError(f"{folder}: expected a folder, got {got}")
        else:
            safeio.check_target(folder / parts[-1], "site file")
    return paths


def write_site(files: dict[str, bytes], out: str | os.PathLike[str]) -> Path:
    """Write the site into the local folder ``out``; return the path of its index.html.

    Every file goes through :func:`safeio.write_under`: every folder under ``out`` is a real
    folder and the file a regular file or a new name, so a planted symlink (a folder or a page)
    is refused, never written through; all paths are checked before the first file is written.
    Each file goes to a fresh temporary name in its folder and is moved into place, so a browser
    never reads half a page; the index goes last, so its links point at pages that exist. No
    fsync: the site is derived data, rebuilt by the next publish.
    """
    root = Path(out)
    for path in _check_site_paths(files, root):
        safeio.write_under(root, path, files[path], fsync=False)
    return root / "index.html"


def publish_site(store: Store, files: dict[str, bytes] | None = None) -> str:
    """Build the site (unless ``files`` is given) and write it under ``dashboard/`` in the store,
    beside ``releases/``; return where its index is (``<store>/dashboard/index.html``).

    Every key written starts with ``dashboard/``: the releases are only ever read.
    """
    files = build_site(store) if files is None else files
    if isinstance(store, LocalStore):  # the same files as below, without an fsync per page
        write_site(files, store.root / SITE_PREFIX)
        return store.where(f"{SITE_PREFIX}/index.html")
    for path in sorted(files, key=lambda p: p == "index.html"):  # the index last
        key = f"{SITE_PREFIX}/{path}"
        assert key.startswith(f"{SITE_PREFIX}/") and ".." not in key.split("/")
        ctype = CONTENT_TYPES.get(Path(path).suffix, "application/octet-stream")
        store.write_site_file(key, files[path], ctype)
    return store.where(f"{SITE_PREFIX}/index.html")


def site_location(store: Store) -> str:
    """Where the store's dashboard index is: a ``file://`` URI for a local store, else the
    ``s3://`` key (served by the bucket's static website hosting, when it has one)."""
    if isinstance(store, LocalStore):
        return (store.root / SITE_PREFIX / "index.html").resolve().as_uri()
    return store.where(f"{SITE_PREFIX}/index.html")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass


def bind(folder: str | os.PathLike[str], port: int) -> socketserver.ThreadingTCPServer:
    """A server for ``folder`` bound to 127.0.0.1:PORT (0: a free port) but not yet serving;
    ``server.server_address[1]`` is the port it is bound to. Call ``serve_forever()``."""
    handler = functools.partial(_QuietHandler, directory=os.fspath(folder))
    server = socketserver.ThreadingTCPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    return server


def serve(folder: str | os.PathLike[str], port: int, *, block: bool = True) -> Any:
    """Serve ``folder`` on http://127.0.0.1:PORT/ with the standard library's http.server.

    ``block=False`` starts it on a daemon thread and returns the server (call ``shutdown()``).
    """
    server = bind(folder, port)
    if block:
        with server:
            server.serve_forever()
        return server
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
