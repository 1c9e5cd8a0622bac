"""The instrument's package layout (tinyllm/eval/lm/): one way down, no cycle, the names of
docs/definitions.md exported from ``tinyllm.eval.lm``; and the layers around it: the model families
never import the instrument, and the strided windows and the scoring head below them
(tinyllm/windows.py, tinyllm/logits.py) import neither.

Imports are read from each module's source (function-local imports included: they are
imports too), so a cycle is caught even where Python would not trip over it at import time.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import tinyllm
from tinyllm.eval import lm

PACKAGE = Path(lm.__file__).parent
LIBRARY = Path(tinyllm.__file__).parent

# each module may import only those before it (the order of the package docstring)
ORDER = ["heads", "ppl", "scoring", "kvcache", "choices", "tasks", "paired"]

# the names callers use (docs/definitions.md, the CLI, the zoo, the benchmarks, the families)
SPEC_NAMES = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MC_TOKEN_BUDGET",
    "DEFAULT_TOKEN_BUDGET",
    "METRICS",
    "FamilyLM",
    "Result",
    "choice_lls",
    "compare",
    "default_batch_size",
    "eval_ppl",
    "item_predictions",
    "iter_windows",
    "log_probs",
    "model_ctx_len",
    "read_task",
    "run_task",
    "score_choices",
    "summarize_nlls",
    "token_nlls",
    "windows",
]


def _lm_imports(path: Path) -> set[str]:
    """The tinyllm.eval.lm modules ``path`` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "tinyllm.eval.lm":
                found |= {a.name for a in node.names}
            elif node.module.startswith("tinyllm.eval.lm."):
                found.add(node.module.split(".")[3])
            elif node.module == "tinyllm.eval" and any(a.name == "lm" for a in node.names):
                found.add("__init__")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "tinyllm.eval.lm":
                    found.add("__init__")
                elif a.name.startswith("tinyllm.eval.lm."):
                    found.add(a.name.split(".")[3])
    return found


def test_the_modules_are_the_documented_ones():
    assert sorted(p.stem for p in PACKAGE.glob("*.py")) == sorted([*ORDER, "__init__"])


@pytest.mark.parametrize("name", ORDER)
def test_a_module_imports_only_the_modules_above_it(name):
    above = set(ORDER[: ORDER.index(name)])
    got = _lm_imports(PACKAGE / f"{name}.py")
    assert got <= above, f"{name}.py imports {sorted(got - above)}, expected only {sorted(above)}"


def test_the_package_exports_the_spec_names():
    assert set(SPEC_NAMES) <= set(lm.__all__)
    for name in lm.__all__:
        assert hasattr(lm, name), name
    assert callable(lm.windows) and lm.windows(6, 4, 2) == [(0, 4, 1), (2, 6, 4)]
    assert callable(lm.compare)  # functions, not the modules of the same concept


def _imports(path: Path) -> set[str]:
    """Every module ``path`` may import, anywhere in the file: ``a.b`` for ``import a.b``;
    ``a.b`` and ``a.b.c`` for ``from a.b import c`` (``c`` a module or a name)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def _inside(names: set[str], package: str) -> set[str]:
    return {m for m in names if m == package or m.startswith(package + ".")}


@pytest.mark.parametrize("path", sorted((LIBRARY / "models").glob("*.py")), ids=lambda p: p.name)
def test_no_model_family_imports_the_instrument(path):
    """Models never import tinyllm.eval: the instrument reads them through their hooks."""
    got = _inside(_imports(path), "tinyllm.eval")
    assert not got, f"tinyllm/models/{path.name} imports {sorted(got)}, expected no tinyllm.eval"


@pytest.mark.parametrize("name", ["windows", "logits"])
def test_the_strided_windows_and_the_head_sit_below_the_families(name):
    got = _imports(LIBRARY / f"{name}.py")
    bad = _inside(got, "tinyllm.eval") | _inside(got, "tinyllm.models")
    assert not bad, f"tinyllm/{name}.py imports {sorted(bad)}, expected neither eval nor models"


def test_importing_the_families_loads_nothing_of_the_instrument():
    code = (
        "import sys, tinyllm.models; "
        "print(sorted(m for m in sys.modules if m.startswith('tinyllm.eval')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
