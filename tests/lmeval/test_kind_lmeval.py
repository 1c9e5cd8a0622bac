"""The lmeval kind: an lm-eval task as a zoo row (tinyllm.eval.kinds.lmeval).

A tiny GPT-2 saved as an hf folder, the demo's lee cloze task (HellaSwag schema through a YAML
that includes lm-eval's bundled hellaswag.yaml) on a few documents."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tinyllm import stats
from tinyllm.compare import compare_reports
from tinyllm.data import lee_split
from tinyllm.eval.kinds.lmeval import task_config
from tinyllm.eval.lmeval import demo_task
from tinyllm.eval.lmeval.run import evaluate, load
from tinyllm.eval.zoo import entry_rng, run_zoo, score_entry_items

LIMIT = 12


@pytest.fixture(scope="module")
def zoo(tmp_path_factory, gpt2, tok):
    import lmeval_helpers as H

    d = tmp_path_factory.mktemp("kind_lmeval")
    train, val = lee_split()
    demo_task.write_cloze_task(d / "task", train[:2], val[:4])
    for name, m in (("a", gpt2), ("b", H.tiny_gpt2(len(tok), tok.eos_token_id, seed=1))):
        m.save_pretrained(d / name, safe_serialization=True)
        tok.save_pretrained(d / name)
    return d


def entry(name="cloze", ckpt="a", **options):
    return {
        "name": name,
        "family": "hf",
        "kind": "lmeval",
        "checkpoint": ckpt,
        "data": "task/lee_cloze.yaml",
        "options": {"limit": LIMIT, **options},
    }


def test_cloze_documents_hold_the_true_ending_among_four():
    sents = demo_task.sentences(lee_split()[1][:3])
    docs = demo_task.cloze_docs(sents, seed=0, split="validation")
    assert len(docs) == len(sents)
    for doc, s in zip(docs, sents, strict=True):
        ends = doc["endings"]
        assert len(set(ends)) == 4
        assert doc["ctx_a"] + " " + ends[int(doc["label"])] == s


def test_row_equals_run_evaluate_on_the_same_inputs(zoo):
    row, items = score_entry_items(entry(), seed=3, base_dir=zoo)
    assert row["status"] == "ok", row["error"]
    assert (row["kind"], row["metric"], row["interval"], row["n"]) == (
        "lmeval",
        "acc",
        "wilson",
        LIMIT,
    )
    # the same seed the kind draws from the entry's rng, the same model, task and options
    seed = int(entry_rng(3, "cloze").integers(0, 2**31 - 1))
    model, tok = load(hf=zoo / "a")
    # the task YAML's config, its relative paths resolved against its folder
    ref = evaluate(
        [task_config(zoo / "task" / "lee_cloze.yaml")],
        model,
        tok,
        include_defaults=False,
        limit=LIMIT,
        seed=seed,
    )["tasks"]["lee_cloze"]
    assert items.tolist() == ref["per_item"]["acc,none"]
    iv = stats.wilson_interval(int(items.sum()), LIMIT)
    assert (row["value"], row["lo"], row["hi"]) == (
        ref["metrics"]["acc,none"]["value"],
        iv.lo,
        iv.hi,
    )
    assert row["details"]["metrics"]["acc_norm,none"] == ref["metrics"]["acc_norm,none"]
    assert row["details"]["doc_ids"] == list(range(LIMIT))
    # chance: 1/4 per document, paired against the row's own 0/1 scores
    assert row["baseline"]["name"] == "chance" and row["baseline"]["value"] == 0.25
    assert row["beats_baseline"]["n"] == LIMIT
    assert row["beats_baseline"]["delta"] == pytest.approx(items.mean() - 0.25)


def test_acc_norm_as_the_row_metric(zoo):
    row, items = score_entry_items(entry(metric="acc_norm"), seed=3, base_dir=zoo)
    assert row["status"] == "ok" and row["metric"] == "acc_norm"
    assert row["value"] == row["details"]["metrics"]["acc_norm,none"]["value"] == items.mean()


def test_a_missing_task_is_an_error_row(zoo):
    row, items = score_entry_items(entry(task="no_such_task"), base_dir=zoo)
    assert (row["status"], row["kind"], items) == ("error", "lmeval", None)
    assert "no_such_task" in row["error"]["message"]


def test_a_family_of_another_kind_is_an_error_row(zoo):
    e = entry() | {"family": "ngram", "checkpoint": "a"}
    row, _ = score_entry_items(e, base_dir=zoo)
    assert row["status"] == "error"


def test_two_releases_compare_with_a_verdict(zoo, tmp_path):
    manifests = {
        r: {"suite": "zoo", "entries": [entry(ckpt=c)]} for r, c in (("r1", "a"), ("r2", "b"))
    }
    reports = {r: run_zoo(m, seed=0, release=r, base_dir=zoo) for r, m in manifests.items()}
    docs = {r: rep.to_json() for r, rep in reports.items()}
    json.dumps(docs)  # JSON-native rows
    cmp = compare_reports(
        docs["r1"],
        docs["r2"],
        lambda n: reports["r1"].item_scores[n],
        lambda n: reports["r2"].item_scores[n],
        n_perm=2000,
    )
    (row,) = cmp.rows
    assert row.verdict in ("improved", "regressed", "unchanged")
    a, b = (reports[r].item_scores["cloze"] for r in ("r1", "r2"))
    assert row.delta == pytest.approx(float(np.mean(b - a)))
    assert row.n == LIMIT


def test_the_gpt_recipe_adds_an_lmeval_entry_that_scores(tmp_path):
    """build_zoo writes the cloze task under data/lee_cloze/ and a kind-lmeval entry of the
    GPT's checkpoint (the default recipe's lmeval_entries, on a 2-step GPT)."""
    import dataclasses

    from tinyllm import train
    from tinyllm.report import load_manifest

    gpt = train.default_recipes()["gpt"]
    assert gpt.lmeval_entries == {"gpt-lmeval-cloze": {"task": "lee_cloze", "options": {}}}
    tiny = dataclasses.replace(
        gpt,
        config={"block_size": 16, "n_layer": 1, "n_head": 2, "n_embd": 16},
        steps=2,
        options={"ctx_len": 16, "stride": 8},
        lmeval_entries={"gpt-lmeval-cloze": {"task": "lee_cloze", "options": {"limit": 6}}},
    )
    train.build_zoo(tmp_path, progress=False, jobs=1, recipes={"gpt": tiny})
    m = load_manifest(tmp_path / "zoo.yaml")
    assert [(e.name, e.kind, e.data) for e in m.entries] == [
        ("gpt", None, "data/lee_val.bin"),
        ("gpt-lmeval-cloze", "lmeval", "data/lee_cloze/lee_cloze.yaml"),
    ]
    row, items = score_entry_items(m.entries[1], base_dir=tmp_path)
    assert (row["status"], row["family"], row["n"], items.size) == ("ok", "gpt", 6, 6)
    bad = dataclasses.replace(tiny, lmeval_entries={"x": {"task": "nope"}})
    with pytest.raises(ValueError, match="lmeval entry 'x'"):
        train.build_zoo(tmp_path / "bad", progress=False, jobs=1, recipes={"gpt": bad})


def test_without_lm_eval_the_task_builds_and_its_row_names_the_extra(zoo, tmp_path, monkeypatch):
    import importlib.util
    import sys

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "lm_eval" else real(n, *a)
    )
    train, val = lee_split()
    y = demo_task.write_cloze_task(tmp_path / "task", train[:1], val[:2])
    assert json.loads(y.read_text())["include"] == demo_task.BUNDLED_TASK
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # import lm_eval now fails
    row, _ = score_entry_items(entry(), base_dir=zoo)
    assert (row["status"], row["error"]["type"]) == ("error", "MissingLmEvalError"), row["error"]
    assert "tinyllm[lmeval]" in row["error"]["message"]


def test_published_releases_show_the_row_and_its_verdict_on_the_dashboard(zoo, tmp_path):
    from tinyllm import dashboard
    from tinyllm.publish import publish_run
    from tinyllm.store import open_store

    st = open_store(tmp_path / "store")
    for r, c in (("r1", "a"), ("r2", "b")):
        rep = run_zoo({"suite": "zoo", "entries": [entry(ckpt=c)]}, seed=0, release=r, base_dir=zoo)
        publish_run(st, r, rep.to_json(), dict(rep.item_scores), seed=0)
    (row,) = st.read_compare("r2").rows
    assert row.verdict in ("improved", "regressed", "unchanged")
    files = dashboard.build_site(st)
    assert "entry/cloze.html" in files
    page = files["index.html"].decode()
    assert "cloze" in page and "lmeval" in page and row.verdict in page
