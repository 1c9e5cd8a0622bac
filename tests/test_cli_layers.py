"""The CLI package's shape: one module per command group, every command at most 40 lines, nothing of
orchestration or torch loaded by `import tinyllm.cli` (prefect costs seconds of start-up), and a
demo runner that imports nothing of the CLI."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

CLI = Path(__file__).resolve().parents[1] / "tinyllm" / "cli"
MOST_LINES = 40


def loaded_after(statement: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules under ``prefixes`` a fresh interpreter has loaded after ``statement``."""
    code = (
        f"import json, sys; {statement}; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_importing_the_cli_loads_no_orchestration_and_no_torch():
    assert loaded_after("import tinyllm.cli", ("prefect", "tinyllm_suite", "torch")) == []


def test_the_demo_runner_imports_nothing_of_the_cli():
    assert loaded_after("import tinyllm_suite.demo", ("tinyllm.cli", "prefect")) == []


def commands() -> list[tuple[str, str, int]]:
    """``(module, function, lines)`` of every function registered as a command or callback."""
    out = []
    for path in sorted(CLI.rglob("*.py")):  # the eval group is a package
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and getattr(d.func, "attr", "") in ("command", "callback")
                for d in node.decorator_list
            ):
                out.append((path.name, node.name, node.end_lineno - node.lineno + 1))
    return out


def test_every_command_is_at_most_40_lines():
    found = commands()
    assert len(found) == 18, found  # version, demo, compare, history, dashboard, sweep, plan,
    # export, judge, the eval callback and ppl, task, lmeval, zoo build, task import-lmeval, server start, stop,
    # --debug
    assert [c for c in found if c[2] > MOST_LINES] == []
