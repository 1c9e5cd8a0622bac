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
