"""Calibration measured on real data (docs/definitions.md, "Units" and "Paired tests"): the
intervals over documents contain the population value in about 95% of samples, the token-level
ones do not, and the paired sign-flip test over documents calls a null difference about 5% of the
time.

The population is the 293 unique documents of the Lee corpus (gensim's lee_background.cor, one
document per line: :func:`tinyllm.data.lee_documents`). Two real models that need no training
loop score every byte of every document, each document read after a newline:

* a byte bigram with add-k smoothing (k = 0.5), the table of :mod:`tinyllm.models.bigram`,
* a byte unigram with add-one smoothing,

each fitted on the OTHER 292 documents (leave one out), so a document is never scored by a
model that has read it. The population value is ``sum NLL / sum tokens`` over all 293 documents
(nats per byte; bpb is the same interval over ln 2). Each of the SAMPLES draws 29 documents
without replacement (seeded) and builds the intervals from their per-token NLLs through the
public API, as a report would.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tinyllm import data, stats

SAMPLES = 1000
DOCS_PER_SAMPLE = 29  # the size of the zoo's lee val split
N_PERM = 999


def _loo_bigram(doc, prev, nxt, k: float) -> np.ndarray:
    """Per-token NLL under a byte bigram fitted on every document but the token's own:
    ``p(b | a) = (C(a, b) - c_d(a, b) + k) / (C(a) - c_d(a) + 256 k)``."""
    pair = prev * 256 + nxt
    total = np.bincount(pair, minlength=256 * 256).astype(np.float64)
    row_total = np.bincount(prev, minlength=256).astype(np.float64)
    _, inv, cnt = np.unique(doc * 65_536 + pair, return_inverse=True, return_counts=True)
    _, inv_row, cnt_row = np.unique(doc * 256 + prev, return_inverse=True, return_counts=True)
    p = (total[pair] - cnt[inv] + k) / (row_total[prev] - cnt_row[inv_row] + 256 * k)
    return -np.log(p)


def _loo_unigram(doc, nxt, k: float) -> np.ndarray:
    """Per-token NLL under a byte unigram fitted on every document but the token's own."""
    total = np.bincount(nxt, minlength=256).astype(np.float64)
    _, inv, cnt = np.unique(doc * 256 + nxt, return_inverse=True, return_counts=True)
    others = nxt.size - np.bincount(doc)[doc]
    return -np.log((total[nxt] - cnt[inv] + k) / (others + 256 * k))


@pytest.fixture(scope="module")
def population() -> dict:
    docs = data.unique_documents(data.lee_documents())
    assert len(docs) == 293
    seqs = [np.frombuffer(b"\n" + d.encode("utf-8"), dtype=np.uint8).astype(np.int64) for d in docs]
    doc = np.concatenate([np.full(s.size - 1, g) for g, s in enumerate(seqs)])
    prev = np.concatenate([s[:-1] for s in seqs])
    nxt = np.concatenate([s[1:] for s in seqs])
    lengths = np.bincount(doc)
    return {
        "bigram": _loo_bigram(doc, prev, nxt, 0.5),
        "unigram": _loo_unigram(doc, nxt, 1.0),
        "starts": np.concatenate([[0], np.cumsum(lengths)]),
        "lengths": lengths,
    }


def _samples(pop: dict, seed: int):
    """SAMPLES draws of 29 documents: (document numbers, their Units)."""
    rng = np.random.default_rng(seed)
    g = pop["lengths"].size
    for _ in range(SAMPLES):
        idx = np.sort(rng.choice(g, DOCS_PER_SAMPLE, replace=False))
        yield idx, stats.units_from_lengths(pop["lengths"][idx].tolist())


def _take(x: np.ndarray, pop: dict, idx: np.ndarray) -> np.ndarray:
    return np.concatenate([x[pop["starts"][j] : pop["starts"][j + 1]] for j in idx])


def _covers(iv, value: float) -> bool:
    return iv.lo <= value <= iv.hi


@pytest.mark.parametrize("model", ["unigram", "bigram"])
def test_document_clustered_interval_covers_the_population_value(population, model):
    x = population[model]
    truth = math.fsum(x) / x.size
    clustered = token = 0
    for idx, units in _samples(population, seed=1):
        items = _take(x, population, idx)
        clustered += _covers(stats.cluster_ratio(items, units), truth)
        token += _covers(stats.iid(items), truth)
    clustered, token = clustered / SAMPLES, token / SAMPLES
    print(f"\n{model}: coverage over documents {clustered:.3f}, over tokens {token:.3f}")
    assert 0.92 <= clustered <= 0.98
    assert token < clustered - 0.05
    if model == "unigram":  # documents differ most in difficulty under the unigram
        assert token < 0.85


def test_paired_difference_over_documents_covers_the_population_delta(population):
    a, b = population["bigram"], population["unigram"]
    truth = (math.fsum(a) - math.fsum(b)) / a.size
    rng = np.random.default_rng(2)
    clustered = token = 0
    for idx, units in _samples(population, seed=2):
        xa, xb = _take(a, population, idx), _take(b, population, idx)
        r = stats.paired_difference(xa, xb, units, rng, kind="ratio", n_perm=N_PERM)
        clustered += _covers(r, truth)
        token += _covers(stats.mean_ci(xa - xb), truth)
    clustered, token = clustered / SAMPLES, token / SAMPLES
    print(f"\nbigram - unigram: coverage over documents {clustered:.3f}, over tokens {token:.3f}")
    assert 0.92 <= clustered <= 0.98
    assert token < 0.85


def test_sign_flips_over_documents_hold_their_level_on_a_null_difference(population):
    # the bigram's NLLs shifted so that both models have the same population mean: every
    # document keeps its own real difference, the population effect is zero
    a, b = population["bigram"], population["unigram"]
    a0 = a - (math.fsum(a) - math.fsum(b)) / a.size
    rng = np.random.default_rng(3)
    flips = t_calls = token_calls = 0
    for idx, units in _samples(population, seed=3):
        xa, xb = _take(a0, population, idx), _take(b, population, idx)
        r = stats.paired_difference(xa, xb, units, rng, kind="ratio", n_perm=N_PERM)
        flips += r.p < 0.05
        t_calls += not _covers(r, 0.0)  # the t test over documents: 0 outside the interval
        token_calls += not _covers(stats.mean_ci(xa - xb), 0.0)  # the t test over tokens
    flips, t_calls, token_calls = flips / SAMPLES, t_calls / SAMPLES, token_calls / SAMPLES
    print(
        f"\nnull difference, p < 0.05: sign flips over documents {flips:.3f}, t over documents "
        f"{t_calls:.3f}, t over tokens {token_calls:.3f}"
    )
    assert 0.02 <= flips <= 0.08
    assert 0.02 <= t_calls <= 0.08
    assert token_calls > 0.15
