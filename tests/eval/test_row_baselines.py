"""Every ok row's baseline and beats_baseline, by hand on tiny inputs, and the report written
with the baseline's items beside the row's; a report without the fields still loads."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_kind_embeddings import entry, hand_case, write_questions  # noqa: F401 (a fixture)
from test_kind_mlm import STUB, _masked_answer, _rows_entry  # same folder: on sys.path
from test_kind_rtd import _detection

from tinyllm import baselines, stats
from tinyllm.data import Row
from tinyllm.eval import report_files, zoo
from tinyllm.eval.kinds import mlm, rtd
from tinyllm.models import bert, electra
from tinyllm.models import word2vec as w2v
from tinyllm.report import BeatsBaseline, Report, validate_report
from tinyllm.stats import paired_permutation_test, wilson_interval

ROWS = [Row("train", "zz", "-"), Row("val", "ab", "-")] * 2


def test_mlm_baseline_is_the_most_frequent_byte_scored_per_position(tmp_path, monkeypatch):
    monkeypatch.setattr(bert, "mlm_accuracy", _masked_answer(lambda k: k % 2 == 0))
    sentences = ["eeeeeeeeeeeeeeeeeeeee", "a b c d e f g h i j"] * 3
    e, path = _rows_entry(tmp_path, [Row("val", x, "-") for x in sentences])
    s = mlm.score(e, STUB, path, np.random.default_rng(0), mlm.Options())
    enc = bert.encode_rows(sentences, 24)
    _, sel = bert.mask_rows(enc, np.random.default_rng(0), 0.15)
    targets = enc[sel]
    b = s.baseline
    assert b.name == "most frequent byte" and b.details == {"byte": ord("e")}
    want = (targets == ord("e")).astype(float)
    np.testing.assert_array_equal(b.items, want)
    w = wilson_interval(int(want.sum()), want.size)
    assert (b.value, b.lo, b.hi) == (pytest.approx(want.mean()), w.lo, w.hi)


def test_rtd_baseline_is_always_original_per_token(tmp_path, monkeypatch):
    monkeypatch.setattr(
        electra, "rtd_accuracy", _detection([1, 1, 0, 1], [0, 1, 1, 0], [0, 1, 1, 1], [1, 0, 0])
    )
    e, path = _rows_entry(tmp_path, ROWS, "electra")
    s = rtd.score(e, STUB, path, np.random.default_rng(0), rtd.Options())
    assert s.baseline.name == "always original" and s.baseline.value == 0.5
    np.testing.assert_array_equal(s.baseline.items, [1.0, 0.0, 0.0, 1.0])  # 1 - replaced


def test_rtd_row_stores_the_baseline_items_and_the_paired_verdict(tmp_path, monkeypatch):
    # 40 tokens, 20 replaced; the model catches every replacement and calls 2 originals wrong
    replaced = [0] * 20 + [1] * 20
    correct = [1.0] * 40
    correct[0] = correct[1] = 0.0
    monkeypatch.setattr(electra, "rtd_accuracy", _detection(correct, replaced, [1] * 40, [0] * 40))
    monkeypatch.setattr(zoo, "load_model", lambda p, **kw: STUB)
    monkeypatch.setattr(zoo, "read_config", lambda p: {"tl_arch": "electra"})
    _, path = _rows_entry(tmp_path, [Row("val", "ab", "-")] * 20, "electra")  # 40 bytes
    (tmp_path / "el").mkdir()
    e = {"name": "el-rows", "family": "electra", "checkpoint": "el", "data": path.name}
    manifest = {"suite": "zoo", "entries": [e]}
    report = zoo.run_zoo(manifest, seed=5, base_dir=tmp_path)
    out = report_files.write_report(report, tmp_path / "rep" / "report.json")
    row = json.loads(out.read_text())["rows"][0]
    assert row["baseline"] == {
        "name": "always original",
        "value": 0.5,
        "interval": [wilson_interval(20, 40).lo, wilson_interval(20, 40).hi],
        "items": "items/el-rows.baseline.npy",
        "details": {},
    }
    base = report_files.load_items(out, row, baseline=True)
    np.testing.assert_array_equal(base, 1.0 - np.array(replaced, float))
    items = report_files.load_items(out, row)
    units = report_files.load_units(out, row)
    np.testing.assert_array_equal(units, np.repeat(np.arange(20), 2))  # each row a unit
    # the verdict is the paired test over the 20 rows on the stored arrays: 18 more right of
    # 40; the rows' differences D = [-2, 0 x 9, +2 x 10], so of the 2**11 sign patterns of the
    # 11 that differ, 24 reach |sum| >= 18: p = 24/2048 = 0.0117 (over the 40 tokens as if
    # independent it was below 1e-3)
    v = row["beats_baseline"]
    assert v["test"] == "paired permutation" and v["verdict"] == "better"
    assert v["delta"] == pytest.approx(18 / 40) and v["n"] == 40 and v["n_units"] == 20
    assert v["p"] == pytest.approx(24 / 2048, abs=3e-3) and v["p_adjusted"] == v["p"]
    pd = stats.paired_difference(items, base, units, np.random.default_rng(0), kind="ratio")
    assert v["interval"] == pytest.approx([pd.lo, pd.hi]) and v["mde"] == pytest.approx(pd.mde)
    assert paired_permutation_test(items, base, rng=np.random.default_rng(0)) < 1e-3
    # read back through the pydantic model unchanged
    assert report_files.read_report(out).to_json()["rows"][0] == row


def test_spearman_row_is_judged_against_zero_by_fisher_z(hand_case):  # noqa: F811
    ckpt, pairs = hand_case
    row = zoo.score_entry(entry("ws", ckpt, pairs))
    assert row["baseline"] == {
        "name": "zero correlation",
        "value": 0.0,
        "interval": None,
        "items": None,
        "details": {},
    }
    v = row["beats_baseline"]
    # rho = 0.5 on 7 pairs: z = atanh(0.5) * 2 = 1.0986, p = 0.2719
    assert v["test"] == "fisher z" and v["verdict"] == "not distinguishable"
    assert v["p"] == pytest.approx(0.2719, abs=1e-4)
    assert v["interval"] == pytest.approx([-0.405886, 0.910303], abs=1e-6)


def test_analogy_row_is_judged_against_zero_accuracy_by_wilson(tmp_path):
    e = np.eye(4, dtype=np.float32)
    vecs = {"man": e[0], "king": e[0] + e[1], "woman": e[2], "queen": e[2] + e[1], "pear": e[3]}
    ckpt = w2v.save(w2v.from_vectors(vecs), tmp_path / "w2v")
    q = write_questions(tmp_path / "q.txt", ": royals\nman king woman queen\n" * 3)
    row = zoo.score_entry(entry("an", ckpt, q))
    assert row["baseline"]["name"] == "zero accuracy" and row["baseline"]["value"] == 0.0
    ci = wilson_interval(3, 3)
    assert row["beats_baseline"] == {
        "verdict": "better",
        "test": "wilson",
        "p": 0.0,
        "delta": 1.0,
        "interval": [ci.lo, ci.hi],
        "n": 3,
        "p_adjusted": 0.0,
        "n_units": 3,
        "method": "wilson",
        "se": None,
        "mde": None,
    }


def test_a_report_without_the_fields_still_validates_loads_and_writes_back_unchanged():
    row = {
        "name": "old",
        "family": "bigram",
        "kind": "lm",
        "metric": "bpb",
        "value": 8.0,
        "lo": 8.0,
        "hi": 8.0,
        "interval": "student_t",
        "n": 3,
        "status": "ok",
        "error": None,
        "reason": None,
        "checkpoint_sha256": "a" * 64,
        "data_sha256": "b" * 64,
        "seconds": 0.1,
        "items": None,
        "checkpoint": "c",
        "data": "d",
        "options": {},
        "details": None,
    }
    doc = {
        "schema_version": 1,
        "suite": "zoo",
        "release": "v0",
        "created_at": "2026-01-01T00:00:00Z",
        "seed": 0,
        "tinyllm_version": "0",
        "manifest_sha256": "c" * 64,
        "rows": [row],
    }
    validate_report(doc)
    report = Report.model_validate(doc)
    assert report.rows[0].baseline is None and report.rows[0].beats_baseline is None
    assert report.to_json() == doc


def test_a_bad_verdict_is_refused():
    good = {"verdict": "better", "test": "wilson", "p": 0.01, "delta": 0.2, "interval": [0.1, 0.3]}
    BeatsBaseline.model_validate(good | {"n": 10})
    with pytest.raises(ValueError, match="verdict"):
        BeatsBaseline.model_validate(good | {"n": 10, "verdict": "maybe"})
    assert math.isclose(baselines.ALPHA, 0.05)


def test_seq2seq_copy_baseline_by_hand_and_equal_to_the_copy_family(tmp_path):
    from test_kind_seq2seq import PAIRS, write_jsonl
    from test_kind_seq2seq import entry as s2s_entry

    from tinyllm.eval.kinds import seq2seq
    from tinyllm.models import copy_baseline

    b = seq2seq.copy_baseline([("Paris", "Paris"), ("May 1", "1 mai"), ("é", "e\u0301")])
    np.testing.assert_array_equal(b.items, [1.0, 0.0, 0.0])  # bytes: "é" is not "e" + accent
    assert b.name == "copy" and b.value == pytest.approx(1 / 3)
    # the copy family's own exact-match items are the baseline's items on the same pairs
    data = write_jsonl(tmp_path / "val.jsonl", PAIRS)
    model = copy_baseline.train(copy_baseline.Config(), PAIRS, seed=0)
    s = seq2seq.score(
        s2s_entry("c", "copy", "x", data), model, data, np.random.default_rng(0), seq2seq.Options()
    )
    np.testing.assert_array_equal(s.baseline.items, s.items)
    # the copy family against copy: a tie
    assert baselines.paired_verdict(s.items, s.baseline.items, direction="higher")["p"] == 1.0


def test_classifier_baseline_is_the_majority_of_the_training_labels(tmp_path):
    from tinyllm.eval.kinds import classifier

    # train labels a, a, b (majority a); val labels b, b, a: the val majority (b) is NOT used
    rows = [Row("train", "1", "a"), Row("train", "2", "a"), Row("train", "3", "b")]
    val = [Row("val", "4", "b"), Row("val", "5", "b"), Row("val", "6", "a")]
    b = classifier.training_majority_baseline(rows + val, val, [0, 0, 0])
    np.testing.assert_array_equal(b.items, [0.0, 0.0, 1.0])
    assert b.value == pytest.approx(1 / 3) and b.details == {
        "label": "a",
        "fit_on": "training rows",
    }
    # cross-fitted on 2 folds: classifier j's training rows are those outside fold j
    folded = [
        Row("train", "1", "a", fold=0),
        Row("train", "2", "b", fold=1),
        Row("train", "3", "b", fold=1),
        Row("val", "4", "a", fold=0),
    ]
    b = classifier.training_majority_baseline(folded, folded, [0, 1, 1, 0])
    # fold 0 is predicted by the majority of fold 1 (b), fold 1 by that of fold 0 (a)
    np.testing.assert_array_equal(b.items, [0.0, 0.0, 0.0, 0.0])
    assert b.details["label"] == {"0": "b", "1": "a"}
    # no train rows: the scored labels' majority, said so
    b = classifier.training_majority_baseline(val, val, [0, 0, 0])
    assert b.details == {"label": "b", "fit_on": "scored rows (no training rows in the file)"}


def test_lm_unigram_baseline_by_hand_and_a_uniform_bigram_is_worse(tmp_path):
    from zoo_helpers import uniform_bigram

    text = b"nineteen bytes long"  # the token file uniform_bigram writes
    e = uniform_bigram(tmp_path)
    row, items, base = zoo.score_entry_arrays(e, base_dir=tmp_path)
    scored = text[1:]  # token 0 is never scored
    counts = {c: scored.count(c) for c in set(scored)}
    want = np.array([-math.log(counts[c] / len(scored)) for c in scored])
    np.testing.assert_allclose(base, want, rtol=1e-12)
    b = row["baseline"]
    assert b["name"] == "unigram" and b["items"] == "items/uniform.baseline.npy"
    assert b["value"] == pytest.approx(want.sum() / (18 * math.log(2)), rel=1e-12)
    v = row["beats_baseline"]
    # every token costs ln 256 under the model: 8 bpb, far above the text's own unigram
    assert v["verdict"] == "worse" and v["test"] == "paired permutation"
    assert v["delta"] == pytest.approx(8.0 - b["value"], rel=1e-12) and v["p"] < 1e-3
    assert v["interval"][0] > 0
