"""Text in (SPEC.md section 2): a UTF-8 text scored with the model's own tokenizer, bits per
byte over the bytes the scored tokens cover, and two models paired on the same tokens.

* :func:`load_tokenizer` -- ``"byte"`` (:class:`tinyllm.tokens.ByteTokenizer`) or a folder's
  Hugging Face tokenizer (``AutoTokenizer``, ``local_files_only``);
* :func:`model_tokenizer` -- a model's own tokenizer: bytes for our families, the folder's own
  for a Hugging Face model (bytes only for a folder without one, a byte-level model such as
  :func:`tinyllm.models.hf.export_hf` writes);
* :func:`read_lm_tokens` -- an lm data file (a UTF-8 text, or a token file of byte ids, which is
  that text's bytes) as :class:`tinyllm.tokens.TextTokens` of a tokenizer;
* :func:`text_ppl` -- strided perplexity of such tokens, bpb over their scored bytes;
* :func:`paired_nlls` / :func:`compare_on_text` -- the mean per-token NLL difference of two
  models on the same tokens, its Student t interval and the paired permutation p.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tinyllm import stats
from tinyllm.eval.lm import eval_ppl, token_nlls
from tinyllm.models import hf
from tinyllm.tokens import (
    ByteTokenizer,
    TextTokens,
    check_byte_range,
    is_token_file,
    read_text,
    read_tokens,
    tokenize_text,
)

BYTE = "byte"


def load_tokenizer(spec: str | os.PathLike) -> Any:
    """``"byte"`` -> :class:`ByteTokenizer`; a folder -> its Hugging Face tokenizer
    (:func:`tinyllm.models.hf.load_tokenizer`: ``AutoTokenizer.from_pretrained(folder,
    local_files_only=True)``). Raises ValueError naming the folder when it has no tokenizer."""
    if isinstance(spec, str) and spec == BYTE:
        return ByteTokenizer()
    if not Path(spec).is_dir():
        raise ValueError(f"tokenizer: expected 'byte' or a tokenizer folder, got {str(spec)!r}")
    return hf.load_tokenizer(spec)


def model_tokenizer(model: Any, family: str) -> Any:
    """The tokenizer ``model`` (of ``family``) reads: :class:`ByteTokenizer` for our families;
    for ``hf`` the tokenizer saved in the folder the model was loaded from (``name_or_path``),
    or bytes when that folder holds no tokenizer (a byte-level model, its vocabulary at least
    the 256 byte ids)."""
    if family != hf.ARCH:
        return ByteTokenizer()
    folder = getattr(model, "name_or_path", "") or ""
    if folder and any((Path(folder) / n).is_file() for n in hf.TOKENIZER_FILES):
        return hf.load_tokenizer(folder)
    return ByteTokenizer()


def read_lm_tokens(path: str | os.PathLike, tokenizer: Any, *, prefix: bool = True) -> TextTokens:
    """The lm data file ``path`` as :class:`TextTokens` of ``tokenizer``
    (:func:`tinyllm.tokens.tokenize_text`). A file that starts with the token file magic is a
    token file of byte ids 0..255 (formats/tokens-bin.md): its ids are the UTF-8 bytes of the text;
    anything else is read as UTF-8 text (:func:`tinyllm.tokens.read_text`)."""
    p = Path(path)
    if is_token_file(p):
        ids = check_byte_range(np.asarray(read_tokens(p)), f"{p} (token file)")
        try:
            text = ids.astype(np.uint8).tobytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{p}: expected the UTF-8 bytes of a text, got an undecodable byte at index "
                f"{e.start}"
            ) from None
    else:
        text = read_text(p)
    return tokenize_text(text, tokenizer, prefix=prefix)


def text_details(tokens: TextTokens) -> dict:
    """The text route's fields of a row's or a summary's details: ``tokenizer`` (its identity),
    ``n_text_tokens`` (the text's tokens, a prefix token included), ``text_bytes`` (the whole
    text's UTF-8 bytes) and ``prefix`` (whether a prefix token was prepended)."""
    return {
        "tokenizer": tokens.tokenizer,
        "n_text_tokens": int(tokens.ids.size),
        "text_bytes": int(tokens.n_text_bytes),
        "prefix": bool(tokens.has_prefix),
    }


def text_ppl(
    model: Any,
    tokens: TextTokens,
    ctx_len: int,
    stride: int,
    *,
    batch_size: int | None = None,
    progress: Callable[[int, int], Any] | None = None,
) -> dict:
    """Strided perplexity (:func:`tinyllm.eval.lm.eval_ppl`) of ``tokens``, with
    ``bpb = sum_t l_t / (n_bytes * ln 2)``, ``n_bytes`` = :attr:`TextTokens.n_scored_bytes`
    (the UTF-8 bytes tokens ``1 .. n-1`` cover), and :func:`text_details` added.

    Example: a uniform byte model on ``"héllo"`` (6 bytes, no prefix): 5 scored tokens of
    ``ln 256`` over 5 bytes, bpb = 8.
    """
    kw = {} if batch_size is None else {"batch_size": batch_size}
    out = eval_ppl(
        model, tokens.ids, ctx_len, stride, n_bytes=tokens.n_scored_bytes, progress=progress, **kw
    )
    return out | text_details(tokens)


def check_same_tokens(a: TextTokens, b: TextTokens) -> None:
    """Two models pair up token by token only on the same tokens of the same tokenizer."""
    if a.tokenizer != b.tokenizer:
        raise ValueError(f"expected the same tokenizer, got {a.tokenizer} and {b.tokenizer}")
    if a.ids.shape != b.ids.shape or not np.array_equal(a.ids, b.ids):
        raise ValueError(
            f"expected the same tokens, got {a.ids.size} and {b.ids.size} tokens that differ"
        )


def paired_nlls(
    nll_a: Any,
    nll_b: Any,
    *,
    n_bytes: int = 0,
    n_perm: int = 10_000,
    rng: np.random.Generator | None = None,
) -> dict:
    """Model B against model A on the same tokens: ``d_t = l_t(B) - l_t(A)`` nats per token.

    * ``delta``: ``mean(d_t)`` with its 95% Student t interval (:func:`tinyllm.stats.mean_ci`),
      ``{"value", "lo", "hi"}``, nats per token; positive: B is worse;
    * ``delta_bpb``: the same in bits per byte, ``sum(d_t) / (n_bytes ln 2)`` (``n_bytes = 0``:
      one token per byte), its ends rescaled alike;
    * ``p``: the two-sided paired sign-flip permutation p of "A and B differ"
      (:func:`tinyllm.stats.paired_permutation_test`, drawn from ``rng``);
    * ``n_tokens``, ``n_bytes``, ``nll_a``, ``nll_b`` (mean nats per token of each).

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
    d = b - a
    ci = stats.mean_ci(d)
    nb = int(n_bytes) or d.size
    scale = d.size / (nb * stats.LN2)
    return {
        "n_tokens": int(d.size),
        "n_bytes": nb,
        "nll_a": float(a.mean()),
        "nll_b": float(b.mean()),
        "delta": {"value": ci.value, "lo": ci.lo, "hi": ci.hi},
        "delta_bpb": {"value": ci.value * scale, "lo": ci.lo * scale, "hi": ci.hi * scale},
        "p": stats.paired_permutation_test(a, b, n_perm=n_perm, rng=rng),
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
) -> dict:
    """:func:`paired_nlls` of two models' strided per-token NLLs
    (:func:`tinyllm.eval.lm.token_nlls`, the same windows for both) on the same tokens, bits
    per byte over their scored bytes, plus :func:`text_details`. ``tokens_a`` and ``tokens_b``
    are each model's own tokens of one text: refused unless they are the same ("expected the
    same tokenizer, got X and Y")."""
    check_same_tokens(tokens_a, tokens_b)
    a = token_nlls(model_a, tokens_a.ids, ctx_len, stride)
    b = token_nlls(model_b, tokens_b.ids, ctx_len, stride)
    out = paired_nlls(a, b, n_bytes=tokens_a.n_scored_bytes, n_perm=n_perm, rng=rng)
    return out | text_details(tokens_a)
