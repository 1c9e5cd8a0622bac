"""tinyllm/eval/lm/tasks.py: task files (formats/task-jsonl.md), predictions and run_task's
accuracy with its interval over units (docs/definitions.md, "Multiple choice", "Intervals").

Oracles: docs/definitions.md, multiple choice's bigram (per-item scores by hand, ties to the first choice),
the Wilson interval of items that are their own units, tinyllm.stats.cluster_bootstrap with the
documented defaults on the caller's rng, and the exact messages naming the file and line.
The task file's 'cluster' key: tests/eval/lm/test_tasks_units.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from lm_helpers import ITEMS, SPEC_S3_LL, TASK, Table, TableModel, spec_choice_table, write_task

from tinyllm import stats
from tinyllm.eval import lm
from tinyllm.tokens import ByteTokenizer


def _write(path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_run_task_per_item_scores_ties_and_metrics(tmp_path):
    path = write_task(tmp_path / "task.jsonl", TASK)
    m, tok = TableModel(spec_choice_table()), ByteTokenizer()
    acc = lm.run_task(m, tok, path, "acc", np.random.default_rng(7), n_boot=200)
    norm = lm.run_task(m, tok, path, "acc_norm", np.random.default_rng(7), n_boot=200)
    np.testing.assert_array_equal(acc.per_item, [0, 0, 1, 1])
    np.testing.assert_array_equal(norm.per_item, [1, 0, 1, 1])
    assert (acc.value, acc.n, norm.value) == (0.5, 4, 0.75)
    assert acc.per_item.dtype == np.float64


def test_run_task_without_clusters_is_wilson_and_draws_nothing():
    """Every item its own unit (no 'cluster' key): the Wilson interval of (k, n), as
    docs/definitions.md names it for one 0/1 item per unit; the caller's rng is not drawn."""
    m, tok = TableModel(spec_choice_table()), ByteTokenizer()
    rng = np.random.default_rng(11)
    before = rng.bit_generator.state
    r = lm.run_task(m, tok, TASK * 5, "acc_norm", rng, n_boot=300)
    assert r.per_item.tolist() == [1.0, 0.0, 1.0, 1.0] * 5
    want = stats.wilson_interval(15, 20)
    assert (r.value, r.lo, r.hi) == (0.75, want.lo, want.hi)
    assert (round(r.lo, 4), round(r.hi, 4)) == (0.5313, 0.8881)
    assert (r.method, r.n_units, r.units, r.labels, r.iid) == ("wilson", 20, None, (), None)
    assert rng.bit_generator.state == before


def test_run_task_clustered_default_is_1000_draws_from_the_callers_rng():
    """Units of two items each: the cluster bootstrap, 1000 resamples by default, drawn from
    the caller's rng (which advances exactly as the stats call advances its own); a 1001-draw
    interval differs, so the default is seen."""
    wrong = {"context": "a", "choices": ["bb", "c"], "gold": 0}  # acc picks "c": 0
    right = {"context": "a", "choices": ["c", "bb"], "gold": 0}  # 1
    scores = [0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 0]
    items = [{**(right if x else wrong), "cluster": f"p{i // 2}"} for i, x in enumerate(scores)]
    rng = np.random.default_rng(38)
    r = lm.run_task(Table(), ByteTokenizer(), items, "acc", rng)
    assert r.per_item.tolist() == scores
    assert r.units.tolist() == [i // 2 for i in range(14)]
    assert r.labels == tuple(f"p{g}" for g in range(7))
    ref = np.random.default_rng(38)
    ci = stats.cluster_bootstrap(np.asarray(scores, float), r.units, ref, n_boot=1000)
    assert (r.value, r.lo, r.hi, r.method, r.n_units) == (
        ci.value, ci.lo, ci.hi, "cluster_bootstrap", 7,
    )  # fmt: skip
    assert rng.bit_generator.state == ref.bit_generator.state
    other = stats.cluster_bootstrap(
        np.asarray(scores, float), r.units, np.random.default_rng(38), n_boot=1001
    )
    assert (other.lo, other.hi) != (ci.lo, ci.hi)


def test_run_task_passes_progress_on():
    calls = []
    lm.run_task(
        Table(),
        ByteTokenizer(),
        ITEMS,
        "acc",
        np.random.default_rng(0),
        n_boot=10,
        progress=lambda *a: calls.append(a),
    )
    assert calls and calls[-1] == (2, 2)
    assert all(t == 2 for _, t in calls)


def test_item_predictions_metric_dtype_and_pairing():
    lls = [np.array(SPEC_S3_LL), np.array(SPEC_S3_LL[::-1])]
    acc = lm.item_predictions(lls, ITEMS, "acc")
    assert acc.dtype == np.int64
    assert acc.tolist() == [1, 0]
    assert lm.item_predictions(lls, ITEMS, "acc_norm").tolist() == [0, 1]
    with pytest.raises(ValueError) as e:
        lm.item_predictions(lls, ITEMS, "f1")
    assert str(e.value) == "metric: expected one of ['acc', 'acc_norm'], got 'f1'"
    with pytest.raises(ValueError):  # one item's LLs for two items: never silently paired
        lm.item_predictions(lls[:1], ITEMS, "acc")


def test_run_task_refuses_an_unknown_metric():
    with pytest.raises(ValueError, match="acc_norm"):
        lm.run_task(
            TableModel(spec_choice_table()), ByteTokenizer(), TASK, "f1", np.random.default_rng()
        )


def test_run_task_argument_messages():
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError) as e:
        lm.run_task(Table(), ByteTokenizer(), ITEMS, "acc", 0)
    assert str(e.value) == "rng: expected a numpy.random.Generator, got int"
    with pytest.raises(ValueError) as e:
        lm.run_task(Table(), ByteTokenizer(), [], "acc", rng)
    assert str(e.value) == "task: expected at least one item, got none"


@pytest.mark.parametrize(
    "item, message",
    [
        ([1, 2], "task item 0: expected a JSON object, got list"),
        (
            {"context": "a", "choices": ["b", 5], "gold": 0},
            "task item 0: expected 'choices' to be a list of at least 2 non-empty strings, "
            "got ['b', 5]",
        ),
        (
            {"context": "a", "choices": ["b", ""], "gold": 0},
            "task item 0: expected 'choices' to be a list of at least 2 non-empty strings, "
            "got ['b', '']",
        ),
        (
            {"context": "a", "choices": ["b", "c"], "gold": 2},
            "task item 0: expected 'gold' to be an int index in [0, 1], got 2",
        ),
    ],
)
def test_bad_items_messages(item, message):
    with pytest.raises(ValueError) as e:
        lm.run_task(Table(), ByteTokenizer(), [item], "acc", np.random.default_rng(0))
    assert str(e.value) == message


# ------------------------------------------------------------------------------------ task files


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"context": "a", "choices": ["b", "c"], "gold": 2}', "'gold'"),
        ('{"context": "a", "choices": ["b"], "gold": 0}', "'choices'"),
        ('{"choices": ["b", "c"], "gold": 0}', "missing"),
        ('{"context": "a", "choices": ["b", "c"], "gold": true}', "'gold'"),
        ("not json", "parse error"),
        ('{"context": "", "choices": ["b", "c"], "gold": 0}', "'context' to be a non-empty"),
        ('{"context": "a", "choices": ["b", "c"], "gold": 0, "target_delimiter": 1}', "delimiter"),
    ],
)
def test_bad_task_files_name_the_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(TASK[0]) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message) as e:
        lm.read_task(path)
    assert f"{path}:2" in str(e.value)


def test_bad_utf8_in_a_task_file_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = json.dumps(TASK[0]).encode()
    path.write_bytes(good + b"\n" + b'{"context": "caf\xe9", "choices": ["b", "c"], "gold": 0}\n')
    with pytest.raises(ValueError, match="expected UTF-8 text, got byte 0xe9 at column 17") as e:
        lm.read_task(path)
    assert str(e.value).startswith(f"{path}:2: ")


def test_read_task_skips_blank_lines_and_keeps_reading(tmp_path):
    line = '{"context": "a", "choices": ["bb", "c"], "gold": 0}'
    p = _write(tmp_path / "t.jsonl", [line, "", "  ", line, line])
    assert len(lm.read_task(p)) == 3


def test_read_task_file_messages(tmp_path):
    p = tmp_path / "none.jsonl"
    with pytest.raises(ValueError) as e:
        lm.read_task(p)
    assert str(e.value) == f"{p}: task file not found"
    p = _write(tmp_path / "blank.jsonl", ["", " "])
    with pytest.raises(ValueError) as e:
        lm.read_task(p)
    assert str(e.value) == f"{p}: expected at least one task item, got an empty file"


def test_scoring_errors_name_the_task_file_line(tmp_path):
    p = _write(
        tmp_path / "t.jsonl",
        [
            '{"context": "a", "choices": ["b", "c"], "gold": 0}',
            '{"context": "a", "choices": ["bbb", "c"], "gold": 0}',
        ],
    )
    with pytest.raises(ValueError) as e:
        lm.run_task(Table(), ByteTokenizer(), p, "acc", np.random.default_rng(0), max_len=2)
    assert str(e.value) == (
        f"{p}:2: choices[0] is 3 tokens; expected at most the model's context of 2 tokens "
        "(left truncation keeps the whole choice and at least one context token, or nothing "
        "can be scored)"
    )
