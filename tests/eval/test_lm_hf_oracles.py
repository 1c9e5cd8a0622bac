"""Oracle tests for the ways tinyllm/eval/lm.py drives a model it did not build.

Written from the surviving mutants of ``_Head``, ``_hf_hidden``, ``_hf_kv``, ``_HFCache``,
``hf_gpt2_twin``, ``_out_features``, ``_takes_keep`` and ``_call_logits`` (docs/mutation.md).
The oracles: the model's own full forward pass (logits -> float64 log-softmax, one window at a
time: test_lm.reference_nlls; one choice at a time: test_mc_cache.oracle_lls) on inputs where
the hook or cache path is really taken (asserted: its kind, no fallback warning); transformers
cache layouts of several versions built by hand from small tensors, whose (keys, values) per
layer are known exactly; heads of several kinds whose vocabulary size is known; and the
documented acceptance rule of a head-only hook (max |difference| <= 1e-4 * max(1, max |logit|),
on the first 16 tokens of one row, once per model, and for a ``keep`` hook also on the span
nlls() asks for).
"""

from __future__ import annotations

import functools
import sys
import types
import warnings

import numpy as np
import pytest
import torch
from test_lm import reference_nlls, tiny_gpt2  # same folder: pytest puts it on sys.path
from test_mc_cache import IdTok, hf_gpt2, hf_gpt2_layer_scaled, oracle_lls, our_gpt, random_items
from torch import nn

from tinyllm.eval import lm

transformers = pytest.importorskip("transformers")


def ref_nlls(fn, ids: np.ndarray, C: int, s: int) -> np.ndarray:
    """SPEC.md section 2 from ``fn(x)`` = full logits, one window per pass, float64."""
    return reference_nlls(lambda x: types.SimpleNamespace(logits=fn(x)), ids, C, s)


IDS = np.random.default_rng(7).integers(0, 23, size=60)


# ------------------------------------------------------------------------- _call_logits


def test_call_logits_reads_a_tensor_a_tuple_and_a_model_output():
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


# ------------------------------------------------------------------------------ _hf_kv


def _pairs(n_layer: int = 2):
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(1, 2, 3, 4, generator=g), torch.randn(1, 2, 3, 4, generator=g))
        for _ in range(n_layer)
    ]


def test_hf_kv_reads_every_transformers_cache_layout():
    """transformers >= 4.56: ``cache.layers[i].keys/.values``; 4.36 - 4.55:
    ``cache.key_cache[i]/.value_cache[i]``; before: a tuple of (k, v) per layer. Hand-built
    objects of exactly that shape (no other attribute, not iterable): the very tensors back."""
    pairs = _pairs()
    layouts = {
        "layers": types.SimpleNamespace(
            layers=[types.SimpleNamespace(keys=k, values=v) for k, v in pairs]
        ),
        "key_cache": types.SimpleNamespace(
            key_cache=[k for k, _ in pairs], value_cache=[v for _, v in pairs]
        ),
        "legacy": tuple(pairs),
        "legacy-3": tuple((k, v, None) for k, v in pairs),  # some models add a third item
    }
    for name, cache in layouts.items():
        got = lm._hf_kv(cache)
        assert len(got) == len(pairs), name
        for (k, v), (gk, gv) in zip(pairs, got, strict=True):
            assert gk is k and gv is v, name


def test_hf_kv_of_the_installed_transformers_equals_its_cache_contents():
    """The layout this transformers produces, read back: per layer [B, H, S, Dh], equal to
    the keys/values of a second cache filled by hand with DynamicCache.update."""
    hf = hf_gpt2()
    x = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.inference_mode():
        out = hf.transformer(input_ids=x, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    got = lm._hf_kv(cache)
    assert len(got) == hf.config.n_layer
    again = transformers.DynamicCache()
    for i, (k, v) in enumerate(got):
        assert tuple(k.shape) == (1, 2, 5, 16) and tuple(v.shape) == (1, 2, 5, 16)
        again.update(k, v, i)
    torch.testing.assert_close(lm._hf_kv(again), got, rtol=0, atol=0)


def test_hf_kv_refuses_key_and_value_lists_of_different_lengths():
    """A malformed cache is an error, not silently fewer layers."""
    pairs = _pairs(3)
    cache = types.SimpleNamespace(key_cache=[k for k, _ in pairs], value_cache=[pairs[0][1]])
    with pytest.raises(ValueError):
        lm._hf_kv(cache)


# ------------------------------------------------------------------------ _out_features


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
    assert lm._out_features(nn.Linear(8, 50)) == 50
    assert lm._out_features(TiedHead(nn.Embedding(50, 8))) == 50
    assert lm._out_features(OnlyWeight(50, 8)) == 50
    assert lm._out_features(OnlyWeight(6, 40)) == 6


class WeightlessHeadGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = our_gpt(seed=2)
        self.lm_head = Weightless(self.inner.lm_head.weight.detach().clone())

    def hidden(self, idx, keep=None):
        return self.inner.hidden(idx, keep)

    def forward(self, idx):
        return self.lm_head(self.inner.hidden(idx))


def test_a_head_of_unknown_vocabulary_keeps_the_memory_bound(monkeypatch):
    """_MAX_LOGITS bounds a block of head output ([rows, V] elements, at least one row): with a
    head whose V cannot be read, blocks stay within it for the true V (256), and the NLLs are
    the full logits'."""
    model = WeightlessHeadGPT().eval()
    monkeypatch.setattr(lm, "_MAX_LOGITS", 1024)
    rows = []
    model.lm_head.register_forward_hook(
        lambda m, a, o: rows.append(a[0].shape[0]) if a[0].ndim == 2 else None
    )
    ids = np.random.default_rng(3).integers(0, 256, size=40)
    with warnings.catch_warnings(action="error"):
        got = lm.token_nlls(model, ids, 16, 8)
    assert lm._Head(model, torch.as_tensor(ids[:16])[None]).kind == "hook"
    assert sum(rows) == 39 and max(rows) * 256 <= max(1024, 256)
    np.testing.assert_allclose(got, ref_nlls(model, ids, 16, 8), rtol=0, atol=1e-5)


# ---------------------------------------------------------------- HF-style models by hand


class _Out:
    """A base-model output that is an object with ``last_hidden_state`` only (not a tuple)."""

    def __init__(self, h: torch.Tensor) -> None:
        self.last_hidden_state = h


class ToyBody(nn.Module):
    """A causal base model: embeddings, running mean, tanh(Linear). ``form`` is what its forward
    returns: "object" (an object with last_hidden_state) or "tuple" ((h, something else))."""

    def __init__(self, form: str = "object", V: int = 23, D: int = 8, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.form = form
        self.emb = nn.Embedding(V, D)
        self.mix = nn.Linear(D, D)
        with torch.no_grad():
            self.emb.weight.copy_(torch.randn(V, D, generator=g))
            self.mix.weight.copy_(torch.randn(D, D, generator=g))

    def states(self, ids: torch.Tensor) -> torch.Tensor:
        e = self.emb(ids)
        n = torch.arange(1, ids.shape[1] + 1, dtype=e.dtype)[None, :, None]
        return torch.tanh(self.mix(e.cumsum(1) / n))

    def forward(self, input_ids, use_cache=False):
        h = self.states(input_ids)
        return _Out(h) if self.form == "object" else (h, h + 1.0)


class ToyBodyNoCacheArg(ToyBody):
    """A base model whose forward takes no ``use_cache``: returns a 1-tuple (h,)."""

    def forward(self, input_ids):
        return (self.states(input_ids),)


class ToyLM(nn.Module):
    """A Hugging-Face-shaped causal LM: ``base_model`` + ``get_output_embeddings()``."""

    def __init__(self, body: nn.Module, V: int = 23, D: int = 8) -> None:
        super().__init__()
        self.base_model = body
        self.out = nn.Linear(D, V, bias=False)
        with torch.no_grad():
            self.out.weight.copy_(torch.randn(V, D, generator=torch.Generator().manual_seed(9)))

    def get_output_embeddings(self):
        return self.out

    def forward(self, ids):
        return self.out(self.base_model.states(ids))


class NoBaseLM(ToyLM):
    """Output embeddings but no base model: only the full logits can score it."""

    def __init__(self) -> None:
        super().__init__(ToyBody())
        self.body = self.base_model
        del self.base_model

    def forward(self, ids):
        return self.out(self.body.states(ids))


class NoHeadLM(ToyLM):
    """A base model but ``get_output_embeddings()`` is None: only the full logits."""

    def get_output_embeddings(self):
        return None


@pytest.mark.parametrize(
    "body",
    [ToyBody("object"), ToyBody("tuple"), ToyBodyNoCacheArg()],
    ids=["object", "tuple", "no-use_cache"],
)
def test_hf_hook_reads_the_base_models_last_hidden_state_in_every_form(body):
    """The "hf" hook (base model + output embeddings) on base models that return an object with
    last_hidden_state, a tuple (h, other) and (h,) from a forward without use_cache: it passes
    its check silently and gives the full logits' NLLs."""
    model = ToyLM(body).eval()
    x = torch.as_tensor(IDS[:16])[None]
    with warnings.catch_warnings(action="error"):
        assert lm._Head(model, x).kind == "hf"
        got = lm.token_nlls(model, IDS, 12, 5)
    np.testing.assert_allclose(got, ref_nlls(model, IDS, 12, 5), rtol=0, atol=1e-5)


@pytest.mark.parametrize("make", [NoBaseLM, lambda: NoHeadLM(ToyBody())], ids=["nobase", "nohead"])
def test_a_model_without_base_or_output_embeddings_is_scored_from_its_logits(make):
    model = make().eval()
    x = torch.as_tensor(IDS[:16])[None]
    with warnings.catch_warnings(action="error"):
        assert lm._Head(model, x).kind == "full"
        got = lm.token_nlls(model, IDS, 12, 5)
    np.testing.assert_allclose(got, ref_nlls(model, IDS, 12, 5), rtol=0, atol=1e-5)


def test_hf_hidden_runs_the_base_model_without_a_kv_cache():
    """_hf_hidden's documented contract: the last hidden state, no KV cache built."""
    hf = hf_gpt2_layer_scaled()
    x = torch.tensor([[5, 3, 9, 2, 7, 1]])
    outs = []
    hf.transformer.register_forward_hook(lambda m, a, o: outs.append(o))
    with torch.inference_mode():
        h = lm._hf_hidden(hf.transformer, x)
        want = hf.transformer(input_ids=x, use_cache=False).last_hidden_state
    torch.testing.assert_close(h, want, rtol=0, atol=0)
    assert getattr(outs[0], "cache", None) is None
    assert getattr(outs[0], "past_key_values", None) is None


def test_hf_gpt2_twin_without_transformers_gpt2_is_none(monkeypatch):
    """transformers not imported, or a build without GPT2LMHeadModel: no twin, and a
    Hugging-Face-shaped model is still scored through its own hidden states."""
    model = ToyLM(ToyBody()).eval()
    x = torch.as_tensor(IDS[:16])[None]
    monkeypatch.setitem(sys.modules, "transformers", types.ModuleType("transformers"))
    assert lm.hf_gpt2_twin(model) is None
    assert lm.hf_gpt2_twin(hf_gpt2()) is None
    monkeypatch.delitem(sys.modules, "transformers")
    assert lm.hf_gpt2_twin(model) is None
    with warnings.catch_warnings(action="error"):
        assert lm._Head(model, x).kind == "hf"
        got = lm.token_nlls(model, IDS, 12, 5)
    np.testing.assert_allclose(got, ref_nlls(model, IDS, 12, 5), rtol=0, atol=1e-5)


def test_a_steered_gpt2_is_scored_by_its_own_hidden_states_silently():
    """A GPT-2 with a forward hook on its final norm (activation steering): our GPT on its
    weights (the twin) does not see the hook and is refused, silently, as the next hook, HF's
    own hidden states, reproduces the logits."""
    hf = tiny_gpt2(seed=5)
    hf.transformer.ln_f.register_forward_hook(lambda m, a, o: o + 0.25)
    ids = np.random.default_rng(5).integers(0, 97, size=70)
    assert lm.hf_gpt2_twin(hf) is not None
    with warnings.catch_warnings(action="error"):
        assert lm._Head(hf, torch.as_tensor(ids[:16])[None]).kind == "hf"
        got = lm.token_nlls(hf, ids, 32, 12)
    np.testing.assert_allclose(got, reference_nlls(hf, ids, 32, 12), rtol=0, atol=1e-5)


# ------------------------------------------------------- head-only hooks and their check


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
            head = lm._Head(model, torch.as_tensor(GPT_IDS[:ctx_len])[None])
        assert head.kind == "hook" and head.keep
        np.testing.assert_allclose(got, ref_nlls(fn, GPT_IDS, ctx_len, 1), rtol=0, atol=1e-5)


@pytest.mark.parametrize("mode, ctx_len", [("ignores_start", 3), ("inclusive", 16)])
def test_a_wrong_keep_hook_is_refused_with_a_warning(mode, ctx_len):
    """hidden(x) right, hidden(x, keep=...) wrong (a 3-token probe: the smallest with a kept
    span to check; or one position too many): refused, the NLLs are the full logits'."""
    model = HookModel(mode)
    with pytest.warns(UserWarning, match=r"^HookModel: hidden states \+ output head do not"):
        got = lm.token_nlls(model, GPT_IDS, ctx_len, 1)
    assert lm._Head(model, torch.as_tensor(GPT_IDS[:ctx_len])[None]).kind == "full"
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
    assert lm._Head(model, torch.as_tensor(ids[:16])[None]).kind == "full"
    np.testing.assert_allclose(got, ref_nlls(model, ids, 16, 8), rtol=0, atol=1e-5)


def _max_logit(model: HookModel) -> float:
    with torch.inference_mode():
        return float(model(torch.as_tensor(GPT_IDS[:16])[None]).abs().max())


def test_the_check_tolerance_is_relative_to_the_largest_logit():
    """|logits| up to M > 1: a difference of 0.3e-4 * M is accepted (relative tolerance)."""
    model = HookModel(scale=8.0)
    M = _max_logit(model)
    assert M > 20
    model.bump = 0.3 * lm._VERIFY_TOL * M
    with warnings.catch_warnings(action="error"):
        got = lm.token_nlls(model, GPT_IDS, 16, 8)
    assert lm._Head(model, torch.as_tensor(GPT_IDS[:16])[None]).kind == "hook"
    hook = lm.token_nlls(lambda t: model.lm_head(model.inner.hidden(t)), GPT_IDS, 16, 8)
    np.testing.assert_allclose(got, hook, rtol=0, atol=1e-5)  # the hook's numbers


def test_the_check_tolerance_is_absolute_below_logits_of_one():
    """|logits| < 1: the bound is 1e-4 itself; a difference of 1.5e-4 is refused, loudly (the
    warning names the model), once per model, and scoring uses the full logits."""
    model = HookModel(scale=1.0)
    model.lm_head.weight.data *= 0.5 / _max_logit(model)
    assert _max_logit(model) < 1
    model.bump = 1.5 * lm._VERIFY_TOL
    with pytest.warns(UserWarning, match=r"^HookModel: hidden states"):
        got = lm.token_nlls(model, GPT_IDS, 16, 8)
    assert lm._Head(model, torch.as_tensor(GPT_IDS[:16])[None]).kind == "full"
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


def test_nlls_keeps_exactly_the_span_it_scores_and_fills_blocks(monkeypatch):
    """Without a span from the caller, the last block runs at min(cols) .. max(cols) only; the
    head output goes in blocks as large as _MAX_LOGITS allows ([rows, V] elements)."""
    model = HookModel("strict")
    x = torch.as_tensor(np.random.default_rng(4).integers(0, 256, size=(3, 20)))
    rows, cols = torch.tensor([0, 0, 1, 2, 2, 1] * 2), torch.tensor([4, 9, 6, 7, 5, 8] * 2)
    tg = x[rows, cols + 1]
    with torch.inference_mode():
        head = lm._Head(model, x)
        want = -torch.log_softmax(model(x).double(), dim=-1)[rows, cols, tg].numpy()
        assert head.kind == "hook"
        model.keeps.clear()
        blocks = []
        model.lm_head.register_forward_hook(lambda m, a, o: blocks.append(a[0].shape[0]))
        monkeypatch.setattr(lm, "_MAX_LOGITS", 4 * 65536)  # 1024 rows of V = 256
        got = head.nlls(x, rows, cols, tg)
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
        assert lm._Head(model, torch.as_tensor(GPT_IDS[:16])[None]).kind == "hook"
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
        head = lm._Head(model, torch.as_tensor(IDS[:16])[None])
        got = lm.token_nlls(model, IDS, 12, 5)
    assert head.kind == "hook" and not head.keep
    np.testing.assert_allclose(got, ref_nlls(model, IDS, 12, 5), rtol=0, atol=1e-5)


# ---------------------------------------------------------------------- _HFCache layouts


class LayoutBase(nn.Module):
    """GPT-2's base model behind the forward signature and output of another transformers
    version: ``arg`` names the cache argument, ``out_attr`` the output's cache attribute."""

    out_attr = "past_key_values"

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def _run(self, cache, **kw):
        out = self.inner(cache=cache, **kw)
        return types.SimpleNamespace(
            last_hidden_state=out.last_hidden_state, **{self.out_attr: out.cache}
        )


class OldBase(LayoutBase):  # transformers 4.x: forward(past_key_values=), out.past_key_values
    def forward(
        self,
        input_ids,
        past_key_values=None,
        attention_mask=None,
        position_ids=None,
        use_cache=None,
    ):
        return self._run(
            past_key_values,
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=use_cache,
        )


class NewBase(LayoutBase):  # forward(cache=), out.cache only
    out_attr = "cache"

    def forward(
        self, input_ids, cache=None, attention_mask=None, position_ids=None, use_cache=None
    ):
        return self._run(
            cache,
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=use_cache,
        )


class MixedBase(NewBase):  # forward(cache=), but the output names it past_key_values
    out_attr = "past_key_values"


class LayoutLM(nn.Module):
    def __init__(self, base_cls) -> None:
        super().__init__()
        self.hf = hf_gpt2_layer_scaled(seed=2)
        self.base_model = base_cls(self.hf.transformer)

    def get_output_embeddings(self):
        return self.hf.lm_head

    def forward(self, ids):
        return self.hf(ids)


def _assert_hf_cache_path(model, seed: int) -> None:
    items = random_items(seed, 6, 97)
    with warnings.catch_warnings(
        action="error"
    ):  # the cached path must pass its own check silently
        got = lm.choice_lls(model, IdTok(), items)
    assert lm._CACHE_OK[model] == {"hf": True}
    for g, w in zip(got, oracle_lls(model, items, 32), strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4)


@pytest.mark.parametrize("base_cls", [OldBase, NewBase, MixedBase], ids=lambda c: c.__name__)
def test_hf_cache_drives_every_cache_argument_and_output_name(base_cls):
    _assert_hf_cache_path(LayoutLM(base_cls).eval(), 8)


def test_hf_cache_asks_for_the_cache_when_the_config_says_no():
    """A checkpoint saved with use_cache=False in its config still gets the cached path."""
    hf = hf_gpt2_layer_scaled(seed=3)
    hf.config.use_cache = False
    _assert_hf_cache_path(hf, 9)
