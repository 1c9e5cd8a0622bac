"""BERT: the bidirectional encoder with its key-padding mask, the masked-byte accuracy helper,
pretraining, its config and settings (the masking rule and the optimizer's groups:
test_encoder.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinyllm.models import bert
from tinyllm.tokens import PAD, encode_batch

TINY = bert.Config(max_len=24, n_layer=1, n_head=2, n_embd=32)
TEXT = ("the cat sat on the mat. the dog sat on the log. " * 12).encode()
IDS = np.frombuffer(TEXT, dtype=np.uint8)


@pytest.fixture(scope="module")
def model():
    return bert.train(TINY, IDS, seed=0, steps=200, batch_size=16, lr=3e-3)


# ---- the encoder -------------------------------------------------------------------------------


def test_padding_does_not_change_the_real_positions(model):
    ids, _ = encode_batch(["hello there"], cls=True)
    padded = np.concatenate([ids, np.full((1, 7), PAD)], axis=1)
    with torch.inference_mode():
        a = model(torch.from_numpy(ids))
        b = model(torch.from_numpy(padded))
    torch.testing.assert_close(b[:, : ids.shape[1]], a, rtol=0, atol=1e-5)


def test_attention_is_bidirectional(model):
    a, _ = encode_batch(["hello there"], cls=True)
    b = a.copy()
    b[0, -1] = ord("X")  # change the last byte only
    with torch.inference_mode():
        la, lb = model(torch.from_numpy(a)), model(torch.from_numpy(b))
    assert not torch.allclose(la[0, 1], lb[0, 1])  # an earlier position sees a later byte


def test_logits_at_equals_forward_at_the_selected_positions(model):
    ids, _ = encode_batch(["one", "two words"], cls=True)
    sel = np.zeros(ids.shape, dtype=bool)
    sel[0, 2] = sel[1, 1] = sel[1, 5] = True
    with torch.inference_mode():
        full = model(torch.from_numpy(ids))
        part = model.logits_at(torch.from_numpy(ids), torch.from_numpy(sel))
    assert tuple(full.shape) == (2, ids.shape[1], 256)
    torch.testing.assert_close(part, full[torch.from_numpy(sel)], rtol=0, atol=1e-5)


def test_too_long_and_bad_ids_are_refused(model):
    with pytest.raises(ValueError, match="max_len=24"):
        model(torch.zeros(1, 25, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"ids in \[0, 261\)"):
        model(torch.full((1, 3), 261))


# ---- mlm_accuracy ------------------------------------------------------------------------------


def test_mlm_accuracy_equals_a_hand_recomputation(model):
    texts = ["the cat sat", "on the mat.", "the log"] * 4
    correct, targets = bert.mlm_accuracy(model, texts, np.random.default_rng(7), p=0.3)
    rows = bert.encode_rows(texts, TINY.max_len)
    inputs, sel = bert.mask_rows(rows, np.random.default_rng(7), 0.3)
    with torch.inference_mode():
        pred = model(torch.from_numpy(inputs)).argmax(-1).numpy()
    np.testing.assert_array_equal(targets, rows[sel])
    np.testing.assert_array_equal(correct, (pred[sel] == rows[sel]).astype(float))
    assert correct.dtype == np.float64 and correct.size == sel.sum() > 0


def test_training_learns_more_than_the_most_frequent_byte(model):
    texts = ["the cat sat on the mat.", "the dog sat on the log."] * 20
    correct, targets = bert.mlm_accuracy(model, texts, np.random.default_rng(0))
    top = np.bincount(targets).max() / targets.size
    assert correct.mean() > top + 0.1, (correct.mean(), top)


def test_train_refuses_bad_data():
    with pytest.raises(ValueError, match="at least max_len=24 bytes"):
        bert.train(TINY, IDS[:10], seed=0, steps=1)
    with pytest.raises(ValueError, match="byte ids in 0..255"):
        bert.train(TINY, np.full(100, 300), seed=0, steps=1)
    with pytest.raises(ValueError, match="steps >= 1"):
        bert.train(TINY, IDS, seed=0, steps=0)


def test_same_seed_same_weights():
    a = bert.train(TINY, IDS, seed=3, steps=3, batch_size=4)
    b = bert.train(TINY, IDS, seed=3, steps=3, batch_size=4)
    for (n, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(p, q), n


def test_config_is_checked():
    with pytest.raises(ValueError, match="multiple of n_head"):
        bert.Config(n_embd=10, n_head=4)
    with pytest.raises(ValueError, match="mask_prob"):
        bert.TrainConfig(mask_prob=0.0)
    with pytest.raises(ValueError, match="batch_size"):
        bert.TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="warmup"):
        bert.TrainConfig(warmup=-1)
    with pytest.raises(TypeError, match="expected training settings among"):
        bert.train(TINY, IDS, seed=0, steps=1, no_such_setting=1)
