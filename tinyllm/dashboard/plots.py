"""The dashboard's plots: inline SVG drawn by matplotlib (no script, any static host).

:func:`trend_svg` draws one entry over the history; :func:`overview_svg` every row of one
release, value and interval beside its baseline, one panel per metric. Element ids are salted
per plot so that many plots share one page without clashing."""

from __future__ import annotations

import functools
import io
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinyllm.dashboard.views import ReleaseView, direction_text, metric_text, number, slug
from tinyllm.history import steps_of
from tinyllm.report import StoredRow


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
    steps: list[int] | None = None
    """The training step of each release when every one is a checkpoint of one run
    (``tinyllm sweep``): the plot's x axis; None: the releases in history order."""


def entry_series(entry: str, history: list[ReleaseView]) -> Series:
    """The values of ``entry`` in every release, in history order (with each release's step
    when every release is a checkpoint of one training run)."""
    s = Series(entry, None, [], [], [], [], [], [], steps_of(history))
    for v in history:
        row = next((r for r in v.rows if r.name == entry), None)
        ok = row is not None and row.status == "ok" and number(row.value) is not None
        s.releases.append(v.name)
        s.value.append(number(row.value) if ok else None)
        s.lo.append(number(row.lo) if ok else None)
        s.hi.append(number(row.hi) if ok else None)
        c = v.verdicts().get(entry)
        s.regressed.append(ok and c is not None and c.verdict == "regressed")
        s.error.append(row is not None and row.status == "error")
        if row is not None and row.metric is not None:
            s.metric = row.metric
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
    x = np.arange(n, dtype=float) if s.steps is None else np.asarray(s.steps, dtype=float)
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
        if s.steps is not None:  # x is the training step: the axis says so, in steps
            _step_axis(ax, x)
        else:
            ax.set_xlim(-0.5, max(n - 0.5, 0.5))
        if not ok.any():
            ax.text(0.5, 0.5, "no scored value", transform=ax.transAxes, ha="center", va="center")
            ax.set_yticks([])
        # min_n_ticks=1: one release has one integer position in view; with the default (2) the
        # locator falls back to fractional steps, and each would be labelled with that release
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True, min_n_ticks=1))

        def label(v: float, _pos: int) -> str:
            i = int(round(v))
            if 0 <= i < n and abs(v - i) < 1e-9:  # a release sits at each integer only
                name = s.releases[i]
                return name if len(name) <= 14 else name[:6] + "…" + name[-7:]
            return ""

        if s.steps is None:
            ax.xaxis.set_major_formatter(FuncFormatter(label))
        ax.tick_params(axis="x", labelsize=7, labelrotation=0 if s.steps is not None else 20)
        ax.grid(axis="y", color="#dddddd", lw=0.6)
        ax.set_title(
            f"{s.entry} · {metric_text(s.metric)} ({direction_text(s.metric)})", loc="left"
        )
        return _inline(fig, gid)  # inside the rc context: it sets how the SVG is written


def _step_axis(ax: Any, x: np.ndarray) -> None:
    """An x axis of training steps: the steps' range with a margin, labelled "training step"."""
    lo, hi = float(x.min()), float(x.max())
    pad = 0.05 * (hi - lo) or 0.5
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_xlabel("training step", fontsize=7, labelpad=1)


def _inline(fig: Any, gid: str) -> str:
    """``fig`` as an SVG element to inline into HTML, every id prefixed with ``gid``."""
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


OVERVIEW_GID = "ov"
"""The id prefix of the overview plot; its groups are ``ov-<metric>-{points,intervals,baselines,
errors}`` (one ``<use>`` per drawn marker)."""


def baseline_value(row: StoredRow) -> float | None:
    """The value of a row's trivial baseline (``row.baseline.value``); None when the row has
    none or it is not finite."""
    return None if row.baseline is None else number(row.baseline.value)


def overview_svg(rows: list[StoredRow], width_in: float = 7.0) -> str | None:
    """An SVG plot of every row of one release, one panel per metric (in the rows' order): per
    row its value (a dot), its 95% interval (a line) and its baseline's value (an orange bar,
    where the row has a baseline); an error row is a red cross at the panel's left edge. Rows
    without a metric (skipped families) are left out; None when no row has one.

    The panels share nothing but the width: each metric keeps its own scale (bpb, accuracy and
    Spearman's rho are not comparable), so within a panel a row's distance from its baseline
    is in that metric's unit. Sizes are fixed in inches (0.22 per row, 0.5 per panel title).
    """
    groups: dict[str, list[StoredRow]] = {}
    for r in rows:
        if r.metric is not None and r.status in ("ok", "error"):
            groups.setdefault(r.metric, []).append(r)
    if not groups:
        return None
    mpl = _mpl()
    # imported here, after _mpl() has chosen the svg backend
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    row_in, title_in, axis_in, left_in = 0.22, 0.5, 0.3, 1.7
    heights = [title_in + row_in * len(g) + axis_in for g in groups.values()]
    total = sum(heights)
    with mpl.rc_context({**_RC, "svg.hashsalt": OVERVIEW_GID}):
        fig = Figure(figsize=(width_in, total))
        FigureCanvasSVG(fig)
        top = total
        for (metric, group), h in zip(groups.items(), heights, strict=True):
            bottom = top - h
            ax = fig.add_axes(
                (
                    left_in / width_in,
                    (bottom + axis_in) / total,
                    1 - (left_in + 0.15) / width_in,
                    row_in * len(group) / total,
                )
            )
            _overview_panel(ax, metric, group)
            top = bottom
        return _inline(fig, OVERVIEW_GID)


def _overview_panel(ax: Any, metric: str, group: list[StoredRow]) -> None:
    """One metric's rows, top to bottom in the rows' order."""
    gid = f"{OVERVIEW_GID}-{slug(metric)}"
    y = np.arange(len(group), dtype=float)
    value = np.array([number(r.value) for r in group], dtype=float)
    lo = np.array([number(r.lo) for r in group], dtype=float)
    hi = np.array([number(r.hi) for r in group], dtype=float)
    base = np.array([baseline_value(r) for r in group], dtype=float)
    ok = np.array([r.status == "ok" for r in group]) & np.isfinite(value)
    ranged = ok & np.isfinite(lo) & np.isfinite(hi)
    if ranged.any():
        bars = ax.hlines(y[ranged], lo[ranged], hi[ranged], color="#4c78a8", lw=2.2)
        bars.set_gid(f"{gid}-intervals")
    if ok.any():
        (pts,) = ax.plot(value[ok], y[ok], "o", color="#1f4e79", ms=4.5, ls="none")
        pts.set_gid(f"{gid}-points")
    has_base = np.isfinite(base)
    if has_base.any():
        (b,) = ax.plot(base[has_base], y[has_base], "|", color="#e67e22", ms=11, mew=2.2)
        b.set_gid(f"{gid}-baselines")
    err = ~ok
    if err.any():
        # x in axes coordinates (the left edge), y in data: the row's own line
        (e,) = ax.plot(
            np.zeros(int(err.sum())),
            y[err],
            "x",
            color="#c0392b",
            ms=6,
            mew=1.5,
            transform=ax.get_yaxis_transform(),
            clip_on=False,
        )
        e.set_gid(f"{gid}-errors")
    xs = np.concatenate([value[ok], lo[ranged], hi[ranged], base[has_base]])
    if xs.size:
        span = float(xs.max() - xs.min()) or max(abs(float(xs.max())), 1.0)
        ax.set_xlim(float(xs.min()) - 0.06 * span, float(xs.max()) + 0.06 * span)
    else:
        ax.set_xticks([])
    ax.set_ylim(len(group) - 0.5, -0.5)  # the first row on top
    names = [r.name for r in group]
    labels = [n if len(n) <= 24 else n[:11] + "…" + n[-12:] for n in names]
    labels = [f"{t} (error)" if not k else t for t, k in zip(labels, ok, strict=True)]
    ax.set_yticks(y, labels)
    ax.tick_params(axis="y", length=0, labelsize=7.5)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", color="#dddddd", lw=0.6)
    ax.set_title(f"{metric_text(metric)} ({direction_text(metric)})", loc="left")
