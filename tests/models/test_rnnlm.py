"""RNN LM: the hidden state crosses chunk boundaries (chunked == one pass), GRU and LSTM."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tinyllm.models import rnnlm

TEXT = (
    b"A new blaze near Goulburn, south-west of Sydney, has forced the closure of the Hume "
    b"Highway. At about 4:00pm AEDT, a marked deterioration in the weather as a storm cell moved "
    b"east across the Blue Mountains forced authorities to make a decision to evacuate people."
)
IDS = np.frombuffer(TEXT, np.uint8)


def _model(cell: str) -> rnnlm.Model:
    torch.manual_seed(0)
    return rnnlm.Model(rnnlm.Config(cell=cell, emb_dim=8, hidden=16)).eval()


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_chunked_equals_one_pass(cell, chunk):
    model = _model(cell)
    one_pass = rnnlm.token_nlls(model, IDS, chunk=IDS.size)
    chunked = rnnlm.token_nlls(model, IDS, chunk=chunk)
    np.testing.assert_allclose(chunked, one_pass, rtol=0, atol=1e-6)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_one_pass_is_the_forward_from_a_zero_state(cell):
    model = _model(cell)
    x = torch.from_numpy(IDS.astype(np.int64))
    with torch.inference_mode():
        logits, _, _ = model(x[None, :-1])
    expected = -F.log_softmax(logits[0].double(), -1)[torch.arange(IDS.size - 1), x[1:]]
    np.testing.assert_allclose(
        rnnlm.token_nlls(model, IDS, chunk=10), expected.numpy(), rtol=0, atol=1e-6
    )


def test_a_token_far_back_still_matters_after_many_chunks():
    model = _model("gru")
    changed = IDS.copy()
    changed[0] = ord("Z")
    a = rnnlm.token_nlls(model, IDS, chunk=5)
    b = rnnlm.token_nlls(model, changed, chunk=5)
    assert np.abs(a[20:] - b[20:]).max() > 0  # the state carried byte 0 past chunk 4


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_truncated_bptt_training_learns(cell):
    data = np.frombuffer(b"hello world. " * 40, np.uint8)
    cfg = rnnlm.Config(cell=cell, emb_dim=8, hidden=32)
    losses = []
    model = rnnlm.train(
        cfg,
        data,
        seed=0,
        steps=60,
        progress=lambda s, t, loss: losses.append(loss),
        bptt=8,
        batch_size=4,
        lr=0.02,
    )
    assert len(losses) == 60
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert rnnlm.token_nlls(model, data).mean() < 1.0  # nats/byte on a 13-byte period


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="cell"):
        rnnlm.Config(cell="rnn")
    with pytest.raises(ValueError, match="bptt"):
        rnnlm.TrainConfig(bptt=0)
    with pytest.raises(ValueError, match="dropout"):
        rnnlm.Config(dropout=1.0)
