"""The encoder-decoder Transformer (tinyllm/models/transformer.py) and the cross-attention blocks
it adds to tinyllm/models/layers.py (what every seq2seq family does, teacher forcing == step by
step among it, is test_family_contract.py's)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tinyllm.models import transformer
from tinyllm.models.layers import CrossAttention, DecoderBlock
from tinyllm.models.translation import encode_sources, encode_targets

TINY = transformer.Config(n_embd=32, n_head=2, n_enc_layer=1, n_dec_layer=1, max_len=16)
SETTINGS = {"batch_size": 16, "lr": 5e-3, "warmup": 40}
SRCS = ["March 5, 2024", "a", "Côte d’Ivoire", ""]
TGTS = ["5 mars 2024", "", "Côte d’Ivoire", "xyz"]


def _model(seed=0, cfg=TINY):
    torch.manual_seed(seed)
    return transformer.Model(cfg).eval()


def test_cross_attention_equals_a_hand_computation():
    torch.manual_seed(0)
    D, H = 8, 2
    att = CrossAttention(D, H).eval()
    x, mem = torch.randn(1, 3, D), torch.randn(1, 4, D)
    mask = torch.tensor([True, True, False, True])[None, None, None, :]  # key 2 is padding
    q = att.c_q(x)[0]  # [3, D]
    k, v = att.c_kv(mem)[0].split(D, dim=1)  # [4, D] each
    heads = []
    for h in range(H):
        sl = slice(h * D // H, (h + 1) * D // H)
        s = q[:, sl] @ k[:, sl].T / math.sqrt(D // H)  # [3, 4]
        s[:, 2] = float("-inf")
        heads.append(torch.softmax(s, dim=-1) @ v[:, sl])
    want = att.c_proj(torch.cat(heads, dim=1))
    with torch.no_grad():
        torch.testing.assert_close(att(x, mem, mask)[0], want, rtol=0, atol=1e-6)


def test_decoder_block_ignores_masked_memory_and_the_future():
    torch.manual_seed(1)
    blk = DecoderBlock(8, 2).eval()
    x, mem = torch.randn(1, 5, 8), torch.randn(1, 4, 8)
    mask = torch.tensor([True, True, True, False])[None, None, None, :]
    mem2 = mem.clone()
    mem2[0, 3] = 100.0  # a padded memory position
    x2 = x.clone()
    x2[0, 4] = -50.0  # the last target position: earlier positions cannot see it
    with torch.no_grad():
        y = blk(x, mem, mask)
        torch.testing.assert_close(blk(x, mem2, mask), y, rtol=0, atol=1e-6)
        torch.testing.assert_close(blk(x2, mem, mask)[0, :4], y[0, :4], rtol=0, atol=1e-6)
        mem3 = mem.clone()
        mem3[0, 0] += 1.0  # a real memory position changes every output
        assert not torch.allclose(blk(x, mem3, mask), y)


def test_the_output_head_is_the_token_embedding():
    model = _model(2)
    src = encode_sources(SRCS, TINY.max_len)
    tgt_in, _ = encode_targets(TGTS, TINY.max_len)
    with torch.inference_mode():
        logits = model(src, tgt_in)
    assert "lm_head.weight" not in model.state_dict()
    with torch.no_grad():
        model.wte.weight[ord("x")] += 5.0 * model.ln_dec.weight  # moves every logit of x
    with torch.inference_mode():
        moved = model(src, tgt_in)
    assert not torch.allclose(moved, logits)


def test_learns_a_small_task():
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcde"), size=rng.integers(1, 5))) for _ in range(60)]
    pairs = [(w, w.upper()) for w in words]
    calls = []
    model = transformer.train(
        TINY, pairs, seed=0, steps=400, progress=lambda *a: calls.append(a), **SETTINGS
    )
    assert calls[-1][2] < 0.3 < 2.0 < calls[0][2]
    hyps = transformer.translate(model, words, beam=2)
    em = np.mean([h == t for h, (_, t) in zip(hyps, pairs, strict=True)])
    assert em >= 0.9, list(zip(words, hyps, strict=True))[:5]


def test_length_limits_are_refused_clearly():
    model = _model()
    with pytest.raises(ValueError, match="max_len <= 17"):
        transformer.translate(model, ["a"], max_len=18)
    with pytest.raises(ValueError, match="at most max_len"):
        model.encode(torch.full((1, 19), 97))


@pytest.mark.parametrize(
    "cls, kw, match",
    [
        (transformer.Config, {"n_embd": 30, "n_head": 4}, "multiple"),
        (transformer.Config, {"dropout": 1.0}, "dropout"),
        (transformer.TrainConfig, {"clip": -1.0}, "clip"),
        (transformer.TrainConfig, {"batch_size": 0}, "batch_size"),
    ],
)
def test_config_refuses_bad_values(cls, kw, match):
    with pytest.raises(ValueError, match=match):
        cls(**kw)
