"""Two models on one text (docs/definitions.md, "Paired tests"): the difference of their mean
per-token NLLs and of their bits per byte over the text's documents, by the one paired entry
point :func:`tinyllm.stats.paired_difference` (``kind="ratio"``).

* :func:`paired_nlls` -- two models' per-token NLLs of the same tokens, paired over units
  (documents; each token its own unit when none are given);
* :func:`compare_on_text` -- the strided NLLs of two models on the same tokens, paired over the
  text's documents;
* :func:`unpaired_bpb` -- two models in different tokenizers: each bpb with its interval over
  documents, side by side, no pairing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyllm import stats
from tinyllm.eval.lm import token_nlls
from tinyllm.eval.text import released_behind, text_details
from tinyllm.eval.text_docs import DocSums, scored_starts
from tinyllm.tokens import TextTokens

UNPAIRED_NOTE = "different tokenizers: compared by bpb only, unpaired"


def check_same_tokens(a: TextTokens, b: TextTokens) -> None:
    """Two models pair up token by token only on the same tokens of the same tokenizer."""
    if a.tokenizer != b.tokenizer:
        raise ValueError(f"expected the same tokenizer, got {a.tokenizer} and {b.tokenizer}")
    if a.ids is not b.ids and (a.ids.shape != b.ids.shape or not np.array_equal(a.ids, b.ids)):
        raise ValueError(
            f"expected the same tokens, got {a.ids.size} and {b.ids.size} tokens that differ"
        )


def _ends(d: stats.PairedDifference) -> dict:
    return {"value": d.delta, "lo": d.lo, "hi": d.hi}


def paired_nlls(
    nll_a: Any,
    nll_b: Any,
    *,
    n_bytes: int = 0,
    n_perm: int = 10_000,
    rng: np.random.Generator | None = None,
    doc_starts: Any = None,
    block_len: int | None = None,
) -> dict:
    """Model B against model A on the same tokens: ``d = r_B - r_A``, ``r`` the mean NLL over
    the scored tokens (nats per token), paired over units by
    :func:`tinyllm.stats.paired_difference` (``kind="ratio"``) from the per-unit sums
    ``S^A_g``, ``S^B_g``, ``N_g``: residuals ``e_g = (S^B_g - r_B N_g) - (S^A_g - r_A N_g)``,
    ``se = sqrt(G/(G-1) sum e_g^2) / sum N_g``, t with G - 1 df; p the sign-flip test over
    units on ``S^B_g - S^A_g`` (``rng``); ``mde = (t_.975 + t_.80) se``.

    ``nll_a``, ``nll_b``: the NLLs of tokens ``1 .. n-1``; ``doc_starts``: the token offset
    where each unit begins (:attr:`tinyllm.tokens.TextTokens.doc_starts`, or blocks with
    ``block_len``); None: each token its own unit (the item-level paired t and sign-flip test).

    Returns ``delta`` (nats per token, positive: B is worse) and ``delta_bpb`` (``delta *
    N / (n_bytes ln 2)``, ``n_bytes = 0``: one token per byte), each ``{"value", "lo", "hi"}``;
    ``p``, ``se``, ``mde``, ``se_bpb``, ``mde_bpb``, ``n_units``, ``interval`` (the method),
    ``interval_warning``, ``block_len``, ``n_tokens``, ``n_bytes``, ``nll_a``, ``nll_b``.

    Example: B = A gives delta 0 with a zero-width interval and p = 1.

    Raises ValueError for arrays of different lengths (unpaired) or fewer than 2 tokens.
    """
    a = np.asarray(nll_a, dtype=np.float64)
    b = np.asarray(nll_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(
            f"paired NLLs: expected two 1-d arrays of the same tokens, got shapes {a.shape} "
            f"and {b.shape}"
        )
    starts = np.arange(a.size + 1) if doc_starts is None else np.asarray(doc_starts)
    sa, sb = DocSums(starts), DocSums(starts)
    sa.add(1, a)
    sb.add(1, b)
    (SA, N), (SB, _) = sa.sums(), sb.sums()
    rng = np.random.default_rng() if rng is None else rng
    d = stats.paired_difference(
        SB, SA, np.arange(SA.size), rng, kind="ratio", weights=N, n_perm=n_perm
    )
    nb = int(n_bytes) or a.size
    bpb = d.scaled(a.size / (nb * stats.LN2))
    return {
        "n_tokens": int(a.size),
        "n_bytes": nb,
        "nll_a": float(a.mean()),
        "nll_b": float(b.mean()),
        "delta": _ends(d),
        "delta_bpb": _ends(bpb),
        "p": d.p,
        "se": d.se,
        "mde": d.mde,
        "se_bpb": bpb.se,
        "mde_bpb": bpb.mde,
        "n_units": d.n_units,
        "interval": str(d.method),
        "interval_warning": stats.units.units_warning(d.n_units, block_len)
        if doc_starts is not None
        else "",
        "block_len": block_len,
    }


def compare_on_text(
    model_a: Any,
    tokens_a: TextTokens,
    model_b: Any,
    tokens_b: TextTokens,
    ctx_len: int,
    stride: int,
    *,
    n_perm: int = 10_000,
    rng: np.random.Generator | None = None,
    nlls: tuple[Any, Any] | None = None,
) -> dict:
    """:func:`paired_nlls` of two models' per-token NLLs on the same tokens over the text's
    documents (contiguous blocks with a warning when it has none,
    :func:`tinyllm.eval.text_docs.scored_starts`), bits per byte over their scored bytes, plus
    :func:`text_details`. The NLLs are the strided windows' (:func:`tinyllm.eval.lm.token_nlls`,
    the same windows for both), or ``nlls`` (A's, B's) when given (a family's own). ``tokens_a``
    and ``tokens_b`` are each model's own tokens of one text: refused unless they are the same
    ("expected the same tokenizer, got X and Y"). The per-token NLLs of both are held (8 bytes
    a token each)."""
    check_same_tokens(tokens_a, tokens_b)
    ids = tokens_a.ids
    if nlls is None:
        bar = released_behind(ids, ctx_len, None)
        nlls = (token_nlls(model_a, ids, ctx_len, stride, progress=bar),)
        bar = released_behind(ids, ctx_len, None)
        nlls += (token_nlls(model_b, ids, ctx_len, stride, progress=bar),)
    starts, block = scored_starts(tokens_a.doc_starts, int(ids.size))
    out = paired_nlls(
        nlls[0],
        nlls[1],
        n_bytes=tokens_a.n_scored_bytes,
        n_perm=n_perm,
        rng=rng,
        doc_starts=starts,
        block_len=block,
    )
    return out | text_details(tokens_a)


def unpaired_bpb(a: dict, b: dict) -> dict:
    """Two models' text summaries (:func:`tinyllm.eval.text.summarize_text`) in different
    tokenizers, side by side: ``bpb_a``, ``bpb_b`` (each with its interval over documents),
    ``n_units_a``, ``n_units_b``, ``delta_bpb`` (the difference of the values, no interval: the
    tokens do not pair) and :data:`UNPAIRED_NOTE`."""
    return {
        "paired": False,
        "note": UNPAIRED_NOTE,
        "bpb_a": a["bpb"],
        "bpb_b": b["bpb"],
        "n_units_a": a["n_units"],
        "n_units_b": b["n_units"],
        "tokenizer_a": a["tokenizer"],
        "tokenizer_b": b["tokenizer"],
        "delta_bpb": {"value": b["bpb"]["value"] - a["bpb"]["value"], "lo": None, "hi": None},
    }
