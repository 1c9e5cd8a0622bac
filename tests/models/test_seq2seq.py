"""The attention seq2seq family (tinyllm/models/seq2seq.py): teacher forcing == step by step,
padding is invisible, never-emitted ids, learning a small task, config and settings checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinyllm.models import seq2seq
from tinyllm.models.translation import encode_sources, encode_targets
from tinyllm.tokens import BOS, CLS, EOS, MASK, PAD

TINY = seq2seq.Config(emb_dim=16, hidden=32, max_len=16)
SETTINGS = {"batch_size": 16, "lr": 1e-2, "warmup": 5}


def _model(seed=0, cfg=TINY):
    torch.manual_seed(seed)
    return seq2seq.Model(cfg).eval()


def _stepwise_logp(fam, model, srcs, tgts):
    """log p of each target position by decode_step, fed the gold prefix: [B, T, V]."""
    src = encode_sources(srcs, model.cfg.max_len)
    tgt_in, _ = encode_targets(tgts, model.cfg.max_len)
    state = fam.encode(model, src)
    out = []
    with torch.inference_mode():
        for t in range(tgt_in.shape[1]):
            logp, state = fam.decode_step(model, state, tgt_in[:, t])
            out.append(logp)
    return torch.stack(out, dim=1), tgt_in


SRCS = ["March 5, 2024", "a", "Côte d’Ivoire", ""]
TGTS = ["5 mars 2024", "", "Côte d’Ivoire", "xyz"]


def test_teacher_forcing_equals_decoding_step_by_step():
    model = _model()
    step, tgt_in = _stepwise_logp(seq2seq, model, SRCS, TGTS)
    with torch.inference_mode():
        tf = torch.log_softmax(model(encode_sources(SRCS, 16), tgt_in), dim=-1)
    real = tgt_in != PAD  # positions past a row's end read padding: not compared
    torch.testing.assert_close(step[real], tf[real], rtol=0, atol=1e-5)


def test_padding_is_invisible_to_a_source():
    """A source decoded in a batch with longer ones gives the log-probs it gets alone."""
    model = _model(1)
    batch, _ = _stepwise_logp(seq2seq, model, SRCS, TGTS)
    for i, (s, t) in enumerate(zip(SRCS, TGTS, strict=True)):
        alone, tgt_in = _stepwise_logp(seq2seq, model, [s], [t])
        n = tgt_in.shape[1]
        torch.testing.assert_close(batch[i, :n], alone[0], rtol=0, atol=1e-5)


def test_only_bytes_and_eos_are_emitted():
    model = _model(2)
    logp, _ = _stepwise_logp(seq2seq, model, SRCS, TGTS)
    for special in (PAD, BOS, MASK, CLS):
        assert torch.isneginf(logp[..., special]).all()
    assert torch.isfinite(logp[..., :256]).all() and torch.isfinite(logp[..., EOS]).all()
    # each row is a distribution over the 257 ids that can be emitted
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(logp.shape[:2]), atol=1e-5, rtol=0)


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
