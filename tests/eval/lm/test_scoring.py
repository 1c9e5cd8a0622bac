"""tinyllm/eval/lm/scoring.py: multiple-choice requests (tokenization, lm-eval's _encode_pair) and
the plain path's batching (rows x padded length within the token budget, longest first, at
most 25% padding per row).

Oracles: docs/definitions.md, multiple choice's bigram and a random byte bigram whose LLs are sums of table
entries, models that record every pass, and hypothesis over any lengths and budgets.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lm_helpers import (
    SPEC_S3_LL,
    IdTok,
    Table,
    TableModel,
    ids_item,
    random_items,
    spec_choice_table,
)

from tinyllm.eval import lm
from tinyllm.eval.lm import scoring
from tinyllm.tokens import ByteTokenizer

LN = math.log


class HFStyleTok:
    """A Hugging Face-like tokenizer: bytes, with a BOS (255) unless add_special_tokens=False."""

    all_special_ids = [255]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return ([255] if add_special_tokens else []) + list(text.encode("utf-8"))


class RowTok:
    """Bytes as a [1, T] array (as return_tensors="np" would give)."""

    def encode(self, text: str) -> np.ndarray:
        return np.asarray([list(text.encode("utf-8"))], dtype=np.int64)


# ---------------------------------------------------------------- tokenization (lm-eval's rules)


def test_a_hf_tokenizer_is_asked_for_no_special_tokens():
    got = lm.score_choices(Table(), HFStyleTok(), "a", ["bb", "c"], normalize=False)
    np.testing.assert_allclose(got, SPEC_S3_LL, rtol=1e-12)


def test_a_tokenizer_returning_one_row_is_flattened():
    got = lm.score_choices(Table(), RowTok(), "a", ["bb", "c"], normalize=False)
    np.testing.assert_allclose(got, SPEC_S3_LL, rtol=1e-12)


def _byte_bigram(seed: int = 0) -> TableModel:
    g = torch.Generator().manual_seed(seed)
    return TableModel(torch.rand(256, 256, generator=g, dtype=torch.float64).softmax(-1))


def test_trailing_whitespace_of_the_context_moves_to_the_continuation():
    """lm-eval's _encode_pair: context "abc  " with delimiter "" scores "  x" after "abc":
    LL = ln p(' '|c) + ln p(' '|' ') + ln p(x|' '), exactly as context "abc" with delimiter
    "  " does."""
    model, tok = _byte_bigram(), ByteTokenizer()
    lp = model.logP
    c, sp, x, y = ord("c"), ord(" "), ord("x"), ord("y")
    want = [
        float(lp[c, sp] + lp[sp, sp] + lp[sp, x]),
        float(lp[c, sp] + lp[sp, sp] + lp[sp, y] + lp[y, y]),
    ]
    got = lm.score_choices(model, tok, "abc  ", ["x", "yy"], False, target_delimiter="")
    np.testing.assert_allclose(got, want, rtol=1e-12)
    same = lm.score_choices(model, tok, "abc", ["x", "yy"], False, target_delimiter="  ")
    np.testing.assert_allclose(same, want, rtol=1e-12)
    # the model read the context "abc" then the moved whitespace, nothing else
    assert [ord(ch) for ch in "abc  y"] in model.calls


def test_a_context_or_choice_of_no_tokens_is_named_in_the_error():
    tok, m = IdTok(), TableModel(spec_choice_table())
    with pytest.raises(ValueError) as e:
        lm.choice_lls(m, tok, [{"context": "", "choices": ["1", "2"]}])
    assert str(e.value) == (
        "item 0: context '': expected at least one token (the first choice token is read at "
        "the position before it), got none"
    )
    with pytest.raises(ValueError) as e:
        lm.choice_lls(
            m, tok, [{"context": "1", "choices": ["2"]}, {"context": "1", "choices": ["2", " "]}]
        )
    assert str(e.value) == "item 1: choices[1] ' ': expected at least one token, got none"


# ----------------------------------------------------------------------- batching (token budget)


def test_requests_are_sorted_by_length_and_batched_across_items():
    """The plain path (a model without a cache): each pass holds rows of several items, longest
    first, within the token budget; choices of one token share their context's pass."""
    calls: list[torch.Tensor] = []

    class Recorder(torch.nn.Module):
        def forward(self, ids):
            calls.append(ids.clone())
            return torch.zeros(*ids.shape, 50)

    items = random_items(3, 10, 40, ctx_range=(2, 12), cont_range=(1, 4))
    items.append({"context": "1 2 3", "choices": ["4", "5", "6", "7"], "gold": 0})
    lm.choice_lls(Recorder(), IdTok(), items, token_budget=48)
    n_inputs = sum(len({tuple(c.split()[:-1]) for c in it["choices"]}) for it in items)
    assert sum(c.shape[0] for c in calls) == n_inputs  # one row per distinct input
    widths = [c.shape[1] for c in calls]
    assert widths == sorted(widths, reverse=True)  # longest first, across all items
    assert all(c.shape[0] * c.shape[1] <= 48 or c.shape[0] == 1 for c in calls)
    assert max(c.shape[0] for c in calls) > 4  # rows from more than one item per pass


class Recorder:
    """A model without a cache (the plain path): uniform logits; records each pass's ids."""

    def __init__(self) -> None:
        self.calls: list[torch.Tensor] = []

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        self.calls.append(ids.clone())
        return torch.zeros(*ids.shape, 50, dtype=torch.float64)


def test_each_pass_holds_as_many_rows_as_the_budget_allows():
    """ "Batched up to token_budget tokens (rows x padded length)": 8 distinct inputs of 6
    tokens at budget 24 run as 2 passes of 4 rows; at budget 23, 3 rows fit (18 <= 23)."""
    items = [ids_item([i + 1] * 5, [[30 + i, 40], [31 + i, 41]]) for i in range(4)]
    for budget, shapes in ((24, [(4, 6), (4, 6)]), (23, [(3, 6), (3, 6), (2, 6)])):
        m = Recorder()
        got = lm.choice_lls(m, IdTok(), items, token_budget=budget)
        assert [tuple(c.shape) for c in m.calls] == shapes
        for g in got:
            np.testing.assert_allclose(g, [-2 * LN(50)] * 2, rtol=1e-12)


def test_a_row_of_three_quarters_of_the_longest_joins_its_pass():
    """scoring.MAX_PAD: a row joins a pass if it is at least 75% of the pass's longest row:
    inputs of 8 and 6 tokens share a pass (padding 25%), 8 and 5 do not."""
    for short, shapes in ((6, [(2, 8)]), (5, [(1, 8), (1, 5)])):
        m = Recorder()
        items = [ids_item([1] * 7, [[2, 3]]), ids_item([4] * (short - 1), [[5, 6]])]
        lm.choice_lls(m, IdTok(), items, token_budget=4096)
        assert [tuple(c.shape) for c in m.calls] == shapes


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 50), min_size=1, max_size=40), st.integers(1, 300), st.integers(0, 20)
)
def test_budget_batches_cover_in_order_within_the_budget_and_padding(lengths, budget, extra):
    lengths = sorted(lengths, reverse=True)
    sl = list(scoring.budget_batches(lengths, budget, extra))
    assert [i for s in sl for i in range(s.start, s.stop)] == list(range(len(lengths)))
    for s in sl:
        rows = s.stop - s.start
        assert rows == 1 or rows * (lengths[s.start] + extra) <= budget
        assert all(lengths[i] >= 0.75 * lengths[s.start] for i in range(s.start, s.stop))
