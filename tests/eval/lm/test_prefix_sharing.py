"""tinyllm/eval/lm/scoring.py: contexts that share a token prefix run it once (cached_lls).

Oracle: each request alone, one full forward pass of ``ctx + cont[:-1]`` (batch 1, no cache, no
padding), float64 log-softmax, every continuation token read at the position before it. Models:
our GPT and transformers' GPT2LMHeadModel (through our GPT on its weights and through its own
cache), random weights.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from lm_helpers import MODELS

from tinyllm.eval.lm import kvcache, scoring
from tinyllm.eval.lm.scoring import Req


def _req(k: int, ctx, cont) -> Req:
    return Req(k, np.asarray(ctx, dtype=np.int64), np.asarray(cont, dtype=np.int64))


def _oracle(model, r: Req) -> float:
    fed = np.concatenate([r.ctx, r.cont[:-1]])
    with torch.inference_mode():
        o = model(torch.from_numpy(fed)[None])
        logits = o.logits if hasattr(o, "logits") else o[0]
    lp = torch.log_softmax(logits[0].double(), dim=-1)
    at = torch.arange(r.ctx.size - 1, r.ctx.size - 1 + r.cont.size)
    return float(lp[at, torch.from_numpy(r.cont)].sum())


def _cached(model, reqs: list[Req], budget: int = 4096, max_row: int | None = None):
    with torch.inference_mode():  # as the callers score
        engine = kvcache.cache_engine(model, reqs)
        assert engine is not None
        ll = [math.nan] * len(reqs)
        kw = {} if max_row is None else {"max_row": max_row}
        scoring.cached_lls(engine, reqs, budget, ll, None, **kw)
    return ll


# winogrande's shape: two contexts per item that differ after the blank, one continuation;
# a context that is a prefix of another; the prefix token alone (an empty lm-eval context)
# beside a context starting with it; contexts sharing nothing; one-token continuations
REQS = [
    ([3, 4, 5, 6, 7, 8, 20], [30, 31, 32]),
    ([3, 4, 5, 6, 7, 8, 21, 22], [30, 31, 32]),
    ([9, 10, 11], [40, 41]),
    ([9, 10, 11, 12, 13], [42]),
    ([9, 10, 11, 12, 13], [43, 44]),
    ([0], [50, 51, 52]),
    ([0, 14, 15], [53]),
    ([60, 61, 62, 63], [64, 65]),
    ([70, 71], [72, 73, 74, 75]),
]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("budget", [12, 4096])
def test_shared_prefixes_give_each_request_its_own_full_pass_ll(name, budget):
    model = MODELS[name]()
    reqs = [_req(k, c, x) for k, (c, x) in enumerate(REQS)]
    got = _cached(model, reqs, budget)
    want = [_oracle(model, r) for r in reqs]
    assert got == pytest.approx(want, abs=1e-5)
    plain = [math.nan] * len(reqs)
    with torch.inference_mode():
        scoring.plain_lls(model, reqs, range(len(reqs)), budget, plain, None)
    assert got == pytest.approx(plain, abs=1e-5)


def test_prefix_groups_join_contexts_that_share_at_least_half_the_prefix():
    ctxs = [np.asarray(c) for c, _ in REQS]
    widths = [[len(x)] for _, x in REQS]
    groups = scoring.prefix_groups(ctxs, widths, 1 << 30)
    # sorted by tokens: [0], [0 14 15] share 1 token of the 1-token prefix [0]; [3..8 20] and
    # [3..8 21 22] share 6 of 7; [9 10 11] is a prefix of [9 10 11 12 13] (twice: one
    # context id per distinct context, here ids 3 and 4 are equal contexts)
    assert groups == [(1, [5, 6]), (6, [0, 1]), (3, [2, 3, 4]), (4, [7]), (2, [8])]
    # a row over max_row tokens does not join: [0] feeds 2 tokens, [0 14 15] would add 2
    assert scoring.prefix_groups(ctxs[5:7], widths[5:7], 3) == [(1, [0]), (3, [1])]
    # the prefix at most halves: 1 token shared of 4 does not join
    four = [np.asarray([1, 2, 3, 4]), np.asarray([1, 9])]
    assert scoring.prefix_groups(four, [[2], [2]], 1 << 30) == [(4, [0]), (2, [1])]


def test_a_shared_prefix_is_fed_once():
    """The ids the GPT's embedding reads: the shared start of two contexts once, each rest
    once, each continuation without its last token, nothing else but padding (id 0)."""
    model = MODELS["gpt"]()
    reqs = [
        _req(0, [10, 11, 12, 13, 20], [30, 90]),
        _req(1, [10, 11, 12, 13, 21, 22], [31, 91]),
        _req(2, [10, 11, 12, 13], [32, 92]),
    ]
    _cached(model, reqs)  # the verdict first: its probe feeds tokens too
    fed: list[int] = []
    hook = model.wte.register_forward_hook(lambda m, i, o: fed.extend(i[0].flatten().tolist()))
    try:
        got = _cached(model, reqs)
    finally:
        hook.remove()
    assert got == pytest.approx([_oracle(model, r) for r in reqs], abs=1e-5)
    assert all(fed.count(t) == 1 for t in (10, 11, 12, 13, 20, 21, 22, 30, 31, 32))
    assert not {90, 91, 92} & set(fed)
    assert set(fed) - {10, 11, 12, 13, 20, 21, 22, 30, 31, 32} <= {0}


def test_max_row_splits_a_group_and_keeps_the_lls():
    model = MODELS["gpt"]()
    reqs = [_req(k, [5, 6, 7, 8, 9, 10 + k], [40 + k, 41, 42]) for k in range(6)]
    want = [_oracle(model, r) for r in reqs]
    assert _cached(model, reqs, max_row=4) == pytest.approx(want, abs=1e-5)
    assert _cached(model, reqs) == pytest.approx(want, abs=1e-5)
