"""The gpt family: shapes, loss, causality, checkpoints, the KV cache and the shared layers.

Converting to and from Hugging Face GPT-2 is the hf family's (tests/models/test_hf.py).
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gpt_helpers import TINY, random_ids, randomize
from safetensors.torch import load_file, save_file

from tinyllm.checkpoint import CheckpointError
from tinyllm.models import gpt
from tinyllm.models.layers import SelfAttention


def test_shapes():
    m = gpt.Model(TINY).eval()
    idx = random_ids(3, 10)
    logits, loss = m(idx)
    assert logits.shape == (3, 10, 256) and logits.dtype == torch.float32
    assert loss is None
    assert m.hidden(idx).shape == (3, 10, 16)
    assert m.lm_head.weight.shape == (256, 16) and m.lm_head.bias is None
    with pytest.raises(ValueError, match="block_size=16"):
        m(random_ids(1, 17))


def test_forward_loss_is_mean_cross_entropy():
    m = randomize(gpt.Model(TINY))
    idx, tgt = random_ids(2, 12, seed=1), random_ids(2, 12, seed=2)
    logits, loss = m(idx, tgt)
    # oracle: -log softmax at the target, averaged over all B*T positions, by hand in float64
    lp = logits.double() - torch.logsumexp(logits.double(), dim=-1, keepdim=True)
    manual = -lp.gather(-1, tgt[..., None]).mean()
    assert loss.item() == pytest.approx(manual.item(), abs=1e-5)
    assert loss.item() == pytest.approx(F.cross_entropy(logits.flatten(0, 1), tgt.flatten()).item())


def test_hidden_then_lm_head_equals_forward_logits():
    m = randomize(gpt.Model(TINY))
    idx = random_ids(2, 9)
    logits, _ = m(idx)
    torch.testing.assert_close(m.lm_head(m.hidden(idx)), logits, rtol=0, atol=0)


@pytest.mark.parametrize("act", ["gelu_tanh", "gelu"])
def test_inference_hidden_equals_the_modules_forward(act):
    """In inference, hidden() runs the blocks through Model._block (in-place GELU and residual
    additions): the same kernels as Block.forward, so bit-identical at the full span."""
    m = randomize(gpt.Model(dataclasses.replace(TINY, activation=act)))
    idx = random_ids(3, 13)
    x = m.wte(idx) + m.wpe(torch.arange(13))
    for block in m.h:
        x = block(x)
    want = m.ln_f(x).detach()  # the modules, autograd on
    with torch.inference_mode():
        got = m.hidden(idx)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("lo, hi", [(0, 12), (6, 11), (11, 12), (0, 1), (3, 12), (0, 5)])
def test_hidden_keep_equals_the_full_pass_at_the_kept_positions(lo, hi, monkeypatch):
    """hidden(idx, keep=slice(lo, hi)) runs the last block at lo..hi-1 only (keys and values of
    0..hi-1): the full pass's hidden states there, to float32 rounding; when that would skip
    fewer than _MIN_ROWS_SAVED rows it runs the full block and slices (exactly the full pass);
    in training (autograd) it is the full pass sliced."""
    m = randomize(gpt.Model(dataclasses.replace(TINY, n_layer=3)))
    idx = random_ids(4, 12, seed=5)
    full = m.hidden(idx).detach()
    with torch.inference_mode():
        few = m.hidden(idx, keep=slice(lo, hi))  # 4 x (12 - kept) rows skipped: < 64
        monkeypatch.setattr(gpt, "_MIN_ROWS_SAVED", 1)
        kept = m.hidden(idx, keep=slice(lo, hi))
    assert kept.shape == few.shape == (4, hi - lo, 16)
    torch.testing.assert_close(few, full[:, lo:hi], rtol=0, atol=0)
    torch.testing.assert_close(kept, full[:, lo:hi], rtol=0, atol=2e-6)
    m.train()
    torch.testing.assert_close(m.hidden(idx, keep=slice(lo, hi)), full[:, lo:hi], rtol=0, atol=0)


def test_hidden_keep_refuses_an_empty_or_strided_slice():
    m = gpt.Model(TINY).eval()
    with pytest.raises(ValueError, match="at least one"):
        m.hidden(random_ids(1, 8), keep=slice(5, 5))
    with pytest.raises(ValueError, match="step 1"):
        m.hidden(random_ids(1, 8), keep=slice(0, 8, 2))


def test_causal_future_tokens_do_not_change_earlier_logits():
    m = randomize(gpt.Model(TINY))
    idx = random_ids(1, 12)
    j = 7
    idx2 = idx.clone()
    idx2[0, j] = (idx2[0, j] + 1) % 256
    a, _ = m(idx)
    b, _ = m(idx2)
    torch.testing.assert_close(a[:, :j], b[:, :j], rtol=0, atol=1e-6)
    assert (a[:, j:] - b[:, j:]).abs().amax(-1).min() > 1e-4  # every later position sees it


def test_tied_head_shares_the_embedding():
    m = gpt.Model(TINY)
    assert m.lm_head.weight is m.wte.weight
    u = gpt.Model(dataclasses.replace(TINY, tie_weights=False))
    assert u.lm_head.weight is not u.wte.weight


@pytest.mark.parametrize("tie", [True, False])
def test_save_load_gives_identical_logits(tmp_path, tie):
    cfg = dataclasses.replace(TINY, tie_weights=tie, bias=tie)  # cover both bias settings too
    m = randomize(gpt.Model(cfg))
    gpt.save(m, tmp_path / "ck")
    stored = load_file(str(tmp_path / "ck" / "model.safetensors"))
    assert ("lm_head.weight" in stored) is (not tie)  # one copy of a tied matrix
    doc = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert doc["tl_arch"] == "gpt" and doc["config"] == dataclasses.asdict(cfg)
    m2 = gpt.load(tmp_path / "ck")
    assert m2.cfg == cfg
    assert (m2.lm_head.weight is m2.wte.weight) is tie  # re-tied, not two copies
    idx = random_ids(2, 16)
    torch.testing.assert_close(m2(idx)[0], m(idx)[0], rtol=0, atol=0)


def _corrupt(path, name, fn):
    f = path / "model.safetensors"
    t = load_file(str(f))
    t[name] = fn(t[name])
    save_file(t, str(f), metadata={"tl_arch": "gpt"})
    return f


@pytest.mark.parametrize(
    "name, fn, match",
    [
        ("h.0.attn.c_proj.weight", lambda t: t[:, :-1].clone(), "expected shape"),
        ("wpe.weight", lambda t: t.double(), "expected shape"),
        ("h.1.mlp.c_fc.bias", lambda t: torch.full_like(t, float("nan")), "finite"),
    ],
)
def test_bad_checkpoint_raises_checkpoint_error_naming_file(tmp_path, name, fn, match):
    gpt.save(gpt.Model(TINY), tmp_path / "ck")
    f = _corrupt(tmp_path / "ck", name, fn)
    with pytest.raises(CheckpointError, match=match) as e:
        gpt.load(tmp_path / "ck")
    assert str(f) in str(e.value) and name in str(e.value)


def test_bad_config_raises_checkpoint_error(tmp_path):
    gpt.save(gpt.Model(TINY), tmp_path / "ck")
    p = tmp_path / "ck" / "config.json"
    doc = json.loads(p.read_text())
    doc["config"]["n_layers"] = 3  # a typo'd key must not be silently ignored
    p.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="config.json"):
        gpt.load(tmp_path / "ck")
    with pytest.raises(TypeError):
        gpt.Config(**doc["config"])
    with pytest.raises(ValueError, match="n_embd"):
        gpt.Config(n_embd=10, n_head=4)


def test_loss_falls_on_a_tiny_batch():
    data = np.frombuffer(b"the cat sat on the mat. " * 40, dtype=np.uint8)
    losses = []
    gpt.train(
        TINY, data, seed=0, steps=30, batch_size=8, lr=1e-2,
        progress=lambda s, n, loss: losses.append(loss),
    )  # fmt: skip
    assert len(losses) == 30
    assert losses[0] == pytest.approx(math.log(256), abs=0.3)  # starts near uniform
    assert np.mean(losses[-5:]) < 0.5 * losses[0]


def test_train_is_reproducible_and_checks_data():
    data = np.frombuffer(b"abcdefgh" * 20, dtype=np.uint8)
    a = gpt.train(TINY, data, seed=3, steps=3, batch_size=4)
    b = gpt.train(TINY, data, seed=3, steps=3, batch_size=4)
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=k)
    with pytest.raises(ValueError, match="block_size"):
        gpt.train(TINY, data[:10], seed=0, steps=1)
    with pytest.raises(ValueError, match="1-d"):
        gpt.train(TINY, data.reshape(2, -1), seed=0, steps=1)


# ------------------------------------------------------------------------------- scoring


def test_token_nlls_single_window_equals_log_softmax():
    pytest.importorskip("tinyllm.eval.lm")
    m = randomize(gpt.Model(TINY))
    ids = random_ids(1, 12)[0].numpy().astype(np.uint8)  # shorter than block_size: one window
    got = gpt.token_nlls(m, ids)
    with torch.no_grad():
        logits, _ = m(torch.from_numpy(ids.astype(np.int64))[None])
    lp = torch.log_softmax(logits[0].double(), -1)
    want = -lp[torch.arange(11), torch.from_numpy(ids[1:].astype(np.int64))].numpy()
    assert got.dtype == np.float64 and got.shape == (11,)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_token_nlls_long_input_scores_every_token_once():
    pytest.importorskip("tinyllm.eval.lm")
    m = randomize(gpt.Model(TINY))
    ids = random_ids(1, 100)[0].numpy().astype(np.uint8)  # 100 > block_size = 16: many windows
    got = gpt.token_nlls(m, ids)
    assert got.shape == (99,) and np.isfinite(got).all()
    # the first window's tokens have the same context as a plain forward pass
    with torch.no_grad():
        logits, _ = m(torch.from_numpy(ids[:16].astype(np.int64))[None])
    lp = torch.log_softmax(logits[0].double(), -1)
    want = -lp[torch.arange(15), torch.from_numpy(ids[1:16].astype(np.int64))].numpy()
    np.testing.assert_allclose(got[:15], want, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="block_size"):
        gpt.token_nlls(m, ids, ctx_len=32)


# ------------------------------------------------------------------ shared layers (layers.py)


def _manual_attention(att: SelfAttention, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(Dh) masked) v per head, by hand in float64."""
    B, T, D = x.shape
    H = att.n_head
    w, b = att.c_attn.weight.double(), att.c_attn.bias.double()
    q, k, v = (x.double() @ w.T + b).split(D, dim=2)
    q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(D // H)  # [B, H, T, T]
    s = s.masked_fill(~allowed, float("-inf"))
    y = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, D)
    return (y @ att.c_proj.weight.double().T + att.c_proj.bias.double()).float()


def test_self_attention_masks_match_a_hand_computation():
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    pad = keep[:, None, None, :]  # [B, 1, 1, T]: keys that may be attended to
    tri = torch.ones(6, 6, dtype=torch.bool).tril()
    enc = randomize(SelfAttention(16, 2, causal=False))
    torch.testing.assert_close(enc(x, pad), _manual_attention(enc, x, pad), rtol=0, atol=1e-5)
    dec = randomize(SelfAttention(16, 2, causal=True))
    torch.testing.assert_close(dec(x), _manual_attention(dec, x, tri), rtol=0, atol=1e-5)
    torch.testing.assert_close(dec(x, pad), _manual_attention(dec, x, pad & tri), rtol=0, atol=1e-5)


# ------------------------------------------------------------------------------- KV cache


def test_kv_cache_incremental_equals_full_forward():
    m = randomize(gpt.Model(TINY))
    idx = random_ids(2, 12, seed=5)
    full = m.hidden(idx)  # [2, 12, D]
    h1, cache = m.hidden_cached(idx[:, :5])
    h2, cache = m.hidden_cached(idx[:, 5:9], cache)
    h3, cache = m.hidden_cached(idx[:, 9:], cache)
    assert cache.length == 12 and cache.batch == 2
    got = torch.cat([h1, h2, h3], dim=1)
    torch.testing.assert_close(got, full, rtol=0, atol=1e-5)
    # one token at a time (greedy decoding's pattern)
    h, c = m.hidden_cached(idx[:, :1])
    steps = [h]
    for t in range(1, 12):
        h, c = m.hidden_cached(idx[:, t : t + 1], c)
        steps.append(h)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)


def test_kv_cache_rows_continue_contexts_of_different_lengths():
    """Right-padded contexts (lengths 3 and 6) continued by 4 tokens each, in one batch, with
    repeated rows: each row equals the full forward of its own context + continuation."""
    m = randomize(gpt.Model(TINY))
    ctx = random_ids(2, 6, seed=6)
    lens = torch.tensor([3, 6])
    _, cache = m.hidden_cached(ctx)  # row 0's positions 3..5 are padding
    cont = random_ids(3, 4, seed=7)
    rows = torch.tensor([0, 1, 0])  # two continuations of context 0, one of context 1
    pos = lens[rows][:, None] + torch.arange(4)  # [3, 4]
    valid = torch.arange(6)[None, :] < lens[rows][:, None]  # [3, 6]
    h, _ = m.hidden_cached(cont, cache.select(rows), positions=pos, past_valid=valid)
    for b in range(3):
        n = int(lens[rows[b]])
        seq = torch.cat([ctx[rows[b], :n], cont[b]])[None]
        torch.testing.assert_close(h[b], m.hidden(seq)[0, n:], rtol=0, atol=1e-5)
    # planted bug check: without past_valid, row 0 would read its padding and differ
    h_bad, _ = m.hidden_cached(cont, cache.select(rows), positions=pos)
    assert (h_bad[0] - h[0]).abs().max() > 1e-3
    with pytest.raises(ValueError, match="block_size=16"):
        m.hidden_cached(cont, cache.select(rows), positions=pos + 10, past_valid=valid)


def test_kv_cache_tree_mask_scores_several_continuations_in_one_row():
    """Two continuations (3 and 2 tokens) packed in one row after a cached context: with a
    block-diagonal causal new_mask and per-segment positions each equals its own full forward."""
    m = randomize(gpt.Model(TINY))
    ctx = random_ids(1, 5, seed=8)
    _, cache = m.hidden_cached(ctx)
    a, b = random_ids(1, 3, seed=9), random_ids(1, 2, seed=10)
    y = torch.cat([a, b], dim=1)  # [1, 5]
    seg = torch.tensor([0, 0, 0, 1, 1])
    j = torch.tensor([0, 1, 2, 0, 1])  # position inside its own continuation
    tree = (seg[:, None] == seg[None, :]) & (j[None, :] <= j[:, None])  # [5, 5]
    h, _ = m.hidden_cached(y, cache, positions=(5 + j)[None], new_mask=tree[None])
    want_a = m.hidden(torch.cat([ctx, a], 1))[0, 5:]
    want_b = m.hidden(torch.cat([ctx, b], 1))[0, 5:]
    torch.testing.assert_close(h[0, :3], want_a, rtol=0, atol=1e-5)
    torch.testing.assert_close(h[0, 3:], want_b, rtol=0, atol=1e-5)


def test_kv_cache_last_returns_one_row_per_sequence_with_the_full_cache():
    """``last=`` returns the hidden state of one token per row (a right-padded context's last
    one) and the same cache as the full pass; the last block runs at those rows only in
    inference (float32 rounding of smaller matrices: 1e-6), and training's modules give the
    full pass's rows exactly. With a past and a tree mask too. Bad ``last`` is a clear error."""
    m = randomize(gpt.Model(TINY))
    ctx = random_ids(3, 10, seed=13)
    last = torch.tensor([9, 0, 4])
    rows = torch.arange(3)
    with torch.inference_mode():
        full, cache = m.hidden_cached(ctx)
        h, c = m.hidden_cached(ctx, last=last)
        assert h.shape == (3, 1, TINY.n_embd)
        torch.testing.assert_close(h[:, 0], full[rows, last], rtol=0, atol=1e-6)
        for a, b in zip(c.k + c.v, cache.k + cache.v, strict=True):
            assert torch.equal(a, b)
        y = random_ids(3, 4, seed=14)
        tree = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]).bool()
        pos = 10 + torch.tensor([0, 1, 0, 1]).expand(3, 4)
        valid = torch.arange(10)[None, :] < (last + 1)[:, None]
        kw = dict(positions=pos, past_valid=valid, new_mask=tree.expand(3, 4, 4))
        e_full, _ = m.hidden_cached(y, cache, **kw)
        at = torch.tensor([1, 3, 2])
        e, _ = m.hidden_cached(y, cache, **kw, last=at)
        torch.testing.assert_close(e[:, 0], e_full[rows, at], rtol=0, atol=1e-6)
    with torch.no_grad():
        m.train()  # dropout 0: the modules, every row, then the picked ones
        h_mod, _ = m.hidden_cached(ctx, last=last)
        ref, _ = m.hidden_cached(ctx)
        m.eval()
    torch.testing.assert_close(h_mod[:, 0], ref[rows, last], rtol=0, atol=0)
    for bad in (torch.tensor([10, 0, 0]), torch.tensor([-1, 0, 0]), torch.tensor([1, 2])):
        with pytest.raises(ValueError, match=r"expected last of shape \[3\] with values in"):
            m.hidden_cached(ctx, last=bad)
