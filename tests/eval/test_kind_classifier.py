"""The classifier kind: accuracy on the val rows only, with a Wilson interval and the
majority-class baseline; and the rows files it reads (formats/rows.md, tinyllm/data.py)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from tinyllm import data
from tinyllm.data import Row, read_rows, write_rows
from tinyllm.eval import zoo
from tinyllm.eval.kinds import classifier as kind
from tinyllm.models import classifier
from tinyllm.stats import wilson_interval

CFG = classifier.Config(max_len=24, n_layer=1, n_head=2, n_embd=32, dropout=0.0)
TRAIN = [Row("train", w, "x") for w in ("aa", "aaa", "a a", "aaaa", "aa a")] + [
    Row("train", w, "y") for w in ("bb", "bbb", "b b", "bbbb", "bb b")
]
# val: 5 rows; the model gets the first four right ("ab" and "ba" are the hard ones)
VAL = [Row("val", "aaaaa", "x"), Row("val", "bbbbbb", "y"), Row("val", "a", "x")]
VAL += [Row("val", "b", "y"), Row("val", "aaa", "y")]  # the last label is wrong on purpose


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("clf")
    m = classifier.train(CFG, TRAIN, seed=0, steps=60, batch_size=8, lr=3e-3)
    classifier.save(m, d / "clf")
    write_rows(d / "rows.jsonl", TRAIN + VAL)
    return d


def _entry(data_file="rows.jsonl", **options):
    e = {"name": "clf", "family": "classifier", "checkpoint": "clf", "data": data_file}
    if options:
        e["options"] = options
    return e


def _score(zoo_dir, data_file="rows.jsonl", **options):
    return zoo.score_entry_items(_entry(data_file, **options), base_dir=zoo_dir)


def test_row_is_val_accuracy_with_wilson_interval(zoo_dir):
    row, items = _score(zoo_dir)
    assert row["status"] == "ok", row
    assert row["kind"] == "classifier" and row["metric"] == "acc"
    model = classifier.load(zoo_dir / "clf")
    pred = classifier.predict(model, [r.sentence for r in VAL])
    assert pred[:4] == ["x", "y", "x", "y"]
    want = np.array([p == r.label for p, r in zip(pred, VAL, strict=True)], dtype=float)
    np.testing.assert_array_equal(items, want)
    k = int(want.sum())
    ci = wilson_interval(k, len(VAL))
    assert row["n"] == 5 and row["value"] == pytest.approx(k / 5)
    assert (row["lo"], row["hi"]) == pytest.approx((ci.lo, ci.hi))
    assert row["interval"] == "wilson"
    d = row["details"]
    assert d["split"] == "val" and d["n_rows_other_splits"] == len(TRAIN)
    assert d["baseline_majority"] == {"label": "y", "acc": 3 / 5, "n": 5}
    assert d["labels"] == ["x", "y"] and d["unknown_labels"] == []


def test_planted_train_row_with_a_wrong_label_does_not_change_the_score(zoo_dir):
    write_rows(zoo_dir / "planted.jsonl", [*TRAIN, Row("train", "aaaaa", "y"), *VAL])
    base, base_items = _score(zoo_dir)
    row, items = _score(zoo_dir, "planted.jsonl")
    assert (row["value"], row["lo"], row["hi"], row["n"]) == (
        base["value"],
        base["lo"],
        base["hi"],
        base["n"],
    )
    np.testing.assert_array_equal(items, base_items)


def test_planted_val_row_changes_the_score(zoo_dir):
    write_rows(zoo_dir / "planted_val.jsonl", [*TRAIN, *VAL, Row("val", "aaaaa", "y")])
    base, _ = _score(zoo_dir)
    row, items = _score(zoo_dir, "planted_val.jsonl")
    assert row["n"] == base["n"] + 1
    assert items[-1] == 0.0  # the model says x
    assert row["value"] == pytest.approx(base["value"] * 5 / 6)


def test_a_label_the_model_does_not_know_scores_zero(zoo_dir):
    write_rows(zoo_dir / "unknown.jsonl", [*VAL, Row("val", "zzz", "z")])
    row, items = _score(zoo_dir, "unknown.jsonl")
    assert items[-1] == 0.0 and row["details"]["unknown_labels"] == ["z"]


def test_no_val_rows_and_other_splits_are_error_rows(zoo_dir):
    write_rows(zoo_dir / "train_only.jsonl", TRAIN)
    row, _ = _score(zoo_dir, "train_only.jsonl")
    assert row["status"] == "error" and "expected rows of split 'val'" in row["error"]["message"]
    row, _ = _score(zoo_dir, split="train")
    assert row["status"] == "error" and "val only" in row["error"]["message"]


def test_majority_baseline_ties_go_to_the_first_label():
    assert kind.majority_baseline(["b", "a", "b", "a"]) == {"label": "a", "acc": 0.5, "n": 4}
    assert kind.majority_baseline(["b", "b", "a"])["acc"] == pytest.approx(2 / 3)


# ---- rows files --------------------------------------------------------------------------------


def test_rows_round_trip_and_errors_name_file_and_line(tmp_path):
    rows = [Row("train", 'tab\tquote" é', "a"), Row("val", "", "b")]
    p = write_rows(tmp_path / "r.jsonl", rows)
    assert read_rows(p) == rows
    p.write_text(p.read_text() + '{"split": "val", "sentence": "s"}\n')
    with pytest.raises(ValueError, match=r"r.jsonl:3: expected a string 'label', got None"):
        read_rows(p)
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="at least one row"):
        read_rows(tmp_path / "e.jsonl")
    assert data.read_train_rows(write_rows(tmp_path / "r2.jsonl", rows)) == rows[:1]


def test_hash_split_is_sha256_mod_5():
    import hashlib

    for s in ("Neuseeland", "simplistic , silly and tedious .", "é"):
        h = int.from_bytes(hashlib.sha256(s.encode()).digest()[:8], "little")
        assert data.hash_split(s) == ("val" if h % 5 == 0 else "train")


def test_polarity_rows_from_gensim():
    rows = data.polarity_rows()
    assert len(rows) == 200 and Counter(r.label for r in rows) == {"neg": 100, "pos": 100}
    first = "simplistic , silly and tedious ."
    assert rows[0] == Row(data.hash_split(first), first, "neg", data.hash_bucket(first))
    assert any("amélie" in r.sentence for r in rows)  # Windows-1252 0xe9 decoded
    n_val = sum(r.split == "val" for r in rows)
    assert 25 <= n_val <= 55  # ~20% of 200
    assert all(r.split == data.hash_split(r.sentence) for r in rows)
    # the fold is the hash bucket; the val rows are exactly fold 0
    assert all(r.fold == data.hash_bucket(r.sentence) for r in rows)
    assert [r for r in rows if r.fold == 0] == [r for r in rows if r.split == "val"]


def test_langid_rows_have_one_language_per_name():
    rows = data.langid_rows()
    assert len(rows) > 3000
    assert {r.label for r in rows} == {"en", "fr", "de", "es", "it"}
    names = [r.sentence for r in rows]
    assert len(names) == len(set(names))
    from babel import Locale

    assert (
        Row(data.hash_split("Neuseeland"), "Neuseeland", "de", data.hash_bucket("Neuseeland"))
        in rows
    )
    shared = str(Locale.parse("en").territories["ZW"])  # "Zimbabwe": en, fr, it ... -> dropped
    assert shared == str(Locale.parse("fr").territories["ZW"]) and shared not in names
    val = [r for r in rows if r.split == "val"]
    assert 0.15 < len(val) / len(rows) < 0.25


def test_corpora_files(tmp_path):
    files = data.CORPORA["encoder"].build(tmp_path)
    assert set(files) == {"train", "polarity", "langid"}
    assert data.CORPORA["encoder"].read_train(files["train"]).dtype == np.uint8
    for name in ("polarity", "langid"):
        f = data.CORPORA[name].build(tmp_path)
        assert f["train"] == f["rows"] == files[name]
        train = data.CORPORA[name].read_train(f["train"])
        first = json.loads(files[name].read_text(encoding="utf-8").splitlines()[0])
        assert set(first) == {"split", "sentence", "label", "fold"}
        if name == "langid":  # trained on its train rows
            assert train and all(r.split == "train" for r in train)
        else:  # polarity is cross-fitted: its train reads every row, each with its fold
            assert train == data.read_rows(f["train"]) and {r.fold for r in train} == set(range(5))


# ---- proportion_scored by hand; no val rows, fewer answers than rows -----------------------------


def test_proportion_scored_hand_values_and_refusals():
    from tinyllm.eval.kinds import proportion_scored

    s = proportion_scored("acc", [1, 1, 0, 1, 1, 1, 1, 1, 0, 1])  # the docstring's example
    assert (s.interval.value, s.n, s.method, s.metric) == (0.8, 10, "wilson", "acc")
    assert (s.interval.lo, s.interval.hi) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert s.items.dtype == np.float64
    one = proportion_scored("acc", [True])  # one item is enough: Wilson lo = 1 / (1 + z^2)
    assert (one.interval.value, one.n, one.interval.hi) == (1.0, 1, 1.0)
    assert one.interval.lo == pytest.approx(1 / (1 + 1.959963984540054**2), rel=1e-9)
    for bad in ([], [[1, 0], [1, 1]], 1):
        with pytest.raises(ValueError) as ei:
            proportion_scored("em", bad)
        assert str(ei.value) == (
            f"em: expected a non-empty 1-d array of 0/1 scores, got {np.shape(bad)}"
        )
    with pytest.raises(ValueError) as ei:
        proportion_scored("acc", [0, 1, 2, 3, 4, 5, 6, 0.5])
    assert str(ei.value) == "acc: expected per-item scores 0 or 1, got [0.0, 0.5, 1.0, 2.0, 3.0]"


def test_no_val_rows_error_names_the_file(zoo_dir):
    write_rows(zoo_dir / "train_only2.jsonl", TRAIN)
    row, _ = _score(zoo_dir, "train_only2.jsonl")
    assert row["error"]["message"] == (
        f"{zoo_dir / 'train_only2.jsonl'}: expected rows of split 'val', got only splits ['train']"
    )


def test_a_model_that_answers_fewer_rows_than_asked_is_an_error_not_a_shorter_row(
    zoo_dir, monkeypatch
):
    real = classifier.predict
    monkeypatch.setattr(classifier, "predict", lambda model, texts: real(model, texts)[:-1])
    row, items = _score(zoo_dir)
    assert row["status"] == "error" and items is None and row["n"] is None
    assert row["error"]["type"] == "ValueError" and "zip()" in row["error"]["message"]
