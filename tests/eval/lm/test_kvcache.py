"""tinyllm/eval/lm/kvcache.py: multiple choice from cached keys/values and the check guarding it.

The oracle is the plainest reading of docs/definitions.md, multiple choice with lm-eval's truncation: for every
choice, one full forward pass of ``(ctx + cont)[-(L+1):][:-1]`` alone (batch 1, no cache, no
padding), float64 log-softmax, the choice tokens read at the position before each
(lm_helpers.oracle_lls). Models: our GPT (KV cache in ``hidden_cached``) and transformers'
GPT2LMHeadModel (through our GPT on its weights, or its own cache), random weights, no download.
Beyond the probe the cache is checked on: many contexts per pass, several passes, head blocks
of a few rows, long choices, large first-token ids; the cached path is asserted to be the one
taken where that is the documented behaviour (no fallback warning, lm.cache_verdicts). The
Hugging Face cache layouts are in test_kvcache_hf.py.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import torch
from lm_helpers import (
    CACHE_PATH,
    MODELS,
    SPEC_S3_LL,
    Calls,
    IdTok,
    assert_oracle,
    ids_item,
    oracle_lls,
    our_gpt,
    random_items,
    silent_choice_lls,
    spec_choice_table,
    vocab_of,
)
from torch import nn

from tinyllm import logits
from tinyllm.eval import lm
from tinyllm.eval.lm import kvcache, scoring
from tinyllm.models import gpt
from tinyllm.tokens import ByteTokenizer


class Uint8Tok:
    """Bytes as a uint8 array (what np.frombuffer gives)."""

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


# ------------------------------------------------------------- the cached path equals the oracle


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
    assert lm.cache_verdicts(model) == CACHE_PATH[name]


def _beyond_the_probe_items(V: int) -> list[dict]:
    """Contexts of equal length (many per pass), long choices, first-token ids near V - 1, a
    context whose choices are all one token, a repeated context; the first items (the probe)
    are ordinary."""
    rng = np.random.default_rng(5)
    items = random_items(21, 3, V, ctx_range=(6, 9), cont_range=(2, 6))
    for i in range(14):
        ctx = rng.integers(1, V, 8)
        choices = [
            [int(V - 1 - (i + j) % 3)] + rng.integers(1, V, rng.integers(0, 12)).tolist()
            for j in range(4)
        ]
        items.append(ids_item(ctx, choices))
    items.append(ids_item(rng.integers(1, V, 8), [[V - 1], [V - 2], [3]]))  # one token each
    items.append(dict(items[5]))  # a repeated context
    items += random_items(22, 8, V, ctx_range=(2, 20), cont_range=(1, 14))
    return items


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("budget", [16, 2048])
def test_cached_choices_beyond_the_probe_equal_the_oracle(name, budget):
    """Head blocks of 2 rows (``max_logits = 2 V``: the first-token step loops over many blocks
    of a pass of 14 equal-length contexts, where the probe's pass has at most 2 rows), long
    choices, first tokens at the top of the vocabulary, several passes at budget 16: every LL
    equals the oracle, and the cached path is the one taken (no warning)."""
    model = MODELS[name]()
    items = _beyond_the_probe_items(vocab_of(model))
    got = silent_choice_lls(model, items, token_budget=budget, max_logits=2 * vocab_of(model))
    assert_oracle(model, items, got)
    assert lm.cache_verdicts(model) == CACHE_PATH[name]


@pytest.mark.parametrize("name", ["gpt", "hf"])
def test_long_choices_take_the_cached_path(name):
    """Choices of 20-31 tokens (|LL| of a few hundred nats, where float32 rounding is 1e-5
    nats): the cached path agrees with the plain path to 1e-4 *relative* (logits.VERIFY_TOL, relative
    to max(1, |LL|)) and is taken; its LLs equal the oracle."""
    model = MODELS[name]()
    items = random_items(31, 4, vocab_of(model), ctx_range=(1, 2), cont_range=(20, 32))
    got = silent_choice_lls(model, items)
    assert max(abs(v) for g in got for v in g) > 100.0  # the regime the test is about
    assert lm.cache_verdicts(model) == CACHE_PATH[name]
    assert_oracle(model, items, got, atol=1e-3)


def test_uint8_token_ids_score_like_int64_on_the_cached_path():
    torch.manual_seed(0)
    model = gpt.Model(gpt.Config(block_size=32, n_layer=2, n_head=2, n_embd=16)).eval()
    items = [{"context": "hello", "choices": [" world", " there!", "x"], "gold": 0}]
    got = lm.choice_lls(model, Uint8Tok(), items)[0]
    # oracle: the full logits of context + choice, each choice token read one position before
    want = []
    for c in items[0]["choices"]:
        ids = np.frombuffer(("hello" + c).encode(), dtype=np.uint8).astype(np.int64)
        lp = lm.log_probs(model, ids)
        want.append(sum(float(lp[t - 1, ids[t]]) for t in range(5, ids.size)))
    np.testing.assert_allclose(got, want, rtol=1e-4)


class Uint8Ids:
    """Ids as read-only uint8 arrays (np.frombuffer): "3 17 5" -> [3, 17, 5]."""

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(bytes(int(t) for t in text.split()), dtype=np.uint8)


def test_uint8_ids_take_the_cached_path_with_multi_token_choices():
    """A tokenizer returning uint8 arrays scores exactly as one returning ints, on the cached
    path (multi-token choices), without falling back."""
    model = our_gpt()
    items = random_items(45, 6, 256, ctx_range=(2, 9), cont_range=(2, 6))
    with warnings.catch_warnings(action="error"):
        got = lm.choice_lls(model, Uint8Ids(), items)
    assert lm.cache_verdicts(model) == {"gpt": True}
    assert_oracle(model, items, got)


def _plain(model, items, budget=64):
    """The same items through the plain path (no cache), as a model without one would go."""
    return lm.choice_lls(model, IdTok(), items, token_budget=budget, cache="off")


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
            mp.setattr(kvcache.GPTCache, "prefill", full_prefill)
            before = lm.choice_lls(model, IdTok(), items, token_budget=budget)
        for g, b, p in zip(got, before, plain, strict=True):
            np.testing.assert_allclose(g, b, rtol=2.0**-23, atol=1e-6)
            np.testing.assert_allclose(g, p, rtol=0, atol=1e-5)
    assert lm.cache_verdicts(model) == CACHE_PATH[name]


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


# ------------------------------------------------------------- cost contracts of the cached path


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
    lm.choice_lls(model, IdTok(), items, token_budget=4096)  # the probe: the verdict is kept
    assert lm.cache_verdicts(model) == {"gpt": True}
    fed: list[int] = []
    hook = model.wte.register_forward_hook(
        lambda mod, inp, out: fed.extend(inp[0].flatten().tolist())
    )
    try:
        lm.choice_lls(model, IdTok(), items, token_budget=4096)  # the scoring passes only
    finally:
        hook.remove()
    assert not {90, 91, 92, 93, 94, 95, 96, 97} & set(fed)  # last tokens: never fed
    counts = {t: fed.count(t) for t in range(10, 30)}
    assert all(counts[t] == 1 for t in (10, 11, 12, 13, 14, 15))  # each context ONCE
    assert all(counts[t] == 1 for t in (20, 21, 22, 23, 24, 25, 26, 27, 28, 29))
    assert set(fed) - set(range(10, 30)) <= {0}  # the rest is padding


def _head_rows(model, run) -> list[int]:
    """Rows of every block of head output while ``run()`` scores (the verdict already stored)."""
    rows: list[int] = []
    hook = model.lm_head.register_forward_hook(
        lambda mod, inp, out: rows.append(out.numel() // out.shape[-1])
    )
    try:
        run()
    finally:
        hook.remove()
    return rows


def test_a_block_of_head_output_holds_at_most_max_logits_elements():
    """``max_logits`` bounds the elements of one ``[rows, V]`` block of head output (one row at
    least): with a vocabulary of 2**17 and ``max_logits = V``, every block is one row."""
    torch.manual_seed(0)
    V = 1 << 17
    model = gpt.Model(gpt.Config(vocab_size=V, block_size=16, n_layer=1, n_head=1, n_embd=8))
    model.eval()
    items = random_items(41, 6, V, ctx_range=(3, 5), cont_range=(2, 5))
    first = silent_choice_lls(
        model, items, max_logits=V
    )  # stores the verdict: the check is not counted
    assert lm.cache_verdicts(model) == {"gpt": True}
    rows = _head_rows(model, lambda: lm.choice_lls(model, IdTok(), items, max_logits=V))
    assert rows and max(rows) == 1
    assert_oracle(model, items, first, L=16)


def test_the_head_reads_each_context_once_and_each_fed_choice_token_once():
    """The cost the docstring states: each distinct context runs once (its last position goes
    through the head once, shared by its choices) and each choice feeds ``cont[:-1]`` only, so
    the head sees #contexts + sum(len(cont) - 1) rows in all."""
    model = our_gpt()
    items = random_items(42, 10, 256, ctx_range=(4, 12), cont_range=(1, 6))
    items.append(dict(items[0]))  # a repeated context: no new rows
    silent_choice_lls(model, items)
    rows = _head_rows(model, lambda: lm.choice_lls(model, IdTok(), items))
    tok = IdTok()
    contexts = {it["context"] for it in items}
    fed = sum(len(tok.encode(c)) - 1 for it in items[:-1] for c in it["choices"])
    fed += sum(len(tok.encode(c)) - 1 for c in items[-1]["choices"])
    assert sum(rows) == len(contexts) + fed


def test_context_and_choice_passes_follow_the_token_budget_longest_first():
    """Contexts sorted by length across items, longest first, batched up to ``token_budget``
    tokens (rows x padded length; one row at least), each pass padded to its longest row only;
    the same for the rows of packed choices fed after the cache."""
    model = our_gpt()
    items = random_items(43, 16, 255, ctx_range=(2, 20), cont_range=(1, 7))
    items = [
        dict(it, context=" ".join(str(1 + int(t)) for t in it["context"].split())) for it in items
    ]
    for it in items:  # ids >= 1: id 0 is the padding
        it["choices"] = [" ".join(str(1 + int(t)) for t in c.split()) for c in it["choices"]]
    budget = 40
    want = silent_choice_lls(model, items, token_budget=budget)
    rec = Calls(model)
    model.hidden_cached = rec
    got = lm.choice_lls(model, IdTok(), items, token_budget=budget)
    del model.hidden_cached
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    tok = IdTok()
    lens = sorted({len(tok.encode(it["context"])) for it in items}, reverse=True)
    prefill = [x for x, cached in rec.calls if not cached]
    widths = [x.shape[1] for x in prefill]
    assert widths == sorted(widths, reverse=True)  # longest first, across items
    assert sum(x.shape[0] for x in prefill) == len({it["context"] for it in items})
    assert widths[0] == lens[0]
    for x, _ in rec.calls:
        rows, width = x.shape
        assert rows * width <= budget or rows == 1
        assert int((x != 0).sum(1).max()) == width  # padded to its longest row only


class NoVocab(nn.Module):
    """Our GPT with no vocabulary size anywhere but its head (no cfg, no config)."""

    def __init__(self, m: gpt.Model) -> None:
        super().__init__()
        self.m, self.lm_head = m, m.lm_head

    def hidden_cached(self, *a, **kw):
        return self.m.hidden_cached(*a, **kw)

    def forward(self, ids):
        return self.m(ids)


def test_a_first_choice_token_beyond_the_head_is_refused_on_the_cached_path():
    """Ids checked against the head itself when the model states no vocabulary: a first choice
    token of id 256 (= the head's size) in an item after the probe is the documented error."""
    model = NoVocab(our_gpt())
    items = random_items(44, 5, 256, ctx_range=(3, 8), cont_range=(1, 4))
    items.append(ids_item([1, 2, 3], [[4, 5], [256, 6]]))
    with pytest.raises(ValueError) as e:
        lm.choice_lls(model, IdTok(), items)
    assert str(e.value) == "expected token ids < the model's vocabulary size 256, got id 256"
    assert lm.cache_verdicts(model) == {"gpt": True}  # the probe (first items) passed


# -------------------------------------------------------------------- the check and its fallback


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


def test_a_cache_that_raises_falls_back_with_both_warnings():
    """A model whose cache cannot be driven: a warning naming the error, the documented
    fallback warning (difference inf), and the plain path's LLs (the oracle's)."""
    model = our_gpt(seed=4)

    def broken(idx, past=None, **kw):
        raise RuntimeError("no cache here")

    model.hidden_cached = broken
    items = random_items(46, 5, 256, ctx_range=(3, 9), cont_range=(1, 5))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = lm.choice_lls(model, IdTok(), items)
    assert [str(w.message) for w in rec] == [
        "Model: cached scoring failed (RuntimeError('no cache here'))",
        "Model: scoring choices from cached keys/values does not reproduce the plain forward "
        "pass (max relative difference inf); scoring every context + choice in full",
    ]
    assert lm.cache_verdicts(model) == {"gpt": False}
    assert_oracle(model, items, got)


def test_a_cache_that_disagrees_is_named_in_the_fallback_warning():
    model = our_gpt(seed=3)

    def ignores_positions(idx, past=None, **kw):  # a wrong cache
        return gpt.Model.hidden_cached(model, idx, past)

    model.hidden_cached = ignores_positions
    items = random_items(4, 4, 256, ctx_range=(3, 9), cont_range=(2, 5))
    with pytest.warns(UserWarning) as rec:
        got = lm.choice_lls(model, IdTok(), items)
    assert len(rec) == 1
    msg = str(rec[0].message)
    head = "Model: scoring choices from cached keys/values does not reproduce the plain forward "
    tail = "); scoring every context + choice in full"
    assert msg.startswith(head + "pass (max relative difference ") and msg.endswith(tail)
    assert float(msg[len(head) + 31 : -len(tail)]) > logits.VERIFY_TOL
    assert_oracle(model, items, got)


def _padding_blind(model: gpt.Model):
    """A cache that ignores ``past_valid``: a shorter context attends to its row's padding."""

    def hidden_cached(idx, past=None, past_valid=None, **kw):
        return gpt.Model.hidden_cached(model, idx, past, **kw)

    model.hidden_cached = hidden_cached
    return model


def _three_choice_items(lens: list[int]) -> list[dict]:
    """Items of random byte ids (seed 47): contexts of the given lengths, 3 choices of 3 ids."""
    rng = np.random.default_rng(47)
    return [
        ids_item(rng.integers(1, 256, n), [rng.integers(1, 256, 3) for _ in range(3)]) for n in lens
    ]


@pytest.mark.parametrize(
    "lens",
    [
        [7, 8, 7, 2, 8, 7, 6, 8, 7, 7],  # the probe's 7 and 8 share a pass in any batching
        [2, 8, 8, 7, 8, 7, 6, 8, 7, 7],  # the probe's 2 and 8 are too far apart to share a pass
        [8, 8, 8, 8, 5, 8, 7, 8, 6, 8],  # the first three contexts have one length
    ],
)
def test_a_cache_wrong_under_padding_is_caught_whatever_the_first_lengths(lens):
    """The check scores its probe in one padded pass (whatever the lengths), and when the first
    contexts all have one length it adds the first later context of another length: a cache
    that reads a padded context's padding is refused either way and the task falls back to the
    plain path (the LLs are the oracle's). Before, both tasks were scored with the wrong cache
    (no warning; LLs up to 0.79 nats off)."""
    model = _padding_blind(our_gpt(seed=5))
    items = _three_choice_items(lens)
    with pytest.warns(UserWarning, match="does not reproduce the plain forward"):
        got = lm.choice_lls(model, IdTok(), items)
    assert lm.cache_verdicts(model) == {"gpt": False}
    assert_oracle(model, items, got)


def test_a_right_cache_passes_the_check_whatever_the_first_lengths():
    """The same tasks with our GPT's own cache: no warning, the cached path, the oracle's LLs."""
    for lens in ([2, 8, 8, 7, 8, 7, 6, 8, 7, 7], [8, 8, 8, 8, 5, 8, 7, 8, 6, 8], [4] * 6):
        model = our_gpt(seed=5)
        items = _three_choice_items(lens)
        got = silent_choice_lls(model, items)
        assert lm.cache_verdicts(model) == {"gpt": True}
        assert_oracle(model, items, got)


def test_the_check_costs_a_few_of_the_first_items_however_long_the_task():
    """The cache is checked on a probe of the first contexts (the plain and the cached path on
    them): the first call feeds at most 3 x the tokens of the first three items (plus the head
    hook's own check on logits.VERIFY_LEN tokens) more than a second call, which reuses the
    verdict."""
    model = our_gpt()
    items = random_items(48, 40, 256, ctx_range=(4, 16), cont_range=(1, 6))
    fed = [0]
    hook = model.wte.register_forward_hook(
        lambda mod, inp, out: fed.__setitem__(0, fed[0] + inp[0].numel())
    )
    try:
        lm.choice_lls(model, IdTok(), items)
        first, fed[0] = fed[0], 0
        lm.choice_lls(model, IdTok(), items)
        second = fed[0]
    finally:
        hook.remove()
    assert lm.cache_verdicts(model) == {"gpt": True}
    tok = IdTok()
    head3 = sum(
        len(tok.encode(it["context"])) + len(tok.encode(c))
        for it in items[:3]
        for c in it["choices"]
    )
    assert 0 < first - second <= 3 * head3 + 3 * logits.VERIFY_LEN
    assert second > 3 * head3 + 3 * logits.VERIFY_LEN  # the bound is not the task's own size


class CachedBigram(nn.Module):
    """A bigram with a trivial KV cache: a token's hidden state is its one-hot row and the head
    holds log P, so logits = log P[token]. The hidden states of tokens fed after a cache are
    multiplied by ``scale``: a cache that is wrong by a known amount."""

    def __init__(self, P: torch.Tensor, scale: float) -> None:
        super().__init__()
        self.V, self.scale = P.shape[0], scale
        self.lm_head = nn.Linear(self.V, self.V, bias=False)
        with torch.no_grad():
            self.lm_head.weight.copy_(P.log().T)

    def hidden_cached(self, idx, past=None, *, positions=None, past_valid=None, **kw):
        h = nn.functional.one_hot(idx, self.V).float()
        if past is not None:
            h = h * self.scale
        if kw.get("last") is not None:
            h = h[torch.arange(h.shape[0]), kw["last"]][:, None]
        S = idx.shape[1] + (0 if past is None else past.length)
        z = torch.zeros(idx.shape[0], 1, S, 1)
        return h, gpt.KVCache([z], [z])

    def forward(self, ids):
        return self.lm_head(nn.functional.one_hot(ids, self.V).float())


def test_a_cache_off_by_1_5e4_nats_on_short_lls_is_rejected():
    """logits.VERIFY_TOL = 1e-4 relative to max(1, |LL|): a cache whose LLs of about -0.2 nats are
    off by 1.5e-4 nats does not reproduce the plain path; the task falls back and its LLs are
    the bigram's own, sum ln P[previous, token]."""
    P = torch.tensor(
        [[0.1, 0.7, 0.1, 0.1], [0.02, 0.94, 0.02, 0.02], [0.25] * 4, [0.25] * 4],
        dtype=torch.float64,
    )
    lp = P.log()

    def off(scale: float) -> float:  # what the wrong cache gives ln p(1 | 1), minus the truth
        return float((scale * lp[1]).log_softmax(-1)[1] - lp[1, 1])

    lo, hi = 1.0, 1.1  # bisection: the scale at which the cache is off by 1.5e-4 nats
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if abs(off(mid)) < 1.5e-4 else (lo, mid)
    model = CachedBigram(P, lo)
    items = [ids_item([0], [[1, 1], [2]]), ids_item([2, 0], [[1, 1], [3]])] * 3
    with pytest.warns(UserWarning, match="does not reproduce the plain forward"):
        got = lm.choice_lls(model, IdTok(), items)
    want = [float(lp[0, 1] + lp[1, 1]), float(lp[0, 2])]
    want2 = [float(lp[0, 1] + lp[1, 1]), float(lp[0, 3])]
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, want if i % 2 == 0 else want2, rtol=0, atol=1e-6)
    assert abs(want[0]) < 1.0


def _reqs_of_lengths(lens: list[int], k: int = 2) -> list:
    """k choices per item, item i's context ``lens[i]`` tokens (distinct contexts)."""
    return [
        scoring.Req(i, np.full(n, i + 1, dtype=np.int64), np.array([7, c], dtype=np.int64))
        for i, n in enumerate(lens)
        for c in range(k)
    ]


def test_probe_is_the_shortest_and_longest_of_the_first_three_contexts():
    """kvcache.probe's contract, request indices by hand: the shortest and the longest of the first
    three contexts with their choices; when those have one length, the first later context of
    another length with its choices."""
    assert kvcache.probe(_reqs_of_lengths([5, 2, 9, 1, 12])) == [2, 3, 4, 5]  # 2 and 9, not 1, 12
    assert kvcache.probe(_reqs_of_lengths([9, 5, 2])) == [0, 1, 4, 5]
    assert kvcache.probe(_reqs_of_lengths([4, 4, 4, 4, 6, 3])) == [0, 1, 8, 9]  # 4, then the 6
    assert kvcache.probe(_reqs_of_lengths([4, 4, 4])) == [0, 1, 4, 5]  # one length in the task
    assert kvcache.probe(_reqs_of_lengths([3])) == [0, 1]
    assert kvcache.probe(_reqs_of_lengths([4, 4, 4, 6], k=1)) == [0, 3]  # items of one choice


# --------------------------------------------------------------- which models have a cached path


class SelfBased(nn.Module):
    """docs/definitions.md, multiple choice's bigram as a module that is its own base model (a Hugging Face base
    model's ``base_model`` is itself) with no output embeddings: no cache to drive."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("logP", spec_choice_table().log())

    @property
    def base_model(self) -> nn.Module:
        return self

    def get_output_embeddings(self):
        return None

    def forward(self, ids):
        return self.logP[ids]


def test_a_model_that_is_its_own_base_model_is_scored_plainly_and_silently():
    with warnings.catch_warnings(action="error"):
        got = lm.score_choices(SelfBased(), ByteTokenizer(), "a", ["bb", "c"], normalize=False)
    np.testing.assert_allclose(got, SPEC_S3_LL, rtol=1e-12)


@dataclasses.dataclass
class Unhashable:
    """Our GPT behind a dataclass wrapper (``eq=True``: unhashable, no weak-keyed verdict)."""

    m: gpt.Model

    @property
    def lm_head(self) -> nn.Module:
        return self.m.lm_head

    def hidden_cached(self, *a, **kw):
        return self.m.hidden_cached(*a, **kw)

    def __call__(self, ids):
        return self.m(ids)


def test_an_unhashable_model_is_checked_and_scored_from_its_cache():
    model = Unhashable(our_gpt())
    items = random_items(49, 5, 256, ctx_range=(2, 9), cont_range=(1, 5))
    rec = Calls(model.m)
    model.m.hidden_cached = rec
    got = silent_choice_lls(model, items)
    assert any(cached for _, cached in rec.calls)  # choices fed after a cache: the cached path
    assert_oracle(model.m, items, got)


# ------------------------------------------------- choosing the path: cache= and cache_verdicts


def test_cache_off_takes_the_plain_path_with_the_same_lls():
    """cache="off": no cache is driven or checked (hidden_cached never runs, no verdict kept)
    and the LLs are the oracle's; the default "auto" then checks our GPT's cache, keeps the
    verdict and scores from it, with the same LLs to 1e-4."""
    model = our_gpt(seed=6)
    items = random_items(50, 6, 256, ctx_range=(2, 9), cont_range=(1, 5))
    rec = Calls(model)
    model.hidden_cached = rec
    with warnings.catch_warnings(action="error"):
        off = lm.choice_lls(model, IdTok(), items, cache="off")
    assert rec.calls == [] and lm.cache_verdicts(model) == {}
    assert_oracle(model, items, off)
    auto = silent_choice_lls(model, items)
    assert any(cached for _, cached in rec.calls)  # choices fed after a cache
    assert lm.cache_verdicts(model) == {"gpt": True}
    for a, o in zip(auto, off, strict=True):
        np.testing.assert_allclose(a, o, rtol=0, atol=1e-4)


def test_score_choices_and_run_task_pass_cache_on():
    """score_choices and run_task hand cache= to choice_lls: with "off" a fresh model gets no
    verdict, with the default it gets our GPT's."""
    tok = IdTok()
    item = random_items(51, 1, 256, ctx_range=(3, 6), cont_range=(2, 4))[0]
    for cache, want in (("off", {}), ("auto", {"gpt": True})):
        m1, m2 = our_gpt(seed=7), our_gpt(seed=7)
        got = lm.score_choices(m1, tok, item["context"], item["choices"], False, cache=cache)
        assert lm.cache_verdicts(m1) == want
        assert_oracle(m1, [item], [got])
        r = lm.run_task(m2, tok, [item] * 3, "acc", np.random.default_rng(0), 10, cache=cache)
        assert lm.cache_verdicts(m2) == want
        assert r.n == 3


@pytest.mark.parametrize("bad", ["on", "", None, True, "AUTO"])
def test_an_unknown_cache_mode_is_refused_by_every_entry_point(bad):
    tok, items = IdTok(), random_items(52, 1, 256)
    want = f"cache: expected one of ['auto', 'off'], got {bad!r}"
    calls = (
        lambda: lm.choice_lls(our_gpt(), tok, items, cache=bad),
        lambda: lm.score_choices(our_gpt(), tok, "1 2", ["3", "4"], cache=bad),
        lambda: lm.run_task(our_gpt(), tok, items, "acc", np.random.default_rng(0), cache=bad),
    )
    for call in calls:
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == want
    assert lm.CACHE_MODES == ("auto", "off")


def test_cache_verdicts_is_a_copy_and_empty_before_any_check():
    model = our_gpt()
    assert lm.cache_verdicts(model) == {}  # not scored yet
    assert lm.cache_verdicts(SelfBased()) == {}  # no cache to check
    items = random_items(53, 4, 256, ctx_range=(2, 9), cont_range=(1, 5))
    silent_choice_lls(model, items)
    got = lm.cache_verdicts(model)
    assert got == {"gpt": True}
    got["gpt"] = False  # the caller's copy: the kept verdict is unchanged
    assert lm.cache_verdicts(model) == {"gpt": True}
    unhashable = Unhashable(our_gpt())
    silent_choice_lls(unhashable, items)
    assert lm.cache_verdicts(unhashable) == {}  # cannot be weakly referenced: nothing kept
