"""The EvalSuite flow over a manifest with one entry of each encoder kind (mlm, rtd,
classifier): rows equal run_zoo's, per-item scores in the store, and a comparison with the
previous release (unchanged; a degraded classifier is flagged)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from zoo_rows import assert_flow_rows_equal_run_zoo

from tinyllm.data import Row, write_rows
from tinyllm.eval import zoo
from tinyllm.models import bert, classifier, electra
from tinyllm.store import open_store
from tinyllm_suite.eval_suite import eval_suite

SHAPE = {"max_len": 24, "n_layer": 1, "n_head": 2, "n_embd": 32}
TEXT = np.frombuffer(b"the cat sat on the mat. the dog sat on the log. " * 12, dtype=np.uint8)
TRAIN = [Row("train", w, "x") for w in ("aa", "aaa", "a a", "aaaa", "aa a", "a")]
TRAIN += [Row("train", w, "y") for w in ("bb", "bbb", "b b", "bbbb", "bb b", "b")]
# 12 + 12 val rows: enough discordant pairs for the paired test to see a real regression
VAL = [Row("val", "a" * k + " a" * (k % 3), "x") for k in range(2, 14)]
VAL += [Row("val", "b" * k + " b" * (k % 3), "y") for k in range(2, 14)]
ENTRIES = [
    {"name": "bert-rows", "family": "bert", "checkpoint": "bert", "data": "rows.jsonl"},
    {"name": "electra-rows", "family": "electra", "checkpoint": "electra", "data": "rows.jsonl"},
    {"name": "clf-rows", "family": "classifier", "checkpoint": "clf", "data": "rows.jsonl"},
]


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("encoders")
    b = bert.train(bert.Config(**SHAPE), TEXT, seed=0, steps=30, batch_size=8, lr=3e-3)
    bert.save(b, d / "bert")
    ecfg = electra.Config(**SHAPE, gen_n_layer=1, gen_n_head=2, gen_n_embd=16)
    electra.save(electra.train(ecfg, TEXT, seed=0, steps=10, batch_size=8), d / "electra")
    ccfg = classifier.Config(**SHAPE, dropout=0.0)
    rows = [(r.sentence, r.label) for r in TRAIN]
    clf = classifier.train(ccfg, rows, seed=0, steps=60, batch_size=8, lr=3e-3, init=d / "bert")
    classifier.save(clf, d / "clf")
    write_rows(d / "rows.jsonl", TRAIN + VAL)
    (d / "zoo.yaml").write_text(yaml.safe_dump({"suite": "zoo", "entries": ENTRIES}))
    return d


def test_flow_scores_each_encoder_kind_stores_items_and_compares(zoo_dir, tmp_path):
    m, store = str(zoo_dir / "zoo.yaml"), str(tmp_path / "store")
    first = eval_suite(manifest=m, release="r1", store=store, seed=2)
    rows = first["report"]["rows"]
    assert [r["name"] for r in rows] == ["bert-rows", "electra-rows", "clf-rows"]
    assert [r["kind"] for r in rows] == ["mlm", "rtd", "classifier"]
    assert all(r["status"] == "ok" and r["metric"] == "acc" for r in rows), rows
    # mlm and rtd: positions clustered by val row (docs/definitions.md, Units); one item per row
    assert [r["interval"] for r in rows] == ["cluster_ratio", "cluster_ratio", "wilson"]
    assert all(r["lo"] <= r["value"] <= r["hi"] for r in rows)
    # every val row a unit (mlm: the rows where a position was masked)
    assert rows[1]["n_units"] == rows[2]["n_units"] == len(VAL)
    assert 10 <= rows[0]["n_units"] <= len(VAL)
    assert [r["iid_interval"]["method"] for r in rows[:2]] == ["wilson", "wilson"]
    assert rows[2]["iid_interval"] is None and rows[2]["units"] is None
    st = open_store(store)
    # most frequent byte, always original, majority class: each row's baseline items stored;
    # the unit ids of mlm and rtd (a val row's positions share its id) as run_zoo has them
    ref = zoo.run_zoo(m, seed=2)
    assert assert_flow_rows_equal_run_zoo(rows, ref, st, "r1", units=2) == 3
    for r in rows[:2]:
        assert r["units"].startswith(f"items/{r['name']}.units-")
        assert np.unique(st.read_units("r1", r["units"])).size == r["n_units"]
    for r in rows:
        items = st.read_items("r1", r["name"], ref=r["items"])
        assert items.size == r["n"] and set(np.unique(items)) <= {0.0, 1.0}
        assert items.mean() == pytest.approx(r["value"])
    assert rows[2]["n"] == len(VAL)  # val rows only
    assert rows[1]["n"] == sum(len(r.sentence) for r in VAL)  # every val byte

    same = eval_suite(manifest=m, release="r2", store=store, seed=2)
    assert {r["name"]: r["verdict"] for r in same["compare"]["rows"]} == {
        "bert-rows": "unchanged",
        "electra-rows": "unchanged",
        "clf-rows": "unchanged",
    }

    # a classifier that has forgotten everything: all its val rows go one way
    ccfg = classifier.Config(**SHAPE, dropout=0.0)
    rows_x = [(r.sentence, "x") for r in TRAIN] + [("b", "y")]
    bad = classifier.train(ccfg, rows_x, seed=0, steps=40, batch_size=8, lr=3e-3)
    classifier.save(bad, zoo_dir / "clf")
    worse = eval_suite(manifest=m, release="r3", store=store, seed=2)
    verdicts = {r["name"]: r["verdict"] for r in worse["compare"]["rows"]}
    assert verdicts["bert-rows"] == "unchanged" and verdicts["electra-rows"] == "unchanged"
    assert worse["report"]["rows"][2]["value"] < rows[2]["value"]
    assert verdicts["clf-rows"] == "regressed"
