"""Classifiers: a tl_head config is a classifier (kind and load dispatch), fine-tuning from a
BERT checkpoint, label names stored in the checkpoint, predict."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tinyllm.checkpoint import CheckpointError
from tinyllm.eval import zoo
from tinyllm.models import bert, classifier

SHAPE = {"max_len": 24, "n_layer": 1, "n_head": 2, "n_embd": 32}
CFG = classifier.Config(tl_head="cls", backbone="bert", dropout=0.0, **SHAPE)
# separable by bytes: words of a's are "x", words of b's are "y", in any order
ROWS = [(w, "x") for w in ("aa", "aaa", "a a", "aaaa", "aa a")] + [
    (w, "y") for w in ("bb", "bbb", "b b", "bbbb", "bb b")
]


@pytest.fixture(scope="module")
def model():
    return classifier.train(CFG, ROWS, seed=0, steps=60, batch_size=8, lr=3e-3)


@pytest.fixture(scope="module")
def bert_ckpt(tmp_path_factory):
    ids = np.frombuffer(b"the cat sat on the mat. " * 20, dtype=np.uint8)
    m = bert.train(bert.Config(**SHAPE), ids, seed=0, steps=3, batch_size=4)
    return bert.save(m, tmp_path_factory.mktemp("b") / "bert")


def test_learns_a_separable_task_and_predicts_label_names(model):
    assert model.labels == ("x", "y")
    assert classifier.predict(model, ["aaa", "bbbbb", "a"]) == ["x", "y", "x"]
    assert classifier.predict(model, []) == []
    with pytest.raises(TypeError, match="list of strings"):
        classifier.predict(model, "aaa")


def test_tl_head_config_is_a_classifier_and_loads_through_the_zoo(model, tmp_path):
    path = classifier.save(model, tmp_path / "clf")
    doc = json.loads((path / "config.json").read_text())
    assert doc["tl_arch"] == "classifier" and doc["tl_head"] == "cls"
    assert doc["labels"] == ["x", "y"]
    assert doc["config"]["backbone"] == "bert"
    assert zoo.kind_of(zoo.read_config(path)) == "classifier"
    loaded = zoo.load_model(path)
    assert isinstance(loaded, classifier.Model) and loaded.labels == model.labels
    texts = ["aa", "bbb", "ab", "ba b"]
    ids = torch.from_numpy(bert.encode_rows(texts, CFG.max_len))
    with torch.inference_mode():
        torch.testing.assert_close(loaded(ids), model(ids), rtol=0, atol=0)


def test_stored_labels_are_checked(model, tmp_path):
    path = classifier.save(model, tmp_path / "clf")
    doc = json.loads((path / "config.json").read_text())
    doc["labels"] = ["x"]
    (path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="config.json: labels: expected at least 2"):
        classifier.load(path)
    doc["labels"], doc["tl_head"] = ["x", "y"], "mean"
    (path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="expected top-level tl_head 'cls'"):
        classifier.load(path)


def test_init_copies_the_bert_encoder(bert_ckpt):
    m = classifier.Model(CFG, ["x", "y"])
    classifier.init_backbone_from_bert(m, bert_ckpt)
    src = bert.load(bert_ckpt).encoder.state_dict()
    for name, t in m.backbone.state_dict().items():
        assert torch.equal(t, src[name]), name


def test_init_from_a_bert_of_another_shape_is_refused(bert_ckpt):
    cfg = classifier.Config(**{**SHAPE, "n_embd": 16})
    with pytest.raises(ValueError, match="expected a bert with n_embd=16"):
        classifier.train(cfg, ROWS, seed=0, steps=1, init=bert_ckpt)


def test_train_with_init_starts_from_bert(bert_ckpt):
    # lr 0: the backbone stays exactly the pretrained encoder
    m = classifier.train(CFG, ROWS, seed=0, steps=1, init=bert_ckpt, lr=0.0)
    src = bert.load(bert_ckpt).encoder.state_dict()
    assert all(torch.equal(t, src[n]) for n, t in m.backbone.state_dict().items())


def test_mean_head_ignores_padding():
    m = classifier.Model(classifier.Config(tl_head="mean", dropout=0.0, **SHAPE), ["p", "q"])
    short = torch.from_numpy(bert.encode_rows(["abc"], 24))
    padded = torch.from_numpy(bert.encode_rows(["abc", "a much longer row"], 24))[:1]
    with torch.inference_mode():
        torch.testing.assert_close(m(padded), m(short), rtol=0, atol=1e-5)


def test_rows_and_config_are_checked():
    with pytest.raises(ValueError, match="at least 2 labels"):
        classifier.train(CFG, [("a", "x"), ("b", "x")], seed=0, steps=1)
    with pytest.raises(ValueError, match="row 1"):
        classifier.train(CFG, [("a", "x"), ("b", 3)], seed=0, steps=1)
    with pytest.raises(ValueError, match="tl_head"):
        classifier.Config(tl_head="pooler")
    with pytest.raises(ValueError, match="backbone"):
        classifier.Config(backbone="gpt")
