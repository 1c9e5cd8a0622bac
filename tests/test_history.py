"""tinyllm.history: each readable release compared with the last readable one before it, the
stored compare.json when valid, else one computed from the per-item scores (what `tinyllm
history` prints)."""

from __future__ import annotations

import contextlib
import json
import math

import numpy as np
import pytest
from test_compare import lm_row, report

from tinyllm import history
from tinyllm.compare import compare_reports
from tinyllm.dashboard import load_history
from tinyllm.store import StoreError, open_store

NLL = np.random.default_rng(7).gamma(2.0, 0.8, 200)
SHIFT = 0.05  # nats per token added in r3: bpb rises by 0.05 / ln 2 on byte tokens


@pytest.fixture
def store(tmp_path):
    """r1; r2 (r1's scores, its compare.json stored); r3 (every NLL + 0.05, no compare.json)."""
    st = open_store(tmp_path / "store")
    for release, items, day in (("r1", NLL, 1), ("r2", NLL, 2), ("r3", NLL + SHIFT, 3)):
        st.write_report(release, report(release, [lm_row("gpt", items)], day))
        st.write_items(release, "gpt", items)
    loaders = st.items_loader("r1"), st.items_loader("r2")
    cmp = compare_reports(st.read_report("r1"), st.read_report("r2"), *loaders, n_perm=100)
    st.write_compare("r2", cmp)
    return st


def test_each_release_is_compared_with_the_one_before(store):
    steps = list(history.release_history(store, load_history(store), n_perm=300, seed=1))
    assert [s.view.name for s in steps] == ["r1", "r2", "r3"]
    assert [s.state for s in steps] == ["ok", "ok", "ok"]
    assert [s.previous for s in steps] == [None, "r1", "r2"]
    assert [s.computed for s in steps] == [False, False, True]
    first, second, third = steps
    assert first.compare is None and first.verdicts == {} and first.regressions() == []
    assert second.compare == store.read_compare("r2")  # the stored one, not recomputed
    assert second.verdicts == {"gpt": "unchanged"}
    # r3 vs r2, computed here: every item + 0.05 nats, so delta = 0.05 / ln 2 bits per byte
    want = compare_reports(
        store.read_report("r2"),
        store.read_report("r3"),
        store.items_loader("r2"),
        store.items_loader("r3"),
        n_perm=300,
        seed=1,
    )
    assert third.compare == want
    assert third.verdicts == {"gpt": "regressed"}
    (reg,) = third.regressions()
    assert reg.name == "gpt" and reg.delta == pytest.approx(SHIFT / math.log(2), rel=1e-9)


def test_an_unreadable_release_is_passed_over_and_named(store):
    root = store.root
    # run files as the flow writes them: their ids place r2 (unreadable) and r4 in time
    for release, day in (("r2", 2), ("r4", 4)):
        run = root / "releases" / release / "runs" / f"202611{day:02d}T180000Z-0001.json"
        run.parent.mkdir(parents=True)
        run.write_text(json.dumps(report(release, [lm_row("gpt", NLL)], day)))
    (root / "releases" / "r2" / "report.json").write_text("{not json")  # r4: no report.json
    views = load_history(store)
    steps = list(history.release_history(store, views, n_perm=200))
    assert [(s.view.name, s.state) for s in steps] == [
        ("r1", "ok"),
        ("r2", "unreadable"),
        ("r3", "ok"),
        ("r4", "no report"),
    ]
    assert steps[1].compare is None and steps[3].compare is None
    # r3 is compared with the last READABLE release, r1 (r1 -> r3: the same +0.05 nats)
    assert steps[2].previous == "r1" and steps[2].computed
    assert steps[2].compare.previous == "r1" and steps[2].verdicts == {"gpt": "regressed"}
    assert history.unreadable(views) == ["r2"]  # a folder without a report is not an error


def test_an_unreadable_items_file_makes_the_row_not_comparable(store):
    (store.root / "releases" / "r3" / "items" / "gpt.npy").write_bytes(b"not an array")
    steps = list(history.release_history(store, load_history(store), n_perm=200))
    assert steps[2].verdicts == {"gpt": "not comparable"} and steps[2].regressions() == []


def test_compare_releases_reports_its_rows_as_progress(store):
    calls = []

    @contextlib.contextmanager
    def progress(total):
        calls.append(("start", total))

        class Bar:
            def update(self, done, total=None):
                calls.append(("update", done))

        yield Bar()
        calls.append(("end", total))

    cmp = history.compare_releases(store, "r1", "r3", n_perm=500, seed=2, progress=progress)
    assert calls == [("start", 1), ("update", 1), ("end", 1)]
    want = compare_reports(
        store.read_report("r1"),
        store.read_report("r3"),
        store.items_loader("r1"),
        store.items_loader("r3"),
        n_perm=500,
        seed=2,
    )
    assert cmp == want
    assert history.compare_releases(store, "r1", "r3", n_perm=500, seed=2) == want
    with pytest.raises(StoreError, match="r9"):
        history.compare_releases(store, "r1", "r9")


def test_a_stored_comparison_reads_each_release_its_own_scores(tmp_path):
    st = open_store(tmp_path / "store")
    cur = NLL + np.random.default_rng(3).normal(0.05, 0.2, NLL.size)  # a shift that varies
    for release, items, day in (("r1", NLL, 1), ("r2", cur, 2)):
        st.write_report(release, report(release, [lm_row("gpt", items)], day))
        st.write_items(release, "gpt", items)
    r1, r2 = st.read_stored_report("r1"), st.read_stored_report("r2")
    want = compare_reports(r1, r2, lambda _: NLL, lambda _: cur, n_perm=300, seed=1)
    got = history.compare_stored(st, ("r1", r1), ("r2", r2), n_perm=300, seed=1)
    assert got == want
    (row,) = got.rows
    assert row.lo < row.delta < row.hi and row.delta > 0
