"""One model on one file: what `tinyllm eval ppl` and `tinyllm eval task` compute.

::

    out = score_ppl("val.tok", model="zoo/gpt")                 # or hf="path/to/hf-model"
    out["bpb"]   # {"value", "lo", "hi"} in bits per byte
    out = score_task("arc.jsonl", hf="path/to/hf-model", metric="acc_norm")
    out["value"], out["per_item"]

The model is a tinyllm lm checkpoint (``model``: a folder, or a one-file n-gram) or a local
Hugging Face causal LM folder (``hf``, safetensors only), opened by :func:`open_lm`. Our gpt and
Hugging Face models are scored with the instrument's strided windows (:func:`tinyllm.eval.lm.
eval_ppl`); the other lm families with their own per-token NLLs
(:func:`tinyllm.eval.lm.summarize_nlls`). Every refusal is a ValueError whose message names
the flag or file and says "expected X, got Y".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyllm.checkpoint import read_config, read_single_metadata
from tinyllm.console import Progress
from tinyllm.eval import lm
from tinyllm.models import FAMILIES
from tinyllm.models import hf as hf_family
from tinyllm.tokens import ByteTokenizer, read_tokens

BYTE_TOKENIZER = {"type": "byte", "vocab_size": 256}
"""The tokenizer of a checkpoint whose config.json names none (and of a one-file n-gram)."""

ProgressFactory = Callable[[str, int], ContextManager[Any]]
"""``progress(description, total)``: a context manager whose ``update(done, total=None)`` the
scoring calls (:class:`tinyllm.console.Progress` is one)."""


@dataclass
class LoadedLM:
    """A model opened from ``model`` or ``hf``, with what scoring needs to know about it."""

    model: Any
    arch: str
    family: Any  # the family module; None for a Hugging Face folder
    vocab_size: int | None
    ctx_len: int | None
    tokenizer: Any  # a tokenizer dict of config.json, or "hf"
    source: str

    @property
    def strided(self) -> bool:
        """Scored by the instrument's strided windows (gpt, Hugging Face), not family NLLs."""
        return self.family is None or self.arch == "gpt"


def open_lm(model: str | None = None, hf: str | None = None) -> LoadedLM:
    """Open exactly one of ``model`` (a tinyllm lm checkpoint) or ``hf`` (a local Hugging Face
    causal LM folder, in the folder's own dtype, safetensors only: a pickled ``.bin`` is never
    unpickled)."""
    if (model is None) == (hf is None):
        raise ValueError("expected exactly one of --model DIR or --hf DIR")
    if hf is not None:
        if not Path(hf).is_dir():
            raise ValueError(f"{hf}: expected a local Hugging Face model folder")
        try:
            m = hf_family.load(hf, dtype=None, quiet=True)
        except (OSError, ValueError) as e:
            raise ValueError(
                f"{hf}: expected a Hugging Face causal LM in safetensors, got: {e}"
            ) from None
        ctx = hf_family.context_length(m)
        return LoadedLM(m, hf_family.ARCH, None, m.config.vocab_size, ctx, "hf", str(hf))
    p = Path(model)
    if p.is_file():
        arch, tok = read_single_metadata(p)["tl_arch"], BYTE_TOKENIZER
    else:
        doc = read_config(p)
        arch, tok = doc["tl_arch"], doc.get("tokenizer") or BYTE_TOKENIZER
    family = FAMILIES.get(arch)
    if family is None:
        raise ValueError(f"{p}: unknown tl_arch {arch!r}; expected one of {sorted(FAMILIES)}")
    kind = getattr(family, "KIND", None)
    if kind != "lm":
        raise ValueError(f"{p}: expected a language model (kind lm), got {arch!r} of kind {kind!r}")
    m = family.load(p)
    cfg = getattr(m, "cfg", None)
    ctx = getattr(cfg, "ctx_len", None) or getattr(cfg, "block_size", None)
    return LoadedLM(m, arch, family, getattr(cfg, "vocab_size", None), ctx, tok, str(p))


def check_vocab(ids: np.ndarray, vocab_size: int | None, data: str, source: str) -> None:
    """Every id in the token file ``data`` must be < the model's vocabulary (read in chunks of
    4M ids, so a large file is not copied)."""
    if vocab_size is None or ids.size == 0:
        return
    top = max(int(ids[i : i + (1 << 22)].max()) for i in range(0, ids.size, 1 << 22))
    if top >= vocab_size:
        raise ValueError(
            f"{data}: expected token ids < {vocab_size} (the vocabulary of {source}), got id {top}"
        )


def _check_n_bytes(ids: np.ndarray, n_bytes: int, data: str) -> None:
    if n_bytes and n_bytes < ids.size - 1:
        # every scored token covers at least one byte of text: fewer bytes than tokens is a
        # wrong count, and would report bits per byte inflated by tokens/bytes
        raise ValueError(
            f"--n-bytes: expected at least the {ids.size - 1} scored tokens of {data} (each "
            f"token covers at least one byte), got {n_bytes}"
        )


def score_ppl(
    data: str,
    *,
    model: str | None = None,
    hf: str | None = None,
    ctx_len: int | None = None,
    stride: int | None = None,
    n_bytes: int = 0,
    batch_size: int | None = None,
    progress: ProgressFactory | None = None,
    note: Callable[[str], None] | None = None,
) -> dict:
    """Strided perplexity of the token file ``data`` (formats/tokens-bin.md) under one model.

    Strided models (gpt, Hugging Face): windows of ``ctx_len`` tokens (default: the model's
    context; at most that) every ``stride`` tokens (default ``C // 2``), ``batch_size`` windows
    per pass (default :data:`tinyllm.eval.lm.DEFAULT_BATCH_SIZE`); every token after the first
    is scored exactly once. Other lm families score with their own NLLs and their own context:
    ``ctx_len`` / ``stride`` are then ignored and ``note`` is told so. ``n_bytes``: UTF-8 bytes
    of the scored text (0: one token per byte), at least the scored tokens.

    Returns ``{"model", "arch", "data", "ctx_len", "stride"}`` (``None`` for a family's own
    NLLs) and :func:`tinyllm.eval.lm.summarize_nlls`' keys: ``n_tokens``, ``n_bytes``,
    ``sum_nll`` (nats), and ``nll`` (nats/token), ``ppl``, ``bpb`` (bits/byte), each
    ``{"value", "lo", "hi"}`` with its 95% interval.
    """
    progress = progress or functools.partial(Progress, quiet=True)
    ids = read_tokens(data, min_tokens=2)
    _check_n_bytes(ids, n_bytes, data)
    m = open_lm(model, hf)
    check_vocab(ids, m.vocab_size, data, m.source)
    out: dict = {"model": m.source, "arch": m.arch, "data": str(data)}
    if m.strided:
        c = ctx_len if ctx_len is not None else m.ctx_len
        if c is None:
            raise ValueError(f"{m.source}: context length unknown; pass --ctx-len")
        if m.ctx_len is not None and c > m.ctx_len:
            raise ValueError(
                f"--ctx-len: expected at most the model's context {m.ctx_len}, got {c}"
            )
        s = stride if stride is not None else max(1, c // 2)
        bs = batch_size if batch_size is not None else lm.DEFAULT_BATCH_SIZE
        with progress("scoring tokens", int(ids.size) - 1) as bar:
            res = lm.eval_ppl(m.model, ids, c, s, n_bytes, bs, progress=bar.update)
        out.update({"ctx_len": c, "stride": s})
    else:
        if (ctx_len is not None or stride is not None) and note is not None:
            note(f"note: --ctx-len/--stride ignored: {m.arch} scores with its own context")
        # the family's own NLLs come in one call: progress says when it starts and ends
        with progress(f"scoring tokens ({m.arch})", int(ids.size) - 1) as bar:
            nlls = m.family.token_nlls(m.model, ids)
            bar.update(len(nlls))
        res = lm.summarize_nlls(nlls, n_bytes)
        out.update({"ctx_len": None, "stride": None})
    out.update(res)
    return out


def _task_tokenizer(m: LoadedLM, tokenizer: str, hf: str | None) -> Any:
    """The byte tokenizer (asked for, or the checkpoint's), else the Hugging Face folder's."""
    if tokenizer == "byte" or isinstance(m.tokenizer, dict):
        if m.vocab_size is not None and m.vocab_size < 256:
            raise ValueError(
                f"{m.source}: expected a vocabulary of at least 256 for byte tokens, "
                f"got {m.vocab_size}"
            )
        return ByteTokenizer()
    try:  # an unreadable tokenizer is a ValueError naming it
        return hf_family.load_tokenizer(hf)
    except hf_family.MissingTokenizerError as e:
        raise ValueError(f"{e}; pass --tokenizer byte for a byte-level model") from None


TOKENIZERS = ("auto", "byte")
"""``tokenizer`` of :func:`score_task`: the checkpoint's / the Hugging Face folder's, or bytes."""


def score_task(
    task: str,
    *,
    model: str | None = None,
    hf: str | None = None,
    metric: str = "acc_norm",
    max_len: int | None = None,
    target_delimiter: str | None = None,
    tokenizer: str = "auto",
    seed: int = 0,
    n_boot: int = 1000,
    progress: ProgressFactory | None = None,
) -> dict:
    """Multiple-choice accuracy of one model on the task file ``task`` (formats/task-jsonl.md).

    ``metric``: ``acc`` (the choice of highest log-likelihood) or ``acc_norm`` (of highest LL
    per UTF-8 byte of the choice); ``max_len``: tokens the model reads, contexts cut from the
    left as lm-eval does (default: a strided model's own context); ``target_delimiter``: scored
    before each choice, overriding the task file's; ``tokenizer``: one of :data:`TOKENIZERS`.
    The interval is a percentile bootstrap of ``n_boot`` resamples from
    ``numpy.random.default_rng(seed)``.

    Returns ``{"model", "arch", "task", "metric", "value", "lo", "hi", "n", "seed", "n_boot",
    "per_item"}``: the fraction correct with its 95% interval over ``n`` items, and each item's
    0/1 score.
    """
    if metric not in lm.METRICS:
        raise ValueError(f"--metric: expected one of {list(lm.METRICS)}, got {metric!r}")
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"--tokenizer: expected one of {list(TOKENIZERS)}, got {tokenizer!r}")
    progress = progress or functools.partial(Progress, quiet=True)
    items = lm.read_task(task)
    m = open_lm(model, hf)
    tok = _task_tokenizer(m, tokenizer, hf)
    scorer = m.model if m.strided else lm.FamilyLM(m.model, m.family.token_nlls)
    with progress("scoring items", len(items)) as bar:
        res = lm.run_task(
            scorer,
            tok,
            items,
            metric,
            np.random.default_rng(seed),
            n_boot,
            max_len=max_len if max_len is not None else (m.ctx_len if m.strided else None),
            progress=bar.update,
            target_delimiter=target_delimiter,
        )
    out = {"model": m.source, "arch": m.arch, "task": str(task), "metric": metric}
    out.update(res.to_dict())
    out.update({"seed": seed, "n_boot": n_boot, "per_item": res.per_item.tolist()})
    return out
