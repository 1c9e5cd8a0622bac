"""The shared encoder pieces (tinyllm/models/encoder.py): the 80/10/10 masking rule, row-wise
masks, the optimizer's weight-decay and learning-rate groups, the shape checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinyllm.models import encoder
from tinyllm.tokens import BOS, CLS, EOS, MASK, PAD, encode_batch

# ---- mlm_mask ----------------------------------------------------------------------------------


def test_specials_are_never_masked():
    ids = np.array([CLS, BOS, 97, 98, EOS, MASK, PAD, PAD] * 50)
    inputs, sel = encoder.mlm_mask(ids, np.random.default_rng(0), p=1.0)
    assert sel.tolist() == (ids < 256).tolist()  # p = 1: every byte and nothing else
    np.testing.assert_array_equal(inputs[ids >= 256], ids[ids >= 256])


def test_p_zero_changes_nothing():
    ids = np.arange(256)
    inputs, sel = encoder.mlm_mask(ids, np.random.default_rng(0), p=0.0)
    assert not sel.any()
    np.testing.assert_array_equal(inputs, ids)


def test_80_10_10_rule_and_selection_rate():
    rng = np.random.default_rng(1)
    ids = np.full(200_000, 101)  # one byte value: "unchanged" and "random == original" separable
    inputs, sel = encoder.mlm_mask(ids, rng, p=0.15)
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
    a = encoder.mlm_mask(ids, np.random.default_rng(5))
    b = encoder.mlm_mask(ids, np.random.default_rng(5))
    c = encoder.mlm_mask(ids, np.random.default_rng(6))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[1], c[1])


def test_mask_rows_are_prefix_stable():
    rows, _ = encode_batch(["first row", "second", "a third, longer row"], cls=True)
    inp, sel = encoder.mask_rows(rows, np.random.default_rng(3), 0.5)
    more, _ = encode_batch(["first row", "second", "a third, longer row", "x" * 30], cls=True)
    inp2, sel2 = encoder.mask_rows(more, np.random.default_rng(3), 0.5)
    T = rows.shape[1]
    np.testing.assert_array_equal(sel2[:3, :T], sel)  # a new row (and wider padding) ...
    np.testing.assert_array_equal(inp2[:3, :T], inp)  # ... leaves earlier rows' masks alone
    assert not sel[rows == PAD].any() and not sel[:, 0].any()


def test_bad_mask_arguments_are_refused():
    with pytest.raises(ValueError, match="mask_frac"):
        encoder.mlm_mask(np.arange(5), np.random.default_rng(0), mask_frac=0.95, random_frac=0.1)
    with pytest.raises(ValueError, match="integer ids"):
        encoder.mlm_mask(np.ones(3), np.random.default_rng(0))


# ---- the optimizer's weight-decay groups -------------------------------------------------------


def test_adamw_decays_linear_matrices_only():
    m = encoder.MaskedLM(24, 1, 2, 32)
    opt = encoder.adamw(m, 1e-3, 0.01)
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
    m = encoder.MaskedLM(24, 1, 2, 32)
    opt = encoder.adamw(m, 1e-3, 0.01, lr_scale=lambda n: 0.5 if n.startswith("head.") else 1.0)
    for g in opt.param_groups:
        want = {
            id(p)
            for n, p in m.named_parameters()
            if n.startswith("head.") == (g["lr_scale"] == 0.5)
        }
        assert {id(p) for p in g["params"]} <= want
    assert {g["lr_scale"] for g in opt.param_groups} == {0.5, 1.0}
    assert {g["lr_scale"] for g in encoder.adamw(m, 1e-3, 0.01).param_groups} == {1.0}


def test_shape_checks_name_the_config_and_field():
    class Shape:
        max_len, n_layer, n_head, n_embd, dropout = 24, 1, 4, 10, 0.0

    with pytest.raises(ValueError, match=r"x\.Config\.n_embd: expected a multiple of n_head=4"):
        encoder.check_encoder_shape(Shape, "x.Config")
    Shape.n_embd, Shape.max_len = 16, 1
    with pytest.raises(ValueError, match="CLS plus one byte"):
        encoder.check_encoder_shape(Shape, "x.Config")
    with pytest.raises(
        ValueError, match=r"x\.TrainConfig\.mask_prob: expected a float in \(0, 1\)"
    ):
        encoder.check_mask_prob(1.0, "x.TrainConfig")
