"""tinyllm/eval/lm/choices.py: choice_lls and score_choices against docs/definitions.md, multiple choice.

Oracles: docs/definitions.md's worked example (a bigram table: LL("bb") = ln 0.4 + ln 0.9, LL("c") =
ln 0.45), lm-eval's truncation rule one choice at a time (lm_helpers.oracle_lls), the exact
error and warning messages, and hypothesis over any items, budgets and context lengths.
"""

from __future__ import annotations

import math
import types
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lm_helpers import (
    ITEMS,
    MODELS,
    SPEC_S3_LL,
    IdTok,
    Table,
    TableModel,
    ids_item,
    oracle_lls,
    our_gpt,
    random_items,
    spec_choice_table,
    table_token_nlls,
    vocab_of,
)
from torch import nn

from tinyllm.eval import lm
from tinyllm.models import gpt
from tinyllm.tokens import ByteTokenizer

LN = math.log

V = 7  # vocabulary of the GPT in the property test


# ----------------------------------------------------------------------------- docs/definitions.md, multiple choice


def test_spec_choice_example_sums_normalizations_and_winners():
    m, tok = TableModel(spec_choice_table()), ByteTokenizer()
    raw = lm.score_choices(m, tok, "a", ["bb", "c"], normalize=False)
    np.testing.assert_allclose(raw, [math.log(0.4) + math.log(0.9), math.log(0.45)], atol=1e-12)
    assert raw == pytest.approx([-1.0217, -0.7985], abs=1e-4)
    norm = lm.score_choices(m, tok, "a", ["bb", "c"], normalize=True)
    assert norm == pytest.approx([-0.5108, -0.7985], abs=1e-4)
    assert int(np.argmax(raw)) == 1  # acc picks "c"
    assert int(np.argmax(norm)) == 0  # acc_norm picks "bb"
    # the count-based path (a family's own token_nlls) gives the same numbers
    fam = lm.FamilyLM(m, table_token_nlls)
    np.testing.assert_allclose(lm.score_choices(fam, tok, "a", ["bb", "c"], False), raw, atol=1e-12)


def test_score_choices_normalizes_by_default():
    got = lm.score_choices(Table(), ByteTokenizer(), "a", ["bb", "c"])
    np.testing.assert_allclose(got, [SPEC_S3_LL[0] / 2, SPEC_S3_LL[1]], rtol=1e-12)


def test_acc_norm_divides_by_utf8_bytes_not_characters():
    m, tok = TableModel(spec_choice_table()), ByteTokenizer()
    raw = lm.score_choices(m, tok, "a", ["é", "c"], normalize=False)
    norm = lm.score_choices(m, tok, "a", ["é", "c"], normalize=True)
    assert norm[0] == pytest.approx(raw[0] / 2)  # "é" is 2 UTF-8 bytes


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


def test_an_items_own_delimiter_is_scored():
    # continuation d + c = "bb" and "bc": LL includes the delimiter's token (docs/definitions.md, multiple choice)
    items = [{"context": "a", "choices": ["b", "c"], "gold": 0, "target_delimiter": "b"}]
    got = lm.choice_lls(Table(), ByteTokenizer(), items)[0]
    np.testing.assert_allclose(got, [LN(0.4) + LN(0.9), LN(0.4) + LN(0.1 / 255)], rtol=1e-12)


class DropTable(nn.Module):
    """docs/definitions.md, multiple choice's bigram behind a dropout layer."""

    def __init__(self) -> None:
        super().__init__()
        self.logP, self.drop = spec_choice_table().log(), nn.Dropout(0.5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.logP[ids])


def test_choice_lls_with_dropout_on_gives_the_spec_example():
    torch.manual_seed(0)
    m = DropTable().train()
    got = lm.choice_lls(m, ByteTokenizer(), ITEMS[:1])[0]
    np.testing.assert_allclose(got, SPEC_S3_LL, rtol=1e-12)
    assert m.training


# ------------------------------------------------------------------- truncation (lm-eval's rule)


def test_max_len_cuts_the_context_from_the_left_as_lm_eval_does():
    """L = 4: the model reads (ctx + cont)[-(L+1):][:-1], never the last choice token."""
    m, tok = TableModel(spec_choice_table()), ByteTokenizer()
    with pytest.warns(UserWarning, match="cut 1 context tokens from the left of 1 of 2"):
        got = lm.score_choices(m, tok, "xyza", ["bb", "c"], normalize=False, max_len=4)
    # "xyza" + "bb" -> "yzabb"[:-1] = "yzab"; "xyza" + "c" -> "xyzac"[:-1] = "xyza" (no cut)
    assert sorted(bytes(c) for c in m.calls) == [b"xyza", b"yzab"]
    np.testing.assert_allclose(got, [math.log(0.4) + math.log(0.9), math.log(0.45)], atol=1e-12)
    # a choice of exactly L tokens keeps one context token; one longer cannot be scored
    m.calls.clear()
    with pytest.warns(UserWarning, match="cut 2"):
        lm.score_choices(m, tok, "xya", ["bb"], max_len=2)
    assert [bytes(c) for c in m.calls] == [b"ab"]
    with pytest.raises(ValueError, match="3 tokens; expected at most the model's context of 2"):
        lm.score_choices(m, tok, "a", ["bbb"], max_len=2)
    with warnings.catch_warnings():  # nothing cut, no warning
        warnings.simplefilter("error")
        lm.score_choices(m, tok, "xyz", ["bb"], max_len=4)


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


def test_truncation_warning_counts_the_cut():
    items = [{"context": "aaaa", "choices": ["b", "c"], "gold": 0}]
    with pytest.warns(UserWarning) as rec:
        lm.choice_lls(Table(), ByteTokenizer(), items, max_len=2)
    assert len(rec) == 1
    assert str(rec[0].message) == (
        "cut 4 context tokens from the left of 2 of 2 context + choice pairs to fit the "
        "model's context of 2 tokens "
        "(lm-eval's rule: the model reads (context + choice)[-(L+1):][:-1])"
    )


def test_max_len_one_is_valid_and_bad_max_len_messages():
    got = lm.choice_lls(Table(), ByteTokenizer(), ITEMS[:1], max_len=2)[0]
    np.testing.assert_allclose(got, SPEC_S3_LL, rtol=1e-12)
    items = [{"context": "a", "choices": ["b", "c"], "gold": 0}]
    got = lm.choice_lls(Table(), ByteTokenizer(), items, max_len=1)[0]
    np.testing.assert_allclose(got, [LN(0.4), LN(0.45)], rtol=1e-12)
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError) as e:
            lm.choice_lls(Table(), ByteTokenizer(), items, max_len=bad)
        assert (
            str(e.value) == f"max_len: expected an int >= 1 (tokens the model reads), got {bad!r}"
        )


def test_model_ctx_len_reads_each_config_key():
    """The one context lookup (tinyllm.windows.model_context): a config field under 2 tokens
    holds no window and is skipped, as the CLI and the zoo skip it."""
    ns = types.SimpleNamespace
    assert lm.model_ctx_len(ns(cfg=ns(block_size=1))) == 1
    assert lm.model_ctx_len(ns(config=ns(n_positions=1))) is None
    assert lm.model_ctx_len(ns(config=ns(n_positions=1, n_ctx=12))) == 12
    assert lm.model_ctx_len(ns(config=ns(max_position_embeddings=True, n_ctx=6))) == 6
    assert lm.model_ctx_len(ns(config=ns(max_position_embeddings=7))) == 7
    assert lm.model_ctx_len(ns(config=ns(n_ctx=5))) == 5
    assert lm.model_ctx_len(ns(config=ns(n_positions=3, max_position_embeddings=9))) == 3
    assert lm.model_ctx_len(ns(config=ns(max_position_embeddings=4, n_ctx=8))) == 4


# ----------------------------------------------------------------------- arguments and token ids


def test_empty_context_or_choice_is_refused():
    m, tok = TableModel(spec_choice_table()), ByteTokenizer()
    with pytest.raises(ValueError, match="at least one token"):
        lm.score_choices(m, tok, "", ["b", "c"])
    with pytest.raises(ValueError, match="non-empty"):
        lm.score_choices(m, tok, "a", ["b", ""])


def test_choice_argument_messages():
    tok, m = ByteTokenizer(), Table()
    with pytest.raises(TypeError) as e:
        lm.score_choices(m, tok, 5, ["a", "b"])
    assert str(e.value) == "context: expected a str, got int"
    for bad in ([], "ab", 5):
        with pytest.raises(ValueError) as e:
            lm.score_choices(m, tok, "a", bad)
        assert str(e.value) == f"choices: expected a non-empty list of strings, got {bad!r}"


def test_choice_lls_argument_messages():
    with pytest.raises(ValueError) as e:
        lm.choice_lls(Table(), ByteTokenizer(), ITEMS, target_delimiter=5)
    assert str(e.value) == "target_delimiter: expected a string (or absent), got 5"
    with pytest.raises(ValueError) as e:
        lm.choice_lls(Table(), ByteTokenizer(), ITEMS, token_budget=0)
    assert str(e.value) == "token_budget: expected an int >= 1, got 0"


def test_ids_outside_the_vocabulary_are_a_clear_error():
    model = our_gpt()  # vocab 256
    items = [{"context": "1 2", "choices": ["3", "300"], "gold": 0}]
    with pytest.raises(
        ValueError, match=r"expected token ids in \[0, 256\).*got ids in \[1, 300\]"
    ):
        lm.choice_lls(model, IdTok(), items)


@pytest.mark.parametrize("name", ["gpt", "hf"])
def test_an_id_equal_to_the_vocabulary_size_is_refused_by_name(name):
    """Our GPT's cfg.vocab_size and a Hugging Face config's vocab_size bound the ids: an id of
    exactly V in a context is the documented error, before any forward pass."""
    model = MODELS[name]()
    V = vocab_of(model)
    items = [ids_item([1, V], [[2], [3]])]
    with pytest.raises(ValueError) as e:
        lm.choice_lls(model, IdTok(), items)
    assert str(e.value) == (
        f"expected token ids in [0, {V}) (the model's vocabulary), got ids in [1, {V}]"
    )


def test_a_negative_id_for_a_model_of_unknown_vocabulary_names_v():
    items = [ids_item([97, -1], [[98], [99]])]
    with pytest.raises(ValueError) as e:
        lm.choice_lls(TableModel(spec_choice_table()), IdTok(), items)
    assert str(e.value) == (
        "expected token ids in [0, V) (the model's vocabulary), got ids in [-1, 99]"
    )


# ------------------------------------------------------------- progress(done items, total items)


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
        ids_item([5, 6], [[7, 8], [9]]),
        ids_item([5, 6, 7, 8], [[9, 10, 11], [12], [13, 14]]),
        ids_item([3], [[4, 4], [5]]),
        ids_item([5, 6], [[1, 2, 3], [4]]),
    ]
    calls = _progress(model, items, tok=IdTok(), token_budget=1)
    assert calls == [(1, 4), (3, 4), (4, 4)]
    assert lm.cache_verdicts(model) == {"gpt": True}


# ----------------------------------------------------------------------- properties (hypothesis)


def _gpt(seed: int = 0):

    torch.manual_seed(seed)
    m = gpt.Model(gpt.Config(vocab_size=V, block_size=12, n_layer=1, n_head=2, n_embd=16))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m.eval()


GPT = _gpt()


@st.composite
def mc_items(draw):
    n = draw(st.integers(1, 5))
    ids = st.lists(st.integers(0, V - 1), min_size=1, max_size=14)
    items = []
    for _ in range(n):
        ctx = draw(ids)
        k = draw(st.integers(1, 4))
        choices = [draw(st.lists(st.integers(0, V - 1), min_size=1, max_size=6)) for _ in range(k)]
        items.append((ctx, choices))
    return items


def _oracle(model, ctx: list[int], cont: list[int], L: int) -> float:
    fed = (ctx + cont)[-(L + 1) :][:-1]
    with torch.inference_mode():
        lp = torch.log_softmax(model(torch.tensor([fed]))[0][0].double(), dim=-1)
    pos = torch.arange(len(fed) - len(cont), len(fed))
    return float(lp[pos, torch.tensor(cont)].sum())


@settings(max_examples=40, deadline=None)
@given(mc_items(), st.integers(1, 200), st.integers(6, 12))
def test_choice_lls_equal_lm_evals_rule_for_any_items_budget_and_length(items, budget, L):
    """Any contexts (1-14 tokens), choices (1-6 tokens), token budget and context length L:
    the cached, packed, budget-batched scores equal one plain forward of lm-eval's
    ``(ctx + cont)[-(L+1):][:-1]`` per choice."""
    data = [
        {"context": " ".join(map(str, c)), "choices": [" ".join(map(str, x)) for x in ch]}
        for c, ch in items
    ]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # truncation warnings are expected here
        got = lm.choice_lls(GPT, IdTok(), data, max_len=L, token_budget=budget)
    for (ctx, choices), g in zip(items, got, strict=True):
        want = [_oracle(GPT, ctx, c, L) for c in choices]
        np.testing.assert_allclose(g, want, rtol=0, atol=1e-4)
    assert lm.cache_verdicts(GPT) == {"gpt": True}  # the cached path ran (its probe agreed)
