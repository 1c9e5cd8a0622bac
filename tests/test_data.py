"""The lee corpus: read from the installed gensim, split 90/10 by document, deterministically."""

from __future__ import annotations

import numpy as np
import pytest

from tinyllm import data
from tinyllm.tokens import read_tokens


def test_lee_file_comes_from_the_installed_gensim():
    import gensim.test.utils

    path = data.lee_path()
    assert path.name == "lee_background.cor"
    assert path.resolve() == type(path)(gensim.test.utils.datapath("lee_background.cor")).resolve()


def test_documents_match_gensims_own_reader():
    from gensim.models.doc2vec import TaggedLineDocument

    docs = data.lee_documents()
    theirs = list(TaggedLineDocument(str(data.lee_path())))
    assert len(docs) == len(theirs) == 300
    for ours, tagged in zip(docs, theirs, strict=True):
        assert ours.split() == tagged.words


def test_split_every_10th_document_to_val():
    docs = [f"doc {i}" for i in range(25)]
    train, val = data.split_documents(docs)
    assert val == ["doc 9", "doc 19"]
    assert train == [d for d in docs if d not in val]


def test_duplicates_are_dropped_so_no_val_document_is_in_train():
    docs = data.lee_documents()
    assert len(set(docs)) == 293  # 7 documents occur twice in the file
    assert data.unique_documents(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]
    train, val = data.lee_split()
    assert (len(train), len(val)) == (264, 29)
    assert not set(train) & set(val)
    assert sorted(train + val) == sorted(set(docs))


def test_build_writes_train_and_val_token_files(tmp_path):
    corpus = data.build_lee(tmp_path)
    docs = data.unique_documents(data.lee_documents())
    assert (corpus.n_train_docs, corpus.n_val_docs) == (264, 29)
    train, val = read_tokens(corpus.train_path), read_tokens(corpus.val_path)
    assert train.dtype == np.uint8 and val.dtype == np.uint8
    assert (train.size, val.size) == (corpus.n_train_bytes, corpus.n_val_bytes)
    # val = unique documents 9, 19, ..., 289, each followed by a newline, as UTF-8 bytes
    expected_val = "".join(docs[i] + "\n" for i in range(9, 293, 10)).encode("utf-8")
    assert bytes(val) == expected_val
    # nothing lost or duplicated: the two splits hold every document's bytes once
    assert train.size + val.size == sum(len(d.encode()) + 1 for d in docs)
    assert not {docs[i] for i in range(9, 293, 10)} & set(bytes(train).decode().split("\n"))
    np.testing.assert_array_equal(np.asarray(val), data.lee_bytes("val"))
    np.testing.assert_array_equal(np.asarray(train), data.lee_bytes("train"))


def test_build_is_deterministic(tmp_path):
    a = data.build_lee(tmp_path / "a")
    b = data.build_lee(tmp_path / "b")
    assert a.train_path.read_bytes() == b.train_path.read_bytes()
    assert a.val_path.read_bytes() == b.val_path.read_bytes()


def test_missing_file_error_names_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "lee_background.cor"
    with pytest.raises(data.DataError, match=str(missing)):
        data.lee_documents(missing)
    with pytest.raises(data.DataError, match=str(missing)):
        data.build_lee(tmp_path / "out", path=missing)


def test_bad_split_name_is_refused():
    with pytest.raises(ValueError, match="train"):
        data.lee_bytes("test")


# ---- the encoder corpus: lee train text + the rows files' train sentences ----------------------


def test_encoder_pretraining_text_is_train_splits_only(tmp_path):
    files = data.CORPORA["encoder"].build(tmp_path)
    got = bytes(data.CORPORA["encoder"].read_train(files["train"])).decode("utf-8")
    lee_train, lee_val = data.lee_split()
    pol, lang = data.polarity_rows(), data.langid_rows()
    rows_train = [r.sentence for r in pol + lang if r.split == "train"]
    rep = data.ENCODER_ROWS_REPEAT
    assert rep >= 1
    assert got == "".join(d + "\n" for d in lee_train + rows_train * rep)
    assert data.encoder_train_documents(0) == lee_train
    lines = set(got.split("\n"))
    # no val sentence of either rows file (nor a lee val document) is a line of the pretraining
    # text, and no polarity val snippet occurs in it at all
    for r in pol + lang:
        assert (r.sentence in lines) == (r.split == "train"), r
    assert not lines & set(lee_val)
    assert not any(r.sentence in got for r in pol if r.split == "val")
    # the labels are not in it: no row's label token is glued to its sentence
    assert "__label__" not in got


def test_cldr_dates_are_english_full_dates_dealt_to_eight_locales_by_a_tag():
    from collections import Counter

    pairs = data.cldr_dates_pairs()
    assert len(pairs) == 3653  # every 3rd day of 1990-2019
    # hand-checked against CLDR: babel's "full" date of 1990-01-01, -04, -07 and 2019-12-31
    assert pairs[:3] == [
        ("[cs] Monday, January 1, 1990", "pondělí 1. ledna 1990"),
        ("[el] Thursday, January 4, 1990", "Πέμπτη 4 Ιανουαρίου 1990"),
        ("[fi] Sunday, January 7, 1990", "sunnuntai 7. tammikuuta 1990"),
    ]
    assert pairs[-1] == ("[lt] Tuesday, December 31, 2019", "2019 m. gruodžio 31 d., antradienis")
    tags = Counter(s[1:3] for s, _ in pairs)
    assert tags == {loc: 457 if i < 5 else 456 for i, loc in enumerate(data.DATE_LOCALES)}
    assert len({s for s, _ in pairs}) == len(pairs)  # one answer per source
    assert max(len(t.encode()) for _, t in pairs) <= 64  # the families' max_len
