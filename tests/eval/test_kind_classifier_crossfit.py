"""The classifier kind on a cross-fitted checkpoint: every row is scored, each by the
classifier trained without its fold; the row pools all folds (formats/rows.md)."""

from __future__ import annotations

import numpy as np
import pytest

from tinyllm.data import Row, write_rows
from tinyllm.eval import zoo
from tinyllm.models import classifier
from tinyllm.stats import wilson_interval

CFG = classifier.Config(max_len=24, n_layer=1, n_head=2, n_embd=32, dropout=0.0)
X = ("aa", "aaa", "a a", "aaaa", "aa a", "a", "aaaaa", "a aa")
Y = ("bb", "bbb", "b b", "bbbb", "bb b", "b", "bbbbb", "b bb")
# 16 rows in 2 folds; fold 0 is the val split, as in the files tinyllm writes
ROWS = [
    Row("val" if i % 2 == 0 else "train", w, lab, i % 2)
    for lab, ws in (("x", X), ("y", Y))
    for i, w in enumerate(ws)
]
ROWS[3] = Row("train", "ab", "x", 1)  # a hard row, so that not every prediction is right


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cf")
    m = classifier.train(CFG, ROWS, seed=0, steps=40, batch_size=8, lr=3e-3, cross_fit=2)
    classifier.save(m, d / "clf")
    write_rows(d / "rows.jsonl", ROWS)
    return d


def _score(d, data_file="rows.jsonl"):
    e = {"name": "clf", "family": "classifier", "checkpoint": "clf", "data": data_file}
    return zoo.score_entry_items(e, base_dir=d)


def test_every_row_is_scored_by_the_classifier_of_its_fold(zoo_dir):
    row, items = _score(zoo_dir)
    assert row["status"] == "ok", row
    model = classifier.load(zoo_dir / "clf")
    want = np.array(
        [classifier.predict(model.fold_model(r.fold), [r.sentence])[0] == r.label for r in ROWS],
        dtype=float,
    )
    np.testing.assert_array_equal(items, want)  # file order, all 16 rows
    k = int(want.sum())
    assert row["n"] == 16 and row["value"] == pytest.approx(k / 16)
    ci = wilson_interval(k, 16)
    assert (row["lo"], row["hi"]) == pytest.approx((ci.lo, ci.hi))
    d = row["details"]
    assert d["scoring"] == "cross-fit" and "split" not in d
    assert d["folds"] == [
        {"fold": f, "n": 8, "acc": pytest.approx(want[[r.fold == f for r in ROWS]].mean())}
        for f in (0, 1)
    ]
    val = [r.split == "val" for r in ROWS]
    assert d["val_acc"] == pytest.approx(want[val].mean())
    assert d["n_rows_other_splits"] == 0 and d["n_seen_in_training"] == 0
    assert d["baseline_majority"] == {"label": "x", "acc": 0.5, "n": 16}
    assert "2 classifiers" in d["checkpoint"]


def test_a_row_a_classifier_trained_on_is_counted(zoo_dir):
    # "aa" (fold 0, trained on by classifier 1) planted into fold 1
    write_rows(zoo_dir / "seen.jsonl", [*ROWS, Row("train", "aa", "x", 1)])
    row, _ = _score(zoo_dir, "seen.jsonl")
    assert row["n"] == 17 and row["details"]["n_seen_in_training"] == 1


def test_a_row_without_a_fold_in_range_is_an_error_row(zoo_dir):
    for bad, got in ((Row("val", "zz", "y"), "None"), (Row("val", "zz", "y", 2), "2")):
        write_rows(zoo_dir / "bad.jsonl", [*ROWS, bad])
        row, items = _score(zoo_dir, "bad.jsonl")
        assert row["status"] == "error" and items is None
        assert row["error"]["message"] == (
            f"{zoo_dir / 'bad.jsonl'}: expected a fold 0..1 on every row (the checkpoint is "
            f"cross-fitted on 2 folds), got {got} on row 17"
        )


def test_a_plain_checkpoint_scores_val_only_and_counts_seen_rows(tmp_path):
    train = [(r.sentence, r.label) for r in ROWS if r.split == "train"]
    m = classifier.train(CFG, train, seed=0, steps=5, batch_size=8)
    classifier.save(m, tmp_path / "clf")
    write_rows(tmp_path / "rows.jsonl", [*ROWS, Row("val", "bbb", "y", 1)])  # "bbb": a train row
    row, _ = _score(tmp_path)
    d = row["details"]
    assert d["scoring"] == "val" and d["split"] == "val" and row["n"] == 9
    assert d["n_seen_in_training"] == 1 and d["n_rows_other_splits"] == 8
