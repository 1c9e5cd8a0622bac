"""The instrument (tinyllm/eval/lm.py) against SPEC.md sections 1-5.

Oracles: the SPEC's worked examples (models built so that each NLL reveals its context), an
independent per-window computation from transformers' own GPT2LMHeadModel logits (random weights,
no download), and tinyllm.stats on the same numbers.
"""

from __future__ import annotations

import json
import math
import types
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from tinyllm import stats
from tinyllm.checkpoint import load_tensors, save_checkpoint
from tinyllm.cli import app
from tinyllm.eval import lm
from tinyllm.models import FAMILIES
from tinyllm.tokens import ByteTokenizer, read_tokens, write_tokens

transformers = pytest.importorskip("transformers")

# ----------------------------------------------------------------------------------- fixtures


class RevealingModel:
    """Gives the true next token probability 1/(j+2) at window position j (SPEC.md section 2).

    The sequence is ``0, 1, 2, ...`` modulo ``V``, so the true next token after id ``i`` is
    ``(i + 1) % V``; the rest of the mass is spread evenly. Records every window it is called on.
    """

    def __init__(self, V: int = 11) -> None:
        self.V = V
        self.calls: list[list[int]] = []

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        B, T = ids.shape
        self.calls.extend(row.tolist() for row in ids)
        pt = 1.0 / (torch.arange(T, dtype=torch.float64) + 2.0)  # [T]
        p = ((1.0 - pt) / (self.V - 1))[None, :, None].expand(B, T, self.V).clone()
        p.scatter_(2, ((ids + 1) % self.V)[..., None], pt[None, :, None].expand(B, T, 1).clone())
        return p.log()  # [B, T, V] log-probabilities are valid logits


def spec_choice_table() -> torch.Tensor:
    """Bigram table of SPEC.md section 3: p(b|a) = 0.4, p(c|a) = 0.45, p(b|b) = 0.9."""
    V = 256
    P = torch.full((V, V), 1.0 / V, dtype=torch.float64)
    a, b, c = ord("a"), ord("b"), ord("c")
    P[a] = 0.15 / (V - 2)
    P[a, b], P[a, c] = 0.4, 0.45
    P[b] = 0.1 / (V - 1)
    P[b, b] = 0.9
    return P


class TableModel:
    """Logits = log P[previous token]: a bigram given as a table. Records the sequences seen."""

    def __init__(self, P: torch.Tensor) -> None:
        self.logP = P.log()
        self.calls: list[list[int]] = []

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        self.calls.extend(row.tolist() for row in ids)
        return self.logP[ids]  # [B, T, V]


def table_token_nlls(model: TableModel, ids) -> np.ndarray:
    """A family-style ``token_nlls`` for the table model (count-based families look like this)."""
    a = np.asarray(ids, dtype=np.int64)
    return -model.logP[a[:-1], a[1:]].numpy()


def tiny_gpt2(vocab: int = 97, n_positions: int = 64, seed: int = 0, dropout: float = 0.0):
    """A small GPT2LMHeadModel with random weights large enough that context matters."""
    cfg = transformers.GPT2Config(
        vocab_size=vocab,
        n_positions=n_positions,
        n_embd=32,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
    )
    torch.manual_seed(seed)
    m = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return m.eval()


class FullLogits(nn.Module):
    """A plain module returning logits: no hidden-state hook, so the full-logits path runs."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.inner(ids).logits


def reference_nlls(model, ids: np.ndarray, C: int, s: int) -> np.ndarray:
    """SPEC.md section 2 written out independently: one window per forward pass, full logits."""
    n = len(ids)
    out = np.full(n - 1, np.nan)
    prev_end = 0
    for begin in range(0, n, s):
        end = min(begin + C, n)
        x = torch.as_tensor(ids[begin:end], dtype=torch.long)[None]
        with torch.no_grad():
            lp = torch.log_softmax(model(x).logits[0].double(), dim=-1)
        for t in range(max(prev_end, 1), end):
            out[t - 1] = -lp[t - 1 - begin, int(ids[t])].item()
        prev_end = end
        if end == n:
            break
    return out


@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2()


@pytest.fixture(scope="module")
def gpt2_ids():
    return np.random.default_rng(5).integers(0, 97, size=150)


# --------------------------------------------------------------- SPEC.md section 2 example


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


def test_windows_of_the_spec_example():
    assert lm.windows(6, 4, 2) == [(0, 4, 1), (2, 6, 4)]
    assert lm.windows(6, 4, 3) == [(0, 4, 1), (3, 6, 4)]
    assert lm.windows(3, 4, 2) == [(0, 3, 1)]  # shorter than one window


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


# ------------------------------------------------------------- golden: transformers GPT-2


@pytest.mark.parametrize("ctx_len, stride", [(16, 8), (16, 15), (16, 1), (64, 20)])
def test_token_nlls_equal_hf_logits_per_window(gpt2, gpt2_ids, ctx_len, stride):
    ours = lm.token_nlls(gpt2, gpt2_ids, ctx_len, stride)
    ref = reference_nlls(gpt2, gpt2_ids, ctx_len, stride)
    assert not np.isnan(ref).any()
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-5)


def test_hf_hidden_state_hook_equals_full_logits(gpt2, gpt2_ids):
    x = torch.as_tensor(gpt2_ids[:16])[None]
    assert lm._Head(gpt2, x).kind == "twin"  # a GPT2LMHeadModel runs as our GPT on its weights
    assert lm._Head(FullLogits(gpt2), x).kind == "full"
    hooked = lm.token_nlls(gpt2, gpt2_ids, 32, 12)
    full = lm.token_nlls(FullLogits(gpt2), gpt2_ids, 32, 12)
    np.testing.assert_allclose(hooked, full, rtol=0, atol=1e-5)
    # a plain function returning a tuple (logits, extra) is a model too
    as_tuple = lm.token_nlls(lambda ids: (gpt2(ids).logits, None), gpt2_ids, 32, 12)
    np.testing.assert_allclose(as_tuple, full, rtol=0, atol=1e-5)


def test_the_gpt2_twin_shares_the_hf_weights_and_follows_them(gpt2_ids):
    """hf_gpt2_twin: our GPT on views of the HF tensors (nothing copied); an in-place change of
    the HF weights shows in the twin, a replaced parameter rebuilds it; NLLs equal HF's."""
    hf = tiny_gpt2(seed=4)
    twin = lm.hf_gpt2_twin(hf)
    w = hf.transformer.h[0].attn.c_attn.weight  # Conv1D [in, out]
    assert twin.h[0].attn.c_attn.weight.data_ptr() == w.data_ptr()
    assert lm.hf_gpt2_twin(hf) is twin  # same tensors: the same twin
    ref = reference_nlls(hf, gpt2_ids, 32, 12)
    np.testing.assert_allclose(lm.token_nlls(hf, gpt2_ids, 32, 12), ref, rtol=0, atol=1e-5)
    with torch.no_grad():
        w.mul_(0.5)  # in place: the twin sees it
    ref2 = reference_nlls(hf, gpt2_ids, 32, 12)
    assert np.abs(ref2 - ref).max() > 1e-3
    np.testing.assert_allclose(lm.token_nlls(hf, gpt2_ids, 32, 12), ref2, rtol=0, atol=1e-5)
    hf.transformer.h[0].attn.c_attn.weight = nn.Parameter(w.detach().clone() * 2.0)
    assert lm.hf_gpt2_twin(hf) is not twin  # another tensor: rebuilt
    ref3 = reference_nlls(hf, gpt2_ids, 32, 12)
    np.testing.assert_allclose(lm.token_nlls(hf, gpt2_ids, 32, 12), ref3, rtol=0, atol=1e-5)
    assert lm.hf_gpt2_twin(FullLogits(hf)) is None  # not a GPT2LMHeadModel


def test_a_gpt2_variant_the_twin_cannot_run_uses_hfs_own_hidden_states(gpt2_ids):
    """Layer-scaled attention is a GPT-2 variant our GPT does not implement: no twin, the HF
    hook (base model + output embeddings) scores it, equal to the full logits."""
    hf = tiny_gpt2(seed=2)
    hf.config.scale_attn_by_inverse_layer_idx = True
    for block in hf.transformer.h:
        block.attn.scale_attn_by_inverse_layer_idx = True
    assert lm.hf_gpt2_twin(hf) is None
    x = torch.as_tensor(gpt2_ids[:16])[None]
    assert lm._Head(hf, x).kind == "hf"
    np.testing.assert_allclose(
        lm.token_nlls(hf, gpt2_ids, 32, 12),
        reference_nlls(hf, gpt2_ids, 32, 12),
        rtol=0,
        atol=1e-5,
    )


class ScaledGPT2(transformers.GPT2LMHeadModel):
    """A GPT2LMHeadModel whose forward halves its logits: the twin (and HF's own hidden-state
    hook) would not reproduce them."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * 0.5
        return out


def test_a_gpt2_subclass_that_changes_its_logits_is_scored_from_them(gpt2_ids):
    hf = tiny_gpt2(seed=3)
    odd = ScaledGPT2(hf.config)
    odd.load_state_dict(hf.state_dict())
    odd.eval()
    assert lm.hf_gpt2_twin(odd) is not None  # built, but it fails the check against the logits
    with pytest.warns(UserWarning, match="do not reproduce"):
        got = lm.token_nlls(odd, gpt2_ids, 32, 12)
    np.testing.assert_allclose(got, reference_nlls(odd, gpt2_ids, 32, 12), rtol=0, atol=1e-5)


def test_our_gpt_hook_equals_full_logits():
    gpt = pytest.importorskip("tinyllm.models.gpt")
    torch.manual_seed(0)
    model = gpt.Model(gpt.Config(block_size=32, n_layer=2, n_head=2, n_embd=16)).eval()
    ids = np.random.default_rng(1).integers(0, 256, size=100)
    x = torch.as_tensor(ids[:16])[None]
    assert lm._Head(model, x).kind == "hook"
    hooked = lm.token_nlls(model, ids, 32, 10)
    full = lm.token_nlls(lambda t: model(t)[0], ids, 32, 10)
    np.testing.assert_allclose(hooked, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("ctx_len, stride", [(32, 16), (32, 31), (32, 1), (20, 7)])
def test_our_gpt_scored_span_only_equals_the_full_pass(ctx_len, stride, monkeypatch):
    """token_nlls asks our GPT for the scored span of each window only (hidden(x, keep=...):
    the last block at those positions); the NLLs equal the full logits' to 1e-6 at every batch
    size (float32 rounding: with one scored position per window, batch 1 multiplies a single
    row, which the BLAS rounds differently from a block of rows)."""
    gpt = pytest.importorskip("tinyllm.models.gpt")
    torch.manual_seed(0)
    model = gpt.Model(gpt.Config(block_size=32, n_layer=2, n_head=2, n_embd=16)).eval()
    ids = np.random.default_rng(2).integers(0, 256, size=301)
    x = torch.as_tensor(ids[:16])[None]
    assert lm._Head(model, x).keep
    monkeypatch.setattr(gpt, "_MIN_ROWS_SAVED", 0)  # the kept span alone at every batch size
    spans = []
    last = model._block
    model._block = lambda b, h, lo=0, hi=None: (spans.append((lo, hi)), last(b, h, lo, hi))[1]
    full = lm.token_nlls(lambda t: model(t)[0], ids, ctx_len, stride)  # no hook: full logits
    got = {b: lm.token_nlls(model, ids, ctx_len, stride, batch_size=b) for b in (1, 5, None)}
    assert (ctx_len - stride - 1, ctx_len - 1) in spans  # windows after the first: their span
    for b, nll in got.items():
        np.testing.assert_allclose(nll, full, rtol=0, atol=1e-6, err_msg=f"batch {b}")
        np.testing.assert_allclose(nll, got[1], rtol=0, atol=1e-6, err_msg=f"batch {b}")


class CappedLogits(nn.Module):
    """Exposes hidden/lm_head, but its forward rescales the logits (like a logit soft cap)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.emb = nn.Embedding(13, 8)
        self.lm_head = nn.Linear(8, 13, bias=False)

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(self.emb(idx), dim=1)  # causal: position t sums tokens 0..t

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return 3.0 * torch.tanh(self.lm_head(self.hidden(idx)) / 3.0)


def test_a_hook_that_disagrees_with_the_logits_falls_back_to_full_logits():
    m = CappedLogits()
    ids = np.random.default_rng(0).integers(0, 13, size=40)
    with pytest.warns(UserWarning, match="do not reproduce"):
        ours = lm.token_nlls(m, ids, 8, 3)
    with torch.no_grad():
        ref = np.concatenate(
            [
                -torch.log_softmax(m(torch.as_tensor(ids[a:e])[None])[0].double(), -1)[
                    np.arange(f - 1 - a, e - 1 - a), ids[f:e]
                ].numpy()
                for a, e, f in lm.windows(len(ids), 8, 3)
            ]
        )
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6)


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


def test_log_probs_are_the_log_softmax_of_one_sequence():
    P = spec_choice_table()
    ids = ByteTokenizer().encode("abba")
    lp = lm.log_probs(TableModel(P), ids)
    assert lp.shape == (4, 256)
    np.testing.assert_allclose(lp.numpy(), P.log()[ids].numpy(), atol=1e-6)


# ----------------------------------------------------- SPEC.md section 4: ppl / bpb intervals


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


# ----------------------------------------------------------- SPEC.md section 3: choices


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


def test_acc_norm_divides_by_utf8_bytes_not_characters():
    m, tok = TableModel(spec_choice_table()), ByteTokenizer()
    raw = lm.score_choices(m, tok, "a", ["é", "c"], normalize=False)
    norm = lm.score_choices(m, tok, "a", ["é", "c"], normalize=True)
    assert norm[0] == pytest.approx(raw[0] / 2)  # "é" is 2 UTF-8 bytes


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


def test_empty_context_or_choice_is_refused():
    m, tok = TableModel(spec_choice_table()), ByteTokenizer()
    with pytest.raises(ValueError, match="at least one token"):
        lm.score_choices(m, tok, "", ["b", "c"])
    with pytest.raises(ValueError, match="non-empty"):
        lm.score_choices(m, tok, "a", ["b", ""])


TASK = [
    {"context": "a", "choices": ["bb", "c"], "gold": 0},  # acc wrong, acc_norm right
    {"context": "a", "choices": ["d", "e"], "gold": 1},  # a tie: goes to the first -> wrong
    {"context": "a", "choices": ["d", "e"], "gold": 0, "id": "tie-right"},
    {"context": "b", "choices": ["c", "b"], "gold": 1},  # p(b|b) = 0.9: right
]


def _write_task(path, items) -> str:
    path.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    return str(path)


def test_run_task_per_item_scores_ties_and_metrics(tmp_path):
    path = _write_task(tmp_path / "task.jsonl", TASK)
    m, tok = TableModel(spec_choice_table()), ByteTokenizer()
    acc = lm.run_task(m, tok, path, "acc", np.random.default_rng(7), n_boot=200)
    norm = lm.run_task(m, tok, path, "acc_norm", np.random.default_rng(7), n_boot=200)
    np.testing.assert_array_equal(acc.per_item, [0, 0, 1, 1])
    np.testing.assert_array_equal(norm.per_item, [1, 0, 1, 1])
    assert (acc.value, acc.n, norm.value) == (0.5, 4, 0.75)
    assert acc.per_item.dtype == np.float64


def test_run_task_interval_is_the_bootstrap_from_the_callers_rng():
    m, tok = TableModel(spec_choice_table()), ByteTokenizer()
    items = TASK * 5
    rng1, rng2, rng3 = (np.random.default_rng(11) for _ in range(3))
    r1 = lm.run_task(m, tok, items, "acc_norm", rng1, n_boot=300)
    r2 = lm.run_task(m, tok, items, "acc_norm", rng2, n_boot=300)
    want = stats.bootstrap_ci(r1.per_item, rng3, n_boot=300)
    assert (r1.lo, r1.hi) == (r2.lo, r2.hi) == (want.lo, want.hi)
    assert r1.lo < r1.value < r1.hi
    # the draws came from the caller's rng: it advanced exactly as the stats call advanced its own
    assert rng1.bit_generator.state == rng3.bit_generator.state


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"context": "a", "choices": ["b", "c"], "gold": 2}', "'gold'"),
        ('{"context": "a", "choices": ["b"], "gold": 0}', "'choices'"),
        ('{"choices": ["b", "c"], "gold": 0}', "missing"),
        ('{"context": "a", "choices": ["b", "c"], "gold": true}', "'gold'"),
        ("not json", "parse error"),
        ('{"context": "", "choices": ["b", "c"], "gold": 0}', "'context' to be a non-empty"),
        ('{"context": "a", "choices": ["b", "c"], "gold": 0, "target_delimiter": 1}', "delimiter"),
    ],
)
def test_bad_task_files_name_the_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(TASK[0]) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message) as e:
        lm.read_task(path)
    assert f"{path}:2" in str(e.value)


def test_bad_utf8_in_a_task_file_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = json.dumps(TASK[0]).encode()
    path.write_bytes(good + b"\n" + b'{"context": "caf\xe9", "choices": ["b", "c"], "gold": 0}\n')
    with pytest.raises(ValueError, match="expected UTF-8 text, got byte 0xe9 at column 17") as e:
        lm.read_task(path)
    assert str(e.value).startswith(f"{path}:2: ")


def test_run_task_refuses_an_unknown_metric():
    with pytest.raises(ValueError, match="acc_norm"):
        lm.run_task(
            TableModel(spec_choice_table()), ByteTokenizer(), TASK, "f1", np.random.default_rng()
        )


# ----------------------------------------------------------- SPEC.md section 5: compare


def _result(per_item) -> lm.Result:
    x = np.asarray(per_item, dtype=np.float64)
    return lm.Result(float(x.mean()), 0.0, 1.0, x.size, x)


def test_compare_is_the_paired_permutation_test():
    a = _result([1] * 6 + [0] * 6)
    b = _result([0] * 5 + [1] + [0] * 6)
    # five paired differences of +1: exact, 2 of the 2**5 sign patterns reach |sum| = 5
    assert lm.compare(a, b) == pytest.approx(2 / 32)
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    x = _result(np.random.default_rng(0).integers(0, 2, 200))
    y = _result(np.random.default_rng(1).integers(0, 2, 200))
    want = stats.paired_permutation_test(x.per_item, y.per_item, n_perm=500, rng=rng_b)
    assert lm.compare(x, y, n_perm=500, rng=rng_a) == want


def test_compare_refuses_mismatched_items():
    with pytest.raises(ValueError, match="same items"):
        lm.compare(_result([1, 0, 1]), _result([1, 0]))


# ----------------------------------------------------------------------------------- CLI


def _invoke(args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    model = tiny_gpt2(vocab=300, seed=1)
    model.save_pretrained(d)  # safetensors
    return d


def test_cli_eval_ppl_hf_json_equals_eval_ppl(tmp_path, hf_dir):
    ids = np.random.default_rng(2).integers(0, 300, size=200)
    tok = write_tokens(tmp_path / "val.tok", ids)
    r = _invoke(
        ["eval", "ppl", "--hf", hf_dir, "--data", tok, "--ctx-len", 32, "--stride", 16, "--json"]
    )
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, use_safetensors=True)
    want = lm.eval_ppl(model.eval(), ids, 32, 16)
    assert (got["ctx_len"], got["stride"], got["n_tokens"]) == (32, 16, 199)
    for k in ("nll", "ppl", "bpb"):
        assert got[k] == pytest.approx(want[k], rel=1e-9)
    table = _invoke(["eval", "ppl", "--hf", hf_dir, "--data", tok, "--ctx-len", 32])
    assert table.exit_code == 0, table.output
    assert "ppl" in table.stdout and "bits/byte" in table.stdout and "stride 16" in table.stdout


def test_cli_eval_ppl_errors_are_clear(tmp_path, hf_dir):
    tok = write_tokens(tmp_path / "big.tok", np.array([1, 2, 400, 3]))
    r = _invoke(["eval", "ppl", "--hf", hf_dir, "--data", tok, "--ctx-len", 32, "--stride", 8])
    assert r.exit_code == 2 and "expected token ids < 300" in r.output
    ok = write_tokens(tmp_path / "ok.tok", np.array([1, 2, 3, 4]))
    r = _invoke(["eval", "ppl", "--hf", hf_dir, "--data", ok, "--ctx-len", 32, "--stride", 32])
    assert r.exit_code == 2 and "stride" in r.output
    r = _invoke(["eval", "ppl", "--hf", hf_dir, "--data", ok, "--ctx-len", 128])
    assert r.exit_code == 2 and "at most the model's context 64" in r.output
    r = _invoke(["eval", "ppl", "--data", ok])
    assert r.exit_code == 2 and "exactly one of --model DIR or --hf DIR" in r.output
    r = _invoke(["eval", "ppl", "--hf", hf_dir, "--data", tmp_path / "missing.tok"])
    assert r.exit_code == 2 and "not found" in r.output


def test_cli_eval_task_hf_json_equals_run_task(tmp_path, hf_dir):
    path = _write_task(tmp_path / "task.jsonl", TASK * 3)
    r = _invoke(
        [
            "eval",
            "task",
            "--hf",
            hf_dir,
            "--task",
            path,
            "--metric",
            "acc",
            "--tokenizer",
            "byte",
            "--seed",
            4,
            "--n-boot",
            100,
            "--json",
        ]
    )
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, use_safetensors=True)
    want = lm.run_task(
        model.eval(), ByteTokenizer(), path, "acc", np.random.default_rng(4), 100, 64
    )
    assert got["per_item"] == want.per_item.tolist()
    assert (got["value"], got["lo"], got["hi"], got["n"]) == (want.value, want.lo, want.hi, 12)
    table = _invoke(["eval", "task", "--hf", hf_dir, "--task", path, "--tokenizer", "byte"])
    assert table.exit_code == 0 and "acc_norm" in table.stdout


def test_cli_eval_task_max_len_and_delimiter(tmp_path, hf_dir):
    """--max-len above the model's 64 positions: one clear line, no traceback; a context longer
    than the model is cut as lm-eval cuts it (a warning, not an IndexError); --target-delimiter
    changes the scores as the library's target_delimiter does."""
    long = [{"context": "ab" * 60, "choices": ["bb", "c"], "gold": 0}] + TASK
    path = _write_task(tmp_path / "task.jsonl", long)
    base = ["eval", "task", "--hf", hf_dir, "--task", path, "--tokenizer", "byte", "--json"]
    r = _invoke([*base, "--max-len", 65])
    assert r.exit_code == 2, r.output
    assert "expected at most the model's own context of 64 tokens, got 65" in r.output
    assert "Traceback" not in r.output
    with pytest.warns(UserWarning, match="cut 113 context tokens"):  # the CLI says so too
        r = _invoke(base)
    assert r.exit_code == 0, r.output
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, use_safetensors=True)
    with pytest.warns(UserWarning, match="cut 113 context tokens from the left of 2 of 10"):
        want = lm.run_task(
            model.eval(), ByteTokenizer(), long, "acc_norm", np.random.default_rng(0)
        )
    assert json.loads(r.stdout)["per_item"] == want.per_item.tolist()
    with pytest.warns(UserWarning, match="cut 115 context tokens"):
        r = _invoke([*base, "--target-delimiter", " ", "--metric", "acc"])
    assert r.exit_code == 0, r.output
    with pytest.warns(UserWarning, match="cut 115 context tokens"):
        want = lm.run_task(
            model.eval(),
            ByteTokenizer(),
            long,
            "acc",
            np.random.default_rng(0),
            target_delimiter=" ",
        )
    assert json.loads(r.stdout)["per_item"] == want.per_item.tolist()


def test_cli_eval_task_without_a_tokenizer_says_so(tmp_path, hf_dir):
    path = _write_task(tmp_path / "task.jsonl", TASK)
    r = _invoke(["eval", "task", "--hf", hf_dir, "--task", path])
    assert r.exit_code == 2 and "--tokenizer byte" in r.output


def _table_family():
    """A count-based lm family as the zoo sees one: ARCH, KIND, load, token_nlls."""

    def load(path):
        return TableModel(load_tensors(path)["table"])

    return types.SimpleNamespace(
        ARCH="tabletest", KIND="lm", load=load, token_nlls=table_token_nlls
    )


def test_cli_model_dir_dispatches_to_the_family(tmp_path, monkeypatch):
    monkeypatch.setitem(FAMILIES, "tabletest", _table_family())
    P = spec_choice_table()
    ck = save_checkpoint(tmp_path / "table", "tabletest", {}, {"table": P})
    ids = ByteTokenizer().encode("abba cab abc bba")
    tok = write_tokens(tmp_path / "val.tok", ids)
    r = _invoke(["eval", "ppl", "--model", ck, "--data", tok, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    want = lm.summarize_nlls(table_token_nlls(TableModel(P), ids))
    assert got["bpb"] == pytest.approx(want["bpb"], rel=1e-12)
    assert got["stride"] is None
    path = _write_task(tmp_path / "task.jsonl", TASK)
    r = _invoke(["eval", "task", "--model", ck, "--task", path, "--metric", "acc", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["per_item"] == [0, 0, 1, 1]
    bad = save_checkpoint(tmp_path / "nope", "nosuchfamily", {}, {"table": P})
    r = _invoke(["eval", "ppl", "--model", bad, "--data", tok])
    assert r.exit_code == 2 and "unknown tl_arch 'nosuchfamily'" in r.output


def test_cli_model_dir_gpt_is_strided(tmp_path, monkeypatch):
    gpt = pytest.importorskip("tinyllm.models.gpt")
    monkeypatch.setitem(FAMILIES, "gpt", FAMILIES.get("gpt", gpt))
    torch.manual_seed(0)
    model = gpt.Model(gpt.Config(block_size=32, n_layer=2, n_head=2, n_embd=16)).eval()
    ck = gpt.save(model, tmp_path / "gpt")
    ids = np.random.default_rng(3).integers(0, 256, size=150)
    tok = write_tokens(tmp_path / "val.tok", ids.astype(np.uint8))
    r = _invoke(["eval", "ppl", "--model", ck, "--data", tok, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert (got["ctx_len"], got["stride"]) == (32, 16)  # defaults: block_size, half of it
    want = lm.eval_ppl(gpt.load(ck), ids, 32, 16)
    assert got["nll"] == pytest.approx(want["nll"], rel=1e-9)


def test_no_warnings_on_the_hook_path(gpt2, gpt2_ids):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lm.token_nlls(gpt2, gpt2_ids, 16, 8)


def test_cli_eval_task_hf_uses_the_folders_own_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=280, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(["a bb c", "the cat sat on the mat"] * 20, trainer)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe)
    d = tmp_path / "hf"
    model = tiny_gpt2(vocab=300, seed=2)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    path = _write_task(tmp_path / "task.jsonl", TASK * 2)
    r = _invoke(["eval", "task", "--hf", d, "--task", path, "--metric", "acc", "--json"])
    assert r.exit_code == 0, r.output
    loaded = transformers.AutoTokenizer.from_pretrained(d, local_files_only=True)
    want = lm.run_task(model, loaded, path, "acc", np.random.default_rng(0), 1000, 64)
    assert json.loads(r.stdout)["per_item"] == want.per_item.tolist()
    assert json.loads(r.stdout)["lo"] == want.lo


def test_cli_one_file_ngram_checkpoint(tmp_path):
    ngram = pytest.importorskip("tinyllm.models.ngram")
    if FAMILIES.get("ngram") is not ngram:
        pytest.skip("ngram is not registered in FAMILIES")
    text = "the cat sat on the mat. a bb c. the bat sat on the cat. " * 20
    model = ngram.train(ngram.Config(order=3), ByteTokenizer().encode(text), seed=0)
    path = ngram.save(model, tmp_path / "ngram.safetensors")
    ids = ByteTokenizer().encode("the mat sat on a bat.")
    tok = write_tokens(tmp_path / "val.tok", ids.astype(np.uint8))
    r = _invoke(["eval", "ppl", "--model", path, "--data", tok, "--json"])
    assert r.exit_code == 0, r.output
    want = lm.summarize_nlls(ngram.token_nlls(ngram.load(path), ids))
    assert json.loads(r.stdout)["bpb"] == pytest.approx(want["bpb"], rel=1e-12)
    task = _write_task(tmp_path / "task.jsonl", TASK)
    r = _invoke(["eval", "task", "--model", path, "--task", task, "--json"])
    assert r.exit_code == 0, r.output
    fam = lm.FamilyLM(ngram.load(path), ngram.token_nlls)
    want = lm.run_task(fam, ByteTokenizer(), task, "acc_norm", np.random.default_rng(0))
    assert json.loads(r.stdout)["per_item"] == want.per_item.tolist()
