"""The attention seq2seq family (tinyllm/models/seq2seq.py): learning a small task, config and
settings checks (teacher forcing == step by step, invisible padding and the ids never emitted are
test_family_contract.py's, for every seq2seq family)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinyllm.models import seq2seq

TINY = seq2seq.Config(emb_dim=16, hidden=32, max_len=16)
SETTINGS = {"batch_size": 16, "lr": 1e-2, "warmup": 5}


def _model(seed=0, cfg=TINY):
    torch.manual_seed(seed)
    return seq2seq.Model(cfg).eval()


def _upper_task(n=60, seed=0):
    rng = np.random.default_rng(seed)
    words = ["".join(rng.choice(list("abcde"), size=rng.integers(1, 5))) for _ in range(n)]
    return [(w, w.upper()[::-1]) for w in words]


def test_learns_a_small_task_and_translate_returns_its_answers():
    pairs = _upper_task()
    calls = []
    model = seq2seq.train(
        TINY, pairs, seed=0, steps=250, progress=lambda *a: calls.append(a), **SETTINGS
    )
    assert [c[0] for c in calls] == list(range(1, 251))
    assert calls[-1][2] < 0.2 < 2.0 < calls[0][2]
    srcs = [s for s, _ in pairs]
    hyps = seq2seq.translate(model, srcs, beam=2)
    em = np.mean([h == t for h, (_, t) in zip(hyps, pairs, strict=True)])
    assert em >= 0.9, list(zip(srcs, hyps, strict=True))[:5]
    assert not model.training


def test_training_is_reproducible_with_the_same_seed():
    pairs = _upper_task(20)
    a = seq2seq.train(TINY, pairs, seed=3, steps=5, **SETTINGS).state_dict()
    b = seq2seq.train(TINY, pairs, seed=3, steps=5, **SETTINGS).state_dict()
    c = seq2seq.train(TINY, pairs, seed=4, steps=5, **SETTINGS).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


@pytest.mark.parametrize(
    "cls, kw, match",
    [
        (seq2seq.Config, {"hidden": 33}, "even"),
        (seq2seq.Config, {"emb_dim": 0}, "emb_dim"),
        (seq2seq.TrainConfig, {"lr": -1.0}, "lr"),
        (seq2seq.TrainConfig, {"warmup": -1}, "warmup"),
        (seq2seq.Config, {"max_len": 0}, "max_len"),
    ],
)
def test_config_refuses_bad_values(cls, kw, match):
    with pytest.raises(ValueError, match=match):
        cls(**kw)


def test_train_refuses_zero_steps():
    with pytest.raises(ValueError, match="steps >= 1"):
        seq2seq.train(TINY, [("a", "b")], seed=0, steps=0)


def test_translate_refuses_one_string():
    with pytest.raises(TypeError, match="list of strings"):
        seq2seq.translate(_model(), "abc")
