"""Beam search (tinyllm/models/beam.py): hand-computed scripted models, beam 1 == greedy, batched
== one by one, ties, length normalization, max_len."""

from __future__ import annotations

import math

import pytest
import torch

from tinyllm.models import beam as B
from tinyllm.models import seq2seq, transformer
from tinyllm.models.translation import encode_sources
from tinyllm.tokens import EOS as TL_EOS
from tinyllm.tokens import PAD as TL_PAD

# a toy vocabulary for scripted models: 3 letters, eos, pad (bos is only ever an input)
A, Bt, C, EOS, PAD, BOS = 0, 1, 2, 3, 4, 5
V = 5


def scripted(table: dict[tuple, dict[int, float]], n: int = 1):
    """A decode step whose next-token probabilities depend on the prefix (a tuple of ids, no
    BOS) through ``table``; prefixes not in the table give eos probability 1. The state is the
    prefix tensor [M, t] plus the source index [M], so reordering bugs change the answers."""

    def step(state, prev):
        prefix = state["prefix"]
        if prefix.shape[1] or bool((prev != BOS).any()):
            prefix = torch.cat([prefix, prev[:, None]], dim=1)
        rows = []
        for r in range(prefix.shape[0]):
            key = (int(state["src"][r]), *[int(t) for t in prefix[r] if int(t) != PAD])
            probs = table.get(key, {EOS: 1.0})
            row = torch.full((V,), float("-inf"), dtype=torch.float64)
            for tok, p in probs.items():
                row[tok] = math.log(p)
            rows.append(row)
        return torch.stack(rows), {"prefix": prefix, "src": state["src"]}

    state = {"prefix": torch.empty(n, 0, dtype=torch.int64), "src": torch.arange(n)}
    return step, state


# source 0: greedy takes A (0.5) then eos (0.4): p = 0.2; B then eos has p = 0.4 * 0.9 = 0.36
TABLE = {
    (0,): {A: 0.5, Bt: 0.4, EOS: 0.1},
    (0, A): {A: 0.3, Bt: 0.3, EOS: 0.4},
    (0, Bt): {A: 0.05, Bt: 0.05, EOS: 0.9},
}


def run(table, n=1, **kw):
    step, state = scripted(table, n)
    kw.setdefault("max_len", 10)
    return B.beam_search(step, state, n, bos=BOS, eos=EOS, pad=PAD, **kw)


def test_beam_two_finds_the_better_sequence_that_greedy_misses():
    greedy = run(TABLE, beam=1)
    assert greedy.ids == [[A, EOS]]
    assert greedy.scores[0] == pytest.approx(math.log(0.5) + math.log(0.4))  # ln 0.2
    two = run(TABLE, beam=2)
    assert two.ids == [[Bt, EOS]]
    assert two.scores[0] == pytest.approx(math.log(0.4) + math.log(0.9))  # ln 0.36
    assert two.finished == [True]
    ref = B.greedy_search(*scripted(TABLE), 1, max_len=10, bos=BOS, eos=EOS)
    assert ref.ids == greedy.ids and ref.scores == pytest.approx(greedy.scores)


def test_beam_keeps_a_finished_hypothesis_that_live_ones_cannot_beat():
    # beam 2: after step 1 the beam is {A .5, B .4}; step 2's candidates are A-eos .2 (done),
    # A-A .15, A-B .15, B-eos .36 (done): both finished, B-eos wins, search stops at 2 tokens
    # even though longer continuations exist; with A-A -> eos 1.0 the best stays B-eos
    table = {**TABLE, (0, A, A): {EOS: 1.0}}
    res = run(table, beam=2)
    assert res.ids == [[Bt, EOS]]
    # beam 3 also keeps A-A (.15): A-A-eos = .15 < .36, still B-eos
    assert run(table, beam=3).ids == [[Bt, EOS]]


def test_ties_go_to_the_better_ranked_beam_then_the_smaller_token_id():
    # A and B equally likely, then each ends: beam 1 takes the smaller id A
    table = {(0,): {A: 0.5, Bt: 0.5}, (0, A): {EOS: 1.0}, (0, Bt): {EOS: 1.0}}
    assert run(table, beam=1).ids == [[A, EOS]]
    assert run(table, beam=2).ids == [[A, EOS]]  # equal final scores: the first-ranked beam
    table_rev = {(0,): {C: 0.5, Bt: 0.5}, (0, C): {EOS: 1.0}, (0, Bt): {EOS: 1.0}}
    assert run(table_rev, beam=1).ids == [[Bt, EOS]]


def test_length_normalization_is_off_by_default_and_changes_the_choice_when_on():
    # short: A eos, p = .6 * .5 = .3 (2 tokens); long: B B B eos, p = .4 * 1 * .6 * 1 = .24
    # (4 tokens): the short one wins on the raw sum, the long one per token
    table = {
        (0,): {A: 0.6, Bt: 0.4},
        (0, A): {EOS: 0.5, C: 0.5},
        (0, A, C): {EOS: 0.9, A: 0.1},
        (0, Bt): {Bt: 1.0},
        (0, Bt, Bt): {Bt: 0.6, EOS: 0.4},
    }
    raw_short = math.log(0.6) + math.log(0.5)  # -1.2040, length 2: -0.6020 per token
    raw_long = math.log(0.4) + math.log(0.6)  # -1.4271, length 4: -0.3567 per token
    raw_ac = math.log(0.6 * 0.5 * 0.9)  # A C eos: -1.3093, length 3: -0.4364 per token
    assert raw_short > raw_ac > raw_long
    assert raw_long / 4 > raw_ac / 3 > raw_short / 2
    off = run(table, beam=3)
    assert off.ids == [[A, EOS]] and off.scores[0] == pytest.approx(raw_short)
    on = run(table, beam=3, length_penalty=1.0)
    assert on.ids == [[Bt, Bt, Bt, EOS]] and on.scores[0] == pytest.approx(raw_long)
    assert run(table, beam=3, length_penalty=0.0).ids == off.ids


def test_max_len_cuts_a_hypothesis_without_eos():
    table = {(0,): {A: 1.0}, (0, A): {A: 1.0}, (0, A, A): {A: 1.0}}
    res = run(table, beam=2, max_len=3)
    assert res.ids == [[A, A, A]] and res.finished == [False]
    assert res.scores == [0.0]


def test_sources_are_searched_independently_in_one_batch():
    table = {
        **TABLE,
        (1,): {C: 0.9, EOS: 0.1},
        (1, C): {A: 0.2, EOS: 0.8},
        (2,): {EOS: 1.0},
    }
    batched = run(table, n=3, beam=2)
    assert batched.ids == [[Bt, EOS], [C, EOS], [EOS]]
    assert batched.scores == pytest.approx([math.log(0.36), math.log(0.72), 0.0])


def test_strip_hypothesis():
    assert B.strip_hypothesis([104, 105, TL_EOS, TL_PAD]) == [104, 105]
    assert B.strip_hypothesis([TL_EOS]) == []
    assert B.strip_hypothesis([104, TL_PAD, 105]) == [104, 105]
    assert B.strip_hypothesis([104, TL_EOS, 105, TL_EOS]) == [104]  # up to the FIRST eos
    assert B.strip_hypothesis([]) == []


@pytest.mark.parametrize("beam", [0, -1, 1.5, True])
def test_bad_beam_is_refused(beam):
    with pytest.raises(ValueError, match="beam"):
        run(TABLE, beam=beam)


# ------------------------------------------------------------------- real (random) models


def _random_model(fam, seed):
    torch.manual_seed(seed)
    if fam is seq2seq:
        return seq2seq.Model(seq2seq.Config(emb_dim=16, hidden=32, max_len=12))
    return transformer.Model(
        transformer.Config(n_embd=32, n_head=2, n_enc_layer=1, n_dec_layer=1, max_len=12)
    ).eval()


SRCS = ["March 5, 2024", "", "Afar", "é", "x" * 20, "ab ab"]


@pytest.mark.parametrize("fam", [seq2seq, transformer], ids=["seq2seq", "transformer"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_one_equals_greedy_on_random_models(fam, seed):
    model = _random_model(fam, seed).eval()
    src = encode_sources(SRCS, model.cfg.max_len)

    def step(st, prev):
        return fam.decode_step(model, st, prev)

    with torch.inference_mode():
        beam1 = B.beam_search(step, fam.encode(model, src), len(SRCS), beam=1, max_len=13)
        greedy = B.greedy_search(step, fam.encode(model, src), len(SRCS), max_len=13)
    assert beam1.ids == greedy.ids
    assert beam1.scores == pytest.approx(greedy.scores, rel=1e-9, abs=1e-9)
    assert beam1.finished == greedy.finished


@pytest.mark.parametrize("fam", [seq2seq, transformer], ids=["seq2seq", "transformer"])
@pytest.mark.parametrize("beam", [1, 3])
def test_batched_equals_one_by_one(fam, beam):
    model = _random_model(fam, 3)
    batched = fam.translate_ids(model, SRCS, beam=beam)
    alone = [fam.translate_ids(model, [s], beam=beam)[0] for s in SRCS]
    assert batched == alone
    assert fam.translate_ids(model, SRCS, beam=beam, batch_size=2) == batched
