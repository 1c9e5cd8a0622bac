"""The command line as a user meets it: help paragraphs that wrap at the terminal's width, one
spelling per option (older and lm-eval spellings still parse, hidden from help and completion),
and shell completion switched on."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tinyllm import cli
from tinyllm.cli import lmeval

app_module = importlib.import_module("tinyllm.cli.app")  # the module: tinyllm.cli.app is the app

TINYLLM = str(Path(sys.executable).with_name("tinyllm"))


def all_commands(group=None, path=()):
    """``(path, click command)`` of every command and group of the app."""
    group = group if group is not None else typer.main.get_command(cli.app)
    yield path, group
    for name, sub in getattr(group, "commands", {}).items():
        yield from all_commands(sub, (*path, name))


def help_at(width: int, *path: str) -> str:
    env = {"COLUMNS": str(width), "TERMINAL_WIDTH": str(width)}
    res = CliRunner().invoke(cli.app, [*path, "--help"], env=env)
    assert res.exit_code == 0, res.output
    return res.output


# --- help text ----------------------------------------------------------------------------------


def test_every_help_paragraph_is_one_line_so_the_terminal_wraps_it():
    """A docstring's own line breaks (judge, plan, history, dashboard) never show in help."""
    for path, cmd in all_commands():
        for paragraph in (cmd.help or "").split("\n\n"):
            assert "\n" not in paragraph, (path, paragraph)


@pytest.mark.parametrize("path", [p for p, _ in all_commands()], ids=" ".join)
def test_help_at_80_columns_cuts_no_word_and_shows_no_alias(path):
    out = help_at(80, *path)
    assert "…" not in out  # rich cuts a word longer than its column with an ellipsis
    assert max(len(ln) for ln in out.splitlines()) <= 80
    names = re.findall(r"^│ (?:\*  |   )?(--[\w-]+(?:,--[\w-]+)*)", out, flags=re.M)
    assert names and [n for n in names if "," in n or "_" in n or n == "--max-len"] == []


def test_the_command_list_shows_each_commands_summary_as_running_text():
    out = help_at(80)
    rows = [ln.strip("│ ").rstrip() for ln in out.splitlines() if ln.startswith("│")]
    judge = next(i for i, r in enumerate(rows) if r.startswith("judge "))
    # the summary fills each line (it was cut after "with its 95%" where the docstring broke)
    assert rows[judge].endswith("run's") and rows[judge + 1].startswith("value with its 95%")


def test_reflow_keeps_paragraphs_and_a_paragraph_marked_to_keep_its_lines():
    text = "One\n    two.\n\n    Three\n    four.\n\n    \b\n    a\n    b"
    assert app_module.reflow(text) == "One two.\n\nThree four.\n\n\b\na\nb"
    assert app_module.reflow(None) is None


def test_doc_sep_help_shows_no_raw_newline_default():
    out = help_at(120, "eval", "ppl")
    assert "[default: \n" not in out and "[default:" + " " * 10 not in out


# --- one spelling per option ---------------------------------------------------------------------


DIFFERENT_OPTIONS = {
    ("--task", "--tasks"),  # eval task's one task file; eval lmeval's lm-eval task names
    ("--out", "--output-path"),  # our report or folder; eval lmeval's folder in lm-eval's layout
}
"""Pairs of shown names where one extends the other but the two are different options."""


def test_one_spelling_per_option_name_across_commands():
    """Every shown long name is the only spelling of its option: no two shown names differ only
    in '-' / '_' or in being cut short (--max-len beside --max-length)."""
    shown = set()
    for _, cmd in all_commands():
        for p in cmd.params:
            if getattr(p, "param_type_name", None) == "option":
                shown.update(o for o in app_module.shown_names(p) if o.startswith("--"))
    assert "--max-length" in shown and "--max-len" not in shown
    assert not [o for o in shown if "_" in o]
    for a in shown:
        for b in shown:
            if b.startswith(a) and b != a and b[len(a)] != "-":  # cut short
                assert (a, b) in DIFFERENT_OPTIONS
    assert not [o for o in shown if o.replace("-", "") in {x.replace("-", "") for x in shown - {o}}]


def test_eval_task_takes_max_length_and_the_old_max_len(monkeypatch, tmp_path):
    from tinyllm.eval import single

    seen = []

    def fake_score_task(task, **kw):
        seen.append(kw["max_len"])
        return {"n": 1, "n_units": 1, "interval": "wilson", "model": "m"} | dict(
            value=1.0, lo=0.5, hi=1.0
        )

    monkeypatch.setattr(single, "score_task", fake_score_task)
    task = tmp_path / "t.jsonl"
    task.write_text("{}\n")
    for flag in ("--max-length", "--max-len"):
        res = CliRunner().invoke(cli.app, ["eval", "task", "--task", str(task), flag, "7", "-q"])
        assert res.exit_code == 0, res.output
    assert seen == [7, 7]


LMEVAL_SPELLINGS = {
    "--model-args": ("--model_args", "pretrained=/m"),
    "--include-path": ("--include_path", "/tasks"),
    "--num-fewshot": ("--num_fewshot", "3"),
    "--batch-size": ("--batch_size", "4"),
    "--output-path": ("--output_path", "/out"),
}


@pytest.mark.parametrize("flag", sorted(LMEVAL_SPELLINGS))
def test_eval_lmeval_takes_each_flag_in_both_spellings(monkeypatch, flag):
    alias, value = LMEVAL_SPELLINGS[flag]
    calls = []
    monkeypatch.setattr(lmeval, "_evaluate", lambda *a: calls.append(a) or {})
    monkeypatch.setattr(lmeval, "_print", lambda out, as_json: None)
    for name in (flag, alias):
        res = CliRunner().invoke(cli.app, ["eval", "lmeval", "--tasks", "t", name, value])
        assert res.exit_code == 0, res.output
    assert len(calls) == 2 and calls[0] == calls[1]
    assert value in repr(calls[0]) or int(value) in calls[0][3].values() or calls[0][2]


def test_eval_lmeval_log_samples_in_both_spellings(monkeypatch):
    calls = []
    monkeypatch.setattr(lmeval, "_evaluate", lambda *a: calls.append(a[4]) or {})
    monkeypatch.setattr(lmeval, "_print", lambda out, as_json: None)
    for name in ("--log-samples", "--log_samples"):
        args = ["eval", "lmeval", "--tasks", "t", "--output-path", "/o", name]
        assert CliRunner().invoke(cli.app, args).exit_code == 0
    assert calls == [(None, "/o", True), (None, "/o", True)]


# --- shell completion ----------------------------------------------------------------------------


def complete(words: str) -> list[str]:
    env = dict(os.environ, _TINYLLM_COMPLETE="complete_bash", COMP_WORDS=words)
    env["COMP_CWORD"] = str(len(words.split()) - 1)
    res = subprocess.run([TINYLLM], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_shell_completion_is_on_and_offers_only_the_shown_spellings():
    out = help_at(100)
    assert "--install-completion" in out and "--show-completion" in out
    assert complete("tinyllm ev") == ["eval"]
    assert complete("tinyllm eval task --max") == ["--max-length"]
    assert complete("tinyllm eval lmeval --model") == ["--model", "--model-args"]
    assert re.search(r"\bdashboard\b", " ".join(complete("tinyllm da")))
