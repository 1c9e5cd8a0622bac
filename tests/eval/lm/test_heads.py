"""tinyllm/logits.py through the instrument: reading a model's logits, and its head only where
tokens are scored.

It pins Head, its vocabulary size (out_features), the keep check and call_logits against these
oracles: the model's own full forward pass (logits ->
float64 log-softmax, one window at a time: lm_helpers.reference_nlls) on inputs where the hook
path is really taken (asserted: its kind, no fallback warning); heads of several kinds whose
vocabulary size is known; and the documented acceptance rule of a head-only hook
(max |difference| <= 1e-4 * max(1, max |logit|), on the first 16 tokens of one row, once per
model, and for a ``keep`` hook also on the span nlls() asks for). The Hugging Face hooks are in
test_heads_hf.py.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pytest
import torch
from lm_helpers import (
    IDS,
    ITEMS,
    IdTok,
    Revealing,
    Table,
    TableModel,
    oracle_lls,
    our_gpt,
    random_items,
    ref_nlls,
    spec_choice_table,
)
from torch import nn

from tinyllm import logits
from tinyllm.eval import lm
from tinyllm.tokens import ByteTokenizer


class OneHotBigram:
    """A bigram written with F.one_hot, which needs int64 ids (as docs/definitions.md, symbols says)."""

    def __init__(self, V: int = 8) -> None:
        g = torch.Generator().manual_seed(0)
        self.V, self.W = V, torch.randn(V, V, generator=g, dtype=torch.float64)

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(ids, self.V).double() @ self.W


# --------------------------------------------------------------------- call_logits and log_probs


def test_call_logits_reads_a_tensor_a_tuple_and_a_model_output():
    transformers = pytest.importorskip("transformers")
    z = torch.randn(1, 5, 11, generator=torch.Generator().manual_seed(0))
    want = torch.log_softmax(z[0].double(), dim=-1).float()
    out = transformers.modeling_outputs.CausalLMOutput(logits=z)
    for model in (lambda ids: z, lambda ids: (z, None), lambda ids: [z], lambda ids: out):
        torch.testing.assert_close(lm.log_probs(model, np.arange(5)), want)


@pytest.mark.parametrize("bad", [(), (None, "logits"), []])
def test_call_logits_rejects_a_tuple_without_logits_first(bad):
    """An empty tuple or one whose first item is not a tensor: the documented TypeError."""
    with pytest.raises(TypeError, match="a tuple whose first item is the logits"):
        lm.log_probs(lambda ids: bad, np.arange(5))


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


def test_log_probs_are_the_log_softmax_of_one_sequence():
    P = spec_choice_table()
    ids = ByteTokenizer().encode("abba")
    lp = lm.log_probs(TableModel(P), ids)
    assert lp.shape == (4, 256)
    np.testing.assert_allclose(lp.numpy(), P.log()[ids].numpy(), atol=1e-6)


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


def test_ids_errors_name_the_argument_and_a_memmap_stays_a_memmap(tmp_path):
    with pytest.raises(ValueError) as e:
        lm.log_probs(Revealing(), np.zeros((2, 3), dtype=np.int64))
    assert str(e.value) == "ids: expected a 1-d sequence of token ids, got shape (2, 3)"
    with pytest.raises(ValueError) as e:
        lm.token_nlls(Revealing(), np.array([0.5, 1.5, 2.5]), 4, 2)
    assert str(e.value) == "ids: expected integer token ids, got dtype float64"
    mm = np.memmap(tmp_path / "ids.bin", dtype=np.uint16, mode="w+", shape=(6,))
    mm[:] = np.arange(6)
    assert isinstance(logits.as_ids(mm), np.memmap)  # "a memmap stays a memmap: nothing is loaded"


# ------------------------------------------------------------------- out_features and nll_blocks


class TiedHead(nn.Module):
    """An output head tied to an embedding (weight [V, D] is the embedding's)."""

    def __init__(self, emb: nn.Embedding) -> None:
        super().__init__()
        self.emb = emb

    @property
    def weight(self) -> torch.Tensor:
        return self.emb.weight

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.emb.weight.T


class OnlyWeight(nn.Module):
    def __init__(self, V: int, D: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(V, D))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.weight.T


class Weightless(nn.Module):
    """A head without a ``weight``: its vocabulary size cannot be read off it."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = nn.Parameter(table)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.table.T


def test_out_features_is_the_vocabulary_of_every_head_kind():
    assert logits.out_features(nn.Linear(8, 50)) == 50
    assert logits.out_features(TiedHead(nn.Embedding(50, 8))) == 50
    assert logits.out_features(OnlyWeight(50, 8)) == 50
    assert logits.out_features(OnlyWeight(6, 40)) == 6


class WeightlessHeadGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = our_gpt(seed=2)
        self.lm_head = Weightless(self.inner.lm_head.weight.detach().clone())

    def hidden(self, idx, keep=None):
        return self.inner.hidden(idx, keep)

    def forward(self, idx):
        return self.lm_head(self.inner.hidden(idx))


def test_a_head_of_unknown_vocabulary_keeps_the_memory_bound():
    """max_logits bounds a block of head output ([rows, V] elements, at least one row): with a
    head whose V cannot be read, blocks stay within it for the true V (256), and the NLLs are
    the full logits'."""
    model = WeightlessHeadGPT().eval()
    rows = []
    model.lm_head.register_forward_hook(
        lambda m, a, o: rows.append(a[0].shape[0]) if a[0].ndim == 2 else None
    )
    ids = np.random.default_rng(3).integers(0, 256, size=40)
    with warnings.catch_warnings(action="error"):
        got = lm.token_nlls(model, ids, 16, 8, max_logits=1024)
    assert logits.Head(model, torch.as_tensor(ids[:16])[None]).kind == "hook"
    assert sum(rows) == 39 and max(rows) * 256 <= max(1024, 256)
    np.testing.assert_allclose(got, ref_nlls(model, ids, 16, 8), rtol=0, atol=1e-5)


def test_nll_blocks_ask_each_row_once_in_the_largest_blocks_within_the_bound():
    """nll_blocks' contract: row blocks of at most max_logits elements (the memory bound),
    each row's logits asked for once, as few head calls as the bound allows."""
    rng = np.random.default_rng(0)
    for m, v in [(10, 5), (7, 40), (5, 64), (3, 100), (1, 7)]:
        z_all = torch.from_numpy(rng.normal(size=(m, v)))
        tgt = torch.from_numpy(rng.integers(0, v, m))
        calls: list[tuple[int, int]] = []

        def logits_of(lo, hi, z_all=z_all, calls=calls):
            calls.append((lo, hi))
            return z_all[lo:hi]

        got = logits.nll_blocks(logits_of, m, v, tgt, max_logits=64)
        want = -torch.log_softmax(z_all, dim=-1)[torch.arange(m), tgt].numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        rows = max(1, 64 // v)  # the largest block within the bound, at least one row
        assert calls == [(lo, min(m, lo + rows)) for lo in range(0, m, rows)], (m, v)


# -------------------------------------------------------------------------------- our GPT's hook


def test_our_gpt_hook_equals_full_logits():
    gpt = pytest.importorskip("tinyllm.models.gpt")
    torch.manual_seed(0)
    model = gpt.Model(gpt.Config(block_size=32, n_layer=2, n_head=2, n_embd=16)).eval()
    ids = np.random.default_rng(1).integers(0, 256, size=100)
    x = torch.as_tensor(ids[:16])[None]
    assert logits.Head(model, x).kind == "hook"
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
    assert logits.Head(model, x).keep
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


# --------------------------------------------------------------- head-only hooks and their check


class HookModel(nn.Module):
    """Our GPT behind ``hidden(idx, keep)`` + ``lm_head``; its forward (the logits the check
    compares with) is ``lm_head(hidden(idx))`` with ``bump`` added to the logit of token 0.

    ``keep_mode``: "strict" (a correct keep that refuses a slice outside ``[0, T]`` or empty),
    "ignores_start" (returns the first ``hi - lo`` positions: wrong), "inclusive" (returns
    ``lo .. hi``: one position too many). Records forward input shapes and keep slices."""

    def __init__(self, keep_mode="strict", scale=1.0, bump=0.0, seed=1) -> None:
        super().__init__()
        self.inner = our_gpt(seed=seed)
        w = self.inner.lm_head.weight.detach() * scale
        self.lm_head = nn.Linear(w.shape[1], w.shape[0], bias=False)
        with torch.no_grad():
            self.lm_head.weight.copy_(w)
        self.keep_mode, self.bump = keep_mode, bump
        self.calls: list[tuple[int, ...]] = []
        self.keeps: list[tuple[int, int]] = []

    def hidden(self, idx, keep=None):
        if keep is None:
            return self.inner.hidden(idx)
        T, lo, hi = idx.shape[1], keep.start, keep.stop
        self.keeps.append((lo, hi))
        if self.keep_mode == "ignores_start":
            return self.inner.hidden(idx)[:, : hi - lo]
        if self.keep_mode == "inclusive":
            return self.inner.hidden(idx)[:, lo : hi + 1]
        if not 0 <= lo < hi <= T:
            raise ValueError(f"keep {keep} outside the {T} positions")
        return self.inner.hidden(idx, keep)

    def forward(self, idx):
        self.calls.append(tuple(idx.shape))
        z = self.lm_head(self.inner.hidden(idx))
        if self.bump:
            z = z.clone()
            z[..., 0] += self.bump
        return z


GPT_IDS = np.random.default_rng(11).integers(0, 256, size=45)


@pytest.mark.parametrize("ctx_len", [3, 16])
def test_a_correct_keep_hook_passes_its_check_at_any_probe_length(ctx_len):
    """The check asks a keep hook for a span inside the probe (a strict hook raises otherwise),
    our GPT included; both pass silently and give the full logits' NLLs."""
    for model in (HookModel("strict"), our_gpt(seed=1)):
        fn = model if isinstance(model, HookModel) else (lambda t, m=model: m(t)[0])
        with warnings.catch_warnings(action="error"):
            got = lm.token_nlls(model, GPT_IDS, ctx_len, 1)
            head = logits.Head(model, torch.as_tensor(GPT_IDS[:ctx_len])[None])
        assert head.kind == "hook" and head.keep
        np.testing.assert_allclose(got, ref_nlls(fn, GPT_IDS, ctx_len, 1), rtol=0, atol=1e-5)


@pytest.mark.parametrize("mode, ctx_len", [("ignores_start", 3), ("inclusive", 16)])
def test_a_wrong_keep_hook_is_refused_with_a_warning(mode, ctx_len):
    """hidden(x) right, hidden(x, keep=...) wrong (a 3-token probe: the smallest with a kept
    span to check; or one position too many): refused, the NLLs are the full logits'."""
    model = HookModel(mode)
    with pytest.warns(UserWarning, match=r"^HookModel: hidden states \+ output head do not"):
        got = lm.token_nlls(model, GPT_IDS, ctx_len, 1)
    assert logits.Head(model, torch.as_tensor(GPT_IDS[:ctx_len])[None]).kind == "full"
    np.testing.assert_allclose(got, ref_nlls(model, GPT_IDS, ctx_len, 1), rtol=0, atol=1e-5)


class PaddedVocab(HookModel):
    """A head of 256 outputs whose model returns logits for the first 250 tokens only (a
    padded vocabulary): lm_head(hidden(x)) has another shape than the logits."""

    def forward(self, idx):
        return super().forward(idx)[..., :250]


def test_a_hook_whose_output_has_another_shape_is_refused():
    model = PaddedVocab("strict")
    ids = GPT_IDS % 250
    with pytest.warns(UserWarning, match=r"^PaddedVocab: hidden states"):
        got = lm.token_nlls(model, ids, 16, 8)
    assert logits.Head(model, torch.as_tensor(ids[:16])[None]).kind == "full"
    np.testing.assert_allclose(got, ref_nlls(model, ids, 16, 8), rtol=0, atol=1e-5)


def _max_logit(model: HookModel) -> float:
    with torch.inference_mode():
        return float(model(torch.as_tensor(GPT_IDS[:16])[None]).abs().max())


def test_the_check_tolerance_is_relative_to_the_largest_logit():
    """|logits| up to M > 1: a difference of 0.3e-4 * M is accepted (relative tolerance)."""
    model = HookModel(scale=8.0)
    M = _max_logit(model)
    assert M > 20
    model.bump = 0.3 * logits.VERIFY_TOL * M
    with warnings.catch_warnings(action="error"):
        got = lm.token_nlls(model, GPT_IDS, 16, 8)
    assert logits.Head(model, torch.as_tensor(GPT_IDS[:16])[None]).kind == "hook"
    hook = lm.token_nlls(lambda t: model.lm_head(model.inner.hidden(t)), GPT_IDS, 16, 8)
    np.testing.assert_allclose(got, hook, rtol=0, atol=1e-5)  # the hook's numbers


def test_the_check_tolerance_is_absolute_below_logits_of_one():
    """|logits| < 1: the bound is 1e-4 itself; a difference of 1.5e-4 is refused, loudly (the
    warning names the model), once per model, and scoring uses the full logits."""
    model = HookModel(scale=1.0)
    model.lm_head.weight.data *= 0.5 / _max_logit(model)
    assert _max_logit(model) < 1
    model.bump = 1.5 * logits.VERIFY_TOL
    with pytest.warns(UserWarning, match=r"^HookModel: hidden states"):
        got = lm.token_nlls(model, GPT_IDS, 16, 8)
    assert logits.Head(model, torch.as_tensor(GPT_IDS[:16])[None]).kind == "full"
    np.testing.assert_allclose(got, ref_nlls(model, GPT_IDS, 16, 8), rtol=0, atol=1e-5)
    with warnings.catch_warnings(action="error"):  # checked once per model: no second warning
        again = lm.token_nlls(model, GPT_IDS, 16, 8)
    np.testing.assert_array_equal(again, got)


def test_a_hook_is_checked_once_per_model_on_16_tokens_of_one_row():
    """The check is one forward pass of the model on the first 16 tokens of one row; a model
    already checked is not run in full again (for windows or for choices)."""
    model = HookModel("strict")
    with warnings.catch_warnings(action="error"):
        lm.token_nlls(model, GPT_IDS, 32, 8)
        assert model.calls == [(1, 16)]
        lm.token_nlls(model, GPT_IDS, 20, 5)
        items = random_items(3, 5, 256)
        lm.choice_lls(model, IdTok(), items)
    assert model.calls == [(1, 16)]
    fresh = HookModel("strict")
    with warnings.catch_warnings(action="error"):
        got = lm.choice_lls(fresh, IdTok(), items)  # the plain path, batches of several rows
    assert fresh.calls == [(1, 16)]
    for g, w in zip(got, oracle_lls(lambda t: (fresh(t),), items, 32), strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4)


def test_nlls_keeps_exactly_the_span_it_scores_and_fills_blocks():
    """Without a span from the caller, the last block runs at min(cols) .. max(cols) only; the
    head output goes in blocks as large as max_logits allows ([rows, V] elements)."""
    model = HookModel("strict")
    x = torch.as_tensor(np.random.default_rng(4).integers(0, 256, size=(3, 20)))
    rows, cols = torch.tensor([0, 0, 1, 2, 2, 1] * 2), torch.tensor([4, 9, 6, 7, 5, 8] * 2)
    tg = x[rows, cols + 1]
    with torch.inference_mode():
        head = logits.Head(model, x)
        want = -torch.log_softmax(model(x).double(), dim=-1)[rows, cols, tg].numpy()
        assert head.kind == "hook"
        model.keeps.clear()
        blocks = []
        model.lm_head.register_forward_hook(lambda m, a, o: blocks.append(a[0].shape[0]))
        got = head.nlls(x, rows, cols, tg, max_logits=4 * 65536)  # 1024 rows of V = 256
    assert model.keeps == [(4, 10)]
    assert blocks == [12]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


class SlotsHook:
    """A model object that cannot be weak-referenced (``__slots__``): checked every time."""

    __slots__ = ("m",)

    def __init__(self, m) -> None:
        self.m = m

    @property
    def lm_head(self):
        return self.m.lm_head

    def hidden(self, idx, keep=None):
        return self.m.hidden(idx, keep)

    def __call__(self, idx):
        return self.m(idx)


def test_a_model_that_cannot_be_weak_referenced_is_hooked():
    model = SlotsHook(HookModel("strict").eval())
    with warnings.catch_warnings(action="error"):
        got = lm.token_nlls(model, GPT_IDS, 16, 8)
        assert logits.Head(model, torch.as_tensor(GPT_IDS[:16])[None]).kind == "hook"
    np.testing.assert_allclose(got, ref_nlls(model, GPT_IDS, 16, 8), rtol=0, atol=1e-5)


class BuiltinHidden(nn.Module):
    """``hidden`` is a builtin without a signature (torch.embedding): no ``keep``."""

    def __init__(self, V: int = 23, D: int = 8) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(6)
        self.emb = nn.Parameter(torch.randn(V, D, generator=g))
        self.lm_head = nn.Linear(D, V)
        self.hidden = functools.partial(torch.embedding, self.emb)

    def forward(self, ids):
        return self.lm_head(torch.embedding(self.emb, ids))


def test_a_builtin_hidden_without_signature_is_used_without_keep():
    model = BuiltinHidden().eval()
    with warnings.catch_warnings(action="error"):
        head = logits.Head(model, torch.as_tensor(IDS[:16])[None])
        got = lm.token_nlls(model, IDS, 12, 5)
    assert head.kind == "hook" and not head.keep
    np.testing.assert_allclose(got, ref_nlls(model, IDS, 12, 5), rtol=0, atol=1e-5)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, None])
def test_max_logits_is_checked_in_every_entry_point(bad):
    """max_logits (the bound on one block of head output) is an int >= 1 wherever it is asked
    for; one element is a valid bound (blocks of one row)."""
    want = f"max_logits: expected an int >= 1 (elements of one block of head output), got {bad!r}"
    calls = (
        lambda: lm.token_nlls(Revealing(), np.arange(6), 4, 2, max_logits=bad),
        lambda: lm.eval_ppl(Revealing(), np.arange(6), 4, 2, max_logits=bad),
        lambda: lm.choice_lls(Table(), ByteTokenizer(), ITEMS, max_logits=bad),
    )
    for call in calls:
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == want
    one = lm.token_nlls(Revealing(), np.arange(6), 4, 2, max_logits=1)
    np.testing.assert_allclose(one, lm.token_nlls(Revealing(), np.arange(6), 4, 2), rtol=1e-12)
    assert lm.MAX_LOGITS == logits.MAX_LOGITS == 1 << 26
