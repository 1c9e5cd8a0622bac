"""A bad stored file must not take down the store's readers.

Every stored document has one validated reader: ``read_report`` / ``read_run`` (the report
schema), ``read_compare`` (compare.schema.json), ``read_items`` (a float64 ``.npy`` whose header
agrees with its size), ``history_entries`` (an unreadable release is an entry with its error).
The bad files are real files in a real folder (FIFOs and devices made in tmp_path) or real
objects on a moto S3 server reached with boto3.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import stat
import uuid

import numpy as np
import pytest
from fs_helpers import within
from store_helpers import acc_row

import tinyllm.compare as cm
import tinyllm.store as st
from tinyllm.compare import compare_reports, compare_row
from tinyllm.compare_checks import parse_row, row_items_problem
from tinyllm.publish import check_publish_args, publish_run
from tinyllm.report import ManifestError, ReportSchemaError, load_manifest, stored_report
from tinyllm.stats import LN2
from tinyllm.store import StoreError, StoreKeyError, open_store

SHA = "ab" * 32


def bpb_row(name: str, nll: np.ndarray, **kw) -> dict:
    """An LM row: bpb = mean per-token NLL (nats) / ln 2, one byte per token."""
    row = acc_row(name, nll, family="gpt", kind="lm", metric="bpb", interval="student_t")
    value = float(np.mean(nll)) / LN2
    row.update(value=value, lo=value - 0.01, hi=value + 0.01)
    row.update(kw)
    return row


def report(release: str, day: int, rows: list[dict]) -> dict:
    return {
        "schema_version": 1,
        "suite": "zoo",
        "release": release,
        "created_at": f"2026-11-{day:02d}T18:00:00Z",
        "seed": 0,
        "tinyllm_version": "0.1.0",
        "manifest_sha256": SHA,
        "rows": rows,
    }


def hits(seed: int, n: int = 40) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < 0.6).astype(np.float64)


def publish(store, release: str, day: int, seed: int, **kw) -> dict:
    items = {"a": hits(seed), "b": hits(seed + 1)}
    rows = [acc_row(n, v) for n, v in items.items()]
    return publish_run(store, release, report(release, day, rows), items, **kw)


# --- S3: moto's server on 127.0.0.1, reached with boto3 (each test its own bucket) -------------


@pytest.fixture
def s3(moto_endpoint):
    """``(client, uri)``: a boto3 client of the moto server and a store URI in a new bucket."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bucket = f"tl-faults-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return client, bucket


# --- 6a: a stray folder whose name is not a release name -----------------------------------------


def test_a_stray_folder_is_an_unreadable_entry_and_publishing_goes_on(tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    publish(store, "v1", 1, seed=0, run_id="20261101T190000Z-0000a1")
    shutil.copytree(root / "releases" / "v1", root / "releases" / "v1 copy")  # a desktop's copy
    key = f"{root}/releases/v1 copy/report.json"
    why = (
        f"{key}: release folder: expected 1-128 characters of [A-Za-z0-9._-] not starting with "
        "'.', '-' or '_', got 'v1 copy'"
    )
    v1_time = store.history_entries()[0].created_at
    # the copy has v1's run ids, so it is placed beside v1, by the time in its first run id
    assert store.history_entries() == [
        st.HistoryEntry("v1", v1_time),
        st.HistoryEntry("v1 copy", None, why),
    ]
    assert not store.history_entries()[1].readable
    with pytest.raises(st.StoreUnreadableError) as ei:
        store.history()
    assert str(ei.value) == why
    with pytest.warns(UserWarning, match="left out of the history: .*v1 copy"):
        assert [n for n, _ in store.history(skip_unreadable=True)] == ["v1"]
    # the next publish is complete: report, comparison with v1, compare.json
    with pytest.warns(UserWarning, match="v1 copy"):
        out = publish(store, "v2", 2, seed=10)
    assert out["compare"].previous == "v1"
    assert store.read_compare("v2") == out["compare"]
    assert json.loads((root / "releases/v2/compare.json").read_text()) == out["compare"].to_json()


def test_a_stray_s3_key_is_an_unreadable_entry_and_publishing_goes_on(s3):
    client, bucket = s3
    store = open_store(f"s3://{bucket}/team", client=client)
    publish(store, "v1", 1, seed=0)
    body = client.get_object(Bucket=bucket, Key="team/releases/v1/report.json")["Body"].read()
    client.put_object(Bucket=bucket, Key="team/releases/v1 copy/report.json", Body=body)
    (entry,) = [e for e in store.history_entries() if not e.readable]
    assert entry.release == "v1 copy" and entry.created_at is None
    assert entry.error.startswith(
        f"s3://{bucket}/team/releases/v1 copy/report.json: release folder"
    )
    with pytest.warns(UserWarning, match="v1 copy"):
        out = publish(store, "v2", 2, seed=10)
    assert out["compare"].previous == "v1" and store.read_compare("v2") == out["compare"]


# --- 7: schema-invalid documents are refused on read, naming the key -----------------------------


def test_a_schema_invalid_compare_json_is_unreadable_naming_the_key(tmp_path):
    store = open_store(tmp_path)
    publish(store, "r1", 1, seed=0)
    good = publish(store, "r2", 2, seed=5)["compare"].to_json()
    w = f"{tmp_path}/releases/r3/compare.json"
    store.write_report("r3", report("r3", 3, []))
    store.put_bytes("releases/r3/compare.json", b'{"rows": []}')
    with pytest.raises(st.StoreUnreadableError) as ei:
        store.read_compare("r3")
    assert str(ei.value) == (
        f"{w}: expected an object matching compare.schema.json, got at (top "
        "level): 'schema_version' is a required property (and 10 more errors)"
    )
    no_verdict = dict(good, rows=[{k: v for k, v in good["rows"][0].items() if k != "verdict"}])
    store.put_json("releases/r3/compare.json", no_verdict)
    with pytest.raises(st.StoreUnreadableError) as ei:
        store.read_compare("r3")
    assert str(ei.value) == (
        f"{w}: expected an object matching compare.schema.json, got at rows/0: "
        "'verdict' is a required property"
    )
    store.put_bytes("releases/r3/compare.json", b'{"rows": 5}')
    with pytest.raises(st.StoreUnreadableError) as ei:
        store.read_compare("r3")
    assert str(ei.value) == f"{w}: expected 'rows' to be a list, got int"
    assert isinstance(ei.value, StoreError)  # what the CLI and the dashboard catch


def test_a_schema_invalid_report_is_unreadable_and_the_history_goes_on(tmp_path):
    store = open_store(tmp_path)
    publish(store, "r1", 1, seed=0)
    bad = report("r2", 2, [acc_row("a", hits(3), value="0.5")])
    store.write_report("r2", bad)  # the store's own checks pass: created_at, rows, names
    publish(store, "r3", 3, seed=9, previous="r1")
    w = f"{tmp_path}/releases/r2/report.json"
    with pytest.raises(st.StoreUnreadableError) as ei:
        store.read_report("r2")
    assert str(ei.value) == (
        f"{w}: expected a report matching eval-results.schema.json, got at rows/0/value: "
        "'0.5' is not of type 'number', 'null'"
    )
    entries = store.history_entries()
    # r2 has no run file to place it by: listed after the readable releases
    assert [(e.release, e.readable) for e in entries] == [("r1", True), ("r3", True), ("r2", False)]
    assert entries[2].error == str(ei.value)
    with pytest.warns(UserWarning, match="releases/r2/report.json"):
        assert store.previous_release("r4") == "r3"
    # run files are read with the same checks
    store.put_json("releases/r1/runs/run-x.json", dict(bad, release="r1"))
    with pytest.raises(
        st.StoreUnreadableError, match=r"r1/runs/run-x\.json: expected a report match"
    ):
        store.read_run("r1", "run-x")


def test_a_fifo_a_device_or_a_folder_in_place_of_report_json_is_refused_at_once(tmp_path):
    store = open_store(tmp_path)
    publish(store, "r1", 1, seed=0)
    w = f"{tmp_path}/releases"
    (tmp_path / "releases/r2").mkdir()
    os.mkfifo(tmp_path / "releases/r2/report.json")  # no writer: a blocking open never returns
    (tmp_path / "releases/r3").mkdir()
    os.mknod(tmp_path / "releases/r3/report.json", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    (tmp_path / "releases/r4/report.json").mkdir(parents=True)
    with within(10):
        with pytest.raises(st.StoreUnreadableError) as ei:
            store.read_report("r2")
        assert str(ei.value) == f"{w}/r2/report.json: expected a regular file, got a FIFO"
        with pytest.raises(st.StoreUnreadableError) as ei:
            store.read_report("r3")
        assert str(ei.value) == (
            f"{w}/r3/report.json: expected a regular file, got a character device"
        )
        with pytest.raises(st.StoreUnreadableError) as ei:
            store.read_report("r4")
        assert str(ei.value) == f"{w}/r4/report.json: expected a file, got a folder"
        entries = store.history_entries()
        # the FIFO, the device and the folder are each listed, as unreadable
        assert [(e.release, e.error) for e in entries] == [
            ("r1", None),
            ("r2", f"{w}/r2/report.json: expected a regular file, got a FIFO"),
            ("r3", f"{w}/r3/report.json: expected a regular file, got a character device"),
            ("r4", f"{w}/r4/report.json: expected a file, got a folder"),
        ]
        with pytest.warns(UserWarning):
            out = publish(store, "r5", 5, seed=3)
        assert out["compare"].previous == "r1"
        with pytest.raises(StoreKeyError):
            store.read_compare("r2")  # no comparison: said as much, not a hang


def test_stored_objects_over_the_size_bound_are_refused_before_they_are_read(tmp_path, s3):
    store = open_store(tmp_path)
    (tmp_path / "releases/r1").mkdir(parents=True)
    with open(tmp_path / "releases/r1/report.json", "wb") as f:
        f.truncate(st.MAX_JSON_BYTES + 1)  # sparse: nothing is written, nothing need be read
    with pytest.raises(st.StoreUnreadableError) as ei:
        store.read_report("r1")
    assert str(ei.value) == (
        f"{tmp_path}/releases/r1/report.json: expected at most {st.MAX_JSON_BYTES} bytes, "
        f"got {st.MAX_JSON_BYTES + 1}"
    )
    client, bucket = s3
    s3store = open_store(f"s3://{bucket}", client=client)
    s3store.put_bytes("releases/r1/items/a.npy", b"x" * 11)
    with pytest.raises(st.StoreUnreadableError) as ei:
        s3store.get_bytes("releases/r1/items/a.npy", max_bytes=10)
    assert (
        str(ei.value) == f"s3://{bucket}/releases/r1/items/a.npy: expected at most 10 bytes, got 11"
    )
    assert s3store.get_bytes("releases/r1/items/a.npy", max_bytes=11) == b"x" * 11


def test_local_read_errors_through_read_regular_carry_a_note_naming_the_key(tmp_path, monkeypatch):
    store = open_store(tmp_path)
    store.put_bytes("releases/r1/x.json", b"{}")

    def refuse(*args, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", refuse)  # the OS boundary of safeio.read_regular
    with pytest.raises(PermissionError) as ei:
        store.get_bytes("releases/r1/x.json")
    assert ei.value.__notes__ == [f"{tmp_path}/releases/r1/x.json"]


# --- 7: .npy headers are checked against the file size before anything is allocated -------------


def npy_bytes(header: str) -> bytes:
    """A version 1.0 .npy made by hand: magic, header length, header padded to 64 bytes."""
    h = header.encode("latin1")
    h += b" " * (63 - (10 + len(h)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h


def test_an_npy_header_claiming_1e11_items_in_200_bytes_is_refused_before_allocating(tmp_path):
    store = open_store(tmp_path)
    bomb = npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (100000000000,), }")
    bomb += b"\0" * (200 - len(bomb))
    assert len(bomb) == 200
    store.put_bytes("releases/r2/items/a.npy", bomb)
    w = f"{tmp_path}/releases/r2/items/a.npy"
    with pytest.raises(st.StoreUnreadableError) as ei:
        store.read_items("r2", "a")
    assert str(ei.value) == (
        f"{w}: malformed items: expected 100000000000 float64 values (800000000000 bytes) "
        "after the header, as its shape (100000000000,) says, got 72 bytes"
    )
    # a comparison over it says so in that row and goes on with the others
    store.write_items("r1", "a", hits(0))
    store.write_items("r1", "b", hits(1))
    store.write_items("r2", "b", hits(2))
    prev = report("r1", 1, [acc_row("a", hits(0)), acc_row("b", hits(1))])
    cur = report("r2", 2, [acc_row("a", hits(0)), acc_row("b", hits(2))])
    load_prev = store.items_loader("r1", stored_report(prev))
    cmp = compare_reports(prev, cur, load_prev, store.items_loader("r2", stored_report(cur)))
    assert cmp.rows[0].verdict == "not comparable"
    assert cmp.rows[0].reason == f"current per-item scores unreadable: {ei.value}"
    assert cmp.rows[1].verdict in ("improved", "regressed", "unchanged")


def test_only_float64_1d_npy_files_whose_size_matches_are_read(tmp_path):
    store = open_store(tmp_path)
    w = f"{tmp_path}/releases/r1/items"
    values = np.array([0.25, 1.5, 3.0])
    big = io.BytesIO()
    np.save(big, values.astype(">f8"))  # float64 in the other byte order: read as float64
    store.put_bytes("releases/r1/items/big.npy", big.getvalue())
    back = store.read_items("r1", "big")
    assert back.dtype == np.float64 and back.dtype.isnative and back.tolist() == values.tolist()
    back[0] = 9.0  # a writable copy, not a view of the stored bytes
    f32 = io.BytesIO()
    np.save(f32, values.astype(np.float32))
    store.put_bytes("releases/r1/items/f32.npy", f32.getvalue())
    with pytest.raises(st.StoreUnreadableError) as ei:
        store.read_items("r1", "f32")
    assert str(ei.value) == f"{w}/f32.npy: expected per-item scores as float64, got dtype float32"
    short = io.BytesIO()
    np.save(short, values)
    store.put_bytes("releases/r1/items/short.npy", short.getvalue()[:-8])
    with pytest.raises(st.StoreUnreadableError) as ei:
        store.read_items("r1", "short")
    assert str(ei.value) == (
        f"{w}/short.npy: malformed items: expected 3 float64 values (24 bytes) after the header, "
        "as its shape (3,) says, got 16 bytes"
    )
    store.put_bytes("releases/r1/items/v3.npy", b"\x93NUMPY\x03\x00" + short.getvalue()[8:])
    with pytest.raises(
        st.StoreUnreadableError, match=r"v3\.npy: malformed items: expected a \.npy"
    ):
        store.read_items("r1", "v3")


# --- 7: manifests: the alias bound and special files ---------------------------------------------


def test_a_manifest_with_an_alias_bomb_in_an_unused_key_is_refused(tmp_path):
    # 10 levels of 5 aliases: 5**10 (9.8 million) nodes once expanded, from a 400-byte file
    lines = ["x-unused:", "  l0: &l0 [lol, lol, lol, lol, lol]"]
    for i in range(1, 11):
        lines.append(f"  l{i}: &l{i} [*l{i - 1}, *l{i - 1}, *l{i - 1}, *l{i - 1}, *l{i - 1}]")
    lines += ["suite: zoo", "entries:", "  - {name: a, family: bigram, checkpoint: c, data: d}"]
    path = tmp_path / "zoo.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size < 500
    with pytest.raises(ManifestError) as ei:
        load_manifest(path)
    assert str(ei.value) == (
        f"{path}: expected a YAML document of at most 1000000 nodes with its aliases expanded, "
        "got more (an alias bomb or a recursive alias?)"
    )


def test_a_fifo_as_manifest_is_refused_at_once(tmp_path):
    path = tmp_path / "zoo.yaml"
    os.mkfifo(path)
    with within(10), pytest.raises(ManifestError) as ei:
        load_manifest(path)
    assert str(ei.value) == f"{path}: expected a regular file, got a FIFO"


# --- 8a/8b: the baseline -------------------------------------------------------------------------


def test_a_release_dated_ahead_of_the_clock_is_the_baseline_of_the_next(tmp_path):
    store = open_store(tmp_path)
    publish(store, "v1", 1, seed=0)
    publish(store, "v2", 20, seed=1)  # a worker host whose clock runs 18 days fast
    out = publish(store, "v3", 3, seed=2)  # the next release, from a host with the right clock
    assert out["compare"].previous == "v2"  # not skipped for v1
    assert store.read_compare("v3").previous == "v2"
    # a rerun of one entry of v3 keeps the baseline v3 was published with
    rerun = report("v3", 3, [acc_row("a", hits(7))])
    again = publish_run(store, "v3", rerun, {"a": hits(7)})
    assert again["compare"].previous == "v2"
    # the rule, as documented: a new release is compared with the newest by created_at
    assert store.baseline_release("v4") == "v2"
    assert store.previous_release("v3") == "v1"  # the history order itself is created_at


def test_a_release_is_never_its_own_previous(tmp_path):
    root = tmp_path / "store"
    with pytest.raises(StoreError) as ei:
        check_publish_args(str(root), "v2", "v2")
    assert str(ei.value) == (
        "previous: expected a release other than the one being published, got 'v2' (the release "
        "itself: a release cannot be compared with itself)"
    )
    assert not root.exists()  # refused before the store is touched
    store = open_store(root)
    publish(store, "v1", 1, seed=0)
    publish(store, "v2", 2, seed=1)
    with pytest.raises(StoreError) as again:
        check_publish_args(str(root), "v2", "v2")  # also when v2 is in the store
    assert str(again.value) == str(ei.value)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    with pytest.raises(StoreError) as ei:
        publish(store, "v2", 2, seed=3, previous="v2")
    assert str(ei.value) == str(again.value)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing written


# --- 8c: published rows agree with their items ---------------------------------------------------


def test_rows_that_disagree_with_their_items_are_published_as_error_rows(tmp_path):
    store = open_store(tmp_path)
    nll = np.random.default_rng(0).gamma(2.0, 0.8, 50)
    good_a, good_b = hits(0), hits(1)
    rows = [
        acc_row("a", good_a),  # agrees
        acc_row("b", good_b, n=41),  # n is not the count of its items
        acc_row("c", good_a, value=0.5),  # the value is not their mean
        bpb_row("d", nll),  # bpb: mean NLL / ln 2
        bpb_row("e", nll, value=float(np.mean(nll))),  # nats, not bits: off by ln 2
    ]
    items = {"a": good_a, "b": good_b, "c": good_a, "d": nll, "e": nll}
    out = publish_run(store, "r1", report("r1", 1, rows), items)
    by = {r["name"]: r for r in store.read_report("r1")["rows"]}
    assert [by[n]["status"] for n in "abcde"] == ["ok", "error", "error", "ok", "error"]
    assert by["b"]["error"] == {
        "type": "RowItemsMismatchError",
        "message": "row 'b': expected n = 40 (the number of its per-item scores), got 41",
    }
    assert by["c"]["error"]["message"] == (
        f"row 'c': expected acc value {float(np.mean(good_a))!r} (the mean of its 40 per-item "
        "scores), got 0.5"
    )
    assert by["e"]["error"]["message"] == (
        f"row 'e': expected bpb value {float(np.mean(nll)) * (1 / LN2)!r} (the mean of its 50 "
        f"per-item scores / ln 2), got {float(np.mean(nll))!r}"
    )
    for n in "bce":  # an error row has no result and no stored scores
        assert (by[n]["value"], by[n]["n"], by[n]["items"]) == (None, None, None)
    stored = sorted(k.rsplit("/", 1)[1].split("-")[0] for k in store.list("releases/r1/items/"))
    assert stored == ["a", "d"]
    assert out["report"]["rows"] == store.read_report("r1")["rows"]


def test_row_items_problem_checks_only_what_a_metric_defines():
    a = np.array([1.0, 0.0, 1.0, 1.0])

    def typed(name, items, **kw):
        return parse_row(acc_row(name, items, **kw))

    assert row_items_problem(typed("a", a), a) is None
    assert row_items_problem(typed("a", a, value=0.75 + 1e-12), a) is None  # rounding
    assert row_items_problem(typed("a", a, metric="exact_match", value=0.5), a) is not None
    # Spearman has no per-item mean: only n is checked
    rho = typed("s", a, metric="spearman", value=0.3, kind="embeddings")
    assert row_items_problem(rho, a) is None
    assert row_items_problem(rho.model_copy(update={"n": 5}), a) == (
        "row 's': expected n = 4 (the number of its per-item scores), got 5"
    )
    skipped = typed("a", a, status="skipped", value=None, n=None, reason="unknown family")
    assert row_items_problem(skipped, a) is None  # no result to check
    bad = np.array([1.0, np.nan, 0.0, 1.0])
    assert row_items_problem(typed("a", a), bad) == (
        "row 'a': expected finite per-item scores, got 1 that are not"
    )
    assert row_items_problem(typed("a", a), np.zeros((2, 2))).startswith(
        "row 'a': expected 1-d numeric per-item scores, got dtype float64 shape (2, 2)"
    )
    assert math.isclose(1 / LN2, 1.4426950408889634)


def test_a_count_that_is_a_bool_or_a_string_is_not_a_row():
    a = np.array([1.0, 0.0, 1.0, 1.0])
    for n in (True, "4"):
        with pytest.raises(ReportSchemaError) as e:
            parse_row(acc_row("a", a, n=n))
        assert str(e.value) == (
            f"expected a row of eval-results.schema.json, got at n: {n!r} is not of type "
            "'integer', 'null'"
        )


# --- 12: the permutation count is bounded --------------------------------------------------------


def test_n_perm_has_a_documented_maximum():
    rows = [acc_row("a", np.array([1.0, 0.0, 1.0]))]
    prev, cur = report("r1", 1, rows), report("r2", 2, rows)
    load = {"a": np.array([1.0, 0.0, 1.0])}.__getitem__
    assert cm.MAX_N_PERM == 1_000_000
    with pytest.raises(ValueError) as ei:
        compare_reports(prev, cur, load, load, n_perm=1_000_000_000_000)
    assert str(ei.value) == (
        "n_perm: expected at most 1000000 permutations per row, got 1000000000000"
    )
    with pytest.raises(ValueError, match="^n_perm: expected at most 1000000"):
        compare_row(rows[0], rows[0], load, load, n_perm=cm.MAX_N_PERM + 1)
    # the bound itself is taken (3 items: 2**3 sign patterns, enumerated exactly)
    assert compare_reports(prev, cur, load, load, n_perm=cm.MAX_N_PERM).n_perm == cm.MAX_N_PERM
