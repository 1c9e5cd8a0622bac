"""The training pieces every family shares (tinyllm/models/training.py): each family's
TrainConfig, passed to ``train`` as keywords, kept on the model, recorded in config.json under
``train_config`` and read back, also from the layout without ``train_config``; the lr schedule."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest
import torch

from tinyllm.checkpoint import CheckpointError
from tinyllm.models import FAMILIES, bigram, ngram, nplm
from tinyllm.models.training import TRAIN_CONFIG_KEY, lr_at, scoring, settings_of

TEXT = ("the cat sat on the mat. the dog sat on the log. " * 8).encode()
IDS = np.frombuffer(TEXT, dtype=np.uint8)
PAIRS = [("abc", "cba"), ("de", "ed"), ("fgh", "hgf")] * 4
ROWS = [("aa a", "x"), ("aaa", "x"), ("bb b", "y"), ("bbb", "y")] * 3
SENTS = [s.split() for s in TEXT.decode().split(".") if s.strip()]
ENC = {"max_len": 16, "n_layer": 1, "n_head": 2, "n_embd": 16}

# FAMILIES' name -> config, data, steps, settings that are not the defaults
CASES = {
    "bigram": ({}, IDS, 0, {}),
    "copy": ({}, PAIRS, 0, {}),
    "nplm": ({"context": 2, "emb_dim": 4, "hidden": 8}, IDS, 2, {"seq_len": 8, "lr": 0.01}),
    "rnnlm": ({"emb_dim": 4, "hidden": 8}, IDS, 2, {"bptt": 8, "clip": 0.5}),
    "word2vec": ({"dim": 4}, SENTS, 2, {"min_count": 1, "window": 2, "lr": 0.1}),
    "seq2seq": ({"emb_dim": 8, "hidden": 8, "max_len": 8}, PAIRS, 2, {"warmup": 1}),
    "transformer": (
        {"n_embd": 8, "n_head": 2, "n_enc_layer": 1, "n_dec_layer": 1, "max_len": 8},
        PAIRS,
        2,
        {"batch_size": 4, "clip": 0.0},
    ),
    "bert": (ENC, IDS, 2, {"batch_size": 4, "mask_prob": 0.3, "warmup": 1}),
    "electra": (ENC | {"gen_n_embd": 8}, IDS, 2, {"gen_lr": 1e-4, "disc_weight": 10.0}),
    "classifier": (ENC, ROWS, 2, {"batch_size": 4, "lr": 3e-3, "grad_clip": 0.0}),
}


def _trained(name):
    fam = FAMILIES[name]
    cfg, data, steps, settings = CASES[name]
    return fam, fam.train(fam.Config(**cfg), data, seed=0, steps=steps, **settings), settings


def _same_tensors(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return set(sa) == set(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("name", sorted(CASES))
def test_settings_are_kept_recorded_and_read_back(name, tmp_path):
    fam, model, settings = _trained(name)
    assert model.train_cfg == fam.TrainConfig(**settings)
    path = fam.save(model, tmp_path / name)
    doc = json.loads((path / "config.json").read_text())
    assert doc[TRAIN_CONFIG_KEY] == dataclasses.asdict(model.train_cfg)
    assert not set(doc["config"]) & {f.name for f in dataclasses.fields(fam.TrainConfig)}
    loaded = fam.load(path)
    assert loaded.train_cfg == model.train_cfg and loaded.cfg == model.cfg
    assert _same_tensors(loaded, model)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_config_json_without_train_config_loads(name, tmp_path):
    """Settings under ``config`` (and no ``train_config``) are read from there; without them the
    TrainConfig's defaults. The weights load either way."""
    fam, model, settings = _trained(name)
    path = fam.save(model, tmp_path / name)
    doc = json.loads((path / "config.json").read_text())
    recorded = doc.pop(TRAIN_CONFIG_KEY)
    (path / "config.json").write_text(json.dumps({**doc, "config": doc["config"] | recorded}))
    loaded = fam.load(path)
    assert loaded.train_cfg == model.train_cfg and loaded.cfg == model.cfg
    assert _same_tensors(loaded, model)
    (path / "config.json").write_text(json.dumps(doc))
    loaded = fam.load(path)
    assert loaded.train_cfg == fam.TrainConfig() and _same_tensors(loaded, model)


@pytest.mark.parametrize("name", ["nplm", "bert", "copy"])
def test_a_bad_train_config_is_refused_naming_config_json(name, tmp_path):
    fam, model, _ = _trained(name)
    path = fam.save(model, tmp_path / name)
    doc = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**doc, TRAIN_CONFIG_KEY: {"nope": 1}}))
    with pytest.raises(CheckpointError, match=rf"config\.json: invalid {fam.ARCH} train_config"):
        fam.load(path)
    (path / "config.json").write_text(json.dumps({**doc, TRAIN_CONFIG_KEY: [1]}))
    with pytest.raises(CheckpointError, match="expected 'train_config' to be an object"):
        fam.load(path)
    # a training setting under config beside a train_config is not the config's
    if doc[TRAIN_CONFIG_KEY]:
        key, value = next(iter(doc[TRAIN_CONFIG_KEY].items()))
        (path / "config.json").write_text(
            json.dumps({**doc, "config": {**doc["config"], key: value}})
        )
        with pytest.raises(CheckpointError, match=rf"invalid {fam.ARCH} config"):
            fam.load(path)


@pytest.mark.parametrize("name", sorted(CASES) + ["ngram"])
def test_an_unknown_setting_is_refused_listing_the_valid_ones(name):
    fam = FAMILIES[name]
    cfg, data, steps, _ = CASES.get(name, ({"order": 2}, IDS, 0, {}))
    valid = [f.name for f in dataclasses.fields(fam.TrainConfig)]
    with pytest.raises(TypeError, match=r"expected training settings among .*\['no_such'\]") as e:
        fam.train(fam.Config(**cfg), data, seed=0, steps=steps or 1, no_such=1)
    assert str(valid) in str(e.value)


def test_settings_of_builds_the_train_config():
    assert settings_of(nplm.TrainConfig, {"lr": 0.5}, "w") == nplm.TrainConfig(lr=0.5)
    with pytest.raises(TypeError, match=r"w: expected training settings among \[\], got \['x'\]"):
        settings_of(bigram.TrainConfig, {"x": 1}, "w")


def test_ngram_records_no_settings(tmp_path):
    model = ngram.train(ngram.Config(order=2), IDS, seed=0)
    assert model.train_cfg == ngram.TrainConfig()
    assert ngram.load(ngram.save(model, tmp_path / "kn.safetensors")).train_cfg == model.train_cfg


def test_lr_schedule_warms_up_then_decays_to_a_tenth():
    lrs = [lr_at(s, 100, 1.0, 10) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[10] == pytest.approx(1.0)
    assert lrs[-1] == pytest.approx(0.1, abs=1e-3)
    assert all(a >= b for a, b in itertools.pairwise(lrs[10:]))


def test_scoring_is_eval_and_inference_mode_and_gives_the_mode_back_on_an_error():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)).train()
    with pytest.raises(RuntimeError, match="boom"), scoring(model):
        assert not model.training and not model[1].training
        assert torch.is_inference_mode_enabled()
        raise RuntimeError("boom")
    assert model.training and model[1].training and not torch.is_inference_mode_enabled()
    model.eval()
    with scoring(model):
        pass
    assert not model.training  # an eval model stays in eval mode
