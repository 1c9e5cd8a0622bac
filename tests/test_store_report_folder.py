"""A release whose ``report.json`` is a folder: formats/store.md refuses it as unreadable,
``expected a file, got a folder``, naming the key. On a local store the folder may be empty or not;
on S3 the "folder" is a key under ``releases/<r>/report.json/``. The history lists the release as
unreadable in its place (``tinyllm history`` exits 1), the dashboard shows it with the reason and
builds the rest, and a publish into it is refused, never retried as an OSError."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from store_helpers import acc_row, make_report

from tinyllm import cli, dashboard
from tinyllm.publish import publish_run
from tinyllm.store import StoreUnreadableError, open_store

ITEMS = np.array([1.0, 0.0, 1.0, 1.0])
RUN = "20261130T180000Z-00aa11"  # r2's run: a day after r1, a day before r3


def store_with_folders(store, make_folder) -> None:
    """r1 readable, r2 (a run, report.json an empty folder), r3 (readable, after both) and
    r4 (report.json a folder holding a file, no run: last)."""
    store.write_report("r1", make_report("r1", "2026-11-29T18:00:00Z", []))
    store.write_run("r2", RUN, make_report("r2", "2026-11-30T18:00:00Z", []))
    make_folder("r2", empty=True)
    store.write_report("r3", make_report("r3", "2026-12-01T18:00:00Z", []))
    make_folder("r4", empty=False)


def folder_error(store, release: str) -> str:
    return f"{store.uri.rstrip('/')}/releases/{release}/report.json: expected a file, got a folder"


@pytest.fixture
def local(tmp_path):
    root = tmp_path / "store"
    store = open_store(root)

    def make_folder(release: str, empty: bool) -> None:
        folder = root / "releases" / release / "report.json"
        folder.mkdir(parents=True)
        if not empty:
            (folder / "x.json").write_text("{}")

    store_with_folders(store, make_folder)
    return store


@pytest.fixture
def s3(s3_env):
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket="tl-f")
    store = open_store("s3://tl-f/team")

    def make_folder(release: str, empty: bool) -> None:
        # S3 has no empty folders: a folder is a key below the prefix
        client.put_object(Bucket="tl-f", Key=f"team/releases/{release}/report.json/x", Body=b"")

    store_with_folders(store, make_folder)
    return store


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_a_report_folder_is_an_unreadable_release_in_its_place(request, backend):
    store = request.getfixturevalue(backend)
    entries = store.history_entries()
    assert [(e.release, e.error) for e in entries] == [
        ("r1", None),
        ("r2", folder_error(store, "r2")),
        ("r3", None),
        ("r4", folder_error(store, "r4")),
    ]
    for release in ("r2", "r4"):
        with pytest.raises(StoreUnreadableError) as ei:
            store.read_report(release)
        assert str(ei.value) == folder_error(store, release)
    with pytest.warns(UserWarning) as warned:
        names = [n for n, _ in store.history(skip_unreadable=True)]
    assert names == ["r1", "r3"]
    assert [str(w.message) for w in warned] == [
        f"left out of the history: {folder_error(store, release)}" for release in ("r2", "r4")
    ]
    views = dashboard.load_history(store)
    assert [(v.name, v.has_report_file, v.error) for v in views] == [
        ("r1", True, None),
        ("r2", True, f"StoreUnreadableError: {folder_error(store, 'r2')}"),
        ("r3", True, None),
        ("r4", True, f"StoreUnreadableError: {folder_error(store, 'r4')}"),
    ]


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_a_publish_into_a_report_folder_is_refused_as_unreadable(request, backend):
    store = request.getfixturevalue(backend)
    report = make_report("r2", "2026-12-02T18:00:00Z", [acc_row("a", ITEMS)])
    # a StoreError, not an OSError the flow would retry as transient
    with pytest.raises(StoreUnreadableError) as ei, pytest.warns(UserWarning, match="left out"):
        publish_run(store, "r2", report, {"a": ITEMS})
    assert str(ei.value) == folder_error(store, "r2")
    assert [e.release for e in store.history_entries() if e.readable] == ["r1", "r3"]


def run_main(monkeypatch, capsys, *args):
    """The installed entry point (cli.main, with its error boundary), in this process."""
    monkeypatch.setattr(sys, "argv", ["tinyllm", *map(str, args)])
    with pytest.raises(SystemExit) as ex:
        cli.main()
    out = capsys.readouterr()
    return ex.value.code, out.out, out.err


def test_history_names_a_report_folder_in_one_line_and_exits_1(local, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "history", "--store", local.uri)
    assert code == 1, (out, err)
    lines = out.splitlines()
    for release in ("r2", "r4"):
        line = f"{release}  unreadable: StoreUnreadableError: {folder_error(local, release)}"
        assert lines.count(line) == 1, out
    assert "never finished" not in out
    assert "r3  (2026-12-01T18:00:00Z)  r3 vs r1" in out  # compared with the last readable one
    assert err == f"error: 2 of 4 release(s) in {local.uri} unreadable: r2, r4\n"


def test_dashboard_shows_a_report_folder_as_unreadable_and_builds_the_rest(local, tmp_path):
    files = dashboard.build_site(local)
    index = files["index.html"].decode()
    for release in ("r2", "r4"):
        page = files[f"release/{release}.html"].decode()
        assert "This release is <strong>unreadable</strong>" in page
        assert folder_error(local, release) in page and folder_error(local, release) in index
        assert "never finished" not in page
    assert 'Release <a href="release/r3.html">r3</a>' in index
    assert "release/r1.html" in files
