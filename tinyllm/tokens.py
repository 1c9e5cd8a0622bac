"""Byte-level tokenizer and the token file format (formats/tokens-bin.md).

A token file is a 32-byte little-endian header followed by the ids::

    offset size  field
    0      8     magic   b"TLTOKENS"
    8      4     version uint32, = 1
    12     4     dtype   uint32 code: 1 = uint8, 2 = uint16, 3 = uint32, 4 = int64
    16     8     count   uint64, number of ids that follow
    24     8     reserved, zero
    32     ...   count ids of that dtype, little-endian

Reading uses ``numpy.memmap``: the file is never loaded whole, so evaluating a file of any length
keeps memory bounded by what the caller reads at a time. Only a regular file is read (a FIFO or a
device is refused, saying what it is, and never blocks), and an int64 file's ids are checked to be
non-negative, a chunk at a time. Writing goes through :func:`tinyllm.safeio.write_atomic`.

Text in (docs/definitions.md, bits per byte and text in): :class:`TextTokens` (a text's ids and the bytes its scored tokens
cover), :func:`token_lengths` (the bytes each token of one tokenizer call covers) and
:func:`tokenize_text` (a whole text in memory); a file of any size is read a piece at a time by
:func:`tinyllm.eval.text.read_lm_tokens`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from tinyllm import safeio

MAGIC = b"TLTOKENS"
VERSION = 1
HEADER = struct.Struct("<8sIIQQ")  # magic, version, dtype code, count, reserved
HEADER_SIZE = HEADER.size  # 32
DTYPES = {1: np.dtype("<u1"), 2: np.dtype("<u2"), 3: np.dtype("<u4"), 4: np.dtype("<i8")}
_CODES = {dt: code for code, dt in DTYPES.items()}
CHECK_CHUNK = 1 << 22  # ids per chunk when an int64 file's ids are checked (32 MiB)


class TokenFileError(ValueError):
    """A token file that is not what the format says; the message names the file."""


@dataclass(frozen=True)
class ByteTokenizer:
    """UTF-8 bytes as tokens: id ``i`` in 0..255 is the byte ``i``. No special tokens.

    One token is one byte, so for byte-level models bits per token = bits per byte. Families
    that need extra symbols (begin/end of sequence, mask, padding) add them above 255 in their own
    config; this tokenizer never produces them.
    """

    vocab_size: int = 256

    def encode(self, text: str) -> np.ndarray:
        """``text`` -> int64 array of its UTF-8 bytes."""
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids) -> str:
        """Ids (0..255) -> text; ids above 255 are dropped, invalid UTF-8 becomes U+FFFD."""
        a = np.asarray(ids, dtype=np.int64).reshape(-1)
        return bytes(a[(a >= 0) & (a < 256)].astype(np.uint8).tolist()).decode(
            "utf-8", errors="replace"
        )

    def n_bytes(self, text: str) -> int:
        """UTF-8 byte count of ``text``."""
        return len(text.encode("utf-8"))

    def to_dict(self) -> dict:
        """The tokenizer's description stored in a checkpoint's config.json."""
        return {"type": "byte", "vocab_size": self.vocab_size}

    @staticmethod
    def from_dict(d: dict) -> ByteTokenizer:
        if d.get("type") != "byte":
            raise ValueError(f"tokenizer: expected type 'byte', got {d.get('type')!r}")
        return ByteTokenizer()


# Special ids of the families that read strings (seq2seq, transformer, bert, electra,
# classifier): above the 256 bytes, never produced by ByteTokenizer. A family's vocabulary is
# ``N_BYTES + N_SPECIAL`` (it may leave some unused). Bytes keep their ids, so a byte-level
# model's output is decoded with ``ByteTokenizer.decode`` (which drops every id above 255).
N_BYTES = 256
PAD = 256  # padding: right of every sequence in a batch; never predicted, never masked
BOS = 257  # begin of sequence: a decoder's first input
EOS = 258  # end of sequence: a decoder's last target; beam search stops a hypothesis on it
MASK = 259  # the [MASK] of masked-LM pretraining (bert, electra)
CLS = 260  # the first token of an encoder's input; a classifier reads its final state
N_SPECIAL = 5
VOCAB_WITH_SPECIALS = N_BYTES + N_SPECIAL  # 261
SPECIAL_IDS = (PAD, BOS, EOS, MASK, CLS)


def encode_batch(
    strings,
    *,
    bos: bool = False,
    eos: bool = False,
    cls: bool = False,
    max_len: int | None = None,
    pad: int = PAD,
) -> tuple[np.ndarray, np.ndarray]:
    """Byte-encode a batch of strings into one right-padded int64 array: THE padding helper of
    every family that reads batches of strings.

    Each string becomes ``[CLS]? [BOS]? <its UTF-8 bytes> [EOS]?`` (ids 0..255 for the bytes,
    the special ids above 255 from this module); with ``max_len`` the bytes are cut from the
    right so that the whole row, specials included, fits in ``max_len`` (the specials are always
    kept). Rows are right-padded with ``pad`` to the longest row.

    Returns ``(ids [B, T] int64, lengths [B] int64)``: ``lengths[b]`` counts row b's real tokens
    (specials included, padding excluded), so ``ids[b, lengths[b]:] == pad``. ``T >= 1`` even
    for an empty batch of empty strings (one column of padding).

    >>> ids, n = encode_batch(["ab", "c"], eos=True)
    >>> ids.tolist(), n.tolist()
    ([[97, 98, 258], [99, 258, 256]], [3, 2])
    """
    if isinstance(strings, str):
        raise TypeError("encode_batch: expected a list of strings, got one str")
    prefix = ([CLS] if cls else []) + ([BOS] if bos else [])
    suffix = [EOS] if eos else []
    n_special = len(prefix) + len(suffix)
    if max_len is not None and max_len < n_special + 1:
        raise ValueError(
            f"encode_batch: expected max_len >= {n_special + 1} (the specials plus one byte), "
            f"got {max_len}"
        )
    rows = []
    for i, s in enumerate(strings):
        if not isinstance(s, str):
            raise TypeError(f"encode_batch: expected str at index {i}, got {type(s).__name__}")
        b = list(s.encode("utf-8"))
        if max_len is not None:
            b = b[: max_len - n_special]
        rows.append(prefix + b + suffix)
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    T = max(1, int(lengths.max())) if rows else 1
    ids = np.full((len(rows), T), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    return ids, lengths


def write_tokens(path: str | os.PathLike, ids, dtype: str | None = None) -> Path:
    """Write ``ids`` as a token file; the dtype defaults to the smallest that holds them.

    The file is written to a fresh random temporary name beside it and renamed
    (:func:`tinyllm.safeio.write_atomic`), so a reader never sees half of it and a planted link
    or special file at ``path`` is never written through.
    """
    path = Path(path)
    a = np.asarray(ids)
    if a.ndim != 1:
        raise ValueError(f"write_tokens({path}): expected a 1-d array of ids, got shape {a.shape}")
    if a.size and (not np.issubdtype(a.dtype, np.integer) or a.min() < 0):
        raise ValueError(f"write_tokens({path}): expected non-negative integer ids, got {a.dtype}")
    if dtype is None:
        top = int(a.max()) if a.size else 0
        dt = next(DTYPES[c] for c in (1, 2, 3, 4) if top <= np.iinfo(DTYPES[c]).max)
    else:
        dt = np.dtype(dtype).newbyteorder("<")
        if dt not in _CODES:
            raise ValueError(f"write_tokens: expected dtype uint8/uint16/uint32/int64, got {dtype}")

    def write(f: BinaryIO) -> None:
        f.write(HEADER.pack(MAGIC, VERSION, _CODES[dt], a.size, 0))
        f.write(a.astype(dt).tobytes())

    safeio.write_atomic(path, write, what="token file")
    return path


def open_regular(path: str | os.PathLike, what: str) -> BinaryIO:
    """``path`` opened for binary reading, refused unless it is a regular file (a link to one is
    followed): a FIFO or a device is a ValueError saying what it is, raised at once (the file is
    opened non-blocking, so a FIFO without a writer does not hang). Nothing missing: a
    FileNotFoundError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise safeio.UnsafePathError(
                f"{path}: {what}: expected a regular file, got {safeio.mode_kind(mode)}"
            )
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _open_checked(path: Path) -> tuple[BinaryIO, np.dtype, int]:
    """The open token file, its dtype and count, the header validated against the size."""
    try:
        f = open_regular(path, "token file")
    except (FileNotFoundError, NotADirectoryError):
        raise TokenFileError(f"{path}: token file not found") from None
    except safeio.UnsafePathError as e:
        raise TokenFileError(str(e)) from None
    try:
        dt, count = check_header(path, f)
    except BaseException:
        f.close()
        raise
    return f, dt, count


def check_header(path: Path, f: BinaryIO) -> tuple[np.dtype, int]:
    """(dtype, count) from the header of the open file ``f``, checked against its size."""
    size = os.fstat(f.fileno()).st_size
    if size < HEADER_SIZE:
        raise TokenFileError(
            f"{path}: truncated token file: expected a {HEADER_SIZE}-byte header, got {size} bytes"
        )
    magic, version, code, count, _ = HEADER.unpack(f.read(HEADER_SIZE))
    if magic != MAGIC:
        raise TokenFileError(f"{path}: not a token file: expected magic {MAGIC!r}, got {magic!r}")
    if version != VERSION:
        raise TokenFileError(f"{path}: expected token file version {VERSION}, got {version}")
    if code not in DTYPES:
        raise TokenFileError(
            f"{path}: expected a dtype code in {sorted(DTYPES)} "
            f"(uint8, uint16, uint32, int64), got {code}"
        )
    dt = DTYPES[code]
    expected = HEADER_SIZE + count * dt.itemsize
    if size != expected:
        raise TokenFileError(
            f"{path}: header says {count} ids of {dt.name} ({expected} bytes with the header), "
            f"but the file has {size} bytes"
            + (" (truncated)" if size < expected else " (trailing bytes)")
        )
    return dt, int(count)


def read_header(path: str | os.PathLike) -> tuple[np.dtype, int]:
    """Validate a token file's header against its size; returns (dtype, count). A FIFO or a
    device is refused (TokenFileError saying what it is), never read."""
    f, dt, count = _open_checked(Path(path))
    f.close()
    return dt, count


def read_tokens(path: str | os.PathLike, min_tokens: int = 0) -> np.ndarray:
    """Open a token file as a read-only ``numpy.memmap`` of its ids (nothing is loaded; an int64
    file is scanned once, a chunk at a time, for negative ids, refused naming the file).

    ``min_tokens``: refuse a file with fewer tokens, naming the file (perplexity needs 2: token
    0 has no context and is never scored).
    """
    path = Path(path)
    f, dt, count = _open_checked(path)
    with f:
        if count < min_tokens:
            raise TokenFileError(
                f"{path}: expected at least {min_tokens} tokens (token 0 has no context and is "
                f"never scored), got {count}"
            )
        if count == 0:
            return np.zeros(0, dtype=dt)
        # the file just checked, not whatever the path names now
        ids = np.memmap(f, dtype=dt, mode="r", offset=HEADER_SIZE, shape=(count,))
    if dt.kind == "i":  # int64, the one signed dtype: ids are never negative (as written)
        for s in range(0, count, CHECK_CHUNK):
            lo = int(ids[s : s + CHECK_CHUNK].min())
            if lo < 0:
                i = s + int(np.argmax(ids[s : s + CHECK_CHUNK] < 0))
                raise TokenFileError(
                    f"{path}: expected non-negative token ids, got {lo} (first negative id at "
                    f"index {i})"
                )
    return ids


def check_byte_ids(ids, who: str) -> np.ndarray:
    """``ids`` as a 1-d integer array (a memmap stays a memmap, nothing is copied); the values
    are checked later, chunk by chunk, with :func:`check_byte_range`."""
    a = ids if isinstance(ids, np.ndarray) else np.asarray(ids)
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(
            f"{who}: expected a 1-d integer array of byte ids, got shape {a.shape} {a.dtype}"
        )
    return a


def check_byte_range(seg: np.ndarray, who: str) -> np.ndarray:
    """``seg`` unchanged if every id is a byte (0..255), else a clear error."""
    if seg.size and (seg.min() < 0 or seg.max() >= 256):
        raise ValueError(
            f"{who}: expected byte ids in 0..255, got values in {seg.min()}..{seg.max()}"
        )
    return seg


# ---- text in: a UTF-8 text, tokenized, with the bytes each token covers (docs/definitions.md, bits per byte and text in) ----


def is_token_file(path: str | os.PathLike) -> bool:
    """Whether the regular file ``path`` starts with the token file magic ``TLTOKENS``
    (formats/tokens-bin.md); anything else is read as UTF-8 text by the lm kind."""
    with open_regular(path, "data file") as f:
        return f.read(len(MAGIC)) == MAGIC


@dataclass(frozen=True)
class TextTokens:
    """A UTF-8 text as the ids of one tokenizer, with the bytes the scored tokens cover.

    * ``ids``: the token ids, the prefix token first when ``has_prefix``, in the smallest
      unsigned dtype that holds the tokenizer's vocabulary (uint8 for bytes, uint16 up to
      65536 ids, else int32); a long text's ids live in an unlinked temporary file, mapped
      read-only (:func:`tinyllm.eval.text.read_lm_tokens`), so they cost no memory of their own;
    * ``n_text_bytes``: the text's UTF-8 bytes; ``first_bytes``: the bytes token 0 covers (0
      for a prefix token, or a marker the tokenizer inserts, such as a leading "▁");
    * ``tokenizer``: the tokenizer's identity, ``"byte"`` for :class:`ByteTokenizer`, else
      ``"hf-sha256:<16 hex>"`` of its serialized ``tokenizer.json`` (equal strings: the same
      tokenizer, so per-token NLLs of two models pair up);
    * ``max_id``: the largest id (checked against a model's vocabulary without reading ``ids``);
    * ``lengths``: int64[n], the bytes each token covers, when known (:func:`tokenize_text`);
      the spans ``[starts[i], ends[i])`` they give are contiguous and partition the text;
    * ``doc_starts``: int64[D], the index of each document's first token (``doc_starts[0] ==
      0``, strictly increasing, every document at least one token), or None for a text without
      document boundaries (docs/definitions.md, "Units"; :func:`tinyllm.eval.text.
      read_lm_tokens` with ``doc_sep``). :attr:`units` derives each token's document from it.

    The strided windows score tokens ``1 .. n-1`` (docs/definitions.md, bits per byte and text in), so bits per byte divides by
    :attr:`n_scored_bytes` = ``n_text_bytes - first_bytes``: the whole text with a prefix token,
    the text less the bytes of token 0 without one.

    Example: ``tokenize_text("hé", ByteTokenizer())`` has ids ``[104, 195, 169]``, spans
    ``[0,1) [1,2) [2,3)`` and ``n_scored_bytes = 2``.
    """

    ids: np.ndarray
    n_text_bytes: int
    first_bytes: int
    has_prefix: bool
    tokenizer: str
    max_id: int
    lengths: np.ndarray | None = None
    doc_starts: np.ndarray | None = None

    @property
    def units(self) -> np.ndarray | None:
        """int64[n]: the document of each token (0, 1, ... in order) from :attr:`doc_starts`,
        made when asked (8 bytes a token, as the per-token NLLs); None without documents."""
        if self.doc_starts is None:
            return None
        return doc_units(self.doc_starts, int(self.ids.size))

    @property
    def token_bytes(self) -> np.ndarray:
        """int64[n]: the number of UTF-8 bytes each token covers (0 for a prefix token)."""
        if self.lengths is None:
            raise ValueError("token_bytes: expected tokens from tokenize_text (spans kept)")
        return self.lengths

    @property
    def ends(self) -> np.ndarray:
        """int64[n]: the end of each token's byte span."""
        return np.cumsum(self.token_bytes)

    @property
    def starts(self) -> np.ndarray:
        """int64[n]: the start of each token's byte span."""
        return self.ends - self.token_bytes

    @property
    def n_scored_bytes(self) -> int:
        """UTF-8 bytes covered by the scored tokens ``1 .. n-1``: the ``n_bytes`` of bpb."""
        return int(self.n_text_bytes - self.first_bytes) if self.ids.size else 0

    def bytes_of(self, first: int, stop: int) -> int:
        """UTF-8 bytes covered by tokens ``first .. stop-1`` (a window's scored tokens)."""
        return int(self.token_bytes[first:stop].sum())


def doc_units(doc_starts, n: int) -> np.ndarray:
    """int64[n]: the document of each of ``n`` tokens, documents starting at the token offsets
    ``doc_starts`` (strictly increasing from 0, each < n).

    Example: ``doc_units([0, 2, 3], 5)`` -> ``[0, 0, 1, 2, 2]``.
    """
    starts = np.asarray(doc_starts, dtype=np.int64)
    sizes = np.diff(np.append(starts, n))
    return np.repeat(np.arange(starts.size, dtype=np.int64), sizes)


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest dtype of :attr:`TextTokens.ids` for ``vocab_size`` ids: uint8 up to 256,
    uint16 up to 65536, else int32."""
    return np.dtype(
        np.uint8 if vocab_size <= 1 << 8 else np.uint16 if vocab_size <= 1 << 16 else np.int32
    )


# GPT-2's byte <-> printable character table of byte-level BPE (tokenizers' ByteLevel): the
# printable Latin-1 bytes stand for themselves, the other 68 bytes for U+0100 upwards, in order.
PRINTABLE_BYTES = [*range(33, 127), *range(161, 173), *range(174, 256)]
BYTE_OF_CHAR = {chr(b): b for b in PRINTABLE_BYTES} | {
    chr(256 + i): b for i, b in enumerate(b for b in range(256) if b not in set(PRINTABLE_BYTES))
}
BYTE_FALLBACK = re.compile(r"<0x[0-9A-Fa-f]{2}>")
"""A byte-fallback token (SentencePiece-style BPE): one byte of a character the vocabulary
lacks."""


def is_byte_level(tok: Any) -> bool:
    """Whether an HF fast tokenizer decodes with tokenizers' ByteLevel decoder, alone or in a
    Sequence (GPT-2, Llama 3, Qwen2, SmolLM2, the zoo's BPE): each token's string then spells its
    exact bytes."""
    dec = json.loads(tok.backend_tokenizer.to_str()).get("decoder") or {}
    kinds = [dec.get("type")] + [d.get("type") for d in dec.get("decoders") or []]
    return "ByteLevel" in kinds


def _byte_level_lengths(pieces: list[str], raw: bytes) -> np.ndarray | None:
    """Each token's byte count from its byte-level string, or None unless the tokens spell
    ``raw`` exactly (an added token, a normalizer that changed the text)."""
    out, parts = np.empty(len(pieces), dtype=np.int64), []
    for i, piece in enumerate(pieces):
        try:
            b = bytes(BYTE_OF_CHAR[c] for c in piece)
        except (KeyError, TypeError):
            return None
        out[i] = len(b)
        parts.append(b)
    return out if b"".join(parts) == raw else None


def char_byte_offsets(text: str) -> np.ndarray:
    """int64[len(text) + 1]: the UTF-8 byte offset of each character boundary of ``text``."""
    cps = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    widths = 1 + (cps >= 0x80).astype(np.int64) + (cps >= 0x800) + (cps >= 0x10000)
    out = np.zeros(cps.size + 1, dtype=np.int64)
    np.cumsum(widths, out=out[1:])
    return out


def _offset_lengths(pieces: list[str], offsets: Any, text: str) -> np.ndarray:
    """Each token's byte count from its character offsets. Tokens that share one span (a
    character split by byte fallback, or a marker the tokenizer inserts before it, as
    Metaspace's leading "▁") share its bytes: a byte-fallback token ``<0xNN>`` covers its one
    byte, the rest go to the last other token of the span, so an inserted marker covers none.
    Bytes no token covers (a stripped space) go to the next token, trailing ones to the last."""
    cb = char_byte_offsets(text)
    spans = [(int(a), int(b)) for a, b in offsets]
    out = np.zeros(len(spans), dtype=np.int64)
    covered, i = 0, 0
    while i < len(spans):
        j = i
        while j + 1 < len(spans) and spans[j + 1] == spans[i]:
            j += 1
        avail = max(int(cb[spans[i][1]]) - covered, 0)
        group = range(i, j + 1)
        fallback = [k for k in group if BYTE_FALLBACK.fullmatch(pieces[k])]
        others = [k for k in group if k not in fallback]
        for k in fallback[:avail]:
            out[k] = 1
        out[others[-1] if others else j] += max(avail - len(fallback), 0)
        covered = max(covered, int(cb[spans[i][1]]))
        i = j + 1
    if out.size:
        out[-1] += int(cb[-1]) - covered
    return out


def token_lengths(tok: Any, enc: Any, text: str, byte_level: bool | None = None) -> np.ndarray:
    """int64: the UTF-8 bytes each token of ``enc`` (a ``tokenizers`` Encoding of ``text``)
    covers, summing to the text's bytes. A byte-level BPE (:func:`is_byte_level`): each token's
    string spells its bytes, so a character split across tokens is split exactly there;
    otherwise the character offsets give them (:func:`_offset_lengths`)."""
    byte_level = is_byte_level(tok) if byte_level is None else byte_level
    lens = _byte_level_lengths(enc.tokens, text.encode("utf-8")) if byte_level else None
    return lens if lens is not None else _offset_lengths(enc.tokens, enc.offsets, text)


def tokenizer_id(tokenizer: Any) -> str:
    """The identity string of :attr:`TextTokens.tokenizer`: ``"byte"``, or ``"hf-sha256:"`` and
    16 hex digits of the sha256 of an HF fast tokenizer's serialized ``tokenizer.json``."""
    if isinstance(tokenizer, ByteTokenizer):
        return "byte"
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise TypeError(
            f"tokenizer: expected ByteTokenizer or a Hugging Face fast tokenizer, got "
            f"{type(tokenizer).__name__}"
        )
    return "hf-sha256:" + hashlib.sha256(backend.to_str().encode("utf-8")).hexdigest()[:16]


def prefix_token_id(tokenizer: Any) -> int | None:
    """The token prepended to a text, as lm-eval's rolling log-likelihood does: the tokenizer's
    BOS id, else its EOS id, else None (and always None for :class:`ByteTokenizer`)."""
    if isinstance(tokenizer, ByteTokenizer):
        return None
    for name in ("bos_token_id", "eos_token_id"):
        v = getattr(tokenizer, name, None)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def backend_of(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` of an HF fast tokenizer, set to encode a whole text as
    transformers does for one call without truncation or padding."""
    backend = tokenizer.backend_tokenizer
    if backend.truncation is not None:
        backend.no_truncation()
    if backend.padding is not None:
        backend.no_padding()
    return backend


def tokenize_text(text: str, tokenizer: Any, *, prefix: bool = True) -> TextTokens:
    """``text`` as :class:`TextTokens` of ``tokenizer``, tokenized whole in memory with each
    token's bytes (:func:`token_lengths`): a :class:`ByteTokenizer` (one byte, one token, no
    prefix) or a Hugging Face fast tokenizer (``AutoTokenizer``), whose own special tokens are
    not added; with ``prefix`` its :func:`prefix_token_id` is prepended. A file of any size is
    read in bounded memory by :func:`tinyllm.eval.text.read_lm_tokens`, which gives the same ids.

    Example: a BPE whose tokens are ``"h", "\\xc3", "\\xa9llo"`` for ``"héllo"`` gives spans
    ``[0,1) [1,2) [2,6)``; without a prefix token, ``n_scored_bytes = 6 - 1 = 5``. A Metaspace
    BPE whose tokens of ``"Zq"`` are ``"▁", "Z", "q"`` gives spans ``[0,0) [0,1) [1,2)``:
    the inserted "▁" covers no byte, ``n_scored_bytes = 2``.

    Raises ValueError for an empty text and TypeError for a tokenizer without character offsets
    (a slow tokenizer).
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, got {type(text).__name__}")
    raw = text.encode("utf-8")
    if not raw:
        raise ValueError("text: expected at least one character, got an empty text")
    name = tokenizer_id(tokenizer)
    if isinstance(tokenizer, ByteTokenizer):
        ids = tokenizer.encode(text)
        lens = np.ones(ids.size, dtype=np.int64)
        vocab = ByteTokenizer.vocab_size
    else:
        backend = backend_of(tokenizer)
        enc = backend.encode(text, add_special_tokens=False)
        ids = np.asarray(enc.ids, dtype=np.int64)
        if ids.size == 0:
            raise ValueError(f"tokenizer {name}: expected at least one token, got none")
        lens = token_lengths(tokenizer, enc, text)
        vocab = backend.get_vocab_size(with_added_tokens=True)
    pid = prefix_token_id(tokenizer) if prefix else None
    if pid is not None:
        ids = np.concatenate([[pid], ids]).astype(np.int64)
        lens = np.concatenate([[0], lens]).astype(np.int64)
    assert int(lens.sum()) == len(raw), "token spans partition the text"
    return TextTokens(
        ids=ids.astype(id_dtype(max(vocab, int(ids.max()) + 1))),
        n_text_bytes=len(raw),
        first_bytes=int(lens[0]),
        has_prefix=pid is not None,
        tokenizer=name,
        max_id=int(ids.max()),
        lengths=lens,
    )
