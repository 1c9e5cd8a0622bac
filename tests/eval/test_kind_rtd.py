"""The rtd kind: replaced-token detection accuracy of an ELECTRA on the val rows, masks and
generator samples from the entry's rng, "always original" baseline on the same tokens."""

from __future__ import annotations

import numpy as np
import pytest
from test_kind_mlm import _rows_entry  # same folder: pytest puts it on sys.path

from tinyllm.data import Row, write_rows
from tinyllm.eval import zoo
from tinyllm.models import electra
from tinyllm.stats import paired_permutation_test, wilson_interval

CFG = electra.Config(
    max_len=24, n_layer=1, n_head=2, n_embd=32, gen_n_layer=1, gen_n_head=2, gen_n_embd=16
)
TEXT = ("the cat sat on the mat. the dog sat on the log. " * 12).encode()
VAL = [Row("val", s, "-") for s in ("the cat sat on the mat.", "the dog sat", "on the log.")] * 6
TRAIN = [Row("train", "zzzzzzzzzzzzzzzzzzzz", "-")] * 5


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("rtd")
    ids = np.frombuffer(TEXT, dtype=np.uint8)
    electra.save(electra.train(CFG, ids, seed=0, steps=40, batch_size=16, lr=3e-3), d / "el")
    write_rows(d / "rows.jsonl", TRAIN + VAL)
    return d


def _score(d, data="rows.jsonl", seed=0, name="electra-rows"):
    e = {"name": name, "family": "electra", "checkpoint": "el", "data": data}
    return zoo.score_entry_items(e, seed=seed, base_dir=d)


def test_row_counts_every_val_byte_and_reports_the_baseline(zoo_dir):
    row, items = _score(zoo_dir, seed=3)
    assert row["status"] == "ok", row
    assert row["kind"] == "rtd" and row["metric"] == "acc" and row["interval"] == "wilson"
    n_bytes = sum(len(r.sentence.encode()) for r in VAL)
    assert row["n"] == items.size == n_bytes  # every byte of every val row, nothing else
    model = electra.load(zoo_dir / "el")
    r = electra.rtd_accuracy(model, [x.sentence for x in VAL], zoo.entry_rng(3, "electra-rows"))
    np.testing.assert_array_equal(items, r["correct"])
    ci = wilson_interval(int(items.sum()), items.size)
    assert (row["lo"], row["hi"]) == pytest.approx((ci.lo, ci.hi))
    d = row["details"]
    assert d["n_replaced"] == int(r["replaced"].sum()) and d["n_masked"] == int(r["masked"].sum())
    assert d["baseline_always_original"] == pytest.approx(1 - r["replaced"].mean())
    assert d["generator_acc"] == pytest.approx(r["gen_correct"].mean())
    # the paired test against "always original", its signs drawn from the same entry rng
    rng = zoo.entry_rng(3, "electra-rows")
    r = electra.rtd_accuracy(model, [x.sentence for x in VAL], rng)
    p = paired_permutation_test(items, 1.0 - r["replaced"], rng=rng)
    assert d["p_vs_always_original"] == p and 0 < p <= 1


def test_same_seed_same_row_other_seed_other_masks(zoo_dir):
    a, ia = _score(zoo_dir, seed=1)
    b, ib = _score(zoo_dir, seed=1)
    c, _ = _score(zoo_dir, seed=2)
    assert {k: v for k, v in a.items() if k != "seconds"} == {
        k: v for k, v in b.items() if k != "seconds"
    }
    np.testing.assert_array_equal(ia, ib)
    assert c["details"]["n_masked"] != a["details"]["n_masked"] or c["value"] != a["value"]


def test_only_val_rows_are_scored(zoo_dir):
    write_rows(zoo_dir / "other.jsonl", [Row("train", "qqqqqqqq", "-"), *VAL])
    a, ia = _score(zoo_dir, seed=4)
    b, ib = _score(zoo_dir, "other.jsonl", seed=4)
    assert a["n"] == b["n"] and a["value"] == b["value"]
    np.testing.assert_array_equal(ia, ib)


# ---- oracles written for mutants that survived `make mutate MODULE=tinyllm/eval/kinds/*.py` ---


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
    s = rtd.score(e, None, path, rng)
    assert (s.interval.value, s.n, s.metric) == (0.75, 4, "acc")
    assert s.details == {
        "split": "val",
        "n_rows": 2,
        "n_masked": 3,
        "n_replaced": 2,
        "baseline_always_original": 0.5,
        "p_vs_always_original": 1.0,  # items 1101 vs 1001: one token differs, 16/16 patterns
        "generator_acc": pytest.approx(1 / 3),
    }
    # every token replaced and caught: items 1111 vs 0000, exact p = 2/16 (SPEC's example)
    monkeypatch.setattr(electra, "rtd_accuracy", _detection([1] * 4, [1] * 4, [1] * 4, [0] * 4))
    s = rtd.score(e, None, path, rng)
    assert s.details["p_vs_always_original"] == 0.125
    assert s.details["baseline_always_original"] == 0.0
    # 40 tokens (Monte Carlo): the signs come from the entry's rng, so the row is reproducible
    correct, replaced = [1.0] * 40, [0] * 34 + [1] * 6  # right on 3 of the 6 replaced tokens
    correct[34:37] = [0.0] * 3
    monkeypatch.setattr(electra, "rtd_accuracy", _detection(correct, replaced, [1] * 40, [0] * 40))
    s = rtd.score(e, None, path, np.random.default_rng(7))
    want = paired_permutation_test(
        np.array(correct), 1.0 - np.array(replaced, dtype=float), rng=np.random.default_rng(7)
    )
    assert s.details["p_vs_always_original"] == want and 0.2 < want < 0.3  # exact binomial: 0.25
    # one counted token, nothing masked: a row, with no generator accuracy (not NaN)
    monkeypatch.setattr(electra, "rtd_accuracy", _detection([1], [0], [0], []))
    s = rtd.score(e, None, path, rng)
    assert s.n == 1 and s.details["generator_acc"] is None
    assert s.details["baseline_always_original"] == 1.0
    # no counted token: an error naming the file
    monkeypatch.setattr(electra, "rtd_accuracy", _detection([], [], [], []))
    with pytest.raises(ValueError) as ei:
        rtd.score(e, None, path, rng)
    assert str(ei.value) == f"{path}: expected at least one byte in the val rows, got none"


def test_no_val_rows_error_names_the_file(tmp_path):
    from tinyllm.eval.kinds import rtd

    e, path = _rows_entry(tmp_path, [Row("train", "zz", "-")], "electra")
    with pytest.raises(ValueError) as ei:
        rtd.score(e, None, path, np.random.default_rng(0))
    assert str(ei.value) == f"{path}: expected rows of split 'val', got only splits ['train']"
