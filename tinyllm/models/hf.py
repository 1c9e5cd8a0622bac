"""hf: a local Hugging Face causal LM as a tinyllm family (docs/definitions.md, the zoo).

A folder that ``transformers.AutoModelForCausalLM.from_pretrained`` reads: a ``config.json``
with a ``model_type`` (and no ``tl_arch``) and its weights in safetensors. The family's names:

* ``ARCH``, ``KIND``, :func:`load`, :func:`save`, :func:`config_from` (the zoo's config of
  such a folder), :func:`load_tokenizer` (the folder's own tokenizer). The rules of a folder
  (:mod:`tinyllm.models.hf_checks`, formats/checkpoint.md) are checked before transformers
  runs: safetensors only (a pickled ``pytorch_model.bin`` is refused, never read), no code of
  the folder ever runs (an ``auto_map`` is refused; ``trust_remote_code=False`` on every
  ``from_pretrained``), regular files only, a causal decoder-only config; after it, every
  weight of the architecture must have come from the files. transformers builds under one
  process-wide lock (:func:`loading`), so threads load at once, quietly unless debugging. A hub
  id ``org/name`` that is no local path is its snapshot in the local Hugging Face cache
  (:func:`resolve_folder`, offline; not cached: one line naming the cache searched);
* the lm kind's hook :func:`token_nlls` (strided windows, :mod:`tinyllm.windows`) and the
  model's context length, :func:`context_length`;
* :func:`views`: the model seen through the protocols the scoring code reads a model by --
  ``hidden`` + ``lm_head`` (:class:`tinyllm.logits.Head`), ``hidden_cached`` or a
  ``cache_engine()`` factory (:mod:`tinyllm.eval.lm.kvcache`) -- a ``GPT2LMHeadModel``'s GPT-2
  twin (:func:`gpt2_twin`: our GPT on the model's own weights) first, then the base model
  (:class:`BaseModelView`: its last hidden state, its output embeddings, its own KV cache
  through :class:`CacheEngine`);
* :func:`load_hf_gpt2` / :func:`export_hf`: ``GPT2LMHeadModel`` to and from
  :class:`tinyllm.models.gpt.Model` (a rename plus a transpose of the Conv1D weights, which HF
  stores ``[in, out]`` where ``nn.Linear`` stores ``[out, in]``).

There is no ``Config``, ``Model`` or ``train``: these models are trained elsewhere and scored as
they are. Like every family, this module never imports :mod:`tinyllm.eval`; the instrument asks
it for :func:`views` of a model it is given. ``transformers`` is imported only where a Hugging
Face model is built or read, under :func:`loading`: it is an optional dependency, and importing
the families stays fast.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tinyllm import device as devices
from tinyllm import windows
from tinyllm.checkpoint import CONFIG_NAME, CheckpointError
from tinyllm.models import gpt, hf_checks
from tinyllm.models.hf_checks import (
    UNSAFE_WEIGHTS,
    WEIGHTS_INDEX,
    NotCachedError,
    RemoteCodeError,
    check_weights,
    hub_cache_dir,
    is_hub_id,
    loading,
    resolve_folder,
)
from tinyllm.models.hf_views import (
    BaseModelView,
    CacheEngine,
    attention_window,
    cache_kv,
    last_hidden,
    takes_logits_to_keep,
)

__all__ = [
    "ARCH",
    "CTX_KEYS",
    "KIND",
    "TOKENIZER_FILES",
    "UNSAFE_WEIGHTS",
    "WEIGHTS_INDEX",
    "WINDOWED",
    "BaseModelView",
    "CacheEngine",
    "attention_window",
    "cache_kv",
    "check_weights",
    "config_from",
    "context_length",
    "export_hf",
    "gpt2_twin",
    "last_hidden",
    "load",
    "loading",
    "load_hf_gpt2",
    "load_tokenizer",
    "MissingTokenizerError",
    "NotCachedError",
    "RemoteCodeError",
    "hub_cache_dir",
    "is_hub_id",
    "resolve_folder",
    "save",
    "takes_logits_to_keep",
    "token_nlls",
    "views",
]

ARCH = "hf"
KIND = "lm"
WINDOWED = True  # token_nlls scores strided windows (tinyllm.windows.resolve_windows)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
CTX_KEYS = windows.CTX_KEYS
"""The config fields that give a context length, in the order lm-eval reads them."""


class MissingTokenizerError(ValueError):
    """A Hugging Face folder with none of :data:`TOKENIZER_FILES`."""


# ---------------------------------------------------------------------------------- loading


def config_from(doc: Any) -> dict | None:
    """The zoo's config of a folder whose parsed ``config.json`` is ``doc``: for a Hugging Face
    config (an object with a string ``model_type`` and no ``tl_arch``)
    ``{"tl_arch": "hf", "format_version": 1, "config": doc}``, else None.

    Example: ``config_from({"model_type": "gpt2"})["tl_arch"]`` -> ``"hf"``.
    """
    if isinstance(doc, dict) and "tl_arch" not in doc and isinstance(doc.get("model_type"), str):
        return {"tl_arch": ARCH, "format_version": 1, "config": doc}
    return None


def load(
    path: str | os.PathLike,
    *,
    device: Any = "cpu",
    dtype: Any = "auto",
    quiet: bool | None = None,
) -> nn.Module:
    """The causal LM in the folder ``path`` (or the hub id ``org/name`` cached locally,
    :func:`resolve_folder`), in eval mode, on ``device`` in ``dtype``:
    ``AutoModelForCausalLM.from_pretrained(path, local_files_only=True, use_safetensors=True,
    trust_remote_code=False)``, under the rules of :mod:`tinyllm.models.hf_checks`:

    * before transformers is called (:func:`~tinyllm.models.hf_checks.check_folder`): the
      folder holds regular files only (a FIFO is refused, never opened); ``config.json`` is a
      JSON object with a string ``model_type`` and positive sizes; no config has an
      ``auto_map`` (:class:`RemoteCodeError`: no code from a model folder ever runs, stdin is
      never read); the weights are safetensors (a folder with only ``pytorch_model.bin`` is
      refused, never unpickled) whose headers safetensors accepts;
    * the config is a causal decoder-only LM (:func:`~tinyllm.models.hf_checks.check_causal`:
      an encoder such as BERT or an encoder-decoder such as BART or T5 is refused);
    * the files hold every weight the architecture has, with the config's shapes, and nothing
      else (:func:`~tinyllm.models.hf_checks.check_loading_info`; a tied output head absent
      from the files is fine): never a randomly initialised weight.

    Each refusal is a :class:`tinyllm.checkpoint.CheckpointError` (a ValueError) naming the
    file. Loading runs under :func:`loading`, the one process-wide lock of transformers'
    loads, so any number of threads may load at once; ``quiet`` (None: unless
    ``TINYLLM_DEBUG``) keeps transformers' progress bars and load reports off meanwhile.

    ``device`` and ``dtype`` follow the one rule of :mod:`tinyllm.device` (the CLI's and the
    zoo's): ``device`` is ``auto | cpu | cuda | cuda:N | mps`` (``"auto"``: cuda when available,
    else cpu; default cpu), ``dtype`` is ``auto | float32 | bfloat16 | float16`` or a torch
    dtype (``"auto"``, the default: float32 on CPU, so half-precision weights are scored in
    float32; on an accelerator the checkpoint's own bfloat16 / float16, else float32). ``dtype
    = None`` keeps the checkpoint's own dtype on any device.
    """
    d = resolve_folder(path)
    hf_checks.check_folder(d)
    dev = devices.resolve_device(device)
    with loading(quiet) as tf:
        try:
            hc = tf.AutoConfig.from_pretrained(
                str(d), local_files_only=True, trust_remote_code=False
            )
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise CheckpointError(
                f"{d / CONFIG_NAME}: expected a config transformers reads, got: {e}"
            ) from None
        hf_checks.check_causal(hc, d / CONFIG_NAME)
        kw: dict = {}
        if dtype is not None:
            stored = None
            if dtype == "auto" and dev.type != "cpu":  # only an accelerator reads the stored dtype
                stored = getattr(hc, "dtype", None) or getattr(hc, "torch_dtype", None)
            kw["dtype"] = devices.resolve_dtype(dtype, dev, stored)
        model, info = tf.AutoModelForCausalLM.from_pretrained(
            str(d),
            config=hc,
            local_files_only=True,
            use_safetensors=True,
            trust_remote_code=False,
            output_loading_info=True,
            ignore_mismatched_sizes=True,  # a mismatch is refused below, naming its keys
            **kw,
        )
        hf_checks.check_loading_info(info, model, d)
    model.to(dev)
    model.eval()
    return model


def save(model: nn.Module, path: str | os.PathLike) -> Path:
    """Write ``model`` (a transformers ``PreTrainedModel``) as the folder ``path``: config.json
    and safetensors weights, as :func:`load` reads them. Returns the folder."""
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    with loading():
        model.save_pretrained(str(d), safe_serialization=True)
    return d


def load_tokenizer(path: str | os.PathLike, *, quiet: bool | None = None) -> Any:
    """The folder's own tokenizer: ``AutoTokenizer.from_pretrained(path, local_files_only=True,
    trust_remote_code=False)`` under :func:`loading` (thread-safe, quiet unless debugging);
    ``path`` may be a hub id cached locally, as for :func:`load`.

    Raises MissingTokenizerError when the folder has none of :data:`TOKENIZER_FILES`;
    :class:`RemoteCodeError` before transformers is called when its ``tokenizer_config.json``
    or ``config.json`` has an ``auto_map`` (a tokenizer of the folder's own code); a
    CheckpointError for a FIFO or a device in the folder (never opened); ValueError naming
    the folder for a tokenizer transformers cannot read.
    """
    d = hf_checks.check_files(resolve_folder(path))
    if not any((d / name).is_file() for name in TOKENIZER_FILES):
        raise MissingTokenizerError(
            f"{path}: expected a tokenizer in the folder (one of {list(TOKENIZER_FILES)}), got none"
        )
    hf_checks.refuse_code(d)
    with loading(quiet) as tf:
        try:
            return tf.AutoTokenizer.from_pretrained(
                str(d), local_files_only=True, trust_remote_code=False
            )
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: expected a readable tokenizer, got: {e}") from None


# ---------------------------------------------------------------------------------- scoring


def context_length(model: Any, at_least: int = 1) -> int | None:
    """The context length in ``model.config``: the first of :data:`CTX_KEYS` that is an int
    ``>= at_least``, or None when none is (or there is no config).

    Example: a config with ``n_positions=None, max_position_embeddings=1, n_ctx=12`` -> 1, and
    12 with ``at_least=2``.
    """
    found = windows.config_context(getattr(model, "config", None), at_least)
    return None if found is None else found[1]


def token_nlls(
    model: Any,
    ids: Any,
    ctx_len: int | None = None,
    stride: int | None = None,
    *,
    batch_size: int | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> np.ndarray:
    """NLL in nats of tokens 1..n-1 of ``ids``: ``float64[n-1]``, by the strided windows of
    docs/definitions.md, strided perplexity (:func:`tinyllm.windows.token_nlls`, through :func:`views`).

    Windows by :func:`tinyllm.windows.window_plan`: ``ctx_len`` default the model's context
    (:func:`tinyllm.windows.model_context`: a window holds 2 tokens at least) and at most that,
    ``stride`` default ``max(1, ctx_len // 2)``. The ids are the model's token ids: its own tokenizer's
    (:func:`tinyllm.eval.text.read_lm_tokens`), or tinyllm's byte ids (formats/tokens-bin.md)
    for a folder without a tokenizer; the vocabulary must hold all 256 byte ids either way.
    ``batch_size`` and ``progress(done, total)`` go to the windows. The model runs where its
    parameters are (:func:`tinyllm.device.model_device`).

    Raises ValueError for a vocabulary under 256 ids, a config without a context length, or a
    ``ctx_len`` over the model's (the message names the model's class and its config field).
    """
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    if vocab < 256:
        raise ValueError(
            f"hf model: expected a vocabulary of at least 256 ids (the data are byte ids "
            f"0..255), got vocab_size={vocab}"
        )
    plan = windows.window_plan(model, ctx_len, stride, name=ARCH)
    c, s = plan.ctx_len, plan.stride
    with torch.inference_mode():
        return windows.token_nlls(model, ids, c, s, batch_size, progress, views=views(model))


# ------------------------------------------------------------------ the views of a model


def views(model: Any) -> list[tuple[str, Any]]:
    """How the scoring code may read a Hugging Face causal LM, in the order to try:
    ``("twin", gpt2_twin(model))`` for a ``GPT2LMHeadModel`` our GPT implements (it offers
    ``hidden`` + ``lm_head`` and ``hidden_cached``), then ``("hf", BaseModelView(model))`` when
    the model has a ``base_model`` other than itself: the hidden-state hook, the model's own
    ``logits_to_keep`` where its forward takes it, and its own KV cache.
    ``[]`` for a model without ``get_output_embeddings()``: not a Hugging Face causal LM. Each
    view is checked against the model's own outputs before it is used
    (:class:`tinyllm.logits.Head`, :func:`tinyllm.eval.lm.kvcache.cache_engine`).
    """
    if not callable(getattr(model, "get_output_embeddings", None)):
        return []
    out: list[tuple[str, Any]] = []
    twin = gpt2_twin(model)
    if twin is not None:  # a GPT2LMHeadModel run by our GPT, on its own weights
        out.append(("twin", twin))
    base = getattr(model, "base_model", None)
    if isinstance(base, nn.Module) and base is not model:
        out.append(("hf", BaseModelView(model)))
    return out


# ---------------------------------------------------------------------- the GPT-2 twin

_TWINS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # HF model -> (weights, twin)


def _weights_key(model: nn.Module) -> tuple:
    """What a twin built from ``model`` depends on: each parameter's storage, dtype and shape."""
    return tuple((p.data_ptr(), p.dtype, tuple(p.shape)) for p in model.parameters())


def gpt2_twin(model: Any) -> gpt.Model | None:
    """Our GPT (:class:`tinyllm.models.gpt.Model`) computing a Hugging Face ``GPT2LMHeadModel``'s
    function on the very same weight tensors (:func:`load_hf_gpt2` with ``share=True``: views,
    nothing copied), or None for any other model or a GPT-2 variant we do not implement.

    Why: on CPU our GPT runs GPT-2's tanh GELU as one fused kernel where HF runs five
    element-wise ops, it has a KV cache that scores several choices per row and it runs the last
    block only where strided perplexity scores. The twin is rebuilt when the model's parameters
    change (another tensor, dtype or shape); the scoring paths use it only after it reproduced
    the model's own logits (:class:`tinyllm.logits.Head`,
    :func:`tinyllm.eval.lm.kvcache.cache_engine`), else they fall back to the model itself.

    Example: ``gpt2_twin(GPT2LMHeadModel(GPT2Config(n_layer=2)))`` -> a ``gpt.Model`` whose
    ``lm_head(hidden(x))`` equals the HF model's logits to float32 rounding.
    """
    tf = sys.modules.get("transformers")  # an HF model means transformers is imported
    cls = getattr(tf, "GPT2LMHeadModel", None) if tf is not None else None
    if cls is None or not isinstance(model, cls):
        return None
    key = _weights_key(model)
    with suppress(TypeError):
        got = _TWINS.get(model)
        if got is not None and got[0] == key:
            return got[1]
    try:
        twin = load_hf_gpt2(model, share=True)
    except (ValueError, TypeError, KeyError, RuntimeError):  # a variant we do not implement
        twin = None
    with suppress(TypeError):
        _TWINS[model] = (key, twin)
    return twin


# HF activation_function -> ours; "gelu_new" and "gelu_pytorch_tanh" are both the tanh form
_HF_ACT = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
_OUR_ACT = {"gelu_tanh": "gelu_new", "gelu": "gelu"}
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def _hf_name(name: str) -> str:
    """Our parameter name -> GPT2LMHeadModel's."""
    return name if name == "lm_head.weight" else "transformer." + name


def _is_conv1d(name: str) -> bool:
    return name.endswith(_CONV1D)


def _check_hf_config(hc) -> None:
    where = f"load_hf_gpt2({getattr(hc, 'name_or_path', '') or 'model'})"
    if getattr(hc, "model_type", None) != "gpt2":
        raise ValueError(f"{where}: expected a GPT-2 model, got model_type {hc.model_type!r}")
    if hc.activation_function not in _HF_ACT:
        raise ValueError(
            f"{where}: expected activation_function in {sorted(_HF_ACT)}, "
            f"got {hc.activation_function!r}"
        )
    checks = [
        ("n_inner", hc.n_inner in (None, 4 * hc.n_embd), f"None or {4 * hc.n_embd}"),
        ("layer_norm_epsilon", hc.layer_norm_epsilon == gpt.LN_EPS, str(gpt.LN_EPS)),
        ("scale_attn_weights", bool(hc.scale_attn_weights), "True"),
        ("scale_attn_by_inverse_layer_idx", not hc.scale_attn_by_inverse_layer_idx, "False"),
        ("add_cross_attention", not hc.add_cross_attention, "False"),
    ]
    for key, ok, want in checks:
        if not ok:
            raise ValueError(f"{where}: expected {key} = {want}, got {getattr(hc, key)!r}")


def load_hf_gpt2(model_or_dir, *, share: bool = False) -> gpt.Model:
    """Convert a ``transformers`` ``GPT2LMHeadModel`` (or a local folder holding one, read with
    ``local_files_only=True``) into a :class:`tinyllm.models.gpt.Model` whose logits equal HF's
    (float32, to 1e-5).

    HF's Conv1D weights are ``[in, out]`` and are transposed for ``nn.Linear``; the activation
    is taken from ``activation_function`` ("gelu_new" -> "gelu_tanh"); dropout is set to 0.
    Architectural variants we do not implement (another LayerNorm eps, ``n_inner`` != 4D,
    unscaled or layer-scaled attention, cross-attention) are refused with a ValueError.

    A folder is read by :func:`load` (safetensors weights only: one with only
    ``pytorch_model.bin`` is a CheckpointError, never unpickled; no code of the folder runs).

    ``share=True`` copies nothing: every parameter of the result is a view of the HF model's
    own float32 tensor (a Conv1D weight seen transposed, so ``F.linear`` runs the same
    ``x @ W`` as HF's ``addmm``), built without initializing weights, so it costs milliseconds
    whatever the model's size and follows in-place changes of HF's weights. For inference only
    (the views are not trained); a model that is not float32 is refused with a ValueError.
    """
    # a folder: every rule of load (safetensors only, no code of the folder, all its weights)
    hf = load(model_or_dir) if isinstance(model_or_dir, str | os.PathLike) else model_or_dir
    hc = getattr(hf, "config", None)
    if hc is None or not callable(getattr(hf, "state_dict", None)):
        raise TypeError(
            f"load_hf_gpt2: expected a GPT2LMHeadModel or a folder, got {type(hf).__name__}"
        )
    _check_hf_config(hc)
    cfg = gpt.Config(
        vocab_size=hc.vocab_size,
        block_size=hc.n_positions,
        n_layer=hc.n_layer,
        n_head=hc.n_head,
        n_embd=hc.n_embd,
        dropout=0.0,
        bias=True,  # Conv1D and LayerNorm always carry biases
        tie_weights=bool(getattr(hc, "tie_word_embeddings", True)),
        activation=_HF_ACT[hc.activation_function],
    )
    if share:
        with torch.device("meta"):  # the structure only: no memory, no random init
            model = gpt.Model(cfg)
    else:
        model = gpt.Model(cfg)
    src = hf.state_dict()
    ours = {}
    for name in gpt.stored_tensors(model):
        key = _hf_name(name)
        if key not in src:
            raise ValueError(f"load_hf_gpt2: expected tensor {key!r} in the HF model, not found")
        t = src[key].detach()
        if share and (t.dtype != torch.float32 or t.device.type != "cpu"):
            raise ValueError(
                f"load_hf_gpt2(share=True): expected float32 CPU tensors, got {key!r} as "
                f"{t.dtype} on {t.device}"
            )
        t = t.to(torch.float32)
        ours[name] = t.t() if _is_conv1d(name) else t  # Conv1D [in, out] -> Linear [out, in]
    if cfg.tie_weights:
        ours["lm_head.weight"] = ours["wte.weight"]
    model.load_state_dict(ours, strict=True, assign=share)  # share: the views themselves
    if share and cfg.tie_weights:
        model.lm_head.weight = model.wte.weight  # one Parameter again, as gpt.Model() ties it
    model.eval()
    return model


def _hf_config(tf: Any, cfg: gpt.Config):
    return tf.GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.block_size,
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_inner=None,
        activation_function=_OUR_ACT[cfg.activation],
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout,
        layer_norm_epsilon=gpt.LN_EPS,
        tie_word_embeddings=cfg.tie_weights,
        # GPT-2's 50256 is outside a byte vocabulary; a byte model has no special tokens
        bos_token_id=None,
        eos_token_id=None,
    )


def export_hf(model: gpt.Model, directory: str | os.PathLike) -> Path:
    """Write ``directory`` as a Hugging Face GPT-2 folder (config.json + model.safetensors)
    that ``transformers.AutoModelForCausalLM.from_pretrained(directory, local_files_only=True)``
    loads as a ``GPT2LMHeadModel`` with the same logits (float32, to 1e-5) as our
    :class:`tinyllm.models.gpt.Model`.

    A model built with ``bias=False`` is exported with zero biases, which computes the same
    function. A config that GPT-2 cannot express is refused with a ValueError.
    """
    cfg = model.cfg
    if cfg.activation not in _OUR_ACT:  # guards a future activation without an HF twin
        raise ValueError(
            f"export_hf: expected activation in {sorted(_OUR_ACT)} (GPT-2 has no "
            f"{cfg.activation!r}), got {cfg.activation!r}"
        )
    with loading() as tf:  # transformers' import and initialisation: process-wide state
        hf = tf.GPT2LMHeadModel(_hf_config(tf, cfg))
    target = hf.state_dict()
    sd = model.state_dict()
    out = {}
    for key, ref in target.items():
        name = key.removeprefix("transformer.")
        if name in sd:
            t = sd[name].detach().to(torch.float32)
            out[key] = t.t() if _is_conv1d(name) else t  # Linear [out, in] -> Conv1D [in, out]
        elif name.endswith(".bias"):
            out[key] = torch.zeros_like(ref)  # bias=False: a zero bias is the same function
        else:
            raise ValueError(f"export_hf: no source for GPT-2 tensor {key!r}")
    hf.load_state_dict(out, strict=True)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    with loading():
        hf.save_pretrained(str(d), safe_serialization=True)
    return d
