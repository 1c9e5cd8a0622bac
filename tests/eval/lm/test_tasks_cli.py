"""`tinyllm eval task` on a task file with clusters (formats/task-jsonl.md, 'cluster'): its JSON
is run_task's interval over units, its table says which interval, over how many units, and the
item-level interval beside it; a bad cluster is one line naming the file, field and line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from lm_helpers import TASK, tiny_gpt2, write_task
from typer.testing import CliRunner

from tinyllm.cli import app
from tinyllm.eval import lm
from tinyllm.tokens import ByteTokenizer

transformers = pytest.importorskip("transformers")


def _invoke(args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    tiny_gpt2(vocab=300, seed=1).save_pretrained(d)
    return d


def test_eval_task_with_clusters_reports_the_bootstrap_over_clusters(tmp_path, hf_dir):
    items = [{**it, "cluster": f"p{i // 4}"} for i, it in enumerate(TASK * 6)]  # 6 of 4 items
    path = write_task(tmp_path / "task.jsonl", items)
    base = ["eval", "task", "--hf", hf_dir, "--task", path, "--tokenizer", "byte"]
    r = _invoke([*base, "--metric", "acc", "--seed", 4, "--n-boot", 200, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, use_safetensors=True)
    want = lm.run_task(model.eval(), ByteTokenizer(), path, "acc", np.random.default_rng(4), 200)
    assert (got["value"], got["lo"], got["hi"]) == (want.value, want.lo, want.hi)
    assert (got["interval"], got["n"], got["n_units"]) == ("cluster_bootstrap", 24, 6)
    assert got["iid_interval"] == {"lo": want.iid.lo, "hi": want.iid.hi, "method": "wilson"}
    assert got["interval_warning"].startswith("only 6 units")
    table = _invoke([*base, "--metric", "acc", "--seed", 4, "--n-boot", 200])
    assert table.exit_code == 0, table.output
    text = " ".join(table.stdout.split())
    assert "24 items in 6 units; cluster_bootstrap interval, 200 resamples, seed 4" in text
    assert f"over items (wilson): [{want.iid.lo:.4f}, {want.iid.hi:.4f}]" in text
    assert "only 6 units" in text


def test_eval_task_without_clusters_is_wilson_over_items(tmp_path, hf_dir):
    path = write_task(tmp_path / "task.jsonl", TASK * 3)
    r = _invoke(["eval", "task", "--hf", hf_dir, "--task", path, "--tokenizer", "byte"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert text.endswith("12 items in 12 units; wilson interval") and "resamples" not in text


def test_eval_task_names_the_file_field_and_line_of_a_bad_cluster(tmp_path, hf_dir):
    items = [{**TASK[0], "cluster": "a"}, {**TASK[1], "cluster": 2.5}]
    path = write_task(tmp_path / "task.jsonl", items)
    r = _invoke(["eval", "task", "--hf", hf_dir, "--task", path, "--tokenizer", "byte"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    msg = " ".join(r.output.split())
    assert f"{path}:2: expected 'cluster' to be a string or an integer" in msg
