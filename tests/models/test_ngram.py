"""Kneser-Ney n-gram: normalization on seen and unseen contexts, hand-computed probabilities,
a differential test against a dictionary implementation of the formula, the one-file checkpoint."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open

from tinyllm.checkpoint import CheckpointError, save_single
from tinyllm.models import ngram

TEXT = (
    b"Hundreds of people have been forced to vacate their homes in the Southern Highlands of "
    b"New South Wales as strong winds today pushed a huge bushfire towards the town of Hill Top. "
    b"A new blaze near Goulburn, south-west of Sydney, has forced the closure of the Hume Highway."
)
DATA = np.frombuffer(TEXT, np.uint8)


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5, 7])
def test_every_distribution_sums_to_one(order):
    model = ngram.train(ngram.Config(order=order), DATA, seed=0)
    seen = [b"", b"t", b"th", b"the", b" the t", b"Hill", b"of Sydney"]
    unseen = [b"\x00", b"\xff\xfe", b"zqxj", b"Qq!", b"the zq", b"\x01\x02\x03\x04\x05\x06"]
    for ctx in seen + unseen:
        p = ngram.next_byte_probs(model, ctx)
        assert p.shape == (256,)
        assert np.all(p > 0), (order, ctx)
        assert math.fsum(p) == pytest.approx(1.0, abs=1e-12), (order, ctx)


@settings(max_examples=30, deadline=None)
@given(
    text=st.binary(min_size=0, max_size=60),
    ctx=st.binary(min_size=0, max_size=8),
    order=st.integers(1, 5),
)
def test_normalized_for_any_data_and_context(text, ctx, order):
    model = ngram.train(ngram.Config(order=order), np.frombuffer(text, np.uint8), seed=0)
    p = ngram.next_byte_probs(model, ctx)
    assert np.all(p > 0)
    assert math.fsum(p) == pytest.approx(1.0, abs=1e-12)


def test_model_call_rows_are_log_distributions():
    model = ngram.train(ngram.Config(order=3), DATA, seed=0)
    logp = model(np.frombuffer(b"the bushfire", np.uint8)[None].astype(np.int64))
    assert tuple(logp.shape) == (1, 12, 256)
    np.testing.assert_allclose(logp.exp().sum(-1).numpy(), 1.0, atol=1e-12)


def test_order_2_by_hand():
    # "abab": top level (raw) bigrams ab:2, ba:1 -> n1 = 1, n2 = 1 -> D2 = 1/3.
    # level 1 (continuation): a has 1 left neighbour (b), b has 1 (a) -> n1 = 2 -> D1 = 1,
    # P1(w) = (max(1 - 1, 0) + 1 * 2 * 1/256) / 2 = 1/256 for every w.
    model = ngram.train(ngram.Config(order=2), np.frombuffer(b"abab", np.uint8), seed=0)
    assert model.discounts == pytest.approx([1.0, 1 / 3])
    p_b_a = (2 - 1 / 3 + (1 / 3) * 1 * (1 / 256)) / 2  # context a: c = 2, T = 1
    p_a_b = (1 - 1 / 3 + (1 / 3) * 1 * (1 / 256)) / 1  # context b: c = 1, T = 1
    got = ngram.token_nlls(model, np.frombuffer(b"abac", np.uint8))
    expected = [-math.log(p_b_a), -math.log(p_a_b), -math.log((1 / 3) * (1 / 256) / 2)]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # an unseen context backs off to P1 = uniform
    assert ngram.next_byte_probs(model, b"z")[ord("a")] == pytest.approx(1 / 256)


def _reference_kn(data: bytes, order: int):
    """Interpolated Kneser-Ney straight from the formula, with dictionaries (slow, obvious)."""
    raw = Counter(data[i : i + order] for i in range(len(data) - order + 1))
    levels = {order: raw}
    for n in range(order - 1, 0, -1):
        longer = {data[i : i + n + 1] for i in range(len(data) - n)}
        levels[n] = Counter(g[1:] for g in longer)
    disc = {}
    for n, c in levels.items():
        n1 = sum(1 for v in c.values() if v == 1)
        n2 = sum(1 for v in c.values() if v == 2)
        d = n1 / (n1 + 2 * n2) if n1 + 2 * n2 else 0.5
        disc[n] = min(max(d, 0.05), 1.0)
    tot, typ = {}, {}
    for n, c in levels.items():
        tot[n], typ[n] = defaultdict(int), defaultdict(int)
        for g, v in c.items():
            tot[n][g[:-1]] += v
            typ[n][g[:-1]] += 1

    def prob(hist: bytes, w: int) -> float:
        p = 1 / 256
        for n in range(1, order + 1):
            if len(hist) < n - 1:
                break
            h = hist[len(hist) - (n - 1) :] if n > 1 else b""
            if tot[n].get(h, 0) > 0:
                c = levels[n].get(h + bytes([w]), 0)
                p = (max(c - disc[n], 0) + disc[n] * typ[n][h] * p) / tot[n][h]
        return p

    return prob, [disc[n] for n in range(1, order + 1)]


@pytest.mark.parametrize("order", [2, 3, 5])
def test_matches_a_dictionary_reference(order):
    prob, disc = _reference_kn(TEXT, order)
    model = ngram.train(ngram.Config(order=order), DATA, seed=0)
    assert model.discounts == pytest.approx(disc, abs=1e-15)
    test = b"The bushfire near the town of Hill Top; a zebra! Sydney."
    expected = [
        -math.log(prob(test[max(0, t - order + 1) : t], test[t])) for t in range(1, len(test))
    ]
    got = ngram.token_nlls(model, np.frombuffer(test, np.uint8))
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_context_is_the_last_order_minus_1_bytes():
    model = ngram.train(ngram.Config(order=4), DATA, seed=0)
    ids = np.frombuffer(b"of the town of Hill", np.uint8)
    nll = ngram.token_nlls(model, ids)
    for t in range(1, ids.size):  # token t: min(t, 3) previous bytes, shorter at the start
        p = ngram.next_byte_probs(model, ids[max(0, t - 3) : t])
        assert nll[t - 1] == pytest.approx(-math.log(p[ids[t]]), rel=1e-12)
    changed = ids.copy()
    changed[2] = ord("X")  # 4+ bytes before token 6: does not matter; token 3..5 see it
    diff = ngram.token_nlls(model, changed) != nll
    assert not diff[5:].any() and diff[2:5].any()


def test_chunks_do_not_change_the_nlls():
    model = ngram.train(ngram.Config(order=5), DATA, seed=0)
    np.testing.assert_array_equal(
        ngram.token_nlls(model, DATA, chunk=7), ngram.token_nlls(model, DATA)
    )


def test_one_file_checkpoint_names_arch_order_and_discounts(tmp_path):
    model = ngram.train(ngram.Config(order=4), DATA, seed=0)
    path = ngram.save(model, tmp_path / "kn.safetensors")
    assert path.is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["kn.safetensors"]
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        names = set(f.keys())
    assert meta["tl_arch"] == "ngram"
    assert int(meta["order"]) == 4
    assert json.loads(meta["discounts"]) == model.discounts
    assert names == {f"{k}.{n}" for n in range(1, 5) for k in ("keys", "counts")}
    loaded = ngram.load(path)
    assert loaded.discounts == model.discounts
    np.testing.assert_array_equal(ngram.token_nlls(loaded, DATA), ngram.token_nlls(model, DATA))


def test_load_refuses_a_file_of_another_arch(tmp_path):
    model = ngram.train(ngram.Config(order=2), DATA, seed=0)
    path = save_single(tmp_path / "x.safetensors", "bigram", model.state_dict(), {})
    with pytest.raises(CheckpointError, match="expected tl_arch 'ngram'"):
        ngram.load(path)


def test_bad_order_is_refused():
    for bad in (0, 8, 2.5, True):
        with pytest.raises(ValueError, match="order"):
            ngram.Config(order=bad)
