"""`eval lmeval` with lm-eval's spellings (--model_args, --batch_size, --num_fewshot,
--include_path, --output_path, --log_samples) writes lm-eval's results and samples files: the
key names of lm-eval's own HFLM run on the same task, our intervals in a ``tinyllm`` block,
read back by tinyllm's reader of lm-eval logs."""

from __future__ import annotations

import json
from pathlib import Path

import lm_eval
import pytest
from lm_eval.loggers import EvaluationTracker
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager
from lm_eval.utils import sanitize_model_name
from typer.testing import CliRunner

from tinyllm import lmeval_logs
from tinyllm.cli import app


def _invoke(args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def folder(gpt2, tok, tmp_path_factory):
    d = tmp_path_factory.mktemp("results_hf")
    gpt2.save_pretrained(d)
    tok.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def written(folder, task_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    args = ["eval", "lmeval", "--tasks", "arc_easy", "--model_args",
            f"pretrained={folder},dtype=float32,device=cpu", "--batch_size", 2,
            "--include_path", task_dir, "--no-bundled", "--limit", 5, "--num_fewshot", 0,
            "--output_path", out, "--log_samples", "--json"]  # fmt: skip
    r = _invoke(args)
    assert r.exit_code == 0, r.output
    return out, json.loads(r.stdout)


@pytest.fixture(scope="module")
def hflm_file(gpt2, tok, task_dir, tmp_path_factory):
    """lm-eval's own HFLM run of the same task, written by lm-eval's EvaluationTracker."""
    out = tmp_path_factory.mktemp("hflm")
    tracker = EvaluationTracker(output_path=str(out))
    tm = TaskManager(include_path=str(task_dir), include_defaults=False)
    res = lm_eval.simple_evaluate(
        model=HFLM(pretrained=gpt2, tokenizer=tok, batch_size=1), tasks=["arc_easy"],
        task_manager=tm, limit=5, num_fewshot=0, log_samples=True,
        evaluation_tracker=tracker, bootstrap_iters=0,
    )  # fmt: skip
    samples = res.pop("samples")
    tracker.save_results_aggregated(results=res, samples=samples)
    tracker.save_results_samples(task_name="arc_easy", samples=samples["arc_easy"])
    return next(out.rglob("results_*.json")), next(out.rglob("samples_arc_easy_*.jsonl"))


def test_results_file_layout_and_values(written, folder):
    out, got = written
    model_dir = out / sanitize_model_name(str(folder))
    (results_file,) = model_dir.glob("results_*.json")
    date_id = results_file.stem.removeprefix("results_")
    assert (model_dir / f"samples_arc_easy_{date_id}.jsonl").is_file()
    doc = json.loads(results_file.read_text())
    row, ours = doc["results"]["arc_easy"], got["tasks"]["arc_easy"]["metrics"]
    for metric in ("acc", "acc_norm"):
        m = ours[f"{metric},none"]
        assert row[f"{metric},none"] == pytest.approx(m["value"])
        assert row[f"{metric}_stderr,none"] == pytest.approx(m["se"])  # ours, not "N/A"
        block = doc["tinyllm"]["tasks"]["arc_easy"][f"{metric},none"]
        assert (block["lo"], block["hi"], block["n"]) == (m["lo"], m["hi"], 5)
        assert block["interval"] == "wilson" and block["lo"] < m["value"] < block["hi"]
    assert doc["n-samples"]["arc_easy"]["effective"] == 5
    assert doc["model_name"] == str(folder) and doc["model_source"] == "tinyllm"
    # tinyllm's reader of lm-eval logs validates the samples against the results file
    run = lmeval_logs.read_run(out)
    log = run.tasks[("arc_easy", "none")]
    assert log.n == 5 and run.model == str(folder)
    assert log.values["acc"].mean() == pytest.approx(ours["acc,none"]["value"])
    per_item = got["tasks"]["arc_easy"]["per_item"]["acc,none"]
    assert log.values["acc"].tolist() == pytest.approx(per_item)


def test_same_key_names_as_hflm(written, hflm_file):
    out, _ = written
    ours = json.loads(next(out.rglob("results_*.json")).read_text())
    ref = json.loads(hflm_file[0].read_text())
    assert set(ref) <= set(ours) and set(ours) - set(ref) == {"tinyllm"}
    assert set(ours["results"]["arc_easy"]) == set(ref["results"]["arc_easy"])
    assert ours["n-samples"] == ref["n-samples"]
    ours_line = json.loads(next(out.rglob("samples_arc_easy_*.jsonl")).read_text().splitlines()[0])
    ref_line = json.loads(hflm_file[1].read_text().splitlines()[0])
    assert set(ours_line) == set(ref_line)
    assert ours_line["doc_hash"] == ref_line["doc_hash"]
    assert ours_line["prompt_hash"] == ref_line["prompt_hash"]


def test_log_samples_needs_output_path(folder, task_dir):
    r = _invoke(["eval", "lmeval", "--tasks", "arc_easy", "--hf", folder, "--log_samples"])
    assert r.exit_code != 0 and "expected --output-path DIR with --log-samples" in r.output


def test_model_args_and_hf_conflict_one_line(folder, task_dir, tmp_path):
    r = _invoke(["eval", "lmeval", "--tasks", "arc_easy", "--hf", tmp_path,
                 "--model_args", f"pretrained={folder}"])  # fmt: skip
    assert r.exit_code != 0
    assert f"expected one model, got --model_args pretrained={folder} and --hf {tmp_path}" in (
        " ".join(r.output.split())
    )
    assert not list(Path(tmp_path).iterdir())
