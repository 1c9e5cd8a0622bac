"""Greedy generation (tinyllm.eval.lmeval.generate): the fixed-capacity cache path against
transformers' own ``generate(do_sample=False)``, rows leaving the batch at their end-of-sequence
id, and the tail-window stop check against decoding the whole text at every step."""

from __future__ import annotations

import lmeval_helpers
import pytest
import torch

from tinyllm.eval.lmeval import generate
from tinyllm.eval.lmeval.generate import greedy_tokens, stop_strings
from tinyllm.models import hf


def _hf_greedy(model, ctx: list[int], n: int, eos: int | None) -> list[int]:
    """transformers' greedy continuation of one context, its end-of-sequence id left out."""
    x = torch.tensor([ctx])
    kw = {"eos_token_id": eos, "pad_token_id": eos} if eos is not None else {}
    with torch.no_grad():
        y = model.generate(x, max_new_tokens=n, min_new_tokens=0, do_sample=False, **kw)
    out = y[0, len(ctx) :].tolist()
    return out[: out.index(eos)] if eos is not None and eos in out else out


def test_gpt_path_equals_hf_generate_and_rows_leave_at_eos(gpt2):
    assert hf.gpt2_twin(gpt2) is not None  # generation runs on the twin's fixed cache
    ctxs = [[5, 9, 2, 31, 7], [11, 3, 8, 8, 40, 2, 1, 19, 23], [60, 4, 4, 17, 2, 9, 30]]
    free = [_hf_greedy(gpt2, c, 12, None) for c in ctxs]
    assert greedy_tokens(gpt2, ctxs, 12, lambda t: False, set()) == free
    # an end-of-sequence id that row 0 meets early and some other row later or never: the
    # batch then runs on without row 0 (its cache row dropped)
    firsts = [{t: f.index(t) for t in reversed(f)} for f in free]
    eos = next(
        t
        for t, i in sorted(firsts[0].items(), key=lambda kv: kv[1])
        if 0 < i < 10 and any(fs.get(t, 99) > i + 1 for fs in firsts[1:])
    )
    want = [_hf_greedy(gpt2, c, 12, eos) for c in ctxs]
    got = greedy_tokens(gpt2, ctxs, 12, lambda t: False, {eos}, batch_size=3)
    assert got == want
    assert len(got[0]) < 10 and max(len(g) for g in got[1:]) > len(got[0]) + 1
    assert [greedy_tokens(gpt2, [c], 12, lambda t: False, {eos})[0] for c in ctxs] == want


def _check_every_prefix(tok, text: str, until: list[str]) -> list[int]:
    """stop_strings' answer on each prefix of ``text``'s tokens, up to the first that holds a
    stop string (where a row stops), equals decoding the whole prefix; returns the token counts
    of the windows it decoded on the way (the confirming whole-text decode left out)."""
    ids = tok.encode(text)
    seen: list[int] = []

    def decode(t):
        seen.append(len(t))
        return tok.decode(t)

    stop = stop_strings(until, decode)
    for n in range(1, len(ids) + 1):
        want = any(u in tok.decode(ids[:n]) for u in until)
        assert stop(ids[:n]) == want, (n, tok.decode(ids[:n]))
        if want:
            return seen[:-1]
    raise AssertionError(f"expected a stop string of {until} in {text!r}, got none")


def test_stop_string_spanning_several_tokens(tok):
    text = "so the answer is 42.\nQuestion: what comes next?"
    stop = "Question:"
    pieces = [tok.decode([i]) for i in tok.encode(text)]
    assert not any(stop in p for p in pieces) and sum(p in stop for p in pieces) >= 3
    windows = _check_every_prefix(tok, text, [stop, "\n\n"])
    assert max(windows) == len(stop.encode()) + 1  # b + 1 tokens decoded per step, never more


def test_stop_string_with_a_character_split_across_byte_tokens(tok):
    text = "the price: 5€ per caf\u00e9 and then \u2615 done"
    ids = tok.encode(text)
    split = [i for i in ids if tok.decode([i]) == "\ufffd"]
    assert len(split) >= 3  # euro sign, e-acute, hot beverage: partial UTF-8 tokens alone
    for until in (["€ per"], ["\u00e9 and"], ["\u2615"], ["5€"]):
        windows = _check_every_prefix(tok, text, until)
        assert max(windows) <= len(until[0].encode()) + 1


@pytest.mark.parametrize("until", [[], ["never there"]])
def test_no_stop_string_runs_to_max_new(gpt2, tok, until):
    stop = stop_strings(until, tok.decode)
    got = greedy_tokens(gpt2, [[3, 4, 5]], 9, stop, set())
    assert got == [_hf_greedy(gpt2, [3, 4, 5], 9, None)]


def test_a_twin_that_differs_from_the_model_is_refused(gpt2, monkeypatch):
    """The twin check (first VERIFY_LEN tokens of the first context) catches a twin computing
    another function: generation then runs on the model's own cache, equal to ``generate``."""
    other = hf.gpt2_twin(lmeval_helpers.tiny_gpt2(gpt2.config.vocab_size, 0, seed=1))
    monkeypatch.setattr(generate.hf_family, "gpt2_twin", lambda m: other)
    ctxs = [[5, 9, 2, 31, 7] * 5, [11, 3, 8]]
    got = greedy_tokens(gpt2, ctxs, 8, lambda t: False, set())
    assert got == [_hf_greedy(gpt2, c, 8, None) for c in ctxs]
    assert got != greedy_tokens(other, ctxs, 8, lambda t: False, set())
