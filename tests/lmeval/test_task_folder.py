"""A kind-lmeval task folder (tinyllm.eval.kinds.lmeval.task_config / task_data_sha256): its
paths are relative to its own folder, so a copied folder scores the same numbers; its
data_sha256 covers every file that defines its documents; paths that leave it are refused."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tinyllm.data import lee_split
from tinyllm.eval.kinds.lmeval import entry_data_sha256, task_config, task_data_sha256
from tinyllm.eval.lmeval import demo_task
from tinyllm.eval.zoo import score_entry_items
from tinyllm.report import Entry, sha256_path

LIMIT = 4


def entry(**kw):
    return {
        "name": "cloze",
        "family": "hf",
        "kind": "lmeval",
        "checkpoint": "a",
        "data": "task/lee_cloze.yaml",
        "options": {"limit": LIMIT},
    } | kw


def cloze(d):
    train, val = lee_split()
    return demo_task.write_cloze_task(d, train[:1], val[:2])


def test_a_copied_task_folder_scores_the_same_numbers(tmp_path, gpt2, tok):
    zoo = tmp_path / "zoo"
    y = cloze(zoo / "task")
    gpt2.save_pretrained(zoo / "a", safe_serialization=True)
    tok.save_pretrained(zoo / "a")
    text = y.read_text()
    assert str(tmp_path) not in text and str(demo_task.bundled_tasks_dir()) not in text
    row, items = score_entry_items(entry(), seed=2, base_dir=zoo)
    assert row["status"] == "ok", row["error"]
    assert row["data_sha256"] == task_data_sha256(y) != sha256_path(y)
    moved = tmp_path / "elsewhere" / "zoo"
    shutil.copytree(zoo, moved)
    shutil.rmtree(zoo)  # the copy reads only its own files
    row2, items2 = score_entry_items(entry(), seed=2, base_dir=moved)
    assert row2["status"] == "ok", row2["error"]
    assert items2.tolist() == items.tolist()
    for k in ("value", "lo", "hi", "n", "data_sha256", "details"):
        assert row2[k] == row[k], k


def test_data_sha256_follows_every_file_that_defines_the_documents(tmp_path):
    d = tmp_path / "task"
    cloze(d)
    # top.yaml includes base.yaml (this folder) which includes lm-eval's bundled HellaSwag
    (d / "sub").mkdir()
    (d / "sub" / "base.yaml").write_text("include: hellaswag/hellaswag.yaml\nnum_fewshot: 0\n")
    top = d / "top.yaml"
    top.write_text(
        "include: sub/base.yaml\ntask: top\ndataset_path: json\n"
        "dataset_kwargs:\n  data_files:\n    validation: lee_cloze.validation.jsonl\n"
    )
    cfg = task_config(top)
    assert cfg["task"] == "top" and cfg["num_fewshot"] == 0 and callable(cfg["process_docs"])
    assert cfg["dataset_kwargs"]["data_files"] == {
        "validation": str(d / "lee_cloze.validation.jsonl")
    }
    h0 = task_data_sha256(top)
    data = d / "lee_cloze.validation.jsonl"
    kept = data.read_bytes()
    data.write_bytes(kept.replace(b'"label": "0"', b'"label": "1"', 1))
    h1 = task_data_sha256(top)
    data.write_bytes(kept)
    assert task_data_sha256(top) == h0 != h1
    (d / "sub" / "base.yaml").write_text("include: hellaswag/hellaswag.yaml\nnum_fewshot: 1\n")
    assert task_data_sha256(top) != h0
    # moving the folder changes nothing; other kinds hash their one data file
    shutil.copytree(d, tmp_path / "moved")
    assert task_data_sha256(tmp_path / "moved" / "top.yaml") == task_data_sha256(top)
    e = Entry.model_validate(entry(kind=None, family="gpt", data="x.bin"))
    assert entry_data_sha256(e, data) == sha256_path(data)


def test_data_sha256_follows_the_hook_files_beside_the_task(tmp_path):
    d = tmp_path / "task"
    y = cloze(d)
    h0 = task_data_sha256(y)
    (d / "utils.py").write_text("def process_docs(ds):\n    return ds\n")  # a !function hook
    h1 = task_data_sha256(y)
    (d / "utils.py").write_text("def process_docs(ds):\n    return ds.select([0])\n")
    h2 = task_data_sha256(y)
    assert len({h0, h1, h2}) == 3
    (d / "utils.py").unlink()
    assert task_data_sha256(y) == h0


def test_the_zoo_row_data_sha256_changes_with_a_data_file(tmp_path):
    """The hash is set before the checkpoint is read: an empty checkpoint folder is an error
    row that still carries it."""
    y = cloze(tmp_path / "task")
    (tmp_path / "a").mkdir()
    row, _ = score_entry_items(entry(), base_dir=tmp_path)
    h = task_data_sha256(y)
    data = tmp_path / "task" / "lee_cloze.validation.jsonl"
    data.write_text(data.read_text().replace('"label": "0"', '"label": "1"', 1))
    row2, _ = score_entry_items(entry(), base_dir=tmp_path)
    assert row["status"] == row2["status"] == "error"
    assert row["data_sha256"] == h != row2["data_sha256"] == task_data_sha256(y)


def _edit(y, **keys):
    doc = json.loads(y.read_text())
    y.write_text(json.dumps({**doc, **keys}))


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("absolute_data", "expected a path inside the task folder"),
        ("leaving_data", "expected a path inside the task folder"),
        ("linked_data", "expected a path through real folders"),
        ("linked_folder", "expected a path through real folders"),
        ("missing_data", "expected a regular file, got none"),
        ("absolute_include", "include: expected a path inside the task folder"),
        ("leaving_include", "include: expected a path inside the task folder"),
        ("unknown_include", "include: expected a file in the task's folder or one of lm-eval's"),
        ("cycle", "include: expected no include cycle"),
    ],
)
def test_paths_that_leave_the_folder_are_refused(tmp_path, case, message):
    d = tmp_path / "task"
    y = cloze(d)
    outside = tmp_path / "outside.jsonl"
    outside.write_text((d / "lee_cloze.validation.jsonl").read_text())
    files = {"train": "lee_cloze.train.jsonl"}
    if case == "absolute_data":
        _edit(y, dataset_kwargs={"data_files": {**files, "validation": str(outside)}})
    elif case == "leaving_data":
        _edit(y, dataset_kwargs={"data_files": {**files, "validation": "../outside.jsonl"}})
    elif case == "linked_data":
        (d / "v.jsonl").symlink_to(outside)
        _edit(y, dataset_kwargs={"data_files": {**files, "validation": "v.jsonl"}})
    elif case == "linked_folder":
        (d / "sub").symlink_to(tmp_path)
        _edit(y, dataset_kwargs={"data_files": {**files, "validation": "sub/outside.jsonl"}})
    elif case == "missing_data":
        _edit(y, dataset_kwargs={"data_files": ["nope.jsonl"]})
    elif case == "absolute_include":
        (tmp_path / "base.yaml").write_text("num_fewshot: 0\n")
        _edit(y, include=str(tmp_path / "base.yaml"))
    elif case == "leaving_include":
        (tmp_path / "base.yaml").write_text("num_fewshot: 0\n")
        _edit(y, include="../base.yaml")
    elif case == "unknown_include":
        _edit(y, include="no_such/task.yaml")
    elif case == "cycle":
        (d / "b.yaml").write_text(yaml.safe_dump({"include": y.name}))
        _edit(y, include="b.yaml")
    for fn in (task_config, task_data_sha256):
        with pytest.raises(ValueError, match=message) as err:
            fn(y)
        assert len(str(err.value).splitlines()) == 1 and str(y) in str(err.value)


def test_the_bundled_include_is_read_from_the_installed_lm_eval(tmp_path, monkeypatch):
    """The YAML names the bundled config relative to lm_eval/tasks; scoring reads it from
    wherever lm-eval is now (a venv moved elsewhere: a copy of its tasks folder here)."""
    y = cloze(tmp_path / "task")
    venv_tasks = tmp_path / "venv2" / "lm_eval" / "tasks"
    shutil.copytree(demo_task.bundled_tasks_dir() / "hellaswag", venv_tasks / "hellaswag")
    bundled = venv_tasks / demo_task.BUNDLED_TASK
    bundled.write_text(bundled.read_text().replace("acc_norm", "acc_bytes"))
    before = task_config(y)
    monkeypatch.setattr(demo_task, "bundled_tasks_dir", lambda: venv_tasks)
    after = task_config(y)
    metric = (
        {m["metric"] for m in before["metric_list"]},
        {m["metric"] for m in after["metric_list"]},
    )
    assert metric == ({"acc", "acc_norm"}, {"acc", "acc_bytes"})


def test_absolute_paths_and_an_inherited_task_name_score_as_lm_eval_reads_them(tmp_path):
    """What lm-eval accepts, a manifest entry accepts: an include and data files named by
    absolute paths (inside the task folder or lm-eval's bundled tasks), a YAML that takes its
    task: from its include; each scores the same documents as the zoo's relative YAML."""
    zoo = tmp_path / "zoo"
    y = cloze(zoo / "task")
    import lmeval_helpers as H

    m = H.tiny_gpt2(400, 0)
    m.save_pretrained(zoo / "a", safe_serialization=True)
    H.bpe_tokenizer().save_pretrained(zoo / "a")
    want_row, want = score_entry_items(entry(), seed=2, base_dir=zoo)
    assert want_row["status"] == "ok", want_row["error"]
    doc = json.loads(y.read_text())
    d = zoo / "task"
    absolute = {
        **doc,
        "include": str(demo_task.bundled_tasks_dir() / demo_task.BUNDLED_TASK),
        "dataset_kwargs": {"data_files": {k: str(d / v) for k, v in demo_task.SPLITS.items()}},
    }
    (d / "absolute.yaml").write_text(json.dumps(absolute))
    (d / "inherits.yaml").write_text(json.dumps({"include": y.name, "num_fewshot": 0}))
    for name in ("absolute.yaml", "inherits.yaml"):
        row, items = score_entry_items(entry(data=f"task/{name}"), seed=2, base_dir=zoo)
        assert row["status"] == "ok", row["error"]
        assert items.tolist() == want.tolist() and row["details"]["task"] == "lee_cloze"
        assert row["value"] == want_row["value"]
    assert task_config(d / "inherits.yaml")["task"] == "lee_cloze"
    assert task_data_sha256(d / "absolute.yaml") != task_data_sha256(y)


def test_data_outside_the_folder_is_read_when_options_include_path_names_its_folder(tmp_path):
    d = tmp_path / "task"
    y = cloze(d)
    elsewhere = tmp_path / "data"
    elsewhere.mkdir()
    val = elsewhere / "val.jsonl"
    val.write_text((d / "lee_cloze.validation.jsonl").read_text())
    _edit(y, dataset_kwargs={"data_files": {"validation": str(val)}})
    with pytest.raises(ValueError, match="name another folder in options.include_path"):
        task_config(y)
    e = Entry.model_validate(entry(options={"include_path": str(elsewhere)}))
    assert task_config(y, (elsewhere,))["dataset_kwargs"]["data_files"] == {"validation": str(val)}
    h0 = entry_data_sha256(e, y)
    val.write_text(val.read_text().replace('"label": "0"', '"label": "1"', 1))
    assert h0 != entry_data_sha256(e, y) == task_data_sha256(y, (elsewhere,))
