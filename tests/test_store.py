"""The report store: local folder and S3 (a real moto server on 127.0.0.1, reached with boto3)."""

from __future__ import annotations

import io
import json
import math
import os

import numpy as np
import pytest

from tinyllm.store import (
    LocalStore,
    S3Store,
    Store,
    StoreError,
    StoreExistsError,
    StoreKeyError,
    merge_report,
    merge_rows,
    new_run_id,
    open_store,
)

SHA = "ab" * 32


def make_row(name: str, value: float = 1.0, **kw) -> dict:
    row = {
        "name": name,
        "family": "gpt",
        "kind": "lm",
        "metric": "bpb",
        "value": value,
        "lo": value - 0.1,
        "hi": value + 0.1,
        "interval": "student_t",
        "n": 100,
        "status": "ok",
        "error": None,
        "reason": None,
        "checkpoint_sha256": SHA,
        "data_sha256": SHA,
        "seconds": 0.5,
        "items": f"items/{name}.npy",
    }
    row.update(kw)
    return row


def make_report(release: str, created_at: str, rows: list[dict]) -> dict:
    return {
        "schema_version": 1,
        "suite": "zoo",
        "release": release,
        "created_at": created_at,
        "seed": 0,
        "tinyllm_version": "0.1.0",
        "manifest_sha256": SHA,
        "rows": rows,
    }


def all_files(root) -> list[str]:
    """Every file under root, dotfiles (temp files) included."""
    out = []
    for dirpath, _, filenames in os.walk(root):
        out += [os.path.relpath(os.path.join(dirpath, f), root) for f in filenames]
    return sorted(out)


def exercise_store(store) -> None:
    """The same round trip on every backend: write, list history, read back, never overwrite."""
    # release names deliberately NOT in time order: history follows created_at, not the name
    r_new = make_report("a-new", "2026-12-01T09:00:00Z", [make_row("gpt", 2.0)])
    r_old = make_report("b-old", "2026-11-29T18:00:00+00:00", [make_row("gpt", 2.5)])
    r_mid = make_report("c-mid", "2026-11-30T12:00:00Z", [make_row("gpt", 2.2), make_row("bi", 8)])
    for r in (r_new, r_old, r_mid):
        assert store.write_report(r["release"], r) == f"releases/{r['release']}/report.json"
    assert store.releases() == ["b-old", "c-mid", "a-new"]
    assert store.previous_release("a-new") == "c-mid"
    assert store.previous_release("c-mid") == "b-old"
    assert store.previous_release("b-old") is None
    assert store.previous_release("d-next") == "a-new"  # not stored yet: the newest
    assert store.read_report("c-mid") == r_mid

    items = np.random.default_rng(0).exponential(1.0, 257)
    store.write_items("c-mid", "gpt", items)
    back = store.read_items("c-mid", "gpt")
    assert back.dtype == np.float64 and np.array_equal(back, items)
    store.write_items("c-mid", "bi", np.array([0, 1, 1], dtype=np.int64))  # stored as float64
    assert store.items_loader("c-mid")("bi").tolist() == [0.0, 1.0, 1.0]
    assert store.items_loader("c-mid")("bi").dtype == np.float64

    run_id = new_run_id()
    store.write_run("c-mid", run_id, r_mid)
    with pytest.raises(StoreExistsError, match="never overwritten"):
        store.write_run("c-mid", run_id, r_old | {"release": "c-mid"})
    assert store.read_run("c-mid", run_id) == r_mid
    # the byte-level refusal itself (S3: a conditional put, no check-then-write race)
    with pytest.raises(StoreExistsError, match="refusing to overwrite"):
        store.put_bytes(f"releases/c-mid/runs/{run_id}.json", b"{}", overwrite=False)
    assert store.read_run("c-mid", run_id) == r_mid
    assert store.runs("c-mid") == [run_id]

    store.write_compare("a-new", _tiny_compare())
    assert store.read_compare("a-new") == _tiny_compare()

    assert store.list("releases/c-mid/items/") == [
        "releases/c-mid/items/bi.npy",
        "releases/c-mid/items/gpt.npy",
    ]
    assert store.exists("releases/a-new/report.json")
    assert not store.exists("releases/a-new/nothing.json")
    with pytest.raises(
        StoreKeyError, match=r"releases/zz/report\.json.*releases: a-new, b-old, c-mid"
    ):
        store.read_report("zz")
    with pytest.raises(StoreKeyError, match=r"releases/a-new/items/gpt\.npy"):
        store.read_items("a-new", "gpt")
    # a folder with runs but no report (a run that never finished) is not in the history
    store.write_run("e-crashed", new_run_id(), make_report("e-crashed", "2027-01-01T00:00:00Z", []))
    assert store.releases() == ["b-old", "c-mid", "a-new"]


def _tiny_compare() -> dict:
    from tinyllm.compare import compare_reports

    prev = make_report("p", "2026-01-01T00:00:00Z", [make_row("gpt", items=None)])
    cur = make_report("q", "2026-01-02T00:00:00Z", [make_row("gpt", items=None)])
    return compare_reports(prev, cur, None, None)


# --- local folder --------------------------------------------------------------------------------


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


def test_run_ids_sort_by_time():
    from datetime import UTC, datetime

    a = new_run_id(datetime(2026, 11, 29, 18, 0, 0, tzinfo=UTC))
    b = new_run_id(datetime(2026, 11, 29, 18, 0, 1, tzinfo=UTC))
    assert a.startswith("20261129T180000Z-") and a < b


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


def test_items_are_never_unpickled(tmp_path):
    store = open_store(tmp_path)
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    store.put_bytes("releases/r1/items/gpt.npy", buf.getvalue())
    with pytest.raises(StoreError, match="malformed items.*pickle"):
        store.read_items("r1", "gpt")


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


# --- merge (a rerun of one entry: only=["gpt"]) --------------------------------------------------


def test_merge_rows_replaces_by_name_and_keeps_the_others():
    old = make_report("r1", "2026-11-29T18:00:00Z", [make_row(n, i) for i, n in enumerate("abc")])
    new_b = make_row("b", 20.0)
    merged = merge_rows(old, [new_b, make_row("d", 4.0)])
    assert [(r["name"], r["value"]) for r in merged] == [
        ("a", 0),
        ("b", 20.0),
        ("c", 2),
        ("d", 4.0),
    ]
    assert merged[0] is old["rows"][0] and merged[1] is new_b
    # with the manifest's order, a new entry lands in its place
    merged = merge_rows(old, [make_row("d", 4.0)], order=["a", "d", "b", "c"])
    assert [r["name"] for r in merged] == ["a", "d", "b", "c"]
    assert [r["name"] for r in merge_rows(None, [make_row("x")])] == ["x"]
    with pytest.raises(StoreError, match="unique names"):
        merge_rows(old, [make_row("a"), make_row("a")])


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


# --- S3 through a real moto server ---------------------------------------------------------------
# moto_endpoint and s3_env come from tests/conftest.py: one moto server that serializes writes,
# so a conditional PUT is atomic as on S3 (tests/s3server.py)


def test_s3_store_round_trip_against_moto(s3_env):
    import boto3

    s3 = boto3.client("s3")
    assert s3.meta.endpoint_url == s3_env  # the environment picks the endpoint, not our code
    s3.create_bucket(Bucket="tl-evals")
    store = open_store("s3://tl-evals/team/nightly")
    assert isinstance(store, S3Store)
    exercise_store(store)
    # the objects sit under the prefix, in the documented layout
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="tl-evals")["Contents"]]
    assert "team/nightly/releases/c-mid/report.json" in keys
    assert all(k.startswith("team/nightly/releases/") for k in keys)
    body = s3.get_object(Bucket="tl-evals", Key="team/nightly/releases/c-mid/items/gpt.npy")
    assert np.load(io.BytesIO(body["Body"].read()), allow_pickle=False).shape == (257,)
    # another prefix in the same bucket is another store
    assert open_store("s3://tl-evals/other").releases() == []


def test_s3_missing_bucket_is_a_clear_error(s3_env):
    store = open_store("s3://tl-no-such-bucket/x")
    with pytest.raises(StoreKeyError, match="no such bucket 'tl-no-such-bucket'"):
        store.releases()


# --- concurrent reruns: compare-and-swap merge, content-addressed items (issue 12, item 1) --------

N_WRITERS = 8


def full_row(name: str, items: np.ndarray) -> dict:
    """A schema-valid accuracy row whose value and n are its items' mean and length."""
    return {
        "name": name,
        "family": "classifier",
        "kind": "classifier",
        "metric": "acc",
        "value": float(items.mean()),
        "lo": 0.0,
        "hi": 1.0,
        "interval": "wilson",
        "n": int(items.size),
        "status": "ok",
        "error": None,
        "reason": None,
        "checkpoint_sha256": SHA,
        "data_sha256": SHA,
        "seconds": 0.1,
        "items": f"items/{name}.npy",
        "checkpoint": f"{name}/",
        "data": "rows.tsv",
        "options": {},
        "details": None,
    }


def _rerun_one_entry(uri: str, i: int, barrier, env: dict) -> None:
    """One `--only e<i>` rerun in its own process: new scores, published at the same moment."""
    os.environ.update(env)
    from tinyllm.store import publish_run

    store = open_store(uri)
    items = (np.random.default_rng(100 + i).random(20 + i) < 0.5).astype(np.float64)
    run = make_report("r1", "2026-11-30T12:00:00Z", [full_row(f"e{i}", items)])
    order = [f"e{k}" for k in range(N_WRITERS)]
    barrier.wait()
    publish_run(store, "r1", run, {f"e{i}": items}, order=order)


def check_concurrent_reruns(uri: str, env: dict | None = None) -> Store:
    import multiprocessing as mp

    from tinyllm.store import publish_run

    store = open_store(uri)
    order = [f"e{k}" for k in range(N_WRITERS)]
    first = {n: np.zeros(10) for n in order}  # the first run: every entry all wrong, n = 10
    run = make_report("r1", "2026-11-29T18:00:00Z", [full_row(n, first[n]) for n in order])
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


def test_s3_compare_and_swap_retries_a_lost_race(s3_env):
    """If-Match on the ETag: a write that slips in between read and put is not overwritten."""
    import boto3

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="tl-cas")
    store = open_store("s3://tl-cas/p")
    store.put_json("releases/r1/x.json", {"n": 0})
    calls = []

    def bump(old):
        calls.append(old["n"])
        if len(calls) == 1:  # another writer gets in after our read
            s3.put_object(Bucket="tl-cas", Key="p/releases/r1/x.json", Body=b'{"n": 10}')
        return {"n": old["n"] + 1}

    assert store.update_json("releases/r1/x.json", bump) == {"n": 11}
    assert calls == [0, 10]  # the first put got 412, the retry saw the other write
    assert store.get_json("releases/r1/x.json") == {"n": 11}
    # a new key: If-None-Match: *
    assert store.update_json("releases/r1/y.json", lambda old: {"was": old}) == {"was": None}


def test_items_are_content_addressed_and_old_stores_still_read(tmp_path):
    store = open_store(tmp_path)
    a, b = np.array([0.0, 1.0]), np.array([1.0, 1.0, 0.0])
    ref_a = store.write_items_ref("r1", "gpt", a)
    assert ref_a.startswith("items/gpt-") and ref_a.endswith(".npy")
    assert store.write_items_ref("r1", "gpt", a) == ref_a  # same scores, same name
    ref_b = store.write_items_ref("r1", "gpt", b)
    assert ref_b != ref_a and np.array_equal(store.read_items("r1", "gpt", ref_a), a)
    # an old store: rows say items/<entry>.npy and the file has that fixed name
    store.write_items("r0", "gpt", b)
    store.write_report("r0", make_report("r0", "2026-01-01T00:00:00Z", [make_row("gpt")]))
    assert np.array_equal(store.items_loader("r0")("gpt"), b)
    store.write_report(
        "r1", make_report("r1", "2026-01-02T00:00:00Z", [make_row("gpt", items=ref_a)])
    )
    assert np.array_equal(store.items_loader("r1")("gpt"), a)
    with pytest.raises(StoreError, match="expected a reference like"):
        store.read_items("r1", "gpt", "../../x.npy")


def test_one_corrupt_old_report_does_not_stop_later_releases_from_being_compared(tmp_path):
    # r2's report.json is corrupted after it was published: r3 is still published and compared,
    # against r1 (the last readable release, named in compare.json), with a warning naming r2
    from tinyllm.store import publish_run

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
    assert out["compare"]["previous"] == "r1"
    assert out["compare"]["rows"][0]["verdict"] == "regressed"
    assert store.read_compare("r3") == out["compare"]
    with pytest.warns(UserWarning):
        assert store.previous_release("r4") == "r3"


# ---- oracles written for mutants that survived `make mutate MODULE=tinyllm/store.py` ----------
# (docs/mutation.md)


def test_check_publish_args_refuses_before_any_scoring(tmp_path):
    from tinyllm.store import check_publish_args

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


def test_iter_reports_walks_the_history_oldest_first(tmp_path):
    from tinyllm.store import iter_reports

    store = open_store(tmp_path)
    b = make_report("b", "2026-11-29T18:00:00Z", [make_row("gpt")])
    a = make_report("a", "2026-11-30T18:00:00Z", [make_row("gpt", 2.0)])
    store.write_report("a", a)
    store.write_report("b", b)
    assert list(iter_reports(store)) == [("b", b), ("a", a)]
    assert list(iter_reports(store, ["a"])) == [("a", a)]


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


def test_s3_site_files_check_writable_and_missing_bucket(s3_env):
    import boto3

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="tl-site")
    store = open_store("s3://tl-site/p")
    store.check_writable()
    assert "Contents" not in s3.list_objects_v2(Bucket="tl-site")  # the probe is gone
    assert store.write_site_file("dashboard/app.js", b"x=1", "text/javascript") == (
        "dashboard/app.js"
    )
    head = s3.head_object(Bucket="tl-site", Key="p/dashboard/app.js")
    assert head["ContentType"] == "text/javascript"  # static hosting serves it as such
    with pytest.raises(StoreError) as ei:
        store.write_site_file("releases/r1/x.json", b"{}", "application/json")
    assert str(ei.value) == (
        "s3://tl-site/p/releases/r1/x.json: expected a key under dashboard/, "
        "got 'releases/r1/x.json'"
    )
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="tl-site")["Contents"]] == [
        "p/dashboard/app.js"
    ]
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError) as ei:
        open_store("s3://tl-no-bucket/x").check_writable()
    assert "store s3://tl-no-bucket/x/" in ei.value.__notes__


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


def test_items_references_are_checked():
    assert Store.ref_key("r1", "items/gpt-0123.npy") == "releases/r1/items/gpt-0123.npy"
    for bad in ("items/a/b.npy", "other/a.npy", "items/a.txt", "a.npy", 5, None):
        with pytest.raises(StoreError) as ei:
            Store.ref_key("r1", bad)
        assert str(ei.value) == f"items: expected a reference like 'items/<name>.npy', got {bad!r}"
    with pytest.raises(StoreError, match=r"^key: expected '/'-separated"):
        Store.ref_key("r1", "items/.npy")
    with pytest.raises(StoreError, match=r"^release: expected"):
        Store.ref_key("../r1", "items/a.npy")


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
    rows = merge_rows(old, [make_row("z"), make_row("c")], order=["c", "b"])
    assert [r["name"] for r in rows] == ["c", "b", "a", "z"]


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


def skipped_row(name: str) -> dict:
    row = full_row(name, np.zeros(1))
    row.update(kind=None, metric=None, value=None, lo=None, hi=None, interval=None, n=None)
    row.update(status="skipped", reason="unknown family 'mystery'", items=None)
    return row


def test_publish_run_writes_items_run_report_and_compare(tmp_path):
    from tinyllm.store import publish_run

    store = open_store(tmp_path)
    zeros, ones = np.zeros(10), np.ones(10)
    run1 = make_report("r1", "2026-11-29T18:00:00Z", [full_row("a", zeros), skipped_row("b")])
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
    other = make_report("r1", "2026-11-29T18:00:00Z", [full_row("a", ones)])
    with pytest.raises(StoreExistsError):
        publish_run(store, "r1", other, {"a": ones}, run_id="run-1")
    # the next release is compared with the previous one, with the seed given
    run2 = make_report("r2", "2026-11-30T18:00:00Z", [full_row("a", ones)])
    out2 = publish_run(store, "r2", run2, {"a": ones}, seed=7, run_id="run-1")
    cmp = out2["compare"]
    assert (cmp["previous"], cmp["current"], cmp["seed"]) == ("r1", "r2", 7)
    assert cmp["rows"][0]["verdict"] == "improved" and cmp["rows"][0]["p"] == 2 / 1024
    assert store.read_compare("r2") == cmp
    # an explicit previous; a new row lands where the manifest order puts it
    run3 = make_report("r3", "2026-12-01T18:00:00Z", [full_row("a", ones)])
    out3 = publish_run(store, "r3", run3, {"a": ones}, run_id="run-1")
    assert out3["compare"]["seed"] == 0  # the default seed
    late = make_report("r3", "2026-12-01T19:00:00Z", [skipped_row("b")])
    out3 = publish_run(store, "r3", late, {}, order=["b", "a"], previous="r1", run_id="run-2")
    assert [r["name"] for r in out3["report"]["rows"]] == ["b", "a"]
    assert out3["compare"]["previous"] == "r1"
    with pytest.raises(StoreError, match=r"^release: expected 1-128"):
        publish_run(store, "r 4", run3, {})


def test_publish_run_recompares_when_another_run_merged_meanwhile(tmp_path, monkeypatch):
    from tinyllm.store import publish_run

    store = open_store(tmp_path)
    zeros, ones = np.zeros(10), np.ones(10)
    publish_run(
        store, "r1", make_report("r1", "2026-11-29T18:00:00Z", [full_row("a", zeros)]), {"a": zeros}
    )
    written = []
    real = store.write_compare

    def write_compare(release, cmp):
        written.append([r["name"] for r in cmp["rows"]])
        real(release, cmp)
        if len(written) == 1:  # another run of r2 merges its row right after our compare
            ref = store.write_items_ref("r2", "b", ones)
            row = dict(full_row("b", ones), items=ref)
            store.update_report("r2", lambda old: merge_report(old, dict(old, rows=[row])))

    monkeypatch.setattr(store, "write_compare", write_compare)
    run2 = make_report("r2", "2026-11-30T18:00:00Z", [full_row("a", ones)])
    out = publish_run(store, "r2", run2, {"a": ones})
    assert written == [["a"], ["a", "b"]]  # recomputed once, on the report as it now is
    assert [r["name"] for r in out["compare"]["rows"]] == ["a", "b"]
    assert [r["name"] for r in store.read_compare("r2")["rows"]] == ["a", "b"]
    written.clear()
    run3 = make_report("r3", "2026-12-01T18:00:00Z", [full_row("a", ones)])
    publish_run(store, "r3", run3, {"a": ones})
    assert len(written) == 1  # nobody merged in between: one comparison, written once


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
        store.write_compare("r1", {"rows": []})
    assert str(ei.value).startswith(
        f"{w}/r1/compare.json: compare.json: expected an object matching compare.schema.json"
    )
    (tmp_path / "releases/r1/folder.json").mkdir()
    with pytest.raises(StoreError) as ei:
        store.get_bytes("releases/r1/folder.json")
    assert str(ei.value) == f"{w}/r1/folder.json: expected a file, got a folder"
    with pytest.raises(StoreKeyError) as ei:
        store.get_bytes("releases/r1/report.json/x")  # a file where a folder should be
    assert str(ei.value) == f"{w}/r1/report.json/x: no such key"


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


def test_local_errors_carry_a_note_naming_the_key(tmp_path):
    store = open_store(tmp_path)
    (tmp_path / "releases").write_text("a file where the releases folder should be")
    with pytest.raises(OSError) as ei:
        store.put_bytes("releases/r1/x.json", b"{}")
    assert f"{tmp_path}/releases/r1/x.json" in ei.value.__notes__
    with pytest.raises(OSError) as ei:
        store.put_json("releases/r1/x.json", {})
    assert f"{tmp_path}/releases/r1/x.json" in ei.value.__notes__
    with pytest.raises(OSError) as ei:
        store.update_json("releases/r1/x.json", lambda old: {})
    assert f"{tmp_path}/releases/r1/x.json" in ei.value.__notes__


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


def test_items_are_written_checked_and_read_back(tmp_path):
    import hashlib

    store = open_store(tmp_path)
    w = f"{tmp_path}/releases/r1/items"
    for bad in (np.array(["a", "b"]), np.array([{}, {}], dtype=object), np.zeros((2, 2))):
        with pytest.raises(StoreError) as ei:
            store.write_items("r1", "gpt", bad)
        assert str(ei.value) == (
            f"{w}/gpt.npy: expected a 1-d numeric array of per-item scores, got dtype "
            f"{bad.dtype} shape {bad.shape}"
        )
    with pytest.raises(StoreError, match=rf"^{w}/gpt.npy: expected a 1-d numeric array"):
        store.write_items_ref("r1", "gpt", np.array(["a"]))
    hits = np.array([True, False, True])
    ref = store.write_items_ref("r1", "gpt", hits)
    data = (tmp_path / "releases/r1" / ref).read_bytes()
    assert ref == f"items/gpt-{hashlib.sha256(data).hexdigest()[:16]}.npy"
    back = store.read_items("r1", "gpt", ref)
    assert back.dtype == np.float64 and back.tolist() == [1.0, 0.0, 1.0]
    # stored files that are not a 1-d array: refused with their shape
    buf = io.BytesIO()
    np.save(buf, np.zeros((2, 2)))
    store.put_bytes("releases/r1/items/two.npy", buf.getvalue())
    buf = io.BytesIO()
    np.save(buf, np.float64(3.0))
    store.put_bytes("releases/r1/items/zero.npy", buf.getvalue())
    buf = io.BytesIO()
    np.savez(buf, a=np.zeros(2))
    store.put_bytes("releases/r1/items/npz.npy", buf.getvalue())
    for name, shape in (("two", (2, 2)), ("zero", ()), ("npz", None)):
        with pytest.raises(StoreError) as ei:
            store.read_items("r1", name)
        assert str(ei.value) == (
            f"{w}/{name}.npy: expected a 1-d array of per-item scores, got shape {shape}"
        )


def test_items_loader_follows_the_given_report_then_the_fixed_names(tmp_path):
    store = open_store(tmp_path)
    a, b = np.array([1.0, 2.0]), np.array([3.0])
    ref = store.write_items_ref("r1", "gpt", a)
    store.write_items("r1", "gpt", b)  # the fixed name holds other scores
    store.write_items("r1", "bi", b)
    # no report stored yet: fixed names
    assert np.array_equal(store.items_loader("r1")("gpt"), b)
    # a given report wins over the stored one, and a name without a row uses the fixed name
    report = make_report("r1", "2026-11-29T18:00:00Z", [make_row("gpt", items=ref)])
    load = store.items_loader("r1", report)
    assert np.array_equal(load("gpt"), a) and np.array_equal(load("bi"), b)
    # the stored report is read on first use, not when the loader is made
    lazy = store.items_loader("r1")
    store.write_report("r1", report)
    assert np.array_equal(lazy("gpt"), a)


def test_merge_report_sorts_by_the_manifest_order():
    old = make_report("r1", "2026-11-29T18:00:00Z", [make_row("a"), make_row("b")])
    new = make_report("r1", "2026-12-05T10:00:00Z", [make_row("c")])
    assert [r["name"] for r in merge_report(old, new, ["c", "b", "a"])["rows"]] == ["c", "b", "a"]
    assert [r["name"] for r in merge_report(old, new)["rows"]] == ["a", "b", "c"]


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


# --- S3-compatible servers differ: the real moto client behind a thin proxy that answers one
# call the way another server would (an error code, no conditional writes). The server stays real.


class ServerQuirks:
    """A boto3 S3 client (here: moto's) that fails chosen calls with a chosen error code and
    renames the codes of real errors, the way other S3-compatible servers answer."""

    def __init__(self, client, fail=None, rename=None):
        self._client = client
        self.fail = fail or (lambda op, kw: None)  # (operation, kwargs) -> error code or None
        self.rename = rename or {}
        self.calls: list[tuple[str, dict]] = []

    def __getattr__(self, name):
        from botocore.exceptions import ClientError

        real = getattr(self._client, name)
        if name not in ("put_object", "get_object", "head_object", "delete_object"):
            return real

        def call(**kw):
            self.calls.append((name, kw))
            code = self.fail(name, kw)
            if code:
                raise ClientError({"Error": {"Code": code, "Message": code}}, name)
            try:
                return real(**kw)
            except ClientError as e:
                old = e.response["Error"]["Code"]
                e.response["Error"]["Code"] = self.rename.get(old, old)
                raise

        return call


def _conditional(op, kw):
    return op == "put_object" and ("IfNoneMatch" in kw or "IfMatch" in kw)


@pytest.fixture
def s3(s3_env):
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket="tl-q")
    return client


@pytest.mark.parametrize("code", ["NotImplemented", "501"])
def test_s3_without_conditional_writes(s3, code):
    quirky = ServerQuirks(s3, fail=lambda op, kw: code if _conditional(op, kw) else None)
    store = open_store("s3://tl-q/p", client=quirky)
    assert store.client is quirky
    # write-once falls back to check-then-write
    store.put_bytes("releases/r1/runs/a.json", b"1", overwrite=False)
    assert s3.get_object(Bucket="tl-q", Key="p/releases/r1/runs/a.json")["Body"].read() == b"1"
    with pytest.raises(StoreExistsError) as ei:
        store.put_bytes("releases/r1/runs/a.json", b"2", overwrite=False)
    assert str(ei.value) == "s3://tl-q/p/releases/r1/runs/a.json: refusing to overwrite; it exists"
    assert s3.get_object(Bucket="tl-q", Key="p/releases/r1/runs/a.json")["Body"].read() == b"1"
    # a merge of report.json cannot be made safe: refused, nothing written
    with pytest.raises(StoreError) as ei:
        store.update_json("releases/r1/x.json", lambda old: {"n": 1})
    assert str(ei.value) == (
        "s3://tl-q/p/releases/r1/x.json: expected an S3 server with conditional writes "
        f"(If-Match), got {code}: the release report cannot be merged safely"
    )
    assert not store.exists("releases/r1/x.json")


@pytest.mark.parametrize("code", ["PreconditionFailed", "412", "ConditionalRequestConflict", "409"])
def test_s3_write_once_refusal_codes(s3, code):
    quirky = ServerQuirks(s3, fail=lambda op, kw: code if _conditional(op, kw) else None)
    store = open_store("s3://tl-q/p", client=quirky)
    with pytest.raises(StoreExistsError) as ei:
        store.put_bytes("releases/r1/runs/a.json", b"1", overwrite=False)
    assert str(ei.value) == "s3://tl-q/p/releases/r1/runs/a.json: refusing to overwrite; it exists"


def test_s3_other_errors_are_raised_with_a_note_and_nothing_written(s3):
    from botocore.exceptions import ClientError

    quirky = ServerQuirks(s3, fail=lambda op, kw: "AccessDenied" if op == "put_object" else None)
    store = open_store("s3://tl-q/p", client=quirky)
    for overwrite in (True, False):
        with pytest.raises(ClientError) as ei:
            store.put_bytes("releases/r1/a.json", b"1", overwrite=overwrite)
        assert ei.value.response["Error"]["Code"] == "AccessDenied"
        assert ei.value.__notes__ == ["s3://tl-q/p/releases/r1/a.json"]
    with pytest.raises(ClientError) as ei:
        store.update_json("releases/r1/a.json", lambda old: {})
    assert ei.value.__notes__ == ["s3://tl-q/p/releases/r1/a.json"]
    assert "Contents" not in s3.list_objects_v2(Bucket="tl-q")
    # a plain put overwrites by default
    plain = open_store("s3://tl-q/p")
    plain.put_bytes("releases/r1/a.json", b"1")
    plain.put_bytes("releases/r1/a.json", b"2")
    assert plain.get_bytes("releases/r1/a.json") == b"2"


@pytest.mark.parametrize("code", ["PreconditionFailed", "412", "ConditionalRequestConflict", "409"])
def test_s3_compare_and_swap_retries_on_every_lost_race_code(s3, code, monkeypatch):
    import tinyllm.store.s3 as st  # the S3 backend waits with its time.sleep

    monkeypatch.setattr(st, "time", type("T", (), {"sleep": staticmethod(lambda s: None)}))
    lost = []

    def fail(op, kw):
        if _conditional(op, kw) and not lost:
            lost.append(code)
            return code
        return None

    store = open_store("s3://tl-q/p", client=ServerQuirks(s3, fail=fail))
    assert store.update_json("releases/r1/x.json", lambda old: {"was": old}) == {"was": None}
    assert lost == [code] and store.get_json("releases/r1/x.json") == {"was": None}


def test_s3_compare_and_swap_gives_up_after_20_lost_races_backing_off(s3, monkeypatch):
    import tinyllm.store.s3 as st  # the S3 backend waits with its time.sleep

    sleeps, draws = [], []
    monkeypatch.setattr(st, "time", type("T", (), {"sleep": staticmethod(sleeps.append)}))
    monkeypatch.setattr(
        st,
        "random",
        type("R", (), {"uniform": staticmethod(lambda a, b: draws.append((a, b)) or b)}),
    )
    quirky = ServerQuirks(s3, fail=lambda op, kw: "412" if _conditional(op, kw) else None)
    store = open_store("s3://tl-q/p", client=quirky)
    calls = []
    with pytest.raises(st.StoreConflictError) as ei:
        store.update_json("releases/r1/x.json", lambda old: calls.append(old) or {"n": 1})
    assert str(ei.value) == (
        "s3://tl-q/p/releases/r1/x.json: compare-and-swap lost 20 times in a row; "
        "too many concurrent writers of this key"
    )
    assert len(calls) == 20
    # full jitter: uniform(0, delay), the delay doubling from 0.05 s up to 2 s
    delays = [0.05, 0.1, 0.2, 0.4, 0.8, 1.6] + [2.0] * 14
    assert draws == [(0, d) for d in delays] and sleeps == delays


def test_s3_new_key_race_uses_if_none_match(s3):
    # our read finds no object; another writer creates it before our put: we must not clobber it
    store = open_store("s3://tl-q/p")
    seen = []

    def create(old):
        seen.append(old)
        if len(seen) == 1:
            s3.put_object(Bucket="tl-q", Key="p/releases/r1/new.json", Body=b'{"n": 5}')
        return {"n": (old or {"n": 0})["n"] + 1}

    assert store.update_json("releases/r1/new.json", create) == {"n": 6}
    assert seen == [None, {"n": 5}]


def test_s3_missing_keys_buckets_and_malformed_objects(s3):
    store = open_store("s3://tl-q/p")
    with pytest.raises(StoreKeyError) as ei:
        store.get_bytes("releases/r1/x.json")
    assert str(ei.value) == "s3://tl-q/p/releases/r1/x.json: no such key"
    gone = open_store("s3://tl-gone/p")
    with pytest.raises(StoreKeyError) as ei:
        gone.get_bytes("releases/r1/x.json")
    assert str(ei.value) == "s3://tl-gone/p/: no such bucket 'tl-gone'"
    with pytest.raises(StoreKeyError) as ei:
        gone.update_json("releases/r1/x.json", lambda old: {})
    assert str(ei.value) == "s3://tl-gone/p/: no such bucket 'tl-gone'"
    store.put_bytes("releases/r1/x.json", b"{")
    with pytest.raises(StoreError) as ei:
        store.update_json("releases/r1/x.json", lambda old: old)
    assert str(ei.value).startswith("s3://tl-q/p/releases/r1/x.json: malformed JSON: expected JSON")
    store.put_bytes("releases/r1/report.json", b"{")
    with pytest.raises(StoreError) as ei:
        store.update_report("r1", lambda old: old)
    assert str(ei.value).startswith(
        "s3://tl-q/p/releases/r1/report.json: malformed report: expected JSON"
    )


@pytest.mark.parametrize("code", ["NoSuchKey", "404", "NotFound"])
def test_s3_not_found_in_any_of_its_spellings(s3, code):
    rename = {"NoSuchKey": code, "404": code}
    store = open_store("s3://tl-q/p", client=ServerQuirks(s3, rename=rename))
    assert store.exists("releases/r1/x.json") is False
    with pytest.raises(StoreKeyError, match="no such key"):
        store.get_bytes("releases/r1/x.json")
    store.put_bytes("releases/r1/x.json", b"1")
    assert store.exists("releases/r1/x.json") is True


def test_s3_uris_and_prefixes(s3):
    from tinyllm.store import S3Store

    assert (
        S3Store("tl-q", client=s3).prefix == "" and S3Store("tl-q", client=s3).uri == "s3://tl-q/"
    )
    assert S3Store("tl-q", "/", client=s3).prefix == ""
    assert S3Store("tl-q", "/a/b/", client=s3).prefix == "a/b/"
    assert S3Store("tl-q", "/a/b/", client=s3).uri == "s3://tl-q/a/b/"
    root = open_store("s3://tl-q")
    assert (root.bucket, root.prefix, root.uri) == ("tl-q", "", "s3://tl-q/")
    root.put_bytes("releases/r1/x.json", b"1")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="tl-q")["Contents"]] == [
        "releases/r1/x.json"
    ]
    assert root.where("releases/r1/x.json") == "s3://tl-q/releases/r1/x.json"
    assert root.list() == ["releases/r1/x.json"]
    assert open_store("s3://tl-q/releases").list() == ["r1/x.json"]
    # names 3 to 63 characters
    assert open_store("s3://abc/x").bucket == "abc"
    assert open_store("s3://" + "a" * 63 + "/x").bucket == "a" * 63
    for bad in ("s3://ab/x", "s3://" + "a" * 64 + "/x"):
        with pytest.raises(StoreError, match="expected s3://bucket/prefix"):
            open_store(bad)


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


def test_a_malformed_run_file_names_its_key(tmp_path):
    store = open_store(tmp_path)
    store.put_bytes("releases/r1/runs/run-1.json", b'{"created_at": "2026-11-29", "rows": {}}')
    with pytest.raises(StoreError) as ei:
        store.read_run("r1", "run-1")
    assert str(ei.value) == (
        f"{tmp_path}/releases/r1/runs/run-1.json: expected 'rows' to be a list, got dict"
    )


def test_s3_read_errors_carry_a_note_naming_the_key(s3):
    from botocore.exceptions import ClientError

    def fail(op, kw):
        return "AccessDenied" if op in ("get_object", "head_object") else None

    store = open_store("s3://tl-q/p", client=ServerQuirks(s3, fail=fail))
    for call in (store.get_bytes, store.exists):
        with pytest.raises(ClientError) as ei:
            call("releases/r1/x.json")
        assert ei.value.__notes__ == ["s3://tl-q/p/releases/r1/x.json"]


def test_s3_prefixes_keep_their_own_characters(s3):
    # only '/' is stripped from a prefix: "X" at either end is part of the name
    store = open_store("s3://tl-q/X/team/X")
    assert (store.prefix, store.uri) == ("X/team/X/", "s3://tl-q/X/team/X/")
    assert store.where("releases/r1") == "s3://tl-q/X/team/X/releases/r1"
    store.write_site_file("dashboard/index.html", b"<html>", "text/html")
    body = s3.get_object(Bucket="tl-q", Key="X/team/X/dashboard/index.html")["Body"].read()
    assert body == b"<html>"


def test_s3_listing_errors_name_the_prefix_and_a_one_letter_prefix_is_kept(s3):
    from botocore.exceptions import ClientError

    assert open_store("s3://tl-q/X").prefix == "X/"

    def deny(**kw):
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "ListObjectsV2")

    s3.meta.events.register("before-call.s3.ListObjectsV2", deny)
    store = open_store("s3://tl-q/p", client=s3)
    with pytest.raises(ClientError) as ei:
        store.list("releases/")
    assert ei.value.__notes__ == ["s3://tl-q/p/releases/"]
    with pytest.raises(ClientError) as ei:
        store.list()
    assert ei.value.__notes__ == ["s3://tl-q/p/"]


def test_history_breaks_equal_times_by_release_name(tmp_path):
    # "r1-b/..." sorts before "r1/..." as a key ('-' < '/'), but the history orders by name
    store = open_store(tmp_path)
    for name in ("r1-b", "r1", "r0"):
        store.write_report(name, make_report(name, "2026-11-29T18:00:00Z", []))
    assert store.list("releases/")[1] == "releases/r1-b/report.json"  # listing order
    assert store.releases() == ["r0", "r1", "r1-b"]
    assert store.previous_release("r1-b") == "r1"


def test_items_loader_with_a_report_without_rows_uses_the_fixed_names(tmp_path):
    store = open_store(tmp_path)
    store.write_items("r1", "gpt", np.array([1.0, 2.0]))
    assert store.items_loader("r1", {})("gpt").tolist() == [1.0, 2.0]
