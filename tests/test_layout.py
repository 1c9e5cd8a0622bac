"""The layers of docs/architecture.md: no import cycle between the modules of tinyllm and
tinyllm_suite, the library imports neither Prefect nor orchestration, orchestration imports no
CLI, and the contracts in pyproject.toml name every library module.

``lint-imports`` (make test, make lint) checks the contracts themselves; these tests hold with
pytest alone. Imports are read by grimp, import-linter's own graph library, from each module's
source: an import inside a function counts (a cycle it hides is still a cycle).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tinyllm", "tinyllm_suite")
ORCHESTRATION = ("prefect", "tinyllm_suite", "flows", "tasks")


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of a graph ``{module: modules it imports}``: each strongly connected
    component of more than one module (or a module importing itself), sorted (Tarjan's
    algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, targets = work[-1]
            for w in targets:
                if w not in edges:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1 or v in edges[v]:
                        found.append(sorted(component))
    return sorted(found)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    # no cache: grimp's cache is keyed on file times, which a quick edit can leave equal
    return grimp.build_graph(*PACKAGES, include_external_packages=True, cache_dir=None)


def _ours(module: str) -> bool:
    return module.split(".")[0] in PACKAGES


def _is(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_cycle_finder_finds_each_cycle_once():
    edges = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},
        "d": set(),
        "e": {"e"},
        "f": {"g", "x"},  # x: outside the graph
        "g": {"f"},
    }
    assert import_cycles(edges) == [["a", "b", "c"], ["e"], ["f", "g"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_an_import_inside_a_function_is_an_import(tmp_path, monkeypatch):
    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyclepkg import b\n")
    (pkg / "b.py").write_text("def late():\n    from cyclepkg.a import x\n    return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    g = grimp.build_graph("cyclepkg", cache_dir=None)
    edges = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    assert import_cycles(edges) == [["cyclepkg.a", "cyclepkg.b"]]


def test_no_import_cycle_between_modules(graph):
    edges = {
        m: {i for i in graph.find_modules_directly_imported_by(m) if _ours(i)}
        for m in graph.modules
        if _ours(m)
    }
    found = import_cycles(edges)
    assert found == [], f"expected no import cycle, got {len(found)}: {found}"


def test_the_library_imports_neither_prefect_nor_orchestration(graph):
    """Every tinyllm module but the CLI (tinyllm.cli, a module or a package)."""
    bad = []
    for m in sorted(graph.modules):
        if not _is(m, "tinyllm") or _is(m, "tinyllm.cli"):
            continue
        for i in graph.find_modules_directly_imported_by(m):
            if any(_is(i, p) for p in (*ORCHESTRATION, "tinyllm.cli")):
                bad.append(f"{m} -> {i}")
    assert bad == [], f"expected the library to import none of {ORCHESTRATION}, got {bad}"


def test_orchestration_imports_no_cli(graph):
    bad = [
        f"{m} -> {i}"
        for m in sorted(graph.modules)
        if _is(m, "tinyllm_suite")
        for i in graph.find_modules_directly_imported_by(m)
        if _is(i, "tinyllm.cli")
    ]
    assert bad == [], f"expected tinyllm_suite to import nothing of tinyllm.cli, got {bad}"


def _contracts() -> dict[str, dict]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in doc["tool"]["importlinter"]["contracts"]}


def _names(layer: str) -> tuple[set[str], set[str]]:
    """The (required, optional) modules of one layer line (``a : b``, ``a | b``, ``(c)``)."""
    parts = [p.strip() for p in layer.replace("|", ":").split(":")]
    optional = {p[1:-1] for p in parts if p.startswith("(")}
    return {p for p in parts if not p.startswith("(")}, optional


def test_the_library_layer_names_every_module_but_the_cli(graph):
    required, optional = _names(_contracts()["layers"]["layers"][-1])
    children = set(graph.find_children("tinyllm")) - {"tinyllm.cli"}
    assert required <= children, f"listed but missing: {sorted(required - children)}"
    unlisted = children - required - optional
    assert not unlisted, (
        f"pyproject.toml [tool.importlinter] 'layers': expected every library module in the "
        f"last layer, got {sorted(unlisted)} missing"
    )


def test_every_package_contract_is_exhaustive():
    """A contract over a package's children lists all of them (a new module needs a layer)."""
    for cid, c in _contracts().items():
        if c.get("containers"):
            assert c.get("exhaustive") is True, f"contract {cid!r}: expected exhaustive = true"
