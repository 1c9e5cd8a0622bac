"""Property tests (hypothesis) of the strided-window arithmetic, SPEC.md section 2.

The windows are checked through ``lm.windows`` (the function ``token_nlls`` iterates) and through
``token_nlls`` itself, with a model whose NLL at window position j is ln(j + 2): each token's NLL
then reveals how much context it was given, against a closed-form oracle.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm.eval import lm

V = 7


class RevealingModel:
    """True next token ``(id + 1) % V`` gets probability 1/(j+2) at window position j."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        B, T = ids.shape
        self.calls.extend(row.tolist() for row in ids)
        pt = 1.0 / (torch.arange(T, dtype=torch.float64) + 2.0)
        p = ((1.0 - pt) / (V - 1))[None, :, None].expand(B, T, V).clone()
        p.scatter_(2, ((ids + 1) % V)[..., None], pt[None, :, None].expand(B, T, 1).clone())
        return p.log()


@st.composite
def window_settings(draw, max_n=3000, max_c=400):
    ctx_len = draw(st.integers(2, max_c))
    stride = draw(st.integers(1, ctx_len - 1))
    n = draw(st.integers(2, max_n))
    return n, ctx_len, stride


@settings(max_examples=200, deadline=None)
@given(window_settings())
def test_every_token_scored_once_with_enough_context(ncs):
    n, C, s = ncs
    ws = lm.windows(n, C, s)
    scored = []
    prev_end = 0
    for k, (a, e, first) in enumerate(ws):
        assert a == k * s and e == min(a + C, n)
        assert first == max(prev_end, 1)
        assert (e == n) == (k == len(ws) - 1)  # stops at the first window reaching n
        for t in range(first, e):
            scored.append(t)
            assert a <= t - 1 < e  # read inside the window, at position t - 1 - a
            if k > 0:
                assert t - a >= C - s  # at least C - s tokens of context
                assert t >= ws[k - 1][1]  # no earlier window held t (it gets the most context)
        prev_end = e
    assert scored == list(range(1, n))  # tokens 1..n-1, each exactly once, in order


@settings(max_examples=100, deadline=None)
@given(
    st.integers(2, 500),
    st.integers(2, 200),
    st.one_of(st.integers(-5, 0), st.integers(0, 400)),
)
def test_bad_strides_are_refused(n, C, s):
    if 1 <= s < C:
        s = C + (s % 3)  # only invalid strides here: s >= C or s < 1
    with pytest.raises(ValueError, match="stride"):
        lm.windows(n, C, s)
    with pytest.raises(ValueError, match="stride"):
        lm.token_nlls(RevealingModel(), np.arange(n) % V, C, s)


@settings(max_examples=60, deadline=None)
@given(window_settings(max_n=160, max_c=40), st.integers(1, 6))
def test_token_nlls_reveal_the_context_of_each_token(ncs, batch_size):
    n, C, s = ncs
    ids = np.arange(n) % V
    m = RevealingModel()
    nlls = lm.token_nlls(m, ids, C, s, batch_size=batch_size)
    assert nlls.shape == (n - 1,)
    # closed form: token t is scored by window k(t) = 0 if t < C else floor((t - C) / s) + 1,
    # at position j = t - 1 - k*s, so its NLL is ln(j + 2) = ln(t - k*s + 1)
    t = np.arange(1, n)
    k = np.where(t < C, 0, (t - C) // s + 1)
    np.testing.assert_allclose(nlls, np.log(t - k * s + 1.0), rtol=0, atol=1e-12)
    # the model saw exactly the windows, in order, each once
    assert m.calls == [list(ids[a:e]) for a, e, _ in lm.windows(n, C, s)]
    assert np.all(nlls[C - 1 :] >= math.log(C - s + 1) - 1e-12)  # >= C - s tokens of context


# ------------------------------------------------------------ multiple choice (SPEC.md section 3)


class IdTok:
    def encode(self, text: str) -> list[int]:
        return [int(t) for t in text.split()]


def _gpt(seed: int = 0):
    from tinyllm.models import gpt

    torch.manual_seed(seed)
    m = gpt.Model(gpt.Config(vocab_size=V, block_size=12, n_layer=1, n_head=2, n_embd=16))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m.eval()


GPT = _gpt()


@st.composite
def mc_items(draw):
    n = draw(st.integers(1, 5))
    ids = st.lists(st.integers(0, V - 1), min_size=1, max_size=14)
    items = []
    for _ in range(n):
        ctx = draw(ids)
        k = draw(st.integers(1, 4))
        choices = [draw(st.lists(st.integers(0, V - 1), min_size=1, max_size=6)) for _ in range(k)]
        items.append((ctx, choices))
    return items


def _oracle(model, ctx: list[int], cont: list[int], L: int) -> float:
    fed = (ctx + cont)[-(L + 1) :][:-1]
    with torch.inference_mode():
        lp = torch.log_softmax(model(torch.tensor([fed]))[0][0].double(), dim=-1)
    pos = torch.arange(len(fed) - len(cont), len(fed))
    return float(lp[pos, torch.tensor(cont)].sum())


@settings(max_examples=40, deadline=None)
@given(mc_items(), st.integers(1, 200), st.integers(6, 12))
def test_choice_lls_equal_lm_evals_rule_for_any_items_budget_and_length(items, budget, L):
    """Any contexts (1-14 tokens), choices (1-6 tokens), token budget and context length L:
    the cached, packed, budget-batched scores equal one plain forward of lm-eval's
    ``(ctx + cont)[-(L+1):][:-1]`` per choice."""
    data = [
        {"context": " ".join(map(str, c)), "choices": [" ".join(map(str, x)) for x in ch]}
        for c, ch in items
    ]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # truncation warnings are expected here
        got = lm.choice_lls(GPT, IdTok(), data, max_len=L, token_budget=budget)
    for (ctx, choices), g in zip(items, got, strict=True):
        want = [_oracle(GPT, ctx, c, L) for c in choices]
        np.testing.assert_allclose(g, want, rtol=0, atol=1e-4)
    assert lm._CACHE_OK[GPT] == {"gpt": True}  # the cached path ran (its probe agreed)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 50), min_size=1, max_size=40), st.integers(1, 300), st.integers(0, 20)
)
def test_budget_batches_cover_in_order_within_the_budget_and_padding(lengths, budget, extra):
    lengths = sorted(lengths, reverse=True)
    sl = list(lm._budget_batches(lengths, budget, extra))
    assert [i for s in sl for i in range(s.start, s.stop)] == list(range(len(lengths)))
    for s in sl:
        rows = s.stop - s.start
        assert rows == 1 or rows * (lengths[s.start] + extra) <= budget
        assert all(lengths[i] >= 0.75 * lengths[s.start] for i in range(s.start, s.stop))
