"""ByteTokenizer and the token file format (formats/tokens-bin.md)."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyllm.tokens import (
    HEADER_SIZE,
    ByteTokenizer,
    TokenFileError,
    read_header,
    read_tokens,
    write_tokens,
)


def test_byte_tokenizer_is_utf8_bytes():
    tok = ByteTokenizer()
    ids = tok.encode("aé€")
    assert ids.tolist() == [0x61, 0xC3, 0xA9, 0xE2, 0x82, 0xAC]
    assert ids.dtype == np.int64
    assert tok.decode(ids) == "aé€"
    assert tok.n_bytes("aé€") == 6
    assert tok.decode([0xC3]) == "\ufffd"  # a cut multi-byte character is replaced, not raised


@settings(max_examples=50, deadline=None)
@given(st.text())
def test_tokenizer_round_trip(text):
    tok = ByteTokenizer()
    assert tok.decode(tok.encode(text)) == text
    assert tok.encode(text).size == tok.n_bytes(text)


def test_header_layout_is_little_endian_and_documented(tmp_path):
    p = write_tokens(tmp_path / "a.tok", np.array([1, 2, 300], dtype=np.int64))
    raw = p.read_bytes()
    assert raw[:8] == b"TLTOKENS"
    version, code, count = struct.unpack("<IIQ", raw[8:24])
    assert (version, code, count) == (1, 2, 3)  # uint16 is the smallest dtype holding 300
    assert len(raw) == HEADER_SIZE + 3 * 2
    assert raw[HEADER_SIZE:] == bytes([1, 0, 2, 0, 44, 1])


@pytest.mark.parametrize(
    "ids,dtype", [([0, 255], "uint8"), ([0, 70000], "uint32"), ([2**40], "int64")]
)
def test_round_trip_dtypes_through_memmap(tmp_path, ids, dtype):
    p = write_tokens(tmp_path / "x.tok", np.array(ids))
    got = read_tokens(p)
    assert isinstance(got, np.memmap)
    assert got.dtype == np.dtype(dtype)
    assert got.tolist() == ids


def test_empty_file_round_trip(tmp_path):
    p = write_tokens(tmp_path / "e.tok", np.array([], dtype=np.int64))
    assert read_tokens(p).size == 0


def test_truncated_header_names_file(tmp_path):
    p = tmp_path / "short.tok"
    p.write_bytes(b"TLTOK")
    with pytest.raises(TokenFileError, match=r"short\.tok.*truncated.*32-byte header, got 5"):
        read_tokens(p)


def test_wrong_magic_names_file(tmp_path):
    p = write_tokens(tmp_path / "m.tok", np.arange(10))
    raw = bytearray(p.read_bytes())
    raw[:8] = b"NOTTOKEN"
    p.write_bytes(bytes(raw))
    with pytest.raises(TokenFileError, match=r"m\.tok: not a token file: expected magic"):
        read_tokens(p)


def test_count_not_matching_size(tmp_path):
    p = write_tokens(tmp_path / "c.tok", np.arange(100, dtype=np.uint8))
    raw = p.read_bytes()
    p.write_bytes(raw[:-10])  # truncated body
    with pytest.raises(TokenFileError, match=r"c\.tok: header says 100 ids.*truncated"):
        read_tokens(p)
    p.write_bytes(raw + b"xx")
    with pytest.raises(TokenFileError, match="trailing bytes"):
        read_header(p)


def test_bad_version_dtype_and_missing(tmp_path):
    p = write_tokens(tmp_path / "v.tok", np.arange(4, dtype=np.uint8))
    raw = bytearray(p.read_bytes())
    raw[8:12] = struct.pack("<I", 9)
    p.write_bytes(bytes(raw))
    with pytest.raises(TokenFileError, match="expected token file version 1, got 9"):
        read_tokens(p)
    raw[8:12] = struct.pack("<I", 1)
    raw[12:16] = struct.pack("<I", 7)
    p.write_bytes(bytes(raw))
    with pytest.raises(TokenFileError, match="dtype code.*got 7"):
        read_tokens(p)
    with pytest.raises(TokenFileError, match="not found"):
        read_tokens(tmp_path / "nope.tok")


def test_write_refuses_bad_ids(tmp_path):
    with pytest.raises(ValueError, match="non-negative integer"):
        write_tokens(tmp_path / "n.tok", np.array([1, -1]))
    with pytest.raises(ValueError, match="1-d"):
        write_tokens(tmp_path / "n.tok", np.zeros((2, 2), dtype=np.int64))


def test_offset_lengths_share_a_span_by_byte_fallback_and_inserted_markers():
    from tinyllm.tokens import _offset_lengths, char_byte_offsets, id_dtype

    assert char_byte_offsets("aé€😀").tolist() == [0, 1, 3, 6, 10]
    # "▁" inserted before é (no character of its own), é as two fallback bytes, then x
    pieces, offsets = ["▁", "<0xC3>", "<0xA9>", "x"], [(0, 1), (0, 1), (0, 1), (1, 2)]
    assert _offset_lengths(pieces, offsets, "éx").tolist() == [0, 1, 1, 1]
    # "▁" inserted before a character the vocabulary has: that token takes the character
    assert _offset_lengths(["▁", "Z", "q"], [(0, 1), (0, 1), (1, 2)], "Zq").tolist() == [0, 1, 1]
    # stripped spaces go to the next token, trailing ones to the last
    assert _offset_lengths(["ab", "cd"], [(1, 3), (4, 6)], " ab cd  ").tolist() == [3, 5]
    assert [id_dtype(v).name for v in (256, 257, 65536, 65537)] == [
        "uint8", "uint16", "uint16", "int32"
    ]  # fmt: skip
