"""The Python API (tinyllm/api.py, docs/api.md): each call gives its command's numbers, a model
object and its saved folder the same, lm-eval from a YAML path with no helper called first, and
the docs' example runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from store_helpers import acc_row, make_report
from typer.testing import CliRunner

import tinyllm
from tinyllm import stats
from tinyllm.cli.app import app
from tinyllm.data import lee_bytes, lee_split
from tinyllm.eval import lm
from tinyllm.history import release_history
from tinyllm.models import bigram, gpt
from tinyllm.publish import publish_run
from tinyllm.store import open_store
from tinyllm.tokens import ByteTokenizer

ROOT = Path(__file__).resolve().parents[1]


def cli_json(*args) -> dict:
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("api")
    _, val = lee_split()
    text = "\n".join(val[:6]) + "\n"
    (d / "val.txt").write_text(text, encoding="utf-8")
    rng = np.random.default_rng(0)
    words = text.split()
    items = []
    for i in range(12):
        ctx = " ".join(words[i * 5 : i * 5 + 4])
        choices = [words[i * 5 + 4], *rng.choice(words, 2).tolist()]
        items.append({"context": ctx, "choices": choices, "gold": 0})
    (d / "task.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items), "utf-8")
    model = bigram.train(bigram.Config(k=0.5), lee_bytes("train"), seed=0)
    bigram.save(model, d / "bigram")
    return {"dir": d, "text": d / "val.txt", "task": d / "task.jsonl", "model": model}


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    """A random-weight GPT-2 over the 256 byte ids, in memory and as a folder (no tokenizer:
    a byte-level model)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=256, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    torch.manual_seed(0)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    d = tmp_path_factory.mktemp("hf") / "tiny"
    m.save_pretrained(d, safe_serialization=True)
    return m, d


def test_import_tinyllm_is_cheap_and_lists_the_api():
    code = "import sys, tinyllm; print('torch' in sys.modules, sorted(tinyllm.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, names = out.stdout.split(" ", 1)
    assert loaded == "False"
    for name in ("bpb", "task", "lmeval", "paired", "releases"):
        assert name in names and name in dir(tinyllm)
    assert callable(tinyllm.bpb) and tinyllm.compare.__name__ == "tinyllm.compare"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = tinyllm.nope


def test_bpb_of_object_and_folder_equal_eval_ppl_json(files):
    r = tinyllm.bpb(files["model"], files["text"])
    folder = tinyllm.bpb(str(files["dir"] / "bigram"), str(files["text"]))
    want = cli_json("eval", "ppl", "--text", files["text"], "--model", files["dir"] / "bigram",
                    "--json")  # fmt: skip
    for k in ("value", "lo", "hi"):
        assert getattr(r, k) == pytest.approx(want["bpb"][k], rel=1e-12)
    assert r.iid == pytest.approx(want["iid_interval"]["bpb"], rel=1e-12)
    assert (r.n, r.n_bytes, r.n_units) == (want["n_tokens"], want["n_bytes"], want["n_units"])
    assert (folder.value, folder.lo, folder.hi) == (r.value, r.lo, r.hi)
    # the interval over the 6 lines: the ratio estimator of the per-line NLL sums, by hand
    raw = files["text"].read_bytes()
    docs = np.cumsum([0] + [b == 10 for b in raw[:-1]])  # a newline ends its own line
    nll = bigram.token_nlls(files["model"], np.frombuffer(raw, np.uint8))
    iv = stats.cluster_ratio(nll, docs[1:])
    scale = 1 / stats.LN2  # one byte per token
    assert r.n_units == 6 and r.method == "cluster_ratio"
    assert (r.lo, r.hi) == pytest.approx((iv.lo * scale, iv.hi * scale), rel=1e-9)
    assert r.to_dict()["interval"] == "cluster_ratio"
    # the text itself, not a path, gives the same
    same = tinyllm.bpb(files["model"], files["text"].read_text("utf-8"))
    assert (same.value, same.lo, same.hi) == (r.value, r.lo, r.hi) and same.data == "<text>"


def test_bpb_of_a_hugging_face_object_equals_its_folder_and_the_cli(files, hf_pair):
    m, d = hf_pair
    r = tinyllm.bpb(m, files["text"], ctx_len=32, stride=16)
    folder = tinyllm.bpb(d, files["text"], ctx_len=32, stride=16)
    want = cli_json("eval", "ppl", "--text", files["text"], "--hf", d, "--ctx-len", 32,
                    "--stride", 16, "--json")  # fmt: skip
    assert r.value == pytest.approx(want["bpb"]["value"], rel=1e-9)
    assert folder.value == pytest.approx(r.value, rel=1e-9) and r.arch == "hf"
    given = tinyllm.bpb(m, files["text"], tokenizer=ByteTokenizer(), ctx_len=32, stride=16)
    assert given.value == r.value  # a model without a tokenizer of its own takes the one given
    # a plain callable: the same windows, its context given
    plain = tinyllm.bpb(lambda ids: m(ids).logits, files["text"], ctx_len=32, stride=16)
    assert plain.value == pytest.approx(r.value, rel=1e-6)


def test_window_options_are_refused_and_resolved_as_the_cli_does(files, hf_pair):
    """One window rule (tinyllm.windows.resolve_windows): a family scored with its own context
    refuses ctx_len / stride from the API as `eval ppl` refuses --ctx-len / --stride, and a
    model scored in windows gets the CLI's default windows."""
    r = CliRunner().invoke(app, ["eval", "ppl", "--text", str(files["text"]), "--model",
                                 str(files["dir"] / "bigram"), "--ctx-len", "16"])  # fmt: skip
    assert r.exit_code != 0 and "expected no --ctx-len or --stride, got --ctx-len=16" in r.output
    for model in (files["model"], files["dir"] / "bigram"):
        with pytest.raises(ValueError) as e:
            tinyllm.bpb(model, files["text"], ctx_len=16)
        assert str(e.value) == (
            "family 'bigram' is not scored in windows (it scores every token with its own "
            "context): expected no ctx_len or stride, got ctx_len=16"
        )
        with pytest.raises(ValueError, match="expected no ctx_len or stride, got stride=4"):
            tinyllm.bpb(model, files["text"], stride=4)
    m, d = hf_pair
    own = tinyllm.bpb(m, files["text"])  # the model's context 32, stride 16: the CLI's default
    want = cli_json("eval", "ppl", "--text", files["text"], "--hf", d, "--json")
    assert (own.ctx_len, own.stride) == (want["ctx_len"], want["stride"]) == (32, 16)
    assert own.value == pytest.approx(want["bpb"]["value"], rel=1e-9)
    with pytest.raises(
        ValueError, match="ctx_len: expected at most the model's context 32, got 64"
    ):
        tinyllm.bpb(m, files["text"], ctx_len=64)


def test_task_of_object_and_folder_equal_eval_task_json(files):
    r = tinyllm.task(files["model"], files["task"], metric="acc")
    folder = tinyllm.task(files["dir"] / "bigram", files["task"], metric="acc")
    want = cli_json("eval", "task", "--task", files["task"], "--model", files["dir"] / "bigram",
                    "--metric", "acc", "--json")  # fmt: skip
    assert r.per_item.tolist() == folder.per_item.tolist() == want["per_item"]
    assert (r.value, r.lo, r.hi, r.n) == (want["value"], want["lo"], want["hi"], want["n"])
    assert r.to_dict()["n_units"] == 12


def test_paired_of_results_arrays_and_bpb(files):
    a = tinyllm.task(files["model"], files["task"], metric="acc")
    flat = bigram.train(bigram.Config(k=1e9), lee_bytes("train"), seed=0)
    b = tinyllm.task(flat, files["task"], metric="acc")
    d = tinyllm.paired(a, b, seed=3)
    want = lm.compare(a, b, rng=np.random.default_rng(3))
    assert (d.delta, d.lo, d.hi, d.p) == (want.delta, want.lo, want.hi, want.p)
    arr = tinyllm.paired(a.per_item, b.per_item.tolist(), seed=3)
    assert (arr.delta, arr.p) == (want.delta, want.p) and arr.to_dict()["n_units"] == 12
    ra, rb = tinyllm.bpb(files["model"], files["text"]), tinyllm.bpb(flat, files["text"])
    bits = tinyllm.paired(ra, rb, seed=1)
    assert bits.delta == pytest.approx(ra.value - rb.value, rel=1e-9)
    assert bits.n_units == 6 and bits.unit == "bits/byte" and bits.delta < 0
    bigram.save(flat, files["dir"] / "flat")
    want = cli_json("eval", "ppl", "--text", files["text"], "--model", files["dir"] / "flat",
                    "--against", files["dir"] / "bigram", "--seed", 1, "--json")  # fmt: skip
    assert (bits.delta, bits.lo, bits.hi) == pytest.approx(
        (want["delta_bpb"]["value"], want["delta_bpb"]["lo"], want["delta_bpb"]["hi"]), rel=1e-9
    )
    assert bits.p == want["p"]


def test_bad_inputs_are_one_clear_error(files, tmp_path):
    with pytest.raises(TypeError, match="expected a model object .* got int"):
        tinyllm.bpb(3, files["text"])
    with pytest.raises(ValueError, match="expected a model object or an existing folder"):
        tinyllm.bpb(tmp_path / "nope", files["text"])
    with pytest.raises(ValueError, match="looks like a file name but names no file"):
        tinyllm.bpb(files["model"], "missing.txt")
    with pytest.raises(ValueError, match="ctx_len: expected the context of a plain model callable"):
        tinyllm.bpb(lambda ids: ids, files["text"])
    with pytest.raises(ValueError, match="metric: expected one of"):
        tinyllm.task(files["model"], files["task"], metric="f1")
    with pytest.raises(TypeError, match="expected a Result or a 1-d array"):
        tinyllm.paired("x", [1.0])
    with pytest.raises(ValueError, match="expected an existing store folder"):
        tinyllm.releases(tmp_path / "no-store")


def test_releases_are_the_history_with_rows(tmp_path):
    store = open_store(tmp_path / "store")
    for day, p in ((1, 0.3), (2, 0.9)):
        items = {"a": (np.random.default_rng(day).random(60) < p).astype(np.float64)}
        rep = make_report(f"r{day}", f"2026-11-0{day}T18:00:00Z", [acc_row("a", items["a"])])
        publish_run(store, f"r{day}", rep, items)
    got = tinyllm.releases(tmp_path / "store")
    from tinyllm.dashboard import load_history

    want = list(release_history(store, load_history(store)))
    assert [r.name for r in got] == ["r1", "r2"] == [s.view.name for s in want]
    assert got[1].verdicts == want[1].verdicts == {"a": "improved"}
    assert got[1].previous == "r1" and got[1].rows[0]["value"] == want[1].view.report.rows[0].value
    assert json.loads(json.dumps(got[1].to_dict()))["state"] == "ok"


@pytest.fixture(scope="module")
def cloze(tmp_path_factory):
    pytest.importorskip("lm_eval")
    from tinyllm.eval.lmeval.demo_task import write_cloze_task

    train, val = lee_split()
    yaml = write_cloze_task(tmp_path_factory.mktemp("cloze"), train[:20], val[:6])
    torch.manual_seed(0)
    ck = gpt.save(
        gpt.Model(gpt.Config(block_size=64, n_layer=1, n_head=2, n_embd=16)),
        tmp_path_factory.mktemp("gpt") / "g",
    )
    return yaml, ck


def test_lmeval_from_a_yaml_path_with_no_helper_equals_the_cli(cloze, monkeypatch, tmp_path):
    yaml, ck = cloze
    monkeypatch.chdir(tmp_path)  # data_files are relative to the YAML's folder, not here
    run = tinyllm.lmeval(ck, yaml, limit=4)
    want = cli_json("eval", "lmeval", "--tasks", "lee_cloze", "--model", ck, "--include-path",
                    yaml.parent, "--no-bundled", "--limit", 4, "--json")  # fmt: skip
    assert run.to_dict()["tasks"] == want["tasks"]
    m = run.tasks["lee_cloze"]["metrics"]["acc,none"]
    assert m["n"] == 4 and m["interval"] == "wilson"
    folder = tinyllm.lmeval(ck, yaml.parent, limit=4)
    assert folder.tasks == run.tasks
    obj = tinyllm.lmeval(gpt.load(ck), yaml, limit=4)
    assert obj.tasks["lee_cloze"]["per_item"] == run.tasks["lee_cloze"]["per_item"]
    assert run.scores("lee_cloze", "acc,none").tolist() == want["tasks"]["lee_cloze"][
        "per_item"]["acc,none"]  # fmt: skip


def test_the_docs_example_runs(files, cloze, tmp_path, monkeypatch, capsys):
    src = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", src, re.S).group(1)
    store = tmp_path / "evalstore"
    items = {"a": np.ones(20)}
    publish_run(open_store(store), "r1", make_report("r1", "2026-11-01T18:00:00Z",
                [acc_row("a", items["a"])]), items)  # fmt: skip
    yaml, ck = cloze
    for old, new in (
        ('"val.txt"', repr(str(files["text"]))),
        ('"task.jsonl"', repr(str(files["task"]))),
        ('"zoo/gpt"', repr(str(ck))),
        ('"tasks/lee_cloze.yaml"', repr(str(yaml))),
        ('"./evalstore"', repr(str(store))),
    ):
        assert old in code, old
        code = code.replace(old, new)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/api.md", "exec"), {})
    out = capsys.readouterr().out
    assert "over 6 documents" in out and "r1 ok" in out
