"""The command line as a user meets it: help paragraphs that wrap at the terminal's width, one
spelling per option (older and lm-eval spellings still parse, hidden from help and completion),
and shell completion switched on."""

from __future__ import annotations

import ast
import functools
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tinyllm import cli
from tinyllm.cli.eval import lmeval

app_module = importlib.import_module("tinyllm.cli.app")  # the module: tinyllm.cli.app is the app

TINYLLM = str(Path(sys.executable).with_name("tinyllm"))


def all_commands(group=None, path=()):
    """``(path, click command)`` of every command and group of the app."""
    group = group if group is not None else typer.main.get_command(cli.app)
    yield path, group
    for name, sub in getattr(group, "commands", {}).items():
        yield from all_commands(sub, (*path, name))


def help_at(width: int, *path: str) -> str:
    # COLUMNS only: typer reads TERMINAL_WIDTH once, at import, for every later test too
    env = {"COLUMNS": str(width)}
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
    assert rows[judge].endswith("run's")
    assert rows[judge + 1].startswith("value with its 95% interval, and each later run")


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


# --- imports: what --help and a completion TAB load ----------------------------------------------

CLI = Path(cli.__file__).parent
HEAVY = ("torch", "lm_eval", "transformers", "datasets", "prefect", "numpy", "scipy", "botocore")
HEAVY += ("jinja2",)
"""What a command module imports inside its functions: each costs a tenth of a second or more."""


@functools.cache
def local_imports() -> list[tuple[str, int, str, str]]:
    """``(file, line, module, comment)`` of every import inside a function of tinyllm/cli; the
    comment of a run of consecutive imports is the one on its first line."""
    out = []
    for path in sorted(CLI.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom):
                    mods = [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                else:
                    continue
                first = node.lineno
                while first > fn.lineno and lines[first - 2].strip().startswith(
                    ("from ", "import ")
                ):
                    first -= 1
                comment = lines[first - 1].partition("#")[2].strip()
                out.extend((path.name, node.lineno, m, comment) for m in mods)
    return out


def cli_files() -> list:
    return sorted({f for f, *_ in local_imports()})


@pytest.mark.parametrize("file", cli_files())
def test_every_function_local_import_of_the_cli_says_what_it_loads(file):
    found = [(n, m) for f, n, m, why in local_imports() if f == file and not why]
    assert found == []


ROOT = CLI.parents[1]


def module_file(name: str) -> Path | None:
    """The file of module ``name`` of this checkout (tinyllm, tinyllm_suite), else None."""
    base = ROOT.joinpath(*name.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def module_of(name: str) -> str:
    """``name`` itself when it is a module of this checkout, else the module it is a name in."""
    while "." in name and module_file(name) is None and name.split(".")[0] in ("tinyllm",):
        name = name.rpartition(".")[0]
    return name


@functools.cache
def module_body(f: Path) -> list:
    return ast.parse(f.read_text(encoding="utf-8")).body


def loads(name: str, seen: set[str] | None = None) -> set[str]:
    """The top-level packages importing module ``name`` loads: its parents' and its module-level
    imports (not those inside functions), followed through this checkout's modules."""
    seen = set() if seen is None else seen
    parts = name.split(".")
    mods = [".".join(parts[: i + 1]) for i in range(len(parts))]
    out: set[str] = set()
    for mod in mods:
        if mod in seen:
            continue
        seen.add(mod)
        f = module_file(mod)
        if f is None:
            out.add(mod.split(".")[0])
            continue
        package = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        for node in module_body(f):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [module_of(f"{base}.{a.name}") for a in node.names]
            for t in targets:
                if t.split(".")[0] in ("tinyllm", "tinyllm_suite"):
                    out |= {t.split(".")[0]} | loads(t, seen)
                else:
                    out.add(t.split(".")[0])
    return out


def test_importing_the_cli_loads_nothing_heavy():
    code = "import sys, tinyllm.cli; print(sorted({m.split('.')[0] for m in sys.modules}))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert set(json.loads(res.stdout.replace("'", '"'))) & set(HEAVY) == set()
    assert loads("tinyllm.cli") & set(HEAVY) == set()  # the static walk agrees


@pytest.mark.parametrize("file", cli_files())
def test_each_function_local_import_of_the_cli_is_a_heavy_one(file):
    """A module the CLI imports inside a function loads torch, lm-eval, prefect, numpy, ... or
    is orchestration (tinyllm_suite): anything lighter is imported at the top."""
    mods = {module_of(m) for f, _, m, _ in local_imports() if f == file}
    assert [m for m in sorted(mods) if not loads(m) & {*HEAVY, "tinyllm_suite"}] == []


def test_the_cli_constants_agree_with_the_library():
    """The CLI writes the library's default store and permutation bound itself (so that --help
    imports neither boto3 nor numpy); they must stay the same values."""
    from tinyllm import compare, store  # the library side, heavy on purpose here
    from tinyllm.cli import common

    assert common.DEFAULT_STORE == store.DEFAULT_STORE
    assert common.MAX_N_PERM == compare.MAX_N_PERM


def test_every_store_option_is_the_one_declaration():
    """Each command that takes --store has the help of cli.common.store_option."""
    root = typer.main.get_command(cli.app)
    helps = {}
    for name, cmd in root.commands.items():
        for c in [cmd, *getattr(cmd, "commands", {}).values()]:
            for p in c.params:
                if "--store" in getattr(p, "opts", ()):
                    helps[f"{name} {c.name}"] = p.help
    assert len(helps) == 8, helps
    for cmd, text in helps.items():
        assert re.fullmatch(r"(A|With --\w+: a) folder or s3://bucket/prefix\.", text), cmd
