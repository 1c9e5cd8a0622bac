"""tinyllm.eval.zoo's rows: every field of an ok, error and skipped row, the entry's own rng, the
scorer's items, paths relative to the manifest and the progress callback.
"""

import hashlib
import math
import time

import numpy as np
import pytest
import yaml
from zoo_helpers import (  # same folder: pytest puts it on sys.path
    NO_OPTIONS,
    stable_row,
    uniform_bigram,
)

from tinyllm.eval import kinds, zoo
from tinyllm.report import Entry, Row, sha256_path, validate_report


def test_entry_rng_depends_on_seed_and_name_only():
    draw = [zoo.entry_rng(0, "gpt").random(3) for _ in range(2)]
    np.testing.assert_array_equal(draw[0], draw[1])
    assert not np.array_equal(draw[0], zoo.entry_rng(0, "bigram").random(3))
    assert not np.array_equal(draw[0], zoo.entry_rng(1, "gpt").random(3))
    with pytest.raises(ValueError, match="non-negative"):
        zoo.entry_rng(-1, "gpt")


# ---- every field of a row, and what score_entry does with the scorer ----------------------------


def _spy_scorer(calls: list):
    """A scorer for the lm kind whose value is the first draw of the rng it was given, with
    float32 per-item scores: what score_entry does with an entry's rng and items is visible."""
    from tinyllm.stats import Interval

    def score(entry, model, data_path, rng, opts):
        calls.append(entry.name)
        v = float(rng.random())
        items = np.array([v, 1.0 - v], dtype=np.float32)
        return kinds.Scored("bpb", Interval(v, v, v), "student_t", 2, items, {"spy": True})

    return score


def test_uniform_bigram_row_carries_every_field_of_the_row(tmp_path):
    entry = uniform_bigram(tmp_path)
    t0 = time.perf_counter()
    row = zoo.score_entry(entry, base_dir=tmp_path)
    elapsed = time.perf_counter() - t0
    ln256 = math.log(256.0)
    assert stable_row(row) == {
        "name": "uniform",
        "family": "bigram",
        "kind": "lm",
        "metric": "bpb",
        "value": 8.0,
        "lo": 8.0,
        "hi": 8.0,
        "interval": "cluster_ratio",  # over blocks: the token file has no unit boundaries
        "n": 18,
        "status": "ok",
        "error": None,
        "reason": None,
        "checkpoint_sha256": sha256_path(tmp_path / "uniform"),
        "data_sha256": sha256_path(tmp_path / "val.tok"),
        "items": None,
        "checkpoint": "uniform",
        "data": "val.tok",
        "options": NO_OPTIONS,
        "details": {
            "n_bytes": 18,
            "block_len": 1,  # 18 tokens: blocks of 18 // 10 = 1 token, 10 blocks at least
            "sum_nll": pytest.approx(18 * ln256, rel=1e-12),
            "nll": {k: pytest.approx(ln256, rel=1e-12) for k in ("value", "lo", "hi")},
            "ppl": {k: pytest.approx(256.0, rel=1e-12) for k in ("value", "lo", "hi")},
            "tokenizer": "byte",
            "n_text_tokens": 19,
            "text_bytes": 19,
            "prefix": False,
        },
        "baseline": row["baseline"],  # by hand in tests/eval/test_row_baselines.py
        "beats_baseline": row["beats_baseline"],
        "n_units": 18,
        "units": None,  # the unit ids are not kept without items_dir
        "iid_interval": {"lo": 8.0, "hi": 8.0, "method": "iid"},
        "interval_warning": "no unit boundaries: 18 contiguous blocks of 1 items stand in for "
        "the units",
    }
    assert row["baseline"]["name"] == "unigram"
    assert 0.0 < row["seconds"] <= elapsed  # wall time of this entry, not a clock reading


def test_error_row_of_an_entry_that_failed_elsewhere():
    entry = {"name": "b", "family": "bigram", "checkpoint": "m/b", "data": "d.tok"}
    exc = TimeoutError("store did not answer in 30 s")
    row = zoo.error_row(entry, exc, seconds=2, checkpoint_sha256="a" * 64, data_sha256="b" * 64)
    want = {
        "name": "b",
        "family": "bigram",
        "kind": "lm",
        "metric": "bpb",  # the kind's metric, so the failed row still says what it measures
        "value": None,
        "lo": None,
        "hi": None,
        "interval": None,
        "n": None,
        "status": "error",
        "error": {"type": "TimeoutError", "message": "store did not answer in 30 s"},
        "reason": None,
        "checkpoint_sha256": "a" * 64,
        "data_sha256": "b" * 64,
        "seconds": 2.0,
        "items": None,
        "checkpoint": "m/b",
        "data": "d.tok",
        "options": NO_OPTIONS,
        "details": None,
        "baseline": None,
        "beats_baseline": None,
        "n_units": None,
        "units": None,
        "iid_interval": None,
        "interval_warning": None,
    }
    assert row == want and type(row["seconds"]) is float
    validate_report(
        zoo.build_run_report({"entries": [entry]}, [row], seed=0, created_at="2026-01-01T00:00:00Z")
    )
    # an Entry works as well as a dict; without the optional arguments: 0 s, no hashes
    row = zoo.error_row(Entry.model_validate(entry), exc)
    assert row == want | {"seconds": 0.0, "checkpoint_sha256": None, "data_sha256": None}
    # an unknown family: no kind, no metric
    row = zoo.error_row(dict(entry, family="mystery"), KeyError("w"))
    assert (row["kind"], row["metric"], row["error"]) == (
        None,
        None,
        {"type": "KeyError", "message": "'w'"},
    )


def test_skipped_rows_have_no_value_and_zero_seconds(tmp_path, monkeypatch):
    entry = uniform_bigram(tmp_path)
    row, items = zoo.score_entry_items(dict(entry, family="mystery"), base_dir=tmp_path)
    assert items is None and row["seconds"] == 0.0 and row["metric"] is None
    monkeypatch.delitem(kinds.SCORERS, "lm")  # a kind without a scorer (yet)
    row, items = zoo.score_entry_items(entry, base_dir=tmp_path)
    assert items is None
    assert (row["status"], row["reason"], row["error"]) == (
        "skipped",
        "no scorer for kind 'lm' yet",
        None,
    )
    assert (row["kind"], row["metric"], row["value"], row["seconds"]) == ("lm", "bpb", None, 0.0)


def test_error_rows_keep_their_kind_metric_and_wall_time(tmp_path):
    entry = dict(uniform_bigram(tmp_path), data="missing.tok")
    t0 = time.perf_counter()
    row = zoo.score_entry(entry, base_dir=tmp_path)
    elapsed = time.perf_counter() - t0
    assert row["status"] == "error" and row["error"]["type"] == "FileNotFoundError"
    assert (row["kind"], row["metric"], row["value"]) == ("lm", "bpb", None)
    assert 0.0 < row["seconds"] <= elapsed
    assert row["checkpoint_sha256"] == sha256_path(tmp_path / "uniform")  # hashed before failing
    assert row["data_sha256"] is None


def test_the_entry_rng_reaches_the_scorer_and_items_become_float64(tmp_path, monkeypatch):
    entry = uniform_bigram(tmp_path)
    calls = []
    monkeypatch.setitem(kinds.SCORERS, "lm", _spy_scorer(calls))
    first = {s: float(zoo.entry_rng(s, "uniform").random()) for s in (0, 5)}
    row, items = zoo.score_entry_items(entry, base_dir=tmp_path)  # default seed: 0
    assert row["value"] == first[0] and row["details"] == {"spy": True}
    assert items.dtype == np.float64 and items.tolist() == pytest.approx([first[0], 1 - first[0]])
    assert row["items"] == "items/uniform.npy"
    row = zoo.score_entry(entry, seed=5, base_dir=tmp_path, items_dir=tmp_path / "it")
    assert row["value"] == first[5]
    assert np.load(tmp_path / "it" / "uniform.npy").dtype == np.float64
    assert zoo.score_entry(entry, base_dir=tmp_path)["value"] == first[0]
    report = zoo.run_zoo({"entries": [entry]}, seed=5, base_dir=tmp_path)
    assert report.rows[0].value == first[5] and report.seed == 5
    spy_items = np.array([first[5], 1.0 - first[5]], dtype=np.float32).astype(np.float64)
    np.testing.assert_array_equal(report.item_scores["uniform"], spy_items)
    assert zoo.run_zoo({"entries": [entry]}, base_dir=tmp_path).seed == 0  # default seed 0
    assert calls == ["uniform"] * 5


def test_a_scorer_without_items_gives_a_row_without_items(tmp_path, monkeypatch):
    from tinyllm.stats import Interval

    def no_items(entry, model, data_path, rng, opts):
        return kinds.Scored("bpb", Interval(1.0, 0.5, 1.5), "student_t", 3, None, {})

    monkeypatch.setitem(kinds.SCORERS, "lm", no_items)
    entry = uniform_bigram(tmp_path)
    row, items = zoo.score_entry_items(entry, base_dir=tmp_path)
    assert items is None and row["items"] is None and row["details"] is None
    assert (row["value"], row["lo"], row["hi"], row["n"]) == (1.0, 0.5, 1.5, 3)
    report = zoo.run_zoo({"entries": [entry]}, base_dir=tmp_path)
    assert report.item_scores == {}


def test_relative_paths_default_to_the_current_folder(tmp_path, monkeypatch):
    entry = uniform_bigram(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert zoo.score_entry_items(entry)[0]["status"] == "ok"
    assert zoo.score_entry(entry)["status"] == "ok"
    report = zoo.run_zoo({"entries": [entry]})  # an in-memory manifest: base "."
    assert report.rows[0].status == "ok" and report.rows[0].value == 8.0


def test_base_dir_overrides_the_manifest_folder(tmp_path):
    entry = uniform_bigram(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    path = tmp_path / "elsewhere" / "zoo.yaml"
    path.write_text(yaml.safe_dump({"entries": [entry]}))
    assert zoo.run_zoo(path).rows[0].status == "error"  # relative to elsewhere/: not there
    assert zoo.run_zoo(path, base_dir=tmp_path).rows[0].value == 8.0
    assert zoo.run_zoo({"entries": [entry]}, base_dir=tmp_path).rows[0].value == 8.0


def test_progress_is_called_after_each_entry_with_its_position_and_typed_row(tmp_path):
    entry = uniform_bigram(tmp_path)
    entries = [dict(entry, name=n) for n in ("a", "b", "c")]
    seen = []
    report = zoo.run_zoo(
        {"entries": entries}, base_dir=tmp_path, progress=lambda i, n, r: seen.append((i, n, r))
    )
    assert [(i, n, r.name) for i, n, r in seen] == [(1, 3, "a"), (2, 3, "b"), (3, 3, "c")]
    assert all(isinstance(r, Row) for _, _, r in seen)
    assert [r.value for _, _, r in seen] == [row.value for row in report.rows] == [8.0] * 3
    for name in ("a", "b", "c"):  # the report keeps each entry's own per-token NLLs
        np.testing.assert_allclose(report.item_scores[name], np.full(18, math.log(256.0)))


def test_entry_rng_is_the_documented_generator():
    for seed, name in ((0, "gpt"), (7, "bert-rows"), (2**40, "é")):
        h = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")
        want = np.random.default_rng([seed, h]).random(4)
        np.testing.assert_array_equal(zoo.entry_rng(seed, name).random(4), want)
    assert zoo.entry_rng(np.int64(3), "x").random() == zoo.entry_rng(3, "x").random()
    for bad in (True, False, -1, 1.0, "3", None):
        with pytest.raises(ValueError, match=r"^seed: expected a non-negative integer, got"):
            zoo.entry_rng(bad, "gpt")
