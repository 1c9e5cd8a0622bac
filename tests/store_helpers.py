"""Reports, rows and the round trip every store backend runs (tests/test_store_*.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tinyllm.compare import compare_reports
from tinyllm.comparison import Comparison
from tinyllm.store import StoreExistsError, StoreKeyError, new_run_id

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


def acc_row(name: str, items: np.ndarray, **kw) -> dict:
    """A schema-valid accuracy row whose value and n are its items' mean and count; ``kw``
    replaces fields."""
    row = {
        "name": name,
        "family": "classifier",
        "kind": "classifier",
        "metric": "acc",
        "value": float(np.mean(items)),
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

    store.write_compare("a-new", tiny_compare())
    assert store.read_compare("a-new") == tiny_compare()

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


def tiny_compare() -> Comparison:
    prev = make_report("p", "2026-01-01T00:00:00Z", [make_row("gpt", items=None)])
    cur = make_report("q", "2026-01-02T00:00:00Z", [make_row("gpt", items=None)])
    return compare_reports(prev, cur, None, None)
