"""Reading and judging lm-eval output folders (tinyllm.lmeval_logs, tinyllm.lmeval_judge,
``tinyllm judge``) on folders in lm-eval 0.4.13's own layout, written here by hand so that each
number is known: the worked examples of docs/definitions.md (Wilson 8 of 10, the paired sign-flip
p), and every bad input as one line naming the file with nothing printed on stdout. The same
reader on folders written by lm-eval's HFLM is tests/lmeval/test_lmeval_logs_runs.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import threading

import pytest
from typer.testing import CliRunner

from tinyllm import lmeval_logs
from tinyllm.cli import app
from tinyllm.lmeval_judge import MismatchError, judge, release_report
from tinyllm.lmeval_logs import LogError, read_run
from tinyllm.report import Row

DATE = "2026-01-02T03-04-05.678901"


def _h(x) -> str:
    return hashlib.sha256(json.dumps(x, indent=2).encode()).hexdigest()


def write_run(root, acc, *, model="org/m", docs=None, date=DATE, version="0.4.13", bpb=None):
    """An ``--output_path`` folder as lm-eval 0.4.13 writes it with ``--log_samples``: task
    ``mc`` with per-document ``acc`` (and ``bpb``: ``[ll, bytes]`` pairs for a ``text`` task)."""
    docs = docs or [{"q": f"question {i}", "topic": i // 2} for i in range(len(acc))]
    folder = root / model.replace("/", "__")
    folder.mkdir(parents=True)
    lines = [
        {
            "doc_id": i,
            "doc": d,
            "target": "0",
            "arguments": {"gen_args_0": {"arg_0": d["q"], "arg_1": " a"}},
            "resps": [[["-1.5", "False"]]],
            "filtered_resps": [["-1.5", "False"]],
            "filter": "none",
            "metrics": ["acc"],
            "doc_hash": _h(d),
            "prompt_hash": hashlib.sha256(d["q"].encode()).hexdigest(),
            "target_hash": hashlib.sha256(b"0").hexdigest(),
            "acc": a,
        }
        for i, (d, a) in enumerate(zip(docs, acc, strict=True))
    ]
    (folder / f"samples_mc_{date}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    results = {"mc": {"alias": "mc", "acc,none": sum(acc) / len(acc), "acc_stderr,none": 0.1}}
    configs = {"mc": {"metric_list": [{"metric": "acc", "aggregation": "mean"}]}}
    hib = {"mc": {"acc": True}}
    n_samples = {"mc": {"original": len(acc), "effective": len(acc)}}
    if bpb is not None:
        text = [
            {**lines[0], "doc_id": i, "doc": {"page": f"p{i}"}, "doc_hash": _h({"page": f"p{i}"})}
            for i in range(len(bpb))
        ]
        for t, pair in zip(text, bpb, strict=True):
            t.update(metrics=["bits_per_byte"], bits_per_byte=list(pair))
            del t["acc"]
        (folder / f"samples_text_{date}.jsonl").write_text(
            "".join(json.dumps(x) + "\n" for x in text)
        )
        value = -sum(p[0] for p in bpb) / sum(p[1] for p in bpb) / math.log(2)
        results["text"] = {"bits_per_byte,none": value, "bits_per_byte_stderr,none": "N/A"}
        configs["text"] = {"metric_list": [{"metric": "bits_per_byte"}]}
        hib["text"] = {"bits_per_byte": False}
        n_samples["text"] = {"original": len(bpb), "effective": len(bpb)}
    doc = {
        "results": results,
        "configs": configs,
        "higher_is_better": hib,
        "n-samples": n_samples,
        "n-shot": {"mc": 0},
        "lm_eval_version": version,
        "model_name": model,
    }
    (folder / f"results_{date}.json").write_text(json.dumps(doc))
    return root


A10 = [1, 1, 0, 1, 1, 1, 1, 1, 0, 1]  # 8 of 10
B10 = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]


def test_a_run_is_read_by_its_output_path_its_model_folder_or_its_results_file(tmp_path):
    write_run(tmp_path / "a", A10)
    for p in (tmp_path / "a", tmp_path / "a" / "org__m", next((tmp_path / "a").rglob("res*"))):
        run = read_run(p)
        log = run.tasks[("mc", "none")]
        assert run.model == "org/m" and run.lm_eval_version == "0.4.13"
        assert log.doc_ids.tolist() == list(range(10)) and log.values["acc"].tolist() == A10
        assert log.reported == {"acc": 0.8}


def test_wilson_and_the_paired_sign_flip_test_are_the_definitions_worked_examples(tmp_path):
    a = read_run(write_run(tmp_path / "a", A10))
    b = read_run(write_run(tmp_path / "b", B10))
    j = judge([a, b])
    va = next(v for v in j.values if v.run == "A")
    assert (va.value, va.method, va.n_units) == (0.8, "wilson", 10)
    assert (round(va.lo, 4), round(va.hi, 4)) == (0.4902, 0.9433)  # docs/definitions.md
    (c,) = j.comparisons
    # two documents differ, both in B's favour (D = +1, +1, the rest 0): |sum +-D| reaches 2
    # only with both signs alike, 2 * 2^8 of the 2^10 patterns: exact p = 0.5
    assert (c.delta, c.p, c.p_adjusted, c.verdict) == (
        pytest.approx(0.2),
        0.5,
        0.5,
        "not distinguishable",
    )
    d = [y - x for x, y in zip(A10, B10, strict=True)]
    sd = math.sqrt(sum((x - 0.2) ** 2 for x in d) / 9)
    half = 2.2621571627409915 * sd / math.sqrt(10)  # t_{0.975, 9}
    assert (c.lo, c.hi) == (pytest.approx(0.2 - half), pytest.approx(0.2 + half))


def test_a_cluster_key_makes_the_documents_clusters_the_units(tmp_path):
    a = read_run(write_run(tmp_path / "a", A10), cluster_key="topic")
    b = read_run(write_run(tmp_path / "b", B10), cluster_key="topic")
    j = judge([a, b], cluster_key="topic")
    va = next(v for v in j.values if v.run == "A")
    assert (va.method, va.n_units, va.n) == ("cluster_bootstrap", 5, 10)
    (c,) = j.comparisons
    # units: topics 0..4 of 2 docs each; D_g = [0, 1, 0, 0, 1]: exact p over 2^5 patterns
    assert (c.n_units, c.p) == (5, 0.5)
    # a task none of whose documents has the key: each document a unit, and said so
    j = judge([read_run(tmp_path / p, cluster_key="nope") for p in "ab"], cluster_key="nope")
    assert (j.comparisons[0].n_units, j.values[0].method) == (10, "wilson")
    assert "the cluster key is in no document of mc: each document is a unit" in j.values[0].warning
    s = next((tmp_path / "b").rglob("samples_*"))
    lines = [json.loads(x) for x in s.read_text().splitlines()]
    del lines[4]["doc"]["topic"]
    s.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(LogError, match="doc_id 4: expected the cluster key 'topic' in every doc"):
        read_run(tmp_path / "b", cluster_key="topic")


def test_holm_runs_across_every_task_and_metric_row(tmp_path):
    bpb_a = [(-100.0, 50), (-90.0, 40), (-120.0, 60)]
    bpb_b = [(-80.0, 50), (-70.0, 40), (-100.0, 60)]
    a = read_run(write_run(tmp_path / "a", A10, bpb=bpb_a))
    b = read_run(write_run(tmp_path / "b", B10, bpb=bpb_b))
    j = judge([a, b])
    mc, text = j.comparisons
    assert (mc.task, text.task) == ("mc", "text")
    assert text.p == 0.25  # 3 units, all three differences one way: 2 of 8 patterns
    assert (text.p_adjusted, mc.p_adjusted) == (0.5, 0.5)  # sorted 0.25 x 2, then 0.5 x 1
    assert text.delta == pytest.approx((250 - 310) / (150 * math.log(2)))
    tv = [v for v in j.values if v.task == "text"]
    assert [v.method for v in tv] == ["cluster_ratio"] * 2
    assert tv[0].value == pytest.approx(310 / (150 * math.log(2)))


# ------------------------------------------------------------------------- bad input


def _cli(*args):
    return CliRunner().invoke(app, ["judge", *map(str, args)])


def _one_line(res, *parts):
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    err = res.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    for p in parts:
        assert p in err, err
    return err


def test_mismatched_documents_are_one_line_naming_the_task_never_paired(tmp_path):
    write_run(tmp_path / "a", A10)
    docs = [{"q": f"question {i}", "topic": i // 2} for i in range(10)]
    docs[3] = {"q": "another question", "topic": 1}
    write_run(tmp_path / "b", B10, docs=docs)
    with pytest.raises(MismatchError, match=r"task mc \(filter none\): expected runs A"):
        judge([read_run(tmp_path / "a"), read_run(tmp_path / "b")])
    err = _one_line(_cli(tmp_path / "a", tmp_path / "b"), "task mc", "1 doc_ids with another")
    assert "(first 3)" in err


def test_a_results_file_without_samples_names_it(tmp_path):
    write_run(tmp_path / "a", A10)
    write_run(tmp_path / "b", B10)
    next((tmp_path / "b").rglob("samples_*")).unlink()
    _one_line(_cli(tmp_path / "a", tmp_path / "b"), "results_", "--log_samples", "'mc'")


def test_another_lm_eval_version_or_layout_is_one_line_naming_the_file(tmp_path):
    write_run(tmp_path / "old", A10, version="0.3.0")
    write_run(tmp_path / "b", B10)
    _one_line(_cli(tmp_path / "old", tmp_path / "b"), "expected results of lm-eval 0.4.x", "0.3.0")
    write_run(tmp_path / "nohash", A10)
    s = next((tmp_path / "nohash").rglob("samples_*"))
    lines = [json.loads(x) for x in s.read_text().splitlines()]
    for x in lines:
        del x["doc_hash"]
    s.write_text("".join(json.dumps(x) + "\n" for x in lines))
    err = _one_line(_cli(tmp_path / "nohash", tmp_path / "b"), str(s), "another lm-eval version")
    assert "line 1" in err
    (tmp_path / "empty").mkdir()
    _one_line(_cli(tmp_path / "empty", tmp_path / "b"), "expected lm-eval results")


def test_samples_that_do_not_give_the_results_value_are_refused(tmp_path):
    write_run(tmp_path / "a", A10)
    r = next((tmp_path / "a").rglob("results_*"))
    doc = json.loads(r.read_text())
    doc["results"]["mc"]["acc,none"] = 0.7
    r.write_text(json.dumps(doc))
    with pytest.raises(
        LogError, match="expected the samples to give the results file's 0.7, got 0.8"
    ):
        read_run(tmp_path / "a")


def test_files_are_untrusted_links_fifos_sizes_and_task_names(tmp_path, monkeypatch):
    write_run(tmp_path / "a", A10)
    s = next((tmp_path / "a").rglob("samples_*"))
    real = tmp_path / "real.jsonl"
    shutil.move(s, real)
    os.symlink(real, s)
    with pytest.raises(LogError, match="expected a regular file, got a symbolic link"):
        read_run(tmp_path / "a")
    s.unlink()
    os.mkfifo(s)
    done = []
    t = threading.Thread(
        target=lambda: done.append(pytest.raises(LogError, read_run, tmp_path / "a"))
    )
    t.start()
    t.join(10)
    assert done and "got a FIFO" in str(done[0].value)  # refused at once, never read
    s.unlink()
    shutil.move(real, s)
    monkeypatch.setattr(lmeval_logs, "MAX_SAMPLES_BYTES", 100)
    with pytest.raises(LogError, match=r"expected a regular file, got \d+ bytes \(at most 100\)"):
        read_run(tmp_path / "a")
    monkeypatch.undo()
    r = next((tmp_path / "a").rglob("results_*"))
    doc = json.loads(r.read_text())
    doc["configs"] = {"../../etc/x": {}}
    r.write_text(json.dumps(doc))
    with pytest.raises(LogError, match="expected task names that are file-name parts"):
        read_run(tmp_path / "a")


def test_two_model_folders_in_one_output_path_are_named(tmp_path):
    write_run(tmp_path / "out", A10, model="org/one")
    write_run(tmp_path / "out", B10, model="org/two")
    with pytest.raises(LogError, match=r"got 2 model folders \(org__one, org__two\): name one"):
        read_run(tmp_path / "out")


def test_the_cli_prints_a_table_and_json(tmp_path):
    write_run(tmp_path / "a", A10)
    write_run(tmp_path / "b", B10)
    res = _cli(tmp_path / "a", tmp_path / "b", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [r["label"] for r in doc["runs"]] == ["A", "B"]
    (c,) = doc["comparisons"]
    assert (c["task"], c["metric"], c["p"], c["verdict"]) == (
        "mc",
        "acc",
        0.5,
        "not distinguishable",
    )
    res = CliRunner().invoke(
        app, ["judge", str(tmp_path / "a"), str(tmp_path / "b")], terminal_width=160
    )
    assert res.exit_code == 0, res.output
    assert "0.8000" in res.stdout and "[0.4902, 0.9433]" in res.stdout
    assert "B - A" in res.stdout and "not distinguishable" in res.stdout
    _one_line(_cli(tmp_path / "a"), "expected at least 2 runs")


def test_import_needs_a_store_and_a_release_and_writes_nothing_for_a_bad_run(tmp_path):
    write_run(tmp_path / "a", A10)
    _one_line(_cli("--import", tmp_path / "a", "--release", "r1"), "expected --store and --release")
    next((tmp_path / "a").rglob("samples_*")).unlink()
    store = tmp_path / "store"
    args = ("--import", tmp_path / "a", "--store", store, "--release", "r1")
    _one_line(_cli(*args), "--log_samples")
    assert not store.exists()
    write_run(tmp_path / "b", B10)
    res = _cli("--import", tmp_path / "b", "--store", store, "--release", "r1")
    assert res.exit_code == 0, res.output
    assert "imported 1 row of" in res.stdout and "r1: the first release" in res.stdout
    report = json.loads((store / "releases" / "r1" / "report.json").read_text())
    (row,) = report["rows"]
    assert (row["name"], row["value"], row["interval"], row["kind"]) == (
        "mc-acc",
        1.0,
        "wilson",
        "lmeval",
    )


def test_an_imported_row_is_a_typed_row_written_in_the_zoos_field_order(tmp_path):
    run = read_run(write_run(tmp_path / "a", A10), cluster_key="topic")
    report, items, units, _ = release_report(run, "r1", cluster_key="topic")
    (row,) = report["rows"]
    typed = Row.model_validate(row)  # the zoo's row type, its status rules included
    assert (typed.value, typed.interval, typed.n, typed.n_units) == (
        0.8,
        "cluster_bootstrap",
        10,
        5,
    )
    assert list(row) == [f for f in Row.model_fields if f in row]  # as a zoo report's rows
    assert "baseline" not in row and "iid_interval" not in row  # only the fields it sets
    assert list(items["mc-acc"]) == A10 and units["mc-acc"].tolist() == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
        4,
        4,
    ]
