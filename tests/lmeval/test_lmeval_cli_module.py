"""lm-eval's own CLI with our backend: ``python -m tinyllm.eval.lmeval.cli --model tinyllm
--model_args pretrained=DIR`` in a subprocess, offline, on a local JSON task; its files are
lm-eval's, read by tinyllm's reader of lm-eval logs, its value our engine's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tinyllm import lmeval_logs
from tinyllm.eval.lmeval import run
from tinyllm.models import hf as hf_family


@pytest.fixture(scope="module")
def folder(gpt2, tok, tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_module_hf")
    gpt2.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_lm_eval_cli_with_model_tinyllm(folder, task_dir, tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    env["HF_DATASETS_CACHE"] = str(tmp_path / "ds")
    cmd = [sys.executable, "-m", "tinyllm.eval.lmeval.cli", "--model", "tinyllm",
           "--model_args", f"pretrained={folder},dtype=float32,device=cpu", "--batch_size", "2",
           "--tasks", "arc_easy", "--include_path", str(task_dir), "--limit", "4",
           "--output_path", str(out), "--log_samples"]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = lmeval_logs.read_run(out)  # lm-eval's layout, samples matching the results file
    assert got.model == str(folder)
    log = got.tasks[("arc_easy", "none")]
    want = run.evaluate(
        ["arc_easy"],
        hf_family.load(folder, quiet=True),
        hf_family.load_tokenizer(folder),
        include_path=task_dir,
        include_defaults=False,
        limit=4,
    )["tasks"]["arc_easy"]
    assert log.n == 4
    assert log.values["acc_norm"].tolist() == want["per_item"]["acc_norm,none"]
    assert log.reported["acc_norm"] == pytest.approx(want["metrics"]["acc_norm,none"]["value"])
