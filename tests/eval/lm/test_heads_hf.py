"""The instrument on Hugging Face models: the views of tinyllm/models/hf.py (the GPT-2 twin, the
base model's hidden states) as the "twin" / "hf" hooks of tinyllm.logits.Head.

Oracles: the model's own full logits, one window at a time (lm_helpers.reference_nlls), for
transformers' GPT2LMHeadModel (random weights, no download), GPT-2 variants the twin cannot run,
and Hugging-Face-shaped models built by hand (base_model + get_output_embeddings()). The views'
own pieces (hf.last_hidden, hf.cache_kv, the GPT-2 conversion) are tested in
tests/models/test_hf.py.
"""

from __future__ import annotations

import sys
import types
import warnings

import numpy as np
import pytest
import torch
from lm_helpers import IDS, hf_gpt2, ref_nlls, reference_nlls, tiny_gpt2
from torch import nn

from tinyllm import logits
from tinyllm.eval import lm
from tinyllm.eval.lm import heads
from tinyllm.models import hf as hf_family

transformers = pytest.importorskip("transformers")


def _head(model, probe: torch.Tensor) -> logits.Head:
    """The head the instrument scores ``model`` with: its views (lm.heads.views) in order."""
    return logits.Head(model, probe, heads.views(model))


# ------------------------------------------------ transformers GPT-2: the twin and its fallbacks


class FullLogits(nn.Module):
    """A plain module returning logits: no hidden-state hook, so the full-logits path runs."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.inner(ids).logits


def test_hf_hidden_state_hook_equals_full_logits(gpt2, gpt2_ids):
    x = torch.as_tensor(gpt2_ids[:16])[None]
    assert _head(gpt2, x).kind == "twin"  # a GPT2LMHeadModel runs as our GPT on its weights
    assert _head(FullLogits(gpt2), x).kind == "full"
    hooked = lm.token_nlls(gpt2, gpt2_ids, 32, 12)
    full = lm.token_nlls(FullLogits(gpt2), gpt2_ids, 32, 12)
    np.testing.assert_allclose(hooked, full, rtol=0, atol=1e-5)
    # a plain function returning a tuple (logits, extra) is a model too
    as_tuple = lm.token_nlls(lambda ids: (gpt2(ids).logits, None), gpt2_ids, 32, 12)
    np.testing.assert_allclose(as_tuple, full, rtol=0, atol=1e-5)


def test_the_gpt2_twin_shares_the_hf_weights_and_follows_them(gpt2_ids):
    """hf.gpt2_twin: our GPT on views of the HF tensors (nothing copied); an in-place change of
    the HF weights shows in the twin, a replaced parameter rebuilds it; NLLs equal HF's."""
    hf = tiny_gpt2(seed=4)
    twin = hf_family.gpt2_twin(hf)
    w = hf.transformer.h[0].attn.c_attn.weight  # Conv1D [in, out]
    assert twin.h[0].attn.c_attn.weight.data_ptr() == w.data_ptr()
    assert hf_family.gpt2_twin(hf) is twin  # same tensors: the same twin
    ref = reference_nlls(hf, gpt2_ids, 32, 12)
    np.testing.assert_allclose(lm.token_nlls(hf, gpt2_ids, 32, 12), ref, rtol=0, atol=1e-5)
    with torch.no_grad():
        w.mul_(0.5)  # in place: the twin sees it
    ref2 = reference_nlls(hf, gpt2_ids, 32, 12)
    assert np.abs(ref2 - ref).max() > 1e-3
    np.testing.assert_allclose(lm.token_nlls(hf, gpt2_ids, 32, 12), ref2, rtol=0, atol=1e-5)
    hf.transformer.h[0].attn.c_attn.weight = nn.Parameter(w.detach().clone() * 2.0)
    assert hf_family.gpt2_twin(hf) is not twin  # another tensor: rebuilt
    ref3 = reference_nlls(hf, gpt2_ids, 32, 12)
    np.testing.assert_allclose(lm.token_nlls(hf, gpt2_ids, 32, 12), ref3, rtol=0, atol=1e-5)
    assert hf_family.gpt2_twin(FullLogits(hf)) is None  # not a GPT2LMHeadModel


def test_a_gpt2_variant_the_twin_cannot_run_uses_hfs_own_hidden_states(gpt2_ids):
    """Layer-scaled attention is a GPT-2 variant our GPT does not implement: no twin, the HF
    hook (base model + output embeddings) scores it, equal to the full logits."""
    hf = tiny_gpt2(seed=2)
    hf.config.scale_attn_by_inverse_layer_idx = True
    for block in hf.transformer.h:
        block.attn.scale_attn_by_inverse_layer_idx = True
    assert hf_family.gpt2_twin(hf) is None
    x = torch.as_tensor(gpt2_ids[:16])[None]
    assert _head(hf, x).kind == "hf"
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
    assert hf_family.gpt2_twin(odd) is not None  # built, but it fails the check against the logits
    with pytest.warns(UserWarning, match="do not reproduce"):
        got = lm.token_nlls(odd, gpt2_ids, 32, 12)
    np.testing.assert_allclose(got, reference_nlls(odd, gpt2_ids, 32, 12), rtol=0, atol=1e-5)


def test_no_warnings_on_the_hook_path(gpt2, gpt2_ids):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lm.token_nlls(gpt2, gpt2_ids, 16, 8)


def test_a_steered_gpt2_is_scored_by_its_own_hidden_states_silently():
    """A GPT-2 with a forward hook on its final norm (activation steering): our GPT on its
    weights (the twin) does not see the hook and is refused, silently, as the next hook, HF's
    own hidden states, reproduces the logits."""
    hf = tiny_gpt2(seed=5)
    hf.transformer.ln_f.register_forward_hook(lambda m, a, o: o + 0.25)
    ids = np.random.default_rng(5).integers(0, 97, size=70)
    assert hf_family.gpt2_twin(hf) is not None
    with warnings.catch_warnings(action="error"):
        assert _head(hf, torch.as_tensor(ids[:16])[None]).kind == "hf"
        got = lm.token_nlls(hf, ids, 32, 12)
    np.testing.assert_allclose(got, reference_nlls(hf, ids, 32, 12), rtol=0, atol=1e-5)


# ----------------------------------------------------------------------- HF-style models by hand


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
        assert _head(model, x).kind == "hf"
        got = lm.token_nlls(model, IDS, 12, 5)
    np.testing.assert_allclose(got, ref_nlls(model, IDS, 12, 5), rtol=0, atol=1e-5)


@pytest.mark.parametrize("make", [NoBaseLM, lambda: NoHeadLM(ToyBody())], ids=["nobase", "nohead"])
def test_a_model_without_base_or_output_embeddings_is_scored_from_its_logits(make):
    model = make().eval()
    x = torch.as_tensor(IDS[:16])[None]
    with warnings.catch_warnings(action="error"):
        assert _head(model, x).kind == "full"
        got = lm.token_nlls(model, IDS, 12, 5)
    np.testing.assert_allclose(got, ref_nlls(model, IDS, 12, 5), rtol=0, atol=1e-5)


def test_hf_gpt2_twin_without_transformers_gpt2_is_none(monkeypatch):
    """transformers not imported, or a build without GPT2LMHeadModel: no twin, and a
    Hugging-Face-shaped model is still scored through its own hidden states."""
    model = ToyLM(ToyBody()).eval()
    x = torch.as_tensor(IDS[:16])[None]
    monkeypatch.setitem(sys.modules, "transformers", types.ModuleType("transformers"))
    assert hf_family.gpt2_twin(model) is None
    assert hf_family.gpt2_twin(hf_gpt2()) is None
    monkeypatch.delitem(sys.modules, "transformers")
    assert hf_family.gpt2_twin(model) is None
    with warnings.catch_warnings(action="error"):
        assert _head(model, x).kind == "hf"
        got = lm.token_nlls(model, IDS, 12, 5)
    np.testing.assert_allclose(got, ref_nlls(model, IDS, 12, 5), rtol=0, atol=1e-5)
