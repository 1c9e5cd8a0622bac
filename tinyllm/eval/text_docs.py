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

import numpy as np

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
