"""`tinyllm eval lmeval` through the real CLI: its JSON is tinyllm.eval.lmeval.run.evaluate's on the
same folder, its table shows every metric with its interval and n, its errors are one line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tinyllm.cli import app
from tinyllm.eval.lmeval import run
from tinyllm.models import hf as hf_family


def _invoke(args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def folder(gpt2, tok, tmp_path_factory):
    d = tmp_path_factory.mktemp("lmeval_hf")
    gpt2.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_json_is_evaluate_on_the_same_folder(folder, task_dir):
    args = ["eval", "lmeval", "--tasks", "arc_easy,wikitext", "--hf", folder, "--include-path",
            task_dir, "--no-bundled", "--limit", 3, "--seed", 1, "--n-boot", 200]  # fmt: skip
    r = _invoke([*args, "--rolling", "strided", "--stride", 64, "--max-length", 128, "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    model = hf_family.load(folder, quiet=True)
    want = run.evaluate(
        ["arc_easy", "wikitext"],
        model,
        hf_family.load_tokenizer(folder),
        include_path=task_dir,
        include_defaults=False,
        limit=3,
        seed=1,
        n_boot=200,
        backend={"rolling": "strided", "stride": 64, "max_length": 128},
    )
    assert got == json.loads(json.dumps(want))
    # lm-eval's windows (the default) give another rolling number on the same documents
    default = json.loads(_invoke([*args, "--json"]).stdout)["tasks"]["wikitext"]["metrics"]
    key = "bits_per_byte,none"
    assert default[key]["value"] != pytest.approx(got["tasks"]["wikitext"]["metrics"][key]["value"])
    table = _invoke(args)
    assert table.exit_code == 0, table.output
    arc = got["tasks"]["arc_easy"]["metrics"]["acc_norm,none"]
    line = next(s for s in table.stdout.splitlines() if "acc_norm,none" in s)
    cells = [c for c in line.replace("│", " ").split() if c]
    want_cells = [f"{arc['value']:.4f}", f"{arc['lo']:.4f}", f"{arc['hi']:.4f}", "wilson", "3"]
    want_cells.append("3")  # the units: each document its own
    assert cells == ["acc_norm,none", *want_cells]


def test_our_checkpoint_reads_bytes(task_dir, tmp_path):
    torch = pytest.importorskip("torch")
    from tinyllm.models import gpt

    torch.manual_seed(0)
    ck = gpt.save(
        gpt.Model(gpt.Config(block_size=64, n_layer=1, n_head=2, n_embd=16)), tmp_path / "g"
    )
    args = ["eval", "lmeval", "--tasks", "arc_easy", "--model", ck, "--include-path", task_dir,
            "--no-bundled", "--limit", 2, "--json"]  # fmt: skip
    r = _invoke(args)
    assert r.exit_code == 0, r.output
    model, tok = run.load(ckpt=ck)
    want = run.evaluate("arc_easy", model, tok, include_path=task_dir, include_defaults=False,
                        limit=2)  # fmt: skip
    assert json.loads(r.stdout) == json.loads(json.dumps(want))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rolling", "sideways"], "error: rolling: expected one of"),
        (
            ["--include-path", "/no/such/dir"],
            "error: include_path: expected a folder of task YAMLs",
        ),
        (["--model", "x"], "error: expected exactly one of --model DIR or --hf DIR"),
        (["--max-length", 5000], "error: max_length: expected at most the model's context"),
    ],
)
def test_errors_are_one_line(folder, task_dir, extra, message):
    args = ["eval", "lmeval", "--tasks", "arc_easy", "--hf", folder, "--no-bundled", "--limit", 1]
    if "--include-path" not in extra:
        args += ["--include-path", task_dir]
    r = _invoke([*args, *extra])
    assert r.exit_code == 2, r.output
    assert r.output.strip().startswith(message) and len(r.output.strip().splitlines()) == 1


def test_without_lm_eval_the_extra_is_named(folder, task_dir, monkeypatch):
    import importlib

    real = importlib.import_module

    def fake(name, *a, **k):
        if name == "lm_eval":
            raise ImportError("No module named 'lm_eval'")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", fake)
    r = _invoke(["eval", "lmeval", "--tasks", "arc_easy", "--hf", folder])
    assert r.exit_code == 2 and "tinyllm[lmeval]" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_device_and_dtype_follow_the_one_rule(folder, task_dir):
    args = ["eval", "lmeval", "--tasks", "arc_easy", "--hf", folder, "--include-path", task_dir,
            "--no-bundled", "--limit", 3, "--n-boot", 50, "--json"]  # fmt: skip
    auto = _invoke(args)
    cpu32 = _invoke([*args, "--device", "cpu", "--dtype", "float32"])
    assert auto.exit_code == 0 and cpu32.exit_code == 0, auto.output + cpu32.output
    assert json.loads(auto.stdout) == json.loads(cpu32.stdout)  # auto on this CPU box: cpu, fp32
    lm, _ = run.load(hf=folder, dtype="bfloat16")
    assert next(lm.parameters()).dtype.is_floating_point and str(lm.dtype) == "torch.bfloat16"
    bad = _invoke([*args, "--dtype", "float8"])
    assert bad.exit_code != 0 and len(bad.output.strip().splitlines()) == 1, bad.output
    assert "float8" in bad.output


def test_a_run_prints_no_lm_eval_noise_and_still_its_errors(folder, task_dir, tmp_path,
                                                            monkeypatch, capfd):  # fmt: skip
    """Outside a git checkout lm-eval's git probe says "fatal: not a git repository" and its
    request bar draws on stderr: neither shows; a run that fails still says why, in one line."""
    monkeypatch.chdir(tmp_path)
    args = ["eval", "lmeval", "--tasks", "arc_easy", "--hf", folder, "--no-bundled", "--limit", 2]
    r = _invoke([*args, "--include-path", task_dir])
    assert r.exit_code == 0, r.output
    err = capfd.readouterr().err
    assert "fatal: not a git repository" not in err and "it/s]" not in err, err
    broken = tmp_path / "tasks"
    broken.mkdir()
    y = json.loads((task_dir / "arc_easy.yaml").read_text())
    y["dataset_kwargs"]["data_files"]["test"] = str(broken / "gone.jsonl")
    (broken / "arc_easy.yaml").write_text(json.dumps(y))
    r = _invoke([*args, "--include-path", broken])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert r.output.startswith("error:") and "gone.jsonl" in r.output


def test_a_zoo_task_folder_runs_from_any_working_directory(folder, tmp_path, monkeypatch):
    # the demo zoo's task folder: include and data_files relative to the folder itself
    from tinyllm.data import lee_split
    from tinyllm.eval.kinds.lmeval import task_config
    from tinyllm.eval.lmeval import demo_task

    train, val = lee_split()
    y = demo_task.write_cloze_task(tmp_path / "zoo" / "lee_cloze", train[:1], val[:2])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    args = ["eval", "lmeval", "--tasks", demo_task.TASK, "--hf", folder, "--include-path",
            y.parent, "--no-bundled", "--limit", 3, "--n-boot", 200, "--json"]  # fmt: skip
    r = _invoke(args)
    assert r.exit_code == 0, r.output
    want = run.evaluate(
        [task_config(y)],
        hf_family.load(folder, quiet=True),
        hf_family.load_tokenizer(folder),
        include_path=y.parent,
        include_defaults=False,
        limit=3,
        n_boot=200,
    )
    assert json.loads(r.stdout) == json.loads(json.dumps(want))
    assert json.loads(r.stdout)["tasks"][demo_task.TASK]["n"] == 3
