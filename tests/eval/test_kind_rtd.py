"""The rtd kind: replaced-token detection accuracy of an ELECTRA on the val rows, masks and
generator samples from the entry's rng, the interval clustered by row, "always original"
baseline on the same tokens with the paired test over rows."""

from __future__ import annotations

import numpy as np
import pytest
from test_kind_mlm import STUB, _rows_entry  # same folder: pytest puts it on sys.path
from zoo_helpers import ROWS_VAL, score_rows

from tinyllm import stats
from tinyllm.data import Row
from tinyllm.eval import zoo
from tinyllm.models import electra
from tinyllm.stats import wilson_interval

VAL = ROWS_VAL


def test_row_counts_every_val_byte_and_reports_the_baseline(electra_rows_dir):
    zoo_dir = electra_rows_dir
    row, items = score_rows(zoo_dir, "rtd", seed=3)
    assert row["status"] == "ok", row
    assert row["kind"] == "rtd" and row["metric"] == "acc" and row["interval"] == "cluster_ratio"
    n_bytes = sum(len(r.sentence.encode()) for r in VAL)
    assert row["n"] == items.size == n_bytes  # every byte of every val row, nothing else
    model = electra.load(zoo_dir / "el")
    r = electra.rtd_accuracy(model, [x.sentence for x in VAL], zoo.entry_rng(3, "electra-rows"))
    np.testing.assert_array_equal(items, r["correct"])
    # each row is a unit: the cluster-robust ratio over the 18 rows, Wilson over bytes beside it
    of_row = np.repeat(np.arange(len(VAL)), [len(x.sentence) for x in VAL])
    ci = stats.cluster_ratio(items, of_row)
    assert (row["lo"], row["hi"]) == pytest.approx((ci.lo, ci.hi)) and row["n_units"] == 18
    w = wilson_interval(int(items.sum()), items.size)
    assert row["iid_interval"] == {"lo": w.lo, "hi": w.hi, "method": "wilson"}
    d = row["details"]
    assert d["n_replaced"] == int(r["replaced"].sum()) and d["n_masked"] == int(r["masked"].sum())
    assert d["baseline_always_original"] == pytest.approx(1 - r["replaced"].mean())
    assert d["generator_acc"] == pytest.approx(r["gen_correct"].mean())
    # the paired test against "always original" over the rows, its signs from the entry rng
    rng = zoo.entry_rng(3, "electra-rows")
    r = electra.rtd_accuracy(model, [x.sentence for x in VAL], rng)
    pd = stats.paired_difference(items, 1.0 - r["replaced"], of_row, rng, kind="ratio")
    assert d["p_vs_always_original"] == pd.p and 0 < pd.p <= 1


# ---- the details by hand from a known detection; a file without val rows -------------------------


def _detection(correct, replaced, masked, gen_correct):
    """A stand-in for electra.rtd_accuracy's answer (what the kind does with it, any model)."""
    return lambda model, texts, rng: {
        "correct": np.array(correct, dtype=np.float64),
        "replaced": np.array(replaced, dtype=bool),
        "masked": np.array(masked, dtype=bool),
        "gen_correct": np.array(gen_correct, dtype=np.float64),
    }


def test_details_by_hand_from_a_known_detection(tmp_path, monkeypatch):
    from tinyllm.eval.kinds import rtd

    e, path = _rows_entry(tmp_path, [Row("train", "zz", "-"), Row("val", "ab", "-")] * 2, "electra")
    rng = np.random.default_rng(0)
    monkeypatch.setattr(
        electra, "rtd_accuracy", _detection([1, 1, 0, 1], [0, 1, 1, 0], [0, 1, 1, 1], [1, 0, 0])
    )
    s = rtd.score(e, STUB, path, rng, rtd.Options())
    assert (s.interval.value, s.n, s.metric) == (0.75, 4, "acc")
    np.testing.assert_array_equal(s.units, [0, 0, 1, 1])  # two val rows of two bytes
    assert s.details == {
        "split": "val",
        "n_rows": 2,
        "n_masked": 3,
        "n_replaced": 2,
        "baseline_always_original": 0.5,
        # rows' differences of sums D = [1 - 0, 0 - 0] = [1, 0]: 4 sign patterns, all reach 1
        "p_vs_always_original": 1.0,
        "generator_acc": pytest.approx(1 / 3),
    }
    # every token replaced and caught: items 1111 vs 0000, D = [2, 2]: exact p = 2/4 over the
    # two rows (the test over tokens said 2/16: four tokens of two rows are not four draws)
    monkeypatch.setattr(electra, "rtd_accuracy", _detection([1] * 4, [1] * 4, [1] * 4, [0] * 4))
    s = rtd.score(e, STUB, path, rng, rtd.Options())
    assert s.details["p_vs_always_original"] == 0.5
    assert s.details["baseline_always_original"] == 0.0
    # 40 tokens in 20 rows of 2 (2**20 patterns > 10,000: Monte Carlo signs from the entry's
    # rng, so the row is reproducible); only rows 18 and 19 differ, by D = 1 and 2, so the
    # exact p is 2/4 (the test over tokens, three tokens apart, said about 0.25)
    e40, path40 = _rows_entry(tmp_path, [Row("val", "ab", "-")] * 20, "electra")
    correct, replaced = [1.0] * 40, [0] * 34 + [1] * 6  # right on 3 of the 6 replaced tokens
    correct[34:37] = [0.0] * 3
    monkeypatch.setattr(electra, "rtd_accuracy", _detection(correct, replaced, [1] * 40, [0] * 40))
    s = rtd.score(e40, STUB, path40, np.random.default_rng(7), rtd.Options())
    want = stats.paired_difference(
        np.array(correct),
        1.0 - np.array(replaced, dtype=float),
        np.repeat(np.arange(20), 2),
        np.random.default_rng(7),
        kind="ratio",
    ).p
    assert s.details["p_vs_always_original"] == want and abs(want - 0.5) < 0.02
    # one counted token, nothing masked: one row only, an error naming the file and the rows
    e1, path1 = _rows_entry(tmp_path, [Row("val", "a", "-")], "electra")
    monkeypatch.setattr(electra, "rtd_accuracy", _detection([1], [0], [0], []))
    with pytest.raises(ValueError) as ei:
        rtd.score(e1, STUB, path1, rng, rtd.Options())
    assert str(ei.value) == (
        f"{path1}: val rows: expected bytes in at least 2 rows (the rows are the units of the "
        "interval), got them in 1 row of 1"
    )
    # no counted token: an error naming the file
    monkeypatch.setattr(electra, "rtd_accuracy", _detection([], [], [], []))
    with pytest.raises(ValueError) as ei:
        rtd.score(e, STUB, path, rng, rtd.Options())
    assert str(ei.value) == f"{path}: expected at least one byte in the val rows, got none"
