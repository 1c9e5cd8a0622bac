"""What the row kinds (mlm: masked bytes of a BERT, rtd: replaced bytes of an ELECTRA) share:
the val rows of a rows file only, every draw from the entry's rng, each row a unit of the
interval (tinyllm.eval.kinds.common.val_sentences, check_row_units)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from zoo_helpers import ROWS_VAL, score_rows  # same folder: on sys.path

from tinyllm.data import Row, write_rows
from tinyllm.eval.kinds import KINDS, mlm, rtd
from tinyllm.eval.kinds.common import check_row_units, val_sentences
from tinyllm.report import Entry

ROW_KINDS = {"mlm": ("bert_rows_dir", mlm), "rtd": ("electra_rows_dir", rtd)}


def _without_seconds(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "seconds"}


@pytest.mark.parametrize("kind", list(ROW_KINDS))
def test_same_seed_same_row_other_seed_other_draws(kind, request):
    d = request.getfixturevalue(ROW_KINDS[kind][0])
    a, ia = score_rows(d, kind, seed=1)
    b, ib = score_rows(d, kind, seed=1)
    c, ic = score_rows(d, kind, seed=2)
    assert a["status"] == "ok" and _without_seconds(a) == _without_seconds(b)
    np.testing.assert_array_equal(ia, ib)
    assert (c["n"], c["details"], ic.tolist()) != (a["n"], a["details"], ia.tolist())


@pytest.mark.parametrize("kind", list(ROW_KINDS))
def test_only_val_rows_are_scored(kind, request):
    d = request.getfixturevalue(ROW_KINDS[kind][0])
    write_rows(d / "other.jsonl", [Row("train", "qqqqqqqqqqqqqqqq", "-"), *ROWS_VAL])
    a, ia = score_rows(d, kind, seed=4)
    b, ib = score_rows(d, kind, "other.jsonl", seed=4)
    assert (a["value"], a["n"], a["n_units"]) == (b["value"], b["n"], b["n_units"])
    assert a["interval"] == KINDS[kind].interval == "cluster_ratio"
    np.testing.assert_array_equal(ia, ib)


@pytest.mark.parametrize("kind", list(ROW_KINDS))
def test_a_file_without_val_rows_is_refused_naming_it(kind, tmp_path):
    path = write_rows(tmp_path / "r.jsonl", [Row("train", "zz", "-")])
    e = Entry.model_validate({"name": "m", "family": "bert", "checkpoint": "x", "data": "r"})
    with pytest.raises(ValueError) as ei:
        module = ROW_KINDS[kind][1]
        module.score(e, None, path, np.random.default_rng(0), module.Options())
    assert str(ei.value) == f"{path}: expected rows of split 'val', got only splits ['train']"


def test_val_sentences_are_the_val_rows_in_file_order(tmp_path):
    rows = [Row("val", "b", "-"), Row("train", "t", "-"), Row("val", "a", "-")]
    assert val_sentences(write_rows(tmp_path / "r.jsonl", rows)) == ["b", "a"]


def test_scored_items_in_one_row_are_refused_naming_the_file_and_the_rows():
    check_row_units(np.array([0, 1, 1]), 2, "bytes", Path("r.jsonl"))
    with pytest.raises(ValueError) as ei:
        check_row_units(np.array([2, 2, 2]), 3, "masked bytes", Path("r.jsonl"))
    assert str(ei.value) == (
        "r.jsonl: val rows: expected masked bytes in at least 2 rows (the rows are the units "
        "of the interval), got them in 1 row of 3"
    )
