"""``tinyllm judge`` on folders written by lm-eval itself: lm-eval's HFLM scores two tiny
random-weight GPT-2s on local copies of its bundled arc_easy, lambada_openai and wikitext configs
with ``log_samples``, and ``EvaluationTracker`` writes them as the lm_eval CLI does
(``save_results_aggregated``, then ``save_results_samples`` per task). The judgement's values are
lm-eval's own (its results JSON); its paired rows are checked against scipy's paired t interval,
sign-flip p-values enumerated here, the cluster formula of docs/definitions.md and Holm computed by
hand; a third run on changed data is a mismatch naming the task.
"""

from __future__ import annotations

import itertools
import json
import math

import lm_eval
import numpy as np
import pytest
from lm_eval.loggers import EvaluationTracker
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager
from lmeval_helpers import arc_docs, lambada_docs, tiny_gpt2, wikitext_docs, write_tasks
from scipy import stats as sps
from typer.testing import CliRunner

from tinyllm.cli import app
from tinyllm.lmeval_judge import MismatchError, judge
from tinyllm.lmeval_logs import read_run

N_ARC, TOPIC = 24, 4  # 24 documents, clusters of 4 ("topic", a field of each document)


def _arc(changed: bool = False):
    docs = [{**d, "topic": i // TOPIC} for i, d in enumerate(arc_docs(N_ARC))]
    if changed:
        docs[5] = {**docs[5], "question": "A question of another data file?"}
    return docs


def _tasks(changed=False):
    return {
        "arc_easy": ("arc/arc_easy.yaml", {"test": _arc(changed)}),
        "lambada_openai": ("lambada/lambada_openai.yaml", {"test": lambada_docs(8)}),
        "wikitext": ("wikitext/wikitext.yaml", {"test": wikitext_docs(3)}),
    }


def _lm_eval_run(model, tok, task_dir, out, tasks):
    """One run as ``lm_eval --log_samples --output_path out`` writes it."""
    tm = TaskManager(include_path=str(task_dir), include_defaults=False)
    tracker = EvaluationTracker(output_path=str(out))
    res = lm_eval.simple_evaluate(
        model=HFLM(pretrained=model, tokenizer=tok, batch_size=1),
        tasks=tasks,
        task_manager=tm,
        log_samples=True,
        evaluation_tracker=tracker,
    )
    samples = res.pop("samples")
    tracker.save_results_aggregated(results=res, samples=samples)
    for name in res["configs"]:
        tracker.save_results_samples(task_name=name, samples=samples[name])
    return out


@pytest.fixture(scope="module")
def runs(tok, tmp_path_factory):
    root = tmp_path_factory.mktemp("judge")
    same, changed = root / "tasks", root / "tasks_changed"
    same.mkdir()
    changed.mkdir()
    write_tasks(same, tasks=_tasks())
    write_tasks(changed, names=["arc_easy"], tasks=_tasks(changed=True))
    eot = tok.eos_token_id
    names = ["arc_easy", "lambada_openai", "wikitext"]
    a = _lm_eval_run(tiny_gpt2(len(tok), eot, seed=0), tok, same, root / "a", names)
    b = _lm_eval_run(tiny_gpt2(len(tok), eot, seed=1), tok, same, root / "b", names)
    c = _lm_eval_run(tiny_gpt2(len(tok), eot, seed=1), tok, changed, root / "c", ["arc_easy"])
    return a, b, c


def _results(out):
    return json.loads(next(out.rglob("results_*.json")).read_text())


def _samples(out, task):
    f = next(out.rglob(f"samples_{task}_*.jsonl"))
    return sorted((json.loads(x) for x in f.read_text().splitlines()), key=lambda s: s["doc_id"])


def _holm(ps):
    m, out, running = len(ps), [0.0] * len(ps), 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: ps[i])):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def _exact_sign_flip_p(D):
    T = abs(sum(D))
    hits = sum(
        abs(sum(s * d for s, d in zip(signs, D, strict=True))) >= T * (1 - 1e-9)
        for signs in itertools.product((1, -1), repeat=len(D))
    )
    return hits / 2 ** len(D)


def test_every_value_is_lm_evals_own(runs):
    a, b, _ = runs
    j = judge([read_run(a), read_run(b)])
    seen = 0
    for label, out in (("A", a), ("B", b)):
        res = _results(out)["results"]
        for v in (v for v in j.values if v.run == label):
            assert v.value == pytest.approx(res[v.task][f"{v.metric},{v.filter}"], rel=1e-12)
            seen += 1
    # arc acc, acc_norm; lambada perplexity, acc; wikitext word/byte perplexity, bits_per_byte
    assert seen == 2 * 7
    arc = _samples(a, "arc_easy")
    assert len(arc) == N_ARC and all("doc_hash" in s for s in arc)


def test_documents_as_units_give_the_paired_t_interval_and_the_sign_flip_p(runs):
    a, b, _ = runs
    j = judge([read_run(a), read_run(b)])
    c = next(c for c in j.comparisons if (c.task, c.metric) == ("arc_easy", "acc_norm"))
    xa = np.array([s["acc_norm"] for s in _samples(a, "arc_easy")])
    xb = np.array([s["acc_norm"] for s in _samples(b, "arc_easy")])
    ci = sps.ttest_rel(xb, xa).confidence_interval()
    assert c.delta == pytest.approx(xb.mean() - xa.mean(), abs=1e-12)
    assert (c.lo, c.hi) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert (c.n_units, c.method) == (N_ARC, "paired_t")
    d = [x for x in (xb - xa).tolist() if x != 0]  # units without a difference flip to nothing
    assert c.p == pytest.approx(_exact_sign_flip_p(d), abs=0.03)  # 10,000 of 2^24 patterns
    wa = next(v for v in j.values if (v.run, v.task, v.metric) == ("A", "arc_easy", "acc_norm"))
    assert (wa.method, wa.n_units) == ("wilson", N_ARC)


def test_a_cluster_key_of_the_documents_makes_the_clusters_the_units(runs):
    a, b, _ = runs
    j = judge([read_run(a, cluster_key="topic"), read_run(b, cluster_key="topic")])
    c = next(c for c in j.comparisons if (c.task, c.metric) == ("arc_easy", "acc"))
    xa = np.array([s["acc"] for s in _samples(a, "arc_easy")])
    xb = np.array([s["acc"] for s in _samples(b, "arc_easy")])
    g = N_ARC // TOPIC
    D = (xb - xa).reshape(g, TOPIC).sum(axis=1)  # per cluster S^B_g - S^A_g
    delta = D.sum() / N_ARC
    e = D - delta * TOPIC
    se = math.sqrt(g / (g - 1) * (e**2).sum()) / N_ARC
    half = sps.t.ppf(0.975, g - 1) * se
    assert (c.n_units, c.delta) == (g, pytest.approx(delta, abs=1e-12))
    assert (c.lo, c.hi) == (pytest.approx(delta - half), pytest.approx(delta + half))
    assert c.p == _exact_sign_flip_p(D.tolist())  # 6 units: every pattern counted
    v = next(v for v in j.values if (v.run, v.task, v.metric) == ("A", "arc_easy", "acc"))
    assert (v.method, v.n_units, v.n) == ("cluster_bootstrap", g, N_ARC)


def test_ratio_metrics_and_holm_across_all_rows(runs):
    a, b, _ = runs
    j = judge([read_run(a), read_run(b)])
    ra, rb = _results(a)["results"]["wikitext"], _results(b)["results"]["wikitext"]
    by = {(c.task, c.metric): c for c in j.comparisons}
    bpb = by[("wikitext", "bits_per_byte")]
    assert bpb.delta == pytest.approx(rb["bits_per_byte,none"] - ra["bits_per_byte,none"])
    assert bpb.delta_kind == "difference" and bpb.lo < bpb.delta < bpb.hi
    wp = by[("wikitext", "word_perplexity")]
    ratio = rb["word_perplexity,none"] / ra["word_perplexity,none"]
    assert (wp.delta_kind, wp.delta) == ("ratio", pytest.approx(ratio, rel=1e-9))
    assert wp.p == bpb.p  # one test of the NLLs: 3 documents, exact
    assert len(j.comparisons) == 7
    ps = [c.p for c in j.comparisons]
    assert [c.p_adjusted for c in j.comparisons] == pytest.approx(_holm(ps))
    for c in j.comparisons:
        called = c.p_adjusted < 0.05
        assert c.verdict in (("better", "worse") if called else ("not distinguishable",))


def test_runs_on_other_documents_are_one_line_naming_the_task(runs):
    a, _, c = runs
    with pytest.raises(MismatchError) as e:
        judge([read_run(a), read_run(c)])
    msg = str(e.value)
    assert msg.startswith("task arc_easy (filter none): expected runs A (")
    assert "1 doc_ids with another document or target (first 5): not paired" in msg
    res = CliRunner().invoke(app, ["judge", str(a), str(c), "--json"])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip().startswith("error: task arc_easy") and res.stderr.count("\n") == 1


def test_runs_imported_as_releases_are_compared_as_the_judge_pairs_them(runs, tmp_path):
    from tinyllm.store import open_store

    a, b, _ = runs
    store = tmp_path / "store"
    for run, release in ((a, "r1"), (b, "r2")):
        args = ["judge", "--import", str(run), "--store", str(store), "--release", release]
        res = CliRunner().invoke(app, [*args, "--cluster-key", "topic"])
        assert res.exit_code == 0, res.output
        assert f"imported 3 rows of {next(run.rglob('results_*'))} as release {release}" in (
            res.stdout.replace("\n", " ")
        )
    st = open_store(str(store))
    report = st.read_report("r2")
    rows = {r["name"]: r for r in report["rows"]}
    assert sorted(rows) == ["arc_easy-acc", "arc_easy-acc_norm", "lambada_openai-acc"]
    assert rows["arc_easy-acc"]["value"] == _results(b)["results"]["arc_easy"]["acc,none"]
    assert rows["arc_easy-acc"]["n_units"] == N_ARC // TOPIC
    cmp = {r.name: r for r in st.read_compare("r2").rows}
    j = judge([read_run(a, cluster_key="topic"), read_run(b, cluster_key="topic")])
    c = next(c for c in j.comparisons if (c.task, c.metric) == ("arc_easy", "acc"))
    got = cmp["arc_easy-acc"]
    assert (got.n_units, got.p) == (c.n_units, c.p)  # the same paired test over clusters
    assert got.delta == pytest.approx(c.delta, abs=1e-12)
