"""NPLM: the Bengio et al. formula computed by hand, padding of the short prefix, locality."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tinyllm.models import nplm

CFG = nplm.Config(context=3, emb_dim=4, hidden=8, direct=True)
IDS = np.frombuffer(b"strong winds pushed a huge bushfire towards the town", np.uint8)


def _model(cfg=CFG, seed=0) -> nplm.Model:
    torch.manual_seed(seed)
    return nplm.Model(cfg).eval()


def _by_hand(model: nplm.Model, context: list[int], target: int) -> float:
    """-ln softmax(U tanh(H e + d) + b + W e)[target], e = concatenated embeddings (float64)."""
    sd = {k: v.double() for k, v in model.state_dict().items()}
    e = torch.cat([sd["emb.weight"][c] for c in context])  # [k * emb_dim]
    h = torch.tanh(sd["hidden.weight"] @ e + sd["hidden.bias"])
    logits = sd["out.weight"] @ h + sd["out.bias"]
    if model.cfg.direct:
        logits = logits + sd["direct.weight"] @ e
    return -torch.log_softmax(logits, dim=0)[target].item()


@pytest.mark.parametrize("direct", [True, False])
def test_formula_and_padding_of_the_short_prefix(direct):
    cfg = nplm.Config(context=3, emb_dim=4, hidden=8, direct=direct)
    model = _model(cfg)
    got = nplm.token_nlls(model, IDS)
    P = nplm.PAD
    x = [int(v) for v in IDS]
    # token 1 sees [PAD, PAD, x0], token 2 [PAD, x0, x1], then real bytes only
    assert got[0] == pytest.approx(_by_hand(model, [P, P, x[0]], x[1]), rel=1e-5)
    assert got[1] == pytest.approx(_by_hand(model, [P, x[0], x[1]], x[2]), rel=1e-5)
    for t in (3, 10, len(x) - 1):
        assert got[t - 1] == pytest.approx(_by_hand(model, x[t - 3 : t], x[t]), rel=1e-5)
    assert model.emb.num_embeddings == 257  # 256 bytes + PAD


def test_only_the_last_k_bytes_matter():
    model = _model()
    base = nplm.token_nlls(model, IDS)
    changed = IDS.copy()
    changed[10] = ord("#")
    diff = nplm.token_nlls(model, changed) != base
    # byte 10 is in the context of tokens 11, 12, 13 (k = 3) and is itself token 10
    assert set(np.flatnonzero(diff) + 1) <= {10, 11, 12, 13}
    assert diff[10:13].all()


def test_chunks_do_not_change_the_nlls():
    model = _model()
    np.testing.assert_allclose(
        nplm.token_nlls(model, IDS, chunk=4), nplm.token_nlls(model, IDS), rtol=0, atol=1e-6
    )


def test_training_is_reproducible_and_learns():
    data = np.frombuffer(b"abcabcabcabcabcabcabcabcabcabc" * 4, np.uint8)
    cfg = nplm.Config(context=2, emb_dim=8, hidden=16)
    settings = {"seq_len": 8, "batch_size": 8, "lr": 0.03}
    a = nplm.train(cfg, data, seed=1, steps=60, **settings)
    b = nplm.train(cfg, data, seed=1, steps=60, **settings)
    for k, v in a.state_dict().items():
        torch.testing.assert_close(v, b.state_dict()[k], rtol=0, atol=0)
    # "abc" repeated: after two bytes the next is certain; the model gets close to that
    assert nplm.token_nlls(a, data)[2:].mean() < 0.3 * math.log(256)


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="context"):
        nplm.Config(context=0)
    with pytest.raises(TypeError):
        nplm.Config(window=3)
    with pytest.raises(TypeError):
        nplm.Config(lr=0.01)  # a training setting: nplm.TrainConfig's
    with pytest.raises(ValueError, match="seq_len"):
        nplm.TrainConfig(seq_len=0)
    with pytest.raises(ValueError, match="lr"):
        nplm.TrainConfig(lr=float("nan"))
