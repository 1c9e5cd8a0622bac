"""word2vec (skip-gram with negative sampling): hand-computed loss, pairs, subsampling and noise
(against gensim's own tables), the word2vec text format (read back by gensim), checkpoints, and
what training learns on a corpus with two clear topics (also compared with gensim's Word2Vec)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from gensim.models import KeyedVectors, Word2Vec
from scipy.stats import spearmanr

from tinyllm.checkpoint import CheckpointError
from tinyllm.data import CORPORA, lee_split, tokenize_words
from tinyllm.models import word2vec as w2v


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# Two topics that never share a sentence: a good model puts the words of one topic together.
PETS = ["cat", "dog", "pet", "fur", "paw", "kitten", "puppy", "vet"]
CARS = ["car", "road", "engine", "wheel", "tyre", "truck", "fuel", "garage"]


def topic_corpus(n_sent: int = 300, length: int = 10, seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_sent):
        words = PETS if i % 2 == 0 else CARS
        out.append([words[j] for j in rng.integers(0, len(words), size=length)])
    return out


SMALL_CFG = w2v.Config(dim=16)
SMALL = {"window": 3, "negative": 4, "min_count": 1, "sample": 0.0, "batch_size": 128}


@pytest.fixture(scope="module")
def topic_model():
    return w2v.train(SMALL_CFG, topic_corpus(), seed=0, steps=300, **SMALL)


# ---- the loss ----------------------------------------------------------------------------------


def test_forward_is_the_sgns_loss_by_hand():
    model = w2v.Model(w2v.Config(dim=2), ["a", "b", "c", "d"])
    v = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.5]], np.float32)
    u = np.array([[0.5, 0.5], [1.0, -1.0], [0.0, 2.0], [-0.5, 0.0]], np.float32)
    with torch.no_grad():
        model.in_vectors.weight.copy_(torch.from_numpy(v))
        model.out_vectors.weight.copy_(torch.from_numpy(u))
    centers, contexts = torch.tensor([0, 2]), torch.tensor([1, 3])
    noise = torch.tensor([[2, 3], [3, 0]])  # pair 2's first noise word IS its context: masked
    got = model(centers, contexts, noise).detach().numpy()
    # pair 1: c=a, o=b, noise c, d
    l1 = -math.log(_sigmoid(v[0] @ u[1])) - math.log(_sigmoid(-v[0] @ u[2]))
    l1 -= math.log(_sigmoid(-v[0] @ u[3]))
    # pair 2: c=c, o=d, noise d (masked), a
    l2 = -math.log(_sigmoid(v[2] @ u[3])) - math.log(_sigmoid(-v[2] @ u[0]))
    np.testing.assert_allclose(got, [l1, l2], rtol=1e-6)


def test_first_loss_is_one_plus_k_ln2_and_training_lowers_it():
    calls = []
    sents = topic_corpus(40)
    cfg = w2v.Config(dim=8)
    settings = {"window": 2, "negative": 3, "min_count": 1, "sample": 0.0, "batch_size": 256}
    w2v.train(cfg, sents, seed=1, steps=40, progress=lambda *a: calls.append(a), **settings)
    assert [c[0] for c in calls] == list(range(1, 41)) and all(c[1] == 40 for c in calls)
    # zero output vectors: every score is 0, each term ln 2; masked noise words only lower it
    first = calls[0][2]
    assert (1 + 3) * math.log(2) - 0.2 < first <= (1 + 3) * math.log(2) + 1e-6
    assert calls[-1][2] < first - 0.5


def test_steps_zero_is_the_seeded_initial_model():
    m = w2v.train(SMALL_CFG, topic_corpus(10), seed=3, steps=0, **SMALL)
    w = m.in_vectors.weight.detach().numpy()
    assert np.all(np.abs(w) <= 0.5 / SMALL_CFG.dim)
    assert not m.out_vectors.weight.detach().any()
    again = w2v.train(SMALL_CFG, topic_corpus(10), seed=3, steps=0, **SMALL)
    np.testing.assert_array_equal(w, again.in_vectors.weight.detach().numpy())


def test_same_seed_same_vectors_other_seed_different():
    sents = topic_corpus(30)
    a = w2v.train(SMALL_CFG, sents, seed=5, steps=20, **SMALL)
    b = w2v.train(SMALL_CFG, sents, seed=5, steps=20, **SMALL)
    c = w2v.train(SMALL_CFG, sents, seed=6, steps=20, **SMALL)
    wa, wb, wc = (m.in_vectors.weight.detach().numpy() for m in (a, b, c))
    np.testing.assert_array_equal(wa, wb)
    assert not np.array_equal(wa, wc)


# ---- vocabulary, subsampling, noise, pairs -----------------------------------------------------


def test_vocab_by_count_then_alphabetical_and_min_count():
    words, counts = w2v.build_vocab([["b", "a", "c", "b"], ["a", "d", "b"]], min_count=2)
    assert words == ["b", "a"] and counts.tolist() == [3, 2]
    words, counts = w2v.build_vocab([["z", "y", "x", "x"]], min_count=1)
    assert words == ["x", "y", "z"] and counts.tolist() == [2, 1, 1]


def test_keep_probability_by_hand():
    # N = 1010, t N = 1.01: f = 1000 -> (sqrt(1000/1.01) + 1) * 1.01/1000; f = 1 -> capped at 1
    p = w2v.keep_probabilities(np.array([1000, 9, 1]), 1e-3)
    tn = 1e-3 * 1010
    assert p[0] == pytest.approx((math.sqrt(1000 / tn) + 1) * tn / 1000)  # 0.03279
    assert p[0] == pytest.approx(0.032790, abs=1e-6)
    assert p[1] == pytest.approx((math.sqrt(9 / tn) + 1) * tn / 9)
    assert p[2] == 1.0
    np.testing.assert_array_equal(w2v.keep_probabilities(np.array([1000, 9]), 0.0), [1.0, 1.0])


def _gensim_vocab(sents, sample):
    g = Word2Vec(min_count=1, sample=sample, negative=5, ns_exponent=0.75, vector_size=4)
    g.build_vocab(sents)
    return g


def test_subsampling_and_noise_distribution_match_gensim():
    sents = [["a", "b", "a", "c"] * 50, ["b", "d", "e"] * 30, ["f"]]
    g = _gensim_vocab(sents, 1e-2)
    words, counts = w2v.build_vocab(sents, min_count=1)
    keep = w2v.keep_probabilities(counts, 1e-2)
    for w, k in zip(words, keep, strict=True):
        gk = min(1.0, g.wv.get_vecattr(w, "sample_int") / 2**32)  # gensim: keep if int < this
        assert k == pytest.approx(gk, abs=1e-8), w
    # gensim's noise table: cumulative count^0.75, scaled to 2**31 - 1, in its vocab order
    noise = dict(zip(words, w2v.noise_distribution(counts, 0.75), strict=True))
    table = np.diff(np.concatenate([[0], g.cum_table])) / (2**31 - 1)
    for w, q in zip(g.wv.index_to_key, table, strict=True):
        assert noise[w] == pytest.approx(q, abs=1e-8), w


def _pairs_by_loops(sentences, window, r):
    """Reference: two loops per sentence with the same per-position windows r."""
    out, base = [], 0
    for s in sentences:
        for i in range(len(s)):
            for j in range(max(0, i - r[base + i]), min(len(s), i + r[base + i] + 1)):
                if j != i:
                    out.append((int(s[i]), int(s[j])))
        base += len(s)
    return sorted(out)


@pytest.mark.parametrize("window", [1, 2, 5])
def test_skipgram_pairs_match_the_two_loops(window):
    rng = np.random.default_rng(window)
    sentences = [rng.integers(0, 50, size=n) for n in (7, 1, 0, 12, 3)]
    c, o = w2v.skipgram_pairs(sentences, window, np.random.default_rng(42))
    r = np.random.default_rng(42).integers(1, window + 1, size=sum(map(len, sentences)))
    got = sorted(zip(c.tolist(), o.tolist(), strict=True))
    assert got == _pairs_by_loops(sentences, window, r)


def test_skipgram_pairs_window_one_by_hand():
    c, o = w2v.skipgram_pairs(
        [np.array([10, 11, 12]), np.array([13, 14])], 1, np.random.default_rng()
    )
    got = sorted(zip(c.tolist(), o.tolist(), strict=True))
    assert got == [(10, 11), (11, 10), (11, 12), (12, 11), (13, 14), (14, 13)]  # no 12 -> 13


# ---- hooks -------------------------------------------------------------------------------------


def test_similarity_is_the_cosine_and_none_out_of_vocabulary(topic_model):
    m = topic_model
    vecs = w2v.vectors(m)
    assert list(vecs) == m.vocab and all(v.dtype == np.float32 for v in vecs.values())
    a, b = vecs["cat"].astype(np.float64), vecs["road"].astype(np.float64)
    want = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
    assert w2v.similarity(m, "cat", "road") == pytest.approx(want, abs=1e-12)
    assert w2v.similarity(m, "CAT", "Road") == pytest.approx(want, abs=1e-12)  # lowercased
    assert w2v.similarity(m, "cat", "cat") == pytest.approx(1.0, abs=1e-12)
    assert w2v.similarity(m, "cat", "zebra") is None
    assert w2v.similarity(m, "zebra", "cat") is None


def test_training_separates_the_two_topics(topic_model):
    m = topic_model
    within = [w2v.similarity(m, a, b) for t in (PETS, CARS) for a in t for b in t if a < b]
    across = [w2v.similarity(m, a, b) for a in PETS for b in CARS]
    assert min(within) > max(across), (min(within), max(across))


def test_similarity_orderings_agree_with_gensim_word2vec(topic_model):
    """Differential: gensim's own skip-gram on the same corpus ranks the word pairs alike."""

    sents = topic_corpus()
    g = Word2Vec(
        sents,
        vector_size=16,
        window=3,
        negative=4,
        min_count=1,
        sample=0.0,
        sg=1,
        epochs=5,
        workers=1,
        seed=0,
    )
    words = PETS + CARS
    pairs = [(a, b) for i, a in enumerate(words) for b in words[i + 1 :]]
    ours = [w2v.similarity(topic_model, a, b) for a, b in pairs]
    theirs = [float(g.wv.similarity(a, b)) for a, b in pairs]
    rho = spearmanr(ours, theirs).statistic
    assert rho > 0.6, rho


# ---- the word2vec text format ------------------------------------------------------------------


def test_save_word2vec_round_trips_through_gensim(topic_model, tmp_path: Path):
    vecs = w2v.vectors(topic_model)
    vecs["tiny"] = np.array([1e-8, -3.0e-38, 1.5e10, 0.1] * 4, np.float32)  # extreme floats
    path = w2v.save_word2vec(vecs, tmp_path / "v.txt")
    kv = KeyedVectors.load_word2vec_format(str(path), binary=False)
    assert kv.index_to_key == list(vecs)
    for word, v in vecs.items():
        np.testing.assert_array_equal(kv[word], v)
    head = path.read_text(encoding="utf-8").split("\n", 1)[0]
    assert head == f"{len(vecs)} 16"


def test_save_word2vec_refuses_bad_input(tmp_path: Path):
    with pytest.raises(ValueError, match="whitespace"):
        w2v.save_word2vec({"new york": np.zeros(2)}, tmp_path / "a.txt")
    with pytest.raises(ValueError, match="one dim"):
        w2v.save_word2vec({"a": np.zeros(2), "b": np.zeros(3)}, tmp_path / "b.txt")
    with pytest.raises(ValueError, match="finite"):
        w2v.save_word2vec({"a": np.array([np.nan, 0.0])}, tmp_path / "c.txt")


# ---- checkpoints -------------------------------------------------------------------------------


def test_checkpoint_keeps_vocab_in_config_json(topic_model, tmp_path: Path):
    path = w2v.save(topic_model, tmp_path / "ckpt")
    doc = json.loads((path / "config.json").read_text())
    assert doc["tl_arch"] == "word2vec"
    assert doc["tokenizer"]["vocab"] == topic_model.vocab
    assert doc["tokenizer"]["vocab_size"] == len(topic_model.vocab)
    assert doc["tokenizer"]["lowercase"] is True
    loaded = w2v.load(path)
    assert loaded.cfg == topic_model.cfg and loaded.vocab == topic_model.vocab
    for k, v in w2v.vectors(topic_model).items():
        np.testing.assert_array_equal(w2v.vectors(loaded)[k], v)
    assert torch.equal(loaded.counts, topic_model.counts) and int(loaded.counts.sum()) == 3000


def test_load_refuses_a_vocabulary_that_does_not_fit(topic_model, tmp_path: Path):
    path = w2v.save(topic_model, tmp_path / "ckpt")
    doc = json.loads((path / "config.json").read_text())
    doc["tokenizer"]["vocab"] = doc["tokenizer"]["vocab"][:-1]
    doc["tokenizer"]["vocab_size"] -= 1
    (path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="model.safetensors.*expected shape"):
        w2v.load(path)
    doc["tokenizer"]["vocab"] = ["cat", "cat"]
    (path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="duplicates"):
        w2v.load(path)
    del doc["tokenizer"]["vocab"]
    (path / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="tokenizer"):
        w2v.load(path)


def test_from_vectors_keeps_the_vectors():
    m = w2v.from_vectors({"a": [1.0, 0.0], "b": [0.0, 2.0]})
    assert m.cfg.dim == 2 and m.vocab == ["a", "b"]
    assert w2v.similarity(m, "a", "b") == 0.0


def test_train_refuses_bad_data():
    with pytest.raises(ValueError, match="list of tokenized sentences"):
        w2v.train(SMALL_CFG, "just a string", seed=0, steps=1, **SMALL)
    with pytest.raises(ValueError, match="sentence 0 to be a list of words"):
        w2v.train(SMALL_CFG, ["a b c"], seed=0, steps=1, **SMALL)
    with pytest.raises(ValueError, match="min_count=5"):
        w2v.train(w2v.Config(), [["a", "b"]], seed=0, steps=1, min_count=5)
    with pytest.raises(ValueError, match="dim: expected an int >= 1"):
        w2v.Config(dim=0)
    with pytest.raises(ValueError, match="window: expected an int >= 1"):
        w2v.TrainConfig(window=0)
    with pytest.raises(ValueError, match=r"min_lr_ratio: expected a number in \[0, 1\]"):
        w2v.TrainConfig(min_lr_ratio=2.0)


# ---- the training text (tinyllm.data, corpus "wordsim") ----------------------------------------


def test_tokenize_words_by_hand():
    text = "Bush's 9/11 speech: U.S. troops, 2001-2002; Café au-lait_x A"
    assert tokenize_words(text) == [
        "bush", "s", "speech", "u", "s", "troops", "café", "au", "lait", "x", "a",
    ]  # fmt: skip


def test_wordsim_train_is_the_lee_training_documents_as_words(tmp_path: Path):
    corpus = CORPORA["wordsim"]
    files = corpus.build(tmp_path)
    docs = corpus.read_train(files["train"])
    train, val = lee_split()
    assert docs == [tokenize_words(d) for d in train] and len(docs) == 264
    assert sum(map(len, docs)) == 52971
    assert all(w == w.lower() and w.isalpha() for d in docs for w in d)
    val_words = {w for d in val for w in tokenize_words(d)}
    assert val_words - {w for d in docs for w in d}  # val's own words are not in the text
