"""tinyllm.eval.lmeval.run: lm-eval's metrics with our intervals and per-document scores."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tinyllm import stats
from tinyllm.eval.lmeval import MissingLmEvalError, require_lm_eval
from tinyllm.eval.lmeval.intervals import summarize
from tinyllm.eval.lmeval.run import evaluate


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
    assert m["interval"] == "cluster_bootstrap" and m["value"] == value
    # every resample's aggregate lies between the documents' own extremes
    per_doc = [-ll / (b * math.log(2)) for ll, b in pairs]
    assert min(per_doc) - 1e-12 <= m["lo"] <= value <= m["hi"] <= max(per_doc) + 1e-12
    same = summarize(samples, {"bits_per_byte,none": value}, np.random.default_rng(0), 200)
    assert same["metrics"] == got["metrics"]  # drawn from the caller's rng


def _ratio_ends(ll, w, seed, n_boot):
    """The percentile bootstrap ends of ``sum LL / sum w`` over documents (an independent
    statement of what the corpus intervals map to their metric)."""

    def ratio(idx, axis=-1):
        i = idx.astype(np.int64)
        return np.asarray(ll)[i].sum(axis=-1) / np.asarray(w)[i].sum(axis=-1)

    iv = stats.bootstrap_ci(np.arange(len(ll), dtype=float), np.random.default_rng(seed),
                            n_boot, ratio)  # fmt: skip
    return iv.lo, iv.hi


def test_each_corpus_metric_is_lm_evals_value_with_an_interval_in_its_own_units():
    """lm-eval's perplexity (one LL per document, exp(-mean LL)), weighted_perplexity and
    bits_per_byte ([LL, weight] per document): the value is lm-eval's, the interval is the
    bootstrap interval of sum LL / sum weight mapped to the metric, ends in increasing order."""
    from lm_eval.api.metrics import bits_per_byte, perplexity, weighted_perplexity

    ll = [-3.0, -7.5, -1.25, -40.0, -12.0]
    w = [2.0, 5.0, 1.0, 9.0, 4.0]
    pairs = [list(p) for p in zip(ll, w, strict=True)]
    cases = {  # metric: (its per-document item, lm-eval's aggregate, the map of the ratio)
        "perplexity": (ll, perplexity(ll), lambda r: math.exp(-r)),
        "word_perplexity": (pairs, weighted_perplexity(pairs), lambda r: math.exp(-r)),
        "byte_perplexity": (pairs, weighted_perplexity(pairs), lambda r: math.exp(-r)),
        "bits_per_byte": (pairs, bits_per_byte(pairs), lambda r: -r / math.log(2)),
    }
    for metric, (items, value, f) in cases.items():
        samples = [{"doc_id": i, "filter": "none", metric: x} for i, x in enumerate(items)]
        key = f"{metric},none"
        m = summarize(samples, {key: value}, np.random.default_rng(3), 300)["metrics"][key]
        weights = [1.0] * len(ll) if metric == "perplexity" else w
        lo, hi = sorted(f(r) for r in _ratio_ends(ll, weights, 3, 300))
        assert (m["value"], m["interval"], m["n"]) == (value, "cluster_bootstrap", 5), metric
        assert m["lo"] == pytest.approx(lo, rel=1e-12) and m["hi"] == pytest.approx(hi, rel=1e-12)
        assert 0 < m["lo"] < m["value"] < m["hi"], (metric, m)


def test_a_metric_named_freely_follows_its_tasks_aggregation():
    """The interval follows the aggregation the task gives a metric, not its name."""
    from lm_eval.api.metrics import perplexity

    ll = [-3.0, -7.5, -1.25, -4.0]
    samples = [{"doc_id": i, "filter": "none", "ppl": x} for i, x in enumerate(ll)]
    got = summarize(samples, {"ppl,none": perplexity(ll)}, np.random.default_rng(0), 200,
                    aggregations={"ppl": "perplexity"})["metrics"]["ppl,none"]  # fmt: skip
    assert 0 < got["lo"] < got["value"] == perplexity(ll) < got["hi"]
    other = summarize(samples, {"ppl,none": 9.0}, np.random.default_rng(0), 200,
                      aggregations={"ppl": None})["metrics"]["ppl,none"]  # fmt: skip
    assert (other["value"], other["lo"], other["hi"], other["interval"]) == (9.0, None, None, None)


def test_a_mean_metric_of_scores_other_than_0_and_1_is_bootstrapped():
    """A mean of scores that are not all 0 or 1 (an F1 per document, say) is not a
    proportion: its interval is the percentile bootstrap of the mean, recorded as such."""
    x = [0.5, 1.0, 0.0, 0.25, 0.75, 1.0]
    samples = [{"doc_id": i, "filter": "none", "f1": v} for i, v in enumerate(x)]
    m = summarize(samples, {"f1,none": 0.5833}, np.random.default_rng(7), 400)["metrics"]["f1,none"]
    iv = stats.bootstrap_ci(np.array(x), np.random.default_rng(7), 400)
    assert (m["interval"], m["lo"], m["hi"], m["n"]) == ("cluster_bootstrap", iv.lo, iv.hi, 6)


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
    assert b["interval"] == "cluster_bootstrap" and b["lo"] <= b["value"] <= b["hi"]
    assert math.isclose(wt["byte_perplexity,none"]["value"], 2 ** b["value"], rel_tol=1e-9)


def test_lambada_perplexity_interval_is_in_perplexity(gpt2, tok, task_dir):
    """lambada_openai's perplexity is exp(-mean LL) over documents: lm-eval's value inside an
    interval in perplexity (it was the interval of the mean LL, negative)."""
    from lm_eval.api.metrics import perplexity

    out = evaluate(["lambada_openai"], gpt2, tok, include_path=task_dir, include_defaults=False)
    task = out["tasks"]["lambada_openai"]
    m = task["metrics"]["perplexity,none"]
    assert m["value"] == pytest.approx(perplexity(task["per_item"]["perplexity,none"]), rel=1e-12)
    assert (m["interval"], m["n"]) == ("cluster_bootstrap", 6)
    assert 0 < m["lo"] < m["value"] < m["hi"]


def test_a_tasks_intervals_do_not_depend_on_the_tasks_beside_it(gpt2, tok, task_dir):
    """Each task draws from its own stream of (seed, task): wikitext's bootstrap intervals are
    the same alone and after lambada (whose perplexity draws from a stream too)."""
    kw = dict(include_path=task_dir, include_defaults=False, seed=4, n_boot=200)
    alone = evaluate(["wikitext"], gpt2, tok, **kw)["tasks"]["wikitext"]["metrics"]
    both = evaluate(["lambada_openai", "wikitext"], gpt2, tok, **kw)["tasks"]
    assert both["wikitext"]["metrics"] == alone
    assert both["lambada_openai"]["metrics"]["perplexity,none"]["interval"] == "cluster_bootstrap"


def test_the_task_stream_is_a_stable_function_of_seed_and_name():
    import hashlib

    from tinyllm.eval.lmeval.intervals import stable_hash, task_rng

    h = int.from_bytes(hashlib.sha256(b"wikitext").digest()[:8], "big")
    assert stable_hash("wikitext") == h  # not Python's hash, which changes per process
    want = np.random.default_rng([4, h]).random(3)
    assert task_rng(4, "wikitext").random(3).tolist() == want.tolist()
    assert task_rng(5, "wikitext").random(3).tolist() != want.tolist()
    assert task_rng(-1, "wikitext").random() == np.random.default_rng([2**64 - 1, h]).random()


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


def test_each_task_is_built_once_with_the_results_of_simple_evaluate_by_name(
    gpt2, tok, task_dir, monkeypatch
):
    """evaluate hands lm-eval the tasks it built (one build each) and skips torch's environment
    report; the samples are those of lm_eval.simple_evaluate building the same tasks by name,
    with the same seeds."""
    import lm_eval
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks import TaskManager

    from tinyllm.eval.lmeval.backend import TinyLLM

    builds = []
    real_init = ConfigurableTask.__init__

    def counting_init(self, *a, **k):
        builds.append(1)
        real_init(self, *a, **k)

    got_samples: dict = {}

    def capture(**kw):
        out = lm_eval.simple_evaluate(**kw)
        got_samples.update(out["samples"])
        return out

    import torch.utils.collect_env

    env_reports = []  # torch's collect_env runs pip list and more: seconds per run
    monkeypatch.setattr(
        torch.utils.collect_env, "get_pretty_env_info", lambda: env_reports.append(1) or ""
    )
    names = ["arc_easy", "winogrande"]
    monkeypatch.setattr(ConfigurableTask, "__init__", counting_init)
    got = evaluate(names, gpt2, tok, include_path=task_dir, include_defaults=False,
                   num_fewshot=1, limit=3, seed=5, simple_evaluate=capture)  # fmt: skip
    assert len(builds) == len(names) and env_reports == []
    monkeypatch.setattr(ConfigurableTask, "__init__", real_init)
    want = lm_eval.simple_evaluate(
        model=TinyLLM(gpt2, tok),
        tasks=names,
        task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
        num_fewshot=1,
        limit=3,
        random_seed=5,
        numpy_random_seed=5,
        torch_random_seed=5,
        fewshot_random_seed=5,
        bootstrap_iters=0,
    )

    def per_doc(samples):
        keep = ("doc_id", "arguments", "resps", "filtered_resps", "acc", "acc_norm")
        return {t: [{k: s.get(k) for k in keep} for s in v] for t, v in samples.items()}

    assert per_doc(got_samples) == per_doc(want["samples"])
    for t in names:
        for key, m in got["tasks"][t]["metrics"].items():
            assert m["value"] == want["results"][t][key]


def test_a_run_leaves_no_git_probe_or_progress_bar_on_stderr(gpt2, tok, task_dir, tmp_path,
                                                             monkeypatch, capfd, caplog):  # fmt: skip
    """lm-eval's git probe ("fatal: not a git repository" outside a repo) and its request bar
    are gone; what a run really writes to stderr (a log record, a hook's message) stays."""
    import logging
    import sys

    from tinyllm.eval.lmeval.run import quiet_lm_eval_run

    monkeypatch.chdir(tmp_path)  # not a git checkout: git describe fails here
    evaluate(["arc_easy"], gpt2, tok, include_path=task_dir, include_defaults=False, limit=2)
    err = capfd.readouterr().err
    assert "fatal: not a git repository" not in err and "it/s]" not in err, err
    with quiet_lm_eval_run():
        print("a hook's error message", file=sys.stderr)
        logging.getLogger("lm_eval").error("an lm-eval error record")
    err = capfd.readouterr().err
    assert "a hook's error message" in err
    assert "an lm-eval error record" in caplog.messages  # log records pass as they are
    loud = evaluate(["arc_easy"], gpt2, tok, include_path=task_dir, include_defaults=False,
                    limit=2, quiet=False)  # fmt: skip
    err = capfd.readouterr().err
    assert "fatal: not a git repository" in err and "it/s]" in err  # what quiet turns off
    assert loud["tasks"]["arc_easy"]["per_item"]  # the same run otherwise


def test_overlapping_runs_put_lm_eval_back_as_it_was():
    """Runs in two threads enter and leave in any order: lm-eval's own functions are back
    once the last one leaves, never a leftover replacement."""
    import lm_eval.api.task
    import lm_eval.evaluator

    from tinyllm.eval.lmeval.run import quiet_lm_eval_run

    real = (lm_eval.api.task.tqdm, lm_eval.evaluator.get_git_commit_hash)
    a, b = quiet_lm_eval_run(), quiet_lm_eval_run()
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    assert lm_eval.evaluator.get_git_commit_hash is not real[1]  # b is still running
    b.__exit__(None, None, None)
    assert (lm_eval.api.task.tqdm, lm_eval.evaluator.get_git_commit_hash) == real
