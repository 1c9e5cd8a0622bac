"""tinyllm/eval/lm/kvcache.py, its Hugging Face part: hf_kv and HFCache.

transformers cache layouts of several versions built by hand from small tensors, whose
(keys, values) per layer are known exactly; GPT-2's base model behind the forward signatures
and outputs of other transformers versions, scored through HFCache against the one-choice-at-a-
time oracle (lm_helpers.oracle_lls).
"""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest
import torch
from lm_helpers import IdTok, hf_gpt2, hf_gpt2_layer_scaled, oracle_lls, random_items
from torch import nn

from tinyllm.eval import lm
from tinyllm.eval.lm import kvcache

transformers = pytest.importorskip("transformers")


# ----------------------------------------------------------------------------------------- hf_kv


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
        got = kvcache.hf_kv(cache)
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
    got = kvcache.hf_kv(cache)
    assert len(got) == hf.config.n_layer
    again = transformers.DynamicCache()
    for i, (k, v) in enumerate(got):
        assert tuple(k.shape) == (1, 2, 5, 16) and tuple(v.shape) == (1, 2, 5, 16)
        again.update(k, v, i)
    torch.testing.assert_close(kvcache.hf_kv(again), got, rtol=0, atol=0)


def test_hf_kv_refuses_key_and_value_lists_of_different_lengths():
    """A malformed cache is an error, not silently fewer layers."""
    pairs = _pairs(3)
    cache = types.SimpleNamespace(key_cache=[k for k, _ in pairs], value_cache=[pairs[0][1]])
    with pytest.raises(ValueError):
        kvcache.hf_kv(cache)


# ------------------------------------------------------------------------------- HFCache layouts


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
    assert lm.cache_verdicts(model) == {"hf": True}
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
