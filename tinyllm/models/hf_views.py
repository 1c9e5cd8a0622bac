"""How the instrument reads a Hugging Face causal LM: its views and its attention window.

* :class:`BaseModelView`: the base model's last hidden state and the output embeddings (the
  hidden-state hook), the model's own forward with ``logits_to_keep`` where it takes it
  (``keep_logits``: the head, with whatever the model does after it -- Gemma 2's logit
  soft-capping, a logit scale -- only at the scored positions) and its own KV cache
  (:class:`CacheEngine`);
* :func:`attention_window`: the sliding-window (or chunked) attention span a config declares,
  which decides by rule which multiple-choice inputs may be scored from the cache.

:func:`tinyllm.models.hf.views` puts them in order; this module imports nothing of the project
(transformers only inside :class:`CacheEngine`, an optional dependency).
"""

from __future__ import annotations

import inspect
from contextlib import suppress
from typing import Any

import torch
from torch import nn

WINDOW_KEYS = ("sliding_window", "attention_chunk_size")
"""Config fields that bound how far back a layer attends (Mistral, Qwen2, Gemma 2/3, Phi-3:
``sliding_window``; Llama 4: ``attention_chunk_size``)."""

LOCAL_LAYERS = ("sliding_attention", "chunked_attention")
"""The ``layer_types`` entries of a layer that attends within a window only."""

AFTER_HEAD = {"final_logit_softcapping": None, "logit_scale": 1.0, "logits_scaling": 1.0}
"""Config fields by which a causal LM transforms its logits after the output head (Gemma 2/3
soft-capping, Cohere's and Granite's scales), with the value that leaves them unchanged: the
head alone does not reproduce such a model, so its base model's cache is not used."""


def attention_window(model: Any) -> int | None:
    """The number of tokens a local-attention layer of ``model`` can see, by its config, or
    None when every layer attends to the whole context.

    The rule: the smallest positive int among :data:`WINDOW_KEYS` in the config (its text
    config for a multimodal one), unless the config says the window is off --
    ``use_sliding_window=False`` (Qwen2's switch) or a ``layer_types`` list without any of
    :data:`LOCAL_LAYERS`. A sequence of at most this many tokens is attended in full by every
    layer, so a cached and a plain pass over it compute the same function.

    Example: ``MistralConfig(sliding_window=16)`` -> 16; ``Qwen2Config(sliding_window=16)``
    (``use_sliding_window`` False by default) -> None; ``LlamaConfig()`` -> None.
    """
    hc = getattr(model, "config", None)
    get_text = getattr(hc, "get_text_config", None)
    if callable(get_text):
        with suppress(TypeError, ValueError, AttributeError):  # an old or partial config
            hc = get_text()
    if hc is None or getattr(hc, "use_sliding_window", True) is False:
        return None
    types = getattr(hc, "layer_types", None)
    if isinstance(types, list | tuple) and not any(t in LOCAL_LAYERS for t in types):
        return None
    spans = [getattr(hc, k, None) for k in WINDOW_KEYS]
    spans = [v for v in spans if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return min(spans) if spans else None


def takes_logits_to_keep(model: Any) -> bool:
    """Whether ``model.forward`` accepts ``logits_to_keep`` (transformers' causal LMs since
    4.45; ``num_logits_to_keep`` before is not used)."""
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return False


class BaseModelView:
    """A Hugging Face causal LM through its base model: ``hidden(ids)`` is the base model's
    last hidden state (:func:`last_hidden`), ``lm_head`` the output embeddings (None when the
    model has none: no head-only hook then), ``cache_engine()`` a :class:`CacheEngine`.

    When the model's forward takes ``logits_to_keep`` (:func:`takes_logits_to_keep`) the view
    also has ``keep_logits(ids, keep)``: ``model(input_ids=ids, logits_to_keep=positions,
    use_cache=False).logits``, the model's own logits ``[B, len(keep), V]`` at the positions of
    the slice ``keep`` only. :class:`tinyllm.logits.Head` tries the hidden-state hook first (it
    runs the head at exactly the scored rows), then these logits (they reproduce a model that
    transforms its logits after the head)."""

    def __init__(self, model: Any) -> None:
        self.model, self.base = model, model.base_model
        self.lm_head = model.get_output_embeddings()
        if takes_logits_to_keep(model):
            self.keep_logits = self._keep_logits

    def _keep_logits(self, ids: torch.Tensor, keep: slice) -> torch.Tensor:
        at = torch.arange(keep.start, keep.stop, device=ids.device)
        out = self.model(input_ids=ids, logits_to_keep=at, use_cache=False)
        return out.logits if hasattr(out, "logits") else out[0]

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        return last_hidden(self.base, ids)

    def cache_engine(self) -> CacheEngine:
        return CacheEngine(self.model)


def last_hidden(base: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Last hidden state ``[B, T, D]`` (after the final norm) of a Hugging Face base model, run
    without a KV cache; a base model whose forward takes no ``use_cache`` is called without it.
    """
    try:
        out = base(input_ids=ids, use_cache=False)
    except TypeError:  # a base model without a cache argument
        out = base(input_ids=ids)
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def cache_kv(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per-layer (keys, values) ``[B, H, S, Dh]`` of a Hugging Face cache, any recent version:
    ``cache.layers[i].keys/.values`` (transformers >= 4.56), ``cache.key_cache[i]`` /
    ``.value_cache[i]`` (4.36 - 4.55), or a tuple of ``(k, v, ...)`` per layer (before).
    Raises ValueError for key and value lists of different lengths."""
    if hasattr(cache, "layers"):
        return [(lay.keys, lay.values) for lay in cache.layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache, strict=True))
    return [(kv[0], kv[1]) for kv in cache]


class CacheEngine:
    """A Hugging Face causal LM through its base model's cache (``past_key_values``), driven as
    the instrument's cache engines are (:func:`tinyllm.eval.lm.scoring.cached_lls`): ``head``,
    ``prefill(x, lens)``, ``extend(state, rows, lens, y, pos, new_mask)``.

    The 4-d mask of ``extend`` is used by the model as given, with no sliding window applied:
    the instrument feeds it only inputs within :func:`attention_window` (a rule on the config,
    :func:`tinyllm.eval.lm.kvcache.fits_window`). A model that transforms its logits after the
    head (:data:`AFTER_HEAD`) is refused with a ValueError: its choices take the plain path; so
    is a base model whose forward takes no ``position_ids`` (the engine feeds each choice at its
    own positions after a padded context): one that places tokens by its attention mask
    (Bloom's and MPT's ALiBi) or has no attention cache at all (Mamba, RWKV)."""

    def __init__(self, model: Any) -> None:
        from transformers.cache_utils import DynamicCache  # optional: only for HF models

        hc = getattr(model, "config", None)
        for key, same in AFTER_HEAD.items():
            v = getattr(hc, key, same)
            if v is not None and v != same:
                raise ValueError(
                    f"{type(model).__name__}: expected logits straight from the output head, "
                    f"got {key}={v!r} (the cache engine runs the head alone)"
                )
        self.base, self.head, self._dyn = (
            model.base_model,
            model.get_output_embeddings(),
            DynamicCache,
        )
        params = inspect.signature(self.base.forward).parameters
        if "position_ids" not in params:
            raise ValueError(
                f"{type(self.base).__name__}: expected a forward that takes position_ids (the "
                "cache engine feeds each choice at its own positions), got none"
            )
        self.kw = "cache" if "cache" in params else "past_key_values"

    def prefill(self, x: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """``(h [Bc, D] at each context's last token, (per-layer keys/values, attention mask))``."""
        am = (torch.arange(x.shape[1], device=x.device)[None, :] < lens[:, None]).long()
        out = self.base(input_ids=x, attention_mask=am, use_cache=True)  # am [Bc, Lc]
        cache = getattr(out, self.kw, None) or getattr(out, "past_key_values", None)
        h = out.last_hidden_state  # [Bc, Lc, D]
        rows = torch.arange(h.shape[0], device=h.device)
        return h[rows, lens - 1], (cache_kv(cache), am)  # [Bc, D]

    def extend(
        self,
        state: Any,
        rows: torch.Tensor,
        lens: torch.Tensor,
        y: torch.Tensor,
        pos: torch.Tensor,
        new_mask: torch.Tensor,
    ) -> torch.Tensor:
        """Hidden states ``[Bq, Tq, D]`` of ``y`` fed at positions ``pos`` after the cached
        contexts ``rows`` (``lens`` tokens each, their padding masked), ``new_mask`` among the
        new tokens, through a fresh ``DynamicCache`` of the selected rows and a 4-d boolean
        attention mask."""
        kv, am = state
        cache = self._dyn()
        for i, (k, v) in enumerate(kv):
            cache.update(k.index_select(0, rows), v.index_select(0, rows), i)
        old = am.index_select(0, rows).bool()  # [Bq, S]: the context, not its padding
        Tq = y.shape[1]
        # a 4-d boolean mask [Bq, 1, Tq, S + Tq] is used by the model as given
        mask = torch.cat([old[:, None, :].expand(-1, Tq, -1), new_mask], dim=2)[:, None]
        out = self.base(
            input_ids=y, attention_mask=mask, position_ids=pos, use_cache=True, **{self.kw: cache}
        )
        return out.last_hidden_state
