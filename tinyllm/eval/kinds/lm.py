"""The ``lm`` kind: bits per byte of a language model on a text (SPEC.md sections 2, 6).

The data file is a UTF-8 text or a token file of byte ids (the text's bytes). It is read in the
model's own tokenizer (:func:`tinyllm.eval.text.model_tokenizer`: bytes for our families, the
folder's own for ``hf``, never byte values as a BPE model's ids). Each family's own
``token_nlls`` gives the per-token NLLs (gpt and hf, a local Hugging Face causal LM: strided
windows, :func:`tinyllm.windows.token_nlls`); the row is their bits per byte over the UTF-8
bytes the scored tokens cover, with a Student t interval, and the per-token NLLs are the row's
items. The row's baseline is the unigram of the scored tokens (:func:`unigram_baseline`), scored
per token on the same tokens.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tinyllm import metrics
from tinyllm.baselines import Baseline
from tinyllm.eval.kinds.common import Scored
from tinyllm.eval.lm import summarize_nlls
from tinyllm.eval.text import model_tokenizer, read_lm_tokens, text_details
from tinyllm.models import FAMILIES
from tinyllm.report import Entry
from tinyllm.stats import Interval
from tinyllm.tokens import ByteTokenizer, is_token_file, read_tokens

KIND = "lm"
METRIC = metrics.BPB.name
DIRECTION = metrics.BPB.direction
ITEM_SCALE = metrics.BPB.item_scale
MEAN_OF_ITEMS = metrics.BPB.mean_of_items
INTERVAL = "student_t"
BYTE_CHECK_CHUNK = 1 << 20


def _accepts_window_options(fn: Callable) -> bool:
    params = inspect.signature(fn).parameters
    return "ctx_len" in params and "stride" in params


def lm_token_nlls(model, ids: np.ndarray, entry: Entry) -> np.ndarray:
    """Per-token NLLs (nats, float64[n-1], tokens 1..n-1) of ``ids`` under ``model``, computed by
    the entry's family's own ``token_nlls``.

    * families whose ``token_nlls`` takes ``ctx_len``/``stride`` (gpt, hf) get the entry's
      options (``None`` = the family's default: :func:`tinyllm.models.gpt.token_nlls`,
      :func:`tinyllm.models.hf.token_nlls`);
    * every other family: ``token_nlls(model, ids)``; window options are refused for it.
    """
    opts = entry.options
    fn = FAMILIES[entry.family].token_nlls
    if _accepts_window_options(fn):
        nlls = fn(model, ids, ctx_len=opts.ctx_len, stride=opts.stride)
    else:
        if opts.ctx_len is not None or opts.stride is not None:
            raise ValueError(
                f"entry {entry.name!r}: family {entry.family!r} is not scored in windows; "
                f"expected no ctx_len/stride options, got ctx_len={opts.ctx_len}, "
                f"stride={opts.stride}"
            )
        nlls = fn(model, ids)
    out = np.asarray(nlls, dtype=np.float64)
    if out.shape != (len(ids) - 1,):
        raise ValueError(
            f"{entry.family}.token_nlls: expected float64[{len(ids) - 1}] (tokens 1..n-1), "
            f"got shape {out.shape}"
        )
    return out


def unigram_baseline(ids: np.ndarray, n_bytes: int) -> Baseline:
    """The "unigram" baseline of a row: each scored token ``x_t`` (t = 1..n-1) costs
    ``b_t = -ln(c(x_t) / (n - 1))`` nats, ``c`` the counts of the scored tokens themselves; value
    ``sum_t b_t / (n_bytes ln 2)`` bits per byte with the Student t interval of the row's own
    (:func:`tinyllm.eval.lm.summarize_nlls`); items ``b_t`` (nats, the row's token order).

    It is fit on the very tokens it scores (the maximum-likelihood unigram), so no unigram, of
    the training text or any other, scores these tokens better: a model that beats it beats
    every unigram. ``item_scale = (n - 1) / (n_bytes ln 2)`` turns a mean difference of NLLs
    into one of bits per byte.

    Example: scored bytes ``a a b a`` (ids ``[?, a, a, b, a]``), 4 bytes: ``b_t = ln(4/3)`` for
    each ``a``, ``ln 4`` for ``b``; value ``(3 ln(4/3) + ln 4) / (4 ln 2)`` = 0.8113 bpb.
    """
    scored = np.asarray(ids[1:], dtype=np.int64)
    values, inverse, counts = np.unique(scored, return_inverse=True, return_counts=True)
    nll = -np.log(counts[inverse] / scored.size)
    s = summarize_nlls(nll, n_bytes=n_bytes)
    bpb = s["bpb"]
    return Baseline(
        name="unigram",
        value=float(bpb["value"]),
        lo=float(bpb["lo"]),
        hi=float(bpb["hi"]),
        items=nll,
        item_scale=scored.size / (n_bytes * math.log(2.0)),
        details={"fit_on": "the scored tokens", "distinct_tokens": int(values.size)},
    )


def _check_byte_tokens(ids: np.ndarray, path: Path) -> None:
    """LM task data must be byte ids (0..255): one scored token is then one byte."""
    if ids.dtype == np.uint8:
        return
    for s in range(0, ids.size, BYTE_CHECK_CHUNK):
        seg = np.asarray(ids[s : s + BYTE_CHECK_CHUNK])
        if seg.size and (int(seg.min()) < 0 or int(seg.max()) > 255):
            raise ValueError(
                f"{path}: expected byte ids 0..255 (bits per byte counts one byte per token), "
                f"got ids in {int(seg.min())}..{int(seg.max())}"
            )


def lm_data(model, entry: Entry, data_path: Path) -> tuple[np.ndarray, int, dict]:
    """``(ids, n_bytes, text details)`` of the entry's data in the model's own tokenizer.

    A byte model on a token file reads its ids as they are (a memmap, nothing copied): one token,
    one byte, ``n_bytes = n - 1``. Anything else is tokenized
    (:func:`tinyllm.eval.text.read_lm_tokens`) and ``n_bytes`` is the bytes its tokens
    ``1 .. n-1`` cover (:attr:`tinyllm.tokens.TextTokens.n_scored_bytes`).
    """
    tok = model_tokenizer(model, entry.family)
    if isinstance(tok, ByteTokenizer) and is_token_file(data_path):
        ids = read_tokens(data_path)
        _check_byte_tokens(ids, data_path)
        details = {"tokenizer": "byte", "n_text_tokens": int(ids.size)}
        details |= {"text_bytes": int(ids.size), "prefix": False}
        return ids, max(int(ids.size) - 1, 0), details
    tokens = read_lm_tokens(data_path, tok)
    return tokens.ids, tokens.n_scored_bytes, text_details(tokens)


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator) -> Scored:
    """Bits per byte of ``model`` on the text ``data_path`` (UTF-8, or a token file of its
    bytes), in the model's own tokenizer, with a Student t interval.

    ``bpb = sum_t l_t / (n_bytes * ln 2)`` over the scored tokens t = 1..n-1 (token 0 has no
    context and is never scored); ``n_bytes`` is the UTF-8 bytes those tokens cover
    (:func:`lm_data`: one per token for a byte model, the whole text for a tokenizer with a
    prefix token). The interval is Student t on the per-token NLLs, its ends rescaled to bits per
    byte (:func:`tinyllm.eval.lm.summarize_nlls`). ``rng`` is unused: nothing here is random.
    The row's details add the tokenizer, the text's tokens and bytes (:func:`lm_data`).
    Baseline: :func:`unigram_baseline` on the same tokens.

    Example: a uniform bigram gives every token ``l_t = ln 256``: bpb = 8 with lo = hi = 8.
    """
    ids, n_bytes, text = lm_data(model, entry, data_path)
    if ids.size < 3:
        raise ValueError(
            f"{data_path}: expected at least 3 tokens (2 scored tokens for an interval), "
            f"got {ids.size}"
        )
    nlls = lm_token_nlls(model, ids, entry)
    s = summarize_nlls(nlls, n_bytes=n_bytes)
    details = {
        "n_bytes": int(s["n_bytes"]),
        "sum_nll": float(s["sum_nll"]),
        "nll": dict(s["nll"]),  # nats per token, {value, lo, hi}
        "ppl": dict(s["ppl"]),
    } | text
    bpb = s["bpb"]
    return Scored(
        metric=METRIC,
        interval=Interval(float(bpb["value"]), float(bpb["lo"]), float(bpb["hi"])),
        method=INTERVAL,
        n=int(s["n_tokens"]),
        items=nlls,
        details=details,
        baseline=unigram_baseline(ids, int(s["n_bytes"])),
    )
