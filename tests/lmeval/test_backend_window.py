"""TinyLLM's truncation of loglikelihood requests at the model's window, against lm-eval's HFLM:
contexts one token short of max_length L, exactly L, one over and far over, each with
continuations of 1-3 tokens, scored together in one call (shared contexts on the KV-cache path,
every request alone on the full pass with is_greedy). HFLM reads (ctx + cont)[-(L+1):][:-1]."""

from __future__ import annotations

import lmeval_helpers as H
import pytest
from lm_eval.models.huggingface import HFLM

from tinyllm.eval.lmeval.backend import TinyLLM

L = 24


def test_contexts_at_the_window_length_score_as_on_hflm(gpt2, tok):
    ids = tok.encode(" ".join(H.lee_lines(6)))
    assert len(ids) > L + 12
    cases = [(c, n) for c in (5, L - 1, L, L + 1, L + 6) for n in (1, 2, 3)]
    lm = TinyLLM(gpt2, tok, max_length=L)
    reqs = [lm._req(k, ids[:c], ids[c : c + n], f"request {k}") for k, (c, n) in enumerate(cases)]
    # the model reads at most L tokens: ctx + cont[:-1], the context's first tokens cut
    for r, (c, n) in zip(reqs, cases, strict=True):
        assert r.ctx.size + r.cont.size - 1 == min(c + n - 1, L) and r.cont.size == n
        assert r.ctx.tolist() == ids[max(0, c + n - 1 - L) : c]
    # HFLM's logits cache (on by default, it shares logits between requests whose ctx +
    # cont[:-1] agree) gave -8.8925 for the (L, 1) request here, where the model itself reads
    # -7.4542 (and HFLM without the cache): compared without it
    hflm = HFLM(pretrained=gpt2, tokenizer=tok, batch_size=4, max_length=L, logits_cache=False)
    want = hflm._loglikelihood_tokens(
        [(("", ""), ids[:c], ids[c : c + n]) for c, n in cases], disable_tqdm=True
    )
    shared = lm.score_requests(reqs)  # contexts with three continuations: the KV-cache path
    alone = lm.score_requests(reqs, alone=[True] * len(reqs))  # the full pass, is_greedy
    assert [s[0] for s in shared] == pytest.approx([w[0] for w in want], abs=2e-4)
    assert [a[0] for a in alone] == pytest.approx([w[0] for w in want], abs=2e-4)
    assert [a[1] for a in alone] == [w[1] for w in want]


def test_a_continuation_of_max_length_tokens_keeps_one_context_token(gpt2, tok):
    ids = tok.encode(" ".join(H.lee_lines(6)))
    lm = TinyLLM(gpt2, tok, max_length=L)
    assert lm._req(0, ids[:3], ids[3 : L + 3], "request 0").ctx.tolist() == [ids[2]]
    with pytest.raises(
        ValueError, match=f"continuation is {L + 1} tokens; expected at most max_length {L}"
    ):
        lm._req(0, ids[:3], ids[3 : L + 4], "request 0")
