"""`tinyllm task import-lmeval` and lm-eval's ``include:``: a list of files, which file a refusal
names, where relative data paths are read from."""

from __future__ import annotations

import json

import pytest

from tinyllm.lmeval_import import TaskImportError, convert

DOCS = [{"q": "The sky is", "a": 0}, {"q": "Grass is", "a": 1}]


def _data(path):
    path.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")


def _tree(tmp_path):
    """outer/task.yaml includes outer/sub/_base.yaml; returns (outer dir, sub dir)."""
    outer = tmp_path / "outer"
    sub = outer / "sub"
    sub.mkdir(parents=True)
    (sub / "_base.yaml").write_text(
        "output_type: multiple_choice\ndoc_to_text: q\ndoc_to_choice: [blue, green]\n"
        "doc_to_target: a\n",
        encoding="utf-8",
    )
    return outer, sub


def test_list_include_merges_in_order_as_lm_eval_does(tmp_path):
    outer, sub = _tree(tmp_path)
    (sub / "_b.yaml").write_text("doc_to_choice: [red, green]\ntarget_delimiter: '-'\n")
    _data(outer / "d.jsonl")
    y = outer / "task.yaml"
    y.write_text(
        f"include: [sub/_base.yaml, sub/_b.yaml]\ntask: t\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {outer / 'd.jsonl'}\ntest_split: test\n"
        "target_delimiter: ' '\n",
        encoding="utf-8",
    )
    got = convert(y)
    assert [it["choices"] for it in got] == [["red", "green"]] * 2  # the later include wins
    assert {it["target_delimiter"] for it in got} == {" "}  # the including file wins
    from lm_eval.tasks._yaml_loader import load_yaml  # lm-eval's own merge (dev extra)

    ref = load_yaml(y, resolve_func=lambda *a, **k: None, recursive=True)
    assert ref["doc_to_choice"] == ["red", "green"] and ref["target_delimiter"] == " "


@pytest.mark.parametrize("inc", ["[]", "[3]", "{a: b}"])
def test_bad_include_is_refused(tmp_path, inc):
    y = tmp_path / "t.yaml"
    y.write_text(f"include: {inc}\n")
    with pytest.raises(TaskImportError, match=f"{y}: include: expected a file name or a list"):
        convert(y)


def test_refusal_names_the_file_that_set_the_key(tmp_path):
    outer, sub = _tree(tmp_path)
    y = outer / "task.yaml"
    y.write_text("include: sub/_base.yaml\nnum_fewshot: 5\n")
    with pytest.raises(TaskImportError) as e:
        convert(y)
    assert str(e.value).startswith(f"{y}: num_fewshot")
    (sub / "_base.yaml").write_text(
        (sub / "_base.yaml").read_text() + "process_docs: !function utils.process_docs\n"
    )
    y.write_text("include: sub/_base.yaml\n")
    with pytest.raises(TaskImportError) as e:
        convert(y)
    assert str(e.value).startswith(f"{sub / '_base.yaml'}: process_docs")


def test_relative_data_path_from_the_working_directory_then_the_task_file(tmp_path, monkeypatch):
    outer, _ = _tree(tmp_path)
    _data(outer / "d.jsonl")  # beside the task file, not beside the included one
    y = outer / "task.yaml"
    y.write_text(
        "include: sub/_base.yaml\ndataset_path: json\n"
        "dataset_kwargs:\n  data_files:\n    test: d.jsonl\ntest_split: test\n"
    )
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert [it["gold"] for it in convert(y)] == [0, 1]
    # lm-eval (datasets) reads a relative path from the working directory: that one wins
    (elsewhere / "d.jsonl").write_text(json.dumps({"q": "Snow is", "a": 1}) + "\n")
    assert [it["context"] for it in convert(y)] == ["Snow is"]
