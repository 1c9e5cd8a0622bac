"""The layout of the store, publishing and comparison: one way down, no cycle, no private name
used across modules, and the public names importable where callers find them.

Imports are read from each module's source (function-local imports included: they are imports
too), so a cycle is caught even where Python would not trip over it at import time.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# bottom to top: each module may import only those before it (and the modules of BELOW)
ORDER = [
    "tinyllm.errors",
    "tinyllm.schemas",
    "tinyllm.comparison",
    "tinyllm.report",
    "tinyllm.baselines",
    "tinyllm.compare_checks",
    "tinyllm.compare_render",
    "tinyllm.compare",
    "tinyllm.store.errors",
    "tinyllm.store.keys",
    "tinyllm.store.documents",
    "tinyllm.store.base",
    "tinyllm.store.local",
    "tinyllm.store.s3",
    "tinyllm.store",
    "tinyllm.console",
    "tinyllm.history",
    "tinyllm.publish",
    "tinyllm.dashboard.views",
    "tinyllm.dashboard.plots",
    "tinyllm.dashboard.site",
    "tinyllm.dashboard.serve",
    "tinyllm.dashboard",
]
BELOW = {"tinyllm", "tinyllm.stats", "tinyllm.safeio", "tinyllm.metrics"}
STORE_NAMES = [
    "CAS_ATTEMPTS",
    "CAS_BACKOFF_S",
    "DEFAULT_STORE",
    "MAX_JSON_BYTES",
    "MAX_OBJECT_BYTES",
    "HistoryEntry",
    "LocalStore",
    "S3Store",
    "Store",
    "StoreConflictError",
    "StoreError",
    "StoreExistsError",
    "StoreKeyError",
    "StoreUnreadableError",
    "check_report",
    "history_order",
    "iter_reports",
    "new_run_id",
    "open_store",
    "parse_created_at",
    "run_id_time",
]
PUBLISH_NAMES = ["publish_run", "check_publish_args", "merge_rows", "merge_report"]


def _path(module: str) -> Path:
    p = ROOT.joinpath(*module.split("."))
    return p / "__init__.py" if p.is_dir() else p.with_suffix(".py")


def _tree(module: str) -> ast.Module:
    return ast.parse(_path(module).read_text(encoding="utf-8"))


def _imports(module: str) -> set[str]:
    """The tinyllm modules ``module`` imports, anywhere in its file."""
    found: set[str] = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tinyllm"):
            if node.module == "tinyllm":  # from tinyllm import safeio, schemas
                found |= {f"tinyllm.{a.name}" for a in node.names}
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("tinyllm")}
    return found


def test_the_store_package_has_the_documented_modules():
    modules = sorted(p.stem for p in (ROOT / "tinyllm" / "store").glob("*.py"))
    assert modules == ["__init__", "base", "documents", "errors", "keys", "local", "s3"]


@pytest.mark.parametrize("module", ORDER)
def test_a_module_imports_only_the_modules_below_it(module):
    allowed = BELOW | set(ORDER[: ORDER.index(module)])
    got = _imports(module)
    assert got <= allowed, f"{module} imports {sorted(got - allowed)}"


def test_compare_knows_no_store_and_the_store_no_publish():
    assert not {m for m in _imports("tinyllm.compare") if m.startswith("tinyllm.store")}
    for module in ORDER[: ORDER.index("tinyllm.store")]:
        assert "tinyllm.publish" not in _imports(module), module


@pytest.mark.parametrize("module", ORDER)
def test_no_private_name_is_used_across_modules(module):
    used = []
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tinyllm"):
            used += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if not node.attr.startswith("__") and owner not in ("self", "cls"):
                used.append(f"line {node.lineno}: {ast.unparse(node)}")
    assert used == []


def test_the_public_names_are_importable_where_callers_find_them():
    from tinyllm import publish, store

    assert set(STORE_NAMES) <= set(store.__all__)
    for name in store.__all__:
        assert hasattr(store, name), name
    for name in PUBLISH_NAMES:
        assert callable(getattr(publish, name))
    with pytest.raises(AttributeError, match="module 'tinyllm.store' has no attribute 'nope'"):
        store.nope  # noqa: B018
    assert importlib.import_module("tinyllm.store.s3").S3Store is store.S3Store
