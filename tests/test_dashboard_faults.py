"""The dashboard under faults: it never writes through a planted link in its output folder, and a
bad stored document becomes a named "unreadable" entry while the rest of the site is built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_compare import lm_row, report
from typer.testing import CliRunner

from tinyllm import cli, dashboard
from tinyllm.compare import compare_reports
from tinyllm.safeio import UnsafePathError
from tinyllm.store import open_store

ROOT = Path(__file__).resolve().parents[1]
NLL = np.random.default_rng(11).gamma(2.0, 0.8, 200)


def make_store(root: Path):
    """r1, r2 (r1's scores), r3 (every NLL + 0.05), each compared with the one before."""
    st = open_store(root)
    for release, items, day in (("r1", NLL, 1), ("r2", NLL, 2), ("r3", NLL + 0.05, 3)):
        st.write_report(release, report(release, [lm_row("gpt", items)], day))
        st.write_items(release, "gpt", items)
    for prev, cur in (("r1", "r2"), ("r2", "r3")):
        cmp = compare_reports(
            st.read_report(prev),
            st.read_report(cur),
            st.items_loader(prev),
            st.items_loader(cur),
            n_perm=200,
        )
        st.write_compare(cur, cmp)
    return st


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (links not followed) with its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


def entries(folder: Path) -> list[str]:
    """Every name under ``folder``, links included, not followed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        rel = Path(dirpath).relative_to(folder)
        out += [str(rel / n) for n in dirnames + filenames]
    return sorted(out)


# --- no write through a planted link -----------------------------------------------------


@pytest.fixture
def planted(tmp_path):
    """An output folder with a planted ``release`` folder link and two page links, all pointing
    into ``outside/`` (which holds a page-named file and a secret)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "r1.html").write_text("precious r1\n")
    (outside / "secret").write_text("precious secret\n")
    site = tmp_path / "site"
    site.mkdir()
    return site, outside


@pytest.mark.parametrize(
    "link, target",
    [
        ("release", "outside"),  # a folder link: release/r1.html would land in outside/
        ("index.html", "outside/secret"),  # a page link
        ("entry", "outside"),
    ],
)
def test_write_site_refuses_a_planted_link_and_writes_nothing(tmp_path, planted, link, target):
    site, outside = planted
    st = make_store(tmp_path / "store")
    (site / link).symlink_to(tmp_path / target)
    before_outside, before_site = snapshot(outside), entries(site)
    files = dashboard.build_site(st)
    with pytest.raises(UnsafePathError) as ex:
        dashboard.write_site(files, site)
    kind = "a symbolic link"
    assert str(site / link) in str(ex.value) and f"got {kind}" in str(ex.value)
    assert snapshot(outside) == before_outside  # the targets are untouched, nothing new there
    assert entries(site) == before_site  # refused before the first page was written
    assert (site / link).is_symlink()


def test_dashboard_command_refuses_a_planted_link_in_one_line(tmp_path, planted):
    site, outside = planted
    make_store(tmp_path / "store")
    (site / "release").symlink_to(outside)
    before = snapshot(outside)
    res = subprocess.run(
        [sys.executable, "-m", "tinyllm.cli", "dashboard", "--store", str(tmp_path / "store")]
        + ["--out", str(site)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr == f"error: {site / 'release'}: expected a folder, got a symbolic link\n"
    assert snapshot(outside) == before
    assert not (site / "index.html").exists()


def test_publish_site_refuses_a_planted_link_under_the_stores_dashboard(tmp_path, planted):
    _, outside = planted
    st = make_store(tmp_path / "store")
    (tmp_path / "store" / "dashboard").mkdir()
    (tmp_path / "store" / "dashboard" / "release").symlink_to(outside)
    before = snapshot(outside)
    with pytest.raises(UnsafePathError, match="expected a folder, got a symbolic link"):
        dashboard.publish_site(st)
    assert snapshot(outside) == before


def test_out_that_is_a_link_or_a_file_is_refused_before_the_site_is_built(tmp_path, planted):
    site, outside = planted
    make_store(tmp_path / "store")
    link = tmp_path / "site-link"
    link.symlink_to(outside)
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for out, kind in ((link, "a symbolic link"), (a_file, "a regular file")):
        res = CliRunner().invoke(
            cli.app, ["dashboard", "--store", str(tmp_path / "store"), "--out", str(out)]
        )
        assert res.exit_code == 2
        assert f"--out {out}: expected a folder or a new path, got {kind}" in " ".join(
            res.output.split()
        )
    assert sorted(p.name for p in outside.iterdir()) == ["r1.html", "secret"]
    assert a_file.read_text() == "x"


def test_regular_pages_already_there_are_replaced_and_new_folders_made(tmp_path):
    st = make_store(tmp_path / "store")
    site = tmp_path / "site"
    (site / "release").mkdir(parents=True)
    (site / "release" / "r1.html").write_text("stale")
    index = dashboard.write_site(dashboard.build_site(st), site)
    assert index == site / "index.html" and b"Overview" in index.read_bytes()
    assert b"Release" in (site / "release" / "r1.html").read_bytes()
    assert (site / "entry" / "gpt.html").is_file()
    assert not [p for p in site.rglob(".*")]  # no temporary file left behind


# --- a bad stored document is one unreadable entry, the rest is built --------------------


def _bad_compare(root: Path, bad: str) -> None:
    path = root / "releases" / "r3" / "compare.json"
    if bad == "empty rows":
        path.write_text('{"rows": []}')
    else:
        doc = json.loads(path.read_text())
        del doc["rows"][0]["verdict"]
        path.write_text(json.dumps(doc))


@pytest.mark.parametrize("bad", ["empty rows", "row without verdict"])
def test_a_schema_invalid_compare_json_is_unreadable_and_the_site_is_built(tmp_path, bad):
    root = tmp_path / "store"
    st = make_store(root)
    _bad_compare(root, bad)
    by_name = {v.name: v for v in dashboard.load_history(st)}
    assert by_name["r3"].compare is None
    err = by_name["r3"].compare_error
    assert err.startswith(f"StoreUnreadableError: {root}/releases/r3/compare.json: ")
    assert "expected an object matching compare.schema.json" in err
    assert by_name["r2"].compare is not None and by_name["r2"].compare_error is None
    res = CliRunner().invoke(
        cli.app, ["dashboard", "--store", str(root), "--out", str(tmp_path / "site")]
    )
    assert res.exit_code == 0, res.output
    site = tmp_path / "site"
    index = (site / "index.html").read_text()
    assert "compare.json unreadable" in index
    assert 'data-verdict="no comparison"' in index  # r3's row: no verdict from a bad file
    r3 = (site / "release" / "r3.html").read_text()
    assert "compare.json is <strong>unreadable</strong>" in r3
    r2 = (site / "release" / "r2.html").read_text()
    assert "is <strong>unreadable</strong>" not in r2 and "permutations" in r2
    assert (site / "entry" / "gpt.html").is_file() and (site / "trends.html").is_file()


def test_a_run_file_with_a_row_without_a_name_is_unreadable_and_the_site_is_built(tmp_path):
    root = tmp_path / "store"
    st = make_store(root)
    run = root / "releases" / "r2" / "runs" / "20261102T180000Z-0001.json"
    run.parent.mkdir(parents=True)
    run.write_text(json.dumps({"created_at": "2026-11-02T18:00:00Z", "rows": [{"status": "ok"}]}))
    files = dashboard.build_site(st)
    page = files["release/r2.html"].decode()
    assert 'data-run="20261102T180000Z-0001"' in page
    assert "unreadable" in page and "expected an object with a &#39;name&#39;" in page
    assert "permutations" in page  # the release's comparison is still there


def test_a_fifo_for_a_report_is_unreadable_and_does_not_hang(tmp_path):
    root = tmp_path / "store"
    make_store(root)
    report_json = root / "releases" / "r2" / "report.json"
    report_json.unlink()
    os.mkfifo(report_json)
    site = tmp_path / "site"
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "tinyllm.cli", "dashboard", "--store", str(root)]
        + ["--out", str(site)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert time.monotonic() - t0 < 120
    assert res.returncode == 0, res.stdout + res.stderr
    r2 = (site / "release" / "r2.html").read_text()
    assert "This release is <strong>unreadable</strong>" in r2 and "a FIFO" in r2
    assert 'Release <a href="release/r3.html">r3</a>' in (site / "index.html").read_text()
