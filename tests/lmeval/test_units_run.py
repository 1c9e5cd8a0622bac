"""``cluster_key`` through lm-eval runs: ``run.evaluate``, ``tinyllm eval lmeval --cluster-key``
and the lmeval kind's row (docs/definitions.md, "Units"). Local tasks whose documents come in
groups of four sharing a ``passage`` field; a tiny random GPT-2.

Oracles: tinyllm.stats.cluster_bootstrap of the per-document scores over the passages, drawn
from the task's own stream in the order of its metrics; the Wilson interval over documents; the
exact messages.
"""

from __future__ import annotations

import json

import lmeval_helpers as H
import numpy as np
import pytest
from typer.testing import CliRunner

from tinyllm import stats
from tinyllm.cli import app
from tinyllm.data import lee_split
from tinyllm.eval.kinds import lmeval as kind
from tinyllm.eval.lmeval import demo_task
from tinyllm.eval.lmeval.intervals import task_rng
from tinyllm.eval.lmeval.run import evaluate, load
from tinyllm.eval.zoo import score_entry_result

N = 16  # documents: 4 passages of 4


def _arc(passage=lambda i: f"passage-{i // 4}"):
    return [{**d, "passage": passage(i)} for i, d in enumerate(H.arc_docs(N))]


@pytest.fixture(scope="module")
def arc_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("arc_passages")
    H.write_tasks(d, tasks={"arc_easy": ("arc/arc_easy.yaml", {"test": _arc()})})
    return d


def _evaluate(model, tok, d, **kw):
    return evaluate(["arc_easy"], model, tok, include_path=d, include_defaults=False, seed=2,
                    n_boot=300, **kw)  # fmt: skip


def test_evaluate_with_a_cluster_key_draws_over_passages(gpt2, tok, arc_dir):
    out = _evaluate(gpt2, tok, arc_dir, cluster_key="passage")
    arc = out["tasks"]["arc_easy"]
    assert out["cluster_key"] == arc["cluster_key"] == "passage"
    assert arc["units"] == [f"passage-{i // 4}" for i in range(N)] and arc["n_units"] == 4
    rng = task_rng(2, "arc_easy")  # the task's stream, its metrics in lm-eval's order
    units = np.arange(N) // 4
    assert list(arc["metrics"]) == ["acc,none", "acc_norm,none"]
    for key, m in arc["metrics"].items():
        x = np.asarray(arc["per_item"][key])
        want = stats.cluster_bootstrap(x, units, rng, n_boot=300)
        assert (m["value"], m["interval"], m["n"], m["n_units"]) == (
            x.mean(), "cluster_bootstrap", N, 4,
        )  # fmt: skip
        assert (m["lo"], m["hi"], m["se"]) == (want.lo, want.hi, want.se)
        w = stats.wilson_interval(int(x.sum()), N)
        assert m["iid_interval"] == {"lo": w.lo, "hi": w.hi, "method": "wilson"}
    plain = _evaluate(gpt2, tok, arc_dir)["tasks"]["arc_easy"]
    assert plain["per_item"] == arc["per_item"]  # the same scores: only the units differ
    assert (plain["units"], plain["metrics"]["acc,none"]["interval"]) == (None, "wilson")


def test_a_document_without_the_cluster_key_is_one_line(gpt2, tok, tmp_path):
    docs = _arc()
    del docs[5]["passage"]
    H.write_tasks(tmp_path, tasks={"arc_easy": ("arc/arc_easy.yaml", {"test": docs})})
    with pytest.raises(ValueError) as e:
        _evaluate(gpt2, tok, tmp_path, cluster_key="passage")
    msg = str(e.value)
    assert msg.startswith(
        "task 'arc_easy': cluster key 'passage': expected the field in every document, got none "
        "in doc_id 5"
    )
    assert "\n" not in msg


def test_the_cli_cluster_key(gpt2, tok, arc_dir, tmp_path):
    folder = tmp_path / "hf"
    gpt2.save_pretrained(folder)
    tok.save_pretrained(folder)
    args = ["eval", "lmeval", "--tasks", "arc_easy", "--hf", folder, "--include-path", arc_dir,
            "--no-bundled", "--seed", 2, "--n-boot", 300, "--cluster-key", "passage"]  # fmt: skip
    r = CliRunner().invoke(app, [str(a) for a in [*args, "--json"]])
    assert r.exit_code == 0, r.output
    model, mtok = load(hf=folder)
    want = _evaluate(model, mtok, arc_dir, cluster_key="passage")
    assert json.loads(r.stdout) == json.loads(json.dumps(want))
    table = CliRunner().invoke(app, [str(a) for a in args])
    assert table.exit_code == 0, table.output
    m = want["tasks"]["arc_easy"]["metrics"]["acc,none"]
    line = next(s for s in table.stdout.splitlines() if "acc,none" in s)
    cells = [c for c in line.replace("│", " ").split() if c]
    assert cells == ["acc,none", f"{m['value']:.4f}", f"{m['lo']:.4f}", f"{m['hi']:.4f}",
                     "cluster_bootstrap", str(N), "4"]  # fmt: skip
    text = " ".join(table.stdout.split())
    assert "units: clusters of 'passage'" in text and "only 4 units" in text
    r = CliRunner().invoke(app, [str(a) for a in [*args[:-1], "nope"]])
    assert r.exit_code == 2 and "cluster key 'nope': expected the field" in " ".join(
        r.output.split()
    )


# ------------------------------------------------------------------------------- the kind


@pytest.fixture(scope="module")
def zoo(tmp_path_factory, gpt2, tok):
    """The demo's lee cloze task with a 'passage' on each validation document: the lee
    document its sentence comes from."""
    d = tmp_path_factory.mktemp("kind_clusters")
    train, val = lee_split()
    demo_task.write_cloze_task(d / "task", train[:2], val[:4])
    sents = {s: j for j, doc in enumerate(val[:4]) for s in demo_task.sentences([doc])}
    for split in ("train", "validation"):  # a JSON dataset's splits share their columns
        path = d / "task" / demo_task.SPLITS[split]
        docs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for doc in docs:
            true = doc["ctx_a"] + " " + doc["endings"][int(doc["label"])]
            doc["passage"] = f"lee-{sents.get(true, 'train')}"
        path.write_text("".join(json.dumps(doc) + "\n" for doc in docs), encoding="utf-8")
    gpt2.save_pretrained(d / "a", safe_serialization=True)
    tok.save_pretrained(d / "a")
    return d, [doc["passage"] for doc in docs]


def _entry(cluster_key: str | None) -> dict:
    """The manifest entry of the cloze task, ``options.cluster_key`` when given."""
    options = {} if cluster_key is None else {"cluster_key": cluster_key}
    return {"name": "cloze", "family": "hf", "kind": "lmeval", "checkpoint": "a",
            "data": "task/lee_cloze.yaml", "options": options}  # fmt: skip


def test_the_rows_units_are_the_declared_clusters(zoo):
    d, passages = zoo
    res = score_entry_result(_entry("passage"), seed=1, base_dir=d)
    row = res.row
    assert row["status"] == "ok", row["error"]
    n = len(passages)
    numbers = {p: g for g, p in enumerate(dict.fromkeys(passages))}
    assert res.units.tolist() == [numbers[p] for p in passages] and res.units.dtype == np.int64
    assert (row["interval"], row["n"], row["n_units"]) == ("cluster_bootstrap", n, 4)
    m = row["details"]["metrics"]["acc,none"]
    assert (row["value"], row["lo"], row["hi"]) == (m["value"], m["lo"], m["hi"])
    w = stats.wilson_interval(int(res.items.sum()), n)
    assert row["iid_interval"] == {"lo": w.lo, "hi": w.hi, "method": "wilson"}
    assert row["interval_warning"].startswith("only 4 units")
    assert row["details"]["cluster_key"] == "passage"
    plain = score_entry_result(_entry(None), seed=1, base_dir=d)
    assert plain.items.tolist() == res.items.tolist() and plain.units is None
    assert (plain.row["interval"], plain.row["n_units"]) == ("wilson", n)


def test_a_missing_cluster_key_is_an_error_row_naming_task_and_field(zoo):
    d, _ = zoo
    row = score_entry_result(_entry("chapter"), seed=1, base_dir=d).row
    assert row["status"] == "error"
    assert row["error"]["message"].startswith(
        "task 'lee_cloze': cluster key 'chapter': expected the field in every document"
    )


def test_the_kinds_interval_is_the_task_entry_or_wilson():
    details = {"task": "t"}
    res = {"cluster_key": "p", "units": ["a", "a", "b", "b"], "per_item": {"acc,none": [0, 1, 1, 1]},
           "metrics": {"acc,none": {"value": 0.75, "lo": 0.5, "hi": 1.0, "interval": "cluster_bootstrap",
                                    "n": 4, "n_units": 2, "se": 0.2, "warning": "only 2 units"}}}  # fmt: skip
    s = kind.row_scored(res, "acc,none", details, None, "entry 'x'")
    assert (s.method, s.interval.lo, s.interval.hi, s.interval.df, s.n_units) == (
        "cluster_bootstrap", 0.5, 1.0, 1, 2,
    )  # fmt: skip
    assert s.units.tolist() == [0, 0, 1, 1] and s.iid_interval.method == "wilson"
    single = dict(res, units=["a", "b", "c", "d"])
    s = kind.row_scored(single, "acc,none", details, None, "entry 'x'")
    w = stats.wilson_interval(3, 4)
    assert (s.method, s.interval.lo, s.interval.hi, s.units) == ("wilson", w.lo, w.hi, None)
