"""Documents of a text are the sampling units of its bpb row (docs/definitions.md, "Units"):
``--doc-sep`` / ``options.doc_sep`` (default one document per line) cuts the text after each run of
separators, each token belongs to the document its first character is in, and the row's interval is
the cluster-robust ratio over documents. The windows and the NLLs are those of the whole stream: the
value is bit for bit the same whatever the separator.

Real text: the lee validation documents (gensim's lee_background.cor, one document per line,
tinyllm.data.lee_bytes), scored by a bigram fit on the lee training bytes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinyllm import stats
from tinyllm.data import lee_bytes
from tinyllm.eval import zoo
from tinyllm.eval.text import read_lm_tokens
from tinyllm.eval.text_docs import DocScanner
from tinyllm.models import FAMILIES
from tinyllm.tokens import ByteTokenizer, doc_units, write_tokens

LN2 = float(np.log(2.0))


@pytest.fixture(scope="module")
def lee(tmp_path_factory):
    """The lee val text as a UTF-8 file and as a token file of its bytes, and a bigram fit on the
    lee train bytes (add-one counts), in one folder."""
    d = tmp_path_factory.mktemp("lee_docs")
    val = lee_bytes("val")
    (d / "val.txt").write_bytes(val.tobytes())
    write_tokens(d / "val.bin", val)
    train = lee_bytes("train").astype(np.int64)
    counts = np.ones((256, 256))
    np.add.at(counts, (train[:-1], train[1:]), 1.0)
    bigram = FAMILIES["bigram"]
    model = bigram.Model(bigram.Config())
    with torch.no_grad():
        model.logits.copy_(torch.from_numpy(np.log(counts / counts.sum(1, keepdims=True))))
    bigram.save(model, d / "bigram")
    return d, val


def _row(d, data, tmp_path, **options):
    entry = {"name": "b", "family": "bigram", "checkpoint": "bigram", "data": data}
    if options:
        entry["options"] = options
    row = zoo.score_entry(entry, seed=0, base_dir=d, items_dir=tmp_path / "items")
    assert row["status"] == "ok", row["error"]
    return row


@pytest.mark.parametrize("data", ["val.txt", "val.bin"])
def test_lee_documents_are_the_units_of_the_bpb_row(lee, tmp_path, data):
    d, val = lee
    row = _row(d, data, tmp_path)
    nlls = np.load(tmp_path / row["items"])
    # documents computed here: a byte after a newline that is no newline begins one
    ids = val.astype(np.int64)
    doc = np.concatenate([[0], np.cumsum((ids[:-1] == 10) & (ids[1:] != 10))])[1:]
    S, N = np.bincount(doc, weights=nlls), np.bincount(doc).astype(np.float64)
    n_docs = len([x for x in val.tobytes().split(b"\n") if x])
    assert row["n_units"] == n_docs == int((N > 0).sum()) == 29
    ci = stats.ratio_from_sums(S[N > 0], N[N > 0])
    # the row's ends: the ratio interval of the mean NLL over documents, rescaled to bits/byte
    assert row["interval"] == "cluster_ratio" and "block_len" not in row["details"]
    assert row["lo"] == pytest.approx(row["value"] - (ci.value - ci.lo) / LN2, rel=1e-12)
    assert row["hi"] == pytest.approx(row["value"] + (ci.hi - ci.value) / LN2, rel=1e-12)
    assert not row.get("interval_warning")
    np.testing.assert_array_equal(np.load(tmp_path / row["units"]), doc)
    # the iid interval over tokens is far narrower than the one over documents
    iid = row["iid_interval"]
    assert (row["hi"] - row["lo"]) > 1.2 * (iid["hi"] - iid["lo"])


def test_value_is_bit_identical_whatever_the_separator(lee, tmp_path):
    d, _ = lee
    lines = _row(d, "val.txt", tmp_path / "a")
    none = _row(d, "val.txt", tmp_path / "b", doc_sep="none")
    other = _row(d, "val.bin", tmp_path / "c", doc_sep=". ")
    assert lines["value"] == none["value"] == other["value"]
    np.testing.assert_array_equal(
        np.load(tmp_path / "a" / lines["items"]), np.load(tmp_path / "b" / none["items"])
    )
    # no boundaries: contiguous blocks with the one-line warning; ". ": more documents
    assert none["details"]["block_len"] == 1024 and none["n_units"] == 35
    assert none["interval_warning"].startswith("no unit boundaries: 35 contiguous")
    assert other["n_units"] > lines["n_units"]


def test_fewer_than_10_documents_warn(lee, tmp_path):
    d, val = lee
    five = val.tobytes().split(b"\n")[:5]
    (d / "five.txt").write_bytes(b"\n".join(five) + b"\n")
    row = _row(d, "five.txt", tmp_path)
    assert row["n_units"] == 5
    assert row["interval_warning"] == (
        "only 5 units: an interval over fewer than 10 units is unreliable"
    )


def test_doc_scanner_runs_and_separators_cut_between_blocks():
    text = "ab||cd||||ef|"
    for size in (1, 2, 3, 5, 100):
        scan = DocScanner("||")
        for i in range(0, len(text), size):
            scan.feed(text[i : i + size])
        # after "ab||" (4) and after the run "||||" (10); a lone "|" is no separator
        assert scan.bounds == [4, 10], size
        assert scan.starts(len(text)).tolist() == [0, 4, 10]
    assert doc_units([0, 2, 3], 5).tolist() == [0, 0, 1, 2, 2]


def test_byte_tokens_of_a_text_file_carry_document_offsets(lee):
    d, val = lee
    t = read_lm_tokens(d / "val.txt", ByteTokenizer())
    ends = np.flatnonzero(val == 10) + 1
    np.testing.assert_array_equal(t.doc_starts, np.concatenate([[0], ends[ends < val.size]]))
    assert read_lm_tokens(d / "val.txt", ByteTokenizer(), doc_sep="none").doc_starts is None
    with pytest.raises(ValueError, match="--doc-sep: expected 1 to 64 characters"):
        read_lm_tokens(d / "val.txt", ByteTokenizer(), doc_sep="")


def test_bpe_tokens_get_the_documents_of_the_whole_texts_tokens(lee):
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    d, val = lee
    text = val.tobytes().decode("utf-8")
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE())
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(text.splitlines(), trainer)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="a")
    enc = tok.backend_tokenizer.encode(text, add_special_tokens=False)
    starts = np.array([o[0] for o in enc.offsets])
    bounds = np.flatnonzero(np.frombuffer(text.encode(), np.uint8) == 10) + 1  # ASCII: chars
    doc = np.searchsorted(bounds[bounds < len(text)], starts, side="right")
    # token 0 is the prefix token (EOS "a"): the first document's
    want = np.concatenate([[0], np.flatnonzero(np.diff(doc)) + 2])
    for piece in (1 << 16, 1000):  # whole, and cut into many pieces
        t = read_lm_tokens(d / "val.txt", tok, piece=piece)
        assert t.has_prefix and t.ids.size == len(enc.ids) + 1
        np.testing.assert_array_equal(t.doc_starts, want)
        assert np.unique(t.units).size == 29


def test_text_ppl_values_are_eval_ppls_bit_for_bit(lee):
    """The text route's windows and values are eval_ppl's (the instrument's, no units); only the
    intervals are over documents, the Student t over tokens kept as iid_interval."""
    from tinyllm.eval.lm import eval_ppl
    from tinyllm.eval.text import text_ppl
    from tinyllm.models import gpt

    d, val = lee
    torch.manual_seed(0)
    model = gpt.Model(gpt.Config(block_size=32, n_layer=1, n_head=2, n_embd=16))
    tokens = read_lm_tokens(d / "val.txt", ByteTokenizer())
    got = text_ppl(model, tokens, 32, 16)
    old = eval_ppl(model, tokens.ids, 32, 16, n_bytes=tokens.n_scored_bytes)
    for k in ("nll", "ppl", "bpb"):
        assert got[k]["value"] == old[k]["value"]
    assert got["iid_interval"]["bpb"] == old["bpb"] and got["sum_nll"] == old["sum_nll"]
    assert got["n_units"] == 29 and got["interval"] == "cluster_ratio"
    assert got["bpb"]["hi"] - got["bpb"]["lo"] > old["bpb"]["hi"] - old["bpb"]["lo"]


def test_a_jsonl_text_is_one_document_per_record(lee, tmp_path):
    """Records holding newlines are still one document each; the text scored is the records'
    texts each followed by a newline, so its NLLs are those of that plain text."""
    import json

    d, val = lee
    lines = [x.decode() for x in val.tobytes().split(b"\n") if x]
    records = ["\n".join(lines[i : i + 3]) for i in range(0, len(lines), 3)]  # 10 records
    (d / "val.jsonl").write_text(
        "".join(json.dumps({"text": r, "id": i}) + "\n\n" for i, r in enumerate(records)),
        encoding="utf-8",
    )
    (d / "joined.txt").write_text("".join(r + "\n" for r in records), encoding="utf-8")
    row = _row(d, "val.jsonl", tmp_path / "j")
    plain = _row(d, "joined.txt", tmp_path / "p")
    assert row["n_units"] == len(records) == 10 and plain["n_units"] == 29
    assert row["value"] == plain["value"]
    assert row["details"]["text_bytes"] == sum(len(r.encode()) + 1 for r in records)
    t = read_lm_tokens(d / "val.jsonl", ByteTokenizer())
    want = np.cumsum([0] + [len(r.encode()) + 1 for r in records[:-1]])
    np.testing.assert_array_equal(t.doc_starts, want)
    (d / "bad.jsonl").write_text('{"text": "a"}\n{"txt": "b"}\n', encoding="utf-8")
    with pytest.raises(ValueError) as ei:
        read_lm_tokens(d / "bad.jsonl", ByteTokenizer())
    assert str(ei.value) == (
        f"{d / 'bad.jsonl'}:2: expected an object with a string field 'text', got None"
    )


def test_a_token_file_sidecar_marks_its_documents(lee, tmp_path):
    """``<file>.docs.npy`` (int64 token offsets) gives eval ppl --data and the lm kind their
    documents; a bad sidecar is one line naming it."""
    from tinyllm.eval.single import score_ppl
    from tinyllm.eval.text_docs import write_doc_starts

    d, val = lee
    tok = write_tokens(tmp_path / "v.tok", val)
    plain = score_ppl(str(tok), model=str(d / "bigram"))
    assert "n_units" not in plain  # no sidecar: over tokens, as before
    starts = np.arange(0, val.size, 1000)
    write_doc_starts(tok, starts)
    got = score_ppl(str(tok), model=str(d / "bigram"))
    nlls = FAMILIES["bigram"].token_nlls(FAMILIES["bigram"].load(d / "bigram"), val)
    doc = np.searchsorted(starts, np.arange(1, val.size), side="right") - 1
    ci = stats.ratio_from_sums(np.bincount(doc, weights=nlls), np.bincount(doc).astype(float))
    assert got["n_units"] == starts.size == 36 and got["bpb"]["value"] == plain["bpb"]["value"]
    assert got["nll"]["hi"] - got["nll"]["lo"] == pytest.approx(ci.hi - ci.lo, rel=1e-12)
    assert got["iid_interval"]["bpb"] == plain["bpb"]
    side = tmp_path / "v.tok.docs.npy"
    np.save(side, np.array([0, 5, 5]))
    with pytest.raises(ValueError) as ei:
        score_ppl(str(tok), model=str(d / "bigram"))
    assert str(ei.value).startswith(f"{side}: expected document offsets strictly increasing")
    np.save(side, np.array([0.0, 5.0]))
    with pytest.raises(ValueError, match="expected int64 token offsets, got float64"):
        score_ppl(str(tok), model=str(d / "bigram"))


def test_the_demo_manifest_says_one_document_per_line_for_lm_entries():
    from tinyllm.report import EntryOptions
    from tinyllm.train import lm_options

    assert lm_options("gpt", {"ctx_len": 32, "stride": 16}) == {
        "ctx_len": 32,
        "stride": 16,
        "doc_sep": "\n",
    }
    assert lm_options("bigram", {}) == {"doc_sep": "\n"} and lm_options("bert", {}) == {}
    assert EntryOptions(doc_sep="\n").doc_sep == "\n" and EntryOptions().doc_sep is None
