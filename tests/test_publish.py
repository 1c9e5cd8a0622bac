"""tinyllm/publish.py: the merges (a rerun of one entry: only=["gpt"]), check_publish_args,
publish_run (items, run file, comparison, merged report), and concurrent reruns of one release
(compare-and-swap merge, content-addressed items) that lose nothing, locally and on S3."""

from __future__ import annotations

import os

import numpy as np
import pytest
from store_helpers import acc_row, all_files, make_report, make_row

from tinyllm.compare_checks import parse_row
from tinyllm.publish import check_publish_args, merge_report, merge_rows, publish_run
from tinyllm.report import StoredRow
from tinyllm.store import LocalStore, Store, StoreError, StoreExistsError, StoreKeyError, open_store


def typed(*rows: dict) -> list[StoredRow]:
    return [parse_row(r) for r in rows]


def test_merge_rows_replaces_by_name_and_keeps_the_others():
    old = typed(*(make_row(n, i) for i, n in enumerate("abc")))
    (new_b,) = typed(make_row("b", 20.0))
    merged = merge_rows(old, [new_b, *typed(make_row("d", 4.0))])
    assert [(r.name, r.value) for r in merged] == [
        ("a", 0),
        ("b", 20.0),
        ("c", 2),
        ("d", 4.0),
    ]
    assert merged[0] is old[0] and merged[1] is new_b
    # with the manifest's order, a new entry lands in its place
    merged = merge_rows(old, typed(make_row("d", 4.0)), order=["a", "d", "b", "c"])
    assert [r.name for r in merged] == ["a", "d", "b", "c"]
    assert [r.name for r in merge_rows([], typed(make_row("x")))] == ["x"]
    with pytest.raises(StoreError, match="unique names"):
        merge_rows(old, typed(make_row("a"), make_row("a")))


def test_merge_report_keeps_the_first_created_at_and_takes_the_rest_from_the_run():
    old = make_report("r1", "2026-11-29T18:00:00Z", [make_row("a", 1.0), make_row("b", 2.0)])
    new = make_report("r1", "2026-12-05T10:00:00Z", [make_row("b", 20.0)])
    new["tinyllm_version"] = "0.2.0"
    merged = merge_report(old, new)
    assert merged["created_at"] == "2026-11-29T18:00:00Z"
    assert merged["tinyllm_version"] == "0.2.0"
    assert merged["rows"] == [make_row("a", 1.0), make_row("b", 20.0)]
    assert new["rows"] == [make_row("b", 20.0)] and new["created_at"] == "2026-12-05T10:00:00Z"
    assert merge_report(None, new)["created_at"] == "2026-12-05T10:00:00Z"
    no_time = {k: v for k, v in old.items() if k != "created_at"}
    assert merge_report(no_time, new)["created_at"] == "2026-12-05T10:00:00Z"
    # with the manifest order, names the manifest lacks go last, in their merged order
    rows = merge_rows(typed(*old["rows"]), typed(make_row("z"), make_row("c")), order=["c", "b"])
    assert [r.name for r in rows] == ["c", "b", "a", "z"]


def test_merge_report_sorts_by_the_manifest_order():
    old = make_report("r1", "2026-11-29T18:00:00Z", [make_row("a"), make_row("b")])
    new = make_report("r1", "2026-12-05T10:00:00Z", [make_row("c")])
    assert [r["name"] for r in merge_report(old, new, ["c", "b", "a"])["rows"]] == ["c", "b", "a"]
    assert [r["name"] for r in merge_report(old, new)["rows"]] == ["a", "b", "c"]


def test_rerun_of_one_entry_keeps_the_other_rows_and_the_old_run(tmp_path):
    store = open_store(tmp_path)
    first = make_report(
        "r1", "2026-11-29T18:00:00Z", [make_row("bigram"), make_row("gpt", status="error")]
    )
    store.write_run("r1", "run-1", first)
    store.write_report("r1", first)
    store.write_report("r2", make_report("r2", "2026-11-30T18:00:00Z", [make_row("gpt")]))
    # later, gpt alone is rescored for r1
    rerun = make_report("r1", "2026-12-05T10:00:00Z", [make_row("gpt", 2.0)])
    store.write_run("r1", "run-2", rerun)
    store.write_report("r1", merge_report(store.read_report("r1"), rerun))
    merged = store.read_report("r1")
    assert merged["rows"] == [make_row("bigram"), make_row("gpt", 2.0)]
    assert merged["created_at"] == "2026-11-29T18:00:00Z"  # r1 keeps its place in history
    assert store.releases() == ["r1", "r2"]
    assert store.read_run("r1", "run-1") == first  # the earlier run's file is untouched
    assert store.runs("r1") == ["run-1", "run-2"]


def test_check_publish_args_refuses_before_any_scoring(tmp_path):
    root = tmp_path / "evalstore"
    with pytest.raises(StoreError, match=r"^release: expected 1-128 characters"):
        check_publish_args(str(root), "../r1")
    assert not root.exists()  # a bad release is refused before the store is touched
    st = check_publish_args(str(root), "r2")
    assert isinstance(st, LocalStore) and root.is_dir()  # the probe created the folder...
    assert all_files(root) == []  # ...and left nothing behind
    with pytest.raises(StoreKeyError) as ei:
        check_publish_args(str(root), "r2", "r1")
    assert str(ei.value) == (
        f"{root}/releases/r1/report.json: previous: expected a release in the store, "
        "got 'r1' (releases: none)"
    )
    st.write_report("r1", make_report("r1", "2026-11-29T18:00:00Z", []))
    st.write_report("r0", make_report("r0", "2026-11-28T18:00:00Z", []))
    assert isinstance(check_publish_args(str(root), "r2", "r1"), LocalStore)
    with pytest.raises(StoreKeyError, match=r"got 'r9' \(releases: r0, r1\)$"):
        check_publish_args(str(root), "r2", "r9")
    with pytest.raises(StoreError, match=r"^previous: expected 1-128"):
        check_publish_args(str(root), "r2", "a b")
    # a store that cannot be written: the error names the store
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="expected a folder, got the file"):
        check_publish_args(str(tmp_path / "file"), "r2")


def skipped_row(name: str) -> dict:
    row = acc_row(name, np.zeros(1))
    row.update(kind=None, metric=None, value=None, lo=None, hi=None, interval=None, n=None)
    row.update(status="skipped", reason="unknown family 'mystery'", items=None)
    return row


def test_publish_run_writes_items_run_report_and_compare(tmp_path):
    store = open_store(tmp_path)
    zeros, ones = np.zeros(10), np.ones(10)
    run1 = make_report("r1", "2026-11-29T18:00:00Z", [acc_row("a", zeros), skipped_row("b")])
    out = publish_run(store, "r1", run1, {"a": zeros}, order=["a", "b"], run_id="run-1")
    assert set(out) == {"run_id", "report", "compare", "store"}
    assert out["run_id"] == "run-1" and out["store"] == store.uri
    assert out["compare"] is None  # the first release has nothing to be compared with
    assert not store.exists("releases/r1/compare.json")
    ref = out["report"]["rows"][0]["items"]
    assert ref == store.write_items_ref("r1", "a", zeros)  # content-addressed, the same name
    assert out["report"]["rows"][1]["items"] is None  # a row without scores
    assert store.read_report("r1") == out["report"]
    assert store.read_run("r1", "run-1")["rows"] == out["report"]["rows"]
    # a retried publish with the same run id and the same run is fine; another run is refused
    again = publish_run(store, "r1", run1, {"a": zeros}, order=["a", "b"], run_id="run-1")
    assert again["report"] == out["report"]
    other = make_report("r1", "2026-11-29T18:00:00Z", [acc_row("a", ones)])
    with pytest.raises(StoreExistsError):
        publish_run(store, "r1", other, {"a": ones}, run_id="run-1")
    # the next release is compared with the previous one, with the seed given
    run2 = make_report("r2", "2026-11-30T18:00:00Z", [acc_row("a", ones)])
    out2 = publish_run(store, "r2", run2, {"a": ones}, seed=7, run_id="run-1")
    cmp = out2["compare"]
    assert (cmp.previous, cmp.current, cmp.seed) == ("r1", "r2", 7)
    assert cmp.rows[0].verdict == "improved" and cmp.rows[0].p == 2 / 1024
    assert store.read_compare("r2") == cmp
    # an explicit previous; a new row lands where the manifest order puts it
    run3 = make_report("r3", "2026-12-01T18:00:00Z", [acc_row("a", ones)])
    out3 = publish_run(store, "r3", run3, {"a": ones}, run_id="run-1")
    assert out3["compare"].seed == 0  # the default seed
    late = make_report("r3", "2026-12-01T19:00:00Z", [skipped_row("b")])
    out3 = publish_run(store, "r3", late, {}, order=["b", "a"], previous="r1", run_id="run-2")
    assert [r["name"] for r in out3["report"]["rows"]] == ["b", "a"]
    assert out3["compare"].previous == "r1"
    with pytest.raises(StoreError, match=r"^release: expected 1-128"):
        publish_run(store, "r 4", run3, {})


def test_publish_run_recompares_when_another_run_merged_meanwhile(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    zeros, ones = np.zeros(10), np.ones(10)
    publish_run(
        store, "r1", make_report("r1", "2026-11-29T18:00:00Z", [acc_row("a", zeros)]), {"a": zeros}
    )
    written = []
    real = store.write_compare

    def write_compare(release, cmp):
        written.append([r.name for r in cmp.rows])
        real(release, cmp)
        if len(written) == 1:  # another run of r2 merges its row right after our compare
            ref = store.write_items_ref("r2", "b", ones)
            row = dict(acc_row("b", ones), items=ref)
            store.update_report("r2", lambda old: merge_report(old, dict(old, rows=[row])))

    monkeypatch.setattr(store, "write_compare", write_compare)
    run2 = make_report("r2", "2026-11-30T18:00:00Z", [acc_row("a", ones)])
    out = publish_run(store, "r2", run2, {"a": ones})
    assert written == [["a"], ["a", "b"]]  # recomputed once, on the report as it now is
    assert [r.name for r in out["compare"].rows] == ["a", "b"]
    assert [r.name for r in store.read_compare("r2").rows] == ["a", "b"]
    written.clear()
    run3 = make_report("r3", "2026-12-01T18:00:00Z", [acc_row("a", ones)])
    publish_run(store, "r3", run3, {"a": ones})
    assert len(written) == 1  # nobody merged in between: one comparison, written once


N_WRITERS = 8


def _rerun_one_entry(uri: str, i: int, barrier, env: dict) -> None:
    """One `--only e<i>` rerun in its own process: new scores, published at the same moment."""
    os.environ.update(env)
    store = open_store(uri)
    items = (np.random.default_rng(100 + i).random(20 + i) < 0.5).astype(np.float64)
    run = make_report("r1", "2026-11-30T12:00:00Z", [acc_row(f"e{i}", items)])
    order = [f"e{k}" for k in range(N_WRITERS)]
    barrier.wait()
    publish_run(store, "r1", run, {f"e{i}": items}, order=order)


def check_concurrent_reruns(uri: str, env: dict | None = None) -> Store:
    import multiprocessing as mp

    store = open_store(uri)
    order = [f"e{k}" for k in range(N_WRITERS)]
    first = {n: np.zeros(10) for n in order}  # the first run: every entry all wrong, n = 10
    run = make_report("r1", "2026-11-29T18:00:00Z", [acc_row(n, first[n]) for n in order])
    publish_run(store, "r1", run, first, order=order)
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(N_WRITERS)
    procs = [
        ctx.Process(target=_rerun_one_entry, args=(uri, i, barrier, env or {}))
        for i in range(N_WRITERS)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * N_WRITERS
    report = store.read_report("r1")  # valid JSON, or this raises
    from tinyllm.report import validate_report

    validate_report(report)
    assert [r["name"] for r in report["rows"]] == order
    for i, row in enumerate(report["rows"]):
        expected = (np.random.default_rng(100 + i).random(20 + i) < 0.5).astype(np.float64)
        assert row["n"] == 20 + i, f"row e{i} is the old one: a lost update"
        items = store.items_loader("r1")(row["name"])
        # the row and the items it points to agree: same n, same mean, same scores
        assert items.size == row["n"] and items.mean() == pytest.approx(row["value"])
        assert np.array_equal(items, expected)
    assert len(store.runs("r1")) == N_WRITERS + 1
    return store


def test_concurrent_reruns_of_one_release_lose_nothing_local(tmp_path):
    check_concurrent_reruns(str(tmp_path / "store"))
    left = [f for f in all_files(tmp_path / "store") if f.endswith(".tmp")]
    assert left == []


def test_concurrent_reruns_of_one_release_lose_nothing_s3(s3_env):
    import boto3

    boto3.client("s3").create_bucket(Bucket="tl-race")
    env = {k: os.environ[k] for k in os.environ if k.startswith("AWS_")}
    check_concurrent_reruns("s3://tl-race/team", env)


def test_concurrent_reruns_lose_nothing_when_every_report_write_is_slow_s3(s3_env, monkeypatch):
    """The compare-and-swap with the race window held open: moto takes 0.3 s between checking
    a report.json PUT's If-Match and writing it, so racing writers always collide and the 412
    retries always run (on moto's unserialized server this test loses rows)."""
    import boto3
    from s3server import slow_writes

    slow_writes(monkeypatch, 0.3, keys="report.json")
    boto3.client("s3").create_bucket(Bucket="tl-race")
    env = {k: os.environ[k] for k in os.environ if k.startswith("AWS_")}
    check_concurrent_reruns("s3://tl-race/team", env)
