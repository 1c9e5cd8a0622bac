"""Documents of a text (docs/definitions.md, "Units"): where a separator cuts it, and which
document each token belongs to.

A text is cut just after each run of its separator (``--doc-sep``, manifest ``options.doc_sep``;
default one document per line): the separator's bytes belong to the document before it, and
separators in a row make one boundary (no empty document). A token belongs to the document its
first character is in, so a token spanning a boundary goes to the document it starts in; a
prefix token (BOS) to the first. The boundaries are kept as one offset per document
(:class:`DocScanner`), the tokens' documents as the token offset where each begins
(:attr:`tinyllm.tokens.TextTokens.doc_starts`).
"""

from __future__ import annotations

import bisect
import json
import os
from pathlib import Path

import numpy as np

from tinyllm import safeio, stats
from tinyllm.tokens import TokenFileError, open_regular

DOC_SEP = "\n"
"""The default document separator of a text: one document per line (docs/definitions.md,
"Units")."""
MAX_SEP_CHARS = 64
"""The longest separator (it must fit in the characters a piece reads past its cut)."""


def check_doc_sep(doc_sep: str | None) -> str | None:
    """``doc_sep`` as the separator to split on, None for ``None`` or ``"none"`` (no document
    boundaries); refused: an empty separator or one longer than :data:`MAX_SEP_CHARS`."""
    if doc_sep is None or doc_sep == "none":
        return None
    if not isinstance(doc_sep, str) or not 1 <= len(doc_sep) <= MAX_SEP_CHARS:
        raise ValueError(
            f"--doc-sep: expected 1 to {MAX_SEP_CHARS} characters or 'none', got {doc_sep!r}"
        )
    return doc_sep


class DocScanner:
    """Document boundaries of a text given in blocks (``str`` or ``bytes``, with a separator of
    the same type): :attr:`bounds` is the offset where each document after the first begins,
    just past a run of separators (the separator goes with the document before it; separators
    in a row make no empty document). Memory: one offset per document."""

    def __init__(self, sep: str | bytes) -> None:
        self.sep, self.tail, self.base = sep, sep[:0], 0  # tail: the last len(sep) - 1 read
        self.bounds: list[int] = []
        self.end = 0  # the end of the last separator found (they never overlap)

    def feed(self, block: str | bytes) -> None:
        buf, start = self.tail + block, self.base - len(self.tail)
        i = buf.find(self.sep, max(self.end - start, 0))
        while i >= 0:
            at, self.end = start + i, start + i + len(self.sep)
            if self.bounds and self.bounds[-1] == at:
                self.bounds[-1] = self.end  # a run of separators: one boundary, after the last
            else:
                self.bounds.append(self.end)
            i = buf.find(self.sep, i + len(self.sep))
        self.base += len(block)
        keep = len(self.sep) - 1
        self.tail = buf[len(buf) - keep :] if keep else buf[:0]

    def starts(self, n: int) -> np.ndarray:
        """int64: 0 and each boundary below ``n`` (token offsets when one token is one unit of
        the blocks, as bytes of a byte tokenizer)."""
        b = np.asarray(self.bounds, dtype=np.int64)
        return np.concatenate([[0], b[(b > 0) & (b < n)]]).astype(np.int64)


def piece_doc_starts(char_starts: np.ndarray, bounds: list[int], last: list[int], base: int):
    """int64: the global index of each token among tokens ``base ..`` (character starts
    ``char_starts``) that begins a document: a token belongs to the document its first
    character is in (``bisect_right`` of its start in the boundaries ``bounds``), so a token
    spanning a boundary goes to the document it starts in. ``last[0]``: the document of the
    token before ``base`` (updated); with ``base == 0`` the first token begins document 0."""
    lo = bisect.bisect_right(bounds, int(char_starts[0]))
    hi = bisect.bisect_right(bounds, int(char_starts[-1]))
    doc = lo + np.searchsorted(np.asarray(bounds[lo:hi], dtype=np.int64), char_starts, "right")
    prev = np.concatenate([[last[0] if base else doc[0]], doc[:-1]])
    last[0] = int(doc[-1])
    return (np.flatnonzero(doc != prev) + base).astype(np.int64)


BLOCK_TOKENS = 1024
"""The length of the contiguous blocks that stand in for documents in a text without unit
boundaries (shorter when that would give fewer than :data:`MIN_BLOCKS` blocks)."""
MIN_BLOCKS = 10


def block_length(n_items: int) -> int:
    """The block length for ``n_items`` scored tokens without unit boundaries:
    :data:`BLOCK_TOKENS`, or ``n_items // MIN_BLOCKS`` (at least 1) when the text is too short
    for :data:`MIN_BLOCKS` blocks of that length.

    Example: 50,000 tokens -> 1024 (49 blocks); 2,000 tokens -> 200 (10 blocks).
    """
    return max(1, min(BLOCK_TOKENS, n_items // MIN_BLOCKS))


def scored_starts(doc_starts, n: int) -> tuple[np.ndarray, int | None]:
    """``(starts, block_len)``: the token offsets where the units of ``n`` tokens begin, for
    the scored tokens ``1 .. n-1``. ``doc_starts`` (the documents) when the scored tokens span
    at least 2 of them (``block_len`` None); else contiguous blocks of :func:`block_length`
    scored tokens (token 0, unscored, in the first).

    Example: ``scored_starts(None, 31)`` -> blocks of 3 scored tokens, starts ``[0, 4, 7, ..]``.
    """
    if doc_starts is not None:
        s = np.asarray(doc_starts, dtype=np.int64)
        if int(((s >= 2) & (s < n)).sum()) >= 1:
            return s, None
    length = block_length(n - 1)
    return np.concatenate([[0], 1 + np.arange(length, n - 1, length)]).astype(np.int64), length


class DocSums:
    """Per-unit sums of per-token NLLs streamed in chunks: ``S_g`` (nats) and ``N_g`` (tokens)
    of each unit beginning at the token offsets ``starts``; memory: two floats per unit."""

    def __init__(self, starts: np.ndarray) -> None:
        self.starts = np.asarray(starts, dtype=np.int64)
        self.S = np.zeros(self.starts.size)
        self.N = np.zeros(self.starts.size)

    def add(self, t0: int, nll: np.ndarray) -> None:
        """The NLLs of tokens ``t0, t0 + 1, ...``."""
        if not len(nll):
            return
        doc = np.searchsorted(self.starts, np.arange(t0, t0 + len(nll)), side="right") - 1
        lo, hi = int(doc[0]), int(doc[-1]) + 1
        self.S[lo:hi] += np.bincount(doc - lo, weights=nll, minlength=hi - lo)
        self.N[lo:hi] += np.bincount(doc - lo, minlength=hi - lo)

    def sums(self) -> tuple[np.ndarray, np.ndarray]:
        """``(S, N)`` of the units that hold a scored token."""
        keep = self.N > 0
        return self.S[keep], self.N[keep]


def clustered(summary: dict, S: np.ndarray, N: np.ndarray, block_len: int | None) -> dict:
    """:func:`tinyllm.eval.lm.summarize_nlls`' ``summary`` with its intervals over units: the
    cluster-robust ratio estimator of the mean NLL from the per-unit sums ``S``, ``N``
    (:func:`tinyllm.stats.ratio_from_sums`, t with G - 1 df), its half-widths around the
    summary's own value (unchanged), ``ppl`` ends ``exp`` of the NLL ends, ``bpb`` ends the NLL
    ends times ``N / (n_bytes ln 2)``. Adds ``interval`` (``cluster_ratio``), ``n_units``,
    ``se`` (nats per token), ``iid_interval`` (the Student t over tokens: ``nll``, ``bpb``),
    ``interval_warning`` and ``block_len`` (None: documents)."""
    warning = stats.units.units_warning(int(S.size), block_len)
    iv = stats.ratio_from_sums(S, N, warning=warning)
    v = summary["nll"]["value"]
    lo, hi = v - (iv.value - iv.lo), v + (iv.hi - iv.value)
    scale = summary["n_tokens"] / summary["n_bytes"] / stats.LN2
    return summary | {
        "nll": {"value": v, "lo": lo, "hi": hi},
        "ppl": {"value": summary["ppl"]["value"], "lo": float(np.exp(lo)), "hi": float(np.exp(hi))},
        "bpb": {"value": summary["bpb"]["value"], "lo": lo * scale, "hi": hi * scale},
        "interval": str(stats.Method.CLUSTER_RATIO),
        "n_units": int(S.size),
        "se": None if iv.se is None else float(iv.se),
        "iid_interval": {"nll": summary["nll"], "bpb": summary["bpb"]},
        "interval_warning": warning,
        "block_len": block_len,
    }


MAX_RECORD_BYTES = 1 << 24
"""The longest line of a JSONL text (16 MiB): a longer one is refused, naming the line."""


class JsonlReader:
    """A JSONL text (``.jsonl``): one document per record, its field ``text`` (a string), read
    a line at a time (each at most :data:`MAX_RECORD_BYTES`; blank lines skipped). The text
    scored is the records' texts, each followed by a newline; the documents are the records
    (:meth:`scanner`), whatever newlines a record holds. A first pass checks every record and
    counts the text's UTF-8 bytes (``size``); a bad record is one line naming the file and the
    line. Used as :class:`tinyllm.eval.text.TextReader` is: ``size``, :meth:`blocks`."""

    def __init__(self, path) -> None:
        self.path = path
        self.char_bounds: list[int] = []
        self.byte_bounds: list[int] = []
        self.size = sum(len(t.encode("utf-8")) for t in self._texts())

    def _texts(self):
        with open_regular(self.path, "JSONL text") as f:
            for i, line in enumerate(iter(lambda: f.readline(MAX_RECORD_BYTES + 1), b""), 1):
                where = f"{self.path}:{i}"
                if len(line) > MAX_RECORD_BYTES:
                    raise ValueError(
                        f"{where}: expected a line of at most {MAX_RECORD_BYTES} bytes, got more"
                    )
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    raise ValueError(f"{where}: expected a JSON object, got: {e}") from None
                text = rec.get("text") if isinstance(rec, dict) else None
                if not isinstance(text, str):
                    got = type(rec).__name__ if not isinstance(rec, dict) else repr(text)[:40]
                    raise ValueError(
                        f"{where}: expected an object with a string field 'text', got {got}"
                    )
                yield text + "\n"

    def __enter__(self) -> JsonlReader:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def blocks(self, block: int = 0):
        """``(raw, text, done)`` a record at a time (``done``: the text's bytes so far); the
        end of each record is a document boundary (:meth:`scanner`)."""
        chars = done = 0
        for text in self._texts():
            raw = text.encode("utf-8")
            chars, done = chars + len(text), done + len(raw)
            self.char_bounds.append(chars)
            self.byte_bounds.append(done)
            yield raw, text, done

    def scanner(self, in_bytes: bool) -> RecordBounds:
        """The records' boundaries as a :class:`DocScanner` gives them: byte offsets
        (``in_bytes``, a byte tokenizer's token offsets) or character offsets."""
        return RecordBounds(self.byte_bounds if in_bytes else self.char_bounds)


class RecordBounds(DocScanner):
    """The boundaries of a JSONL text's records (:class:`JsonlReader`), filled as it is read."""

    def __init__(self, bounds: list[int]) -> None:
        self.bounds = bounds

    def feed(self, block) -> None:
        return None


# ---- the documents of a token file: a sidecar of token offsets (formats/tokens-bin.md) ----


def check_doc_starts(starts, n: int, what: str) -> np.ndarray:
    """``starts`` as int64 document start offsets of ``n`` tokens: 1-d, the first 0, strictly
    increasing, each < n; else a ValueError naming ``what``."""
    a = np.asarray(starts)
    if a.ndim != 1 or not a.size or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{what}: expected a 1-d integer array of token offsets, got {a.dtype}")
    a = a.astype(np.int64)
    if a[0] != 0 or (a.size > 1 and np.any(np.diff(a) <= 0)) or a[-1] >= n:
        raise ValueError(
            f"{what}: expected document offsets strictly increasing from 0, each below the "
            f"{n} tokens, got {a[:5].tolist()}{'...' if a.size > 5 else ''} (last {int(a[-1])})"
        )
    return a


DOCS_SUFFIX = ".docs.npy"
"""The sidecar of a token file that marks its documents: ``<file>.docs.npy``."""


def docs_sidecar(path: str | os.PathLike) -> Path:
    """``<path>.docs.npy``: where a token file's document offsets live (formats/tokens-bin.md)."""
    p = Path(path)
    return p.with_name(p.name + DOCS_SUFFIX)


def read_doc_starts(path: str | os.PathLike, n: int) -> np.ndarray | None:
    """The document offsets of the token file ``path`` of ``n`` ids from its sidecar
    (:func:`docs_sidecar`: a ``.npy`` of int64 token offsets, read without pickle, checked by
    :func:`check_doc_starts`), or None when it has none. A sidecar that is not such a file is a
    TokenFileError naming it."""
    side = docs_sidecar(path)
    if not side.exists():
        return None
    try:
        with open_regular(side, "document offsets") as f:
            a = np.load(f, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise TokenFileError(f"{side}: expected a .npy of int64 token offsets, got: {e}") from None
    if a.dtype != np.dtype("<i8"):
        raise TokenFileError(f"{side}: expected int64 token offsets, got {a.dtype}")
    try:
        return check_doc_starts(a, n, str(side))
    except ValueError as e:
        raise TokenFileError(str(e)) from None


def write_doc_starts(path: str | os.PathLike, starts) -> Path:
    """Write the document offsets of the token file ``path`` to its sidecar (atomically)."""
    a = np.ascontiguousarray(np.asarray(starts, dtype="<i8"))
    side = docs_sidecar(path)
    safeio.write_atomic(side, lambda f: np.save(f, a, allow_pickle=False), what="document offsets")
    return side
