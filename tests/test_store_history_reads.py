"""The store's readers at their edges (tinyllm/store/base.py): the history with unreadable or
vanished release folders, the comparison of the report as it is now, and the messages that
name what could not be read."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from store_helpers import acc_row, make_report, tiny_compare

from tinyllm.publish import publish_run
from tinyllm.store import StoreError, StoreUnreadableError, open_store

NAME_RULE = "expected 1-128 characters of [A-Za-z0-9._-] not starting with '.', '-' or '_'"


def publish(store, release: str, day: int) -> dict:
    items = {"a": (np.random.default_rng(day).random(30) < 0.5).astype(np.float64)}
    rep = make_report(release, f"2026-11-{day:02d}T18:00:00Z", [acc_row("a", items["a"])])
    return publish_run(store, release, rep, items)


def unreadable(tmp_path, store, release: str, run_ids: list[str]) -> None:
    """``release`` with the given runs and a report.json that is not JSON."""
    for run_id in run_ids:
        store.write_run(release, run_id, make_report(release, "2026-11-28T18:00:00Z", []))
    (tmp_path / "releases" / release).mkdir(parents=True, exist_ok=True)
    (tmp_path / "releases" / release / "report.json").write_text("{not json")


def test_an_unreadable_release_before_a_readable_one_is_skipped_and_the_rest_kept(tmp_path):
    # r0's first run is a day before r1 was created: r0 comes first, and skipping it keeps r1
    store = open_store(tmp_path)
    store.write_report("r1", make_report("r1", "2026-11-29T18:00:00Z", []))
    unreadable(tmp_path, store, "r0", ["20261128T180000Z-00aa11"])
    assert [e.release for e in store.history_entries()] == ["r0", "r1"]
    with pytest.warns(UserWarning, match="left out of the history: .*releases/r0/report.json"):
        hist = store.history(skip_unreadable=True)
    assert hist == [("r1", datetime(2026, 11, 29, 18, 0, tzinfo=UTC))]


def test_unreadable_releases_without_runs_come_last_by_name_not_by_key(tmp_path):
    # as keys "releases/v1-x/..." sorts before "releases/v1/..." ('-' < '/'); by name v1 is first
    store = open_store(tmp_path)
    store.write_report("v2", make_report("v2", "2026-11-29T18:00:00Z", []))
    for release in ("v1-x", "v1"):
        unreadable(tmp_path, store, release, [])
    assert store.list("releases/")[0] == "releases/v1-x/report.json"
    entries = store.history_entries()
    assert [(e.release, e.readable) for e in entries] == [
        ("v2", True),
        ("v1", False),
        ("v1-x", False),
    ]


def test_a_release_deleted_between_the_listing_and_the_read_is_left_out(tmp_path, monkeypatch):
    # another process deletes r0 after this one listed the store: r0 is gone, r1 stays
    store = open_store(tmp_path)
    store.write_report("r0", make_report("r0", "2026-11-28T18:00:00Z", []))
    store.write_report("r1", make_report("r1", "2026-11-29T18:00:00Z", []))
    listed = store.list("releases/")
    (tmp_path / "releases" / "r0" / "report.json").unlink()
    monkeypatch.setattr(
        store, "list", lambda prefix="": [k for k in listed if k.startswith(prefix)]
    )
    entries = store.history_entries()
    assert [(e.release, e.readable) for e in entries] == [("r1", True)]
    assert store.releases() == ["r1"]


def test_read_compare_is_the_comparison_of_the_report_as_it_is_now(tmp_path):
    # compare.json is replaced by another comparison after the publish: read_compare still
    # returns the one made for the report's bytes (compares/<h>.json)
    store = open_store(tmp_path)
    publish(store, "v1", 1)
    made = publish(store, "v2", 2)["compare"]
    assert made.previous == "v1" and made.current == "v2"
    other = tiny_compare()
    store.write_compare("v2", other)
    assert store.get_json(store.compare_key("v2")) == other.to_json()
    assert store.read_compare("v2") == made


def test_a_bad_comparison_of_the_report_names_its_key_and_what_it_is(tmp_path):
    store = open_store(tmp_path)
    publish(store, "v1", 1)
    publish(store, "v2", 2)
    report_bytes = store.get_bytes(store.report_key("v2"))
    key = store.compare_version_key("v2", report_bytes)
    where = store.where(key)
    assert key.startswith("releases/v2/compares/") and (tmp_path / key).is_file()
    (tmp_path / key).write_bytes(b"{not json")
    with pytest.raises(StoreUnreadableError) as e:
        store.read_compare("v2")
    assert str(e.value).startswith(f"{where}: malformed comparison: expected JSON, got ")
    (tmp_path / key).write_bytes(b"[]")
    with pytest.raises(StoreUnreadableError) as e:
        store.read_compare("v2")
    assert str(e.value) == f"{where}: expected a JSON object, got list"


def test_parse_json_calls_a_document_json_unless_told_what_it_is(tmp_path):
    store = open_store(tmp_path)
    key = "releases/r1/report.json"
    with pytest.raises(StoreUnreadableError) as e:
        store.parse_json(key, b"{oops")
    assert str(e.value).startswith(f"{store.where(key)}: malformed JSON: expected JSON, got ")
    assert store.parse_json(key, b'{"a": 1}') == {"a": 1}


@pytest.mark.parametrize("bad", ["no good", "", ".hidden"])
def test_a_bad_release_name_is_refused_as_a_release(tmp_path, bad):
    store = open_store(tmp_path)
    with pytest.raises(StoreError) as e:
        store.compare_version_key(bad, b"{}")
    assert str(e.value) == f"release: {NAME_RULE}, got {bad!r}"
    with pytest.raises(StoreError) as e:
        store.baseline_release(bad)
    assert str(e.value) == f"release: {NAME_RULE}, got {bad!r}"
