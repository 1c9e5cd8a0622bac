"""Word vectors: skip-gram with negative sampling (Mikolov, Sutskever, Chen, Corrado & Dean, 2013).

Each word ``w`` of the vocabulary has an input vector ``v_w`` (the word vector that
:func:`vectors` returns) and an output vector ``u_w``. For a (center c, context o) pair from a
sentence and ``K = negative`` noise words ``n_1 .. n_K`` drawn from the noise distribution, the
loss (nats) is::

    loss(c, o) = -ln sigma(u_o . v_c) - sum_k ln sigma(-u_{n_k} . v_c)

averaged over the pairs of a batch (:func:`train` reports it through ``progress``). A noise word
equal to the context word is masked out (the word2vec C code skips it).

* **Pairs.** For every position i of a sentence the window is drawn uniformly from
  ``1 .. window`` (the "reduced window" of the C code: near words count more), and every word
  within that distance in the same sentence is a context of word i. Sentences never share a
  window. Pairs are drawn again, with fresh subsampling and windows, for every epoch, and
  shuffled.
* **Frequent-word subsampling** (the C code's and gensim's formula, with ``t = sample`` and
  ``N`` the number of training tokens): a token of a word with count ``f`` is kept with
  probability ``min(1, (sqrt(f / (t N)) + 1) * t N / f)``; ``sample = 0`` keeps every token.
* **Noise distribution:** ``P(w) ∝ count(w) ** ns_exponent`` (0.75: the unigram distribution
  raised to the 3/4 power).
* **Vocabulary:** the words with ``count >= min_count``, ordered by count (descending), then
  alphabetically; rarer words are dropped from the sentences before anything else.
* **Optimizer:** plain SGD on the summed pair losses (each pair gets the full step, as in the C
  code), sparse gradients, lr decayed linearly from ``lr`` to ``lr * min_lr_ratio`` over the
  steps. Input vectors start uniform in ``±0.5 / dim``, output vectors at zero (so the first loss
  is exactly ``(1 + K) ln 2`` per pair).

One step is one batch of ``batch_size`` pairs. All randomness (initial vectors, windows,
subsampling, shuffling, noise words) comes from ``numpy.random.default_rng(seed)``.

The words are whatever the caller tokenized (the zoo: :func:`tinyllm.data.tokenize_words`,
lowercase); lookups lowercase the word when the model was trained on lowercase text
(``Model.lowercase``). The checkpoint is the usual folder: ``config.json`` holds the config and,
under ``tokenizer``, the vocabulary in vocabulary order; ``model.safetensors`` holds ``in_vectors``,
``out_vectors`` [V, dim] and ``counts`` [V] (int64, training counts). :func:`save_word2vec` writes
the word2vec text format that other tools (gensim's ``KeyedVectors.load_word2vec_format``) read.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from tinyllm.checkpoint import CheckpointError, read_config
from tinyllm.models.training import (
    check_ints,
    check_numbers,
    load_weights,
    read_configs,
    save_model,
    settings_of,
)

ARCH = "word2vec"
KIND = "embeddings"
TOKENIZER_TYPE = "word"


@dataclass(frozen=True)
class Config:
    """The vector size."""

    dim: int = 100

    def __post_init__(self) -> None:
        check_ints(self, ("dim",), "word2vec Config")


@dataclass(frozen=True)
class TrainConfig:
    """The pair sampling and the SGD recipe (see the module docstring)."""

    window: int = 5  # largest distance between a center and a context word
    negative: int = 5  # K, noise words per pair
    min_count: int = 2  # words seen fewer times are dropped
    sample: float = 1e-3  # subsampling threshold t; 0 = keep every token
    ns_exponent: float = 0.75  # noise distribution: count ** ns_exponent
    lr: float = 0.025  # SGD step at step 1
    min_lr_ratio: float = 1e-3  # the lr falls linearly to lr * min_lr_ratio at the last step
    batch_size: int = 1024  # pairs per step

    def __post_init__(self) -> None:
        check_ints(self, ("window", "negative", "min_count", "batch_size"), "word2vec TrainConfig")
        check_numbers(self, ("sample", "ns_exponent", "lr", "min_lr_ratio"), "word2vec TrainConfig")
        if self.min_lr_ratio > 1:
            raise ValueError(
                "word2vec TrainConfig.min_lr_ratio: expected a number in [0, 1], "
                f"got {self.min_lr_ratio}"
            )


class Model(nn.Module):
    """Input and output vectors of a fixed vocabulary; ``forward`` gives the per-pair SGNS loss;
    ``train_cfg``: the settings it was trained with (the defaults for a fresh model)."""

    def __init__(self, cfg: Config, vocab: Sequence[str], lowercase: bool = True) -> None:
        super().__init__()
        words = list(vocab)
        _check_vocab(words, "word2vec.Model")
        self.cfg = cfg
        self.train_cfg = TrainConfig()
        self.vocab = words
        self.index = {w: i for i, w in enumerate(words)}
        self.lowercase = bool(lowercase)
        V = len(words)
        # sparse: a step touches only the rows of its batch (SGD updates just those)
        self.in_vectors = nn.Embedding(V, cfg.dim, sparse=True)  # v_w, the word vectors [V, dim]
        self.out_vectors = nn.Embedding(V, cfg.dim, sparse=True)  # u_w [V, dim]
        self.register_buffer("counts", torch.zeros(V, dtype=torch.int64))  # training counts

    def forward(
        self, centers: torch.Tensor, contexts: torch.Tensor, noise: torch.Tensor
    ) -> torch.Tensor:
        """``centers``, ``contexts`` [B] and ``noise`` [B, K] word ids -> loss per pair [B] (nats).

        A noise word equal to its pair's context word does not count (masked out).
        """
        v = self.in_vectors(centers)  # [B, d]
        u = self.out_vectors(torch.cat([contexts[:, None], noise], dim=1))  # [B, 1+K, d]
        s = torch.bmm(u, v[:, :, None]).squeeze(2)  # [B, 1+K]: u . v for context, noise words
        keep = (noise != contexts[:, None]).to(s.dtype)  # [B, K]
        return -F.logsigmoid(s[:, 0]) - (F.logsigmoid(-s[:, 1:]) * keep).sum(dim=1)

    def key(self, word: str) -> str:
        """The vocabulary form of ``word`` (lowercased when the model was trained lowercase)."""
        return word.lower() if self.lowercase else word


def _check_vocab(words: list, where: str) -> None:
    bad = [w for w in words if not isinstance(w, str) or not w or any(c.isspace() for c in w)]
    if bad:
        raise ValueError(f"{where}: expected non-empty words without whitespace, got {bad[:3]!r}")
    if len(set(words)) != len(words):
        dups = sorted(w for w, c in Counter(words).items() if c > 1)
        raise ValueError(f"{where}: expected distinct words, got duplicates {dups[:5]!r}")
    if not words:
        raise ValueError(f"{where}: expected at least one word in the vocabulary, got none")


def _check_sentences(data, where: str) -> list[list[str]]:
    if isinstance(data, str | bytes) or not isinstance(data, Sequence):
        raise ValueError(
            f"{where}: expected a list of tokenized sentences (lists of words), got "
            f"{type(data).__name__}"
        )
    out = []
    for i, s in enumerate(data):
        if isinstance(s, str | bytes) or not isinstance(s, Sequence):
            raise ValueError(
                f"{where}: expected sentence {i} to be a list of words, got {type(s).__name__}"
            )
        if not all(isinstance(w, str) and w for w in s):
            raise ValueError(f"{where}: expected sentence {i} to hold non-empty strings only")
        out.append(list(s))
    return out


def build_vocab(sentences: Sequence[Sequence[str]], min_count: int) -> tuple[list[str], np.ndarray]:
    """(words, counts): the words seen at least ``min_count`` times, by count (descending) then
    alphabetically, with their counts (int64)."""
    counts = Counter(w for s in sentences for w in s)
    kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return kept, np.array([counts[w] for w in kept], dtype=np.int64)


def keep_probabilities(counts: np.ndarray, sample: float) -> np.ndarray:
    """Per-word probability that one of its tokens is kept by subsampling (module docstring):
    ``min(1, (sqrt(f / (t N)) + 1) * t N / f)`` with ``N = counts.sum()``; all ones for t = 0."""
    f = np.asarray(counts, dtype=np.float64)
    if sample <= 0:
        return np.ones_like(f)
    tn = sample * f.sum()
    return np.minimum(1.0, (np.sqrt(f / tn) + 1.0) * tn / f)


def noise_distribution(counts: np.ndarray, exponent: float = 0.75) -> np.ndarray:
    """``P(w) = count(w) ** exponent / sum_v count(v) ** exponent`` (float64, sums to 1)."""
    p = np.asarray(counts, dtype=np.float64) ** exponent
    return p / p.sum()


def skipgram_pairs(
    sentences: Sequence[np.ndarray], window: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(centers, contexts) word ids of one epoch's pairs, in sentence order (not shuffled).

    Each position i draws its window ``r_i`` uniformly from ``1 .. window``; j is a context of i
    when ``0 < |i - j| <= r_i`` and both are in the same sentence.
    """
    lens = np.array([len(s) for s in sentences], dtype=np.int64)
    if lens.sum() == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ids = np.concatenate([np.asarray(s, np.int64) for s in sentences])  # [N] all tokens
    sent = np.repeat(np.arange(lens.size), lens)  # [N] sentence of each token
    r = rng.integers(1, window + 1, size=ids.size)  # [N] reduced window per center
    cs, os_ = [], []
    for d in range(1, window + 1):
        same = sent[:-d] == sent[d:]  # token i and i+d in one sentence, [N-d]
        right = np.flatnonzero(same & (r[:-d] >= d))  # center i, context i+d
        left = np.flatnonzero(same & (r[d:] >= d))  # center i+d, context i
        cs += [ids[right], ids[left + d]]
        os_ += [ids[right + d], ids[left]]
    return np.concatenate(cs), np.concatenate(os_)


def train(
    cfg: Config,
    data,
    *,
    seed: int,
    steps: int,
    progress=None,
    lowercase: bool = True,
    **settings,
) -> Model:
    """Skip-gram with negative sampling on ``data``, a list of tokenized sentences (each a list of
    words), for ``steps`` SGD steps of ``batch_size`` pairs (module docstring; ``settings``:
    :class:`TrainConfig`'s fields). ``steps = 0`` returns the seeded initial model.
    ``progress(step, steps, loss)`` gets the batch's mean pair loss (nats). ``lowercase``:
    whether lookups lowercase words (the data are lowercase)."""
    tc = settings_of(TrainConfig, settings, "word2vec.train")
    sentences = _check_sentences(data, "word2vec.train")
    words, counts = build_vocab(sentences, tc.min_count)
    if not words:
        raise ValueError(
            f"word2vec.train: expected some word seen at least min_count={tc.min_count} times, "
            f"got none in {sum(map(len, sentences))} tokens"
        )
    rng = np.random.default_rng(seed)
    model = Model(cfg, words, lowercase=lowercase)
    model.train_cfg = tc
    V, d = len(words), cfg.dim
    with torch.no_grad():
        init = rng.uniform(-0.5 / d, 0.5 / d, size=(V, d)).astype(np.float32)
        model.in_vectors.weight.copy_(torch.from_numpy(init))
        model.out_vectors.weight.zero_()
        model.counts.copy_(torch.from_numpy(counts))
    index = model.index
    # sentences as id arrays, out-of-vocabulary words dropped (as gensim does)
    id_sents = [np.array([index[w] for w in s if w in index], dtype=np.int64) for s in sentences]
    keep_p = keep_probabilities(counts, tc.sample)
    cdf = np.cumsum(noise_distribution(counts, tc.ns_exponent))
    cdf[-1] = 1.0  # guard against rounding: searchsorted must never return V

    def epoch_pairs() -> tuple[np.ndarray, np.ndarray]:
        kept = [s[rng.random(s.size) < keep_p[s]] for s in id_sents]  # subsampling
        c, o = skipgram_pairs(kept, tc.window, rng)
        perm = rng.permutation(c.size)
        return c[perm], o[perm]

    opt = torch.optim.SGD(model.parameters(), lr=tc.lr)
    centers, contexts = epoch_pairs()
    pos = 0
    model.train()
    for step in range(1, steps + 1):
        frac = (step - 1) / steps  # linear decay to lr * min_lr_ratio
        opt.param_groups[0]["lr"] = tc.lr * (1.0 - frac * (1.0 - tc.min_lr_ratio))
        if pos >= centers.size:  # next epoch: new subsampling, windows and order
            centers, contexts = epoch_pairs()
            pos = 0
            if centers.size == 0:
                raise ValueError(
                    "word2vec.train: expected sentences with at least two in-vocabulary words, "
                    "got no skip-gram pairs"
                )
        c = torch.from_numpy(centers[pos : pos + tc.batch_size])
        o = torch.from_numpy(contexts[pos : pos + tc.batch_size])
        pos += tc.batch_size
        noise = np.searchsorted(cdf, rng.random((c.numel(), tc.negative)), side="right")
        losses = model(c, o, torch.from_numpy(noise))  # [B]
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()  # summed: every pair gets the full lr, as in the C code
        opt.step()
        if progress is not None:
            progress(step, steps, float(losses.detach().mean()))
    model.eval()
    return model


def vectors(model: Model) -> dict[str, np.ndarray]:
    """The word vectors ``v_w`` (input vectors, float32 [dim] each), by word in vocabulary order."""
    w = model.in_vectors.weight.detach().cpu().numpy().astype(np.float32, copy=True)
    return {word: w[i] for i, word in enumerate(model.vocab)}


def from_vectors(vecs: dict[str, np.ndarray], lowercase: bool = True) -> Model:
    """A model whose word vectors are ``vecs`` (vocabulary in dict order; output vectors zero,
    counts zero): to score vectors made elsewhere (another tool's, a hand-made test set) with
    the zoo's ``embeddings`` kind, or save them as a checkpoint."""
    words = list(vecs)
    _check_vocab(words, "word2vec.from_vectors")
    w = np.stack([np.asarray(vecs[k], dtype=np.float32) for k in words])  # [V, dim]
    if w.ndim != 2:
        raise ValueError(f"word2vec.from_vectors: expected 1-d vectors, got shape {w.shape[1:]}")
    model = Model(Config(dim=int(w.shape[1])), words, lowercase=lowercase)
    with torch.no_grad():
        model.in_vectors.weight.copy_(torch.from_numpy(w))
        model.out_vectors.weight.zero_()
    return model.eval()


def similarity(model: Model, w1: str, w2: str) -> float | None:
    """Cosine similarity ``v_1 . v_2 / (|v_1| |v_2|)`` of two words' vectors, computed in float64;
    None when either word (after :meth:`Model.key`) is out of vocabulary."""
    i, j = model.index.get(model.key(w1)), model.index.get(model.key(w2))
    if i is None or j is None:
        return None
    w = model.in_vectors.weight.detach()
    a, b = w[i].double(), w[j].double()
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 or nb == 0.0:
        raise ValueError(
            f"word2vec.similarity: expected non-zero vectors, got a zero vector for "
            f"{w1 if na == 0.0 else w2!r} (cosine undefined)"
        )
    return float(a @ b) / (na * nb)


def save_word2vec(vecs: dict[str, np.ndarray], path: str | os.PathLike) -> Path:
    """Write ``vecs`` in the word2vec TEXT format: a header line ``"<count> <dim>"``, then one line
    per word, ``"<word> <x_1> ... <x_dim>"``, values as ``str`` of the float32 (shortest
    round-trip decimal of a float32, so reading the file back gives the same float32 vectors). UTF-8, ``\\n``
    line ends. Words must be non-empty and free of whitespace; vectors 1-d, one shared dim,
    finite. Returns the path."""
    p = Path(path)
    words = list(vecs)
    _check_vocab(words, f"save_word2vec({p})")
    arrs = [np.asarray(vecs[w], dtype=np.float32) for w in words]
    dims = {a.shape for a in arrs}
    if len(dims) != 1 or len(next(iter(dims))) != 1:
        raise ValueError(f"save_word2vec({p}): expected 1-d vectors of one dim, got shapes {dims}")
    if not all(np.all(np.isfinite(a)) for a in arrs):
        raise ValueError(f"save_word2vec({p}): expected finite vectors, got inf or nan")
    dim = arrs[0].shape[0]
    lines = [f"{len(words)} {dim}"]
    lines += [w + " " + " ".join(str(x) for x in a) for w, a in zip(words, arrs, strict=True)]
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return p


def save(model: Model, path: str | os.PathLike) -> Path:
    """Write the checkpoint folder ``path``: config.json (config, training settings; the
    vocabulary under ``tokenizer``) and model.safetensors (``in_vectors``, ``out_vectors``,
    ``counts``)."""
    tokenizer = {
        "type": TOKENIZER_TYPE,
        "lowercase": model.lowercase,
        "vocab_size": len(model.vocab),
        "vocab": list(model.vocab),
    }
    return save_model(model, path, ARCH, tokenizer=tokenizer)


def load(path: str | os.PathLike) -> Model:
    """Read a checkpoint folder written by :func:`save` (eval mode)."""
    cfg, train_cfg = read_configs(path, ARCH, Config, TrainConfig)
    tok = read_config(path).get("tokenizer")
    where = Path(path) / "config.json"
    if (
        not isinstance(tok, dict)
        or tok.get("type") != TOKENIZER_TYPE
        or not isinstance(tok.get("vocab"), list)
        or not isinstance(tok.get("lowercase"), bool)
    ):
        raise CheckpointError(
            f"{where}: expected a tokenizer {{'type': 'word', 'lowercase': bool, 'vocab': [...]}}, "
            f"got {str(tok)[:120]}"
        )
    try:
        model = Model(cfg, tok["vocab"], lowercase=tok["lowercase"])
    except ValueError as e:
        raise CheckpointError(f"{where}: invalid vocabulary: {e}") from None
    if tok.get("vocab_size") != len(model.vocab):
        raise CheckpointError(
            f"{where}: expected vocab_size {len(model.vocab)} (the vocabulary's length), "
            f"got {tok.get('vocab_size')!r}"
        )
    return load_weights(model, path, train_cfg)
