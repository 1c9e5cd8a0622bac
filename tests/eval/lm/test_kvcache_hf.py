"""The instrument's cached multiple choice on Hugging Face models: tinyllm.models.hf.CacheEngine
(the "hf" engine of tinyllm/eval/lm/kvcache.py).

GPT-2's base model behind the forward signatures and outputs of other transformers versions,
scored through the engine against the one-choice-at-a-time oracle (lm_helpers.oracle_lls). The
cache layouts the engine reads (hf.cache_kv) are tested in tests/models/test_hf.py.
"""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest
from lm_helpers import IdTok, hf_gpt2_layer_scaled, oracle_lls, random_items
from torch import nn

from tinyllm.eval import lm

transformers = pytest.importorskip("transformers")


# -------------------------------------------------------------------------- CacheEngine layouts


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
