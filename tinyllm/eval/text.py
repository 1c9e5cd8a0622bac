"""Text in (docs/definitions.md, bits per byte and text in): a UTF-8 text scored with the model's own tokenizer, bits per
byte over the bytes the scored tokens cover, and two models paired on the same tokens.

* :func:`load_tokenizer` -- ``"byte"`` (:class:`tinyllm.tokens.ByteTokenizer`) or a folder's
  Hugging Face tokenizer (``AutoTokenizer``, ``local_files_only``);
* :func:`own_tokenizer` / :func:`model_tokenizer` -- a model's own tokenizer: bytes for our
  families, the folder's own for a Hugging Face model (bytes only for a folder without one, a
  byte-level model such as :func:`tinyllm.models.hf.export_hf` writes);
* :class:`TextReader` -- a text file (or a token file of its bytes) a block at a time;
* :func:`read_lm_tokens` -- an lm data file as :class:`tinyllm.tokens.TextTokens` of a
  tokenizer, tokenized a piece at a time in bounded memory, the ids in a compact array (an
  unlinked temporary file past :data:`SPILL_BYTES`);
* :func:`text_ppl` / :func:`summarize_text` -- strided perplexity of such tokens, bpb over
  their scored bytes, intervals over the text's documents (:mod:`tinyllm.eval.text_docs`);
  two models on one text: :mod:`tinyllm.eval.text_compare`.
"""

from __future__ import annotations

import codecs
import errno
import mmap
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tinyllm import safeio, windows
from tinyllm.eval.lm import summarize_nlls
from tinyllm.eval.lm.heads import views
from tinyllm.eval.text_docs import (
    DOC_SEP,
    DocScanner,
    DocSums,
    JsonlReader,
    check_doc_sep,
    clustered,
    piece_doc_starts,
    scored_starts,
)
from tinyllm.logits import eval_mode
from tinyllm.models import hf
from tinyllm.tokens import (
    MAGIC,
    ByteTokenizer,
    TextTokens,
    backend_of,
    check_byte_range,
    check_header,
    id_dtype,
    is_byte_level,
    open_regular,
    prefix_token_id,
    token_lengths,
    tokenizer_id,
)
from tinyllm.windows import DEFAULT_BATCH_SIZE

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


def own_tokenizer(model: Any, family: str) -> Any | None:
    """The tokenizer ``model`` (of ``family``) was trained with: :class:`ByteTokenizer` for our
    families; for ``hf`` the tokenizer saved in the folder the model was loaded from
    (``name_or_path``), or None when that folder holds none (a byte-level model, read in bytes
    unless told otherwise)."""
    if family != hf.ARCH:
        return ByteTokenizer()
    folder = getattr(model, "name_or_path", "") or ""
    if folder and any((Path(folder) / n).is_file() for n in hf.TOKENIZER_FILES):
        return hf.load_tokenizer(folder)
    return None


def model_tokenizer(model: Any, family: str) -> Any:
    """The tokenizer ``model`` (of ``family``) reads: :func:`own_tokenizer`, bytes for a
    Hugging Face folder without one (its vocabulary at least the 256 byte ids)."""
    own = own_tokenizer(model, family)
    return ByteTokenizer() if own is None else own


TEXT_BLOCK = 1 << 16  # bytes of a text file read at a time


def _unreadable(p: Path, e: OSError) -> ValueError:
    why = "a symbolic link loop" if e.errno == errno.ELOOP else (e.strerror or str(e)).lower()
    return ValueError(f"{p}: expected a readable text file, got {why}")


class TextReader:
    """The UTF-8 text of the regular file ``path``, or of a token file of its byte ids
    (formats/tokens-bin.md), read a block at a time: memory stays bounded whatever the size.

    Opening refuses, naming the file: nothing there (FileNotFoundError), not a regular file (a
    FIFO or a device, never waited on), an unreadable path (a symbolic link loop, no
    permission), a token file whose header lies or whose ids are not bytes. :meth:`blocks`
    refuses bytes that are not UTF-8, with the offset of the first bad byte. ``size`` is the
    text's UTF-8 bytes (a token file: its count of ids). Use as a context manager.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = p = Path(path)
        try:
            self._f = open_regular(p, "text file")
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(f"{p}: text file not found") from None
        except safeio.UnsafePathError:
            raise
        except OSError as e:
            raise _unreadable(p, e) from None
        try:
            self.token_file = self._f.read(len(MAGIC)) == MAGIC
            self._f.seek(0)
            if self.token_file:
                self._dtype, self.size = check_header(p, self._f)
            else:
                self._dtype, self.size = np.dtype(np.uint8), os.fstat(self._f.fileno()).st_size
        except BaseException:
            self._f.close()
            raise

    def __enter__(self) -> TextReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._f.close()

    def _raw(self, block: int) -> Iterator[bytes]:
        step = self._dtype.itemsize
        done = 0
        while True:
            try:
                chunk = self._f.read(block * step)
            except OSError as e:
                raise _unreadable(self.path, e) from None
            if not chunk:
                return
            if self.token_file:
                ids = np.frombuffer(chunk, dtype=self._dtype)
                what = f"{self.path} (token file, ids {done}..{done + ids.size - 1})"
                chunk = check_byte_range(ids, what).astype(np.uint8).tobytes()
            done += len(chunk)
            yield chunk

    def blocks(self, block: int = TEXT_BLOCK) -> Iterator[tuple[bytes, str, int]]:
        """``(raw, text, done)`` a block at a time: the block's bytes, the text they complete
        (a character split between blocks comes with the block that ends it) and the bytes read
        so far, until ``done == size``."""
        dec = codecs.getincrementaldecoder("utf-8")("strict")
        done = 0
        for raw in self._raw(block):
            held = len(dec.getstate()[0])
            try:
                text = dec.decode(raw)
            except UnicodeDecodeError as e:
                raise self._bad_utf8(done - held + e.start) from None
            done += len(raw)
            yield raw, text, done
        try:
            dec.decode(b"", final=True)
        except UnicodeDecodeError as e:
            raise self._bad_utf8(done - len(dec.getstate()[0]) + e.start) from None

    def _bad_utf8(self, offset: int) -> ValueError:
        return ValueError(
            f"{self.path}: expected UTF-8 text, got an undecodable byte at offset {offset}"
        )


# ---- a text in bounded memory -------------------------------------------------------------

PIECE_CHARS = 1 << 16
"""Characters tokenized at a time (a cut falls in the second half of a piece)."""
CONTEXT_CHARS = 512
"""Characters on either side of a piece tokenized with it, their tokens dropped: the tokens near
a cut see the text around it as in the whole text, and two pieces are checked on them."""
MAX_PIECE_CHARS = 1 << 19
"""The longest piece: where no cut the tokenizer agrees with is found, the text is cut here (a
warning)."""
SPILL_BYTES = 1 << 25
"""Bytes of ids held in memory; a longer text's ids go to an unlinked temporary file."""
RELEASE_BYTES = 1 << 22
"""Bytes of mapped ids the scorer has read past before they are released from memory."""
_LINE_START = re.compile(r"(?<=\n)\S")


@dataclass(frozen=True)
class _Piece:
    """The characters ``[start, cut)`` of the text, tokenized as ``left + text`` (``left``:
    the context before ``start``; ``text``: from ``start``, past ``cut`` unless ``last``):
    ``ids`` / ``starts`` / ``ends`` every token with its global character span, tokens
    ``k .. j-1`` the piece's own; ``clean``: no token straddles ``start`` or ``cut``."""

    start: int
    cut: int
    left: str
    text: str
    ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    k: int
    j: int
    clean: bool
    last: bool
    enc: Any


def _choose_cut(text: str, start: int, starts: np.ndarray, word: np.ndarray, size: int) -> int:
    """The cut of a piece from ``start``: the last token start in the second half of ``size``
    characters that begins a line (after a newline, a non-space character), else the last that
    begins a word (the tokenizer's pre-token), else the last token start, else ``size``."""
    lo, hi = start + size // 2, start + size
    inside = (starts >= lo) & (starts <= hi)
    lines = np.array([m.start() for m in _LINE_START.finditer(text, size // 2, size + 1)])
    for keep in (np.isin(starts - start, lines), word, np.ones_like(inside)):
        c = starts[inside & keep]
        if c.size:
            return int(c.max())
    return hi


def _encode(backend: Any, left: str, text: str, start: int, size: int, last: bool) -> _Piece:
    """``text`` after ``left``, its cut chosen (:func:`_choose_cut`) unless ``last``."""
    enc = backend.encode(left + text, add_special_tokens=False)
    ids = np.asarray(enc.ids, dtype=np.int64)
    off = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2) + (start - len(left))
    words = np.array([-1 if w is None else w for w in enc.word_ids], dtype=np.int64)
    word = np.ones(ids.size, dtype=bool)
    word[1:] = words[1:] != words[:-1]
    cut = start + len(text) if last else _choose_cut(text, start, off[:, 0], word, size)
    k = int(np.searchsorted(off[:, 0], start, side="left"))
    j = int(np.searchsorted(off[:, 0], cut, side="left"))
    clean = not (off[:k, 1] > start).any() and not (off[k:j, 1] > cut).any()
    return _Piece(start, cut, left, text, ids, off[:, 0], off[:, 1], k, j, clean, last, enc)


def _agrees(prev: _Piece, cur: _Piece, context: int) -> bool:
    """Whether ``cur`` (from ``prev.cut``) continues ``prev``: both clean, and the same tokens
    where both read the text around the cut, from half a context before it to half a context
    before the end of what ``prev`` read (``prev`` saw the text before the cut, ``cur`` after)."""
    lo, hi = prev.cut - context // 2, prev.start + len(prev.text) - context // 2

    def near(p: _Piece) -> np.ndarray:
        return np.flatnonzero((p.starts >= lo) & (p.ends <= hi))

    a, b = near(prev), near(cur)
    return (
        prev.clean
        and cur.clean
        and np.array_equal(prev.ids[a], cur.ids[b])
        and np.array_equal(prev.starts[a], cur.starts[b])
        and np.array_equal(prev.ends[a], cur.ends[b])
    )


class PieceStream:
    """The tokens of a text, given in blocks, a piece at a time, in order (:meth:`pieces`).

    Each piece is tokenized by ``backend`` (a ``tokenizers.Tokenizer``) with ``context``
    characters on either side (their tokens dropped) and ends where a token starts
    (:func:`_choose_cut`: a line start first). It is given out once the next piece agrees with
    it around the cut (:func:`_agrees`); else it is tokenized again twice as long, up to
    ``max_piece`` characters, past which it is given out as it is and counted in :attr:`forced`
    (tokens near that cut may differ from the whole text's).

    Why the ids are the whole text's: a token depends on the text around it only as far as its
    pre-token (byte-level BPE: a word and the space before it; a line break) or, for a
    tokenizer without pre-tokens (SentencePiece), as far as the merges reach, which stop at a
    character no piece contains (a newline); the context covers that reach, absorbs what a
    tokenizer adds at the start of a string (Metaspace's "▁"), and every cut is checked. The
    one case the check can miss: a single pre-token longer than the context (hundreds of
    letters without a space or a line break), cut where both pieces happen to agree; text in a
    natural language has none.
    """

    def __init__(
        self,
        backend: Any,
        *,
        piece: int = PIECE_CHARS,
        context: int = CONTEXT_CHARS,
        max_piece: int | None = None,
    ) -> None:
        self.backend, self.piece, self.context = backend, piece, context
        self.max_piece = MAX_PIECE_CHARS if max_piece is None else max_piece
        self.forced = 0

    def pieces(self, texts: Iterator[str]) -> Iterator[_Piece]:
        """The pieces of the text that ``texts`` gives in blocks (any lengths)."""
        buf, left, base = "", "", 0  # the text from `base` on not given out, the context before
        done, pending, size, ctx = False, None, self.piece, self.context

        def encode(at: int, size: int) -> _Piece:
            nonlocal buf, done
            while not done and len(buf) < at + size + ctx + 1:
                nxt = next(texts, None)
                done = nxt is None
                buf += nxt or ""
            last = done and len(buf) <= at + size + ctx
            before = (left + buf[:at])[-ctx:]
            return _encode(self.backend, before, buf[at : at + size + ctx], base + at, size, last)

        while True:
            if pending is None:
                pending = encode(0, size)
                if not pending.text:
                    return
            if pending.last:
                yield pending
                return
            nxt = encode(pending.cut - base, self.piece)
            ok = _agrees(pending, nxt, ctx)
            if not ok and size * 2 <= self.max_piece:
                size, pending = size * 2, None
                continue
            self.forced += not ok
            yield pending
            left = (left + buf[: pending.cut - base])[-ctx:]
            buf, base = buf[pending.cut - base :], pending.cut
            pending, size = nxt, self.piece


class _IdSink:
    """Token ids appended in order, in ``dtype``: in memory up to ``spill`` bytes, then in an
    unlinked temporary file (nothing is left on disk, whatever happens) that :meth:`finish`
    maps read-only. ``path`` and ``size`` (the text's bytes) name the text in errors."""

    def __init__(self, dtype: np.dtype, path: Path, size: int, spill: int) -> None:
        self.dtype, self.path, self.size, self.spill = dtype, path, size, spill
        self.parts: list[np.ndarray] = []
        self.n, self.max, self.file, self.tmp = 0, -1, None, tempfile.gettempdir()

    def add(self, ids: np.ndarray) -> None:
        if not ids.size:
            return
        self.max = max(self.max, int(ids.max()))
        a = np.ascontiguousarray(ids, dtype=self.dtype)
        self.n += a.size
        if self.file is None and self.n * a.itemsize > self.spill:
            need = (self.size + 2) * a.itemsize  # at most one token per byte, and the prefix
            free = shutil.disk_usage(self.tmp).free
            if need > free:
                raise ValueError(
                    f"{self.path}: expected room for the token ids of its {self.size} bytes (up "
                    f"to {need} bytes) in {self.tmp}, got {free} bytes free there; free some or "
                    f"set TMPDIR to a larger disk"
                )
            self.file = tempfile.TemporaryFile(dir=self.tmp)  # noqa: SIM115 - kept open
            for p in self.parts:
                self._write(p)
            self.parts = []
        if self.file is None:
            self.parts.append(a)
        else:
            self._write(a)

    def _write(self, a: np.ndarray) -> None:
        try:
            self.file.write(a.data)
        except OSError as e:
            self.file.close()
            raise ValueError(
                f"{self.path}: expected to write its token ids to {self.tmp}, got: {e.strerror}"
            ) from None

    def finish(self) -> np.ndarray:
        if self.file is None:
            return np.concatenate(self.parts) if self.parts else np.zeros(0, self.dtype)
        with self.file:
            self.file.flush()
            mm = mmap.mmap(self.file.fileno(), 0, access=mmap.ACCESS_READ)
        return np.frombuffer(mm, dtype=self.dtype)


def read_lm_tokens(
    path: str | os.PathLike,
    tokenizer: Any,
    *,
    prefix: bool = True,
    progress: Callable[[int, int], Any] | None = None,
    spill: int = SPILL_BYTES,
    piece: int = PIECE_CHARS,
    doc_sep: str | None = DOC_SEP,
) -> TextTokens:
    """The lm data file ``path`` (a UTF-8 text, or a token file of its byte ids: :class:`TextReader`)
    as :class:`TextTokens` of ``tokenizer``, the ids those of :func:`tinyllm.tokens.tokenize_text`
    on the whole text, read and tokenized ``piece`` characters at a time (:class:`PieceStream`)
    so memory stays bounded whatever the file's size. With ``prefix`` the tokenizer's prefix
    token (BOS, else EOS) comes first; ``first_bytes`` is the bytes token 0 covers
    (:func:`tinyllm.tokens.token_lengths` of the first piece). Ids past ``spill`` bytes go to an
    unlinked temporary file in ``TMPDIR``, refused up front naming the file when that disk has no
    room for one id per byte. ``progress(done, total)`` is told the bytes read. Spans are not
    kept (``lengths`` is None).

    A ``.jsonl`` file is a text of one document per record (:class:`tinyllm.eval.text_docs.
    JsonlReader`: each record's ``text`` and a newline; ``doc_sep`` is not used). Documents of
    a text (``doc_sep``, default one per line; None or ``"none"``: no boundaries): the text
    is cut just after each run of separators, and each token belongs to the document its first
    character is in (a separator's tokens go to the document before it; a token spanning a
    boundary to the document it starts in; a prefix token to the first). ``doc_starts`` holds
    each document's first token, one offset per document (a document left without a token of
    its own is no document); the ids, and so every NLL, are the same whatever ``doc_sep``.
    """
    name = tokenizer_id(tokenizer)
    sep = check_doc_sep(doc_sep)
    p = Path(path)
    jsonl = p.suffix == ".jsonl"
    with JsonlReader(p) if jsonl else TextReader(p) as r:
        if r.size == 0:
            raise ValueError(f"{p}: expected at least one character, got an empty text")

        def blocks() -> Iterator[tuple[bytes, str]]:
            for raw, text, done in r.blocks():
                if progress is not None:
                    progress(done, r.size)
                yield raw, text

        if isinstance(tokenizer, ByteTokenizer):
            sink = _IdSink(np.dtype(np.uint8), p, r.size, spill)
            scan = DocScanner(sep.encode("utf-8")) if sep is not None else None
            scan = r.scanner(True) if jsonl else scan
            for raw, _ in blocks():
                sink.add(np.frombuffer(raw, dtype=np.uint8))
                if scan is not None:
                    scan.feed(raw)
            docs = None if scan is None else scan.starts(sink.n)
            return TextTokens(sink.finish(), r.size, 1, False, name, sink.max, doc_starts=docs)
        backend = backend_of(tokenizer)
        pid = prefix_token_id(tokenizer) if prefix else None
        vocab = max(backend.get_vocab_size(with_added_tokens=True), (pid or 0) + 1)
        sink = _IdSink(id_dtype(vocab), p, r.size, spill)
        if pid is not None:
            sink.add(np.array([pid]))
        stream = PieceStream(backend, piece=piece)
        first, before = None, 0  # token 0's bytes; the bytes of pieces without a token
        scan = r.scanner(False) if jsonl else DocScanner(sep) if sep is not None else None
        docs: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
        last = [0]  # the document of the last token given out

        def texts() -> Iterator[str]:
            for _, text in blocks():
                if scan is not None:
                    scan.feed(text)
                yield text

        for pc in stream.pieces(texts()):
            if scan is not None and pc.j > pc.k:  # the scanner has read past the piece
                docs.append(piece_doc_starts(pc.starts[pc.k : pc.j], scan.bounds, last, sink.n))
            if first is None and pc.j > pc.k:
                lens = token_lengths(tokenizer, pc.enc, pc.left + pc.text, is_byte_level(tokenizer))
                first = before - len(pc.left.encode("utf-8")) + int(lens[: pc.k + 1].sum())
            elif first is None:
                before += len(pc.text[: pc.cut - pc.start].encode("utf-8"))
            sink.add(pc.ids[pc.k : pc.j])
        if first is None:
            raise ValueError(f"{p}: tokenizer {name}: expected at least one token, got none")
        ids = sink.finish()
    if stream.forced:
        warnings.warn(
            f"{p}: {stream.forced} cut(s) of the text where the tokenizer gave no boundary within "
            f"{stream.max_piece} characters; tokens near them may differ from the whole text's",
            stacklevel=2,
        )
    first_bytes = 0 if pid is not None else first
    starts = None if scan is None else np.unique(np.concatenate(docs))
    return TextTokens(ids, r.size, first_bytes, pid is not None, name, sink.max, doc_starts=starts)


def released_behind(ids: np.ndarray, ctx_len: int, progress: Callable | None) -> Callable:
    """The scorer's ``progress(done, total)`` that also releases from memory the mapped ids
    (:func:`read_lm_tokens`' temporary file) no later window reads (those before token
    ``done + 1 - ctx_len``), :data:`RELEASE_BYTES` at a time, then calls ``progress``. The ids
    stay readable (the pages come back from the file), so memory stays bounded by what the
    windows read."""
    mm, base = None, ids.base
    while base is not None and mm is None:
        mm = base.obj if isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap) else None
        base = getattr(base, "base", None)
    gone = [0]

    def update(done: int, total: int) -> None:
        end = max(done + 1 - ctx_len, 0) * ids.itemsize // mmap.PAGESIZE * mmap.PAGESIZE
        if mm is not None and hasattr(mm, "madvise") and end - gone[0] >= RELEASE_BYTES:
            mm.madvise(mmap.MADV_DONTNEED, gone[0], end - gone[0])
            gone[0] = end
        if progress is not None:
            progress(done, total)

    return update


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
    """Strided perplexity (the windows of :func:`tinyllm.eval.lm.eval_ppl`, the same NLLs and
    values) of ``tokens``, with ``bpb = sum_t l_t / (n_bytes * ln 2)``, ``n_bytes`` =
    :attr:`TextTokens.n_scored_bytes` (the UTF-8 bytes tokens ``1 .. n-1`` cover), the
    intervals over the text's documents (:func:`summarize_text`) and :func:`text_details`.

    Mapped ids are released as the windows pass them (:func:`released_behind`); the NLLs are
    streamed, only their per-document sums are kept.

    Example: a uniform byte model on ``"héllo"`` (6 bytes, no prefix): 5 scored tokens of
    ``ln 256`` over 5 bytes, bpb = 8.
    """
    bar = released_behind(tokens.ids, ctx_len, progress)
    res = ppl_over_docs(
        model, tokens.ids, ctx_len, stride, tokens.n_scored_bytes, tokens.doc_starts,
        batch_size=batch_size, progress=bar,
    )  # fmt: skip
    return res | text_details(tokens)


def ppl_over_docs(
    model: Any,
    ids: np.ndarray,
    ctx_len: int,
    stride: int,
    n_bytes: int,
    doc_starts: Any,
    *,
    batch_size: int | None = None,
    progress: Callable[[int, int], Any] | None = None,
) -> dict:
    """Strided perplexity of ``ids`` (the windows, NLLs and values of
    :func:`tinyllm.eval.lm.eval_ppl`), its intervals over the documents beginning at the
    token offsets ``doc_starts`` (:func:`summarize_docs`; None: contiguous blocks)."""
    bs = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
    chunks = windows.nll_chunks(model, ids, ctx_len, stride, bs, progress, views=views(model))
    with eval_mode(model):
        return summarize_docs(chunks, int(ids.size), n_bytes, doc_starts)


def summarize_docs(
    chunks: Iterable[tuple[int, np.ndarray]], n: int, n_bytes: int, doc_starts: Any
) -> dict:
    """:func:`tinyllm.eval.lm.summarize_nlls` of the NLLs ``chunks`` gives (``(t0, nlls)``: the
    NLLs of tokens ``t0, t0 + 1, ...`` of ``n`` tokens) over ``n_bytes`` (0: one per token),
    its intervals over the documents beginning at ``doc_starts``
    (:func:`tinyllm.eval.text_docs.clustered`: the cluster-robust ratio estimator, the Student t
    over tokens kept as ``iid_interval``; contiguous blocks with a warning when there are no
    boundaries). Only the per-document sums are kept."""
    starts, block = scored_starts(doc_starts, n)
    sums = DocSums(starts)

    def nlls() -> Iterator[np.ndarray]:
        for t0, nll in chunks:
            sums.add(t0, nll)
            yield nll

    res = summarize_nlls(nlls(), n_bytes)
    return clustered(res, *sums.sums(), block)


def summarize_text(chunks: Iterable[tuple[int, np.ndarray]], tokens: TextTokens) -> dict:
    """:func:`summarize_docs` over ``tokens``' scored bytes and documents, plus
    :func:`text_details`."""
    n = int(tokens.ids.size)
    res = summarize_docs(chunks, n, tokens.n_scored_bytes, tokens.doc_starts)
    return res | text_details(tokens)
