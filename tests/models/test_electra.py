"""ELECTRA: one checkpoint with generator and discriminator, inverse-CDF sampling, and which
tokens replaced-token detection counts (a sample equal to the original is original)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors import safe_open

from tinyllm.models import electra
from tinyllm.models.encoder import encode_rows
from tinyllm.tokens import N_BYTES

TINY = electra.Config(
    max_len=24, n_layer=1, n_head=2, n_embd=32, gen_n_layer=1, gen_n_head=2, gen_n_embd=16
)
TEXT = ("the cat sat on the mat. the dog sat on the log. " * 12).encode()
IDS = np.frombuffer(TEXT, dtype=np.uint8)
TEXTS = ["the cat sat", "on the mat.", "the dog", "sat on the log."] * 5


@pytest.fixture(scope="module")
def model():
    return electra.train(TINY, IDS, seed=0, steps=40, batch_size=16, lr=3e-3)


def test_inverse_cdf_sample_hand_values():
    probs = np.array([[0.2, 0.5, 0.3]] * 6)
    u = np.array([0.0, 0.1999, 0.2, 0.6999, 0.7, 0.9999])
    assert electra.inverse_cdf_sample(probs, u).tolist() == [0, 0, 1, 1, 2, 2]
    # a zero-probability index is never drawn, even at u = 0
    assert electra.inverse_cdf_sample(np.array([[0.0, 1.0]]), np.array([0.0])).tolist() == [1]


def test_inverse_cdf_sample_frequencies_follow_the_probabilities():
    rng = np.random.default_rng(0)
    p = np.array([0.1, 0.0, 0.6, 0.3])
    k = electra.inverse_cdf_sample(np.tile(p, (100_000, 1)), rng.random(100_000))
    np.testing.assert_allclose(np.bincount(k, minlength=4) / k.size, p, atol=0.006)


def test_counted_tokens_are_the_bytes_of_each_row(model):
    texts = ["ab", "cde", ""]
    r = electra.rtd_accuracy(model, texts, np.random.default_rng(0))
    assert r["correct"].size == r["replaced"].size == r["masked"].size == 5  # no CLS, no PAD
    assert r["gen_correct"].size == r["masked"].sum()
    assert not (r["replaced"] & ~r["masked"]).any()  # only masked tokens can be replaced


class _Constant(torch.nn.Module):
    """A generator stand-in whose logits put all mass on one byte per position."""

    def __init__(self, pick):
        super().__init__()
        self.pick = pick  # (ids [B, T], sel [B, T]) -> bytes [N]

    def logits_at(self, ids, sel):
        b = self.pick(ids, sel)
        out = torch.full((b.numel(), N_BYTES), -1e9)
        out[torch.arange(b.numel()), b] = 0.0
        return out


def _with_generator(model, pick):
    twin = electra.Model(model.cfg)
    twin.load_state_dict(model.state_dict())
    twin.generator = _Constant(pick)
    return twin


def test_a_sample_equal_to_the_original_counts_as_original(model):
    texts = ["hello world", "byte level"] * 10
    originals = {}

    def always_original(ids, sel):
        return originals["rows"][sel.numpy()]

    originals["rows"] = torch.from_numpy(encode_rows(texts, TINY.max_len)).numpy()
    twin = _with_generator(model, lambda ids, sel: torch.from_numpy(always_original(ids, sel)))
    r = electra.rtd_accuracy(twin, texts, np.random.default_rng(1))
    assert r["masked"].sum() > 0
    assert not r["replaced"].any()
    assert r["gen_correct"].mean() == 1.0

    # a generator that always writes NUL (never in the texts): every masked token is replaced
    twin = _with_generator(model, lambda ids, sel: torch.zeros(int(sel.sum()), dtype=torch.long))
    r = electra.rtd_accuracy(twin, texts, np.random.default_rng(1))
    np.testing.assert_array_equal(r["replaced"], r["masked"])


def test_correct_is_discriminator_logit_sign_against_replaced(model):
    texts = ["hello world", "byte level"] * 10
    twin = _with_generator(model, lambda ids, sel: torch.zeros(int(sel.sum()), dtype=torch.long))
    twin.forward = lambda ids: torch.full(ids.shape, 5.0)  # says "replaced" everywhere
    r = electra.rtd_accuracy(twin, texts, np.random.default_rng(1))
    np.testing.assert_array_equal(r["correct"], r["replaced"].astype(float))


def test_same_seed_same_replacements_other_seed_other_masks(model):
    a = electra.rtd_accuracy(model, TEXTS, np.random.default_rng(4))
    b = electra.rtd_accuracy(model, TEXTS, np.random.default_rng(4))
    c = electra.rtd_accuracy(model, TEXTS, np.random.default_rng(5))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["masked"], c["masked"])


def test_one_checkpoint_holds_both_networks_and_loads_identically(model, tmp_path):
    path = electra.save(model, tmp_path / "electra")
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        prefixes = {k.split(".")[0] for k in f.keys()}  # noqa: SIM118
    assert prefixes == {"generator", "discriminator", "disc_head"}
    loaded = electra.load(path)
    assert loaded.cfg == model.cfg
    a = electra.rtd_accuracy(model, TEXTS, np.random.default_rng(2))
    b = electra.rtd_accuracy(loaded, TEXTS, np.random.default_rng(2))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_discriminator_logits_shape(model):
    ids = torch.from_numpy(np.array([[260, 97, 98, 256]]))
    with torch.inference_mode():
        assert tuple(model(ids).shape) == (1, 4)


def test_config_is_checked():
    with pytest.raises(ValueError, match="gen_n_embd|n_embd"):
        electra.Config(gen_n_embd=10, gen_n_head=4)
    with pytest.raises(ValueError, match="disc_weight"):
        electra.TrainConfig(disc_weight=0)
    with pytest.raises(ValueError, match="mask_prob"):
        electra.Config(mask_prob=1.0)
    with pytest.raises(TypeError):
        electra.Config(gen_lr=1e-3)  # a training setting: electra.TrainConfig's


def test_shared_encoder_is_one_network_with_two_heads(tmp_path):
    cfg = electra.Config(max_len=24, n_layer=1, n_head=2, n_embd=32, share_encoder=True)
    m = electra.train(cfg, IDS, seed=0, steps=3, batch_size=4)
    assert m.disc_encoder() is m.generator.encoder
    gen = m.cfg.generator_shape()
    assert gen.n_embd == 32 and gen.n_layer == 1  # gen_* not used
    assert m.generator.encoder.wte.embedding_dim == 32 and len(m.generator.encoder.h) == 1
    names = set(electra.Model(cfg).state_dict())
    assert not any(n.startswith("discriminator.") for n in names)
    loaded = electra.load(electra.save(m, tmp_path / "shared"))
    a = electra.rtd_accuracy(m, TEXTS, np.random.default_rng(2))
    b = electra.rtd_accuracy(loaded, TEXTS, np.random.default_rng(2))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_gen_lr_scales_the_generator_only():
    # gen_lr ~ 0: after a few steps the generator still holds its initial weights (AdamW moves a
    # weight by at most ~lr per step, decay included), while the discriminator has moved
    torch.manual_seed(0)
    init = electra.Model(TINY).state_dict()
    m = electra.train(TINY, IDS, seed=0, steps=5, batch_size=4, lr=3e-3, gen_lr=3e-12)
    moved = {n: float((p - init[n]).abs().max()) for n, p in m.state_dict().items()}
    assert max(v for n, v in moved.items() if n.startswith("generator.")) < 1e-9
    assert max(v for n, v in moved.items() if n.startswith("discriminator.")) > 1e-3
    # gen_lr = lr is the default: the same weights
    a = electra.train(TINY, IDS, seed=0, steps=3, batch_size=4, lr=3e-3)
    b = electra.train(TINY, IDS, seed=0, steps=3, batch_size=4, lr=3e-3, gen_lr=3e-3)
    for (n, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(p, q), n


def test_gen_lr_is_checked():
    shared = electra.Config(max_len=24, n_layer=1, n_head=2, n_embd=32, share_encoder=True)
    with pytest.raises(ValueError, match="gen_lr"):
        electra.train(shared, IDS, seed=0, steps=1, gen_lr=1e-3)
    with pytest.raises(ValueError, match="gen_lr"):
        electra.train(TINY, IDS, seed=0, steps=1, gen_lr=0.0)


def test_local_bias_hand_values_and_init():
    want = torch.tensor([[-2.0, -1.0, 0.0, -1.0, -2.0], [-1.0, -0.5, 0.0, -0.5, -1.0]])
    torch.testing.assert_close(electra.local_bias(2, 3, 1.0), want)
    cfg = electra.Config(
        max_len=3, n_layer=1, n_head=2, n_embd=8, gen_n_embd=8, disc_local_bias=1.0
    )
    m = electra.Model(cfg)
    torch.testing.assert_close(m.discriminator.rel_bias.detach(), want)
    assert not m.generator.encoder.rel_bias.any()  # the generator starts uniform
    assert not electra.Model(TINY).discriminator.rel_bias.any()  # default 0: uniform
    with pytest.raises(ValueError, match="disc_local_bias"):
        electra.Config(disc_local_bias=-1.0)
