"""The dashboard (tinyllm/dashboard/): a static site of the store's history.

The stores here are written through the store API with reports built by the zoo's own report
builder and comparisons from compare.compare_reports on real per-item scores, so the verdicts
the pages colour are the real ones. tests/test_dashboard_browser.py opens the same site in
headless Chromium.
"""

from __future__ import annotations

import hashlib
import html
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import markupsafe
import numpy as np
import pytest

from tinyllm import dashboard
from tinyllm.compare import compare_reports
from tinyllm.eval import zoo
from tinyllm.publish import merge_report
from tinyllm.store import new_run_id, open_store

SHA = "cd" * 32
PLANTED_IMG = '"><img src=x onerror="window.__pwned=1">'
PLANTED_SCRIPT = "<script>window.__pwned=2</script>"
ERROR_MESSAGE = f"checkpoint truncated at byte 4096 {PLANTED_IMG} {PLANTED_SCRIPT}"
SCRIPT_FAMILY = "<script>window.__pwned=3</script>"

# (name, family, kind, metric): 5 entries of 4 kinds, one with a family that is a planted script
ENTRIES = [
    ("bigram", "bigram", "lm", "bpb"),
    ("gpt", "gpt", "lm", "bpb"),
    ("clf", "classifier", "classifier", "acc"),
    ("w2v", "word2vec", "embeddings", "spearman"),
    ("weird", SCRIPT_FAMILY, None, None),
]
MANIFEST = {
    "suite": "zoo",
    "entries": [{"name": n, "family": f, "checkpoint": n, "data": "d"} for n, f, _, _ in ENTRIES],
}
T0 = datetime(2026, 11, 1, 6, 0, tzinfo=UTC)


def _items(name: str, release_no: int) -> np.ndarray:
    """Per-item scores: fixed per entry; gpt's NLLs rise by 0.08 nats in release 3, clf gets 30
    more items right in release 2, bigram's NLLs get a little zero-mean noise each release."""
    rng = np.random.default_rng(int(hashlib.sha256(name.encode()).hexdigest()[:8], 16))
    if name == "clf":
        a = (rng.random(200) < 0.6).astype(np.float64)
        if release_no >= 2:
            a[np.flatnonzero(a == 0)[:30]] = 1.0  # the planted improvement
        return a
    a = rng.gamma(4.0, 0.5, size=400)
    if name == "gpt" and release_no == 3:
        a = a + 0.08 + np.random.default_rng(7).normal(0.0, 0.2, size=a.size)  # the regression
    if name == "bigram":
        a = a + np.random.default_rng(release_no).normal(0.0, 0.05, size=a.size)  # noise only
    return a


def _row(name: str, family: str, kind, metric, release_no: int, error: str | None = None) -> dict:
    base = {
        "name": name,
        "family": family,
        "kind": kind,
        "metric": metric,
        "value": None,
        "lo": None,
        "hi": None,
        "interval": None,
        "n": None,
        "status": "error",
        "error": None,
        "reason": None,
        "checkpoint_sha256": None,
        "data_sha256": None,
        "seconds": 0.1,
        "items": None,
        "checkpoint": name,
        "data": "d",
        "options": {},
        "details": None,
    }
    if kind is None:
        base.update(status="skipped", reason=f"unknown family {family!r}")
        return base
    if error is not None:
        base.update(error={"type": "CheckpointError", "message": error})
        return base
    if metric == "spearman":
        v = 0.41 + 0.01 * release_no
        base.update(value=v, lo=v - 0.1, hi=v + 0.09, interval="fisher_z", n=353)
    else:
        a = _items(name, release_no)
        if metric == "bpb":
            v, half = a.mean() / np.log(2), 1.96 * a.std(ddof=1) / np.sqrt(a.size) / np.log(2)
            interval = "student_t"
        else:
            v, half, interval = a.mean(), 0.06, "wilson"
        base.update(
            value=float(v),
            lo=float(v - half),
            hi=float(v + half),
            interval=interval,
            n=int(a.size),
            items=f"items/{name}.npy",
        )
    base.update(status="ok", checkpoint_sha256=SHA, data_sha256=SHA)
    return base


def _publish(st, release: str, rows: list[dict], created: datetime, items_of: int) -> None:
    """What the flow's publish step does: items, the run, the merged report, the comparison."""
    for r in rows:
        if r["items"]:
            st.write_items(release, r["name"], _items(r["name"], items_of))
    run = zoo.build_run_report(
        MANIFEST, rows, seed=0, release=release, created_at=created.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    st.write_run(release, new_run_id(created), run)
    old = st.read_report(release) if st.has_report(release) else None
    merged = merge_report(old, run, order=[e["name"] for e in MANIFEST["entries"]])
    st.write_report(release, merged)
    prev = st.previous_release(release)
    if prev is not None:
        cmp = compare_reports(
            st.read_report(prev),
            merged,
            st.items_loader(prev),
            st.items_loader(release),
            n_perm=2000,
            seed=0,
        )
        st.write_compare(release, cmp)


def build_store(root) -> object:
    """3 releases: r3 has gpt regressed and clf in error (the planted message); r2 had gpt fail
    with a transient error and a rerun of gpt alone fixed it; 'weird' is skipped in every release
    (its family is a planted script)."""
    st = open_store(root)
    for no in (1, 2, 3):
        release = f"r{no}"
        created = T0 + timedelta(days=no)
        rows = []
        for name, family, kind, metric in ENTRIES:
            error = None
            if no == 3 and name == "clf":
                error = ERROR_MESSAGE
            if no == 2 and name == "gpt":
                error = "OSError: connection reset by peer (transient)"
            rows.append(_row(name, family, kind, metric, no, error))
        _publish(st, release, rows, created, no)
        if no == 2:  # the rerun of one entry: gpt alone, scored this time
            rerun = [_row("gpt", "gpt", "lm", "bpb", no)]
            _publish(st, release, rerun, created + timedelta(hours=2), no)
    return st


def build_single_release_store(root) -> object:
    """One release, r1, every entry scored ('weird' skipped): no comparison yet."""
    st = open_store(root)
    _publish(st, "r1", [_row(n, f, k, m, 1) for n, f, k, m in ENTRIES], T0, 1)
    return st


def _text(page: bytes) -> str:
    """The visible text of a page, roughly: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page.decode()))


@pytest.fixture
def store(tmp_path):
    return build_store(tmp_path / "store")


BUILT = datetime(2026, 11, 30, 1, 2, 3, tzinfo=UTC)


def test_site_has_every_page_and_says_which_store_and_when(store):
    files = dashboard.build_site(store, built_at=BUILT)
    expected = {"index.html", "trends.html"}
    expected |= {f"release/r{i}.html" for i in (1, 2, 3)}
    expected |= {f"entry/{n}.html" for n, *_ in ENTRIES}
    assert set(files) == expected
    for path, page in files.items():
        text = page.decode()
        assert f'store <code class="store">{html.escape(store.uri)}</code>' in text, path
        assert 'built <time class="built">2026-11-30 01:02:03 UTC</time>' in text, path
        assert "<script" not in text.replace("&lt;script", ""), path  # no script tag anywhere


def test_overview_rows_carry_the_verdicts_of_the_stored_comparison(store):
    page = dashboard.build_site(store, built_at=BUILT)["index.html"].decode()
    # every row of the latest release with its verdict class, from compare.json of r3
    cmp = store.read_compare("r3").by_name()
    assert cmp["gpt"].verdict == "regressed"
    assert cmp["bigram"].verdict == "unchanged"
    verdicts = dict(re.findall(r'data-entry="([^"]+)" data-verdict="([^"]+)"', page))
    assert verdicts == {
        "bigram": "unchanged",
        "gpt": "regressed",
        "clf": "error",
        "w2v": "not comparable",  # Spearman rows have no per-item scores
        "weird": "skipped",
    }
    row = re.search(r'<tr class="row ([^"]+)" data-entry="gpt"', page)
    assert row and row.group(1) == "v-regressed"
    # the numbers as the CLI prints them: value [lo, hi] to 4 decimals, delta and p
    gpt = next(r for r in store.read_report("r3")["rows"] if r["name"] == "gpt")
    assert f"{gpt['value']:.4f}" in page
    assert f"[{gpt['lo']:.4f}, {gpt['hi']:.4f}]" in page
    c = cmp["gpt"]
    assert f"{c.delta:+.4f} [{c.lo:+.4f}, {c.hi:+.4f}]" in page
    noise = np.random.default_rng(7).normal(0.0, 0.2, size=400).mean()
    assert c.delta == pytest.approx((0.08 + noise) / np.log(2), rel=1e-9)  # nats -> bits
    p = f"{c.p:.1e}" if c.p < 1e-3 else f"{c.p:.3f}"
    assert p in page
    assert "bpb ↓" in page and "acc ↑" in page


def test_error_and_skipped_rows_show_their_reason_escaped(store):
    files = dashboard.build_site(store, built_at=BUILT)
    page = files["index.html"].decode()
    # the planted markup is text: escaped once, never raw
    assert str(markupsafe.escape(ERROR_MESSAGE)) in page
    for raw in (PLANTED_IMG, PLANTED_SCRIPT, SCRIPT_FAMILY, "<img"):
        for path, p in files.items():
            assert raw not in p.decode(), (path, raw)
    text = _text(files["index.html"])
    assert f"CheckpointError: {ERROR_MESSAGE}" in text
    assert f"unknown family {SCRIPT_FAMILY!r}" in text


def test_trend_plot_has_one_point_per_scored_release_and_marks_the_regression(store):
    files = dashboard.build_site(store, built_at=BUILT)
    trends = files["trends.html"].decode()

    def group(gid: str) -> str:
        m = re.search(rf'<g id="{gid}">(.*?)</g>\s*</g>|<g id="{gid}">(.*?)</g>', trends, re.S)
        return (m.group(1) or m.group(2)) if m else ""

    assert group("t-gpt-points").count("<use") == 3
    assert group("t-gpt-regressed").count("<use") == 1
    assert group("t-clf-points").count("<use") == 2  # the error release has no point ...
    assert group("t-clf-errors").count("<use") == 1  # ... but a cross on the axis
    assert group("t-w2v-points").count("<use") == 3
    assert "t-bigram-regressed" not in trends
    # the metric's direction is in each plot's title
    assert "gpt · bpb ↓ (lower is better)" in trends
    assert "clf · acc ↑ (higher is better)" in trends
    # many plots inline in one page: no two share an element id
    ids = re.findall(r'\bid="([^"]+)"', trends)
    assert len(ids) == len(set(ids))


def test_release_page_lists_every_run_and_the_comparison_in_full(store):
    files = dashboard.build_site(store, built_at=BUILT)
    page = files["release/r2.html"].decode()
    runs = store.runs("r2")
    assert len(runs) == 2
    for run_id in runs:
        assert f'data-run="{run_id}"' in page
    # the rerun scored gpt alone; the first run scored all five
    rows_of = {
        run_id: re.findall(r'href="../entry/([a-z0-9]+)\.html"', part)
        for run_id, part in re.findall(r'data-run="([^"]+)">(.*?)</tr>', page, re.S)
    }
    assert rows_of[runs[0]] == ["bigram", "gpt", "clf", "w2v", "weird"]
    assert rows_of[runs[1]] == ["gpt"]
    cmp = store.read_compare("r2")
    text = _text(files["release/r2.html"])
    assert f'"n_perm": {cmp.n_perm}' in text  # compare.json in full
    assert '"previous": "r1"' in text


def test_entry_page_shows_errors_over_time_from_runs_and_reports(store):
    files = dashboard.build_site(store, built_at=BUILT)
    gpt = _text(files["entry/gpt.html"])
    # r2's merged report has gpt ok (the rerun fixed it) but the first run's error is history
    assert "OSError: connection reset by peer (transient)" in gpt
    clf = _text(files["entry/clf.html"])
    assert ERROR_MESSAGE in clf
    assert clf.count(ERROR_MESSAGE) == 1  # from the run, not repeated from the report


def test_unreadable_releases_are_shown_with_their_reason_and_the_rest_is_built(store, tmp_path):
    root = tmp_path / "store"
    (root / "releases" / "r4").mkdir()
    (root / "releases" / "r4" / "report.json").write_text("{not json")
    (root / "releases" / "r0-partial" / "items").mkdir(parents=True)
    (root / "releases" / "r0-partial" / "items" / "gpt.npy").write_bytes(b"x")
    (root / "releases" / "r3" / "compare.json").write_text('{"rows": 5}')
    before = {p: p.read_bytes() for p in (root / "releases").rglob("*") if p.is_file()}
    history = dashboard.load_history(store)
    assert [v.name for v in history][:3] == ["r1", "r2", "r3"]
    by_name = {v.name: v for v in history}
    assert by_name["r4"].report is None and "malformed report" in by_name["r4"].error
    assert "no report.json" in by_name["r0-partial"].error
    assert by_name["r3"].compare is None and "expected 'rows'" in by_name["r3"].compare_error
    index = dashboard.publish_site(store)
    site = root / "dashboard"
    assert index == store.where("dashboard/index.html")
    page = (site / "index.html").read_text()
    assert "is <strong>unreadable</strong>" in page  # the newest folder, r4, is unreadable
    assert 'Release <a href="release/r3.html">r3</a>' in page  # r3 still shown
    assert "unreadable" in (site / "release" / "r4.html").read_text()
    assert "compare.json is <strong>unreadable</strong>" in (site / "release/r3.html").read_text()
    assert (site / "trends.html").is_file() and (site / "entry" / "gpt.html").is_file()
    # releases/ untouched, byte for byte, and nothing new in it
    after = {p: p.read_bytes() for p in (root / "releases").rglob("*") if p.is_file()}
    assert after == before


def test_a_release_folder_with_an_unsafe_name_is_escaped_and_gets_a_safe_page(store, tmp_path):
    odd = PLANTED_IMG.replace("/", "")  # a folder name cannot hold '/'
    folder = tmp_path / "store" / "releases" / odd
    folder.mkdir()
    (folder / "report.json").write_text("{}")
    files = dashboard.build_site(store, built_at=BUILT)
    slugs = [p for p in files if p.startswith("release/x-")]
    assert len(slugs) == 1 and re.fullmatch(r"release/x-[0-9a-f]{12}\.html", slugs[0])
    for path, page in files.items():
        assert "<img" not in page.decode(), path
    assert str(markupsafe.escape(odd)) in files["index.html"].decode()


def test_empty_store_builds_a_site_that_says_so(tmp_path):
    files = dashboard.build_site(open_store(tmp_path / "none"), built_at=BUILT)
    assert set(files) == {"index.html", "trends.html"}
    assert "No releases in this store yet" in files["index.html"].decode()


def test_one_release_plots_one_point(tmp_path):
    st = open_store(tmp_path / "s")
    rows = [_row(n, f, k, m, 1) for n, f, k, m in ENTRIES]
    _publish(st, "only", rows, T0, 1)
    trends = dashboard.build_site(st, built_at=BUILT)["trends.html"].decode()
    m = re.search(r'<g id="t-gpt-points">(.*?)</g>', trends, re.S)
    assert m and m.group(1).count("<use") == 1
    assert 'data-verdict="no comparison"' in dashboard.build_site(st)["index.html"].decode()


def test_publish_to_s3_writes_dashboard_keys_with_content_types(s3_env):
    import boto3

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="tl-dash")
    st = open_store("s3://tl-dash/team")
    rows = [_row(n, f, k, m, 1) for n, f, k, m in ENTRIES]
    _publish(st, "r1", rows, T0, 1)
    release_keys = sorted(st.list("releases/"))
    where = dashboard.publish_site(st)
    assert where == "s3://tl-dash/team/dashboard/index.html"
    head = s3.head_object(Bucket="tl-dash", Key="team/dashboard/index.html")
    assert head["ContentType"] == "text/html; charset=utf-8"
    keys = sorted(st.list("dashboard/"))
    assert "dashboard/entry/gpt.html" in keys and "dashboard/release/r1.html" in keys
    assert sorted(st.list("releases/")) == release_keys
    body = s3.get_object(Bucket="tl-dash", Key="team/dashboard/index.html")["Body"].read()
    assert b"s3://tl-dash/team/" in body


def test_site_files_outside_dashboard_are_refused(store):
    from tinyllm.store import StoreError

    with pytest.raises(StoreError, match="expected a key under dashboard/"):
        store.write_site_file("releases/r1/report.json", b"{}", "application/json")


def test_write_site_to_a_folder_and_cli(store, tmp_path):
    from typer.testing import CliRunner

    from tinyllm.cli import app

    out = tmp_path / "site"
    res = CliRunner().invoke(app, ["dashboard", "--store", store.uri, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "index.html").is_file() and (out / "release" / "r3.html").is_file()
    assert str(out / "index.html") in res.output.replace("\n", "")
    assert not (Path(store.uri) / "dashboard").exists()  # --out: the store is only read
    res = CliRunner().invoke(app, ["dashboard", "--store", store.uri])
    assert res.exit_code == 0, res.output
    assert (Path(store.uri) / "dashboard" / "index.html").is_file()
    res = CliRunner().invoke(app, ["dashboard", "--store", "gs://nope"])
    assert res.exit_code == 2 and "expected a local folder or s3://" in res.output


def test_serve_answers_on_localhost(store, tmp_path):
    import urllib.request

    out = tmp_path / "site"
    dashboard.write_site(dashboard.build_site(store), out)
    server = dashboard.serve(out, 0, block=False)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=10) as r:
            assert r.status == 200 and b"Overview" in r.read()
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=60):
        yield


def test_every_eval_suite_run_publishes_the_dashboard_and_links_it(
    prefect_harness, tmp_path, monkeypatch
):
    import yaml
    from prefect.artifacts import Artifact

    from tinyllm.models import bigram
    from tinyllm.tokens import write_tokens
    from tinyllm_suite.eval_suite import COMPARE_ARTIFACT, eval_suite, md_link

    monkeypatch.setenv("TINYLLM_CACHE_DIR", str(tmp_path / "cache"))
    text = np.frombuffer(b"the cat sat on the mat. the dog sat on the log. " * 8, dtype=np.uint8)
    write_tokens(tmp_path / "val.tok", text[:200])
    bigram.save(bigram.train(bigram.Config(k=0.5), text, seed=0), tmp_path / "bigram")
    entries = [
        {"name": "bigram", "family": "bigram", "checkpoint": "bigram", "data": "val.tok"},
        {"name": "broken", "family": "bigram", "checkpoint": "missing", "data": "val.tok"},
    ]
    (tmp_path / "zoo.yaml").write_text(yaml.safe_dump({"suite": "zoo", "entries": entries}))
    store = tmp_path / "store"
    eval_suite(manifest=str(tmp_path / "zoo.yaml"), release="v1", store=str(store))
    out = eval_suite(manifest=str(tmp_path / "zoo.yaml"), release="v2", store=str(store))
    index = store / "dashboard" / "index.html"
    assert out["dashboard"] == index.resolve().as_uri()
    page = index.read_text()
    assert 'href="release/v1.html"' in page and 'href="release/v2.html"' in page
    assert 'data-entry="broken" data-verdict="error"' in page
    assert (store / "dashboard" / "entry" / "bigram.html").is_file()
    md = Artifact.get(COMPARE_ARTIFACT).data
    # the link's text is the address as escaped text (md_text), its target the address itself
    assert md_link(out["dashboard"]) in md
    assert f"]({out['dashboard']})" in md  # a temp path needs no percent-encoding
