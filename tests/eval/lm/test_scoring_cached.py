"""tinyllm/eval/lm/scoring.py: how the cached path (cached_lls) groups and batches requests.

prefix_groups' rules at their bounds (a context joins when it shares m >= 1 tokens with
2 m >= p and the row stays within max_row, a row being len(ctx) - p + len(cont) - 1 tokens per
request); a group's shared prefix is fed once only when its row fits max_row (default a
quarter of the token budget, at least 1); prefixes run longest first, with the padding
max_pad allows; the reads split into head blocks of max_logits // V rows (the plain path's as
well); a token id
outside the vocabulary is refused with its message; finished() hears every request. The LLs
are checked against one full pass per request (docs/definitions.md, multiple choice) every time.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from lm_helpers import our_gpt

from tinyllm.eval.lm import kvcache, scoring
from tinyllm.eval.lm.scoring import Req

V = 256  # our_gpt's vocabulary (gpt.Config's default: bytes)


def req(k: int, ctx, cont) -> Req:
    return Req(k, np.asarray(ctx, dtype=np.int64), np.asarray(cont, dtype=np.int64))


def oracle(model, r: Req) -> float:
    fed = np.concatenate([r.ctx, r.cont[:-1]])
    with torch.inference_mode():
        logits = model(torch.from_numpy(fed)[None])[0]
    lp = torch.log_softmax(logits[0].double(), dim=-1)
    at = torch.arange(r.ctx.size - 1, r.ctx.size - 1 + r.cont.size)
    return float(lp[at, torch.from_numpy(r.cont)].sum())


class Recorder:
    """A cache engine that records the shape of every prefill and extend pass, and the rows of
    every call of its head."""

    def __init__(self, engine) -> None:
        self.engine, self.head, self.passes, self.head_rows = engine, engine.head, [], []
        self.hook = engine.head.register_forward_hook(
            lambda m, i, o: self.head_rows.append(i[0].shape[0])
        )

    def prefill(self, x, lens):
        self.passes.append(("prefill", list(x.shape)))
        return self.engine.prefill(x, lens)

    def extend(self, state, rows, lens, y, pos, new_mask):
        self.passes.append(("extend", list(y.shape)))
        return self.engine.extend(state, rows, lens, y, pos, new_mask)


def cached(model, reqs, budget=4096, fed=None, **kw):
    """cached_lls of ``reqs`` through a recording engine (made, and its check run, first);
    ``fed`` collects the ids the GPT's embedding reads."""
    with torch.inference_mode():
        engine = kvcache.cache_engine(model, reqs)
        assert engine is not None
        rec = Recorder(engine)
        hooks = []
        if fed is not None:
            hooks.append(
                model.wte.register_forward_hook(lambda m, i, o: fed.extend(i[0].flatten().tolist()))
            )
        done: list[int] = []
        ll = [math.nan] * len(reqs)
        try:
            scoring.cached_lls(rec, reqs, budget, ll, done.extend, **kw)
        finally:
            rec.hook.remove()
            for h in hooks:
                h.remove()
    assert sorted(done) == list(range(len(reqs)))  # finished() heard every request once
    assert ll == pytest.approx([oracle(model, r) for r in reqs], abs=1e-5)
    return rec


# ------------------------------------------------------------------- prefix_groups' bounds


def groups(ctxs, widths, max_row=1 << 30):
    return scoring.prefix_groups([np.asarray(c) for c in ctxs], widths, max_row)


def test_a_context_joins_when_it_shares_exactly_half_the_prefix():
    # m = 2 shared of p = 4: 2 m >= p joins; of p = 6: 2 m < p does not
    assert groups([[1, 2, 3, 4], [1, 2, 9, 9]], [[2], [2]]) == [(2, [0, 1])]
    assert groups([[1, 2, 3, 4, 5, 6], [1, 2, 9, 9, 9, 9]], [[2], [2]]) == [(6, [0]), (6, [1])]


def test_a_group_row_of_exactly_max_row_tokens_joins():
    # p = 3: each request feeds len(ctx) - p + len(cont) - 1 = 4 - 3 + 2 - 1 = 2 tokens
    ctxs, widths = [[1, 2, 3, 4], [1, 2, 3, 9]], [[2], [2]]
    assert groups(ctxs, widths, 4) == [(3, [0, 1])]
    assert groups(ctxs, widths, 3) == [(4, [0]), (4, [1])]
    # two continuations of one context count one row each: 2 + 2 + 3 = 7
    assert groups([[1, 2, 3, 4], [1, 2, 3, 9]], [[2, 2], [3]], 7) == [(3, [0, 1])]
    assert groups([[1, 2, 3, 4], [1, 2, 3, 9]], [[2, 2], [3]], 6) == [(4, [0]), (4, [1])]


# ------------------------------------------------------------------ what the model is fed

SHARED = [req(0, [10, 11, 12, 13, 20], [30]), req(1, [10, 11, 12, 13, 21], [31])]


@pytest.mark.parametrize(
    ("budget", "max_row", "times"),
    [
        (4096, None, 1),  # one group: the shared [10 11 12 13] once, then 20 and 21 in one row
        (4096, 1, 2),  # a row of 2 tokens is over max_row 1: each context runs whole
        (8, None, 1),  # max_row defaults to budget // 4 = 2
        (4, None, 2),  # budget // 4 = 1
        (2, None, 2),  # at least 1
    ],
)
def test_the_shared_prefix_is_fed_once_when_the_row_fits(budget, max_row, times):
    model, fed = our_gpt(), []
    kw = {} if max_row is None else {"max_row": max_row}
    cached(model, SHARED, budget, fed, **kw)
    assert fed.count(10) == times and fed.count(20) == 1 and fed.count(21) == 1


def test_prefixes_run_longest_first():
    # nothing shared; a budget of 8 tokens holds one prefix a pass (2 x 5 > 8)
    model = our_gpt()
    reqs = [req(0, [1, 2, 3, 4, 5, 6, 7, 8], [9]), req(1, [20, 21], [22]), req(2, [30] * 5, [31])]
    rec = cached(model, reqs, budget=8)
    assert rec.passes == [("prefill", [1, 8]), ("prefill", [1, 5]), ("prefill", [1, 2])]


def test_max_pad_lets_short_prefixes_share_a_padded_pass():
    model = our_gpt()
    reqs = [req(0, [1, 2, 3, 4, 5, 6, 7, 8], [9]), req(1, [20, 21], [22])]
    assert cached(model, reqs).passes == [("prefill", [1, 8]), ("prefill", [1, 2])]
    assert cached(model, reqs, max_pad=1.0).passes == [("prefill", [2, 8])]


def test_rows_after_the_prefixes_go_widest_first_with_the_padding_max_pad_allows():
    # one prefill of both prefixes (max_pad 1.0); request 0 feeds 6 tokens after its prefix,
    # request 1 feeds 1: with max_pad 0.25 two extend passes, widest first; with 1.0 one
    model = our_gpt()
    reqs = [req(0, [40, 41], [1, 2, 3, 4, 5, 6, 7]), req(1, [50, 51, 52], [8, 9])]
    wide = cached(model, reqs, max_pad=1.0)
    assert wide.passes == [("prefill", [2, 3]), ("extend", [2, 6])]
    rec = cached(model, reqs, max_pad=0.25)
    assert rec.passes == [
        ("prefill", [1, 3]),
        ("extend", [1, 1]),
        ("prefill", [1, 2]),
        ("extend", [1, 6]),
    ]
    # two prefixes of one pass (equal lengths) whose rows differ: the widest row's pass first,
    # whichever prefix sorts first by its tokens
    reqs = [req(0, [1, 2, 3, 4], [5, 6]), req(1, [40, 41, 42, 43], [1, 2, 3, 4, 5, 6, 7])]
    rec = cached(model, reqs)
    assert rec.passes == [("prefill", [2, 4]), ("extend", [1, 6]), ("extend", [1, 1])]


def test_first_token_reads_run_in_head_blocks_of_max_logits_over_v_rows():
    # five one-token choices read at their prefix's last position, all prefixes in one pass:
    # max_logits 2 V -> blocks of 2, 2 and 1 rows; V -> one row a block
    model = our_gpt()
    reqs = [req(k, [k + 1, k + 2, k + 3], [k + 10]) for k in range(5)]
    assert cached(model, reqs, max_logits=2 * V).head_rows == [2, 2, 1]
    assert cached(model, reqs, max_logits=V).head_rows == [1, 1, 1, 1, 1]
    assert cached(model, reqs, max_logits=1).head_rows == [1, 1, 1, 1, 1]


def test_the_reads_after_the_prefix_run_in_head_blocks_of_max_logits_over_v_rows():
    # two prefixes in one pass; their first choice tokens (one block of 2 rows), then the 2 + 2
    # tokens read after the fed rest of each choice: blocks of 2 rows
    model = our_gpt()
    reqs = [req(0, [1, 2, 3], [4, 5, 6]), req(1, [7, 8, 9], [10, 11, 12])]
    assert cached(model, reqs, max_logits=2 * V).head_rows == [2, 2, 2]
    assert cached(model, reqs).head_rows == [2, 4]


def test_the_plain_path_reads_the_logits_in_blocks_of_max_logits_over_v_rows():
    model = our_gpt()
    reqs = [req(k, [k + 1, k + 2, k + 3], [k + 10, k + 11]) for k in range(3)]
    want = [oracle(model, r) for r in reqs]
    rows: list[int] = []
    with torch.inference_mode():
        ll = [math.nan] * 3
        scoring.plain_lls(model, reqs, range(3), 4096, ll, None)  # the head's check first
        hook = model.lm_head.register_forward_hook(
            lambda m, i, o: rows.append(i[0].shape[:-1].numel())
        )
        try:
            for max_logits in (2 * V, 1 << 20):
                ll = [math.nan] * 3
                scoring.plain_lls(model, reqs, range(3), 4096, ll, None, max_logits=max_logits)
                assert ll == pytest.approx(want, abs=1e-5)
        finally:
            hook.remove()
    assert rows == [2, 2, 2, 6]  # six choice tokens: blocks of 2, then one block


def test_a_first_token_outside_the_vocabulary_is_refused_with_its_message():
    model = our_gpt()
    good = [req(0, [1, 2, 3], [4])]
    with torch.inference_mode():
        engine = kvcache.cache_engine(model, good)
        ll = [math.nan]
        with pytest.raises(ValueError) as e:
            scoring.cached_lls(engine, [req(0, [1, 2, 3], [V])], 4096, ll, None)
    assert str(e.value) == f"expected token ids < the model's vocabulary size {V}, got id {V}"
