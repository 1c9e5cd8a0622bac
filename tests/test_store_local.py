"""tinyllm/store/local.py: the local folder store (atomic writes through a dot temp file beside
the target, write-once runs, listings that skip temp files, errors naming the key)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from store_helpers import all_files, exercise_store, make_report, make_row

from tinyllm.store import LocalStore, StoreError, StoreExistsError, open_store


def test_local_store_round_trip(tmp_path):
    store = open_store(str(tmp_path / "evalstore"))
    assert isinstance(store, LocalStore)
    exercise_store(store)
    assert not [f for f in all_files(tmp_path) if os.path.basename(f).startswith(".")]
    # the layout on disk is the documented one
    assert "releases/c-mid/report.json" in all_files(tmp_path / "evalstore")
    data = json.loads((tmp_path / "evalstore/releases/c-mid/report.json").read_text())
    assert data["release"] == "c-mid"


def test_local_write_is_atomic_when_the_serializer_fails_half_way(tmp_path):
    store = open_store(tmp_path)
    old = make_report("r1", "2026-11-29T18:00:00Z", [make_row("a"), make_row("b")])
    store.write_report("r1", old)
    # NaN in the LAST row: json.dump has streamed the first rows when it raises
    bad = make_report("r1", "2026-11-29T18:00:00Z", [make_row("a", 3.0), make_row("b", np.nan)])
    with pytest.raises(ValueError, match="Out of range float"):
        store.write_report("r1", bad)
    assert store.read_report("r1") == old
    assert all_files(tmp_path) == ["releases/r1/report.json"]  # no temp file left behind


def test_local_write_is_atomic_when_the_move_fails(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    old = make_report("r1", "2026-11-29T18:00:00Z", [make_row("a")])
    store.write_report("r1", old)

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space left"):
        store.write_report("r1", make_report("r1", "2026-11-29T18:00:00Z", [make_row("a", 9.0)]))
    monkeypatch.undo()
    assert store.read_report("r1") == old
    assert all_files(tmp_path) == ["releases/r1/report.json"]


def test_local_listing_skips_temp_files(tmp_path):
    store = open_store(tmp_path)
    store.write_report("r1", make_report("r1", "2026-11-29T18:00:00Z", []))
    (tmp_path / "releases/r1/.report.json.abc.tmp").write_text("{half")  # a crash's leftover
    assert store.list("releases/") == ["releases/r1/report.json"]
    assert store.releases() == ["r1"]


def test_site_files_only_under_dashboard_local(tmp_path):
    store = open_store(tmp_path)
    assert store.write_site_file("dashboard/index.html", b"<html>", "text/html") == (
        "dashboard/index.html"
    )
    assert (tmp_path / "dashboard/index.html").read_bytes() == b"<html>"
    with pytest.raises(StoreError) as ei:
        store.write_site_file("releases/r1/report.json", b"{}", "application/json")
    assert str(ei.value) == (
        f"{tmp_path}/releases/r1/report.json: expected a key under dashboard/, "
        "got 'releases/r1/report.json'"
    )
    assert not (tmp_path / "releases").exists()


def test_check_writable_probes_and_cleans_up_local(tmp_path):
    store = open_store(tmp_path / "new" / "store")
    store.check_writable()
    assert (tmp_path / "new" / "store").is_dir() and all_files(tmp_path) == []


def test_write_once_without_hard_links_checks_then_writes(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise PermissionError(1, "Operation not permitted")  # e.g. some network file systems

    monkeypatch.setattr(os, "link", no_links)
    store = open_store(tmp_path)
    store.put_bytes("releases/r1/runs/a.json", b"1", overwrite=False)
    assert store.get_bytes("releases/r1/runs/a.json") == b"1"
    with pytest.raises(StoreExistsError) as ei:
        store.put_bytes("releases/r1/runs/a.json", b"2", overwrite=False)
    assert str(ei.value) == f"{tmp_path}/releases/r1/runs/a.json: refusing to overwrite; it exists"
    assert store.get_bytes("releases/r1/runs/a.json") == b"1"
    assert all_files(tmp_path) == ["releases/r1/runs/a.json"]  # no temp file left


def test_local_writes_go_through_a_dot_temp_file_beside_the_target(tmp_path, monkeypatch):
    seen = []
    real = os.replace

    def spy(src, dst):
        seen.append((str(src), str(dst)))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    store = open_store(tmp_path)
    store.write_report("r1", make_report("r1", "2026-11-29T18:00:00Z", []))
    ((src, dst),) = seen
    assert dst == str(tmp_path / "releases/r1/report.json")
    assert os.path.dirname(src) == os.path.dirname(dst)  # same folder: an atomic rename
    name = os.path.basename(src)
    assert name.startswith(".report.json.") and name.endswith(".tmp")  # never listed as a key


def test_local_errors_carry_a_note_naming_the_key(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    store.put_bytes("releases/r1/y.json", b"{}")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)  # a real I/O failure: an OSError, with a note
    with pytest.raises(OSError) as ei:
        store.put_bytes("releases/r1/x.json", b"{}")
    assert f"{tmp_path}/releases/r1/x.json" in ei.value.__notes__
    with pytest.raises(OSError) as ei:
        store.put_json("releases/r1/x.json", {})
    assert f"{tmp_path}/releases/r1/x.json" in ei.value.__notes__
    with pytest.raises(OSError) as ei:
        store.update_json("releases/r1/x.json", lambda old: {})
    assert f"{tmp_path}/releases/r1/x.json" in ei.value.__notes__
    assert sorted(os.listdir(tmp_path / "releases/r1")) == [".x.json.lock", "y.json"]


@pytest.mark.parametrize("planted", ["a file", "a link"])
def test_a_file_or_a_link_in_place_of_a_folder_is_refused_and_nothing_written(tmp_path, planted):
    # releases/r1 is a file, or a link to another store's release: a StoreError naming the key
    # and the folder (not an OSError the flow would retry), and nothing written through the link
    other = open_store(tmp_path / "other")
    other.write_report("rx", make_report("rx", "2026-11-29T18:00:00Z", []))
    before = {f: (tmp_path / "other" / f).read_bytes() for f in all_files(tmp_path / "other")}
    store = open_store(tmp_path / "store")
    (tmp_path / "store/releases").mkdir(parents=True)
    r1 = tmp_path / "store/releases/r1"
    if planted == "a file":
        r1.write_text("a file where the release folder should be")
        got = "a regular file"
    else:
        r1.symlink_to(tmp_path / "other/releases/rx")
        got = "a symbolic link"
    report = make_report("r1", "2026-11-30T18:00:00Z", [])
    writes = (
        lambda: store.put_bytes("releases/r1/items/a.npy", b"x"),
        lambda: store.write_run("r1", "20261130T180000Z-00aa11", report),
        lambda: store.update_report("r1", lambda old: report),
    )
    for write in writes:
        with pytest.raises(StoreError) as ei:
            write()
        assert not isinstance(ei.value, OSError)
        assert str(ei.value).endswith(f": not written: {r1}: expected a folder, got {got}")
        assert str(ei.value).startswith(f"{tmp_path}/store/releases/r1/")
    assert {f: (tmp_path / "other" / f).read_bytes() for f in all_files(tmp_path / "other")} == (
        before
    )


def test_local_listing_prefixes_root_files_and_dot_folders(tmp_path):
    store = open_store(tmp_path)
    store.put_bytes("top.json", b"{}")
    store.put_bytes("releases/r1/items/a.npy", b"x")
    store.put_bytes("releases/r1/report.json", b"{}")
    store.put_bytes("releases/r10/report.json", b"{}")
    (tmp_path / "releases/r1/.trash").mkdir()
    (tmp_path / "releases/r1/.trash/old.json").write_text("{}")
    assert store.list() == [
        "releases/r1/items/a.npy",
        "releases/r1/report.json",
        "releases/r10/report.json",
        "top.json",
    ]
    assert store.list("releases/r1/it") == ["releases/r1/items/a.npy"]
    assert store.list("releases/r1") == [
        "releases/r1/items/a.npy",
        "releases/r1/report.json",
        "releases/r10/report.json",
    ]
    assert store.list("releases/r1/") == ["releases/r1/items/a.npy", "releases/r1/report.json"]
    assert store.list("nothing/here/") == []


def test_check_writable_probes_the_store_folder_itself(tmp_path, monkeypatch):
    import tempfile

    made = []
    real = tempfile.mkstemp

    def spy(*args, **kw):
        fd, path = real(*args, **kw)
        made.append(path)
        return fd, path

    monkeypatch.setattr(tempfile, "mkstemp", spy)
    root = tmp_path / "store"
    open_store(root).check_writable()
    (probe,) = made
    assert os.path.dirname(probe) == str(root)  # the folder reports will be written to
    name = os.path.basename(probe)
    assert name.startswith(".probe.") and name.endswith(".tmp")  # a leftover is never a key
    assert not os.path.exists(probe)

    def refuse(*args, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(PermissionError) as ei:
        open_store(root).check_writable()
    assert ei.value.__notes__ == [f"store {root}"]


def test_local_read_errors_carry_a_note_naming_the_key(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    store.put_bytes("releases/r1/x.json", b"{}")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    with monkeypatch.context() as m, pytest.raises(PermissionError) as ei:
        m.setattr(os, "open", refuse)  # the OS refuses the read (root ignores file modes)
        store.get_bytes("releases/r1/x.json")
    assert ei.value.__notes__ == [f"{tmp_path}/releases/r1/x.json"]
