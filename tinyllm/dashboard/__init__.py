"""The dashboard of run history: a static site rendered from the report store.

Modules: :mod:`~tinyllm.dashboard.views` (the store's history as the pages show it: releases,
runs, rows with their verdicts, numbers formatted as the CLI prints them),
:mod:`~tinyllm.dashboard.plots` (the inline SVG plots), :mod:`~tinyllm.dashboard.site` (the
pages: rendered, written to a folder or published into the store) and
:mod:`~tinyllm.dashboard.serve` (a local http server for a written site).

::

    files = build_site(open_store("./evalstore"))      # {"index.html": b"...", ...}
    write_site(files, "site/")                          # a local folder, or
    publish_site(store)                                 # <store>/dashboard/ beside releases/

Pages (every one says which store it was built from and when):

* ``index.html`` -- the overview: one plot of the newest readable release's rows (one panel per
  metric: each row's value and 95% interval beside its baseline's value, where it has one), then
  its rows (entry, family, kind, metric
  with its direction, value and 95% interval, n, status), each row coloured by its verdict against
  the previous release (improved / regressed / unchanged / not comparable / added / error /
  skipped) with delta, its interval, p and the Holm-adjusted p from the stored ``compare.json``
  (an "unchanged" row with what it could see: ``unchanged (could see ±0.0123)``, its minimum
  detectable difference); error and skipped rows
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

from tinyllm.dashboard.plots import (
    MARKERS_UP_TO,
    OVERVIEW_GID,
    Series,
    baseline_value,
    entry_series,
    overview_svg,
    trend_svg,
)
from tinyllm.dashboard.serve import bind, serve, serve_until_interrupted
from tinyllm.dashboard.site import (
    CONTENT_TYPES,
    SITE_PREFIX,
    build_site,
    publish_site,
    site_location,
    write_site,
)
from tinyllm.dashboard.views import (
    VERDICT_CLASS,
    ReleaseView,
    RunView,
    could_see,
    direction_text,
    entry_names,
    fmt_delta,
    fmt_interval,
    fmt_mde,
    fmt_p,
    fmt_value,
    load_history,
    metric_text,
    row_reason,
    row_verdict,
    slug,
)

__all__ = [
    "CONTENT_TYPES",
    "MARKERS_UP_TO",
    "OVERVIEW_GID",
    "SITE_PREFIX",
    "VERDICT_CLASS",
    "ReleaseView",
    "RunView",
    "Series",
    "baseline_value",
    "bind",
    "build_site",
    "could_see",
    "direction_text",
    "entry_names",
    "entry_series",
    "fmt_delta",
    "fmt_interval",
    "fmt_mde",
    "fmt_p",
    "fmt_value",
    "load_history",
    "metric_text",
    "overview_svg",
    "publish_site",
    "row_reason",
    "row_verdict",
    "serve",
    "serve_until_interrupted",
    "site_location",
    "slug",
    "trend_svg",
    "write_site",
]
