"""tinyllm/store/keys.py and documents.py, and the store's checked readers and writers: names
and keys refused word for word, run ids, created_at and the report checks, the exact JSON bytes,
malformed and missing documents named by their key, runs written once."""

from __future__ import annotations

import os

import numpy as np
import pytest
from store_helpers import all_files, make_report, make_row, tiny_compare

from tinyllm.store import Store, StoreError, StoreExistsError, StoreKeyError, new_run_id, open_store


def test_run_ids_sort_by_time():
    from datetime import UTC, datetime

    a = new_run_id(datetime(2026, 11, 29, 18, 0, 0, tzinfo=UTC))
    b = new_run_id(datetime(2026, 11, 29, 18, 0, 1, tzinfo=UTC))
    assert a.startswith("20261129T180000Z-") and a < b


def test_run_ids_are_utc_seconds_and_six_hex_digits():
    import re
    from datetime import UTC, datetime, timedelta, timezone

    paris = timezone(timedelta(hours=1))
    rid = new_run_id(datetime(2026, 11, 29, 19, 0, 5, tzinfo=paris))
    assert re.fullmatch(r"20261129T180005Z-[0-9a-f]{6}", rid)
    assert new_run_id(datetime(2026, 11, 29, 18, tzinfo=UTC)) != new_run_id(
        datetime(2026, 11, 29, 18, tzinfo=UTC)
    )  # the random part
    before = datetime.now(UTC).replace(microsecond=0)
    now = datetime.strptime(new_run_id()[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    assert before <= now <= datetime.now(UTC)


def test_run_ids_are_utc_whatever_the_local_zone(monkeypatch):
    import time
    from datetime import datetime, timedelta, timezone

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        rid = new_run_id(datetime(2026, 11, 29, 19, 0, 5, tzinfo=timezone(timedelta(hours=1))))
        assert rid.startswith("20261129T180005Z-")
    finally:
        monkeypatch.undo()
        time.tzset()


def test_bad_names_and_uris_are_refused(tmp_path):
    store = open_store(tmp_path)
    for bad in ("../x", "a/b", "", ".hidden", "a b"):
        with pytest.raises(StoreError, match="release: expected"):
            store.read_report(bad)
    with pytest.raises(StoreError, match="expected a report of release 'r1', got release 'r2'"):
        store.write_report("r1", make_report("r2", "2026-01-01T00:00:00Z", []))
    with pytest.raises(StoreError, match="unique row names"):
        store.write_report("r1", make_report("r1", "2026-01-01T00:00:00Z", [make_row("a")] * 2))
    with pytest.raises(StoreError, match="expected a 1-d numeric array"):
        store.write_items("r1", "gpt", np.zeros((2, 2)))
    for uri in ("s3://", "s3:///prefix", "s3://UPPER/x", "s3://a/x"):
        with pytest.raises(StoreError, match=r"expected s3://bucket/prefix.*got"):
            open_store(uri)
    with pytest.raises(StoreError, match="expected a local folder or s3://bucket/prefix"):
        open_store("gs://bucket/x")
    assert not (tmp_path / "releases").exists()


def test_names_and_keys_are_refused_word_for_word(tmp_path):
    store = open_store(tmp_path)
    ok = "a" * 128
    assert Store.report_key(ok) == f"releases/{ok}/report.json"
    for bad in ("a" * 129, ".a", "-a", "_a", "a/b", "", 5, None):
        with pytest.raises(StoreError) as ei:
            Store.report_key(bad)
        assert str(ei.value) == (
            "release: expected 1-128 characters of [A-Za-z0-9._-] not starting with '.', "
            f"'-' or '_', got {bad!r}"
        )
    assert Store.run_key("r1", "run.1") == "releases/r1/runs/run.1.json"
    assert Store.items_key("r1", "A-b_c.d") == "releases/r1/items/A-b_c.d.npy"
    assert Store.compare_key("r1") == "releases/r1/compare.json"
    with pytest.raises(StoreError, match=r"^run_id: expected"):
        Store.run_key("r1", "../x")
    with pytest.raises(StoreError, match=r"^entry: expected"):
        Store.items_key("r1", "a b")
    for bad in ("", None):
        with pytest.raises(StoreError) as ei:
            store.get_bytes(bad)
        assert str(ei.value) == (
            f"key: expected a non-empty relative key like 'releases/r1', got {bad!r}"
        )
    for bad in ("a//b", "a/../b", "/a", "a/", "a/.b"):
        with pytest.raises(StoreError) as ei:
            store.get_bytes(bad)
        assert str(ei.value) == (
            "key: expected '/'-separated segments of [A-Za-z0-9._-] (no '', '.', '..'), "
            f"got {bad!r}"
        )


def test_every_key_names_the_argument_it_refuses(tmp_path):
    store = open_store(tmp_path)
    bad = "a b"
    calls = [
        (lambda: Store.compare_key(bad), "release"),
        (lambda: Store.run_key(bad, "x"), "release"),
        (lambda: Store.items_key(bad, "x"), "release"),
        (lambda: store.runs(bad), "release"),
        (lambda: store.items_loader(bad), "release"),
        (lambda: store.previous_release(bad), "release"),
        (lambda: store.write_items_ref("r1", bad, np.zeros(2)), "entry"),
        (lambda: store.read_run("r1", bad), "run_id"),
    ]
    for call, what in calls:
        with pytest.raises(StoreError) as ei:
            call()
        assert str(ei.value) == (
            f"{what}: expected 1-128 characters of [A-Za-z0-9._-] not starting with '.', "
            f"'-' or '_', got {bad!r}"
        )


def test_created_at_and_report_checks_word_for_word():
    from datetime import UTC, datetime, timedelta

    from tinyllm.store import check_report, parse_created_at

    assert parse_created_at("2026-11-29T18:00:00") == datetime(2026, 11, 29, 18, tzinfo=UTC)
    plus1 = parse_created_at("2026-11-29T19:00:00+01:00")
    assert plus1 == datetime(2026, 11, 29, 18, tzinfo=UTC)
    assert plus1.utcoffset() == timedelta(hours=1)  # an aware time keeps its zone
    assert parse_created_at("2026-11-29T18:00:00Z").tzinfo == UTC
    with pytest.raises(StoreError) as ei:
        parse_created_at(20261129, "x.json")
    assert str(ei.value) == "x.json: expected created_at as an ISO 8601 string, got 20261129"
    with pytest.raises(StoreError) as ei:
        parse_created_at("yesterday")
    assert str(ei.value) == (
        "report: expected created_at in ISO 8601 (e.g. 2026-11-29T18:00:00Z), got 'yesterday'"
    )
    good = make_report("r1", "2026-11-29T18:00:00Z", [make_row("a")])
    assert check_report(good, "w", "r1") is good
    no_release = {"created_at": "2026-11-29T18:00:00Z", "rows": []}
    assert check_report(no_release, "w", "r1") is no_release  # release is optional
    cases = [
        ([], "w: expected a report (a JSON object), got list"),
        ({"created_at": "2026-11-29T18:00:00Z"}, "w: expected 'rows' to be a list, got NoneType"),
        (
            {"created_at": "2026-11-29T18:00:00Z", "rows": [{"name": "a"}, ["b"]]},
            "w: rows[1]: expected an object with a 'name', got ['b']",
        ),
        (
            {"created_at": "2026-11-29T18:00:00Z", "rows": [{"name": 3}]},
            "w: rows[0]: expected an object with a 'name', got {'name': 3}",
        ),
        (
            {"created_at": "2026-11-29T18:00:00Z", "rows": [{"name": "a b"}]},
            "w: rows[0].name: expected 1-128 characters of [A-Za-z0-9._-] not starting with "
            "'.', '-' or '_', got 'a b'",
        ),
        (
            {"created_at": "2026-11-29T18:00:00Z", "rows": [{"name": "a"}, {"name": "a"}]},
            "w: expected unique row names, got 'a' twice",
        ),
        (good | {"release": "r2"}, "w: expected a report of release 'r1', got release 'r2'"),
    ]
    for report, message in cases:
        with pytest.raises(StoreError) as ei:
            check_report(report, "w", "r1")
        assert str(ei.value) == message


def test_json_files_are_utf8_indented_with_a_final_newline(tmp_path):
    store = open_store(tmp_path)
    store.put_json("releases/r1/x.json", {"a": "é", "b": [1]})
    expected = '{\n  "a": "é",\n  "b": [\n    1\n  ]\n}\n'.encode()
    assert (tmp_path / "releases/r1/x.json").read_bytes() == expected
    assert store.get_bytes("releases/r1/x.json") == expected
    assert os.stat(tmp_path / "releases/r1/x.json").st_mode & 0o777 == 0o644  # for everyone
    store.update_json("releases/r1/y.json", lambda old: {"a": "é", "b": [1]})
    assert (tmp_path / "releases/r1/y.json").read_bytes() == expected
    with pytest.raises(ValueError, match="Out of range float"):
        store.put_json("releases/r1/x.json", {"a": float("inf")})
    assert store.get_bytes("releases/r1/x.json") == expected
    # the Store base class does the same into a buffer (the S3 path)
    got = {}

    class Memory(Store):
        uri = "mem://"

        def put_bytes(self, key, data, *, overwrite=True):
            got[key] = (data, overwrite)

    Memory().put_json("k.json", {"a": "é", "b": [1]}, overwrite=False)
    assert got == {"k.json": (expected, False)}


def test_base_put_json_overwrites_by_default():
    got = {}

    class Memory(Store):
        uri = "mem://x/"

        def put_bytes(self, key, data, *, overwrite=True):
            got[key] = overwrite

    m = Memory()
    m.put_json("k.json", {})
    assert got == {"k.json": True}
    assert m.where("releases/r1") == "mem://x/releases/r1"


def test_malformed_files_name_the_key(tmp_path):
    store = open_store(tmp_path)
    store.put_bytes("releases/r1/report.json", b'{"rows": [')
    with pytest.raises(StoreError, match=r"releases/r1/report\.json: malformed report"):
        store.read_report("r1")
    store.put_bytes("releases/r2/report.json", b'{"rows": [], "created_at": "yesterday"}')
    with pytest.raises(StoreError, match=r"releases/r2/report\.json.*ISO 8601.*'yesterday'"):
        store.read_report("r2")
    store.put_bytes("releases/r3/report.json", b'{"rows": {}, "created_at": "2026-01-01"}')
    with pytest.raises(StoreError, match=r"r3/report\.json: expected 'rows' to be a list"):
        store.read_report("r3")
    store.put_bytes("releases/r1/items/gpt.npy", b"not an npy file")
    with pytest.raises(StoreError, match=r"releases/r1/items/gpt\.npy: malformed items"):
        store.read_items("r1", "gpt")


def test_malformed_json_names_the_key_and_what_it_should_be(tmp_path):
    store = open_store(tmp_path)
    store.put_bytes("releases/r1/compare.json", b"\xff\xfe")
    store.write_report("r1", make_report("r1", "2026-11-29T18:00:00Z", []))
    with pytest.raises(StoreError) as ei:
        store.read_compare("r1")
    assert str(ei.value).startswith(
        f"{tmp_path}/releases/r1/compare.json: malformed comparison: expected JSON, got 'utf-8'"
    )
    store.put_bytes("releases/r1/compare.json", b"[1, 2]")
    with pytest.raises(StoreError) as ei:
        store.read_compare("r1")
    assert str(ei.value) == f"{tmp_path}/releases/r1/compare.json: expected a JSON object, got list"
    store.put_bytes("releases/r2/z.json", b"{")
    with pytest.raises(StoreError) as ei:
        store.get_json("releases/r2/z.json")
    assert str(ei.value).startswith(f"{tmp_path}/releases/r2/z.json: malformed JSON: expected JSON")


def test_a_malformed_run_file_names_its_key(tmp_path):
    store = open_store(tmp_path)
    store.put_bytes("releases/r1/runs/run-1.json", b'{"created_at": "2026-11-29", "rows": {}}')
    with pytest.raises(StoreError) as ei:
        store.read_run("r1", "run-1")
    assert str(ei.value) == (
        f"{tmp_path}/releases/r1/runs/run-1.json: expected 'rows' to be a list, got dict"
    )


def test_missing_things_are_named_exactly(tmp_path):
    store = open_store(tmp_path)
    w = f"{tmp_path}/releases"
    with pytest.raises(StoreKeyError) as ei:
        store.read_compare("r1")
    assert str(ei.value) == (
        f"{w}/r1/compare.json: no such comparison: release 'r1' is not in the store "
        "(releases: none)"
    )
    assert store.previous_release("r1") is None  # an empty store
    store.write_report("r1", make_report("r1", "2026-11-29T18:00:00Z", []))
    store.write_report("r0", make_report("r0", "2026-11-28T18:00:00Z", []))
    with pytest.raises(StoreKeyError) as ei:
        store.read_compare("r1")  # the release is there, its comparison is not
    assert str(ei.value) == f"{w}/r1/compare.json: no such key"
    with pytest.raises(StoreKeyError) as ei:
        store.read_run("r1", "run-9")
    assert str(ei.value) == f"{w}/r1/runs/run-9.json: no such key"
    with pytest.raises(StoreKeyError) as ei:
        store.read_run("r9", "run-9")
    assert str(ei.value) == (
        f"{w}/r9/runs/run-9.json: no such run: release 'r9' is not in the store (releases: r0, r1)"
    )
    with pytest.raises(StoreKeyError) as ei:
        store.read_report("r9")
    assert str(ei.value) == (
        f"{w}/r9/report.json: no such report: release 'r9' is not in the store (releases: r0, r1)"
    )
    with pytest.raises(StoreError) as ei:
        store.write_report("r2", make_report("r1", "2026-11-29T18:00:00Z", []))
    assert str(ei.value) == (
        f"{w}/r2/report.json: expected a report of release 'r2', got release 'r1'"
    )
    with pytest.raises(StoreError) as ei:
        store.write_run("r2", "run-1", make_report("r1", "2026-11-29T18:00:00Z", []))
    assert str(ei.value) == (
        f"{w}/r2/runs/run-1.json: expected a report of release 'r2', got release 'r1'"
    )
    with pytest.raises(StoreError) as ei:
        store.write_compare("r1", tiny_compare().model_copy(update={"n_perm": 0}))
    assert str(ei.value).startswith(
        f"{w}/r1/compare.json: expected an object matching compare.schema.json, got at n_perm: "
    )
    with pytest.raises(StoreError) as ei:
        store.write_compare("r1", {"rows": []})  # a document is not a comparison
    assert str(ei.value) == f"{w}/r1/compare.json: expected a Comparison, got dict"
    (tmp_path / "releases/r1/folder.json").mkdir()
    with pytest.raises(StoreError) as ei:
        store.get_bytes("releases/r1/folder.json")
    assert str(ei.value) == f"{w}/r1/folder.json: expected a file, got a folder"
    with pytest.raises(StoreKeyError) as ei:
        store.get_bytes("releases/r1/report.json/x")  # a file where a folder should be
    assert str(ei.value) == f"{w}/r1/report.json/x: no such key"


def test_runs_are_never_overwritten(tmp_path):
    store = open_store(tmp_path)
    first = make_report("r1", "2026-11-29T18:00:00Z", [make_row("a", 1.0)])
    store.write_run("r1", "run-1", first)
    with pytest.raises(StoreExistsError, match=r"releases/r1/runs/run-1\.json"):
        store.write_run("r1", "run-1", make_report("r1", "2026-11-29T19:00:00Z", []))
    assert store.read_run("r1", "run-1") == first
    # even the byte-level call refuses when asked not to overwrite
    with pytest.raises(StoreExistsError):
        store.put_bytes("releases/r1/runs/run-1.json", b"{}", overwrite=False)
    assert store.read_run("r1", "run-1") == first
    assert all_files(tmp_path) == ["releases/r1/runs/run-1.json"]


def test_write_run_refuses_an_existing_run_even_after_a_stale_exists_check(tmp_path, monkeypatch):
    # the refusal is in the write itself (os.link / If-None-Match), not only in exists()
    store = open_store(tmp_path)
    first = make_report("r1", "2026-11-29T18:00:00Z", [make_row("a")])
    store.write_run("r1", "run-1", first)
    monkeypatch.setattr(store, "exists", lambda key: False)  # another writer got in between
    with pytest.raises(StoreExistsError) as ei:
        store.write_run("r1", "run-1", make_report("r1", "2026-11-29T19:00:00Z", []))
    assert (
        str(ei.value) == f"{tmp_path}/releases/r1/runs/run-1.json: refusing to overwrite; it exists"
    )
    monkeypatch.undo()
    assert store.read_run("r1", "run-1") == first


def test_update_report_checks_what_it_reads_and_what_it_writes(tmp_path):
    store = open_store(tmp_path)
    key = f"{tmp_path}/releases/r1/report.json"
    with pytest.raises(StoreError) as ei:
        store.update_report("r1", lambda old: make_report("r2", "2026-11-29T18:00:00Z", []))
    assert str(ei.value) == f"{key}: expected a report of release 'r1', got release 'r2'"
    assert not store.exists("releases/r1/report.json")
    store.put_bytes("releases/r1/report.json", b'{"rows": 1, "created_at": "2026-11-29"}')
    with pytest.raises(StoreError) as ei:
        store.update_report("r1", lambda old: old)
    assert str(ei.value) == f"{key}: expected 'rows' to be a list, got int"
    store.put_bytes("releases/r1/report.json", b"{")
    with pytest.raises(StoreError, match=rf"^{key}: malformed report: expected JSON"):
        store.update_report("r1", lambda old: old)
    with pytest.raises(StoreError, match=rf"^{key}: malformed JSON: expected JSON"):
        store.update_json("releases/r1/report.json", lambda old: old)
    store.put_bytes(
        "releases/r1/report.json", b'{"created_at": "2026-11-29T18:00:00Z", "rows": []}'
    )
    seen = []
    new = make_report("r1", "2026-11-29T18:00:00Z", [make_row("a")])
    assert store.update_report("r1", lambda old: seen.append(old) or new) == new
    assert seen == [{"created_at": "2026-11-29T18:00:00Z", "rows": []}]
    assert store.read_report("r1") == new
