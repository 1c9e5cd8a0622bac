"""Imports sit at the top of a module; one inside a function keeps a heavy or optional import
(torch, lm-eval, transformers, prefect, pyarrow, mlflow, wandb, matplotlib, jinja2, ...) off
the path of those who do not need it, and says so in a comment. tests/test_cli_polish.py holds
the command line to the same rule."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tinyllm
import tinyllm_suite

PACKAGES = (Path(tinyllm.__file__).parent, Path(tinyllm_suite.__file__).parent)


def local_imports(source: str) -> list[tuple[int, str, str]]:
    """``(line, module, comment)`` of every import inside a function of ``source``. The comment
    is the one on the import's own line, else on the first line of its run of consecutive
    imports, else on a comment line just above that run."""
    lines = source.splitlines()
    out = []
    seen = set()
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Import | ast.ImportFrom) or node.lineno in seen:
                continue
            seen.add(node.lineno)  # a nested function's imports: once
            if isinstance(node, ast.ImportFrom):
                mods = [f"{'.' * node.level}{node.module or ''}.{a.name}" for a in node.names]
            else:
                mods = [a.name for a in node.names]
            first = node.lineno
            while first > fn.lineno and lines[first - 2].strip().startswith(("from ", "import ")):
                first -= 1
            above = lines[first - 2].strip() if first >= 2 else ""
            comment = next(
                (
                    c
                    for c in (
                        lines[node.lineno - 1].partition("#")[2],
                        lines[first - 1].partition("#")[2],
                        above[1:] if above.startswith("#") else "",
                    )
                    if c.strip()
                ),
                "",
            )
            out.extend((node.lineno, m, comment.strip()) for m in mods)
    return out


def library_files() -> list:
    """Every module of tinyllm and tinyllm_suite, as a pytest parameter."""
    out = []
    for f in sorted(f for p in PACKAGES for f in p.rglob("*.py")):
        name = str(f.relative_to(PACKAGES[0].parent))
        marks = []
        if name in UNCOMMENTED:
            marks = pytest.mark.xfail(reason=UNCOMMENTED[name], strict=True)
        out.append(pytest.param(f, id=name, marks=marks))
    return out


UNCOMMENTED = {
    "tinyllm/eval/lmeval/backend.py": "create_from_arg_obj imports tinyllm.models.hf, a light "
    "module, inside the function: it belongs at the top",
}
"""Modules that break the rule, each with what is to change (strict: passing fails)."""


def test_the_walk_finds_each_kind_of_comment_and_its_absence():
    source = (
        "def f():\n"
        "    import torch  # the model\n"
        "    # lm-eval: the lmeval extra\n"
        "    import lm_eval\n"
        "    import lm_eval.api\n"
        "\n"
        "    from tinyllm import safeio\n"
        "    async def g():\n"
        "        from prefect import flow  # a run only\n"
    )
    assert local_imports(source) == [
        (2, "torch", "the model"),
        (4, "lm_eval", "lm-eval: the lmeval extra"),
        (5, "lm_eval.api", "lm-eval: the lmeval extra"),
        (7, "tinyllm.safeio", ""),
        (9, "prefect.flow", "a run only"),
    ]


@pytest.mark.parametrize("path", library_files())
def test_every_function_local_import_says_why_it_is_there(path):
    found = [(n, m) for n, m, why in local_imports(path.read_text(encoding="utf-8")) if not why]
    assert found == [], f"{path}: imports inside a function without a comment saying why"
