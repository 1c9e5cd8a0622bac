"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright.

The store (tests/test_dashboard.py's build_store) has 3 releases, a regression planted in r3
(gpt), an error row whose message carries ``"><img src=x onerror=...>`` and ``<script>`` (clf in
r3), a rerun of one entry (gpt in r2) and a family that is a ``<script>`` (weird, skipped).

Skipped only when no Chromium can be found at all; `make test` (and so CI) installs Debian's
``chromium`` when it is missing. Screenshots of the overview and trends pages go to
``$TINYLLM_ARTIFACTS/dashboard/`` (default: ``<tmp>/tinyllm-artifacts/dashboard/``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from test_dashboard import ERROR_MESSAGE, SCRIPT_FAMILY, build_single_release_store, build_store

from tinyllm import dashboard
from tinyllm.report import BaselineInfo

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LAPTOP = {"width": 1366, "height": 800}
PHONE = {"width": 390, "height": 844}
REGRESSED_BG = "rgb(253, 226, 223)"  # --reg in templates/style.css


def _chromium() -> str | None:
    for candidate in (os.environ.get("TINYLLM_CHROMIUM"), "/usr/bin/chromium"):
        if candidate and Path(candidate).is_file():
            return candidate
    return shutil.which("chromium") or shutil.which("chromium-browser")


CHROMIUM = _chromium()
if CHROMIUM is None and os.environ.get("TINYLLM_REQUIRE_BROWSER"):  # CI: never skip silently
    raise RuntimeError(
        "TINYLLM_REQUIRE_BROWSER is set but no Chromium was found at /usr/bin/chromium, "
        "$TINYLLM_CHROMIUM or on PATH; expected `make test` to have installed Debian's chromium"
    )
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium found (/usr/bin/chromium, TINYLLM_CHROMIUM or PATH); `make test` installs "
    "Debian's chromium when run as root: apt-get install -y chromium",
)


def artifacts_dir() -> Path:
    root = Path(
        os.environ.get("TINYLLM_ARTIFACTS") or Path(tempfile.gettempdir()) / "tinyllm-artifacts"
    )
    folder = root / "dashboard"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Watched:
    """A page with every console error, page error, dialog and request recorded."""

    def __init__(self, browser, viewport: dict) -> None:
        self.context = browser.new_context(viewport=viewport)
        self.page = self.context.new_page()
        self.console_errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page.on(
            "console",
            lambda m: (
                self.console_errors.append(m.text) if m.type in ("error", "warning") else None
            ),
        )
        self.page.on("pageerror", lambda e: self.console_errors.append(f"pageerror: {e}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))

    def open(self, url: str) -> None:
        self.page.goto(url, wait_until="load")

    def check_clean(self, site_root: str) -> None:
        assert self.console_errors == []
        assert self.dialogs == []
        assert any(u.startswith(site_root) for u in self.requests)  # the listener sees pages
        outside = [u for u in self.requests if not u.startswith(site_root)]
        assert outside == [], f"requests outside the site {site_root}: {outside}"
        # the planted markup never ran and never became elements
        assert self.page.evaluate("typeof window.__pwned") == "undefined"
        assert self.page.locator("img").count() == 0
        assert self.page.locator("script").count() == 0

    def no_horizontal_scroll(self) -> None:
        sw, iw = self.page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert sw <= iw, f"{self.page.url}: scrollWidth {sw} > viewport {iw}"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("dash")
    st = build_store(root / "store")
    out = root / "site"
    dashboard.write_site(dashboard.build_site(st), out)
    return out


def test_overview_and_trends_in_chromium(browser, site):
    root = site.resolve().as_uri() + "/"
    w = Watched(browser, LAPTOP)
    w.open(root + "index.html")
    page = w.page
    # the regressed row has the regressed style: its class and the computed colours
    gpt = page.locator('tr.row[data-entry="gpt"]')
    assert "v-regressed" in gpt.get_attribute("class")
    assert gpt.locator("td").first.evaluate("e => getComputedStyle(e).backgroundColor") == (
        REGRESSED_BG
    )
    bigram = page.locator('tr.row[data-entry="bigram"]')
    assert bigram.locator("td").first.evaluate("e => getComputedStyle(e).backgroundColor") != (
        REGRESSED_BG
    )
    assert gpt.locator(".badge").inner_text() == "regressed"
    # the error row's message is visible, as text, planted markup and all
    msg = page.locator('tr.reason[data-entry="clf"] .message')
    assert msg.is_visible()
    assert msg.inner_text() == f"CheckpointError: {ERROR_MESSAGE}"
    skipped = page.locator('tr.row[data-entry="weird"] td[data-label="family"]')
    assert skipped.inner_text() == SCRIPT_FAMILY
    # the plot of every row: one panel per metric, the skipped row (no metric) left out
    assert page.locator("#overview-plot").is_visible()
    bpb = page.locator("#ov-bpb-points use")
    assert bpb.count() == 2  # bigram, gpt: in the report's order, top to bottom
    assert page.locator("#ov-spearman-points use").count() == 1
    assert page.locator("#ov-acc-errors use").count() == 1  # clf errored in r3
    assert page.locator("#ov-acc-points").count() == 0
    assert page.locator('[id$="-baselines"]').count() == 0  # no row carries a baseline
    # gpt's bpb (3.01) is drawn right of bigram's (2.80), below it
    (b_box, g_box) = (bpb.nth(0).bounding_box(), bpb.nth(1).bounding_box())
    assert g_box["x"] > b_box["x"] and g_box["y"] > b_box["y"]
    page.screenshot(path=str(artifacts_dir() / "overview.png"), full_page=True)
    w.check_clean(root)

    w.open(root + "trends.html")
    points = page.locator("#t-gpt-points use")
    assert points.count() == 3
    assert page.locator("#t-gpt-points").is_visible()
    assert page.locator("#t-gpt-regressed use").count() == 1
    # the three points are drawn at three distinct x positions, left to right
    xs = [points.nth(i).bounding_box()["x"] for i in range(3)]
    assert xs == sorted(xs) and len(set(xs)) == 3
    assert page.locator("#t-clf-points use").count() == 2
    assert page.locator("#t-clf-errors use").count() == 1
    page.screenshot(path=str(artifacts_dir() / "trends.png"), full_page=True)
    w.check_clean(root)
    w.context.close()


def test_one_release_labels_its_axes_once_and_the_overview_marks_baselines(browser, tmp_path):
    st = build_single_release_store(tmp_path / "store")
    history = dashboard.load_history(st)
    # a trivial baseline on two rows (bpb of a unigram model: above both models' values)
    base = BaselineInfo(name="unigram", value=3.6, interval=None, items=None)
    latest = history[-1]
    rows = [
        r.model_copy(update={"baseline": base}) if r.name in ("bigram", "gpt") else r
        for r in latest.report.rows
    ]
    latest.report = latest.report.model_copy(update={"rows": rows})
    out = tmp_path / "site"
    dashboard.write_site(dashboard.build_site(st, history=history), out)
    root = out.resolve().as_uri() + "/"
    w = Watched(browser, LAPTOP)
    w.open(root + "trends.html")
    for e in ("bigram", "gpt", "clf", "w2v", "weird"):
        ticks = w.page.locator(f'[id="t-{e}-matplotlib.axis_1"] text')
        assert ticks.all_text_contents() == ["r1"], e  # one release: one label, not five
    w.check_clean(root)
    w.open(root + "index.html")
    points = w.page.locator("#ov-bpb-points use")
    bases = w.page.locator("#ov-bpb-baselines use")
    assert points.count() == 2 and bases.count() == 2
    for i in range(2):  # each baseline on its row, right of the row's value (3.6 > 2.9)
        p, b = points.nth(i).bounding_box(), bases.nth(i).bounding_box()
        assert b["x"] > p["x"] + p["width"]
        assert abs((b["y"] + b["height"] / 2) - (p["y"] + p["height"] / 2)) < 1.0
    assert w.page.locator("#ov-acc-baselines").count() == 0  # clf has none
    w.no_horizontal_scroll()
    w.check_clean(root)
    w.context.close()


def test_every_page_on_a_phone_and_a_laptop_is_clean_and_never_scrolls_sideways(browser, site):
    root = site.resolve().as_uri() + "/"
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    assert len(pages) == 2 + 3 + 5
    for viewport in (PHONE, LAPTOP):
        w = Watched(browser, viewport)
        for rel in pages:
            w.open(root + rel)
            w.no_horizontal_scroll()
            w.check_clean(root)
            # every page says which store and when it was built
            assert w.page.locator("header .meta code.store").inner_text().endswith("store")
            assert w.page.locator("header .meta time.built").inner_text().endswith("UTC")
        w.context.close()


def test_links_between_pages_work_from_file_urls(browser, site):
    root = site.resolve().as_uri() + "/"
    w = Watched(browser, LAPTOP)
    w.open(root + "index.html")
    w.page.locator('tr.row[data-entry="gpt"] td.name a').click()
    w.page.wait_for_load_state("load")
    assert w.page.url == root + "entry/gpt.html"
    assert "OSError: connection reset by peer" in w.page.locator("table.errors").inner_text()
    w.page.locator('table.entry-history a[href="../release/r2.html"]').click()
    w.page.wait_for_load_state("load")
    assert w.page.url == root + "release/r2.html"
    assert w.page.locator("table.runs tbody tr").count() == 2  # the rerun is visible
    w.page.locator("header nav a", has_text="trends").click()
    w.page.wait_for_load_state("load")
    assert w.page.url == root + "trends.html"
    w.check_clean(root)
    w.context.close()


def test_served_over_http_needs_nothing_but_its_own_files(browser, site):
    server = dashboard.serve(site, 0, block=False)
    try:
        root = f"http://127.0.0.1:{server.server_address[1]}/"
        w = Watched(browser, LAPTOP)
        for rel in ("index.html", "trends.html", "release/r3.html", "entry/clf.html"):
            w.open(root + rel)
            w.check_clean(root)
        assert (
            w.page.locator("table.errors .message")
            .first.inner_text()
            .startswith("CheckpointError: checkpoint truncated")
        )
        w.context.close()
    finally:
        server.shutdown()
        server.server_close()


def test_unreadable_and_hostile_release_folders_in_chromium(browser, tmp_path):
    st = build_store(tmp_path / "store")
    releases = tmp_path / "store" / "releases"
    (releases / "r4").mkdir()
    (releases / "r4" / "report.json").write_text('{"rows": [')
    hostile = '"><img src=x onerror=window.__pwned=9>'
    (releases / hostile).mkdir()
    (releases / hostile / "report.json").write_text("{}")
    out = tmp_path / "site"
    dashboard.write_site(dashboard.build_site(st), out)
    root = out.resolve().as_uri() + "/"
    w = Watched(browser, PHONE)
    w.open(root + "index.html")
    history = w.page.locator("section.history").inner_text()
    assert hostile in history  # shown as text
    assert "unreadable" in history and "malformed report" in history
    assert w.page.locator('tr.row[data-entry="gpt"]').count() == 1  # r3 still shown
    w.no_horizontal_scroll()
    w.check_clean(root)
    w.open(root + "trends.html")  # the hostile name is an x tick label in every plot
    assert w.page.locator("#t-gpt-points use").count() == 3
    w.check_clean(root)
    w.context.close()
