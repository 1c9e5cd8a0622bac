"""The ``embeddings`` kind: word vectors against human similarity judgements (SPEC.md sections 4, 6).

Task data: a word-pairs file (formats/word-pairs.md), ``w1 w2 score`` lines. Each pair whose two
words are both in the model's vocabulary is scored by the family's ``similarity(model, w1, w2)``
(cosine similarity of the two word vectors; None = out of vocabulary). The row's value is the
Spearman rank correlation between those cosines and the human scores over the in-vocabulary
pairs, with the Fisher z interval ``tanh(atanh(rho) ± 1.96 / sqrt(n - 3))``; ``n`` = pairs
scored. Out-of-vocabulary pairs are left out (as gensim's ``evaluate_word_pairs`` does) and
counted in the details, with the coverage.

No per-item scores (``items`` is null, as the report schema requires for ``spearman``). Spearman
is not a mean of per-pair scores, so a sign-flip test on per-pair differences (what ``compare``
runs on 0/1 or NLL items) would test something else (the mean change of the cosines, whose scale
is arbitrary per model), not the change of rho. ``compare`` therefore reports an embeddings row as
"not comparable" (no per-item scores); the two rows' Fisher z intervals are in the report. A
sound paired test would keep the per-pair cosines of both releases and bootstrap
``rho_cur - rho_prev`` over resampled pairs; it is not done here.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tinyllm import metrics
from tinyllm.eval.kinds.common import Scored
from tinyllm.report import Entry
from tinyllm.stats import spearman_ci

KIND = "embeddings"
METRIC = metrics.SPEARMAN.name
DIRECTION = metrics.SPEARMAN.direction
ITEM_SCALE = metrics.SPEARMAN.item_scale
MEAN_OF_ITEMS = metrics.SPEARMAN.mean_of_items
INTERVAL = "fisher_z"
MIN_PAIRS = 4  # the Fisher z interval divides by sqrt(n - 3)


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


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator) -> Scored:
    """Spearman between the model's cosine similarities and the human scores of the word pairs
    in ``data_path`` (a word-pairs file), over the in-vocabulary pairs, with the Fisher z
    interval (:func:`tinyllm.stats.spearman_ci`).

    ``rho = spearmanr(cos, human)`` (scipy: the Pearson correlation of the average ranks, so ties
    share their mean rank); ``lo, hi = tanh(atanh(rho) ± z / sqrt(n - 3))``, z = 1.95996; ``n`` =
    pairs scored (both words in the vocabulary), at least 4. Unitless, in [-1, 1], higher is
    better. ``rng`` is unused: nothing here is random.

    Details: ``pairs`` (lines in the file), ``oov_pairs`` (pairs left out because a word is out of
    the vocabulary), ``coverage`` = n / pairs, ``oov_words`` (distinct words not found, as the
    file spells them) and ``pearson`` (of the same pairs, for reference).

    Example: 28 pairs scored, rho = 0.5 -> interval (0.1560, 0.7358).
    """
    from scipy.stats import pearsonr

    from tinyllm.models import FAMILIES  # lazily: importing the zoo does not import torch

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
    ci = spearman_ci(cos, human)
    details = {
        "pairs": len(pairs),
        "oov_pairs": len(pairs) - n,
        "coverage": n / len(pairs),
        "oov_words": len(oov_words),
        "pearson": float(pearsonr(cos, human).statistic),
    }
    return Scored(metric=METRIC, interval=ci, method=INTERVAL, n=n, items=None, details=details)
