"""`tinyllm task import-lmeval`: a hand-made task written in both formats gives the same items and
the same per-item acc / acc_norm; lm-eval's own task loader (when installed) reads the same
contexts, choices and targets from the YAML."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tinyllm.cli import app
from tinyllm.eval import lm
from tinyllm.lmeval_import import TaskImportError, convert, import_task
from tinyllm.models import gpt
from tinyllm.tokens import ByteTokenizer

DOCS = [
    {
        "question": "  What do bees make? ",
        "choices": {"text": ["milk", "honey", "silk", "wax paper"], "label": ["A", "B", "C", "D"]},
        "answerKey": "B",
    },
    {
        "question": "Which is a planet?",
        "choices": {
            "text": ["Mars", "the Moon", "Sirius", "a comet"],
            "label": ["A", "B", "C", "D"],
        },
        "answerKey": "A",
    },
    {
        "question": "Water freezes at",
        "choices": {"text": ["100 C", "50 C", "0 C", "café"], "label": ["A", "B", "C", "D"]},
        "answerKey": "C",
    },
]

# the same three items, written by hand in tinyllm's format
HAND = [
    {
        "context": "Question: What do bees make?\nAnswer:",
        "choices": ["milk", "honey", "silk", "wax paper"],
        "gold": 1,
        "target_delimiter": " ",
    },
    {
        "context": "Question: Which is a planet?\nAnswer:",
        "choices": ["Mars", "the Moon", "Sirius", "a comet"],
        "gold": 0,
        "target_delimiter": " ",
    },
    {
        "context": "Question: Water freezes at\nAnswer:",
        "choices": ["100 C", "50 C", "0 C", "café"],
        "gold": 2,
        "target_delimiter": " ",
    },
]

ARC_YAML = """\
task: tiny_arc
dataset_path: json
dataset_kwargs:
  data_files:
    test: data/test.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{question | trim}}\\nAnswer:"
doc_to_choice: "{{choices.text}}"
doc_to_target: "{{choices.label.index(answerKey)}}"
metric_list:
  - metric: acc
  - metric: acc_norm
"""


@pytest.fixture
def arc(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "test.jsonl").write_text(
        "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in DOCS), encoding="utf-8"
    )
    y = tmp_path / "tiny_arc.yaml"
    y.write_text(ARC_YAML, encoding="utf-8")
    hand = tmp_path / "hand.jsonl"
    hand.write_text("".join(json.dumps(d) + "\n" for d in HAND), encoding="utf-8")
    return y, hand


def _strip(items):
    return [{k: v for k, v in it.items() if k not in ("doc_id", "_where")} for it in items]


def test_converted_task_equals_the_hand_written_one(arc):
    y, hand = arc
    assert _strip(convert(y)) == HAND
    assert [it["doc_id"] for it in convert(y)] == [0, 1, 2]
    assert _strip(lm.read_task(hand)) == HAND


@pytest.mark.parametrize("metric", ["acc", "acc_norm"])
def test_both_formats_give_identical_per_item_results(arc, tmp_path, metric):
    y, hand = arc
    out, n = import_task(y, tmp_path / "converted.jsonl")
    assert n == 3
    torch.manual_seed(0)
    model = gpt.Model(gpt.Config(block_size=64, n_layer=1, n_head=2, n_embd=16)).eval()
    tok = ByteTokenizer()
    a = lm.run_task(model, tok, out, metric, np.random.default_rng(0), n_boot=50)
    b = lm.run_task(model, tok, hand, metric, np.random.default_rng(0), n_boot=50)
    np.testing.assert_array_equal(a.per_item, b.per_item)
    # and the same log-likelihoods underneath, delimiter included
    la = lm.choice_lls(model, tok, lm.read_task(out))
    lb = lm.choice_lls(model, tok, HAND)
    for x, z in zip(la, lb, strict=True):
        np.testing.assert_array_equal(x, z)


def test_include_folder_dataset_lists_and_answer_strings(tmp_path):
    """A base YAML included by the task; data from a folder of <split>.jsonl; choices as a YAML
    list; the target a column holding the answer text; a regex_replace filter."""
    d = tmp_path / "ds"
    d.mkdir()
    docs = [{"ctx": "The sky  is", "ans": "blue"}, {"ctx": "Grass is", "ans": "green"}]
    (d / "validation.jsonl").write_text("".join(json.dumps(x) + "\n" for x in docs))
    (tmp_path / "_base.yaml").write_text(
        "output_type: multiple_choice\ndoc_to_choice: [blue, green, red]\ntarget_delimiter: ' '\n"
    )
    y = tmp_path / "colors.yaml"
    y.write_text(
        textwrap.dedent(
            """\
            include: _base.yaml
            task: colors
            dataset_path: ds
            validation_split: validation
            doc_to_text: "{{ctx | regex_replace('  +', ' ')}}"
            doc_to_target: ans
            """
        )
    )
    got = _strip(convert(y))
    assert got == [
        {
            "context": "The sky is",
            "choices": ["blue", "green", "red"],
            "gold": 0,
            "target_delimiter": " ",
        },
        {
            "context": "Grass is",
            "choices": ["blue", "green", "red"],
            "gold": 1,
            "target_delimiter": " ",
        },
    ]


@pytest.mark.parametrize(
    "yaml_text, match",
    [
        ("output_type: generate_until\n", "expected 'multiple_choice'"),
        ("output_type: multiple_choice\ndataset_path: hellaswag\n", "never downloaded"),
        (
            "output_type: multiple_choice\nprocess_docs: !function utils.process_docs\n",
            "process_docs",
        ),
        ("output_type: multiple_choice\nnum_fewshot: 5\n", "num_fewshot"),
    ],
)
def test_unsupported_tasks_are_refused_by_name(tmp_path, yaml_text, match):
    y = tmp_path / "t.yaml"
    base = "doc_to_text: q\ndoc_to_choice: [a, b]\ndoc_to_target: 0\n"
    y.write_text(yaml_text + base)
    with pytest.raises(TaskImportError, match=match) as e:
        convert(y)
    assert str(y) in str(e.value) or "hellaswag" in str(e.value)


def test_cli_import_then_eval(arc, tmp_path):
    y, _ = arc
    out = tmp_path / "cli.jsonl"
    r = CliRunner().invoke(app, ["task", "import-lmeval", str(y), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "wrote 3 items" in r.stdout
    assert _strip(lm.read_task(out)) == HAND
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "output_type: multiple_choice\ndataset_path: hellaswag\n"
        "doc_to_text: q\ndoc_to_choice: [a, b]\ndoc_to_target: 0\n"
    )
    r = CliRunner().invoke(app, ["task", "import-lmeval", str(bad), "--out", str(out)])
    assert r.exit_code == 2 and "hellaswag" in r.output and "Traceback" not in r.output


def test_lm_eval_reads_the_same_items(arc, monkeypatch):
    """Differential: lm-eval's own ConfigurableTask on the same YAML and data."""
    tasks = pytest.importorskip("lm_eval.tasks")
    y, _ = arc
    monkeypatch.chdir(y.parent)  # datasets reads data_files from the working directory
    tm = tasks.TaskManager(include_path=str(y.parent), include_defaults=False)
    task = tasks.get_task_dict(["tiny_arc"], tm)["tiny_arc"]
    docs = list(task.test_docs())
    ours = convert(y)
    for doc, it in zip(docs, ours, strict=True):
        assert task.doc_to_text(doc) == it["context"]
        assert task.doc_to_choice(doc) == it["choices"]
        assert task.doc_to_target(doc) == it["gold"]
        assert task.config.target_delimiter == it["target_delimiter"]
