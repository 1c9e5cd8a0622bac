"""Unit ids in the store (formats/store.md): int64 .npy files beside a row's items, checked on
read like the items; publish_run stores them, the comparison reads them and tests over units;
stores written before units still read, compared item by item with a note."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from store_helpers import acc_row, make_report

from tinyllm import stats
from tinyllm.publish import publish_run
from tinyllm.store import StoreError, StoreUnreadableError, open_store

LN2 = math.log(2.0)
DOCS, PER_DOC = 20, 50
DOC_OF = np.repeat(np.arange(DOCS), PER_DOC)


def nlls_pair():
    """1,000 tokens in 20 documents of 50: the current release's NLLs move by +0.3 nats in 11
    documents and by -0.3 in 9, with a little token noise. Every token of a document moves
    together, so the tokens are not 1,000 independent draws."""
    rng = np.random.default_rng(3)
    prev = rng.gamma(4.0, 0.5, DOCS * PER_DOC)
    shift = np.repeat(np.where(np.arange(DOCS) < 11, 0.3, -0.3), PER_DOC)
    cur = prev + shift + rng.normal(0.0, 0.05, prev.size)
    return prev, cur


def bpb_row(name: str, nll: np.ndarray, **kw) -> dict:
    """A full lm row (schema-valid for publish_run) whose value is its byte-level NLLs' bpb."""
    value = float(np.mean(nll)) / LN2
    row = acc_row(name, np.ones(2), kind="lm", family="gpt", metric="bpb")
    row.update(value=value, lo=value - 0.1, hi=value + 0.1, n=int(nll.size))
    row.update(interval="cluster_ratio", n_units=DOCS, units=None, details={"tokenizer": "byte"})
    row.update(kw)
    return row


def test_unit_ids_are_content_addressed_and_checked_on_read(tmp_path):
    store = open_store(tmp_path)
    ref = store.write_units_ref("r1", "gpt", DOC_OF)
    assert ref.startswith("items/gpt.units-") and ref.endswith(".npy")
    assert store.write_units_ref("r1", "gpt", DOC_OF.astype(np.int32)) == ref  # stored as int64
    back = store.read_units("r1", ref, n_items=DOCS * PER_DOC)
    assert back.dtype == np.int64 and np.array_equal(back, DOC_OF)
    where = f"{tmp_path}/releases/r1/{ref}"
    with pytest.raises(StoreUnreadableError) as ei:
        store.read_units("r1", ref, n_items=999)
    assert str(ei.value) == f"{where}: expected one unit id per item (999), got 1000 unit ids"
    with pytest.raises(StoreError, match="expected a 1-d integer array of unit ids, got dtype"):
        store.write_units_ref("r1", "gpt", np.zeros(3))
    # float ids, a pickle, a header that claims more than the file holds: refused by the header
    for arr, want in (
        (np.zeros(4), "expected unit ids as int64, got dtype float64"),
        (np.zeros((2, 2), dtype=np.int64), "expected a 1-d array of unit ids, got shape (2, 2)"),
    ):
        buf = io.BytesIO()
        np.save(buf, arr)
        store.put_bytes("releases/r1/items/bad.units-0.npy", buf.getvalue())
        with pytest.raises(
            StoreUnreadableError, match=want.replace("(", r"\(").replace(")", r"\)")
        ):
            store.read_units("r1", "items/bad.units-0.npy")
    buf = io.BytesIO()
    np.save(buf, np.arange(3, dtype=np.int64))
    header = buf.getvalue()[:-24].replace(b"(3,)", b"(9,)")
    store.put_bytes("releases/r1/items/lie.units-0.npy", header + buf.getvalue()[-24:])
    with pytest.raises(StoreUnreadableError, match=r"expected 9 int64 values \(72 bytes\)"):
        store.read_units("r1", "items/lie.units-0.npy")


def _publish_pair(store, prev, cur, units_prev, units_cur):
    r1 = make_report("r1", "2026-01-01T00:00:00Z", [bpb_row("gpt", prev)])
    publish_run(store, "r1", r1, {"gpt": prev}, units=units_prev, seed=0)
    r2 = make_report("r2", "2026-01-02T00:00:00Z", [bpb_row("gpt", cur)])
    return publish_run(store, "r2", r2, {"gpt": cur}, units=units_cur, seed=0)


def test_a_release_comparison_is_over_the_rows_units(tmp_path):
    prev, cur = nlls_pair()
    store = open_store(tmp_path / "s")
    out = _publish_pair(store, prev, cur, {"gpt": DOC_OF}, {"gpt": DOC_OF})
    row = out["report"]["rows"][0]
    assert row["units"].startswith("items/gpt.units-") and row["n_units"] == DOCS
    assert np.array_equal(store.units_loader("r2")("gpt"), DOC_OF)
    (c,) = out["compare"].rows
    # over the 20 documents: D_g = +-15 nats, 11 up and 9 down; no call
    pd = stats.paired_difference(cur, prev, DOC_OF, np.random.default_rng(0), kind="ratio")
    assert (c.verdict, c.n, c.n_units, c.method) == ("unchanged", 1000, 20, "paired_t")
    assert c.p == pd.p and 0.5 < c.p < 1 and c.p_adjusted == c.p
    assert c.se == pytest.approx(pd.se / LN2) and c.mde == pytest.approx(pd.mde / LN2)
    t = stats.mde_factor(19) * pd.se / LN2
    assert c.mde == pytest.approx(t) and c.note is None
    assert c.delta == pytest.approx((cur.mean() - prev.mean()) / LN2)
    # the same scores with every token its own unit: the test over tokens calls a regression
    store = open_store(tmp_path / "t")
    tokens = np.arange(prev.size)
    out = _publish_pair(store, prev, cur, {"gpt": tokens}, {"gpt": tokens})
    (t,) = out["compare"].rows
    assert t.verdict == "regressed" and t.p < 0.01 and t.n_units == 1000


def test_units_that_differ_between_releases_are_not_comparable(tmp_path):
    prev, cur = nlls_pair()
    other = np.repeat(np.arange(40), 25)  # the same tokens cut into 40 documents
    out = _publish_pair(open_store(tmp_path), prev, cur, {"gpt": DOC_OF}, {"gpt": other})
    (c,) = out["compare"].rows
    assert c.verdict == "not comparable" and c.p is None and c.mde is None
    assert c.reason == (
        "different units in the two releases (20 vs 40 units over the same items): the "
        "unit-level differences do not pair"
    )


def test_a_release_stored_before_units_is_compared_item_by_item_with_a_note(tmp_path):
    prev, cur = nlls_pair()
    store = open_store(tmp_path)
    old = bpb_row("gpt", prev)
    for key in ("n_units", "units"):
        old.pop(key)  # a row of a report written before units
    old["interval"] = "student_t"
    publish_run(store, "r1", make_report("r1", "2026-01-01T00:00:00Z", [old]), {"gpt": prev})
    r2 = make_report("r2", "2026-01-02T00:00:00Z", [bpb_row("gpt", cur)])
    out = publish_run(store, "r2", r2, {"gpt": cur}, units={"gpt": DOC_OF})
    assert "units" not in store.read_report("r1")["rows"][0]  # written back as it was
    (c,) = out["compare"].rows
    assert c.note == "units unknown in the previous release: compared at the item level"
    assert (c.verdict, c.n_units) == ("regressed", 1000)


def test_unit_ids_that_do_not_fit_the_items_make_an_error_row(tmp_path):
    prev, _ = nlls_pair()
    store = open_store(tmp_path)
    r1 = make_report("r1", "2026-01-01T00:00:00Z", [bpb_row("gpt", prev)])
    out = publish_run(store, "r1", r1, {"gpt": prev}, units={"gpt": DOC_OF[:10]})
    row = out["report"]["rows"][0]
    assert row["status"] == "error" and row["units"] is None and row["n_units"] is None
    assert row["error"]["message"] == (
        "row 'gpt': expected one unit id per item (1000), got shape (10,)"
    )
    assert not [k for k in store.list("releases/r1/items/") if ".units-" in k]
