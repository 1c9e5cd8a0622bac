"""The ``embeddings`` kind: word vectors against human similarity judgements and word analogies
(docs/definitions.md, intervals, the zoo).

Two kinds of task data, told apart by the file (:func:`is_analogy_file`):

**Word pairs** (formats/word-pairs.md), ``w1 w2 score`` lines. Each pair whose two words are both
in the model's vocabulary is scored by the family's ``similarity(model, w1, w2)`` (cosine
similarity of the two word vectors; None = out of vocabulary). The row's value is the Spearman
rank correlation between those cosines and the human scores over the in-vocabulary pairs, with
the Fisher z interval ``tanh(atanh(rho) ± 1.96 / sqrt(n - 3))``; ``n`` = pairs scored.
Out-of-vocabulary pairs are left out (as gensim's ``evaluate_word_pairs`` does) and counted in
the details, with the coverage. The per-item scores are every pair's cosine in file order (item
i = the i-th pair of the file), NaN for an out-of-vocabulary pair, and ``details.human_scores``
holds every pair's human score: two releases scored on the same file (same ``data_sha256``) line
up pair by pair, and ``compare`` tests the change of rho on the pairs both cover (a paired
bootstrap and the PERM-BOTH permutation test, tinyllm/compare.py). A sign-flip test on per-pair
cosine differences would test something else (the mean change of the cosines, whose scale is
arbitrary per model), so the cosines are never averaged.

**Analogy questions** (formats/analogies.md, gensim's ``questions-words.txt``): ``a b c d``
lines under ``: section`` lines, "a is to b as c is to d". 3CosAdd, exactly as gensim's
``KeyedVectors.evaluate_word_analogies`` (a test compares the two): with unit vectors ``v̂``,
the answer is the word w of the first ``restrict_vocab`` words of the vocabulary (by frequency)
that maximizes ``cos(w, unit((v̂_b + v̂_c - v̂_a) / 3))``, a, b and c themselves excluded; lookups
are case-insensitive (upper-cased; of two spellings the more frequent wins). A question with a
word outside those words is out of vocabulary: left out of the accuracy and counted
(``oov_questions``), as gensim does. The row: ``acc`` = correct / answered questions with the
Wilson interval, ``n`` = answered questions; per-item scores 1 (correct) / 0 (wrong) for every
question of the file in file order, NaN where out of vocabulary.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy.stats import pearsonr

from tinyllm import metrics
from tinyllm.baselines import Baseline
from tinyllm.eval.kinds.common import (
    PROPORTION_INTERVAL,
    Kind,
    Scored,
    options_model,
    wilson_items,
)
from tinyllm.models import FAMILIES
from tinyllm.report import Entry
from tinyllm.stats import ESTIMATORS, Method

KIND = "embeddings"
METRIC = metrics.SPEARMAN.name
INTERVAL = Method.FISHER_Z
ZERO_CORRELATION = Baseline("zero correlation", 0.0)
"""A word-pairs row's baseline: vectors unrelated to the human scores (the Fisher z test)."""
ZERO_ACCURACY = Baseline("zero accuracy", 0.0)
"""An analogy row's baseline: never the right word (the Wilson test against 0)."""
MIN_PAIRS = 4  # the Fisher z interval divides by sqrt(n - 3)

Options = options_model(KIND)
"""The embeddings kind reads no entry option."""
NAN_ITEMS = True
"""Per-item scores follow the task file's items, NaN where the model does not cover one
(tinyllm.compare_checks.COVERAGE_KINDS names this kind)."""
HUMAN_KEY = "human_scores"  # the details key of every pair's human score (compare_checks.HUMAN_KEY)
ANALOGY_METRIC = metrics.ACC.name
ANALOGY_INTERVAL = PROPORTION_INTERVAL
RESTRICT_VOCAB = 300_000
"""Analogies consider the first (most frequent) words of the vocabulary only, gensim's default."""
ANALOGY_BATCH = 1024  # questions per matrix product: [batch, vocabulary] float32 scores


def read_word_pairs(path: str | Path) -> list[tuple[str, str, float]]:
    """The pairs of a word-pairs file (formats/word-pairs.md), in file order.

    Each line is ``w1 w2 score`` (fields separated by whitespace; score a finite number); lines
    starting with ``#`` and blank lines are skipped. Every problem is a ValueError naming the
    file and line; a file without pairs is refused.

    Example: the line ``tiger cat 7.35`` -> ``("tiger", "cat", 7.35)``.
    """
    p = Path(path)
    out = []
    with open(p, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 3:
                raise ValueError(
                    f"{p}:{i}: expected 'w1 w2 score' (3 fields), got {len(parts)}: {line!r}"
                )
            try:
                score = float(parts[2])
            except ValueError:
                raise ValueError(
                    f"{p}:{i}: expected a number as the score, got {parts[2]!r}"
                ) from None
            if not math.isfinite(score):
                raise ValueError(f"{p}:{i}: expected a finite score, got {parts[2]!r}")
            out.append((parts[0], parts[1], score))
    if not out:
        raise ValueError(f"{p}: expected at least one 'w1 w2 score' line, got none")
    return out


def pair_similarities(
    similarity, model, pairs: list[tuple[str, str, float]]
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``(cosines, human scores, indices)`` of the pairs that ``similarity(model, w1, w2)``
    scores (not None), float64, in file order; ``indices`` are their positions in ``pairs``."""
    cos, human, idx = [], [], []
    for k, (w1, w2, score) in enumerate(pairs):
        s = similarity(model, w1, w2)
        if s is None:
            continue
        s = float(s)
        if not math.isfinite(s):
            raise ValueError(f"similarity({w1!r}, {w2!r}): expected a finite number, got {s}")
        cos.append(s)
        human.append(score)
        idx.append(k)
    return np.array(cos, dtype=np.float64), np.array(human, dtype=np.float64), idx


def score_pairs(entry: Entry, model, data_path: Path, rng: np.random.Generator) -> Scored:
    """Spearman between the model's cosine similarities and the human scores of the word pairs
    in ``data_path`` (a word-pairs file), over the in-vocabulary pairs, with the Fisher z
    interval (:func:`tinyllm.stats.fisher_z`: each pair its own unit).

    ``rho = spearmanr(cos, human)`` (scipy: the Pearson correlation of the average ranks, so ties
    share their mean rank); ``lo, hi = tanh(atanh(rho) ± z / sqrt(n - 3))``, z = 1.95996; ``n`` =
    pairs scored (both words in the vocabulary), at least 4. Unitless, in [-1, 1], higher is
    better. ``rng`` is unused: nothing here is random.

    Details: ``pairs`` (lines in the file), ``oov_pairs`` (pairs left out because a word is out of
    the vocabulary), ``coverage`` = n / pairs, ``oov_words`` (distinct words not found, as the
    file spells them), ``pearson`` (of the same pairs, for reference) and ``human_scores``
    (every pair's human score, in file order). Items: every pair's cosine in file order, NaN
    for an out-of-vocabulary pair. Baseline: :data:`ZERO_CORRELATION` (rho = 0).

    Example: 28 pairs scored, rho = 0.5 -> interval (0.1560, 0.7358).
    """
    pairs = read_word_pairs(data_path)
    similarity = FAMILIES[entry.family].similarity
    cos, human, idx = pair_similarities(similarity, model, pairs)
    n = int(cos.size)
    if n < MIN_PAIRS:
        raise ValueError(
            f"{data_path}: expected at least {MIN_PAIRS} pairs with both words in the "
            f"vocabulary (the interval needs n - 3 > 0), got {n} of {len(pairs)}"
        )
    scored = set(idx)
    oov_words = sorted(
        {
            w
            for k, (w1, w2, _) in enumerate(pairs)
            if k not in scored
            for w in (w1, w2)
            if similarity(model, w, w) is None
        }
    )
    ci = ESTIMATORS[INTERVAL](np.column_stack([cos, human]), np.arange(n), None)
    details = {
        "pairs": len(pairs),
        "oov_pairs": len(pairs) - n,
        "coverage": n / len(pairs),
        "oov_words": len(oov_words),
        "pearson": float(pearsonr(cos, human).statistic),
        HUMAN_KEY: [score for _, _, score in pairs],
    }
    items = np.full(len(pairs), np.nan)
    items[idx] = cos
    return Scored(
        metric=METRIC,
        interval=ci,
        method=INTERVAL,
        n=n,
        items=items,
        details=details,
        baseline=ZERO_CORRELATION,
    )


# ---- word analogies (formats/analogies.md) ------------------------------------------------------


def is_analogy_file(path: str | Path) -> bool:
    """Whether ``path`` is an analogy-questions file: its first line that is not blank is a
    ``: section`` line (gensim's format starts so; a word-pairs file never does)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                return line.startswith(": ")
    return False


def read_analogies(path: str | Path) -> list[tuple[str, str, str, str, str]]:
    """The questions of an analogy file (formats/analogies.md) as ``(section, a, b, c, d)``, in
    file order: "a is to b as c is to d".

    A line ``: name`` starts a section; every other line that is not blank is one question of
    four whitespace-separated words. Every problem is a ValueError naming the file and line (a
    question before the first section, a line without four words); a file without questions is
    refused.

    Example: ``": capital-common-countries"`` then ``"Athens Greece Baghdad Iraq"`` ->
    ``[("capital-common-countries", "Athens", "Greece", "Baghdad", "Iraq")]``.
    """
    p = Path(path)
    out: list[tuple[str, str, str, str, str]] = []
    section = None
    with open(p, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if line.startswith(": "):
                section = line[2:].strip()
                continue
            if not line.strip():
                continue
            words = line.split()
            if section is None:
                raise ValueError(f"{p}:{i}: expected a ': section' line before the first question")
            if len(words) != 4:
                raise ValueError(
                    f"{p}:{i}: expected 'a b c d' (4 words), got {len(words)}: {line!r}"
                )
            out.append((section, *words))
    if not out:
        raise ValueError(f"{p}: expected at least one 'a b c d' question, got none")
    return out


def solve_analogies(
    words: list[str],
    vectors: np.ndarray,
    questions: list[tuple[str, str, str, str, str]],
    restrict_vocab: int = RESTRICT_VOCAB,
) -> np.ndarray:
    """Per question: 1.0 when 3CosAdd answers ``d``, 0.0 when it does not, NaN when a word of the
    question is out of vocabulary (float64 [questions]).

    ``words``: the vocabulary, most frequent first; ``vectors``: their vectors [V, dim]. Only the
    first ``restrict_vocab`` words count (the vocabulary of the test, as gensim's
    ``restrict_vocab``); lookups upper-case both sides, and of two spellings of one word the
    earlier (more frequent) is the word. With ``v̂ = v / |v|`` (float32, as gensim),
    ``m = unit((v̂_b + v̂_c - v̂_a) / 3)`` and the answer ``argmax_w (v_w . m) / |v_w|`` over the
    words other than a, b and c (any spelling of them); it is correct when it is ``d``.
    Vectorized: one [batch, words] product per :data:`ANALOGY_BATCH` questions.
    """
    R = min(int(restrict_vocab), len(words))
    if R < 1:
        raise ValueError(f"restrict_vocab: expected at least 1 word, got {restrict_vocab}")
    w = np.asarray(vectors, dtype=np.float32)[:R]  # [R, dim]
    keys = [word.upper() for word in words[:R]]
    first: dict[str, int] = {}
    for k, key in enumerate(keys):
        first.setdefault(key, k)
    cls = np.array([first[key] for key in keys], dtype=np.int64)  # [R] the word of each row
    norms = np.linalg.norm(w, axis=1)  # [R] float32
    if np.any(norms == 0):
        bad = words[int(np.flatnonzero(norms == 0)[0])]
        raise ValueError(
            f"analogies: expected non-zero word vectors, got a zero vector for {bad!r}"
        )
    unit = w / norms[:, None]  # [R, dim] float32
    out = np.full(len(questions), np.nan)
    found = [
        (q, [first.get(x.upper()) for x in question[1:]]) for q, question in enumerate(questions)
    ]
    found = [(q, ids) for q, ids in found if None not in ids]
    for start in range(0, len(found), ANALOGY_BATCH):
        chunk = found[start : start + ANALOGY_BATCH]
        q_idx = np.array([q for q, _ in chunk])
        ids = np.array([ids for _, ids in chunk], dtype=np.int64)  # [B, 4]: a, b, c, d
        m = ((unit[ids[:, 1]] + unit[ids[:, 2]]) - unit[ids[:, 0]]) / np.float32(3.0)  # [B, dim]
        m /= np.linalg.norm(m, axis=1, keepdims=True).astype(np.float32)
        sims = (m @ w.T) / norms[None, :]  # [B, R]: cosine of every word with m
        for j in range(3):  # a, b, c are never the answer, in any spelling
            sims[cls[None, :] == ids[:, j : j + 1]] = -np.inf
        answer = cls[np.argmax(sims, axis=1)]
        out[q_idx] = (answer == ids[:, 3]).astype(np.float64)
    return out


def score_analogies(entry: Entry, model, data_path: Path, rng: np.random.Generator) -> Scored:
    """Analogy accuracy of the family's word vectors (``vectors(model)``, vocabulary order) on
    the questions of ``data_path`` (:func:`read_analogies`, :func:`solve_analogies`).

    ``acc = correct / n`` over the ``n`` questions whose four words are in the first
    :data:`RESTRICT_VOCAB` words, with the Wilson interval (each question its own unit); gensim's
    ``evaluate_word_analogies`` gives the same accuracy. Proportion, higher is better. ``rng``
    is unused: nothing here is random.

    Details: ``questions`` (in the file), ``oov_questions`` (left out: a word out of
    vocabulary), ``coverage`` = n / questions, ``restrict_vocab``, ``sections`` (per section:
    ``correct``, ``answered``, ``questions``). Items: 1 / 0 per question in file order, NaN for an
    out-of-vocabulary question. Baseline: :data:`ZERO_ACCURACY` (acc = 0).

    Example: 3 of 4 answered questions right, 2 more out of vocabulary -> acc 0.75, n 4,
    oov_questions 2, coverage 4/6.
    """
    questions = read_analogies(data_path)
    vecs = FAMILIES[entry.family].vectors(model)
    words = list(vecs)
    matrix = np.stack([np.asarray(vecs[k], dtype=np.float32) for k in words])
    items = solve_analogies(words, matrix, questions)
    answered = ~np.isnan(items)
    n = int(answered.sum())
    if n == 0:
        raise ValueError(
            f"{data_path}: expected at least one question with its four words in the "
            f"vocabulary, got none of {len(questions)}"
        )
    sections: dict[str, dict[str, int]] = {}
    for (section, *_), x in zip(questions, items, strict=True):
        s = sections.setdefault(section, {"correct": 0, "answered": 0, "questions": 0})
        s["questions"] += 1
        if not np.isnan(x):
            s["answered"] += 1
            s["correct"] += int(x)
    details = {
        "questions": len(questions),
        "oov_questions": len(questions) - n,
        "coverage": n / len(questions),
        "restrict_vocab": RESTRICT_VOCAB,
        "sections": sections,
    }
    return Scored(
        metric=ANALOGY_METRIC,
        interval=wilson_items(items[answered]),
        method=ANALOGY_INTERVAL,
        n=n,
        items=items,
        details=details,
        baseline=ZERO_ACCURACY,
    )


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator, opts: Options) -> Scored:
    """The row of ``data_path``: :func:`score_analogies` for an analogy file
    (:func:`is_analogy_file`), else :func:`score_pairs` (a word-pairs file); ``opts`` is empty
    (:data:`Options`)."""
    if is_analogy_file(data_path):
        return score_analogies(entry, model, data_path, rng)
    return score_pairs(entry, model, data_path, rng)


DEFINITION = Kind(
    KIND,
    METRIC,
    INTERVAL,
    score,
    options=Options,
    also=((ANALOGY_METRIC, ANALOGY_INTERVAL),),
    nan_items=NAN_ITEMS,
)
"""The embeddings kind (:class:`tinyllm.eval.kinds.common.Kind`): Spearman over word pairs, or
accuracy with Wilson's interval over an analogy file's questions."""
