"""TinyLLM.loglikelihood's request handling: which requests get is_greedy, contexts encoded once,
shared context prefixes, each compared with lm-eval's HFLM on the same model object."""

from __future__ import annotations

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from tinyllm.eval.lmeval.backend import TinyLLM

SENT = "Hundreds of people have been forced to vacate their homes"


def _inst(args, docs):
    return [
        Instance("loglikelihood", {}, a, i, (task, doc, 1))
        for i, (a, (task, doc)) in enumerate(zip(args, docs, strict=True))
    ]


def _greedy_text(model, tok, ctx: str, n: int) -> str:
    ids = tok.encode(ctx)
    with torch.inference_mode():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return tok.decode(ids[len(tok.encode(ctx)) :])


def test_is_greedy_is_computed_for_a_documents_only_request(gpt2, tok, monkeypatch):
    # winogrande: two requests of one document, each its own context, one continuation;
    # lambada: one request per document, its is_greedy reported as exact_match/acc
    lam_ctx = "The national road toll for the Christmas holiday period stands at"
    args = [
        (SENT + " in the north", " because of fire"),
        (SENT + " in the south", " because of fire"),
        (lam_ctx, _greedy_text(gpt2, tok, lam_ctx, 2)),
        (lam_ctx + " eight", " people"),
    ]
    docs = [("winogrande", 0), ("winogrande", 0), ("lambada", 0), ("lambada", 1)]
    full: list[int] = []
    real = TinyLLM._full_pass
    monkeypatch.setattr(
        TinyLLM, "_full_pass", lambda self, rs: full.append(len(rs)) or real(self, rs)
    )
    got = TinyLLM(gpt2, tok).loglikelihood(_inst(args, docs))
    ref = HFLM(pretrained=gpt2, tokenizer=tok, batch_size=2).loglikelihood(_inst(args, docs))
    assert full == [2]  # the two lambada requests only
    assert [g[0] for g in got] == pytest.approx([r[0] for r in ref], abs=1e-4)
    assert ref[2][1] is True  # the greedy continuation, as HFLM finds it
    assert [g[1] for g in got[2:]] == [r[1] for r in ref[2:]]
    assert [g[1] for g in got[:2]] == [False, False]  # not computed (module docstring)


def test_each_context_is_encoded_once_per_call(gpt2, tok, monkeypatch):
    ctx = SENT + " after a fire "  # trailing space: it moves to the continuations
    args = [(ctx, "in the north"), (ctx, "in the south"), (ctx, "near the coast")]
    hflm = HFLM(pretrained=gpt2, tokenizer=tok, batch_size=1)
    want = [hflm._encode_pair(*a) for a in args]
    lm = TinyLLM(gpt2, tok)
    enc: dict[str, list[int]] = {}
    assert [lm.encode_pair(*a, enc=enc) for a in args] == want
    calls: list[str] = []
    real = TinyLLM.tok_encode
    monkeypatch.setattr(TinyLLM, "tok_encode", lambda self, t: calls.append(t) or real(self, t))
    got = lm.loglikelihood(_inst(args, [("t", k) for k in range(3)]))
    assert calls.count(ctx.rstrip()) == 1  # the context once, each whole once
    assert len(calls) == 4
    ref = hflm.loglikelihood(_inst(args, [("t", k) for k in range(3)]))
    assert [g[0] for g in got] == pytest.approx([r[0] for r in ref], abs=1e-4)


def test_shared_prefixes_and_an_empty_context_score_as_on_hflm(gpt2, tok):
    # the options fill a blank: contexts share the sentence's start; one context is the start
    # itself; an empty context is the prefix token; a context sharing nothing
    args = [
        (SENT + " in the north", " because of fire"),
        (SENT + " in the south after", " the storm"),
        (SENT, " in the west"),
        ("", "Hundreds of people"),
        ("Fire crews were", " called in"),
    ]
    docs = [("wg", 0), ("wg", 0), ("wg", 0), ("wg", 1), ("wg", 1)]
    got = TinyLLM(gpt2, tok).loglikelihood(_inst(args, docs))
    ref = HFLM(pretrained=gpt2, tokenizer=tok, batch_size=1).loglikelihood(_inst(args, docs))
    assert [g[0] for g in got] == pytest.approx([r[0] for r in ref], abs=1e-4)


def test_a_full_pass_reads_the_head_at_the_continuation_positions_only(tok):
    from tinyllm.eval.lm.scoring import Req
    from tinyllm.models import gpt

    torch.manual_seed(0)
    model = gpt.Model(gpt.Config(vocab_size=len(tok), block_size=64, n_layer=2, n_embd=32))
    model.eval()
    ids = tok.encode(SENT + " after a fire in the north")
    req = Req(0, torch.tensor(ids[:-2]).numpy(), torch.tensor(ids[-2:]).numpy())
    lm = TinyLLM(model, tok)
    lm.score_requests([req], alone=[True])  # the head's check against the logits, once
    rows: list[int] = []
    hook = model.lm_head.register_forward_hook(
        lambda m, i, o: rows.append(o.numel() // o.shape[-1])
    )
    try:
        ((ll, greedy),) = lm.score_requests([req], alone=[True])
    finally:
        hook.remove()
    assert rows == [2]  # two continuation tokens, not every position of the input
    with torch.inference_mode():
        lp = torch.log_softmax(model(torch.tensor([ids[:-1]]))[0][0].double(), dim=-1)
    at = torch.arange(len(ids) - 3, len(ids) - 1)
    assert ll == pytest.approx(float(lp[at, torch.tensor(ids[-2:])].sum()), abs=1e-5)
    assert greedy == bool((lp[at].argmax(-1) == torch.tensor(ids[-2:])).all())
