"""TinyLLM's requests one by one: ties, rolling windows, generation stops, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from tinyllm.eval import lm
from tinyllm.eval.lmeval.backend import TinyLLM
from tinyllm.eval.lmeval.generate import batches, greedy_tokens


def _reqs(kind, args):
    return [Instance(kind, {}, a, i) for i, a in enumerate(args)]


def test_identical_requests_tie_exactly(gpt2, tok):
    # two equal choices of one context (winogrande with option1 == option2): equal LLs, so
    # lm-eval's argmax picks the first as it does on HFLM (float rounding would pick either)
    ctx = "The national road toll for the Christmas holiday period stands at"
    args = [(ctx, " eight"), (ctx, " seven people"), (ctx, " eight")]
    got = TinyLLM(gpt2, tok).loglikelihood(_reqs("loglikelihood", args))
    assert got[0][0] == got[2][0]
    ref = HFLM(pretrained=gpt2, tokenizer=tok, batch_size=1).loglikelihood(
        _reqs("loglikelihood", args)
    )
    assert [g[0] for g in got] == pytest.approx([r[0] for r in ref], abs=1e-4)


def test_empty_context_is_the_prefix_token(gpt2, tok):
    got = TinyLLM(gpt2, tok).loglikelihood(_reqs("loglikelihood", [("", "Hundreds of people")]))
    ids = [tok.eos_token_id, *tok.encode("Hundreds of people")]
    lp = lm.log_probs(gpt2, ids)
    oracle = float(lp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].double().sum())
    assert got[0][0] == pytest.approx(oracle, abs=1e-4)


def test_rolling_windows_lmeval_and_strided(gpt2, tok):
    text = " ".join(["Hundreds of people have been forced to vacate their homes."] * 12)
    ids = np.asarray([tok.eos_token_id, *tok.encode(text)])
    assert ids.size > 64  # several windows at max_length 32
    lmeval = TinyLLM(gpt2, tok, max_length=32).loglikelihood_rolling(
        _reqs("loglikelihood_rolling", [(text,)])
    )[0]
    ref = HFLM(pretrained=gpt2, tokenizer=tok, batch_size=1, max_length=32).loglikelihood_rolling(
        _reqs("loglikelihood_rolling", [(text,)])
    )[0]
    assert lmeval == pytest.approx(ref, rel=1e-5)
    strided = TinyLLM(gpt2, tok, max_length=32, rolling="strided", stride=8)
    got = strided.loglikelihood_rolling(_reqs("loglikelihood_rolling", [(text,)]))[0]
    assert got == pytest.approx(-math.fsum(lm.token_nlls(gpt2, ids, 32, 8)), abs=1e-9)
    assert abs(got - lmeval) > 1e-3  # other windows: another number (a random model)


def test_generation_stops_at_until_and_max_gen_toks(gpt2, tok):
    ctx = "Question: Hundreds of people have been forced to vacate?\nAnswer:"
    free = TinyLLM(gpt2, tok).generate_until(
        _reqs("generate_until", [(ctx, {"until": [], "max_gen_toks": 12, "do_sample": False})])
    )[0]
    assert len(tok.encode(free)) in range(10, 15)  # 12 tokens, re-encoded
    stop = free[len(free) // 2 : len(free) // 2 + 2]
    assert stop and stop in free
    cut = TinyLLM(gpt2, tok).generate_until(
        _reqs("generate_until", [(ctx, {"until": [stop], "max_gen_toks": 12})])
    )[0]
    assert cut == free[: free.index(stop)]


def test_greedy_tokens_plain_model_and_eos():
    class Favour7(torch.nn.Module):
        def forward(self, ids):
            z = torch.zeros(*ids.shape, 10)
            z[..., 7] = 1.0
            return z

    m = Favour7()
    assert greedy_tokens(m, [[1, 2], [3]], 3, lambda t: False, set()) == [[7, 7, 7], [7, 7, 7]]
    assert greedy_tokens(m, [[1, 2]], 3, lambda t: False, {7}) == [[]]
    assert greedy_tokens(m, [[1, 2]], 3, lambda t: len(t) == 2, set()) == [[7, 7]]
    assert batches([3, 5, 3], 2, True) == [[1], [0, 2]]


def test_bad_arguments_name_themselves(gpt2, tok):
    with pytest.raises(ValueError, match="rolling: expected one of"):
        TinyLLM(gpt2, tok, rolling="fair")
    with pytest.raises(ValueError, match="max_length: expected at most the model's context"):
        TinyLLM(gpt2, tok, max_length=4096)
    with pytest.raises(ValueError, match="do_sample false"):
        TinyLLM(gpt2, tok).generate_until(
            _reqs("generate_until", [("Hi", {"do_sample": True, "temperature": 1.0})])
        )
