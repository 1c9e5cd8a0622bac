"""One model on one file: what `tinyllm eval ppl` and `tinyllm eval task` compute.

::

    out = score_ppl("val.tok", model="zoo/gpt")                 # or hf="path/to/hf-model"
    out["bpb"]   # {"value", "lo", "hi"} in bits per byte
    out = score_task("arc.jsonl", hf="path/to/hf-model", metric="acc_norm")
    out["value"], out["per_item"]
    out = score_text("val.txt", hf="path/to/hf-model")         # the folder's own tokenizer
    out = compare_text("val.txt", "other-model", hf="path/to/hf-model")   # out["delta"], out["p"]

The model is a tinyllm lm checkpoint (``model``: a folder, or a one-file n-gram) or a local
Hugging Face causal LM folder (``hf``, safetensors only), opened by :func:`open_lm`. The families
scored in windows (gpt, hf) are scored with the instrument's strided windows
(:func:`tinyllm.eval.lm.eval_ppl`), their windows resolved by the one rule the zoo and the
families follow too (:func:`tinyllm.windows.resolve_windows`); the other lm families with their
own per-token NLLs (:func:`tinyllm.eval.lm.summarize_nlls`), and ``ctx_len`` / ``stride`` are an
error for them. Every refusal is a ValueError whose message names the flag or file and says
"expected X, got Y".
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyllm import device as devices
from tinyllm.checkpoint import CONFIG_NAME, read_config, read_single_metadata
from tinyllm.console import Progress
from tinyllm.eval import lm
from tinyllm.eval.text import (
    TextReader,
    load_tokenizer,
    own_tokenizer,
    ppl_over_docs,
    read_lm_tokens,
    summarize_docs,
    summarize_text,
    text_ppl,
)
from tinyllm.eval.text_compare import compare_on_text, unpaired_bpb
from tinyllm.eval.text_docs import DOC_SEP, read_doc_starts
from tinyllm.models import FAMILIES
from tinyllm.models import hf as hf_family
from tinyllm.tokens import ByteTokenizer, TextTokens, read_tokens, tokenizer_id
from tinyllm.windows import model_context, resolve_windows, scored_in_windows

BYTE_TOKENIZER = {"type": "byte", "vocab_size": 256}
"""The tokenizer of a checkpoint whose config.json names none (and of a one-file n-gram)."""

ProgressFactory = Callable[[str, int], ContextManager[Any]]
"""``progress(description, total)``: a context manager whose ``update(done, total=None)`` the
scoring calls (:class:`tinyllm.console.Progress` is one)."""

FLAGS = ("--ctx-len", "--stride")
"""The window options' names in this module's errors (:func:`tinyllm.windows.resolve_windows`)."""


@dataclass
class LoadedLM:
    """A model opened from ``model`` or ``hf``, with what scoring needs to know about it."""

    model: Any
    arch: str
    family: Any  # the family module; None for a Hugging Face folder
    vocab_size: int | None
    ctx_len: int | None  # the model's context (tinyllm.windows.model_context)
    tokenizer: Any  # a tokenizer dict of config.json, or "hf"
    source: str

    @property
    def windows_family(self) -> Any:
        """The family module whose window rule applies: ``family``, else the one named by
        ``arch`` (hf for a Hugging Face folder), else None (a model outside the families)."""
        return self.family if self.family is not None else FAMILIES.get(self.arch)

    @property
    def strided(self) -> bool:
        """Scored by the instrument's strided windows (:func:`tinyllm.windows.scored_in_windows`:
        gpt, Hugging Face, a plain callable), not by the family's own NLLs."""
        return scored_in_windows(self.windows_family)

    def run_task(
        self,
        tok: Any,
        items: Any,
        metric: str,
        rng: np.random.Generator,
        n_boot: int,
        max_len: int | None = None,
        **kw: Any,
    ) -> lm.Result:
        """:func:`tinyllm.eval.lm.run_task` on this model: a strided model scored as itself
        (``max_len`` default: its context), another through its family's ``token_nlls``."""
        scorer = self.model if self.strided else lm.FamilyLM(self.model, self.family.token_nlls)
        if max_len is None and self.strided:
            max_len = self.ctx_len
        return lm.run_task(scorer, tok, items, metric, rng, n_boot, max_len=max_len, **kw)


def open_lm(
    model: str | None = None,
    hf: str | None = None,
    *,
    device: Any = "auto",
    dtype: Any = "auto",
) -> LoadedLM:
    """Open exactly one of ``model`` (a tinyllm lm checkpoint) or ``hf`` (a local Hugging Face
    causal LM folder, safetensors only: a pickled ``.bin`` is never unpickled), on ``device`` in
    ``dtype`` by the one rule of :mod:`tinyllm.device` that the zoo follows too (``"auto"``:
    cuda when available, else cpu; float32 on CPU whatever the checkpoint stores)."""
    if (model is None) == (hf is None):
        raise ValueError("expected exactly one of --model DIR or --hf DIR")
    if hf is not None:
        hf = str(hf_family.resolve_folder(hf))  # a hub id: its snapshot in the local cache
        if not Path(hf).is_dir():
            raise ValueError(f"{hf}: expected a local Hugging Face model folder")
        devices.resolve_device(device)  # a bad --device is its own error, not a load failure
        devices.resolve_dtype(dtype)
        try:
            m = hf_family.load(hf, device=device, dtype=dtype, quiet=True)
        except (OSError, ValueError) as e:
            raise ValueError(
                f"{hf}: expected a Hugging Face causal LM in safetensors, got: {e}"
            ) from None
        ctx = model_context(m)
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
    m = place_checkpoint(family.load(p), arch, device, dtype, str(p))
    cfg = getattr(m, "cfg", None)
    vocab = getattr(cfg, "vocab_size", None)
    return LoadedLM(m, arch, family, vocab, model_context(m), tok, str(p))


def place_checkpoint(
    model: Any, arch: str, device: Any = "auto", dtype: Any = "auto", source: str = ""
) -> Any:
    """One of our checkpoints on ``device`` in ``dtype``, the rule the zoo follows too: a family
    scored in windows (:func:`tinyllm.windows.scored_in_windows`: the instrument's windows move
    every input to the model's device) by :func:`tinyllm.device.place` (``"auto"``: cuda when
    available, else cpu; float32 on CPU); every other family scores on the CPU in its own
    precision, so it accepts only ``device`` auto / cpu and ``dtype`` auto."""
    family = FAMILIES.get(arch)
    if family is not None and scored_in_windows(family):
        return devices.place(model, device, dtype)
    if device not in ("auto", "cpu", None) or dtype not in ("auto", None):
        raise ValueError(
            f"{source}: expected device auto or cpu and dtype auto for {arch} (scored on the "
            f"CPU in its own precision), got device {device!r}, dtype {dtype!r}"
        )
    return model


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


def windows(
    m: LoadedLM,
    ctx_len: int | None,
    stride: int | None,
    options: tuple[str, str] = FLAGS,
) -> tuple[int, int] | tuple[None, None]:
    """``(C, s)`` of a model scored in windows, ``(None, None)`` for a family scored with its
    own context, by :func:`tinyllm.windows.resolve_windows` (the rule of the zoo and the
    families): ``ctx_len`` default the model's context and at most that, ``stride`` default
    ``max(1, C // 2)``; a family scored with its own context refuses either option.
    ``options``: the two options' names in the errors (the CLI's flags; :mod:`tinyllm.api`
    passes its arguments' names)."""
    plan = resolve_windows(m.windows_family, m.model, ctx_len, stride, options=options)
    return (None, None) if plan is None else (plan.ctx_len, plan.stride)


def score_ppl(
    data: str,
    *,
    model: str | None = None,
    hf: str | None = None,
    ctx_len: int | None = None,
    stride: int | None = None,
    n_bytes: int = 0,
    batch_size: int | None = None,
    device: Any = "auto",
    dtype: Any = "auto",
    progress: ProgressFactory | None = None,
) -> dict:
    """Strided perplexity of the token file ``data`` (formats/tokens-bin.md) under one model.

    Families scored in windows (gpt, hf; :func:`windows`): windows of ``ctx_len`` tokens
    (default: the model's context; at most that) every ``stride`` tokens (default ``C // 2``),
    ``batch_size`` windows per pass (default :data:`tinyllm.eval.lm.DEFAULT_BATCH_SIZE`); every
    token after the first is scored exactly once. Other lm families score with their own NLLs
    and their own context, and refuse ``ctx_len`` / ``stride``. ``n_bytes``: UTF-8 bytes
    of the scored text (0: one token per byte), at least the scored tokens. ``device`` /
    ``dtype``: as :func:`open_lm`.

    A token file with a document sidecar (``<data>.docs.npy``, formats/tokens-bin.md) has its
    intervals over those documents (:func:`tinyllm.eval.text.summarize_docs`: ``interval``,
    ``n_units``, ``iid_interval``, ...; values unchanged); without one, over tokens.

    Returns ``{"model", "arch", "data", "ctx_len", "stride"}`` (``None`` for a family's own
    NLLs) and :func:`tinyllm.eval.lm.summarize_nlls`' keys: ``n_tokens``, ``n_bytes``,
    ``sum_nll`` (nats), and ``nll`` (nats/token), ``ppl``, ``bpb`` (bits/byte), each
    ``{"value", "lo", "hi"}`` with its 95% interval.
    """
    progress = progress or functools.partial(Progress, quiet=True)
    ids = read_tokens(data, min_tokens=2)
    _check_n_bytes(ids, n_bytes, data)
    m = open_lm(model, hf, device=device, dtype=dtype)
    check_vocab(ids, m.vocab_size, data, m.source)
    out: dict = {"model": m.source, "arch": m.arch, "data": str(data)}
    docs = read_doc_starts(data, int(ids.size))
    c, s = windows(m, ctx_len, stride)
    if c is not None:
        bs = batch_size if batch_size is not None else lm.DEFAULT_BATCH_SIZE
        with progress("scoring tokens", int(ids.size) - 1) as bar:
            if docs is None:
                res = lm.eval_ppl(m.model, ids, c, s, n_bytes, bs, progress=bar.update)
            else:
                res = ppl_over_docs(m.model, ids, c, s, n_bytes, docs, batch_size=bs,
                                    progress=bar.update)  # fmt: skip
    else:
        # the family's own NLLs come in one call: progress says when it starts and ends
        with progress(f"scoring tokens ({m.arch})", int(ids.size) - 1) as bar:
            nlls = m.family.token_nlls(m.model, ids)
            bar.update(len(nlls))
        if docs is None:
            res = lm.summarize_nlls(nlls, n_bytes)
        else:
            res = summarize_docs([(1, np.asarray(nlls, np.float64))], ids.size, n_bytes, docs)
    out.update({"ctx_len": c, "stride": s})
    out.update(res)
    return out


def open_path(path: str, *, device: Any = "auto", dtype: Any = "auto") -> LoadedLM:
    """:func:`open_lm` of ``path``, a local Hugging Face folder (a ``config.json`` with a
    ``model_type`` and no ``tl_arch``, :func:`tinyllm.models.hf.config_from`) or one of our lm
    checkpoints (anything else)."""
    cfg = Path(path) / CONFIG_NAME
    if Path(path).is_dir() and cfg.is_file():
        try:
            doc = json.loads(cfg.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{cfg}: expected a JSON object, got: {e}") from None
        if hf_family.config_from(doc) is not None:
            return open_lm(hf=path, device=device, dtype=dtype)
    return open_lm(model=path, device=device, dtype=dtype)


def text_tokenizer(m: LoadedLM, tokenizer: str | None = None) -> Any:
    """The tokenizer the text is read in for ``m``: its own (:func:`tinyllm.eval.text.
    own_tokenizer`), or ``tokenizer`` (``"byte"`` or a tokenizer folder,
    :func:`tinyllm.eval.text.load_tokenizer`), which must then be that same tokenizer unless the
    model has none of its own (a Hugging Face folder without one: bytes by default). A model is
    never fed ids from another tokenizer (docs/definitions.md, bits per byte and text in): byte values are not token ids of
    a BPE model, nor BPE ids bytes."""
    own = own_tokenizer(m.model, hf_family.ARCH if m.family is None else m.arch)
    if tokenizer is None:
        return ByteTokenizer() if own is None else own
    tok = load_tokenizer(tokenizer)
    if own is not None and tokenizer_id(tok) != tokenizer_id(own):
        raise ValueError(
            f"--tokenizer {tokenizer}: expected the tokenizer of {m.source} "
            f"({tokenizer_id(own)}), got {tokenizer_id(tok)}: a model is never fed ids of "
            f"another tokenizer; leave --tokenizer out to read the text in each model's own"
        )
    return tok


def text_size(text: str) -> int:
    """The UTF-8 bytes of the text file ``text`` (:class:`tinyllm.eval.text.TextReader`): what
    the file cannot be (missing, a FIFO, a symbolic link loop, ...) is refused here, naming it,
    before any model is loaded."""
    with TextReader(text) as r:
        return r.size


def text_tokens(
    m: LoadedLM,
    text: str,
    tok: Any,
    progress: ProgressFactory | None = None,
    doc_sep: str | None = DOC_SEP,
) -> TextTokens:
    """The text file ``text`` (UTF-8, or a token file of its bytes) as tokens of ``tok``
    (:func:`text_tokenizer`), read in bounded memory (:func:`tinyllm.eval.text.read_lm_tokens`,
    ``progress("tokenizing", bytes)`` told the bytes read); the largest id is checked against
    the model's vocabulary; ``doc_sep``: the documents (:func:`tinyllm.eval.text.read_lm_tokens`)."""
    progress = progress or functools.partial(Progress, quiet=True)
    with progress("tokenizing", text_size(text)) as bar:
        tokens = read_lm_tokens(text, tok, progress=bar.update, doc_sep=doc_sep)
    if tokens.ids.size < 2:
        raise ValueError(f"{text}: expected at least 2 tokens to score, got {tokens.ids.size}")
    check_text_vocab(tokens, m, text)
    return tokens


def check_text_vocab(tokens: TextTokens, m: LoadedLM, text: str) -> None:
    """Every id of ``tokens`` (their largest, nothing read) is in ``m``'s vocabulary."""
    if m.vocab_size is not None and tokens.max_id >= m.vocab_size:
        raise ValueError(
            f"{text}: expected token ids < {m.vocab_size} (the vocabulary of {m.source}), got "
            f"id {tokens.max_id}"
        )


def score_text(
    text: str,
    *,
    model: str | None = None,
    hf: str | None = None,
    tokenizer: str | None = None,
    ctx_len: int | None = None,
    stride: int | None = None,
    batch_size: int | None = None,
    device: Any = "auto",
    dtype: Any = "auto",
    doc_sep: str | None = DOC_SEP,
    progress: ProgressFactory | None = None,
) -> dict:
    """Strided perplexity of the text file ``text`` in the model's own tokenizer (docs/definitions.md
    section 2; :func:`text_tokens`): ``bpb = sum_t l_t / (n_bytes ln 2)`` bits per byte with
    ``n_bytes`` the UTF-8 bytes tokens ``1 .. n-1`` cover
    (:func:`tinyllm.eval.text.text_ppl`), each interval over the text's documents (``doc_sep``,
    default one per line; ``"none"``: contiguous blocks with a warning). Windows as
    :func:`score_ppl` (:func:`windows`); a family scored by its own NLLs refuses them.
    ``device`` / ``dtype``: as :func:`open_lm`.

    Returns :func:`score_ppl`'s keys (``data`` is ``text``; ``nll``, ``ppl``, ``bpb`` with
    their cluster-robust intervals over documents) plus ``interval``, ``n_units``, ``se``,
    ``iid_interval`` (the Student t over tokens), ``interval_warning``, ``block_len``,
    ``doc_sep`` and :func:`tinyllm.eval.text.text_details`: ``tokenizer``, ``n_text_tokens``,
    ``text_bytes``, ``prefix``.
    """
    progress = progress or functools.partial(Progress, quiet=True)
    text_size(text)
    m = open_lm(model, hf, device=device, dtype=dtype)
    c, s = windows(m, ctx_len, stride)
    tokens = text_tokens(m, text, text_tokenizer(m, tokenizer), progress, doc_sep)
    out: dict = {"model": m.source, "arch": m.arch, "data": str(text), "doc_sep": doc_sep}
    n = int(tokens.ids.size) - 1
    if c is not None:
        with progress("scoring tokens", n) as bar:
            res = text_ppl(m.model, tokens, c, s, batch_size=batch_size, progress=bar.update)
        return out | {"ctx_len": c, "stride": s} | res
    with progress(f"scoring tokens ({m.arch})", n) as bar:
        nlls = m.family.token_nlls(m.model, tokens.ids)
        bar.update(len(nlls))
    res = summarize_text([(1, np.asarray(nlls, dtype=np.float64))], tokens)
    return out | {"ctx_len": None, "stride": None} | res


def family_nlls(m: LoadedLM, ids: np.ndarray, c: int | None, s: int | None) -> np.ndarray:
    """Per-token NLLs of tokens ``1 .. n-1`` under ``m``: the strided windows ``(c, s)`` for
    gpt and Hugging Face models, the family's own ``token_nlls`` otherwise."""
    if m.strided:
        return lm.token_nlls(m.model, ids, c, s)
    return np.asarray(m.family.token_nlls(m.model, ids), dtype=np.float64)


def compare_text(
    text: str,
    against: str,
    *,
    model: str | None = None,
    hf: str | None = None,
    tokenizer: str | None = None,
    ctx_len: int | None = None,
    stride: int | None = None,
    device: Any = "auto",
    dtype: Any = "auto",
    seed: int = 0,
    n_perm: int = 10_000,
    doc_sep: str | None = DOC_SEP,
    progress: ProgressFactory | None = None,
) -> dict:
    """Model B (``against``: a Hugging Face folder or one of our checkpoints, :func:`open_path`)
    against model A (``model`` / ``hf``) on the text file ``text``, each in its own tokenizer
    (or both in ``tokenizer``), over the text's documents (``doc_sep``, default one per line).

    One tokenizer: :func:`tinyllm.eval.text_compare.compare_on_text`, the per-token NLLs of
    each model (any lm family: gpt and Hugging Face models in the same strided windows,
    ``ctx_len`` default the shorter of the strided contexts, ``stride`` C // 2; other families
    their own NLLs; ``ctx_len`` / ``stride`` are refused when neither model is scored in
    windows, :func:`windows`) paired over documents by :func:`tinyllm.stats.paired_difference`
    (``kind="ratio"``), signs from ``numpy.random.default_rng(seed)``: ``delta`` (nats per
    token, positive: B is worse) and ``delta_bpb`` with their intervals, ``p``, ``se``,
    ``mde``, ``mde_bpb``, ``n_units``, ``n_tokens``, ``n_bytes``, ``nll_a``, ``nll_b``,
    ``paired`` True.

    Different tokenizers: no per-token pairing; each model's bpb with its interval over
    documents (:func:`score_text`) side by side, ``paired`` False and the note "different
    tokenizers: compared by bpb only, unpaired"
    (:func:`tinyllm.eval.text_compare.unpaired_bpb`).

    Returns also ``{"model", "against", "data", "ctx_len", "stride", "seed", "doc_sep"}``.
    """
    text_size(text)
    a = open_lm(model, hf, device=device, dtype=dtype)
    b = open_path(against, device=device, dtype=dtype)
    tok_a, tok_b = text_tokenizer(a, tokenizer), text_tokenizer(b, tokenizer)
    head = {"model": a.source, "against": b.source, "data": str(text), "seed": seed}
    head["doc_sep"] = doc_sep
    strided = [m for m in (a, b) if m.strided]
    if not strided:
        windows(a, ctx_len, stride)  # neither takes window options: refused when given
    if tokenizer_id(tok_a) != tokenizer_id(tok_b):
        ra, rb = (
            _one_text(m, text, t, ctx_len, stride, doc_sep, progress)
            for m, t in ((a, tok_a), (b, tok_b))
        )
        return head | {"ctx_len": ra["ctx_len"], "stride": ra["stride"]} | unpaired_bpb(ra, rb)
    ta = text_tokens(a, text, tok_a, progress, doc_sep)
    check_text_vocab(ta, b, text)
    c, s = None, None
    if strided:
        ctx = [m.ctx_len for m in strided if m.ctx_len is not None]
        c, s = windows(
            strided[0], ctx_len if ctx_len is not None else min(ctx, default=None), stride
        )
        for m in strided[1:]:
            windows(m, c, s)  # the same windows must fit both
    nlls = (family_nlls(a, ta.ids, c, s), family_nlls(b, ta.ids, c, s))
    rng = np.random.default_rng(seed)
    res = compare_on_text(a.model, ta, b.model, ta, c, s, n_perm=n_perm, rng=rng, nlls=nlls)
    return head | {"ctx_len": c, "stride": s, "paired": True} | res


def _one_text(m: LoadedLM, text, tok, ctx_len, stride, doc_sep, progress) -> dict:
    """One model's :func:`score_text` result on ``text`` in its tokenizer ``tok`` (the window
    options apply to a model scored in windows only: the other of a pair may take them)."""
    tokens = text_tokens(m, text, tok, progress, doc_sep)
    if not m.strided:
        nlls = family_nlls(m, tokens.ids, None, None)
        return {"ctx_len": None, "stride": None} | summarize_text([(1, nlls)], tokens)
    c, s = windows(m, ctx_len, stride)
    return {"ctx_len": c, "stride": s} | text_ppl(m.model, tokens, c, s)


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
    device: Any = "auto",
    dtype: Any = "auto",
    progress: ProgressFactory | None = None,
) -> dict:
    """Multiple-choice accuracy of one model on the task file ``task`` (formats/task-jsonl.md).

    ``metric``: ``acc`` (the choice of highest log-likelihood) or ``acc_norm`` (of highest LL
    per UTF-8 byte of the choice); ``max_len``: tokens the model reads, contexts cut from the
    left as lm-eval does (default: a strided model's own context); ``target_delimiter``: scored
    before each choice, overriding the task file's; ``tokenizer``: one of :data:`TOKENIZERS`.
    The interval is a percentile bootstrap of ``n_boot`` resamples from
    ``numpy.random.default_rng(seed)``. ``device`` / ``dtype``: as :func:`open_lm`.

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
    m = open_lm(model, hf, device=device, dtype=dtype)
    tok = _task_tokenizer(m, tokenizer, hf)
    with progress("scoring items", len(items)) as bar:
        res = m.run_task(
            tok,
            items,
            metric,
            np.random.default_rng(seed),
            n_boot,
            max_len,
            progress=bar.update,
            target_delimiter=target_delimiter,
        )
    out = {"model": m.source, "arch": m.arch, "task": str(task), "metric": metric}
    out.update(res.to_dict())
    out.update({"seed": seed, "n_boot": n_boot, "per_item": res.per_item.tolist()})
    return out


def run_ppl(
    data: str | None,
    text: str | None,
    against: str | None,
    *,
    tokenizer: str | None = None,
    n_bytes: int = 0,
    seed: int = 0,
    doc_sep: str | None = DOC_SEP,
    batch_size: int | None = None,
    progress: ProgressFactory | None = None,
    note: Callable[[str], None] | None = None,
    **opts: Any,
) -> dict:
    """What ``tinyllm eval ppl`` computes: :func:`compare_text` with ``against``, else
    :func:`score_text` of ``text``, else :func:`score_ppl` of the token file ``data``;
    ``opts``: ``model``, ``hf``, ``ctx_len``, ``stride``, ``device``, ``dtype``. ``note``: the
    CLI's channel for remarks; the scoring has none to make (a window option a family does not
    take is an error, :func:`windows`)."""
    if against is not None:
        return compare_text(
            text,
            against,
            **opts,
            tokenizer=tokenizer,
            seed=seed,
            doc_sep=doc_sep,
            progress=progress,
        )
    run = {"batch_size": batch_size, "progress": progress}
    if text is not None:
        return score_text(text, **opts, tokenizer=tokenizer, doc_sep=doc_sep, **run)
    return score_ppl(data, **opts, n_bytes=n_bytes, **run)
