"""The CLI under hostile paths and mistakes: every file it writes is a regular file or a new path, a
bad stored file is one named line while the rest is listed, a mistyped store is refused, and every
argument is checked before anything is written."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_compare import lm_row, report
from typer.testing import CliRunner

from tinyllm import cli
from tinyllm.compare import compare_reports
from tinyllm.store import open_store

ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    return CliRunner().invoke(cli.app, [str(a) for a in args])


def run_main(monkeypatch, capsys, *args):
    """The installed entry point (cli.main, with its error boundary), in this process."""
    monkeypatch.setattr(sys, "argv", ["tinyllm", *map(str, args)])
    with pytest.raises(SystemExit) as ex:
        cli.main()
    out = capsys.readouterr()
    return ex.value.code, out.out, out.err


def make_special(path: Path, kind: str, tmp_path: Path) -> Path | None:
    """A FIFO, a symlink (to a file holding "keep me") or a character device (1, 3) at ``path``;
    returns the symlink's target."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        target = tmp_path / "elsewhere.txt"
        target.write_text("keep me\n")
        path.symlink_to(target)
        return target
    else:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    return None


KIND_WORDS = {"fifo": "a FIFO", "symlink": "a symbolic link", "chardev": "a character device"}
IS_KIND = {"fifo": stat.S_ISFIFO, "symlink": stat.S_ISLNK, "chardev": stat.S_ISCHR}

TASK_YAML = """\
task: tiny_arc
dataset_path: json
dataset_kwargs:
  data_files:
    test: data/test.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_choice: "{{choices}}"
doc_to_target: "{{gold}}"
"""


@pytest.fixture
def lmeval_task(tmp_path):
    (tmp_path / "data").mkdir()
    docs = [{"question": "What do bees make?", "choices": ["milk", "honey"], "gold": 1}]
    (tmp_path / "data" / "test.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "task.yaml").write_text(TASK_YAML)
    return tmp_path / "task.yaml"


# --- task import-lmeval --out -----------------------------------------------------------


def test_import_lmeval_writes_a_new_path_and_a_regular_file(lmeval_task, tmp_path):
    for out in (tmp_path / "new.jsonl", tmp_path / "old.jsonl"):
        if out.name == "old.jsonl":
            out.write_text("old\n")
        res = run("task", "import-lmeval", lmeval_task, "--out", out)
        assert res.exit_code == 0, res.output
        assert stat.S_ISREG(out.lstat().st_mode)
        assert json.loads(out.read_text())["choices"] == ["milk", "honey"]


@pytest.mark.parametrize("kind", ["fifo", "symlink", "chardev"])
def test_import_lmeval_refuses_a_special_out_before_converting(
    lmeval_task, tmp_path, monkeypatch, capsys, kind
):
    out = tmp_path / "out.jsonl"
    target = make_special(out, kind, tmp_path)
    code, stdout, err = run_main(
        monkeypatch, capsys, "task", "import-lmeval", lmeval_task, "--out", out
    )
    assert code == 2, (stdout, err)
    assert err.strip() == (
        f"error: --out {out}: expected a regular file or a new path, got {KIND_WORDS[kind]}"
    )
    assert IS_KIND[kind](out.lstat().st_mode)  # still what it was, not replaced
    if target is not None:
        assert target.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_import_lmeval_checks_out_before_reading_the_config(tmp_path):
    """--out is refused first: a missing task file is not even looked at."""
    out = tmp_path / "out.jsonl"
    os.mkfifo(out)
    res = run("task", "import-lmeval", tmp_path / "no-such-task.yaml", "--out", out)
    assert res.exit_code == 2
    assert "expected a regular file or a new path, got a FIFO" in res.output
    assert "no-such-task" not in res.output


def test_eval_out_refuses_a_character_device(tmp_path):
    doc = {
        "suite": "zoo",
        "entries": [{"name": "a", "family": "bigram", "checkpoint": "ck", "data": "d.tok"}],
    }
    (tmp_path / "zoo.yaml").write_text(yaml.safe_dump(doc))
    out = tmp_path / "report.json"
    make_special(out, "chardev", tmp_path)
    res = run("eval", "--suite", "zoo", "--manifest", tmp_path / "zoo.yaml", "--out", out)
    assert res.exit_code == 2, res.output
    assert f"--out {out}: expected a regular file or a new path, got a character device" in (
        " ".join(res.output.split())
    )
    assert stat.S_ISCHR(out.lstat().st_mode) and not (tmp_path / "items").exists()


# --- a store of three releases ------------------------------------------------------------------

NLL = np.random.default_rng(7).gamma(2.0, 0.8, 300)


def make_store(root: Path, n_items: int = 300):
    """r1, r2 (r1's scores), r3 (every NLL + 0.05); r2 and r3 with their stored compare.json."""
    st = open_store(root)
    nll = NLL[:n_items]
    for release, items, day in (("r1", nll, 1), ("r2", nll, 2), ("r3", nll + 0.05, 3)):
        st.write_report(release, report(release, [lm_row("gpt", items)], day))
        st.write_items(release, "gpt", items)
    for prev, cur in (("r1", "r2"), ("r2", "r3")):
        cmp = compare_reports(
            st.read_report(prev),
            st.read_report(cur),
            st.items_loader(prev),
            st.items_loader(cur),
            n_perm=200,
        )
        st.write_compare(cur, cmp)
    return st


# --- history lists a bad stored file as unreadable, the rest as usual --------------------


@pytest.mark.parametrize("bad", ["empty rows", "row without verdict"])
def test_history_with_a_schema_invalid_compare_json_lists_everything(
    tmp_path, monkeypatch, capsys, bad
):
    root = tmp_path / "store"
    make_store(root)
    path = root / "releases" / "r3" / "compare.json"
    if bad == "empty rows":
        path.write_text('{"rows": []}')
    else:
        doc = json.loads(path.read_text())
        del doc["rows"][0]["verdict"]
        path.write_text(json.dumps(doc))
    code, out, err = run_main(monkeypatch, capsys, "history", "--store", root, "--n-perm", "200")
    assert code == 0, (out, err)
    assert err == ""
    lines = out.splitlines()
    note = [ln for ln in lines if ln.startswith("r3: compare.json unreadable: ")]
    assert len(note) == 1 and f"{root}/releases/r3/compare.json" in note[0], out
    assert "(compared here instead)" in note[0]
    # r3 is still compared, with r2, from the per-item scores
    assert "r3  (2026-11-03T18:00:00Z)  r3 vs r2: 1 regressed" in out
    assert "regressed r3 gpt: bpb" in out
    assert "r2  (2026-11-02T18:00:00Z)  r2 vs r1: 1 unchanged" in out


def test_history_lists_a_stray_folder_as_unreadable_and_the_rest(tmp_path, monkeypatch, capsys):
    root = tmp_path / "store"
    make_store(root)
    stray = root / "releases" / "v1 copy"
    stray.mkdir()
    (stray / "report.json").write_bytes((root / "releases" / "r1" / "report.json").read_bytes())
    code, out, err = run_main(monkeypatch, capsys, "history", "--store", root, "--n-perm", "200")
    assert code == 1, (out, err)
    assert err.strip() == f"error: 1 of 4 release(s) in {root} unreadable: v1 copy"
    assert any(ln.startswith("v1 copy  unreadable: ") for ln in out.splitlines()), out
    for title in ("r1  (2026-11-01", "r2  (2026-11-02", "r3  (2026-11-03"):
        assert title in out


def test_history_with_unreadable_items_shows_the_row_as_not_comparable(
    tmp_path, monkeypatch, capsys
):
    """No stored comparison for r3 and its items file is garbage: r3's row is "not comparable"
    (the reason names the file) and everything is listed; exit 0."""
    root = tmp_path / "store"
    make_store(root)
    (root / "releases" / "r3" / "compare.json").unlink()
    (root / "releases" / "r3" / "items" / "gpt.npy").write_bytes(b"not an array")
    code, out, err = run_main(monkeypatch, capsys, "history", "--store", root, "--n-perm", "200")
    assert code == 0, (out, err)
    assert "r3  (2026-11-03T18:00:00Z)  r3 vs r2: 1 not comparable" in out
    assert "r2  (2026-11-02T18:00:00Z)  r2 vs r1: 1 unchanged" in out


def test_history_with_a_fifo_for_a_report_lists_it_and_does_not_hang(tmp_path):
    root = tmp_path / "store"
    make_store(root)
    report_json = root / "releases" / "r2" / "report.json"
    report_json.unlink()
    os.mkfifo(report_json)
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "tinyllm.cli", "history", "--store", str(root), "--n-perm", "200"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert time.monotonic() - t0 < 120
    assert res.returncode == 1, res.stdout + res.stderr
    bad = [ln for ln in res.stdout.splitlines() if ln.startswith("r2  unreadable: ")]
    assert len(bad) == 1 and "a FIFO" in bad[0], res.stdout
    assert "r3  (2026-11-03T18:00:00Z)" in res.stdout
    assert res.stderr.strip() == f"error: 1 of 3 release(s) in {root} unreadable: r2"


# --- a mistyped store, --serve, --n-perm ------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [("dashboard",), ("history",), ("compare", "r1", "r2"), ("dashboard", "--out", "site")],
)
def test_read_only_commands_refuse_a_store_folder_that_does_not_exist(tmp_path, args):
    typo = tmp_path / "evalstroe"
    argv = [a if a != "site" else str(tmp_path / "site") for a in args]
    res = run(*argv, "--store", typo)
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert f"--store {typo}: expected an existing store folder, got no such path" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing created


def test_read_only_commands_accept_an_existing_empty_store(tmp_path):
    (tmp_path / "store").mkdir()
    res = run("history", "--store", tmp_path / "store")
    assert res.exit_code == 0 and f"no releases in {tmp_path / 'store'}" in res.output


@pytest.mark.parametrize("command", [("compare", "r1", "r2"), ("history",)])
def test_n_perm_above_the_maximum_is_refused_at_once(tmp_path, command):
    make_store(tmp_path / "store", n_items=30)
    t0 = time.monotonic()
    res = run(*command, "--store", tmp_path / "store", "--n-perm", 10**12)
    assert res.exit_code == 2
    assert f"--n-perm: expected at most {cli.MAX_N_PERM} permutations per row, got {10**12}" in (
        " ".join(res.output.split())
    )
    assert time.monotonic() - t0 < 10


def test_compare_at_the_maximum_n_perm_runs_and_reports_progress(tmp_path):
    make_store(tmp_path / "store", n_items=12)  # 12 items: exact, 4096 sign patterns
    res = CliRunner().invoke(
        cli.app,
        [
            "compare",
            "r1",
            "r3",
            "--store",
            str(tmp_path / "store"),
            "--n-perm",
            str(cli.MAX_N_PERM),
        ],
    )
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert lines[0].startswith(f"comparing r3 with r1, {cli.MAX_N_PERM} permutations per row: 0/1")
    assert lines[-1].startswith(f"comparing r3 with r1, {cli.MAX_N_PERM} permutations per row: 1/1")
    res = CliRunner().invoke(cli.app, ["compare", "r1", "r3", "--store", str(tmp_path / "store")])
    assert res.exit_code == 0 and res.stderr == ""  # the default count: no progress lines


def test_serve_0_prints_the_port_it_is_bound_to(tmp_path):
    make_store(tmp_path / "store", n_items=30)
    site = tmp_path / "site"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tinyllm.cli", "dashboard", "--store", str(tmp_path / "store")]
        + ["--out", str(site), "--serve", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        # a run started in the background inherits SIGINT ignored, and Python then keeps it so
        # (no KeyboardInterrupt): the server would never see the Ctrl-C this test sends
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("serving "):
                break
        serving = lines[-1] if lines else ""
        m = re.fullmatch(
            rf"serving {re.escape(str(site))} on http://127\.0\.0\.1:(\d+)/ .*\n", serving
        )
        assert m, (lines, proc.stderr.read() if proc.poll() is not None else "")
        port = int(m.group(1))
        assert port != 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=10) as r:
            assert r.status == 200 and b"Overview" in r.read()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode == 0


def test_serve_on_a_busy_port_is_refused_before_the_site_is_written(tmp_path):
    import socket

    make_store(tmp_path / "store", n_items=30)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = run("dashboard", "--store", tmp_path / "store", "--out", tmp_path / "site")
        assert res.exit_code == 0  # without --serve the same site is written
        res = run(
            "dashboard",
            *("--store", tmp_path / "store", "--out", tmp_path / "site2", "--serve", port),
        )
    assert res.exit_code == 2
    assert f"--serve {port}: expected a free port on 127.0.0.1, got " in res.output
    assert not (tmp_path / "site2").exists()


@pytest.fixture
def s3(s3_env):
    """conftest's moto S3 (an empty one, found through the environment) with a bucket tl-dash;
    a boto3 client."""
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket="tl-dash")
    return client


def test_s3_dashboard_serve_without_out_is_refused_before_anything_is_uploaded(s3):
    st = open_store("s3://tl-dash/team")
    st.write_report("r1", report("r1", [lm_row("gpt", NLL[:30])], 1))
    st.write_items("r1", "gpt", NLL[:30])
    before = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="tl-dash")["Contents"])
    res = run("dashboard", "--store", "s3://tl-dash/team", "--serve", "0")
    assert res.exit_code == 2, res.output
    assert "--serve: expected --out DIR for an s3:// store" in res.output
    after = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="tl-dash")["Contents"])
    assert after == before and not any(k.startswith("team/dashboard/") for k in after)


def test_the_cli_maximum_is_the_librarys():
    from tinyllm import compare

    assert cli.MAX_N_PERM == compare.MAX_N_PERM


def test_help_of_compare_and_history_names_the_maximum():
    for command in ("compare", "history"):
        res = run(command, "--help")
        assert f"at most {cli.MAX_N_PERM}" in " ".join(res.output.split()).replace("│", "")
