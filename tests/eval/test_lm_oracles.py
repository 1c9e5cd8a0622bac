"""Oracle tests for tinyllm/eval/lm.py, written from its surviving mutants (docs/mutation.md).

Each test checks a value a user reads: SPEC.md's worked examples (sections 2 and 3), scipy's
Student t interval, tinyllm.stats called with the documented defaults, or the exact error
message. None checks a timing or an internal detail of the implementation.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch
from scipy import stats as sps
from test_lm import TableModel, spec_choice_table  # same folder: pytest puts it on sys.path
from torch import nn

from tinyllm import stats
from tinyllm.eval import lm
from tinyllm.models import gpt
from tinyllm.tokens import ByteTokenizer

LN = math.log
SPEC_S2 = [LN(2), LN(3), LN(4), LN(3), LN(4)]  # SPEC.md section 2, stride 2
SPEC_S3_LL = [LN(0.4) + LN(0.9), LN(0.45)]  # SPEC.md section 3: "bb", "c"


# ----------------------------------------------------------------------------------- models


def revealing_logits(ids: torch.Tensor, V: int = 11) -> torch.Tensor:
    """True next token (id + 1) % V gets probability 1/(j+2) at window position j (SPEC 2)."""
    B, T = ids.shape
    pt = 1.0 / (torch.arange(T, dtype=torch.float64) + 2.0)
    p = ((1.0 - pt) / (V - 1))[None, :, None].expand(B, T, V).clone()
    p.scatter_(2, ((ids + 1) % V)[..., None], pt[None, :, None].expand(B, T, 1).clone())
    return p.log()


class Revealing:
    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return revealing_logits(ids)


class HalfRevealing:
    """The same model with bfloat16 logits (a half-precision model)."""

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return revealing_logits(ids).to(torch.bfloat16)


class DropRevealing(nn.Module):
    """The revealing model behind a dropout layer: only eval mode gives SPEC's numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.drop(revealing_logits(ids))


class Table(TableModel):
    """test_lm's table model on SPEC.md section 3's bigram."""

    def __init__(self) -> None:
        super().__init__(spec_choice_table())


class OneHotBigram:
    """A bigram written with F.one_hot, which needs int64 ids (as SPEC.md section 1 says)."""

    def __init__(self, V: int = 8) -> None:
        g = torch.Generator().manual_seed(0)
        self.V, self.W = V, torch.randn(V, V, generator=g, dtype=torch.float64)

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(ids, self.V).double() @ self.W


class HFStyleTok:
    """A Hugging Face-like tokenizer: bytes, with a BOS (255) unless add_special_tokens=False."""

    all_special_ids = [255]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return ([255] if add_special_tokens else []) + list(text.encode("utf-8"))


class Uint8Tok:
    """Bytes as a uint8 array (what np.frombuffer gives)."""

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


class RowTok:
    """Bytes as a [1, T] array (as return_tensors="np" would give)."""

    def encode(self, text: str) -> np.ndarray:
        return np.asarray([list(text.encode("utf-8"))], dtype=np.int64)


def _result(per_item) -> lm.Result:
    x = np.asarray(per_item, dtype=np.float64)
    return lm.Result(float(x.mean()), 0.0, 1.0, x.size, x)


def _write(path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


ITEMS = [
    {"context": "a", "choices": ["bb", "c"], "gold": 0},
    {"context": "a", "choices": ["c", "bb"], "gold": 0},
]


# ------------------------------------------------------------------ window arguments (SPEC 2)


def test_window_argument_errors_name_the_argument_and_its_type():
    with pytest.raises(TypeError) as e:
        lm.windows(6, 4.0, 2)
    assert str(e.value) == "ctx_len: expected an int, got float 4.0"
    with pytest.raises(TypeError) as e:
        lm.windows(6, 4, 2.0)
    assert str(e.value) == "stride: expected an int, got float 2.0"
    with pytest.raises(ValueError) as e:
        lm.windows(6, 1, 1)
    assert str(e.value) == (
        "ctx_len: expected >= 2 (a window must hold a token and its context), got 1"
    )


@pytest.mark.parametrize("stride", [0, 4, 5])
def test_bad_stride_message_says_why_and_what_is_valid(stride):
    with pytest.raises(ValueError) as e:
        lm.token_nlls(Revealing(), np.arange(6), 4, stride)
    assert str(e.value) == (
        f"stride: expected 1 <= stride < ctx_len = 4, got {stride}. "
        "With stride >= ctx_len the first token of each window is predicted from nothing "
        "inside its own window (disjoint windows); stride = ctx_len - 1 is the cheapest "
        "valid stride, stride = 1 the fairest"
    )


def test_one_token_message():
    with pytest.raises(ValueError) as e:
        lm.eval_ppl(Revealing(), np.arange(1), 4, 2)
    assert str(e.value) == (
        "expected at least 2 tokens (token 0 has no context and is never scored), got 1"
    )


# ------------------------------------------------------------ token NLLs and perplexity (SPEC 2)


def test_negative_token_id_message():
    with pytest.raises(ValueError) as e:
        lm.token_nlls(Revealing(), np.array([0, -1, 2]), 2, 1)
    assert str(e.value) == "ids: expected non-negative token ids, got -1"


def test_spec_example_is_the_same_in_small_head_blocks(monkeypatch):
    # two rows of [rows, V] per block of head output: the blocks must line up with the targets
    monkeypatch.setattr(lm, "_MAX_LOGITS", 2 * 11)
    got = lm.token_nlls(Revealing(), np.arange(6), 4, 2)
    np.testing.assert_allclose(got, SPEC_S2, rtol=1e-12)
    got = lm.token_nlls(Revealing(), np.arange(10), 4, 1)  # later windows: 3 tokens of context
    np.testing.assert_allclose(got, [LN(2), LN(3)] + [LN(4)] * 7, rtol=1e-12)


def test_half_precision_logits_are_scored_in_fp32():
    ids = np.arange(6)
    got = lm.token_nlls(HalfRevealing(), ids, 4, 2)
    # independent reference: each window once, its bfloat16 logits read in float32
    want = []
    for a, e, first in [(0, 4, 1), (2, 6, 4)]:
        x = torch.as_tensor(ids[a:e])[None]
        lp = torch.log_softmax(HalfRevealing()(x)[0].float(), dim=-1)
        want += [-float(lp[t - 1 - a, int(ids[t])]) for t in range(first, e)]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, SPEC_S2, atol=0.05)  # bfloat16 rounding of ln p


def test_dropout_is_off_in_every_entry_point_and_the_flag_restored():
    torch.manual_seed(0)
    m = DropRevealing().train()
    np.testing.assert_allclose(lm.token_nlls(m, np.arange(6), 4, 2), SPEC_S2, rtol=1e-12)
    assert m.training
    r = lm.eval_ppl(m, np.arange(6), 4, 2)
    assert r["ppl"]["value"] == pytest.approx(288 ** (1 / 5), rel=1e-12)
    assert m.training
    lp = lm.log_probs(m, np.arange(4))
    want = torch.log_softmax(revealing_logits(torch.arange(4)[None])[0].float(), dim=-1)
    torch.testing.assert_close(lp, want)
    assert m.training


def test_log_probs_of_one_token_and_of_none():
    class Zeros:
        def __call__(self, ids):
            return torch.zeros(*ids.shape, 5)

    lp = lm.log_probs(Zeros(), [3])
    assert lp.shape == (1, 5)
    torch.testing.assert_close(lp, torch.full((1, 5), -math.log(5)))
    with pytest.raises(ValueError) as e:
        lm.log_probs(Zeros(), np.array([], dtype=np.int64))
    assert str(e.value) == "ids: expected at least 1 token, got 0"


def test_log_probs_feeds_int64_whatever_the_id_dtype():
    m = OneHotBigram()
    ids = np.array([1, 2, 3, 7], dtype=np.uint8)  # bytes read from a file
    want = torch.log_softmax(m.W[torch.tensor([1, 2, 3, 7])].float(), dim=-1)
    torch.testing.assert_close(lm.log_probs(m, ids), want)


def test_eval_ppl_batch_size_is_checked_and_progress_counts_tokens():
    for f in (lm.eval_ppl, lm.token_nlls):
        with pytest.raises(ValueError) as e:
            f(Revealing(), np.arange(6), 4, 2, batch_size=0)
        assert str(e.value) == "batch_size: expected an int >= 1, got 0"
    calls = []
    r = lm.eval_ppl(
        Revealing(), np.arange(6), 4, 2, batch_size=1, progress=lambda *a: calls.append(a)
    )
    assert calls == [(3, 5), (5, 5)]
    assert r["n_tokens"] == 5


# --------------------------------------------------------------------- summaries (SPEC 2, 4)


def test_two_nlls_give_the_student_t_interval():
    x = [1.0, 2.0]
    r = lm.summarize_nlls(x)
    hw = sps.t.ppf(0.975, 1) * np.std(x, ddof=1) / math.sqrt(2)  # 12.706 * 0.7071 / 1.4142
    assert r["n_tokens"] == 2
    assert r["nll"]["value"] == pytest.approx(1.5, rel=1e-12)
    assert r["nll"]["lo"] == pytest.approx(1.5 - hw, rel=1e-9)
    assert r["nll"]["hi"] == pytest.approx(1.5 + hw, rel=1e-9)
    assert r["ppl"]["hi"] == pytest.approx(math.exp(1.5 + hw), rel=1e-9)


def test_chunks_of_one_and_of_none_are_counted():
    chunks = [np.array([LN(2)]), np.array([]), np.array([LN(3), LN(4)]), [LN(3)], [LN(4)]]
    r = lm.summarize_nlls(iter(chunks))
    want = lm.summarize_nlls(SPEC_S2)
    assert r["n_tokens"] == 5
    assert r["ppl"]["value"] == pytest.approx(288 ** (1 / 5), rel=1e-12)
    assert r["nll"]["lo"] == pytest.approx(want["nll"]["lo"], rel=1e-12)


def test_a_torch_tensor_of_nlls_is_summarized():
    r = lm.summarize_nlls(torch.tensor(SPEC_S2, dtype=torch.float64))
    assert r["ppl"]["value"] == pytest.approx(288 ** (1 / 5), rel=1e-12)
    assert r["sum_nll"] == pytest.approx(LN(288), rel=1e-12)


def test_equal_nlls_sum_and_bpb():
    r = lm.summarize_nlls([LN(256)] * 4)
    assert r["sum_nll"] == pytest.approx(4 * LN(256), rel=1e-15)
    assert r["bpb"] == {"value": 8.0, "lo": 8.0, "hi": 8.0}
    r = lm.summarize_nlls([LN(256)] * 4, n_bytes=8)  # 4 tokens of 2 bytes: 4 bits per byte
    assert r["bpb"]["value"] == pytest.approx(4.0, rel=1e-15)


@pytest.mark.parametrize("bad", [True, 1.5, -1])
def test_bad_n_bytes_is_refused(bad):
    with pytest.raises(ValueError) as e:
        lm.summarize_nlls(SPEC_S2, n_bytes=bad)
    assert str(e.value) == f"n_bytes: expected an int >= 0 (0: one token per byte), got {bad!r}"


def test_two_d_nlls_message():
    with pytest.raises(ValueError) as e:
        lm.summarize_nlls(np.ones((2, 2)))
    assert str(e.value) == "nlls: expected a 1-d array of NLLs, got shape (2, 2)"


# ---------------------------------------------------------------- multiple choice (SPEC 3)


def test_score_choices_normalizes_by_default():
    got = lm.score_choices(Table(), ByteTokenizer(), "a", ["bb", "c"])
    np.testing.assert_allclose(got, [SPEC_S3_LL[0] / 2, SPEC_S3_LL[1]], rtol=1e-12)


def test_a_hf_tokenizer_is_asked_for_no_special_tokens():
    got = lm.score_choices(Table(), HFStyleTok(), "a", ["bb", "c"], normalize=False)
    np.testing.assert_allclose(got, SPEC_S3_LL, rtol=1e-12)


def test_a_tokenizer_returning_one_row_is_flattened():
    got = lm.score_choices(Table(), RowTok(), "a", ["bb", "c"], normalize=False)
    np.testing.assert_allclose(got, SPEC_S3_LL, rtol=1e-12)


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


def test_choice_argument_messages():
    tok, m = ByteTokenizer(), Table()
    with pytest.raises(TypeError) as e:
        lm.score_choices(m, tok, 5, ["a", "b"])
    assert str(e.value) == "context: expected a str, got int"
    for bad in ([], "ab", 5):
        with pytest.raises(ValueError) as e:
            lm.score_choices(m, tok, "a", bad)
        assert str(e.value) == f"choices: expected a non-empty list of strings, got {bad!r}"


def test_item_predictions_metric_dtype_and_pairing():
    lls = [np.array(SPEC_S3_LL), np.array(SPEC_S3_LL[::-1])]
    acc = lm.item_predictions(lls, ITEMS, "acc")
    assert acc.dtype == np.int64
    assert acc.tolist() == [1, 0]
    assert lm.item_predictions(lls, ITEMS, "acc_norm").tolist() == [0, 1]
    with pytest.raises(ValueError) as e:
        lm.item_predictions(lls, ITEMS, "f1")
    assert str(e.value) == "metric: expected one of ['acc', 'acc_norm'], got 'f1'"
    with pytest.raises(ValueError):  # one item's LLs for two items: never silently paired
        lm.item_predictions(lls[:1], ITEMS, "acc")


# ---------------------------------------------------------------------- tasks (SPEC 3, 4)


def test_run_task_default_bootstrap_is_1000_draws_from_the_callers_rng():
    items = ITEMS * 3
    r = lm.run_task(Table(), ByteTokenizer(), items, "acc", np.random.default_rng(7))
    assert r.per_item.tolist() == [0.0, 1.0] * 3
    ci = stats.bootstrap_ci(r.per_item, np.random.default_rng(7), n_boot=1000)
    assert (r.value, r.lo, r.hi) == (ci.value, ci.lo, ci.hi)


def test_run_task_passes_progress_on():
    calls = []
    lm.run_task(
        Table(),
        ByteTokenizer(),
        ITEMS,
        "acc",
        np.random.default_rng(0),
        n_boot=10,
        progress=lambda *a: calls.append(a),
    )
    assert calls and calls[-1] == (2, 2)
    assert all(t == 2 for _, t in calls)


def test_run_task_argument_messages():
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError) as e:
        lm.run_task(Table(), ByteTokenizer(), ITEMS, "acc", 0)
    assert str(e.value) == "rng: expected a numpy.random.Generator, got int"
    with pytest.raises(ValueError) as e:
        lm.run_task(Table(), ByteTokenizer(), [], "acc", rng)
    assert str(e.value) == "task: expected at least one item, got none"


@pytest.mark.parametrize(
    "item, message",
    [
        ([1, 2], "task item 0: expected a JSON object, got list"),
        (
            {"context": "a", "choices": ["b", 5], "gold": 0},
            "task item 0: expected 'choices' to be a list of at least 2 non-empty strings, "
            "got ['b', 5]",
        ),
        (
            {"context": "a", "choices": ["b", ""], "gold": 0},
            "task item 0: expected 'choices' to be a list of at least 2 non-empty strings, "
            "got ['b', '']",
        ),
        (
            {"context": "a", "choices": ["b", "c"], "gold": 2},
            "task item 0: expected 'gold' to be an int index in [0, 1], got 2",
        ),
    ],
)
def test_bad_items_messages(item, message):
    with pytest.raises(ValueError) as e:
        lm.run_task(Table(), ByteTokenizer(), [item], "acc", np.random.default_rng(0))
    assert str(e.value) == message


def test_read_task_skips_blank_lines_and_keeps_reading(tmp_path):
    line = '{"context": "a", "choices": ["bb", "c"], "gold": 0}'
    p = _write(tmp_path / "t.jsonl", [line, "", "  ", line, line])
    assert len(lm.read_task(p)) == 3


def test_read_task_file_messages(tmp_path):
    p = tmp_path / "none.jsonl"
    with pytest.raises(ValueError) as e:
        lm.read_task(p)
    assert str(e.value) == f"{p}: task file not found"
    p = _write(tmp_path / "blank.jsonl", ["", " "])
    with pytest.raises(ValueError) as e:
        lm.read_task(p)
    assert str(e.value) == f"{p}: expected at least one task item, got an empty file"


def test_scoring_errors_name_the_task_file_line(tmp_path):
    p = _write(
        tmp_path / "t.jsonl",
        [
            '{"context": "a", "choices": ["b", "c"], "gold": 0}',
            '{"context": "a", "choices": ["bbb", "c"], "gold": 0}',
        ],
    )
    with pytest.raises(ValueError) as e:
        lm.run_task(Table(), ByteTokenizer(), p, "acc", np.random.default_rng(0), max_len=2)
    assert str(e.value) == (
        f"{p}:2: choices[0] is 3 tokens; expected at most the model's context of 2 tokens "
        "(left truncation keeps the whole choice and at least one context token, or nothing "
        "can be scored)"
    )


# ------------------------------------------------------------------------ compare (SPEC 5)


def test_compare_default_is_10000_sign_flips():
    a = _result([1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1])  # 2**16 > 10 000: sampled
    b = _result([0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1])
    got = lm.compare(a, b, rng=np.random.default_rng(3))
    want = stats.paired_permutation_test(
        a.per_item, b.per_item, n_perm=10_000, rng=np.random.default_rng(3)
    )
    assert got == want


def test_compare_names_the_argument_that_is_not_a_result():
    r = _result([1, 0])
    with pytest.raises(TypeError) as e:
        lm.compare([1, 0], r)
    assert str(e.value) == "a: expected a Result, got list"
    with pytest.raises(TypeError) as e:
        lm.compare(r, None)
    assert str(e.value) == "b: expected a Result, got NoneType"


class DropTable(nn.Module):
    """SPEC.md section 3's bigram behind a dropout layer."""

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


def test_choice_lls_argument_messages():
    with pytest.raises(ValueError) as e:
        lm.choice_lls(Table(), ByteTokenizer(), ITEMS, target_delimiter=5)
    assert str(e.value) == "target_delimiter: expected a string (or absent), got 5"
    with pytest.raises(ValueError) as e:
        lm.choice_lls(Table(), ByteTokenizer(), ITEMS, token_budget=0)
    assert str(e.value) == "token_budget: expected an int >= 1, got 0"


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


def test_an_items_own_delimiter_is_scored():
    # continuation d + c = "bb" and "bc": LL includes the delimiter's token (SPEC 3)
    items = [{"context": "a", "choices": ["b", "c"], "gold": 0, "target_delimiter": "b"}]
    got = lm.choice_lls(Table(), ByteTokenizer(), items)[0]
    np.testing.assert_allclose(got, [LN(0.4) + LN(0.9), LN(0.4) + LN(0.1 / 255)], rtol=1e-12)


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
    ns = types.SimpleNamespace
    assert lm.model_ctx_len(ns(cfg=ns(block_size=1))) == 1
    assert lm.model_ctx_len(ns(config=ns(n_positions=1))) == 1
    assert lm.model_ctx_len(ns(config=ns(max_position_embeddings=7))) == 7
    assert lm.model_ctx_len(ns(config=ns(n_ctx=5))) == 5
    assert lm.model_ctx_len(ns(config=ns(n_positions=3, max_position_embeddings=9))) == 3
    assert lm.model_ctx_len(ns(config=ns(max_position_embeddings=4, n_ctx=8))) == 4


def test_default_batch_size_is_the_budget_over_ctx_len():
    assert lm.default_batch_size(1) == 2048
    assert lm.default_batch_size(32) == 64
    assert lm.default_batch_size(1024) == 2


def test_bad_model_outputs_are_named():
    class Bad:
        def __init__(self, out):
            self.out = out

        def __call__(self, ids):
            return self.out(ids)

    with pytest.raises(TypeError) as e:
        lm.log_probs(Bad(lambda ids: {}), np.arange(3))
    assert str(e.value) == (
        "Bad: expected model(ids) to return logits [B, T, V], a tuple whose first item is the "
        "logits, or an object with .logits; got dict"
    )
    with pytest.raises(ValueError) as e:
        lm.log_probs(Bad(lambda ids: torch.zeros(ids.shape)), np.arange(3))
    assert str(e.value) == (
        "Bad: expected logits of shape [1, 3, V] for ids of shape [1, 3], got [1, 3]"
    )


def test_torch_ids_and_bad_batch_sizes():
    got = lm.token_nlls(Revealing(), torch.arange(6), 4, 2)
    np.testing.assert_allclose(got, SPEC_S2, rtol=1e-12)
    for bad in (True, 1.5):
        with pytest.raises(ValueError) as e:
            lm.eval_ppl(Revealing(), np.arange(6), 4, 2, batch_size=bad)
        assert str(e.value) == f"batch_size: expected an int >= 1, got {bad!r}"


# ----------------------------------------------- strided windows: grouping and head blocks


def reference_groups(n: int, ctx_len: int, stride: int, batch_size: int) -> list[list[tuple]]:
    """_window_groups as its docstring says it: maximal runs of consecutive windows of equal
    length that score equally many tokens, cut into pieces of at most batch_size."""
    out: list[list[tuple]] = []
    ws = lm.windows(n, ctx_len, stride)
    i = 0
    while i < len(ws):
        j = i + 1
        shape = (ws[i][1] - ws[i][0], ws[i][1] - ws[i][2])
        while j < len(ws) and (ws[j][1] - ws[j][0], ws[j][1] - ws[j][2]) == shape:
            j += 1
        out += [ws[k : min(k + batch_size, j)] for k in range(i, j, batch_size)]
        i = j
    return out


@pytest.mark.parametrize(
    "n, ctx_len, stride, batch_size",
    [(6, 4, 2, 8), (40, 8, 3, 4), (41, 8, 3, 64), (100, 16, 15, 1), (9, 9, 1, 3), (2, 2, 1, 5)],
)
def test_window_groups_are_the_maximal_runs_of_equal_windows(n, ctx_len, stride, batch_size):
    got = list(lm._window_groups(n, ctx_len, stride, batch_size))
    assert got == reference_groups(n, ctx_len, stride, batch_size)
    # SPEC 2's example by hand: the first window scores 3 tokens, the second 2: two groups
    if (n, ctx_len, stride) == (6, 4, 2):
        assert got == [[(0, 4, 1)], [(2, 6, 4)]]


def test_nll_blocks_ask_each_row_once_in_the_largest_blocks_within_the_bound(monkeypatch):
    """_nll_blocks' contract: row blocks of at most _MAX_LOGITS elements (the memory bound),
    each row's logits asked for once, as few head calls as the bound allows."""
    monkeypatch.setattr(lm, "_MAX_LOGITS", 64)
    rng = np.random.default_rng(0)
    for m, v in [(10, 5), (7, 40), (5, 64), (3, 100), (1, 7)]:
        z_all = torch.from_numpy(rng.normal(size=(m, v)))
        tgt = torch.from_numpy(rng.integers(0, v, m))
        calls: list[tuple[int, int]] = []

        def logits_of(lo, hi, z_all=z_all, calls=calls):
            calls.append((lo, hi))
            return z_all[lo:hi]

        got = lm._nll_blocks(logits_of, m, v, tgt)
        want = -torch.log_softmax(z_all, dim=-1)[torch.arange(m), tgt].numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        rows = max(1, 64 // v)  # the largest block within the bound, at least one row
        assert calls == [(lo, min(m, lo + rows)) for lo in range(0, m, rows)], (m, v)


def test_ids_errors_name_the_argument_and_a_memmap_stays_a_memmap(tmp_path):
    with pytest.raises(ValueError) as e:
        lm.log_probs(Revealing(), np.zeros((2, 3), dtype=np.int64))
    assert str(e.value) == "ids: expected a 1-d sequence of token ids, got shape (2, 3)"
    with pytest.raises(ValueError) as e:
        lm.token_nlls(Revealing(), np.array([0.5, 1.5, 2.5]), 4, 2)
    assert str(e.value) == "ids: expected integer token ids, got dtype float64"
    mm = np.memmap(tmp_path / "ids.bin", dtype=np.uint16, mode="w+", shape=(6,))
    mm[:] = np.arange(6)
    assert isinstance(lm._as_ids(mm), np.memmap)  # "a memmap stays a memmap: nothing is loaded"
