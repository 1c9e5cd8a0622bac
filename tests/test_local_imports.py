"""Imports sit at the top of a module; one inside a function keeps a heavy or optional import
(torch, lm-eval, transformers, prefect, pyarrow, mlflow, wandb, matplotlib, jinja2, ...) off
the path of those who do not need it, and says so in a comment. tests/test_cli_polish.py holds
the command line to the same rule."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_cli_polish import HEAVY, loads, module_of

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


UNCOMMENTED: dict[str, str] = {}
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


def module_name(path: Path) -> str:
    """``tinyllm.eval.zoo`` for ``.../tinyllm/eval/zoo.py`` (a package: its ``__init__``)."""
    parts = path.relative_to(PACKAGES[0].parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_module_name_and_what_a_module_loads():
    assert module_name(PACKAGES[0] / "eval" / "zoo.py") == "tinyllm.eval.zoo"
    assert module_name(PACKAGES[1] / "__init__.py") == "tinyllm_suite"
    assert "prefect" in loads("tinyllm_suite.eval_suite")
    assert "torch" not in loads("tinyllm.safeio")


@pytest.mark.parametrize("path", library_files())
def test_a_function_local_import_of_our_own_modules_loads_what_the_module_does_not(path):
    """An import of a tinyllm or tinyllm_suite module inside a function brings something heavy
    (torch, lm-eval, prefect, numpy, ...: tests/test_cli_polish.py's HEAVY) or the suite that
    importing ``path`` does not load already: anything else is imported at the top."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    has = loads(name)
    found = []
    for n, mod, _ in local_imports(path.read_text(encoding="utf-8")):
        level = len(mod) - len(mod.lstrip("."))
        if level:  # relative: resolved against the module's package
            up = package.split(".")[: len(package.split(".")) - level + 1]
            mod = ".".join([*up, mod.lstrip(".")])
        if mod.split(".")[0] not in ("tinyllm", "tinyllm_suite"):
            continue
        if not (loads(module_of(mod)) - has) & {*HEAVY, "tinyllm_suite"}:
            found.append((n, mod))
    assert found == [], f"{path}: a light module of our own imported inside a function"
