"""What a row declares about its per-item scores (tinyllm.metrics): the scale from the mean of its
items to its value (``item_scale`` of its metric, n and details) and the tokenizer its per-token
items are in (``tokenizer`` of its details), written out by hand for every shape of row document,
well-formed or not."""

from __future__ import annotations

import math

import pytest

from tinyllm.metrics import item_scale, tokenizer

LN2 = math.log(2.0)


def row_item_scale(row: dict) -> float:
    return item_scale(row.get("metric"), row.get("n"), row.get("details"))


def row_tokenizer(row: dict) -> str:
    return tokenizer(row.get("details"))


def bpb(n: int = 4, **details) -> dict:
    return {"metric": "bpb", "n": n, "details": details}


def test_a_bpe_row_scales_by_its_tokens_over_its_bytes():
    assert row_item_scale(bpb(4, n_bytes=10)) == 4 / (10 * LN2)  # 0.5771 bits per nat·token
    assert row_item_scale(bpb(4, n_bytes=1)) == 4 / LN2  # one byte: the smallest valid count
    assert row_item_scale(bpb(3, n_bytes=2)) == 3 / (2 * LN2)


@pytest.mark.parametrize(
    "row",
    [
        bpb(4, n_bytes=4),  # byte-level: n_bytes = n
        bpb(4, n_bytes=0),  # no bytes counted: not a usable count
        bpb(4, n_bytes=True),  # a boolean is not a count
        bpb(4, n_bytes=10.0),  # a float is not a count
        bpb(4),  # no n_bytes
        {"metric": "bpb", "n": 4, "details": [("n_bytes", 10)]},  # details not a mapping
        {"metric": "bpb", "n": 4},  # no details
        {"metric": "bpb", "n": 4.0, "details": {"n_bytes": 10}},  # n not an int
        {"metric": "bpb", "details": {"n_bytes": 10}},  # no n
    ],
)
def test_a_bpb_row_without_a_usable_byte_count_keeps_one_over_ln2(row):
    assert row_item_scale(row) == 1.0 / LN2


@pytest.mark.parametrize("metric", ["acc", "acc_norm", "exact_match", "spearman"])
def test_other_metrics_scale_by_one_whatever_their_details_say(metric):
    assert row_item_scale({"metric": metric, "n": 4, "details": {"n_bytes": 10}}) == 1.0


@pytest.mark.parametrize("metric", ["perplexity", None, ["bpb"], {"bpb": 1}])
def test_an_unknown_or_malformed_metric_scales_by_one(metric):
    assert row_item_scale({"metric": metric, "n": 4, "details": {"n_bytes": 10}}) == 1.0


def test_the_tokenizer_is_the_rows_details_tokenizer():
    assert row_tokenizer({"details": {"tokenizer": "hf-sha256:0123456789abcdef"}}) == (
        "hf-sha256:0123456789abcdef"
    )
    assert row_tokenizer({"details": {"tokenizer": "byte"}}) == "byte"


@pytest.mark.parametrize(
    "row",
    [
        {},
        {"details": None},
        {"details": [("tokenizer", "hf-sha256:0123456789abcdef")]},
        {"details": {"n_bytes": 10}},
        {"details": {"tokenizer": 7}},
        {"details": {"tokenizer": None}},
    ],
)
def test_a_row_without_a_named_tokenizer_is_byte_level(row):
    assert row_tokenizer(row) == "byte"
