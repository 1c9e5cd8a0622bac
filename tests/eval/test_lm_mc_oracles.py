"""Oracle tests for the multiple-choice path of tinyllm/eval/lm.py, from its surviving mutants.

``choice_lls`` checks its cached path against the plain path on a small probe (the first
contexts only) and falls back to the plain path when they disagree. These tests go beyond the
probe: many contexts per pass, several passes, head blocks of a few rows, long choices, large
first-token ids; each LL is compared with test_mc_cache's oracle (one plain batch-1 float64
forward per choice), and the cached path is asserted to be the one taken where that is the
documented behaviour (no fallback warning, the model's verdict stored). The rest checks the
documented contracts a user sees: ``progress(done items, total items)``, the token budget
(rows x padded length per pass, longest first), the memory bound of a head block, the
fallback and its warnings, lm-eval's ``_encode_pair``, the exact error messages, and
``run_task``'s default of 1000 bootstrap draws.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest
import torch
from test_lm import TableModel, spec_choice_table, table_token_nlls  # same folder (pytest path)
from test_mc_cache import (
    CACHE_PATH,
    MODELS,
    IdTok,
    oracle_lls,
    our_gpt,
    random_items,
)
from torch import nn

from tinyllm import stats
from tinyllm.eval import lm
from tinyllm.models import gpt
from tinyllm.tokens import ByteTokenizer

LN = math.log
SPEC_S3_LL = [LN(0.4) + LN(0.9), LN(0.45)]  # SPEC.md section 3: "bb", "c" after "a"


def _vocab(model) -> int:
    cfg = getattr(model, "cfg", None) or model.config
    return cfg.vocab_size


def _assert_oracle(model, items, got, L: int = 32, atol: float = 1e-4) -> None:
    want = oracle_lls(model, items, L)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=atol)


def _silent_choice_lls(model, items, **kw):
    """choice_lls with every warning an error: the cached path must pass its own check."""
    with warnings.catch_warnings(action="error"):
        return lm.choice_lls(model, IdTok(), items, **kw)


def _ids_item(ctx, choices, gold: int = 0) -> dict:
    return {
        "context": " ".join(map(str, ctx)),
        "choices": [" ".join(map(str, c)) for c in choices],
        "gold": gold,
    }


class Calls:
    """Records our GPT's ``hidden_cached`` calls: (ids fed, whether a cache was passed)."""

    def __init__(self, model: gpt.Model) -> None:
        self.model, self.calls = model, []

    def __call__(self, idx, past=None, **kw):
        self.calls.append((idx.clone(), past is not None))
        return gpt.Model.hidden_cached(self.model, idx, past, **kw)


# ------------------------------------------------- the cached path beyond the probe (SPEC 3)


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
        items.append(_ids_item(ctx, choices))
    items.append(_ids_item(rng.integers(1, V, 8), [[V - 1], [V - 2], [3]]))  # one token each
    items.append(dict(items[5]))  # a repeated context
    items += random_items(22, 8, V, ctx_range=(2, 20), cont_range=(1, 14))
    return items


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("budget", [16, 2048])
def test_cached_choices_beyond_the_probe_equal_the_oracle(name, budget, monkeypatch):
    """Head blocks of 2 rows (``_MAX_LOGITS = 2 V``: the first-token step loops over many blocks
    of a pass of 14 equal-length contexts, where the probe's pass has at most 2 rows), long
    choices, first tokens at the top of the vocabulary, several passes at budget 16: every LL
    equals the oracle, and the cached path is the one taken (no warning)."""
    model = MODELS[name]()
    monkeypatch.setattr(lm, "_MAX_LOGITS", 2 * _vocab(model))
    items = _beyond_the_probe_items(_vocab(model))
    got = _silent_choice_lls(model, items, token_budget=budget)
    _assert_oracle(model, items, got)
    assert lm._CACHE_OK[model] == CACHE_PATH[name]


@pytest.mark.parametrize("name", ["gpt", "hf"])
def test_long_choices_take_the_cached_path(name):
    """Choices of 20-31 tokens (|LL| of a few hundred nats, where float32 rounding is 1e-5
    nats): the cached path agrees with the plain path to 1e-4 *relative* (_VERIFY_TOL, relative
    to max(1, |LL|)) and is taken; its LLs equal the oracle."""
    model = MODELS[name]()
    items = random_items(31, 4, _vocab(model), ctx_range=(1, 2), cont_range=(20, 32))
    got = _silent_choice_lls(model, items)
    assert max(abs(v) for g in got for v in g) > 100.0  # the regime the test is about
    assert lm._CACHE_OK[model] == CACHE_PATH[name]
    _assert_oracle(model, items, got, atol=1e-3)


# --------------------------------------------------- cost contracts of the cached path


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


def test_a_block_of_head_output_holds_at_most_max_logits_elements(monkeypatch):
    """``_MAX_LOGITS`` bounds the elements of one ``[rows, V]`` block of head output (one row at
    least): with a vocabulary of 2**17 and ``_MAX_LOGITS = V``, every block is one row."""
    torch.manual_seed(0)
    V = 1 << 17
    model = gpt.Model(gpt.Config(vocab_size=V, block_size=16, n_layer=1, n_head=1, n_embd=8))
    model.eval()
    items = random_items(41, 6, V, ctx_range=(3, 5), cont_range=(2, 5))
    monkeypatch.setattr(lm, "_MAX_LOGITS", V)
    first = _silent_choice_lls(model, items)  # stores the verdict: the check is not counted
    assert lm._CACHE_OK[model] == {"gpt": True}
    rows = _head_rows(model, lambda: lm.choice_lls(model, IdTok(), items))
    assert rows and max(rows) == 1
    _assert_oracle(model, items, first, L=16)


def test_the_head_reads_each_context_once_and_each_fed_choice_token_once():
    """The cost the docstring states: each distinct context runs once (its last position goes
    through the head once, shared by its choices) and each choice feeds ``cont[:-1]`` only, so
    the head sees #contexts + sum(len(cont) - 1) rows in all."""
    model = our_gpt()
    items = random_items(42, 10, 256, ctx_range=(4, 12), cont_range=(1, 6))
    items.append(dict(items[0]))  # a repeated context: no new rows
    _silent_choice_lls(model, items)
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
    want = _silent_choice_lls(model, items, token_budget=budget)
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


# ------------------------------------------------------- progress(done items, total items)


ITEMS3 = [
    {"context": "a", "choices": ["bb", "c"], "gold": 0},
    {"context": "b", "choices": ["cc", "b", "bcb"], "gold": 1},
    {"context": "ab", "choices": ["c", "bb"], "gold": 0},
]


def _progress(model, items, tok=None, **kw) -> list[tuple[int, int]]:
    calls: list[tuple[int, int]] = []
    lm.choice_lls(model, tok or ByteTokenizer(), items, progress=lambda *a: calls.append(a), **kw)
    return calls


def test_progress_of_a_family_counts_items_whose_choices_are_all_scored():
    """A FamilyLM scores one choice at a time, in item order: after each, progress(items whose
    every choice is scored, total items)."""
    fam = lm.FamilyLM(TableModel(spec_choice_table()), table_token_nlls)
    calls = _progress(fam, ITEMS3)
    assert calls == [(0, 3), (1, 3), (1, 3), (1, 3), (2, 3), (2, 3), (3, 3)]


def test_progress_of_the_plain_path_counts_finished_items():
    """The plain path (a model without a cache), one input per pass (budget 1): each distinct
    input ``ctx + cont[:-1]`` once, longest first (ties in request order): "b"+"bc" (item 1),
    "ab"+"b" (item 2), "a"+"b" (items 0 and 2: item 2 done), "b"+"c" (item 1), "a" (item 0's
    one-token choice: item 0 done), "b" (item 1 done)."""
    calls = _progress(TableModel(spec_choice_table()), ITEMS3, token_budget=1)
    assert calls == [(0, 3), (0, 3), (1, 3), (1, 3), (2, 3), (3, 3)]


def test_progress_of_the_cached_path_counts_finished_items():
    """The cached path, one context per pass (budget 1), longest context first: each pass
    finishes its context's items (two items with one context finish together)."""
    model = our_gpt()
    items = [
        _ids_item([5, 6], [[7, 8], [9]]),
        _ids_item([5, 6, 7, 8], [[9, 10, 11], [12], [13, 14]]),
        _ids_item([3], [[4, 4], [5]]),
        _ids_item([5, 6], [[1, 2, 3], [4]]),
    ]
    calls = _progress(model, items, tok=IdTok(), token_budget=1)
    assert calls == [(1, 4), (3, 4), (4, 4)]
    assert lm._CACHE_OK[model] == {"gpt": True}


# ------------------------------------------------------------ token ids and the vocabulary


@pytest.mark.parametrize("name", ["gpt", "hf"])
def test_an_id_equal_to_the_vocabulary_size_is_refused_by_name(name):
    """Our GPT's cfg.vocab_size and a Hugging Face config's vocab_size bound the ids: an id of
    exactly V in a context is the documented error, before any forward pass."""
    model = MODELS[name]()
    V = _vocab(model)
    items = [_ids_item([1, V], [[2], [3]])]
    with pytest.raises(ValueError) as e:
        lm.choice_lls(model, IdTok(), items)
    assert str(e.value) == (
        f"expected token ids in [0, {V}) (the model's vocabulary), got ids in [1, {V}]"
    )


def test_a_negative_id_for_a_model_of_unknown_vocabulary_names_v():
    items = [_ids_item([97, -1], [[98], [99]])]
    with pytest.raises(ValueError) as e:
        lm.choice_lls(TableModel(spec_choice_table()), IdTok(), items)
    assert str(e.value) == (
        "expected token ids in [0, V) (the model's vocabulary), got ids in [-1, 99]"
    )


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
    items.append(_ids_item([1, 2, 3], [[4, 5], [256, 6]]))
    with pytest.raises(ValueError) as e:
        lm.choice_lls(model, IdTok(), items)
    assert str(e.value) == "expected token ids < the model's vocabulary size 256, got id 256"
    assert lm._CACHE_OK[model] == {"gpt": True}  # the probe (first items) passed


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
    assert lm._CACHE_OK[model] == {"gpt": True}
    _assert_oracle(model, items, got)


# ----------------------------------------------------------- the check and its fallback


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
    assert lm._CACHE_OK[model] == {"gpt": False}
    _assert_oracle(model, items, got)


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
    assert float(msg[len(head) + 31 : -len(tail)]) > lm._VERIFY_TOL
    _assert_oracle(model, items, got)


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
        _ids_item(rng.integers(1, 256, n), [rng.integers(1, 256, 3) for _ in range(3)])
        for n in lens
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
    assert lm._CACHE_OK[model] == {"gpt": False}
    _assert_oracle(model, items, got)


def test_a_right_cache_passes_the_check_whatever_the_first_lengths():
    """The same tasks with our GPT's own cache: no warning, the cached path, the oracle's LLs."""
    for lens in ([2, 8, 8, 7, 8, 7, 6, 8, 7, 7], [8, 8, 8, 8, 5, 8, 7, 8, 6, 8], [4] * 6):
        model = our_gpt(seed=5)
        items = _three_choice_items(lens)
        got = _silent_choice_lls(model, items)
        assert lm._CACHE_OK[model] == {"gpt": True}
        _assert_oracle(model, items, got)


def test_the_check_costs_a_few_of_the_first_items_however_long_the_task():
    """The cache is checked on a probe of the first contexts (the plain and the cached path on
    them): the first call feeds at most 3 x the tokens of the first three items (plus the head
    hook's own check on _VERIFY_LEN tokens) more than a second call, which reuses the verdict."""
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
    assert lm._CACHE_OK[model] == {"gpt": True}
    tok = IdTok()
    head3 = sum(
        len(tok.encode(it["context"])) + len(tok.encode(c))
        for it in items[:3]
        for c in it["choices"]
    )
    assert 0 < first - second <= 3 * head3 + 3 * lm._VERIFY_LEN
    assert second > 3 * head3 + 3 * lm._VERIFY_LEN  # the bound is not the task's own size


# --------------------------------------------------------- which models have a cached path


class SelfBased(nn.Module):
    """SPEC section 3's bigram as a module that is its own base model (a Hugging Face base
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
    got = _silent_choice_lls(model, items)
    assert any(cached for _, cached in rec.calls)  # choices fed after a cache: the cached path
    _assert_oracle(model.m, items, got)


# ------------------------------------------------------- tokenization (lm-eval's rules)


def _byte_bigram(seed: int = 0) -> TableModel:
    g = torch.Generator().manual_seed(seed)
    return TableModel(torch.rand(256, 256, generator=g, dtype=torch.float64).softmax(-1))


def test_trailing_whitespace_of_the_context_moves_to_the_continuation():
    """lm-eval's _encode_pair: context "abc  " with delimiter "" scores "  x" after "abc":
    LL = ln p(' '|c) + ln p(' '|' ') + ln p(x|' '), exactly as context "abc" with delimiter
    "  " does."""
    model, tok = _byte_bigram(), ByteTokenizer()
    lp = model.logP
    c, sp, x, y = ord("c"), ord(" "), ord("x"), ord("y")
    want = [
        float(lp[c, sp] + lp[sp, sp] + lp[sp, x]),
        float(lp[c, sp] + lp[sp, sp] + lp[sp, y] + lp[y, y]),
    ]
    got = lm.score_choices(model, tok, "abc  ", ["x", "yy"], False, target_delimiter="")
    np.testing.assert_allclose(got, want, rtol=1e-12)
    same = lm.score_choices(model, tok, "abc", ["x", "yy"], False, target_delimiter="  ")
    np.testing.assert_allclose(same, want, rtol=1e-12)
    # the model read the context "abc" then the moved whitespace, nothing else
    assert [ord(ch) for ch in "abc  y"] in model.calls


def test_a_context_or_choice_of_no_tokens_is_named_in_the_error():
    tok, m = IdTok(), TableModel(spec_choice_table())
    with pytest.raises(ValueError) as e:
        lm.choice_lls(m, tok, [{"context": "", "choices": ["1", "2"]}])
    assert str(e.value) == (
        "item 0: context '': expected at least one token (the first choice token is read at "
        "the position before it), got none"
    )
    with pytest.raises(ValueError) as e:
        lm.choice_lls(
            m, tok, [{"context": "1", "choices": ["2"]}, {"context": "1", "choices": ["2", " "]}]
        )
    assert str(e.value) == "item 1: choices[1] ' ': expected at least one token, got none"


# ------------------------------------------------------------------ batching (token budget)


class Recorder:
    """A model without a cache (the plain path): uniform logits; records each pass's ids."""

    def __init__(self) -> None:
        self.calls: list[torch.Tensor] = []

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        self.calls.append(ids.clone())
        return torch.zeros(*ids.shape, 50, dtype=torch.float64)


def test_each_pass_holds_as_many_rows_as_the_budget_allows():
    """ "Batched up to token_budget tokens (rows x padded length)": 8 distinct inputs of 6
    tokens at budget 24 run as 2 passes of 4 rows; at budget 23, 3 rows fit (18 <= 23)."""
    items = [_ids_item([i + 1] * 5, [[30 + i, 40], [31 + i, 41]]) for i in range(4)]
    for budget, shapes in ((24, [(4, 6), (4, 6)]), (23, [(3, 6), (3, 6), (2, 6)])):
        m = Recorder()
        got = lm.choice_lls(m, IdTok(), items, token_budget=budget)
        assert [tuple(c.shape) for c in m.calls] == shapes
        for g in got:
            np.testing.assert_allclose(g, [-2 * LN(50)] * 2, rtol=1e-12)


def test_a_row_of_three_quarters_of_the_longest_joins_its_pass():
    """_MAX_PAD: a row joins a pass if it is at least 75% of the pass's longest row: inputs of
    8 and 6 tokens share a pass (padding 25%), 8 and 5 do not."""
    for short, shapes in ((6, [(2, 8)]), (5, [(1, 8), (1, 5)])):
        m = Recorder()
        items = [_ids_item([1] * 7, [[2, 3]]), _ids_item([4] * (short - 1), [[5, 6]])]
        lm.choice_lls(m, IdTok(), items, token_budget=4096)
        assert [tuple(c.shape) for c in m.calls] == shapes


# ----------------------------------------------------------------------------- run_task


def test_run_task_default_is_1000_bootstrap_draws_where_1001_differ():
    """per_item [0, 0, 1, 0, 1, 1, 0] with rng seed 5: the 1000-draw percentile interval,
    which differs from a 1001-draw one (so the default is seen)."""
    wrong = {"context": "a", "choices": ["bb", "c"], "gold": 0}  # acc picks "c": 0
    right = {"context": "a", "choices": ["c", "bb"], "gold": 0}  # 1
    items = [wrong, wrong, right, wrong, right, right, wrong]
    r = lm.run_task(
        TableModel(spec_choice_table()), ByteTokenizer(), items, "acc", np.random.default_rng(5)
    )
    assert r.per_item.tolist() == [0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    ci = stats.bootstrap_ci(r.per_item, np.random.default_rng(5), n_boot=1000)
    assert (r.value, r.lo, r.hi) == (ci.value, ci.lo, ci.hi)
    other = stats.bootstrap_ci(r.per_item, np.random.default_rng(5), n_boot=1001)
    assert (other.lo, other.hi) != (ci.lo, ci.hi)


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
    """_VERIFY_TOL = 1e-4 relative to max(1, |LL|): a cache whose LLs of about -0.2 nats are
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
    items = [_ids_item([0], [[1, 1], [2]]), _ids_item([2, 0], [[1, 1], [3]])] * 3
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
        lm._Req(i, np.full(n, i + 1, dtype=np.int64), np.array([7, c], dtype=np.int64))
        for i, n in enumerate(lens)
        for c in range(k)
    ]


def test_probe_is_the_shortest_and_longest_of_the_first_three_contexts():
    """_probe's contract, request indices by hand: the shortest and the longest of the first
    three contexts with their choices; when those have one length, the first later context of
    another length with its choices."""
    assert lm._probe(_reqs_of_lengths([5, 2, 9, 1, 12])) == [2, 3, 4, 5]  # 2 and 9, not 1, 12
    assert lm._probe(_reqs_of_lengths([9, 5, 2])) == [0, 1, 4, 5]
    assert lm._probe(_reqs_of_lengths([4, 4, 4, 4, 6, 3])) == [0, 1, 8, 9]  # 4, then the 6
    assert lm._probe(_reqs_of_lengths([4, 4, 4])) == [0, 1, 4, 5]  # one length in the task
    assert lm._probe(_reqs_of_lengths([3])) == [0, 1]
    assert lm._probe(_reqs_of_lengths([4, 4, 4, 6], k=1)) == [0, 3]  # items of one choice
