"""Multiple choice from cached keys/values (tinyllm/eval/lm.py choice_lls) against an oracle.

The oracle is the plainest reading of SPEC.md section 3 with lm-eval's truncation: for every
choice, one full forward pass of ``(ctx + cont)[-(L+1):][:-1]`` alone (batch 1, no cache, no
padding), float64 log-softmax, the choice tokens read at the position before each. Models: our
GPT (KV cache in ``hidden_cached``) and transformers' GPT2LMHeadModel (its own cache), random
weights, no download.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from tinyllm.eval import lm
from tinyllm.models import gpt
from tinyllm.tokens import ByteTokenizer

transformers = pytest.importorskip("transformers")


class IdTok:
    """A tokenizer over text that is a space-separated list of ids: "3 17 5" -> [3, 17, 5]."""

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in text.split()]


def oracle_lls(model, items, L: int) -> list[np.ndarray]:
    tok = IdTok()
    out = []
    for it in items:
        ctx = tok.encode(it["context"])
        lls = []
        for ch in it["choices"]:
            cont = tok.encode(ch)
            fed = (ctx + cont)[-(L + 1) :][:-1]
            with torch.inference_mode():
                o = model(torch.tensor([fed]))
                logits = o.logits if hasattr(o, "logits") else o[0]
            lp = torch.log_softmax(logits[0].double(), dim=-1)
            n = len(cont)
            pos = torch.arange(len(fed) - n, len(fed))  # cont token j is read at the one before
            lls.append(float(lp[pos, torch.tensor(cont)].sum()))
        out.append(np.asarray(lls))
    return out


def random_items(seed: int, n: int, V: int, ctx_range=(1, 20), cont_range=(1, 6), k=4):
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n):
        ctx = rng.integers(0, V, rng.integers(*ctx_range))
        choices = [
            " ".join(map(str, rng.integers(0, V, rng.integers(*cont_range)))) for _ in range(k)
        ]
        items.append({"context": " ".join(map(str, ctx)), "choices": choices, "gold": 0})
    return items


def our_gpt(block: int = 32, seed: int = 0) -> gpt.Model:
    torch.manual_seed(seed)
    m = gpt.Model(gpt.Config(block_size=block, n_layer=2, n_head=2, n_embd=32))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return m.eval()


def hf_gpt2(n_positions: int = 32, seed: int = 0):
    cfg = transformers.GPT2Config(
        vocab_size=97, n_positions=n_positions, n_embd=32, n_layer=2, n_head=2
    )
    torch.manual_seed(seed)
    m = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return m.eval()


def hf_gpt2_layer_scaled(seed: int = 0):
    """A GPT-2 variant our GPT does not implement (attention scaled by 1 / layer index): no
    twin, so choices are scored from the HF model's own cache (past_key_values)."""
    m = hf_gpt2(seed=seed)
    m.config.scale_attn_by_inverse_layer_idx = True
    for block in m.transformer.h:
        block.attn.scale_attn_by_inverse_layer_idx = True
    return m


MODELS = {"gpt": lambda: our_gpt(), "hf": lambda: hf_gpt2(), "hf-own-cache": hf_gpt2_layer_scaled}
# which cached path each model's choices take (lm._CACHE_OK's verdicts after a call)
CACHE_PATH = {"gpt": {"gpt": True}, "hf": {"twin": True}, "hf-own-cache": {"hf": True}}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("budget", [8, 64, 4096])
def test_cached_choices_equal_the_oracle(name, budget):
    """Contexts of 1..19 tokens, choices of 1..5, batched across items at three budgets
    (one row per pass, a few rows, everything at once): every LL equals the oracle's."""
    model = MODELS[name]()
    items = random_items(1, 12, 97)
    items += [dict(items[0], choices=["5", "6", "7", "8"])]  # one-token choices only
    items += [dict(items[1])]  # a repeated context
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the cached path must pass its own check silently
        got = lm.choice_lls(model, IdTok(), items, token_budget=budget)
    want = oracle_lls(model, items, 32)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4)
    # the cached path ran: our GPT's own; for HF's GPT-2 our GPT on its weights (the twin);
    # for a variant the twin cannot run, HF's own cache
    assert lm._CACHE_OK[model] == CACHE_PATH[name]


@pytest.mark.parametrize("name", MODELS)
def test_truncation_is_lm_evals_with_the_models_own_context(name):
    """Contexts longer than the model (32 positions): found automatically, cut as lm-eval cuts,
    a warning with the count; the plain and cached paths agree with the oracle."""
    model = MODELS[name]()
    items = random_items(2, 6, 97, ctx_range=(25, 40), cont_range=(1, 9))
    want = oracle_lls(model, items, 32)
    tok = IdTok()
    cut = sum(
        max(0, len(tok.encode(it["context"])) + len(tok.encode(c)) - 33)
        for it in items
        for c in it["choices"]
    )
    assert cut > 0
    with pytest.warns(UserWarning, match=f"cut {cut} context tokens") as rec:
        got = lm.choice_lls(model, tok, items, token_budget=100)
    assert "model's context of 32 tokens" in str(rec[0].message)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4)
    long = [{"context": "1 2", "choices": [" ".join(["3"] * 33), "4"], "gold": 0}]
    with pytest.raises(ValueError, match="33 tokens; expected at most the model's context of 32"):
        lm.choice_lls(model, tok, long)
    with pytest.raises(ValueError, match="at most the model's own context of 32 tokens, got 33"):
        lm.choice_lls(model, tok, items, max_len=33)


def test_the_last_choice_token_is_never_fed_and_contexts_run_once():
    """Every id the GPT's embedding reads: each context once, each choice without its last
    token, nothing else but padding (id 0)."""
    model = our_gpt()
    items = [
        {
            "context": "10 11 12 13",
            "choices": ["20 21 90", "22 91", "92", "23 24 25 93"],
            "gold": 0,
        },
        {"context": "14 15", "choices": ["26 94", "27 28 95", "96", "29 97"], "gold": 1},
    ]
    fed: list[int] = []
    hook = model.wte.register_forward_hook(
        lambda mod, inp, out: fed.extend(inp[0].flatten().tolist())
    )
    try:
        lm._CACHE_OK[model] = {"gpt": True}  # skip the probe: count the scoring passes only
        lm.choice_lls(model, IdTok(), items, token_budget=4096)
    finally:
        hook.remove()
    assert not {90, 91, 92, 93, 94, 95, 96, 97} & set(fed)  # last tokens: never fed
    counts = {t: fed.count(t) for t in range(10, 30)}
    assert all(counts[t] == 1 for t in (10, 11, 12, 13, 14, 15))  # each context ONCE
    assert all(counts[t] == 1 for t in (20, 21, 22, 23, 24, 25, 26, 27, 28, 29))
    assert set(fed) - set(range(10, 30)) <= {0}  # the rest is padding


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


def test_a_model_whose_cache_disagrees_falls_back_with_a_warning():
    model = our_gpt(seed=3)

    def broken(idx, past=None, **kw):  # ignores the positions: a wrong cache
        return gpt.Model.hidden_cached(model, idx, past)

    model.hidden_cached = broken
    items = random_items(4, 4, 97, ctx_range=(3, 9), cont_range=(2, 5))
    with pytest.warns(UserWarning, match="does not reproduce the plain forward"):
        got = lm.choice_lls(model, IdTok(), items)
    for g, w in zip(got, oracle_lls(model, items, 32), strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4)


def test_target_delimiter_is_scored_and_left_out_of_acc_norm():
    """lm-eval's meaning: LL(" bb") = ln p(" "|a) + ln p(b|" ") + ln p(b|b), the byte count of
    acc_norm is bytes("bb") = 2; a context's trailing space moves into the continuation."""
    V = 256
    P = torch.full((V, V), 1.0 / V, dtype=torch.float64)
    sp, a, b, c = ord(" "), ord("a"), ord("b"), ord("c")
    P[a] = 0.1 / (V - 1)
    P[a, sp] = 0.9
    P[sp] = 0.15 / (V - 2)
    P[sp, b], P[sp, c] = 0.4, 0.45
    P[b] = 0.1 / (V - 1)
    P[b, b] = 0.9
    logP = P.log()

    def model(ids):
        return logP[ids]

    tok = ByteTokenizer()
    raw = lm.score_choices(model, tok, "a", ["bb", "c"], False, target_delimiter=" ")
    want = [math.log(0.9) + math.log(0.4) + math.log(0.9), math.log(0.9) + math.log(0.45)]
    np.testing.assert_allclose(raw, want, atol=1e-12)
    norm = lm.score_choices(model, tok, "a", ["bb", "c"], True, target_delimiter=" ")
    np.testing.assert_allclose(norm, [want[0] / 2, want[1] / 1], atol=1e-12)
    # "a " + "" + "bb": the trailing space is scored with the choice, as lm-eval's _encode_pair
    moved = lm.score_choices(model, tok, "a ", ["bb", "c"], False, target_delimiter="")
    np.testing.assert_allclose(moved, want, atol=1e-12)
    items = [{"context": "a", "choices": ["bb", "c"], "gold": 0, "target_delimiter": " "}]
    acc = lm.run_task(model, tok, items, "acc", np.random.default_rng(0), n_boot=10)
    norm_r = lm.run_task(model, tok, items, "acc_norm", np.random.default_rng(0), n_boot=10)
    # acc: -1.0217-0.105 < -0.9039 -> "c"; acc_norm: -0.564 > -0.904 -> "bb" (gold)
    assert (acc.per_item[0], norm_r.per_item[0]) == (0.0, 1.0)


def test_ids_outside_the_vocabulary_are_a_clear_error():
    model = our_gpt()  # vocab 256
    items = [{"context": "1 2", "choices": ["3", "300"], "gold": 0}]
    with pytest.raises(
        ValueError, match=r"expected token ids in \[0, 256\).*got ids in \[1, 300\]"
    ):
        lm.choice_lls(model, IdTok(), items)


def _plain(model, items, budget=64):
    """The same items through the plain path (no cache), as a model without one would go."""
    lm._CACHE_OK[model] = {"gpt": False, "twin": False, "hf": False}
    try:
        return lm.choice_lls(model, IdTok(), items, token_budget=budget)
    finally:
        del lm._CACHE_OK[model]


@pytest.mark.parametrize("name", ["gpt", "hf"])
def test_the_context_pass_at_its_last_row_moves_no_ll_beyond_1e6(name, monkeypatch):
    """The context pass asks our GPT for each context's last hidden state only
    (``hidden_cached(last=)``: its last block at those rows). Against the full context pass
    (every row, then the last one picked: the code before) every LL agrees to 1e-6 plus one
    float32 ulp of its size (matrices with fewer rows round differently: 1.4e-6 seen at a
    14.8-nat LL of these large random weights, 9.5e-7 on bench/bench_mc.py's 1600 choices), at
    three budgets, and both agree with the plain path (no cache) to 1e-5."""
    model = MODELS[name]()
    items = random_items(3, 16, 97)
    plain = _plain(model, items)

    def full_prefill(self, x, lens):
        h, cache = self.model.hidden_cached(x)  # [Bc, Lc, D]
        return h[torch.arange(h.shape[0]), lens - 1], cache

    for budget in (8, 64, 4096):
        got = lm.choice_lls(model, IdTok(), items, token_budget=budget)
        with monkeypatch.context() as mp:
            mp.setattr(lm._GPTCache, "prefill", full_prefill)
            before = lm.choice_lls(model, IdTok(), items, token_budget=budget)
        for g, b, p in zip(got, before, plain, strict=True):
            np.testing.assert_allclose(g, b, rtol=2.0**-23, atol=1e-6)
            np.testing.assert_allclose(g, p, rtol=0, atol=1e-5)
    assert lm._CACHE_OK[model] == CACHE_PATH[name]


def test_two_threads_scoring_one_model_get_what_each_gets_alone():
    """Two threads score different items with the same model at the same time, many rounds: each
    gets exactly what it gets alone (state shared between calls, e.g. a scratch buffer or a
    cache kept on the model, would mix their rows)."""
    import threading

    model = our_gpt()
    sets = [random_items(10 + i, 12, 97, ctx_range=(5, 25), cont_range=(3, 8)) for i in (0, 1)]
    alone = [lm.choice_lls(model, IdTok(), s, token_budget=64) for s in sets]
    got: dict[int, list] = {0: [], 1: []}
    start = threading.Barrier(2)

    def work(i: int) -> None:
        start.wait()
        for _ in range(15):
            got[i].append(lm.choice_lls(model, IdTok(), sets[i], token_budget=64))

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in (0, 1):
        assert len(got[i]) == 15
        for run in got[i]:
            for g, w in zip(run, alone[i], strict=True):
                np.testing.assert_array_equal(g, w)
