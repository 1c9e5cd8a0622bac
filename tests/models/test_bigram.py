"""Bigram: the zoo's unit (uniform = 8 bits per byte), row = previous byte, add-k counts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tinyllm import stats
from tinyllm.models import bigram
from tinyllm.tokens import ByteTokenizer

A, B = ord("a"), ord("b")


def _ids(text: str) -> np.ndarray:
    return ByteTokenizer().encode(text)


def test_uniform_table_is_8_bits_per_byte_with_zero_width_interval():
    model = bigram.Model(bigram.Config())  # all-zero table
    ids = _ids("Hundreds of people have been forced to vacate their homes.")
    nll = bigram.token_nlls(model, ids)
    np.testing.assert_allclose(nll, math.log(256), rtol=0, atol=1e-12)
    acc = stats.NLLAccumulator()
    acc.add(nll)
    assert acc.bpb(nll.size) == pytest.approx(8.0, abs=1e-12)  # one token = one byte
    ci = acc.mean_ci()
    assert ci.hi - ci.lo == pytest.approx(0.0, abs=1e-12)
    assert ci.value == pytest.approx(math.log(256), abs=1e-12)


def _asymmetric_model() -> bigram.Model:
    """Row 'a' (previous byte a) gives 'b' the logit ln 3, all else 0: p(b|a) = 3/258,
    p(other|a) = 1/258; every other row is uniform (1/256). Transposed, table[b, a] is 0."""
    model = bigram.Model(bigram.Config())
    with torch.no_grad():
        model.logits[A, B] = math.log(3.0)
    return model


def test_table_is_read_row_previous_column_next():
    model = _asymmetric_model()
    # "aab": token 1 'a' after 'a' -> 1/258; token 2 'b' after 'a' -> 3/258
    expected = np.array([math.log(258.0), math.log(258.0 / 3.0)])
    got = bigram.token_nlls(model, _ids("aab"))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)  # the table is float32
    # a transposed read would give token 2 = table[b, a] -> uniform row b -> ln 256: different
    transposed = np.array([math.log(258.0), math.log(256.0)])
    assert abs(got.sum() - transposed.sum()) > 0.5
    # "ba": 'a' after 'b' is read from the uniform row b (transposed: row a, column b = 3/258)
    np.testing.assert_allclose(bigram.token_nlls(model, _ids("ba")), [math.log(256.0)], atol=1e-6)
    # forward: logits at position t are row x_t
    logits = model(torch.tensor([[A, B]]))
    torch.testing.assert_close(logits[0, 0], model.logits[A])
    torch.testing.assert_close(logits[0, 1], model.logits[B])


def test_add_k_counts_by_hand():  # the table is float32: compare to 1e-6
    # "abab": pairs ab, ba, ab -> c(a,b) = 2, c(a) = 2; c(b,a) = 1, c(b) = 1
    model = bigram.train(bigram.Config(k=1.0), _ids("abab"), seed=0)
    p = torch.softmax(model.logits.double(), dim=1)
    assert p[A, B].item() == pytest.approx(3 / 258, abs=1e-6)
    assert p[A, A].item() == pytest.approx(1 / 258, abs=1e-6)
    assert p[B, A].item() == pytest.approx(2 / 257, abs=1e-6)
    assert p[ord("z"), ord("q")].item() == pytest.approx(1 / 256, abs=1e-6)  # unseen row
    np.testing.assert_allclose(
        bigram.token_nlls(model, _ids("aba")), [math.log(258 / 3), math.log(257 / 2)], atol=1e-6
    )


def test_chunks_do_not_change_the_nlls():
    model = bigram.train(bigram.Config(), _ids("the cat sat on the mat " * 5), seed=0)
    ids = _ids("a cat on the mat sat there")
    np.testing.assert_array_equal(
        bigram.token_nlls(model, ids, chunk=3), bigram.token_nlls(model, ids)
    )


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="k"):
        bigram.Config(k=0)
    model = bigram.Model(bigram.Config())
    with pytest.raises(ValueError, match="0..255"):
        bigram.token_nlls(model, np.array([1, 256]))
    with pytest.raises(ValueError, match="1-d"):
        bigram.token_nlls(model, np.zeros((2, 2), np.int64))
