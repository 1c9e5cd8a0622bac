"""tinyllm/windows.py: the strided windows of docs/definitions.md, strided perplexity.

The windows are checked by hand on docs/definitions.md's example, against a reference written from the
docstrings (window grouping), and with hypothesis over any n, ctx_len and stride: every token
scored exactly once, with at least ctx_len - stride tokens of context after the first window.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lm_helpers import RevealingModel, window_settings

from tinyllm import windows
from tinyllm.eval import lm

V = 7  # vocabulary of the revealing model in the property tests


def test_windows_of_the_spec_example():
    assert lm.windows(6, 4, 2) == [(0, 4, 1), (2, 6, 4)]
    assert lm.windows(6, 4, 3) == [(0, 4, 1), (3, 6, 4)]
    assert lm.windows(3, 4, 2) == [(0, 3, 1)]  # shorter than one window


def test_window_argument_errors_name_the_argument_and_its_type():
    with pytest.raises(TypeError) as e:
        lm.windows(6, 4.0, 2)
    assert str(e.value) == "ctx_len: expected an int, got float 4.0"
    with pytest.raises(TypeError) as e:
        lm.windows(6, 4, 2.0)
    assert str(e.value) == "stride: expected an int, got float 2.0"
    with pytest.raises(ValueError) as e:
        lm.windows(6, 1, 1)
    assert str(e.value) == (
        "ctx_len: expected >= 2 (a window must hold a token and its context), got 1"
    )


# ----------------------------------------------------------------------- properties (hypothesis)


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
        lm.token_nlls(RevealingModel(V), np.arange(n) % V, C, s)


# ----------------------------------------------------- window groups (the batches of token_nlls)


def reference_groups(n: int, ctx_len: int, stride: int, batch_size: int) -> list[list[tuple]]:
    """window_groups as its docstring says it: maximal runs of consecutive windows of equal
    length that score equally many tokens, cut into pieces of at most batch_size."""
    out: list[list[tuple]] = []
    ws = lm.windows(n, ctx_len, stride)
    i = 0
    while i < len(ws):
        j = i + 1
        shape = (ws[i][1] - ws[i][0], ws[i][1] - ws[i][2])
        while j < len(ws) and (ws[j][1] - ws[j][0], ws[j][1] - ws[j][2]) == shape:
            j += 1
        out += [ws[k : min(k + batch_size, j)] for k in range(i, j, batch_size)]
        i = j
    return out


@pytest.mark.parametrize(
    "n, ctx_len, stride, batch_size",
    [(6, 4, 2, 8), (40, 8, 3, 4), (41, 8, 3, 64), (100, 16, 15, 1), (9, 9, 1, 3), (2, 2, 1, 5)],
)
def test_window_groups_are_the_maximal_runs_of_equal_windows(n, ctx_len, stride, batch_size):
    got = list(windows.window_groups(n, ctx_len, stride, batch_size))
    assert got == reference_groups(n, ctx_len, stride, batch_size)
    # docs/definitions.md, strided perplexity's example by hand: the first window scores 3 tokens, the second 2: two groups
    if (n, ctx_len, stride) == (6, 4, 2):
        assert got == [[(0, 4, 1)], [(2, 6, 4)]]
