"""LM rows in a tokenizer whose tokens are not single bytes: the value is bits per byte over the
bytes the scored tokens cover, the items are nats per token, and two releases pair token by token
only in the same tokenizer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.store_helpers import make_row
from tinyllm.compare import compare_row
from tinyllm.compare_checks import parse_row, row_items_problem
from tinyllm.metrics import item_scale

LN2 = math.log(2.0)


def bpe_row(items: np.ndarray, n_bytes: int, tokenizer: str = "hf-sha256:0123456789abcdef"):
    value = float(items.sum()) / (n_bytes * LN2)
    return make_row(
        "llama",
        value,
        family="hf",
        n=int(items.size),
        items="items/llama.npy",
        details={"n_bytes": n_bytes, "tokenizer": tokenizer},
    )


def test_a_bpe_row_agrees_with_its_items_over_its_bytes():
    items = np.array([2.0, 3.0, 1.0, 2.0])  # 8 nats over 4 tokens covering 10 bytes
    row = bpe_row(items, n_bytes=10)
    assert row["value"] == pytest.approx(8.0 / (10 * LN2))
    typed = parse_row(row)
    assert item_scale(typed.metric, typed.n, typed.details) == pytest.approx(4 / (10 * LN2))
    assert row_items_problem(typed, items) is None
    wrong = typed.model_copy(update={"value": float(items.mean()) / LN2})  # 1 byte per token
    msg = row_items_problem(wrong, items)
    assert msg is not None and "n_bytes 10" in msg


def test_a_byte_row_keeps_the_plain_scale():
    items = np.array([1.0, 2.0, 3.0])
    row = parse_row(make_row("gpt", float(items.mean()) / LN2, n=3, details={"n_bytes": 3}))
    assert item_scale(row.metric, row.n, row.details) == 1.0 / LN2
    assert row_items_problem(row, items) is None


def test_two_bpe_releases_pair_token_by_token_in_bits_per_byte():
    rng = np.random.default_rng(0)
    prev_items = rng.uniform(1.0, 3.0, 200)
    cur_items = prev_items - 0.3 + rng.normal(0.0, 0.05, 200)  # every token 0.3 nats better
    prev, cur = bpe_row(prev_items, 500), bpe_row(cur_items, 500)
    out = compare_row(prev, cur, lambda _: prev_items, lambda _: cur_items, n_perm=2000)
    assert out.verdict == "improved"
    d = cur_items - prev_items
    assert out.delta == pytest.approx(d.sum() / (500 * LN2))
    half = (out.hi - out.lo) / 2
    t = 1.9719565442517533  # scipy.stats.t.ppf(0.975, 199)
    assert half == pytest.approx(t * d.std(ddof=1) / math.sqrt(200) * 200 / (500 * LN2))


def test_rows_in_different_tokenizers_are_not_comparable():
    items = np.array([2.0, 3.0, 1.0, 2.0])
    prev = bpe_row(items, 10, tokenizer="hf-sha256:aaaaaaaaaaaaaaaa")
    cur = bpe_row(items, 10, tokenizer="byte")
    out = compare_row(prev, cur, lambda _: items, lambda _: items)
    assert out.verdict == "not comparable"
    assert "different tokenizers (hf-sha256:aaaaaaaaaaaaaaaa vs byte)" in out.reason
