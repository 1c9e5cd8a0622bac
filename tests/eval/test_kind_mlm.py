"""The mlm kind: masked-byte accuracy of a BERT on the val rows, masks from the entry's rng,
the interval clustered by row (each row a unit), most-frequent-byte baseline on the same
positions."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from zoo_helpers import ROWS_BERT, ROWS_TRAIN, ROWS_VAL, score_rows  # same folder: on sys.path

from tinyllm import stats
from tinyllm.data import Row, write_rows
from tinyllm.eval import zoo
from tinyllm.eval.kinds import mlm
from tinyllm.models import bert
from tinyllm.stats import wilson_interval

CFG, VAL, TRAIN = ROWS_BERT, ROWS_VAL, ROWS_TRAIN


def _score(d, data="rows.jsonl", seed=0):
    return score_rows(d, "mlm", data, seed)


def test_row_equals_a_hand_recomputation_from_the_entry_rng(bert_rows_dir):
    zoo_dir = bert_rows_dir
    row, items = _score(zoo_dir, seed=3)
    assert row["status"] == "ok", row
    assert row["kind"] == "mlm" and row["metric"] == "acc" and row["interval"] == "cluster_ratio"
    model = bert.load(zoo_dir / "bert")
    rows = bert.encode_rows([r.sentence for r in VAL], CFG.max_len)
    inputs, sel = bert.mask_rows(rows, zoo.entry_rng(3, "bert-rows"), 0.15)
    with torch.inference_mode():
        pred = model(torch.from_numpy(inputs)).argmax(-1).numpy()
    want = (pred[sel] == rows[sel]).astype(float)
    np.testing.assert_array_equal(items, want)
    # the unit of a position is its row: the cluster-robust ratio estimator over the rows that
    # have a masked position, the item-level Wilson interval beside it
    of_row = np.nonzero(sel)[0]
    ci = stats.cluster_ratio(want, of_row)
    assert row["n"] == want.size and (row["lo"], row["hi"]) == pytest.approx((ci.lo, ci.hi))
    assert row["n_units"] == np.unique(of_row).size == ci.n_units
    w = wilson_interval(int(want.sum()), want.size)
    assert row["iid_interval"] == {"lo": w.lo, "hi": w.hi, "method": "wilson"}
    targets = rows[sel]
    top = int(np.bincount(targets).argmax())
    assert row["details"]["baseline_most_frequent_byte"] == {
        "byte": top,
        "acc": pytest.approx(float(np.mean(targets == top))),
    }
    assert row["details"]["n_rows"] == len(VAL)
    assert row["value"] > row["details"]["baseline_most_frequent_byte"]["acc"]


def test_a_val_row_added_at_the_end_leaves_the_earlier_rows_masks(bert_rows_dir):
    zoo_dir = bert_rows_dir
    a, ia = _score(zoo_dir, seed=4)
    write_rows(zoo_dir / "more.jsonl", [*TRAIN, *VAL, Row("val", "the cat sat on the log.", "-")])
    c, ic = _score(zoo_dir, "more.jsonl", seed=4)
    assert c["n"] >= a["n"]
    np.testing.assert_array_equal(ic[: ia.size], ia)  # earlier rows keep their masks


def test_most_frequent_baseline_hand_values():
    assert mlm.most_frequent_baseline(np.array([101, 32, 101])) == {
        "byte": 101,
        "acc": pytest.approx(2 / 3),
    }
    assert mlm.most_frequent_baseline(np.array([98, 97]))["byte"] == 97  # ties: smallest


# ---- the baseline's edges, the details by hand, the refusals -------------------------------------


def test_most_frequent_baseline_of_one_and_of_no_targets():
    assert mlm.most_frequent_baseline(np.array([65])) == {"byte": 65, "acc": 1.0}
    assert mlm.most_frequent_baseline(np.array([], dtype=np.int64)) == {"byte": 0, "acc": 0.0}


def _rows_entry(tmp_path, rows, family: str = "bert"):
    """An entry of ``family`` on a rows file of ``rows`` (its scorer is called directly)."""
    from tinyllm.report import Entry

    path = write_rows(tmp_path / "r.jsonl", rows)
    e = Entry.model_validate({"name": "m", "family": family, "checkpoint": "x", "data": str(path)})
    return e, path


STUB = SimpleNamespace(cfg=SimpleNamespace(max_len=24))  # a model the stand-ins never run


def _masked_answer(right, seen: dict | None = None):
    """A stand-in for bert.mlm_accuracy that masks as it does (the same draws from ``rng``) and
    calls position k right when ``right(k)``: the kind finds each position's row."""

    def answer(model, texts, rng, *, p=0.5):
        if seen is not None:
            seen.update(texts=list(texts), p=p)
        rows = bert.encode_rows(list(texts), model.cfg.max_len)
        _, sel = bert.mask_rows(rows, rng, p)
        targets = rows[sel]
        return np.array([float(right(k)) for k in range(targets.size)]), targets

    return answer


def test_score_asks_for_p_015_and_reports_the_details_by_hand(tmp_path, monkeypatch):
    """A stand-in for bert.mlm_accuracy: what the kind does with its answer, whatever the
    model (and whatever bert's own default p)."""
    seen = {}
    monkeypatch.setattr(bert, "mlm_accuracy", _masked_answer(lambda k: k % 3 != 1, seen))
    sentences = ["abcdefghijklmnopqrstuvw", "the cat sat on the mat", "on the log"] * 4
    rows = [Row("train", "zz", "-")] + [Row("val", x, "-") for x in sentences]
    e, path = _rows_entry(tmp_path, rows)
    s = mlm.score(e, STUB, path, np.random.default_rng(0), mlm.Options())
    assert seen == {"texts": sentences, "p": 0.15}
    enc = bert.encode_rows(sentences, 24)
    _, sel = bert.mask_rows(enc, np.random.default_rng(0), 0.15)
    targets = enc[sel]
    right = np.array([float(k % 3 != 1) for k in range(targets.size)])
    top = int(np.bincount(targets).argmax())
    assert s.details == {
        "split": "val",
        "n_rows": 12,
        "mask_prob": 0.15,
        "baseline_most_frequent_byte": {"byte": top, "acc": pytest.approx(np.mean(targets == top))},
    }
    of_row = np.nonzero(sel)[0]
    np.testing.assert_array_equal(s.units, of_row)
    ci = stats.cluster_ratio(right, of_row)
    assert (s.interval.value, s.n, s.method) == (
        pytest.approx(right.mean()),
        right.size,
        "cluster_ratio",
    )
    assert (s.interval.lo, s.interval.hi) == (ci.lo, ci.hi)
    w = wilson_interval(int(right.sum()), right.size)
    assert (s.iid_interval.lo, s.iid_interval.hi, s.iid_interval.method) == (w.lo, w.hi, "wilson")
    # the masked bytes of one row only: one unit, an error naming the file and the rows
    e1, path1 = _rows_entry(tmp_path, [Row("val", "abcdefghijklmnopqrstuvw", "-")])
    with pytest.raises(ValueError) as ei:
        mlm.score(e1, STUB, path1, np.random.default_rng(0), mlm.Options())
    assert str(ei.value) == (
        f"{path1}: val rows: expected masked bytes in at least 2 rows (the rows are the units "
        "of the interval), got them in 1 row of 1"
    )
    # none: an error naming the file
    monkeypatch.setattr(
        bert, "mlm_accuracy", lambda m, t, r, p: (np.zeros(0), np.zeros(0, dtype=np.int64))
    )
    with pytest.raises(ValueError) as ei:
        mlm.score(e, STUB, path, np.random.default_rng(0), mlm.Options())
    assert str(ei.value) == f"{path}: expected at least one masked byte in the val rows, got none"


def test_positions_that_are_not_the_masks_of_the_entry_rng_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(bert, "mlm_accuracy", lambda m, t, r, p: (np.ones(2), np.array([97, 98])))
    e, path = _rows_entry(tmp_path, [Row("val", "the cat sat on the mat", "-")] * 3)
    with pytest.raises(ValueError, match="mlm units: expected the masks of the entry's rng"):
        mlm.score(e, STUB, path, np.random.default_rng(0), mlm.Options())
