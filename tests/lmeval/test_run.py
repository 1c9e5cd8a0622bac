"""tinyllm.eval.lmeval.run: lm-eval's metrics with our intervals and per-document scores."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tinyllm import stats
from tinyllm.eval.lmeval import MissingLmEvalError, require_lm_eval
from tinyllm.eval.lmeval.run import CORPUS, evaluate, summarize


def test_summarize_wilson_for_zero_one_scores():
    samples = [
        {"doc_id": i, "filter": "none", "acc": a} for i, a in enumerate([1.0, 0.0, 1.0, 1.0])
    ]
    got = summarize(samples, {"acc,none": 0.75}, np.random.default_rng(0), 100)
    m = got["metrics"]["acc,none"]
    iv = stats.wilson_interval(3, 4)
    assert (m["value"], m["lo"], m["hi"], m["interval"], m["n"]) == (
        0.75,
        iv.lo,
        iv.hi,
        "wilson",
        4,
    )
    assert got["per_item"]["acc,none"] == [1.0, 0.0, 1.0, 1.0] and got["doc_ids"] == [0, 1, 2, 3]


def test_summarize_bootstrap_of_corpus_metric_by_its_own_aggregate():
    # bits_per_byte = -sum LL / (sum bytes * ln 2): documents (LL, bytes)
    pairs = [(-10.0, 4), (-30.0, 8), (-2.0, 2)]
    samples = [{"doc_id": i, "filter": "none", "bits_per_byte": p} for i, p in enumerate(pairs)]
    value = 42.0 / (14 * math.log(2))
    got = summarize(samples, {"bits_per_byte,none": value}, np.random.default_rng(0), 200)
    m = got["metrics"]["bits_per_byte,none"]
    assert m["interval"] == "bootstrap" and m["value"] == value
    # every resample's aggregate lies between the documents' own extremes
    per_doc = [-ll / (b * math.log(2)) for ll, b in pairs]
    assert min(per_doc) - 1e-12 <= m["lo"] <= value <= m["hi"] <= max(per_doc) + 1e-12
    same = summarize(samples, {"bits_per_byte,none": value}, np.random.default_rng(0), 200)
    assert same["metrics"] == got["metrics"]  # drawn from the caller's rng


def test_corpus_aggregates_match_lm_eval():
    from lm_eval.api.metrics import bits_per_byte, perplexity, weighted_perplexity

    ll = np.array([-3.0, -7.5, -1.25])
    w = np.array([2.0, 5.0, 1.0])
    items = list(zip(ll.tolist(), w.tolist(), strict=True))
    assert CORPUS["word_perplexity"](ll, w) == pytest.approx(weighted_perplexity(items))
    assert CORPUS["bits_per_byte"](ll, w) == pytest.approx(bits_per_byte(items))
    assert CORPUS["perplexity"](ll, w) == pytest.approx(perplexity(ll.tolist()))


def test_evaluate_arc_easy_and_wikitext(gpt2, tok, task_dir):
    out = evaluate(
        ["arc_easy", "wikitext"], gpt2, tok, include_path=task_dir, include_defaults=False, limit=3
    )
    arc = out["tasks"]["arc_easy"]
    assert arc["n"] == 3 and set(arc["metrics"]) == {"acc,none", "acc_norm,none"}
    for key, m in arc["metrics"].items():
        iv = stats.wilson_interval(int(sum(arc["per_item"][key])), 3)
        assert (m["interval"], m["lo"], m["hi"]) == ("wilson", iv.lo, iv.hi)
        assert m["value"] == np.mean(arc["per_item"][key])
    wt = out["tasks"]["wikitext"]["metrics"]
    assert set(wt) == {"word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none"}
    b = wt["bits_per_byte,none"]
    assert b["interval"] == "bootstrap" and b["lo"] <= b["value"] <= b["hi"]
    assert math.isclose(wt["byte_perplexity,none"]["value"], 2 ** b["value"], rel_tol=1e-9)


def test_missing_lm_eval_names_the_extra(monkeypatch):
    import importlib

    real = importlib.import_module

    def fake(name, *a, **k):
        if name == "lm_eval":
            raise ImportError("No module named 'lm_eval'")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", fake)
    with pytest.raises(MissingLmEvalError, match=r"tinyllm\[lmeval\]"):
        require_lm_eval()
