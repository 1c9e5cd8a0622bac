"""Inputs on the lm-eval path that lm-eval itself mishandles, each refused in one line before
anything is opened: a FIFO named *.yaml in the include path (lm-eval's TaskManager hangs on it),
a 2 GB sparse data file (lm-eval reads it for minutes, then fails with StopIteration),
--num-fewshot 1000000000 (lm-eval: "Sample larger than population"), and --include-path without
lm-eval installed (unguarded, a bare ModuleNotFoundError)."""

from __future__ import annotations

import json
import os
import re
import sys
import threading

import lmeval_helpers as H
import pytest
from typer.testing import CliRunner

from tinyllm.cli import app
from tinyllm.data import lee_split
from tinyllm.eval.lmeval import demo_task
from tinyllm.eval.lmeval.run import evaluate
from tinyllm.eval.lmeval.task_files import MAX_DATA_BYTES
from tinyllm.eval.zoo import score_entry_items


class FifoWatch:
    """A FIFO with a writer waiting for a reader: ``opened()`` tells whether anything opened it
    for reading (the writer then returns at once, so a reader that opens it never hangs)."""

    def __init__(self, path):
        self.path = path
        os.mkfifo(path)
        self.thread = threading.Thread(target=lambda: open(path, "wb").close(), daemon=True)
        self.thread.start()

    def opened(self) -> bool:
        self.thread.join(timeout=0.5)
        return not self.thread.is_alive()

    def close(self) -> None:
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # lets the waiting writer return
        self.thread.join()
        os.close(fd)


@pytest.fixture
def fifo(tmp_path):
    made = []

    def make(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        made.append(FifoWatch(path))
        return made[-1]

    yield make
    for f in made:
        f.close()


def _cli(args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_a_fifo_yaml_in_the_include_path_is_refused_unopened(gpt2, tok, tmp_path, fifo):
    (tmp_path / "tasks").mkdir()
    d = H.write_tasks(tmp_path / "tasks", ["arc_easy"])
    trap = fifo(d / "sub" / "trap.yaml")
    with pytest.raises(ValueError) as e:
        evaluate(["arc_easy"], gpt2, tok, include_path=d, include_defaults=False, limit=1)
    assert (
        str(e.value) == f"include_path: task YAML {trap.path}: expected a regular file, got a FIFO"
    )
    assert not trap.opened()


def test_the_cli_refuses_a_fifo_in_the_include_path_in_one_line(gpt2, tok, tmp_path, fifo):
    (tmp_path / "tasks").mkdir()
    d = H.write_tasks(tmp_path / "tasks", ["arc_easy"])
    trap = fifo(d / "trap.yaml")
    gpt2.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    r = _cli(["eval", "lmeval", "--tasks", "arc_easy", "--hf", tmp_path / "m", "--include-path",
              d, "--no-bundled", "--limit", 1])  # fmt: skip
    assert r.exit_code == 2, r.output
    assert (
        r.output.strip()
        == f"error: include_path: task YAML {trap.path}: expected a regular file, got a FIFO"
    )
    assert not trap.opened()


def test_an_included_fifo_outside_the_include_path_is_never_opened(gpt2, tok, tmp_path, fifo):
    (tmp_path / "tasks").mkdir()
    d = H.write_tasks(tmp_path / "tasks", ["arc_easy"])
    trap = fifo(tmp_path / "elsewhere" / "base.yaml")
    cfg = json.loads((d / "arc_easy.yaml").read_text())
    (d / "arc_easy.yaml").write_text(
        json.dumps({**cfg, "include": [cfg["include"], str(trap.path)]})
    )
    with pytest.raises(ValueError) as e:
        evaluate(["arc_easy"], gpt2, tok, include_path=d, include_defaults=False, limit=1)
    assert str(e.value) == (
        f"{d / 'arc_easy.yaml'}: include: task YAML {trap.path}: expected a regular file, got a FIFO"
    )
    assert not trap.opened()


def test_a_data_file_over_the_limit_is_refused_before_it_is_read(gpt2, tok, tmp_path, monkeypatch):
    d = H.write_tasks(tmp_path, ["arc_easy"])
    monkeypatch.setenv("TINYLLM_LMEVAL_MAX_DATA_BYTES", "100")
    with pytest.raises(ValueError) as e:
        evaluate(["arc_easy"], gpt2, tok, include_path=d, include_defaults=False, limit=1)
    size = (d / "arc_easy.train.jsonl").stat().st_size
    assert str(e.value) == (
        f"arc_easy: data file {d / 'arc_easy.train.jsonl'}: expected at most 100 bytes "
        f"(TINYLLM_LMEVAL_MAX_DATA_BYTES sets another limit), got {size}"
    )


def _cloze_zoo(tmp_path, gpt2, tok):
    zoo = tmp_path / "zoo"
    train, val = lee_split()
    y = demo_task.write_cloze_task(zoo / "task", train[:1], val[:2])
    gpt2.save_pretrained(zoo / "a", safe_serialization=True)
    tok.save_pretrained(zoo / "a")
    return zoo, y


def _entry(**options):
    return {"name": "cloze", "family": "hf", "kind": "lmeval", "checkpoint": "a",
            "data": "task/lee_cloze.yaml", "options": {"limit": 2, **options}}  # fmt: skip


def test_a_sparse_data_file_over_256_mib_is_an_error_row_at_once(tmp_path, gpt2, tok):
    zoo, y = _cloze_zoo(tmp_path, gpt2, tok)
    data = y.parent / demo_task.SPLITS["validation"]
    with open(data, "r+b") as f:
        f.truncate(MAX_DATA_BYTES + 1)  # sparse: no disk used
    row, _ = score_entry_items(_entry(), base_dir=zoo)
    assert row["status"] == "error"
    assert row["error"]["message"] == (
        f"{y}: dataset_kwargs.data_files.validation: expected at most {MAX_DATA_BYTES} bytes "
        f"(TINYLLM_LMEVAL_MAX_DATA_BYTES sets another limit), got {MAX_DATA_BYTES + 1}"
    )


def test_more_few_shot_examples_than_the_task_has_is_one_line(gpt2, tok, task_dir, tmp_path):
    with pytest.raises(ValueError) as e:
        evaluate(["arc_easy"], gpt2, tok, include_path=task_dir, include_defaults=False,
                 limit=1, num_fewshot=10**9)  # fmt: skip
    assert str(e.value) == (
        "arc_easy: num_fewshot: expected at most 6 (the task's few-shot documents), got 1000000000"
    )
    zoo, y = _cloze_zoo(tmp_path, gpt2, tok)
    pool = len((y.parent / demo_task.SPLITS["train"]).read_text().splitlines())
    shots = pool - 1  # hellaswag names no test split: lm-eval draws one more, for the scored doc
    row, _ = score_entry_items(_entry(num_fewshot=10**9), base_dir=zoo)
    assert row["status"] == "error" and row["error"]["type"] == "ValueError"
    assert row["error"]["message"] == (
        f"lee_cloze: num_fewshot: expected at most {shots} (the task's {pool} few-shot documents, "
        "one held back for the scored document), got 1000000000"
    )
    row, _ = score_entry_items(_entry(num_fewshot=shots), base_dir=zoo)
    assert row["status"] == "ok", row["error"]  # the most it can draw still runs


def test_without_lm_eval_an_include_path_names_the_extra(tmp_path, monkeypatch):
    """lm-eval not installed at all (no module of it importable or found): a task that a YAML
    of --include-path names says which extra to install, not ModuleNotFoundError."""
    import importlib.util

    train, val = lee_split()
    d = demo_task.write_cloze_task(tmp_path / "task", train[:1], val[:2]).parent
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "lm_eval" else real(n, *a)
    )
    for name in [m for m in sys.modules if re.match(r"lm_eval(\.|$)", m)]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    r = _cli(["eval", "lmeval", "--tasks", demo_task.TASK, "--hf", tmp_path, "--include-path",
              d, "--no-bundled"])  # fmt: skip
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: lm_eval: expected lm-evaluation-harness to be installed")
    assert "tinyllm[lmeval]" in r.output and len(r.output.strip().splitlines()) == 1
