"""TinyLLM's rolling path against lm-eval's HFLM, document by document: many texts in one
``loglikelihood_rolling`` call (windows of several documents batched together, as the bench and
lm-eval's wikitext run them), of every window count at a small ``max_length`` L: empty, one
token, shorter than L, exactly L, L + 1 (a last window of one token), several windows with a
short last one. Each text's log-likelihood must be HFLM's within float32 rounding of its sum and
must differ from every other text's (a window credited to the wrong document shows). The
windows' scorer (``TinyLLM._window_lls``: head blocks in two reused buffers) gives
``plain_lls``'s numbers bit for bit, over many blocks and through its fallback."""

from __future__ import annotations

import math

import lmeval_helpers as H
import numpy as np
import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from tinyllm.eval.lm.scoring import Req, plain_lls
from tinyllm.eval.lmeval import backend
from tinyllm.eval.lmeval.backend import TinyLLM
from tinyllm.logits import MAX_LOGITS

L = 32


CUTS = [0, 1, L - 5, L, L + 1, 3 * L + 7, 2 * L]
"""Tokens per text: lm-eval's first window reads the prefix token + L - 1 tokens and predicts L,
so L tokens are one window and L + 1 two, the second of one token."""


def _texts(tok) -> list[str]:
    ids = tok.encode(" ".join(H.lee_lines(8)))
    out, at = [], 0
    for n in CUTS:
        out.append(tok.decode(ids[at : at + n]))
        at += n
    return out


def _reqs(texts):
    return [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)]


@pytest.mark.parametrize("budget", [None, 3 * L])
def test_rolling_many_documents_as_hflm(gpt2, tok, budget):
    texts = _texts(tok)
    n_tok = [len(tok.encode(t)) for t in texts]
    assert n_tok == CUTS  # the decoded pieces re-encode to the counts asked for
    ours = TinyLLM(gpt2, tok, max_length=L, token_budget=budget).loglikelihood_rolling(_reqs(texts))
    ref = HFLM(pretrained=gpt2, tokenizer=tok, batch_size=8, max_length=L).loglikelihood_rolling(
        _reqs(texts)
    )
    assert ours[0] == ref[0] == 0.0  # an empty text has no windows
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-5), f"text {i} ({n_tok[i]} tokens)"
    assert len({round(v, 3) for v in ours[1:]}) == len(ours) - 1


def _windows(lm: TinyLLM, texts: list[str]) -> list[Req]:
    reqs = []
    for t in texts:
        for ctx, pred in map(
            make_disjoint_window,
            get_rolling_token_windows(lm.tok_encode(t), lm.prefix, lm.max_length, 1),
        ):
            reqs.append(Req(len(reqs), np.asarray(ctx), np.asarray(pred)))
    return reqs


def _plain(model, reqs, budget, max_logits) -> list[float]:
    ll = [math.nan] * len(reqs)
    with torch.inference_mode():
        plain_lls(model, reqs, range(len(reqs)), budget, ll, None, max_logits=max_logits)
    return ll


def test_window_blocks_in_reused_buffers_are_plain_lls_bit_for_bit(gpt2, tok, monkeypatch):
    # 7 rows of logits a block: many blocks per pass through the same two buffers, the last
    # one partial; batches of 3 windows
    v = gpt2.config.vocab_size
    monkeypatch.setattr(backend, "MAX_LOGITS", 7 * v)
    lm = TinyLLM(gpt2, tok, max_length=L, token_budget=3 * L)
    reqs = _windows(lm, _texts(tok))
    assert len(reqs) > 10 and any(r.cont.size % 7 for r in reqs)
    assert lm._window_lls(reqs) == _plain(gpt2, reqs, 3 * L, 7 * v)


class _LogitsOnly(torch.nn.Module):
    """A causal LM with nothing but its logits (no hidden-state hook): scored by plain_lls."""

    def __init__(self, gpt2):
        super().__init__()
        self.inner = gpt2

    def forward(self, ids):
        return self.inner(ids).logits


def test_window_lls_of_a_model_without_a_linear_head_are_plain_lls(gpt2, tok):
    model = _LogitsOnly(gpt2).eval()
    lm = TinyLLM(model, tok, max_length=L)
    reqs = _windows(lm, _texts(tok)[4:6])
    assert lm._window_lls(reqs) == _plain(model, reqs, lm.token_budget, MAX_LOGITS)
