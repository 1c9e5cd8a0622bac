"""The ``lm`` kind: bits per byte of a language model on a text (docs/definitions.md, bits per byte and text in, the zoo).

The data file is a UTF-8 text or a token file of byte ids (the text's bytes). It is read in the
model's own tokenizer (:func:`tinyllm.eval.text.model_tokenizer`: bytes for our families, the
folder's own for ``hf``, never byte values as a BPE model's ids). Each family's own
``token_nlls`` gives the per-token NLLs (gpt and hf, a local Hugging Face causal LM: strided
windows, :func:`tinyllm.windows.token_nlls`); the row is their bits per byte over the UTF-8
bytes the scored tokens cover, and the per-token NLLs are the row's items. The interval is over
the text's units (docs/definitions.md, "Units"): its documents when the text route gives them,
else contiguous blocks of tokens whose length the row states (:func:`lm_scored`); the Student t
interval over tokens stays beside it as the row's ``iid_interval``. The row's baseline is the
unigram of the scored tokens (:func:`unigram_baseline`), scored per token on the same tokens.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from tinyllm import metrics
from tinyllm.baselines import Baseline
from tinyllm.eval.kinds.common import Kind, Scored, options_model
from tinyllm.eval.lm import summarize_nlls
from tinyllm.eval.text import model_tokenizer, read_lm_tokens, text_details
from tinyllm.eval.text_docs import (
    DOC_SEP,
    DocScanner,
    block_length,
    check_doc_sep,
    read_doc_starts,
)
from tinyllm.models import FAMILIES
from tinyllm.report import Entry
from tinyllm.stats import LN2, Interval, Method, as_units, cluster_ratio, contiguous_blocks
from tinyllm.tokens import (
    ByteTokenizer,
    doc_units,
    is_token_file,
    read_tokens,
)
from tinyllm.windows import WindowPlan, resolve_windows

KIND = "lm"
METRIC = metrics.BPB.name
INTERVAL = Method.CLUSTER_RATIO
BYTE_CHECK_CHUNK = 1 << 20

Options = options_model(KIND, "ctx_len", "stride", "doc_sep")
"""The entry options the lm kind reads: its windows (``ctx_len``, ``stride``) and its
documents (``doc_sep``)."""

WINDOW_OPTIONS = ("options.ctx_len", "options.stride")
"""The window options' names in a manifest entry (the errors of :func:`entry_windows`)."""


def entry_windows(model, entry: Entry, opts: Options) -> WindowPlan | None:
    """The windows the entry's model is scored in, by the rule the CLI and the families follow
    too (:func:`tinyllm.windows.resolve_windows`): for a family scored in windows (gpt, hf)
    ``opts.ctx_len`` (default the model's context, at most that) and ``opts.stride`` (default
    ``max(1, ctx_len // 2)``); None for any other family, which refuses either option (a
    ValueError naming the family; the row names the entry). ``opts``: the entry's
    :data:`Options`."""
    family = FAMILIES[entry.family]
    return resolve_windows(family, model, opts.ctx_len, opts.stride, options=WINDOW_OPTIONS)


def lm_token_nlls(model, ids: np.ndarray, entry: Entry, opts: Options) -> np.ndarray:
    """Per-token NLLs (nats, float64[n-1], tokens 1..n-1) of ``ids`` under ``model``, computed by
    the entry's family's own ``token_nlls``: ``token_nlls(model, ids, ctx_len=C, stride=s)``
    with the windows of :func:`entry_windows` for a family scored in windows (gpt, hf),
    ``token_nlls(model, ids)`` for every other.
    """
    fn = FAMILIES[entry.family].token_nlls
    plan = entry_windows(model, entry, opts)
    if plan is None:
        nlls = fn(model, ids)
    else:
        nlls = fn(model, ids, ctx_len=plan.ctx_len, stride=plan.stride)
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


def doc_sep_of(entry: Entry, opts: Options) -> str | None:
    """The entry's document separator: ``opts.doc_sep`` (``"none"``: no boundaries), else
    :data:`tinyllm.eval.text.DOC_SEP` (one document per line)."""
    sep = opts.doc_sep
    try:
        return check_doc_sep(DOC_SEP if sep is None else sep)
    except ValueError as e:
        raise ValueError(f"entry {entry.name!r}: options.doc_sep: {e}") from None


def byte_doc_starts(ids: np.ndarray, sep: str | None) -> np.ndarray | None:
    """The first token of each document of byte ids ``ids`` (a token file of a text's bytes)
    cut after each run of ``sep``'s UTF-8 bytes (:class:`tinyllm.eval.text.DocScanner`), read
    a chunk at a time; None without a separator."""
    if sep is None:
        return None
    scan = DocScanner(sep.encode("utf-8"))
    for s in range(0, ids.size, BYTE_CHECK_CHUNK):
        scan.feed(np.asarray(ids[s : s + BYTE_CHECK_CHUNK]).astype(np.uint8).tobytes())
    return scan.starts(int(ids.size))


def lm_data(
    model, entry: Entry, data_path: Path, opts: Options
) -> tuple[np.ndarray, int, dict, Any]:
    """``(ids, n_bytes, text details, units)`` of the entry's data in the model's own tokenizer.

    A byte model on a token file reads its ids as they are (a memmap, nothing copied): one token,
    one byte, ``n_bytes = n - 1``. Anything else is tokenized
    (:func:`tinyllm.eval.text.read_lm_tokens`) and ``n_bytes`` is the bytes its tokens
    ``1 .. n-1`` cover (:attr:`tinyllm.tokens.TextTokens.n_scored_bytes`). ``units``: the
    document of each token when the text route gives them (its ``units``), else None (no unit
    boundaries: :func:`lm_scored` uses contiguous blocks). Documents: the text cut after each
    run of :func:`doc_sep_of` (one per line by default; a token file of bytes alike).
    """
    tok = model_tokenizer(model, entry.family)
    sep = doc_sep_of(entry, opts)
    if isinstance(tok, ByteTokenizer) and is_token_file(data_path):
        ids = read_tokens(data_path)
        _check_byte_tokens(ids, data_path)
        details = {"tokenizer": "byte", "n_text_tokens": int(ids.size)}
        details |= {"text_bytes": int(ids.size), "prefix": False}
        starts = read_doc_starts(data_path, int(ids.size))  # a sidecar wins over doc_sep
        starts = byte_doc_starts(ids, sep) if starts is None else starts
        units = None if starts is None else doc_units(starts, int(ids.size))
        return ids, max(int(ids.size) - 1, 0), details, units
    tokens = read_lm_tokens(data_path, tok, doc_sep=sep)
    units = getattr(tokens, "units", None)
    return tokens.ids, tokens.n_scored_bytes, text_details(tokens), units


def _scored_units(units, n: int):
    """The scored tokens' units (tokens 1..n-1): ids of the n - 1 scored tokens, or of all n
    tokens (token 0's, unscored, dropped); None, or every scored token in one document (a text
    without a separator) -> contiguous blocks (:func:`block_length`)."""
    ids = None if units is None else np.asarray(units)
    if ids is not None and ids.ndim == 1 and ids.size == n:
        ids = ids[1:]
    if ids is None or (ids.ndim == 1 and ids.size == n - 1 and np.all(ids == ids[0])):
        return contiguous_blocks(n - 1, block_length(n - 1))
    if ids.ndim != 1 or ids.size != n - 1:
        raise ValueError(
            f"units: expected one unit id per scored token ({n - 1}) or per token ({n}), "
            f"got shape {ids.shape}"
        )
    return as_units(ids, n - 1)


def lm_scored(
    nlls: np.ndarray,
    n_bytes: int,
    details: dict,
    baseline: Baseline | None,
    units=None,
) -> Scored:
    """The bpb row of per-token NLLs ``l_t`` (nats, the scored tokens t = 1..n-1) over units.

    ``bpb = sum_t l_t / (n_bytes ln 2)``. Interval: the cluster-robust ratio estimator of the
    mean NLL over the units (:func:`tinyllm.stats.cluster_ratio`: ``S_g`` the unit's summed
    NLL, ``N_g`` its tokens, t with G - 1 df), its ends rescaled to bits per byte by
    ``N / (n_bytes ln 2)``; ``details.nll`` and ``details.ppl`` carry the same interval in nats
    per token and in perplexity (ends ``exp`` of the NLL ends). ``units``: the unit id of each
    scored token (or of every token, token 0's dropped), from the text route; None when the
    text has no unit boundaries: contiguous blocks of :func:`block_length` tokens, the length
    in ``details.block_len`` and a warning on the interval. ``iid_interval``: the Student t
    interval over tokens (:func:`tinyllm.eval.lm.summarize_nlls`), for reference.

    Example: NLLs ``[2, 3, 1, 2, 3, 4, 2.5, 1.5]`` of 8 byte tokens in documents
    ``[0, 0, 1, 1, 1, 2, 3, 3]`` -> mean NLL 2.375 in (1.3972, 3.3528), bpb 3.4264 in
    (2.0157, 4.8371) (docs/definitions.md, "cluster_ratio").
    """
    x = np.asarray(nlls, dtype=np.float64)
    s = summarize_nlls(x, n_bytes=n_bytes)
    n_tok, nb = int(s["n_tokens"]), int(s["n_bytes"])
    u = _scored_units(units, n_tok + 1)
    nll = cluster_ratio(x, u)
    scale = n_tok / nb / LN2  # nats per token -> bits per byte, as summarize_nlls applies it
    bpb, iid = s["bpb"], s["bpb"]
    half_lo, half_hi = nll.value - nll.lo, nll.hi - nll.value
    value = float(bpb["value"])
    interval = Interval(
        value,
        value - half_lo * scale,
        value + half_hi * scale,
        Method.CLUSTER_RATIO,
        nll.n_units,
        nll.df,
        None if nll.se is None else nll.se * scale,
        nll.warning,
    )
    out = {
        "n_bytes": nb,
        "sum_nll": float(s["sum_nll"]),
        "nll": {"value": nll.value, "lo": nll.lo, "hi": nll.hi},  # nats per token
        "ppl": {"value": math.exp(nll.value), "lo": math.exp(nll.lo), "hi": math.exp(nll.hi)},
    }
    if u.block_len is not None:
        out["block_len"] = int(u.block_len)
    return Scored(
        metric=METRIC,
        interval=interval,
        method=INTERVAL,
        n=n_tok,
        items=x,
        details=out | details,
        baseline=baseline,
        units=u.index,
        iid_interval=Interval(
            float(iid["value"]), float(iid["lo"]), float(iid["hi"]), Method.IID, n_tok, n_tok - 1
        ),
    )


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator, opts: Options) -> Scored:
    """Bits per byte of ``model`` on the text ``data_path`` (UTF-8, or a token file of its
    bytes), in the model's own tokenizer, with its interval over the text's units
    (:func:`lm_scored`).

    ``bpb = sum_t l_t / (n_bytes * ln 2)`` over the scored tokens t = 1..n-1 (token 0 has no
    context and is never scored); ``n_bytes`` is the UTF-8 bytes those tokens cover
    (:func:`lm_data`: one per token for a byte model, the whole text for a tokenizer with a
    prefix token). ``rng`` is unused: nothing here is random. ``opts``: the entry's
    :data:`Options` (its windows, :func:`entry_windows`; its documents, :func:`doc_sep_of`).
    The row's details add the tokenizer, the text's tokens and bytes (:func:`lm_data`).
    Baseline: :func:`unigram_baseline` on the same tokens.

    Example: a uniform bigram gives every token ``l_t = ln 256``: bpb = 8 with lo = hi = 8.
    """
    ids, n_bytes, text, units = lm_data(model, entry, data_path, opts)
    if ids.size < 3:
        raise ValueError(
            f"{data_path}: expected at least 3 tokens (2 scored tokens for an interval), "
            f"got {ids.size}"
        )
    nlls = lm_token_nlls(model, ids, entry, opts)
    baseline = unigram_baseline(ids, n_bytes or int(ids.size) - 1)
    return lm_scored(nlls, n_bytes, text, baseline, units)


DEFINITION = Kind(KIND, METRIC, INTERVAL, score, options=Options)
"""The lm kind (:class:`tinyllm.eval.kinds.common.Kind`)."""
