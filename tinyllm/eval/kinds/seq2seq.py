"""The ``seq2seq`` kind: exact match of the best beam hypothesis (docs/definitions.md, the zoo).

Task data: JSONL, one ``{"src": ..., "tgt": ...}`` object per line (formats/seq2seq-jsonl.md).
Each source is decoded by its family's beam search (``translate_ids``: batched over sources and
hypotheses, beam size from the entry's ``options.beam``, default 4; it reads no other option); the best hypothesis, with its
eos and padding stripped, scores 1 when its bytes equal the target's UTF-8 bytes exactly and 0
otherwise. The row is the proportion of 1s with its Wilson interval, and the 0/1 scores are the
row's items, in file order, so that ``compare`` runs the paired test on them. The row's baseline is
"copy" (the source itself as the hypothesis), scored by exact match on the same pairs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tinyllm import metrics
from tinyllm.baselines import Baseline, proportion_baseline
from tinyllm.eval.kinds.common import (
    PROPORTION_INTERVAL,
    Kind,
    Scored,
    options_model,
    proportion_scored,
)
from tinyllm.models import FAMILIES
from tinyllm.models.beam import strip_hypothesis
from tinyllm.pairs import read_pairs
from tinyllm.report import Entry

KIND = "seq2seq"
METRIC = metrics.EXACT_MATCH.name
INTERVAL = PROPORTION_INTERVAL
DEFAULT_BEAM = 4

Options = options_model(KIND, "beam")
"""The entry options the seq2seq kind reads: the beam size (the data file is the split that is
scored)."""


def exact_match(hypothesis_ids, target: str) -> int:
    """1 if the hypothesis equals ``target`` byte for byte, else 0.

    ``hypothesis_ids`` are a beam hypothesis' token ids (bytes 0..255, then eos, possibly
    padding); everything from the first eos on and every pad are stripped
    (:func:`tinyllm.models.beam.strip_hypothesis`), and what remains is compared with the UTF-8
    bytes of ``target``: no case folding, no Unicode or whitespace normalization ("é" as one code
    point and as "e" + combining accent differ; so do "Mars" and "mars", and a trailing space).

    Example: ``exact_match([109, 97, 114, 115, EOS], "mars")`` -> 1; ``exact_match([EOS], "")``
    -> 1; ``exact_match([109, EOS], "m ")`` -> 0.
    """
    return int(strip_hypothesis(hypothesis_ids) == list(target.encode("utf-8")))


def copy_baseline(pairs: list[tuple[str, str]]) -> Baseline:
    """The "copy" baseline: the source as the hypothesis, 1 on a pair whose source equals its
    target byte for byte, else 0 (the same comparison as :func:`exact_match`), with its Wilson
    interval.

    Example: ``[("Paris", "Paris"), ("May 1", "1 mai")]`` -> items [1, 0], value 0.5.
    """
    same = [s.encode("utf-8") == t.encode("utf-8") for s, t in pairs]
    return proportion_baseline("copy", np.array(same, dtype=np.float64))


def score(entry: Entry, model, data_path: Path, rng: np.random.Generator, opts: Options) -> Scored:
    """Exact match of ``model`` on the task file ``data_path``, with a Wilson interval.

    ``EM = (1/n) sum_i [strip(best_i) == bytes(tgt_i)]`` over the n pairs of the file, where
    ``best_i`` is the best hypothesis of beam search (beam ``opts.beam``, default 4) on
    ``src_i`` by the entry's family's ``translate_ids`` (:func:`exact_match`). The interval is
    Wilson's (:func:`tinyllm.stats.wilson_interval`); the items are the per-pair 0/1 scores in
    file order. ``rng`` is unused: beam search is deterministic. Baseline:
    :func:`copy_baseline` on the same pairs.

    Example: 3 of 4 pairs right -> value 0.75, interval (0.3006, 0.9544), items [1, 1, 0, 1].
    """
    beam = DEFAULT_BEAM if opts.beam is None else opts.beam
    pairs = read_pairs(data_path)
    fam = FAMILIES[entry.family]
    hyps = fam.translate_ids(model, [s for s, _ in pairs], beam=beam)
    if len(hyps) != len(pairs):
        raise ValueError(
            f"{entry.family}.translate_ids: expected {len(pairs)} hypotheses, got {len(hyps)}"
        )
    correct = np.array(
        [exact_match(h, t) for h, (_, t) in zip(hyps, pairs, strict=True)], dtype=np.float64
    )
    details = {"beam": beam, "n_empty_targets": sum(1 for _, t in pairs if t == "")}
    return proportion_scored(METRIC, correct, details, copy_baseline(pairs))


DEFINITION = Kind(KIND, METRIC, INTERVAL, score, options=Options)
"""The seq2seq kind (:class:`tinyllm.eval.kinds.common.Kind`)."""
