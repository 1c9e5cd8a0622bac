"""tinyllm/eval/lm/scoring.py: the requests lm-eval's rules make (make_requests) at their edges.

Left truncation to a context of L tokens keeps ``(ctx + cont)[-(L+1):][:-1]``: the tokens cut
and the requests cut are counted exactly (the truncation warning reports them); a choice of
exactly L tokens keeps one context token. Each item's own ``target_delimiter`` is scored when no
delimiter is given; errors name the item by its task-file line (``_where``); the checks of
context, choices and delimiter refuse with one line each; a Hugging Face tokenizer that adds a
BOS is asked for none. Oracles: the byte tokenizer, so every count is a count of characters.
"""

from __future__ import annotations

import numpy as np
import pytest

from tinyllm.eval.lm import scoring
from tinyllm.tokens import ByteTokenizer

TOK = ByteTokenizer()
CTX = "abcdefghij"  # 10 tokens


def b(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def shapes(reqs) -> list[tuple[int, list[int], list[int]]]:
    return [(r.item, r.ctx.tolist(), r.cont.tolist()) for r in reqs]


def item(context: str = CTX, choices=("xyz",), **kw) -> dict:
    return {"context": context, "choices": list(choices), **kw}


def test_without_a_context_limit_nothing_is_cut():
    reqs, cut_tokens, cut_reqs = scoring.make_requests(TOK, [item(), item("k")], "", None)
    assert (cut_tokens, cut_reqs) == (0, 0)
    assert shapes(reqs) == [(0, b(CTX), b("xyz")), (1, b("k"), b("xyz"))]


@pytest.mark.parametrize(
    ("max_len", "ctx", "counts"),
    [
        (12, CTX, (0, 0)),  # 10 + 3 = L + 1: the model reads all but the last token, no cut
        (11, CTX[1:], (1, 1)),  # one over: the first context token goes
        (8, CTX[4:], (4, 1)),
        (3, CTX[-1:], (9, 1)),  # a choice of exactly L tokens keeps one context token
    ],
)
def test_left_truncation_keeps_the_last_l_plus_one_tokens(max_len, ctx, counts):
    reqs, cut_tokens, cut_reqs = scoring.make_requests(TOK, [item()], "", max_len)
    assert shapes(reqs) == [(0, b(ctx), b("xyz"))]
    assert (cut_tokens, cut_reqs) == counts
    fed = np.concatenate([reqs[0].ctx, reqs[0].cont])
    assert fed.tolist() == b(CTX + "xyz")[-(max_len + 1) :]


def test_the_cuts_of_every_request_are_summed():
    # L = 8: "xyz" cuts 10 + 3 - 9 = 4 context tokens, "x" cuts 2; the second item none
    items = [item(choices=["xyz", "x"]), item("ab", choices=["x"])]
    reqs, cut_tokens, cut_reqs = scoring.make_requests(TOK, items, "", 8)
    assert shapes(reqs) == [
        (0, b(CTX[4:]), b("xyz")),
        (0, b(CTX[2:]), b("x")),
        (1, b("ab"), b("x")),
    ]
    assert (cut_tokens, cut_reqs) == (6, 2)


def test_a_choice_longer_than_the_context_limit_is_refused_naming_the_item():
    with pytest.raises(ValueError) as e:
        scoring.make_requests(TOK, [item(choices=["x", "xyz"], _where="tasks/t.jsonl:3")], "", 2)
    assert str(e.value) == (
        "tasks/t.jsonl:3: choices[1] is 3 tokens; expected at most the model's context of 2 "
        "tokens (left truncation keeps the whole choice and at least one context token, or "
        "nothing can be scored)"
    )


def test_each_items_own_delimiter_is_scored_when_none_is_given():
    items = [item("a", ["b"], target_delimiter=" "), item("a", ["b"])]
    reqs, _, _ = scoring.make_requests(TOK, items, None, None)
    # item 0: " b" scored after "a"; item 1 (no delimiter): context and choice encoded apart
    assert shapes(reqs) == [(0, b("a"), b(" b")), (1, b("a"), b("b"))]
    # a delimiter given for the run replaces every item's own
    reqs, _, _ = scoring.make_requests(TOK, items, "", None)
    assert shapes(reqs) == [(0, b("a"), b("b")), (1, b("a"), b("b"))]


def test_an_empty_context_is_refused_naming_the_task_line_or_the_item_number():
    with pytest.raises(ValueError) as e:
        scoring.make_requests(TOK, [item("", _where="tasks/t.jsonl:7")], "", None)
    assert str(e.value).startswith("tasks/t.jsonl:7: context '': expected at least one token")
    with pytest.raises(ValueError) as e:
        scoring.make_requests(TOK, [item(), item("")], "", None)
    assert str(e.value).startswith("item 1: context '': expected at least one token")


@pytest.mark.parametrize(
    ("context", "choices", "error", "message"),
    [
        (5, ["a"], TypeError, "context: expected a str, got int"),
        (None, ["a"], TypeError, "context: expected a str, got NoneType"),
        ("c", "ab", ValueError, "choices: expected a non-empty list of strings, got 'ab'"),
        ("c", [], ValueError, "choices: expected a non-empty list of strings, got []"),
        ("c", {"a"}, ValueError, "choices: expected a non-empty list of strings, got {'a'}"),
        ("c", ["a", ""], ValueError, "choices[1]: expected a non-empty string, got ''"),
        ("c", ["a", 3], ValueError, "choices[1]: expected a non-empty string, got 3"),
    ],
)
def test_bad_contexts_and_choices_are_refused_with_one_line(context, choices, error, message):
    with pytest.raises(error) as e:
        scoring.check_choices(context, choices)
    assert str(e.value) == message


def test_check_choices_returns_the_choices_as_a_list():
    assert scoring.check_choices("c", ("a", "b")) == ["a", "b"]


def test_a_delimiter_that_is_not_a_string_is_refused_as_target_delimiter():
    assert scoring.check_delimiter(None) is None and scoring.check_delimiter(" ") == " "
    with pytest.raises(ValueError) as e:
        scoring.check_delimiter(5)
    assert str(e.value) == "target_delimiter: expected a string (or absent), got 5"
    with pytest.raises(ValueError) as e:
        scoring.check_delimiter(5, "t.jsonl:2: 'target_delimiter'")
    assert str(e.value) == "t.jsonl:2: 'target_delimiter': expected a string (or absent), got 5"


def test_a_hugging_face_tokenizer_that_adds_a_bos_is_asked_for_none():
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {"<s>": 0, "a": 1, "b": 2, "[UNK]": 3}
    t = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    t.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    t.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 0)]
    )
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=t, bos_token="<s>", unk_token="[UNK]"
    )
    assert tok.encode("a b") == [0, 1, 2]  # the tokenizer's own default adds the BOS
    got = scoring.encode(tok, "a b")
    assert got.dtype == np.int64 and got.tolist() == [1, 2]
