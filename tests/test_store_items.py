"""Per-item scores in the store: float64 .npy files, content-addressed references, never
unpickled, read back through items_loader (the loader compare_reports takes)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from store_helpers import make_report, make_row

from tinyllm.report import stored_report
from tinyllm.store import Store, StoreError, open_store


def test_items_are_never_unpickled(tmp_path):
    store = open_store(tmp_path)
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    store.put_bytes("releases/r1/items/gpt.npy", buf.getvalue())
    with pytest.raises(StoreError, match="malformed items.*pickle"):
        store.read_items("r1", "gpt")


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
    load = store.items_loader("r1", stored_report(report))
    assert np.array_equal(load("gpt"), a) and np.array_equal(load("bi"), b)
    # the stored report is read on first use, not when the loader is made
    lazy = store.items_loader("r1")
    store.write_report("r1", report)
    assert np.array_equal(lazy("gpt"), a)


def test_items_loader_with_a_report_without_rows_uses_the_fixed_names(tmp_path):
    store = open_store(tmp_path)
    store.write_items("r1", "gpt", np.array([1.0, 2.0]))
    empty = stored_report(make_report("r1", "2026-11-29T18:00:00Z", []))
    assert store.items_loader("r1", empty)("gpt").tolist() == [1.0, 2.0]
