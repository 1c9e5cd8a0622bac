"""The `tinyllm` command as a user meets it: arguments checked before any work, one clear error line
instead of a traceback, progress on long commands, honest help."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_compare import lm_row
from test_compare import report as compare_report
from typer.testing import CliRunner

from tinyllm import cli
from tinyllm.console import Progress
from tinyllm.eval import zoo
from tinyllm.models import bigram
from tinyllm.store import open_store
from tinyllm.tokens import write_tokens

ROOT = Path(__file__).resolve().parents[1]
TEXT = b"the cat sat on the mat. the dog sat on the log. a cat and a dog met by the log. " * 6


@pytest.fixture
def tiny(tmp_path):
    """A bigram checkpoint, a 300-token val file and a manifest with it and a broken entry."""
    data = np.frombuffer(TEXT, dtype=np.uint8)
    write_tokens(tmp_path / "val.tok", data[:300])
    bigram.save(bigram.train(bigram.Config(k=0.5), data, seed=0), tmp_path / "bigram")
    doc = {
        "suite": "zoo",
        "entries": [
            {"name": "bigram", "family": "bigram", "checkpoint": "bigram", "data": "val.tok"},
            {"name": "ghost", "family": "bigram", "checkpoint": "missing", "data": "val.tok"},
        ],
    }
    (tmp_path / "zoo.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path


class Scored:
    """Counts zoo.score_entry_row calls (every scoring path goes through it): "refused before
    scoring" means zero."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = zoo.score_entry_row

        def counting(*a, **kw):
            self.calls += 1
            return real(*a, **kw)

        monkeypatch.setattr(zoo, "score_entry_row", counting)


def run(*args, **kw):
    return CliRunner().invoke(cli.app, [str(a) for a in args], **kw)


def run_main(monkeypatch, capsys, *args):
    """The installed entry point (cli.main, with its error boundary), in this process."""
    monkeypatch.setattr(sys, "argv", ["tinyllm", *map(str, args)])
    with pytest.raises(SystemExit) as ex:
        cli.main()
    out = capsys.readouterr()
    return ex.value.code, out.out, out.err


# --- --out writes only onto a regular file or a new path ----------------------------------


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_out_refuses_a_symlink_fifo_or_folder_before_scoring(tiny, monkeypatch, kind):
    scored = Scored(monkeypatch)
    target = tiny / "out" / "report.json"
    target.parent.mkdir()
    if kind == "symlink":
        (tiny / "elsewhere.json").write_text("keep me\n")
        target.symlink_to(tiny / "elsewhere.json")
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    res = run("eval", "--suite", "zoo", "--manifest", tiny / "zoo.yaml", "--out", target)
    assert res.exit_code == 2, res.output
    names = {"symlink": "a symbolic link", "fifo": "a FIFO", "directory": "a folder"}
    assert f"expected a regular file or a new path, got {names[kind]}" in res.output
    assert str(target) in res.output
    assert scored.calls == 0
    mode = target.lstat().st_mode
    assert {"symlink": stat.S_ISLNK, "fifo": stat.S_ISFIFO, "directory": stat.S_ISDIR}[kind](mode)
    assert not (target.parent / "items").exists()
    if kind == "symlink":
        assert (tiny / "elsewhere.json").read_text() == "keep me\n"


def test_out_onto_a_regular_file_or_new_path_is_written(tiny, monkeypatch):
    scored = Scored(monkeypatch)
    target = tiny / "report.json"
    target.write_text("old\n")
    res = run("eval", "--suite", "zoo", "--manifest", tiny / "zoo.yaml", "--out", target, "-q")
    assert res.exit_code == 0, res.output
    assert scored.calls == 2  # the counter sees scoring: bigram and ghost
    assert stat.S_ISREG(target.lstat().st_mode) and '"rows"' in target.read_text()


# --- every argument checked before scoring -----------------------------------------------


def test_bad_previous_release_or_store_is_refused_before_scoring(tiny, monkeypatch):
    from store_helpers import make_report, make_row

    scored = Scored(monkeypatch)
    store = tiny / "store"
    open_store(store).write_report("r0", make_report("r0", "2026-11-29T18:00:00Z", [make_row("a")]))
    base = ["eval", "--suite", "zoo", "--manifest", tiny / "zoo.yaml", "--store", store]
    res = run(*base, "--release", "r1", "--previous", "nosuch")
    assert res.exit_code == 2
    assert "previous: expected a release in the store, got 'nosuch' (releases: r0)" in res.output
    res = run(*base, "--release", "bad/name")
    assert res.exit_code == 2 and "release: expected 1-128 characters" in res.output
    res = run(*base, "--release", "r1", "--only", "nope")
    assert res.exit_code == 2 and "--only: expected entry names" in res.output
    assert scored.calls == 0
    assert open_store(store).releases() == ["r0"]  # nothing of r1 was written
    assert not (store / "releases" / "r1").exists()


def test_unwritable_store_is_one_error_line_before_scoring(tiny, monkeypatch, capsys):
    scored = Scored(monkeypatch)
    (tiny / "a-file").write_text("x")
    store = tiny / "a-file" / "store"  # below a regular file: cannot be created
    code, out, err = run_main(
        monkeypatch,
        capsys,
        *("eval", "--suite", "zoo", "--manifest", tiny / "zoo.yaml"),
        *("--store", store, "--release", "r1"),
    )
    assert code == 1 and scored.calls == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: store {store}: ")
    assert "Not a directory" in lines[0] and "Traceback" not in err


# --- one error boundary ------------------------------------------------------------------


def _dead_endpoint(monkeypatch, tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    return port


def test_history_with_the_s3_endpoint_down_is_one_line_naming_the_store(
    monkeypatch, capsys, tmp_path
):
    port = _dead_endpoint(monkeypatch, tmp_path)
    code, out, err = run_main(monkeypatch, capsys, "history", "--store", "s3://tl-evals/team")
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: s3://tl-evals/team/releases/: EndpointConnectionError: ")
    assert f"127.0.0.1:{port}" in lines[0]
    # --debug: the full traceback (the exception itself reaches the interpreter)
    monkeypatch.setitem(cli.DEBUG, "on", False)
    monkeypatch.setattr(sys, "argv", ["tinyllm", "--debug", "history", "--store", "s3://tl-b1/x"])
    with pytest.raises(Exception, match="Could not connect") as ex:
        cli.main()
    assert "s3://tl-b1/x/releases/" in ex.value.__notes__


def test_publish_to_a_missing_bucket_is_one_line(monkeypatch, capsys, tmp_path, tiny, s3_env):
    _dead_endpoint(monkeypatch, tmp_path)  # its settings (one attempt), with moto's endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env)
    code, out, err = run_main(
        monkeypatch,
        capsys,
        *("eval", "--suite", "zoo", "--manifest", tiny / "zoo.yaml"),
        *("--store", "s3://tl-no-bucket/p", "--release", "r1"),
    )
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: store s3://tl-no-bucket/p/: NoSuchBucket: ")
    assert "The specified bucket does not exist" in lines[0]


def test_error_line_is_one_line_with_notes_and_type():
    e = OSError(30, "Read-only file system")
    e.add_note("./evalstore/releases/r1/report.json")
    assert cli.error_line(e) == (
        "error: ./evalstore/releases/r1/report.json: OSError: [Errno 30] Read-only file system"
    )
    assert cli.error_line(ValueError("a\nb")) == "error: ValueError: a b"


# --- eval ppl refuses what it cannot score honestly ----------------------------------


def test_eval_ppl_refuses_zero_stride_zero_context_and_too_few_bytes(tiny):
    base = ["eval", "ppl", "--data", tiny / "val.tok", "--model", tiny / "bigram"]
    for flag in ("--stride", "--ctx-len"):
        res = run(*base, flag, "0")
        assert res.exit_code == 2 and flag in res.output, res.output
    res = run(*base, "--n-bytes", "100")
    assert res.exit_code == 2
    assert "--n-bytes: expected at least the 299 scored tokens" in res.output
    res = run(*base, "--n-bytes", "299", "--json", "-q")
    assert res.exit_code == 0, res.output


def test_token_file_with_fewer_than_2_tokens_is_named(tiny):
    write_tokens(tiny / "one.tok", np.array([7], dtype=np.uint8))
    res = run("eval", "ppl", "--data", tiny / "one.tok", "--model", tiny / "bigram")
    assert res.exit_code == 2
    assert f"{tiny / 'one.tok'}: expected at least 2 tokens" in " ".join(res.output.split())
    # the same file as a zoo entry's data: its error row names the file too
    doc = {"suite": "zoo", "entries": [{"name": "b", "family": "bigram", "checkpoint": "bigram",
                                        "data": "one.tok"}]}  # fmt: skip
    (tiny / "one.yaml").write_text(yaml.safe_dump(doc))
    res = run("eval", "--suite", "zoo", "--manifest", tiny / "one.yaml", "--out", tiny / "r.json")
    assert res.exit_code == 0
    row = json.loads((tiny / "r.json").read_text())["rows"][0]
    assert row["status"] == "error"
    assert row["error"]["message"].startswith(f"{tiny / 'one.tok'}: expected at least ")


# --- progress on long commands, --quiet turns it off ------------------------------------


def test_eval_ppl_shows_progress_when_piped_and_quiet_turns_it_off(tiny):
    base = ["eval", "ppl", "--data", tiny / "val.tok", "--model", tiny / "bigram", "--json"]
    res = run(*base)
    assert res.exit_code == 0
    assert "scoring tokens (bigram): 0/299" in res.stderr
    assert "scoring tokens (bigram): 299/299 (100%" in res.stderr
    res = run(*base, "--quiet")
    assert res.exit_code == 0 and res.stderr == ""


def test_progress_lines_are_throttled(capsys):
    now = [0.0]
    p = Progress("work", 100, clock=lambda: now[0])
    with p:
        for t, done in ((1.0, 10), (11.0, 20), (12.0, 30), (30.0, 40)):
            now[0] = t
            p.update(done)
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "work: 0/100 (0%, 0 s)",
        "work: 20/100 (20%, 11 s)",
        "work: 40/100 (40%, 30 s)",
        "work: 40/100 (40%, 30 s)",
    ]


# --- help text, file modes, make stop ---------------------------------------------------


def test_help_has_no_type_tags_on_flags_and_no_broken_lines(monkeypatch):
    from tinyllm.eval import lm

    monkeypatch.setenv("COLUMNS", "220")
    out = run("eval", "ppl", "--help").output
    assert "<bool>" not in out
    assert "measured best" not in out
    budget = lm.DEFAULT_TOKEN_BUDGET  # the help states the default the instrument uses
    assert lm.default_batch_size(32) == budget // 32
    assert f"(default: {budget} // C, a budget of {budget} tokens)" in out
    assert "at least C - s tokens of context after the first window" in out
    assert "<bool>" not in run("eval", "--help").output


def test_checkpoint_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        bigram.save(bigram.train(bigram.Config(), np.frombuffer(TEXT, np.uint8), seed=0), tmp_path)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"config.json": 0o644, "model.safetensors": 0o644}


def test_make_stop_is_quiet_when_no_server_runs(tmp_path):
    res = subprocess.run(
        ["make", "--no-print-directory", "stop", f"PREFECT_HOME={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")


def test_zoo_build_shows_training_progress_when_piped(tmp_path, monkeypatch):
    from tinyllm import train

    real = train.build_zoo
    tiny = {"nplm": train.Recipe(config={"context": 3, "emb_dim": 8, "hidden": 16}, steps=3)}
    monkeypatch.setattr(
        train, "build_zoo", lambda out, **kw: real(out, **{**kw, "recipes": tiny, "jobs": 1})
    )
    res = run("zoo", "build", "--out", tmp_path / "z")
    assert res.exit_code == 0, res.output
    assert "training nplm: step 3/3" in res.stderr
    res = run("zoo", "build", "--out", tmp_path / "z2", "--quiet")
    assert res.exit_code == 0 and "training" not in res.stderr


def test_eval_task_shows_progress_when_piped(tiny):
    items = [{"context": "the cat", "choices": [" sat", " dog"], "gold": 0}] * 3
    (tiny / "t.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    base = ["eval", "task", "--task", tiny / "t.jsonl", "--model", tiny / "bigram", "--json"]
    res = run(*base)
    assert res.exit_code == 0, res.output
    assert "scoring items: 0/3" in res.stderr and "scoring items: 3/3 (100%" in res.stderr
    assert run(*base, "-q").stderr == ""


# --- history: an unreadable release is listed with its reason, the rest is still shown -----------


def _lm_report(release: str, nll: np.ndarray, day: int) -> dict:
    """A one-row LM report (test_compare's row and report builders)."""
    return compare_report(release, [lm_row("gpt", nll)], day)


def test_history_lists_an_unreadable_release_and_still_shows_the_others(
    monkeypatch, capsys, tmp_path
):
    root = tmp_path / "evalstore"
    store = open_store(root)
    nll = np.random.default_rng(7).gamma(2.0, 0.8, 500)
    for release, items, day in (("r1", nll, 1), ("r2", nll, 2), ("r3", nll + 0.05, 3)):
        store.write_report(release, _lm_report(release, items, day))
        store.write_items(release, "gpt", items)
    # run files as the flow writes them (run ids sort by time): they place r2 and r4 in time
    for release, day in (("r2", 2), ("r4", 4)):
        run_file = root / "releases" / release / "runs" / f"202611{day:02d}T180000Z-0001.json"
        run_file.parent.mkdir(parents=True, exist_ok=True)
        run_file.write_text(json.dumps(_lm_report(release, nll, day)))
    (root / "releases" / "r2" / "report.json").write_text("{not json")  # corrupted after the fact
    # r4: a run that never finished (a run file, no report.json)
    code, out, err = run_main(monkeypatch, capsys, "history", "--store", root, "--n-perm", "200")
    assert code == 1
    assert err.strip() == f"error: 1 of 4 release(s) in {root} unreadable: r2"
    lines = out.splitlines()
    bad = [ln for ln in lines if ln.startswith("r2  unreadable: ")]
    assert len(bad) == 1 and "releases/r2/report.json" in bad[0], out
    # r3 is compared with the last READABLE release before it, r1: every NLL +0.05 nats
    assert "r3  (2026-11-03T18:00:00Z)  r3 vs r1: 1 regressed" in out, out
    assert "regressed r3 gpt: bpb" in out and "(delta +0.0721" in out
    assert "r1  (2026-11-01T18:00:00Z)  (first release)" in out
    assert "r4  no report.json" in out
    assert out.index("r1  (") < out.index("r2  unreadable") < out.index("r3  (")
    assert out.index("r3  (") < out.index("r4  no report.json")
