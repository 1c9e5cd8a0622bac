"""The dashboard site: every page rendered from the store's history (Jinja2 templates in
``tinyllm/templates/``, autoescaped), written to a local folder or published under
``dashboard/`` in the store."""

from __future__ import annotations

import datetime as _dt
import functools
import os
from pathlib import Path
from typing import Any

from tinyllm import safeio
from tinyllm.dashboard.plots import entry_series, overview_svg, trend_svg
from tinyllm.dashboard.views import (
    SAFE_NAME,
    VERDICT_CLASS,
    ReleaseView,
    could_see,
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
    summary,
    table_rows,
)
from tinyllm.store import LocalStore, Store

SITE_PREFIX = "dashboard"
"""Where the site lives inside a store: ``<store>/dashboard/index.html`` beside ``releases/``."""

CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8"}


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
        could_see=could_see,
        mde=fmt_mde,
        metric=metric_text,
        reason=row_reason,
        vclass=lambda v: VERDICT_CLASS.get(v, "v-none"),
    )
    return env


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
    entries = entry_names(history)
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
            rows=table_rows(v),
            compare_rows=[] if v.compare is None else v.compare.rows,
            compare_json=v.compare_json(),
        )
    for e in entries:
        hist = []
        errors = []
        for v in history:
            row = next((r for r in v.rows if r.name == e), None)
            c = v.verdicts().get(e)
            verdict = row_verdict(row, c, v.compare is not None) if row else None
            hist.append(
                {
                    "v": v,
                    "row": row,
                    "cmp": c,
                    "verdict": verdict,
                }
            )
            seen = set()
            for run in v.runs:
                for r in run.rows:
                    if r.name == e and r.status in ("error", "skipped"):
                        text = row_reason(r)
                        seen.add(text)
                        errors.append({"v": v, "where": f"run {run.run_id}", "text": text})
            if row is not None and row.status in ("error", "skipped"):
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
        rows=table_rows(latest) if latest else [],
        overview_svg=_overview(latest),
        summaries={v.name: summary(v) for v in history},
        history=list(reversed(history)),
    )
    return files


def _overview(latest: ReleaseView | None) -> Any:
    svg = overview_svg(latest.rows) if latest else None
    return None if svg is None else _markup(svg)


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
        if any(not SAFE_NAME.match(p) for p in parts):
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
