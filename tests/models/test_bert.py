"""BERT: the 80/10/10 masking rule, the bidirectional encoder with its key-padding mask, the
masked-byte accuracy helper, pretraining, save/load."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinyllm.models import bert
from tinyllm.tokens import BOS, CLS, EOS, MASK, PAD, encode_batch

TINY = bert.Config(max_len=24, n_layer=1, n_head=2, n_embd=32)
TEXT = ("the cat sat on the mat. the dog sat on the log. " * 12).encode()
IDS = np.frombuffer(TEXT, dtype=np.uint8)


@pytest.fixture(scope="module")
def model():
    return bert.train(TINY, IDS, seed=0, steps=200, batch_size=16, lr=3e-3)


# ---- mlm_mask ----------------------------------------------------------------------------------


def test_specials_are_never_masked():
    ids = np.array([CLS, BOS, 97, 98, EOS, MASK, PAD, PAD] * 50)
    inputs, sel = bert.mlm_mask(ids, np.random.default_rng(0), p=1.0)
    assert sel.tolist() == (ids < 256).tolist()  # p = 1: every byte and nothing else
    np.testing.assert_array_equal(inputs[ids >= 256], ids[ids >= 256])


def test_p_zero_changes_nothing():
    ids = np.arange(256)
    inputs, sel = bert.mlm_mask(ids, np.random.default_rng(0), p=0.0)
    assert not sel.any()
    np.testing.assert_array_equal(inputs, ids)


def test_80_10_10_rule_and_selection_rate():
    rng = np.random.default_rng(1)
    ids = np.full(200_000, 101)  # one byte value: "unchanged" and "random == original" separable
    inputs, sel = bert.mlm_mask(ids, rng, p=0.15)
    n = sel.sum()
    assert abs(n / ids.size - 0.15) < 0.005
    masked = (inputs == MASK).sum() / n
    same = (inputs[sel] == 101).sum() / n  # 10% kept + 10% * 1/256 random that hit 101
    rand = ((inputs != MASK) & (inputs != 101)).sum() / n
    assert abs(masked - 0.8) < 0.01
    assert abs(same - (0.1 + 0.1 / 256)) < 0.01
    assert abs(rand - 0.1 * 255 / 256) < 0.01
    assert not ((inputs != ids) & ~sel).any()  # only selected positions change
    assert inputs.max() <= MASK and inputs.min() >= 0


def test_same_seed_same_masks_other_seed_other_masks():
    ids = np.tile(np.arange(97, 123), 20)
    a = bert.mlm_mask(ids, np.random.default_rng(5))
    b = bert.mlm_mask(ids, np.random.default_rng(5))
    c = bert.mlm_mask(ids, np.random.default_rng(6))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[1], c[1])


def test_mask_rows_are_prefix_stable():
    rows, _ = encode_batch(["first row", "second", "a third, longer row"], cls=True)
    inp, sel = bert.mask_rows(rows, np.random.default_rng(3), 0.5)
    more, _ = encode_batch(["first row", "second", "a third, longer row", "x" * 30], cls=True)
    inp2, sel2 = bert.mask_rows(more, np.random.default_rng(3), 0.5)
    T = rows.shape[1]
    np.testing.assert_array_equal(sel2[:3, :T], sel)  # a new row (and wider padding) ...
    np.testing.assert_array_equal(inp2[:3, :T], inp)  # ... leaves earlier rows' masks alone
    assert not sel[rows == PAD].any() and not sel[:, 0].any()


def test_bad_mask_arguments_are_refused():
    with pytest.raises(ValueError, match="mask_frac"):
        bert.mlm_mask(np.arange(5), np.random.default_rng(0), mask_frac=0.95, random_frac=0.1)
    with pytest.raises(ValueError, match="integer ids"):
        bert.mlm_mask(np.ones(3), np.random.default_rng(0))


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
        bert.Config(mask_prob=0.0)


# ---- the optimizer's weight-decay groups -------------------------------------------------------


def test_adamw_decays_linear_matrices_only():
    m = bert.Model(TINY)
    opt = bert.adamw(m, 1e-3, 0.01)
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    names = {n for n, p in m.named_parameters() if id(p) in decayed}
    # the attention bias is 2-d but no Linear matrix: decay would pull it back to uniform attention
    assert "encoder.rel_bias" not in names
    assert "encoder.wte.weight" not in names and "encoder.wpe.weight" not in names
    assert not any(n.endswith(".bias") or ".ln" in n for n in names)
    linear = {n + ".weight" for n, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)}
    assert names == linear
    assert all(g["weight_decay"] in (0.0, 0.01) for g in opt.param_groups)
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(m.parameters()))


def test_adamw_lr_scale_groups():
    m = bert.Model(TINY)
    opt = bert.adamw(m, 1e-3, 0.01, lr_scale=lambda n: 0.5 if n.startswith("head.") else 1.0)
    for g in opt.param_groups:
        want = {
            id(p)
            for n, p in m.named_parameters()
            if n.startswith("head.") == (g["lr_scale"] == 0.5)
        }
        assert {id(p) for p in g["params"]} <= want
    assert {g["lr_scale"] for g in opt.param_groups} == {0.5, 1.0}
    assert {g["lr_scale"] for g in bert.adamw(m, 1e-3, 0.01).param_groups} == {1.0}
