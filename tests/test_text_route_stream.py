"""A text of any size in bounded memory: the text is read and tokenized a piece at a time
(tinyllm/eval/text.py, ``read_lm_tokens``), the ids are those of the whole text tokenized at once
(``tinyllm.tokens.tokenize_text``, the oracle), kept in a compact dtype, and past a bound in an
unlinked temporary file that the scorer releases as its windows pass.

The tokenizers are real ones trained here with ``tokenizers`` on the lee text: the zoo's
byte-level BPE (``hf_train.train_bpe``), a SentencePiece-style Metaspace BPE with byte fallback
that splits on spaces, and one that does not (the whole text one word, spaces inside tokens).
The text mixes lee documents (each line ends " \\n"), CRLF lines, runs of spaces and tabs,
blank lines and characters of 2, 3 and 4 UTF-8 bytes.
"""

import math
import os
import warnings

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from typer.testing import CliRunner

from tinyllm.cli import app
from tinyllm.data import lee_split
from tinyllm.eval import text as text_route
from tinyllm.eval.text import TEXT_BLOCK, read_lm_tokens, text_ppl
from tinyllm.models import hf_train
from tinyllm.tokens import ByteTokenizer, tokenize_text, write_tokens

LN2 = math.log(2.0)


def metaspace_bpe(docs: list[str], split: bool, scheme: str = "first") -> PreTrainedTokenizerFast:
    """A SentencePiece-style BPE: Metaspace ("▁" for spaces, prepended to the text), byte
    fallback for characters it lacks, no BOS or EOS."""
    tk = Tokenizer(models.BPE(byte_fallback=True))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme=scheme, split=split)
    tk.decoder = decoders.Metaspace(prepend_scheme=scheme, split=split)
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=bytes_, show_progress=False)
    tk.train_from_iterator(docs, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk)


@pytest.fixture(scope="module")
def lee():
    return lee_split()


@pytest.fixture(scope="module")
def tokenizers(lee):
    train, _ = lee
    return {
        "byte-level bpe": hf_train.train_bpe("".join(d + "\n" for d in train[:80]), 400),
        "metaspace split": metaspace_bpe(train[:80], split=True),
        "metaspace whole": metaspace_bpe(train[:80], split=False, scheme="always"),
    }


@pytest.fixture(scope="module")
def mixed_text(lee):
    _, val = lee
    odd = "  tabs\tand  spaces  \r\nCRLF line\r\n\n\nblank lines é日本😀 — 12345 x'll\n"
    return "".join(d + " \n" + (odd if i % 3 == 0 else "") for i, d in enumerate(val[:12]))


@pytest.mark.parametrize("name", ["byte-level bpe", "metaspace split", "metaspace whole"])
@pytest.mark.parametrize("piece", [48, 700])
def test_streamed_ids_are_the_whole_texts(tmp_path, tokenizers, mixed_text, name, piece):
    tok = tokenizers[name]
    path = tmp_path / "t.txt"
    path.write_bytes(mixed_text.encode("utf-8"))
    whole = tokenize_text(mixed_text, tok)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cut was forced
        got = read_lm_tokens(path, tok, piece=piece)
    assert got.ids.size > len(mixed_text) // piece  # many pieces
    np.testing.assert_array_equal(got.ids, whole.ids)
    # the wrapper's own call gives the same ids (backend_of only drops truncation and padding)
    own = tok(mixed_text, add_special_tokens=False)["input_ids"]
    assert whole.ids[int(whole.has_prefix) :].tolist() == own
    assert got.ids.dtype == np.uint16 and got.max_id == int(whole.ids.max())
    assert (got.n_text_bytes, got.first_bytes) == (whole.n_text_bytes, whole.first_bytes)
    assert got.n_scored_bytes == whole.n_scored_bytes and got.lengths is None


def test_a_token_file_of_the_bytes_streams_alike(tmp_path, tokenizers, mixed_text):
    tok = tokenizers["byte-level bpe"]
    write_tokens(tmp_path / "t.tok", ByteTokenizer().encode(mixed_text))  # uint8 ids
    write_tokens(tmp_path / "t64.tok", ByteTokenizer().encode(mixed_text), dtype="int64")
    whole = tokenize_text(mixed_text, tok)
    for name in ("t.tok", "t64.tok"):
        got = read_lm_tokens(tmp_path / name, tok, piece=300)
        np.testing.assert_array_equal(got.ids, whole.ids)
        assert got.n_scored_bytes == whole.n_scored_bytes == len(mixed_text.encode())


def test_byte_tokens_are_the_files_bytes_in_uint8(tmp_path, mixed_text):
    raw = mixed_text.encode("utf-8")
    (tmp_path / "t.txt").write_bytes(raw)
    got = read_lm_tokens(tmp_path / "t.txt", ByteTokenizer(), spill=1000)
    assert got.ids.dtype == np.uint8 and got.ids.tobytes() == raw
    assert (got.n_text_bytes, got.first_bytes, got.has_prefix) == (len(raw), 1, False)


def test_a_long_texts_ids_go_to_an_unlinked_file_and_score_alike(
    tmp_path, monkeypatch, tokenizers, mixed_text
):
    tok = tokenizers["byte-level bpe"]
    path = tmp_path / "t.txt"
    path.write_text(mixed_text, encoding="utf-8")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(text_route.tempfile, "tempdir", str(tmp))
    held = read_lm_tokens(path, tok)
    spilled = read_lm_tokens(path, tok, spill=64)
    assert isinstance(held.ids.base, np.ndarray | type(None))  # in memory
    assert isinstance(spilled.ids.base, memoryview)  # a read-only map of the file
    assert not spilled.ids.flags.writeable
    assert os.listdir(tmp) == []  # unlinked: nothing is left behind
    np.testing.assert_array_equal(held.ids, spilled.ids)
    # the scorer releases the mapped ids behind its windows (a page at a time here): same NLLs
    monkeypatch.setattr(text_route, "RELEASE_BYTES", 1)
    torch.manual_seed(0)
    cfg = hf_train.llama_config(hf_train.Config(hidden=16, n_layer=1, intermediate=32), len(tok), 0)
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(cfg).eval()
    seen = []
    a = text_ppl(model, held, 64, 32)
    b = text_ppl(model, spilled, 64, 32, progress=lambda d, t: seen.append((d, t)))
    assert a == b and seen[-1] == (held.ids.size - 1, held.ids.size - 1)


def test_no_room_for_the_ids_is_refused_naming_the_file(tmp_path, monkeypatch, tokenizers):
    tok = tokenizers["byte-level bpe"]
    path = tmp_path / "big.txt"
    path.write_text("word " * 2000, encoding="utf-8")
    usage = text_route.shutil.disk_usage(tmp_path)
    monkeypatch.setattr(text_route.shutil, "disk_usage", lambda p: usage._replace(free=1000))
    with pytest.raises(ValueError) as e:
        read_lm_tokens(path, tok, spill=64)
    msg = str(e.value)
    assert msg.startswith(f"{path}: expected room for the token ids of its 10000 bytes")
    assert "got 1000 bytes free there" in msg and "TMPDIR" in msg


def test_progress_counts_the_bytes_read(tmp_path, tokenizers):
    text = "a line of text\n" * 20_000  # 300000 bytes: five blocks
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    seen = []
    read_lm_tokens(
        tmp_path / "t.txt", tokenizers["byte-level bpe"], progress=lambda d, t: seen.append((d, t))
    )
    assert [d for d, _ in seen] == [*range(TEXT_BLOCK, len(text), TEXT_BLOCK), len(text)]
    assert {t for _, t in seen} == {len(text)}


def test_a_cut_the_tokenizer_never_agrees_with_is_a_warning(
    tmp_path, monkeypatch, tokenizers, mixed_text
):
    (tmp_path / "t.txt").write_text(mixed_text, encoding="utf-8")
    monkeypatch.setattr(text_route, "_agrees", lambda prev, cur, context: False)
    monkeypatch.setattr(text_route, "MAX_PIECE_CHARS", 4000)
    with pytest.warns(UserWarning, match=r"t.txt: \d+ cut\(s\) of the text where the tokenizer"):
        got = read_lm_tokens(tmp_path / "t.txt", tokenizers["byte-level bpe"], piece=2000)
    assert got.ids.size > 0


@pytest.mark.parametrize("at", [5, TEXT_BLOCK - 1, TEXT_BLOCK + 3])
def test_undecodable_bytes_are_refused_with_their_offset(tmp_path, at):
    raw = bytearray(b"x" * (TEXT_BLOCK + 10))
    raw[at - 1 : at + 1] = b"\xc3("  # a lead byte, then no continuation byte
    (tmp_path / "bad.txt").write_bytes(bytes(raw))
    with pytest.raises(
        ValueError,
        match=rf"bad.txt: expected UTF-8 text, got an undecodable byte at offset {at - 1}$",
    ):
        read_lm_tokens(tmp_path / "bad.txt", ByteTokenizer())
    (tmp_path / "cut.txt").write_bytes(b"x" * at + "é".encode()[:1])  # ends inside a character
    with pytest.raises(ValueError, match=rf"at offset {at}$"):
        read_lm_tokens(tmp_path / "cut.txt", ByteTokenizer())


def test_eval_ppl_shows_tokenizing_progress_unless_quiet(tmp_path, tokenizers, lee):
    tok = tokenizers["byte-level bpe"]
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    cfg = hf_train.llama_config(hf_train.Config(hidden=16, n_layer=1, intermediate=32), len(tok), 0)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    text = lee[1][0] + " \n"
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    n = len(text.encode("utf-8"))
    args = ["eval", "ppl", "--hf", str(tmp_path / "m"), "--text", str(tmp_path / "t.txt"), "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert f"tokenizing: 0/{n} (0%" in r.stderr and f"tokenizing: {n}/{n} (100%" in r.stderr
    q = CliRunner().invoke(app, [*args, "--quiet"])
    assert q.exit_code == 0 and q.stderr == "" and q.stdout == r.stdout
