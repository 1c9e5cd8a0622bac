"""The history: releases ordered by created_at then name (unreadable ones by their first run id,
tinyllm.store.history_order, shared with the dashboard), iter_reports, and a corrupt old report
that does not stop later releases from being published and compared."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pytest
from store_helpers import make_report, make_row

from tinyllm import dashboard
from tinyllm.publish import publish_run
from tinyllm.store import StoreError, history_order, new_run_id, open_store, run_id_time


def test_iter_reports_walks_the_history_oldest_first(tmp_path):
    from tinyllm.store import iter_reports

    store = open_store(tmp_path)
    b = make_report("b", "2026-11-29T18:00:00Z", [make_row("gpt")])
    a = make_report("a", "2026-11-30T18:00:00Z", [make_row("gpt", 2.0)])
    store.write_report("a", a)
    store.write_report("b", b)
    assert list(iter_reports(store)) == [("b", b), ("a", a)]
    assert list(iter_reports(store, ["a"])) == [("a", a)]


def test_history_breaks_equal_times_by_release_name(tmp_path):
    # "r1-b/..." sorts before "r1/..." as a key ('-' < '/'), but the history orders by name
    store = open_store(tmp_path)
    for name in ("r1-b", "r1", "r0"):
        store.write_report(name, make_report(name, "2026-11-29T18:00:00Z", []))
    assert store.list("releases/")[1] == "releases/r1-b/report.json"  # listing order
    assert store.releases() == ["r0", "r1", "r1-b"]
    assert store.previous_release("r1-b") == "r1"


def test_one_corrupt_old_report_does_not_stop_later_releases_from_being_compared(tmp_path):
    # r2's report.json is corrupted after it was published: r3 is still published and compared,
    # against r1 (the last readable release, named in compare.json), with a warning naming r2
    store = open_store(tmp_path / "s")
    nll = np.random.default_rng(0).gamma(2.0, 0.8, 300)

    def run(release: str, day: int, items: np.ndarray) -> dict:
        bpb = float(items.mean()) / math.log(2)  # the row agrees with its items (nats)
        row = make_row("gpt", bpb, n=items.size, checkpoint="c", data="d", options={})
        rep = make_report(release, f"2026-11-{day:02d}T18:00:00Z", [row])
        return publish_run(store, release, rep, {"gpt": items})

    run("r1", 1, nll)
    run("r2", 2, nll)
    (tmp_path / "s" / "releases" / "r2" / "report.json").write_text("{not json")
    with pytest.raises(StoreError, match="releases/r2/report.json: malformed report"):
        store.history()
    with pytest.warns(UserWarning, match="left out of the history: .*releases/r2/report.json"):
        assert [n for n, _ in store.history(skip_unreadable=True)] == ["r1"]
    with pytest.warns(UserWarning, match="releases/r2/report.json"):
        out = run("r3", 3, nll + 0.05)
    assert out["compare"].previous == "r1"
    assert out["compare"].rows[0].verdict == "regressed"
    assert store.read_compare("r3") == out["compare"]
    with pytest.warns(UserWarning):
        assert store.previous_release("r4") == "r3"


# r-early's run ids: the first in sorted order that starts with a time is the day before r1
RUNS_EARLY = ["20261128T180000Z-00aa11", "20261201T000000Z-ffee00", "run-by-hand"]


def test_an_unreadable_release_is_placed_by_the_time_of_its_first_run_id(tmp_path):
    # r-early: unreadable, first run a day before r1 -> before r1; r-odd: unreadable, its only
    # run id has no real time (month 13) -> after the others, like a release without runs
    store = open_store(tmp_path)
    store.write_report("r1", make_report("r1", "2026-11-29T18:00:00Z", []))
    for name, run_ids in (("r-odd", ["20261399T180000Z-abcdef"]), ("r-early", RUNS_EARLY)):
        for run_id in run_ids:
            store.write_run(name, run_id, make_report(name, "2026-11-28T18:00:00Z", []))
        (tmp_path / "releases" / name / "report.json").write_text("{not json")
    entries = store.history_entries()
    assert [(e.release, e.readable) for e in entries] == [
        ("r-early", False),
        ("r1", True),
        ("r-odd", False),
    ]
    # the dashboard lists the release folders in the same order
    assert [v.name for v in dashboard.load_history(store)] == ["r-early", "r1", "r-odd"]


def test_history_order_and_run_id_times():
    t = datetime(2026, 11, 28, 18, 0, tzinfo=UTC)
    assert run_id_time("20261128T180000Z-00aa11") == t
    assert run_id_time(new_run_id(t)) == t
    assert run_id_time("20261128T180000Z-0001") == t  # a time first, whatever follows
    for odd in ("20261399T180000Z-abcdef", "2026112T180000Z-abcdef", "run-1", ""):
        assert run_id_time(odd) is None
    assert history_order("r1", t, ["20200101T000000Z-000000"]) == (0, t.timestamp(), "r1")
    assert history_order("r2", None, RUNS_EARLY) == (0, t.timestamp(), "r2")
    assert history_order("r3", None, ["run-1"]) == (1, 0.0, "r3")
