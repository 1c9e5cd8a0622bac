"""GPT's fixed-capacity KV cache (``hidden_cached(capacity=)``): keys and values written in
place, the same hidden states as the full forward and as the growing (concatenating) cache."""

from __future__ import annotations

import pytest
import torch

from tinyllm.models import gpt

CFG = gpt.Config(block_size=24, n_layer=2, n_head=2, n_embd=16)


def _model(seed: int = 0) -> gpt.Model:
    """Every parameter random (biases and LayerNorms too), so a position read wrong shows."""
    m = gpt.Model(CFG).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return m


def _ids(B: int, T: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("grad", [False, True])
def test_fixed_cache_token_by_token_equals_full_forward_and_growing_cache(grad):
    m = _model()
    idx = _ids(2, 14, seed=1)
    with torch.set_grad_enabled(grad):
        full = m.hidden(idx)  # [2, 14, D]
        h, fixed = m.hidden_cached(idx[:, :5], capacity=14)
        _, grow = m.hidden_cached(idx[:, :5])
        assert (fixed.length, fixed.capacity, fixed.filled) == (5, 14, 5)
        assert fixed.k[0].shape == (2, 2, 14, 8)
        steps = [h]
        for t in range(5, 14):
            ptr = fixed.k[1].data_ptr()
            h, fixed = m.hidden_cached(idx[:, t : t + 1], fixed)
            hg, grow = m.hidden_cached(idx[:, t : t + 1], grow)
            assert fixed.k[1].data_ptr() == ptr  # written in place, never reallocated
            torch.testing.assert_close(h, hg, rtol=0, atol=1e-5)
            steps.append(h)
        assert fixed.length == fixed.capacity == 14 and grow.length == 14
        torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)
        for a, b in zip(fixed.k + fixed.v, grow.k + grow.v, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_fixed_cache_right_padded_rows_with_last_and_select():
    """Contexts of 3 and 6 tokens right-padded, prefilled with ``last=``, then 4 tokens each one
    at a time at their own positions, padding masked; row 1 alone after a ``select``: each row
    equals the full forward of its own context + continuation."""
    m = _model(seed=2)
    ctx, cont = _ids(2, 6, seed=3), _ids(2, 4, seed=4)
    lens = torch.tensor([3, 6])
    with torch.inference_mode():
        h0, cache = m.hidden_cached(ctx, last=lens - 1, capacity=10)
        valid = torch.ones(2, 10, dtype=torch.bool)
        valid[:, :6] = torch.arange(6)[None, :] < lens[:, None]
        got = [h0]
        for s in range(4):
            pos = (lens + s)[:, None]
            h, cache = m.hidden_cached(
                cont[:, s : s + 1], cache, positions=pos, past_valid=valid[:, : 6 + s]
            )
            got.append(h)
        got = torch.cat(got, dim=1)  # [2, 5, D]: last context token, then the continuation
        for b in range(2):
            n = int(lens[b])
            want = m.hidden(torch.cat([ctx[b, :n], cont[b]])[None])[0, n - 1 :]
            torch.testing.assert_close(got[b], want, rtol=0, atol=1e-5)
        one = cache.select(torch.tensor([1]))
        assert (one.batch, one.length, one.capacity) == (1, 10, 10)
        _, c1 = m.hidden_cached(ctx[1:, :3], capacity=5)
        two = c1.select(torch.tensor([0, 0]))  # two continuations of one context
        assert (two.batch, two.length, two.capacity) == (2, 3, 5)
        h, _ = m.hidden_cached(cont[:, :2], two)
        for b in range(2):
            want = m.hidden(torch.cat([ctx[1, :3], cont[b, :2]])[None])[0, 3:]
            torch.testing.assert_close(h[b], want, rtol=0, atol=1e-5)


def test_fixed_cache_overflow_and_bad_capacity_name_themselves():
    m = _model()
    idx = _ids(1, 6, seed=5)
    _, cache = m.hidden_cached(idx[:, :4], capacity=5)
    _, cache = m.hidden_cached(idx[:, 4:5], cache)
    with pytest.raises(
        ValueError,
        match="at most 0 new tokens for a fixed-capacity cache of 5 positions holding 5, got 1",
    ):
        m.hidden_cached(idx[:, 5:6], cache)
    _, cache = m.hidden_cached(idx[:, :4], capacity=5)
    with pytest.raises(ValueError, match="at most 1 new tokens .* got 2"):
        m.hidden_cached(idx[:, 4:6], cache)
    with pytest.raises(
        ValueError, match=r"capacity an int >= the 4 tokens of idx, for a new cache only, got 3$"
    ):
        m.hidden_cached(idx[:, :4], capacity=3)
    with pytest.raises(ValueError, match="for a new cache only, got 8 with a past cache"):
        m.hidden_cached(idx[:, 4:5], cache, capacity=8)
