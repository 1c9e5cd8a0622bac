"""tinyllm/eval/lm/ppl.py: token_nlls, summarize_nlls and eval_ppl against docs/definitions.md, strided perplexity, intervals.

Oracles: the definitions' worked examples (models built so that each NLL reveals its context), an
independent per-window computation from transformers' own GPT2LMHeadModel logits (random weights,
no download: lm_helpers.reference_nlls), scipy's Student t interval and tinyllm.stats on the same
numbers; hypothesis over any windows for the closed form of the revealing model's NLLs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from lm_helpers import (
    Revealing,
    RevealingModel,
    reference_nlls,
    revealing_logits,
    tiny_gpt2,
    window_settings,
)
from scipy import stats as sps
from torch import nn

from tinyllm import stats
from tinyllm.eval import lm
from tinyllm.tokens import read_tokens, write_tokens

LN = math.log

SPEC_S2 = [LN(2), LN(3), LN(4), LN(3), LN(4)]  # docs/definitions.md, strided perplexity, stride 2
V = 7  # vocabulary of the revealing model in the property test


class HalfRevealing:
    """The revealing model with bfloat16 logits (a half-precision model)."""

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return revealing_logits(ids).to(torch.bfloat16)


# --------------------------------------------------------------------- docs/definitions.md, strided perplexity example


@pytest.mark.parametrize(
    "stride, windows, expected",
    [
        (2, [[0, 1, 2, 3], [2, 3, 4, 5]], [2, 3, 4, 3, 4]),
        (3, [[0, 1, 2, 3], [3, 4, 5]], [2, 3, 4, 2, 3]),
    ],
)
def test_spec_example_windows_and_nlls(stride, windows, expected):
    m = RevealingModel()
    nlls = lm.token_nlls(m, np.arange(6), ctx_len=4, stride=stride, batch_size=1)
    assert m.calls == windows
    np.testing.assert_allclose(nlls, np.log(expected), rtol=0, atol=1e-12)


def test_spec_example_ppl_is_288_to_the_fifth():
    res = lm.eval_ppl(RevealingModel(), np.arange(6), ctx_len=4, stride=2)
    assert res["n_tokens"] == 5
    assert res["ppl"]["value"] == pytest.approx(288 ** (1 / 5), rel=1e-12)
    assert res["ppl"]["value"] == pytest.approx(3.1037, abs=1e-4)
    mean = (math.log(2) + 2 * math.log(3) + 2 * math.log(4)) / 5
    assert res["nll"]["value"] == pytest.approx(mean, rel=1e-12)


@pytest.mark.parametrize("stride", [4, 5, 0, -1])
def test_bad_strides_are_refused(stride):
    with pytest.raises(ValueError, match="stride"):
        lm.token_nlls(RevealingModel(), np.arange(10), ctx_len=4, stride=stride)
    with pytest.raises(ValueError, match="stride"):
        lm.eval_ppl(RevealingModel(), np.arange(10), ctx_len=4, stride=stride)


@pytest.mark.parametrize("n", [0, 1])
def test_fewer_than_two_tokens_are_refused(n):
    with pytest.raises(ValueError, match="at least 2 tokens"):
        lm.token_nlls(RevealingModel(), np.arange(n), ctx_len=4, stride=2)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="1-d"):
        lm.token_nlls(RevealingModel(), np.zeros((2, 5), dtype=np.int64), 4, 2)
    with pytest.raises(ValueError, match="integer"):
        lm.token_nlls(RevealingModel(), np.arange(6.0), 4, 2)
    with pytest.raises(TypeError, match="ctx_len"):
        lm.token_nlls(RevealingModel(), np.arange(6), 4.0, 2)
    with pytest.raises(ValueError, match="batch_size"):
        lm.token_nlls(RevealingModel(), np.arange(6), 4, 2, batch_size=0)
    with pytest.raises(ValueError, match="vocabulary size 11"):
        lm.token_nlls(RevealingModel(V=11), np.array([1, 2, 11]), 4, 2)


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


def test_negative_token_id_message():
    with pytest.raises(ValueError) as e:
        lm.token_nlls(Revealing(), np.array([0, -1, 2]), 2, 1)
    assert str(e.value) == "ids: expected non-negative token ids, got -1"


def test_spec_example_is_the_same_in_small_head_blocks():
    # two rows of [rows, V] per block of head output: the blocks must line up with the targets
    got = lm.token_nlls(Revealing(), np.arange(6), 4, 2, max_logits=2 * 11)
    np.testing.assert_allclose(got, SPEC_S2, rtol=1e-12)
    got = lm.token_nlls(
        Revealing(), np.arange(10), 4, 1, max_logits=2 * 11
    )  # later windows: 3 tokens of context
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


class DropRevealing(nn.Module):
    """The revealing model behind a dropout layer: only eval mode gives the definitions' numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.drop(revealing_logits(ids))


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


def test_torch_ids_and_bad_batch_sizes():
    got = lm.token_nlls(Revealing(), torch.arange(6), 4, 2)
    np.testing.assert_allclose(got, SPEC_S2, rtol=1e-12)
    for bad in (True, 1.5):
        with pytest.raises(ValueError) as e:
            lm.eval_ppl(Revealing(), np.arange(6), 4, 2, batch_size=bad)
        assert str(e.value) == f"batch_size: expected an int >= 1, got {bad!r}"


@settings(max_examples=60, deadline=None)
@given(window_settings(max_n=160, max_c=40), st.integers(1, 6))
def test_token_nlls_reveal_the_context_of_each_token(ncs, batch_size):
    n, C, s = ncs
    ids = np.arange(n) % V
    m = RevealingModel(V)
    nlls = lm.token_nlls(m, ids, C, s, batch_size=batch_size)
    assert nlls.shape == (n - 1,)
    # closed form: token t is scored by window k(t) = 0 if t < C else floor((t - C) / s) + 1,
    # at position j = t - 1 - k*s, so its NLL is ln(j + 2) = ln(t - k*s + 1)
    t = np.arange(1, n)
    k = np.where(t < C, 0, (t - C) // s + 1)
    np.testing.assert_allclose(nlls, np.log(t - k * s + 1.0), rtol=0, atol=1e-12)
    # the model saw exactly the windows, in order, each once
    assert m.calls == [list(ids[a:e]) for a, e, _ in lm.windows(n, C, s)]
    assert np.all(nlls[C - 1 :] >= math.log(C - s + 1) - 1e-12)  # >= C - s tokens of context


# -------------------------------------------------------------------- golden: transformers GPT-2


@pytest.mark.parametrize("ctx_len, stride", [(16, 8), (16, 15), (16, 1), (64, 20)])
def test_token_nlls_equal_hf_logits_per_window(gpt2, gpt2_ids, ctx_len, stride):
    ours = lm.token_nlls(gpt2, gpt2_ids, ctx_len, stride)
    ref = reference_nlls(gpt2, gpt2_ids, ctx_len, stride)
    assert not np.isnan(ref).any()
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-5)


# ----------------------------------------------------------- batches, dropout, memmaps, progress


def test_results_do_not_depend_on_batch_size(gpt2):
    ids = np.random.default_rng(9).integers(0, 97, size=301)  # last window is shorter
    one = lm.token_nlls(gpt2, ids, 32, 8, batch_size=1)
    eight = lm.token_nlls(gpt2, ids, 32, 8, batch_size=8)
    np.testing.assert_allclose(one, eight, rtol=0, atol=1e-5)
    r1 = lm.eval_ppl(gpt2, ids, 32, 8, batch_size=1)
    r8 = lm.eval_ppl(gpt2, ids, 32, 8, batch_size=8)
    assert r1["nll"]["value"] == pytest.approx(r8["nll"]["value"], abs=1e-6)
    # exact with a float64 model
    m = RevealingModel()
    seq = np.arange(200) % 11
    np.testing.assert_array_equal(
        lm.token_nlls(m, seq, 16, 5, batch_size=1), lm.token_nlls(m, seq, 16, 5, batch_size=8)
    )


def test_default_batch_follows_the_token_budget():
    """No batch_size: windows per pass = DEFAULT_TOKEN_BUDGET // ctx_len (the zoo GPT's ctx 32
    gets many windows per pass, a context above the budget one); the NLLs equal batch 1's;
    batch_size= overrides."""
    m = RevealingModel()
    seq = np.arange(4000) % 11
    one = lm.token_nlls(m, seq, 32, 16, batch_size=1)
    m.calls.clear()
    sizes: list[int] = []
    orig = m.__call__

    class Counting:
        def __call__(self, ids):
            sizes.append(ids.shape[0])
            return orig(ids)

    got = lm.token_nlls(Counting(), seq, 32, 16)
    np.testing.assert_array_equal(got, one)
    assert max(sizes) == lm.DEFAULT_TOKEN_BUDGET // 32 == lm.default_batch_size(32)
    assert lm.default_batch_size(4096) == 1 and lm.default_batch_size(33, 64) == 1
    sizes.clear()
    lm.token_nlls(Counting(), seq, 32, 16, batch_size=3)
    assert max(sizes) == 3
    sizes.clear()
    lm.eval_ppl(Counting(), seq, 32, 16)
    assert max(sizes) == lm.default_batch_size(32)


def test_default_batch_size_is_the_budget_over_ctx_len():
    assert lm.default_batch_size(1) == 2048
    assert lm.default_batch_size(32) == 64
    assert lm.default_batch_size(1024) == 2


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


def test_dropout_is_off_while_scoring_and_the_training_flag_is_restored(gpt2_ids):
    m = tiny_gpt2(dropout=0.5)
    ref = lm.token_nlls(m, gpt2_ids, 16, 8)
    m.train()
    again = lm.token_nlls(m, gpt2_ids, 16, 8)
    assert m.training
    np.testing.assert_array_equal(ref, again)


def test_memmapped_token_file_gives_the_same_nlls(tmp_path, gpt2, gpt2_ids):
    path = write_tokens(tmp_path / "val.tok", gpt2_ids.astype(np.uint16), dtype="uint16")
    mm = read_tokens(path)
    assert isinstance(mm, np.memmap)
    np.testing.assert_array_equal(
        lm.token_nlls(gpt2, mm, 16, 8), lm.token_nlls(gpt2, gpt2_ids, 16, 8)
    )


def test_progress_counts_scored_tokens():
    seen = []
    lm.token_nlls(
        RevealingModel(), np.arange(50) % 11, 8, 3, progress=lambda d, t: seen.append((d, t))
    )
    assert seen[-1] == (49, 49)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


# -------------------------------------------------------- docs/definitions.md, intervals: ppl / bpb intervals


def test_eval_ppl_intervals_equal_the_stats_module(gpt2, gpt2_ids):
    nlls = lm.token_nlls(gpt2, gpt2_ids, 32, 12)
    ci = stats.mean_ci(nlls)
    N = len(nlls)
    for n_bytes, nb in ((0, N), (3 * N + 7, 3 * N + 7)):
        res = lm.eval_ppl(gpt2, gpt2_ids, 32, 12, n_bytes=n_bytes)
        assert res["n_tokens"] == N and res["n_bytes"] == nb
        for key, want in (("value", ci.value), ("lo", ci.lo), ("hi", ci.hi)):
            assert res["nll"][key] == pytest.approx(want, rel=1e-9)
            # perplexity's ends are exp of the NLL ends (not an interval in log space)
            assert res["ppl"][key] == pytest.approx(math.exp(want), rel=1e-9)
            # bits per byte: the NLL ends rescaled by N / (n_bytes ln 2)
            assert res["bpb"][key] == pytest.approx(want * N / (nb * math.log(2)), rel=1e-9)
        acc = stats.NLLAccumulator()
        acc.add(nlls)
        assert res["bpb"]["value"] == pytest.approx(acc.bpb(nb), rel=1e-12)
        assert res["sum_nll"] == pytest.approx(math.fsum(nlls), rel=1e-12)


def test_summarize_nlls_streams_chunks_like_one_array():
    x = np.random.default_rng(0).gamma(2.0, 1.0, size=1000)
    whole = lm.summarize_nlls(x, n_bytes=1234)
    chunked = lm.summarize_nlls((x[i : i + 77] for i in range(0, 1000, 77)), n_bytes=1234)
    for k in ("nll", "ppl", "bpb"):
        for e in ("value", "lo", "hi"):
            assert chunked[k][e] == pytest.approx(whole[k][e], rel=1e-12)


def test_equal_nlls_give_bpb_8_with_zero_width():
    res = lm.summarize_nlls(np.full(1000, math.log(256)))
    assert res["bpb"] == {"value": 8.0, "lo": 8.0, "hi": 8.0}
    assert res["ppl"]["lo"] == res["ppl"]["hi"] == pytest.approx(256.0, rel=1e-12)


def test_summarize_nlls_refuses_what_has_no_interval():
    with pytest.raises(ValueError, match="at least 2"):
        lm.summarize_nlls(np.array([0.5]))
    with pytest.raises(ValueError, match="n_bytes"):
        lm.summarize_nlls(np.array([0.5, 0.6]), n_bytes=-1)
    with pytest.raises(ValueError, match="finite"):
        lm.summarize_nlls(np.array([0.5, np.inf]))


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
