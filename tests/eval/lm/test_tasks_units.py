"""The task file's 'cluster' key (formats/task-jsonl.md): each item's sampling unit, the
interval over units (docs/definitions.md, "Units", "Intervals": Wilson when every unit is one
0/1 item, the cluster bootstrap over units otherwise) and the one-line errors naming the file,
the field and the line.

Oracles: the worked example of docs/definitions.md's cluster_bootstrap (items [0, 1] in one
unit and [1, 1] in another: 0.75 in (0.5, 1.0)), the Wilson interval of (k, n) by its formula,
and the exact messages.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from lm_helpers import TASK, Table, write_task

from tinyllm.eval import lm
from tinyllm.tokens import ByteTokenizer

WRONG = {"context": "a", "choices": ["bb", "c"], "gold": 0}  # acc picks "c": 0
RIGHT = {"context": "a", "choices": ["c", "bb"], "gold": 0}  # acc picks "c": 1


def _wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    mid, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (mid - half) / (1 + z * z / n), (mid + half) / (1 + z * z / n)


def _run(items, seed=0, **kw):
    return lm.run_task(Table(), ByteTokenizer(), items, "acc", np.random.default_rng(seed), **kw)


def test_the_definitions_worked_example_from_a_task_file(tmp_path):
    """Items [0, 1] in cluster "p1" and [1, 1] in cluster "p2": every resample is two of the
    cluster means 0.5 and 1.0, so the interval is (0.5, 1.0); over items it would be
    the Wilson interval of 3 of 4 (kept as iid), and the bootstrap over items would reach 0.25."""
    items = [{**WRONG, "cluster": "p1"}, {**RIGHT, "cluster": "p1"}]
    items += [{**RIGHT, "cluster": "p2"}, {**RIGHT, "cluster": "p2"}]
    path = write_task(tmp_path / "t.jsonl", items)
    for seed in (0, 1, 2):
        r = _run(path, seed)
        assert r.per_item.tolist() == [0.0, 1.0, 1.0, 1.0]
        assert (r.value, r.lo, r.hi) == (0.75, 0.5, 1.0)
        assert (r.method, r.n_units, r.labels) == ("cluster_bootstrap", 2, ("p1", "p2"))
        assert r.units.tolist() == [0, 0, 1, 1] and r.units.dtype == np.int64
        assert (r.iid.method, (r.iid.lo, r.iid.hi)) == ("wilson", pytest.approx(_wilson(3, 4)))
        assert r.warning.startswith("only 2 units")
    d = r.to_dict()
    assert (d["interval"], d["n_units"], d["n"], d["iid_interval"]["method"]) == (
        "cluster_bootstrap", 2, 4, "wilson",
    )  # fmt: skip
    assert d["interval_warning"].startswith("only 2 units")
    json.dumps(d)  # JSON-native


def test_clusters_widen_the_interval_and_units_come_in_any_order():
    """Twelve clusters of four items, every item of a cluster scored alike (a shared passage
    that is either understood or not): over clusters the interval is far wider than the
    Wilson interval of the 48 items taken as independent; the items of a cluster need not be
    adjacent, and integer cluster ids work as strings do."""
    right_clusters = {0, 2, 3, 5, 8, 9, 11}
    items = [
        {**(RIGHT if g in right_clusters else WRONG), "cluster": g}
        for _ in range(4)
        for g in range(12)
    ]  # item order: cluster 0..11, four times over
    r = _run(items, seed=3)
    assert r.value == pytest.approx(7 / 12)
    assert r.units.tolist() == list(range(12)) * 4 and r.labels == tuple(range(12))
    assert r.n_units == 12 and r.warning == ""
    lo, hi = _wilson(28, 48)
    assert (r.iid.lo, r.iid.hi) == pytest.approx((lo, hi))
    assert (r.hi - r.lo) > 1.6 * (hi - lo)
    # every resample is a mean of 12 cluster means in {0, 1}: the ends are multiples of 1/12
    assert r.lo * 12 == pytest.approx(round(r.lo * 12)) and r.hi * 12 == pytest.approx(
        round(r.hi * 12)
    )


def test_one_item_per_cluster_is_wilson_with_the_units_kept():
    items = [{**it, "cluster": f"c{i}"} for i, it in enumerate(TASK * 3)]
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    r = lm.run_task(Table(), ByteTokenizer(), items, "acc", rng)
    k = int(r.per_item.sum())
    assert (r.lo, r.hi) == pytest.approx(_wilson(k, 12))
    assert (r.method, r.n_units, r.iid) == ("wilson", 12, None)
    assert r.units.tolist() == list(range(12))
    assert rng.bit_generator.state == before  # Wilson draws nothing


def test_cluster_1_and_cluster_string_1_are_different_units():
    items = [{**WRONG, "cluster": 1}, {**RIGHT, "cluster": "1"}, {**RIGHT, "cluster": 1}]
    r = _run(items)
    assert r.units.tolist() == [0, 1, 0] and r.labels == (1, "1")


@pytest.mark.parametrize("bad", [1.5, True, None, ["p1"], {"id": 1}])
def test_a_cluster_of_the_wrong_type_names_the_file_field_and_line(tmp_path, bad):
    items = [{**WRONG, "cluster": "p1"}, {**RIGHT, "cluster": "p2"}, {**RIGHT, "cluster": bad}]
    path = write_task(tmp_path / "t.jsonl", items)
    with pytest.raises(ValueError) as e:
        lm.read_task(path)
    assert str(e.value) == (
        f"{path}:3: expected 'cluster' to be a string or an integer (the item's sampling unit), "
        f"got {bad!r}"
    )
    with pytest.raises(ValueError) as e:  # parsed items: named by their index
        _run(items)
    assert str(e.value).startswith("task item 2: expected 'cluster' to be a string or an integer")


def test_a_cluster_on_some_items_only_names_the_line_without_it(tmp_path):
    items = [{**WRONG, "cluster": "p1"}, {**RIGHT, "cluster": "p2"}, RIGHT, RIGHT]
    path = write_task(tmp_path / "t.jsonl", items)
    with pytest.raises(ValueError) as e:
        lm.read_task(path)
    assert str(e.value) == (
        f"{path}:3: expected 'cluster' on every item once one item declares it "
        f"({path}:1 does), got none"
    )
    with pytest.raises(ValueError) as e:
        _run([RIGHT, {**RIGHT, "cluster": "p2"}])
    assert str(e.value) == (
        "task item 0: expected 'cluster' on every item once one item declares it "
        "(task item 1 does), got none"
    )


def test_one_cluster_for_every_item_names_the_file_and_field(tmp_path):
    items = [{**it, "cluster": "all"} for it in TASK]
    path = write_task(tmp_path / "t.jsonl", items)
    with pytest.raises(ValueError) as e:
        lm.read_task(path)
    assert str(e.value) == (
        f"{path}: 'cluster': expected at least 2 units (an interval over units needs their "
        "spread), got 1 ('all') holding all 4 items"
    )
    with pytest.raises(ValueError, match=r"^task: 'cluster': expected at least 2 units"):
        _run(items)
