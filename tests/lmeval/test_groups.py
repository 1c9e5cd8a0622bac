"""Group aggregates on the lm-eval path: a local group of two MMLU subjects (10 and 11
documents) reports lm-eval's own aggregate as a row with its interval, weighted by size
(lm-eval's default) or not, and `tinyllm eval lmeval` prints it."""

from __future__ import annotations

import json

import lmeval_helpers as H
import numpy as np
import pytest
from typer.testing import CliRunner

from tinyllm import stats
from tinyllm.cli import app
from tinyllm.eval.lmeval.run import evaluate

SUBJECTS = {
    "mmlu_anatomy": (
        "mmlu/default/mmlu_anatomy.yaml",
        {"test": H.mmlu_docs(10), "dev": H.mmlu_docs(5, off=20)},
    ),
    "mmlu_astronomy": (
        "mmlu/default/mmlu_astronomy.yaml",
        {"test": H.mmlu_docs(11, off=3), "dev": H.mmlu_docs(5, off=20)},
    ),
}


def _group(name: str, by_size: bool) -> dict:
    return {
        "group": name,
        "task": list(SUBJECTS),
        "aggregate_metric_list": [{"metric": "acc", "weight_by_size": by_size}],
    }


@pytest.fixture(scope="module")
def groups_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("lmeval_groups")
    H.write_tasks(d, tasks=SUBJECTS)
    H.write_tasks(d, ["lambada_openai"])
    (d / "two_by_size.yaml").write_text(json.dumps(_group("two_by_size", True)))
    (d / "two_flat.yaml").write_text(json.dumps(_group("two_flat", False)))
    return d


def _lm_eval_own(model, tok, d, group):
    import lm_eval
    from lm_eval.tasks import TaskManager

    from tinyllm.eval.lmeval.backend import TinyLLM

    return lm_eval.simple_evaluate(
        model=TinyLLM(model, tok),
        tasks=[group],
        task_manager=TaskManager(include_path=str(d), include_defaults=False),
        bootstrap_iters=0,
    )["results"]


def test_a_group_reports_lm_evals_aggregate_with_its_interval(gpt2, tok, groups_dir):
    kw = dict(include_path=groups_dir, include_defaults=False, n_boot=300)
    out = evaluate(["two_by_size"], gpt2, tok, **kw)
    tasks = out["tasks"]
    assert set(tasks) == set(SUBJECTS) and set(out["groups"]) == {"two_by_size"}
    k = {t: int(sum(tasks[t]["per_item"]["acc,none"])) for t in SUBJECTS}
    means = [k[t] / tasks[t]["n"] for t in SUBJECTS]
    assert [tasks[t]["n"] for t in SUBJECTS] == [10, 11] and len(set(means)) == 2

    # weighted by size: the pooled proportion of the 21 documents, with its Wilson interval
    g = out["groups"]["two_by_size"]
    own = _lm_eval_own(gpt2, tok, groups_dir, "two_by_size")["two_by_size"]
    m = g["metrics"]["acc,none"]
    iv = stats.wilson_interval(sum(k.values()), 21)
    assert (g["n"], g["tasks"], own["sample_len"]) == (21, list(SUBJECTS), 21)
    assert m["value"] == own["acc,none"] == pytest.approx(sum(k.values()) / 21, abs=1e-12)
    assert (m["lo"], m["hi"], m["interval"], m["n"]) == (iv.lo, iv.hi, "wilson", 21)

    # unweighted: the mean of the two subjects' means, bootstrapped within each subject
    flat = evaluate(["two_flat"], gpt2, tok, **kw)
    assert flat["tasks"] == tasks  # lm-eval runs a task in one group per call
    f = flat["groups"]["two_flat"]["metrics"]["acc,none"]
    own = _lm_eval_own(gpt2, tok, groups_dir, "two_flat")["two_flat"]
    assert f["value"] == own["acc,none"] == pytest.approx(np.mean(means), abs=1e-12)
    assert (f["interval"], f["n"]) == ("cluster_bootstrap", 21)
    assert 0 <= f["lo"] < f["value"] < f["hi"] <= 1
    beside = evaluate(["lambada_openai", "two_flat"], gpt2, tok, **kw)["groups"]["two_flat"]
    assert beside["metrics"]["acc,none"] == f  # the group's own stream, whatever runs beside it


def test_the_cli_prints_the_group_row(groups_dir, tmp_path, gpt2, tok):
    gpt2.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    args = ["eval", "lmeval", "--tasks", "two_by_size", "--hf", tmp_path, "--include-path",
            groups_dir, "--no-bundled"]  # fmt: skip
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    assert "two_by_size (group of 2 tasks)" in r.stdout
    lines = r.stdout.splitlines()
    title = next(i for i, ln in enumerate(lines) if "two_by_size (group" in ln)
    row = next(ln for ln in lines[title:] if "acc,none" in ln)
    assert "wilson" in row and "21" in row
