"""Cross-fitted classifiers (TrainConfig.cross_fit = k): k classifiers in one checkpoint,
classifier i trained exactly as a plain one on the rows outside fold i; their training rows'
digests are recorded and survive save/load."""

from __future__ import annotations

import json

import pytest
import torch

from tinyllm.checkpoint import CheckpointError
from tinyllm.data import Row
from tinyllm.models import bert, classifier

CFG = classifier.Config(max_len=24, n_layer=1, n_head=2, n_embd=32, dropout=0.1)
WORDS = {
    "x": ("aa", "aaa", "a a", "aaaa", "aa a", "a"),
    "y": ("bb", "bbb", "b b", "bbbb", "bb b", "b"),
}
# 12 rows, folds 0, 1, 2 round-robin within each label
ROWS = [Row("train", w, y, i % 3) for y, ws in WORDS.items() for i, w in enumerate(ws)]
SETTINGS = {"batch_size": 4, "lr": 3e-3}
TEXTS = ["aa", "bbb", "ab", "ba b", "a"]


def _logits(m, texts=TEXTS):
    with torch.inference_mode():
        return m(torch.from_numpy(bert.encode_rows(texts, CFG.max_len)))


@pytest.fixture(scope="module")
def crossfit():
    return classifier.train(CFG, ROWS, seed=3, steps=20, cross_fit=3, **SETTINGS)


def test_each_classifier_is_a_plain_train_on_the_rows_outside_its_fold(crossfit):
    assert crossfit.n_folds == 3 and len(crossfit.fold_models) == 2
    assert crossfit.fold_model(0) is crossfit
    for i in range(3):
        outside = [(r.sentence, r.label) for r in ROWS if r.fold != i]
        plain = classifier.train(CFG, outside, seed=3, steps=20, **SETTINGS)
        torch.testing.assert_close(_logits(crossfit.fold_model(i)), _logits(plain), rtol=0, atol=0)
        want = {classifier.sentence_digest(s) for s, _ in outside}
        assert crossfit.trained_on[i] == want and len(want) == 8
    # the classifiers differ: each saw other rows
    assert not torch.equal(_logits(crossfit.fold_model(1)), _logits(crossfit.fold_model(2)))
    with pytest.raises(IndexError, match="expected 0..2, got 3"):
        crossfit.fold_model(3)


def test_save_load_keeps_every_classifier_and_trained_on(crossfit, tmp_path):
    path = classifier.save(crossfit, tmp_path / "cf")
    doc = json.loads((path / "config.json").read_text())
    assert doc["train_config"]["cross_fit"] == 3
    assert [len(t) for t in doc["trained_on"]] == [8, 8, 8]
    assert doc["trained_on"][0] == sorted(doc["trained_on"][0])
    loaded = classifier.load(path)
    assert loaded.n_folds == 3 and loaded.trained_on == crossfit.trained_on
    for i in range(3):
        torch.testing.assert_close(
            _logits(loaded.fold_model(i)), _logits(crossfit.fold_model(i)), rtol=0, atol=0
        )
    doc["trained_on"] = doc["trained_on"][:2]
    (path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="trained_on: expected 3 lists of row digests"):
        classifier.load(path)


def test_a_plain_classifier_records_its_training_rows_and_one_classifier():
    m = classifier.train(CFG, [(r.sentence, r.label) for r in ROWS], seed=0, steps=2, **SETTINGS)
    assert m.n_folds == 1 and m.fold_models is not None and len(m.fold_models) == 0
    assert m.trained_on == (frozenset(classifier.sentence_digest(r.sentence) for r in ROWS),)


def test_sentence_digest_is_sha256_prefix():
    import hashlib

    assert classifier.sentence_digest("é") == hashlib.sha256("é".encode()).hexdigest()[:16]


def test_cross_fit_settings_and_folds_are_checked():
    for bad in (1, -2, 2.0, True):
        with pytest.raises(ValueError, match="cross_fit: expected 0 \\(off\\) or an int >= 2"):
            classifier.TrainConfig(cross_fit=bad)
    no_fold = [*ROWS[:-1], Row("train", "bbbbb", "y")]
    with pytest.raises(
        ValueError, match=r"expected a fold 0..2 on every row \(cross_fit=3\), got None at row 11"
    ):
        classifier.train(CFG, no_fold, seed=0, steps=1, cross_fit=3)
    with pytest.raises(ValueError, match="got 3 at row 0"):
        classifier.train(CFG, [Row("train", "a", "x", 3), *ROWS[1:]], seed=0, steps=1, cross_fit=3)
    with pytest.raises(ValueError, match="expected rows in fold 3 and outside it"):
        classifier.train(CFG, ROWS, seed=0, steps=1, cross_fit=4)
