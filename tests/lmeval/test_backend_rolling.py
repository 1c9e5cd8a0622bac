"""TinyLLM's rolling path against lm-eval's HFLM, document by document: many texts in one
``loglikelihood_rolling`` call (windows of several documents batched together, as the bench and
lm-eval's wikitext run them), of every window count at a small ``max_length`` L: empty, one
token, shorter than L, exactly L, L + 1 (a last window of one token), several windows with a
short last one. Each text's log-likelihood must be HFLM's within float32 rounding of its sum and
must differ from every other text's (a window credited to the wrong document shows)."""

from __future__ import annotations

import lmeval_helpers as H
import pytest
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from tinyllm.eval.lmeval.backend import TinyLLM

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
