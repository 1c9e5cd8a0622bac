"""Mutation testing of tinyllm's core with mutmut (how to run it and the scores: docs/mutation.md).

    .venv/bin/python tools/mutate.py                          # every module of the core, in turn
    .venv/bin/python tools/mutate.py --module 'tinyllm/stats/*.py'  # one module (repeatable)
    .venv/bin/python tools/mutate.py --module 'tinyllm/eval/lm/*.py'  # the instrument, whole
    make mutate MODULE='tinyllm/stats/*.py'                      # the same through make
    .venv/bin/python tools/mutate.py --resume --module tinyllm/windows.py  # finish a stopped run
    .venv/bin/python tools/mutate.py --module tinyllm/windows.py --mutants '*x_token_nlls__*'

Each module is mutated against ONLY its own fast unit tests (MODULES below: no Prefect flow
tests, no browser tests), so that a mutant's verdict says what those tests catch. mutmut 3 reads
its settings from [tool.mutmut] in pyproject.toml; this script passes a per-module configuration
instead (only_mutate + the test selection) by replacing mutmut's config reader in a child process,
so pyproject.toml's [tool.mutmut] only holds the shared settings. mutmut copies the tree to
mutants/ (git-ignored) and runs there; each module starts from a fresh mutants/ and its summary
(`mutmut results --all true`) is kept in mutants-results/<module>.txt (git-ignored). With
--resume the mutants/ of an earlier run of the same module stays: mutmut 3 keeps the verdicts it
holds and checks only the mutants without one (and those of functions changed since).

Needs the `mutation` extra: `.venv/bin/pip install -e '.[mutation]'`. Never run by `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LM_MODULES = tuple(
    f"tinyllm/eval/lm/{m}.py"
    for m in ("heads", "ppl", "scoring", "kvcache", "choices", "tasks", "paired")
)
STORE_MODULES = tuple(
    f"tinyllm/store/{m}.py" for m in ("errors", "keys", "documents", "base", "local", "s3")
)
# the store's own tests; the publish tests sit above the store (their concurrent and killed-
# publish tests take about 60 s of a run that reaches the store's functions: 14 s without them)
STORE_OWN_TESTS = [
    "tests/test_store_local.py",
    "tests/test_store_s3.py",
    "tests/test_store_documents.py",
    "tests/test_store_items.py",
    "tests/test_store_history.py",
    "tests/test_store_faults.py",
    "tests/test_store_npy_versions.py",
    "tests/test_store_local_root.py",
    "tests/test_store_baseline_order.py",
    "tests/test_store_history_reads.py",
]
STORE_TESTS = [
    *STORE_OWN_TESTS,
    "tests/test_publish.py",
    "tests/test_publish_order.py",
    "tests/test_publish_error_rows.py",
    "tests/test_publish_retry_memory.py",
    "tests/test_publish_rows_without_scores.py",
    "tests/test_publish_baseline_items.py",
    "tests/test_publish_baseline_error_rows.py",
]
ZOO_TESTS = [
    f"tests/eval/test_zoo_{t}.py" for t in ("lm", "dispatch", "report", "cli", "rows", "workflow")
]
# tests that cannot give a verdict on a mutant: the layout test reads the package's source files
# (in mutmut's copy, the mutated ones with their trampolines), not what the code does; the
# slow-batch pick is a wall-clock race that a niced mutmut worker on a loaded machine loses
# whatever the mutant (it fails mutmut's clean run)
NOT_UNDER_MUTMUT = [
    "--ignore=tests/eval/lm/test_lm_layout.py",
    "--deselect=tests/eval/lm/test_measured_batch.py::"
    "test_a_cost_growing_with_the_batch_picks_one_window_per_pass_and_remembers_it",
]
# the per-module lists in main()'s default run: a package counts once, by its glob
PACKAGE_MODULES = (*LM_MODULES, *STORE_MODULES)

# module -> its fast unit tests (pytest node ids or files); no flows/, no browser tests
MODULES: dict[str, list[str]] = {
    "tinyllm/stats/*.py": [
        "tests/test_stats.py",
        "tests/test_stats_units.py",
        "tests/test_stats_estimators.py",
        "tests/test_stats_paired.py",
        "tests/test_stats_holm.py",
        "tests/test_stats_planning.py",
    ],
    "tinyllm/metrics.py": [
        "tests/test_metrics.py",
        "tests/test_row_scale_and_tokenizer.py",
        "tests/test_compare.py",
        "tests/test_compare_tokenizers.py",
    ],
    "tinyllm/compare.py": [
        "tests/test_compare.py",
        "tests/test_compare_spearman.py",
        "tests/test_compare_tokenizers.py",
        "tests/test_compare_row_checks.py",
    ],
    "tinyllm/compare_render.py": ["tests/test_compare_render.py"],
    # the instrument, whole or one module at a time, against all of its tests (tests/eval/lm/
    # mirrors the package; a module is also reached through the tests of the modules above it)
    **{m: ["tests/eval/lm", *NOT_UNDER_MUTMUT] for m in ("tinyllm/eval/lm/*.py", *LM_MODULES)},
    # perplexity and scoring against their own tests: the stats run of all of tests/eval/lm
    # takes about 9 minutes
    "tinyllm/eval/lm/ppl.py": ["tests/eval/lm/test_ppl.py", "tests/eval/lm/test_ppl_arguments.py"],
    # scoring against its own tests and those of the cache engines and the choices, which call
    # its functions through the cache paths (cached_lls, make_requests)
    "tinyllm/eval/lm/scoring.py": [
        "tests/eval/lm/test_scoring.py",
        "tests/eval/lm/test_prefix_sharing.py",
        "tests/eval/lm/test_kvcache.py",
        "tests/eval/lm/test_choices.py",
        "tests/eval/lm/test_scoring_requests.py",
        "tests/eval/lm/test_scoring_cached.py",
    ],
    # the windows and the scoring head sit below the families; the instrument's tests use them
    "tinyllm/windows.py": [
        "tests/eval/lm/test_windowing.py",
        "tests/eval/lm/test_ppl.py",
        "tests/eval/lm/test_measured_batch.py",
        "tests/models/test_hf_arch.py",
        "tests/test_windows_checks.py",
        "tests/test_windows_token_dtypes.py",
        *NOT_UNDER_MUTMUT,
    ],
    "tinyllm/logits.py": ["tests/eval/lm/test_heads.py", "tests/eval/lm/test_heads_hf.py"],
    "tinyllm/models/hf.py": [
        "tests/models/test_hf.py",
        "tests/models/test_hf_arch.py",
        "tests/eval/lm/test_heads_hf.py",
        "tests/eval/lm/test_kvcache_hf.py",
    ],
    "tinyllm/models/hf_views.py": [
        "tests/models/test_hf_arch.py",
        "tests/eval/lm/test_kvcache_hf.py",
        "tests/eval/lm/test_heads_hf.py",
    ],
    "tinyllm/device.py": ["tests/models/test_hf_arch.py"],
    "tinyllm/eval/zoo.py": ZOO_TESTS,
    "tinyllm/eval/kinds/*.py": [
        "tests/eval/test_kind_classifier.py",
        "tests/eval/test_kind_embeddings.py",
        "tests/eval/test_kind_mlm.py",
        "tests/eval/test_kind_rtd.py",
        "tests/eval/test_kind_seq2seq.py",
        *ZOO_TESTS,  # the lm kind (kinds/lm.py) is tested through the zoo's rows
    ],
    "tinyllm/store/*.py": STORE_TESTS,
    **{m: STORE_OWN_TESTS for m in STORE_MODULES},
    "tinyllm/publish.py": STORE_TESTS,
    "tinyllm/report.py": ["tests/eval/test_report.py"],
}


def _child(module: str, max_children: int, mutants: list[str]) -> int:
    """Run mutmut on one module in this process (mutmut forks its workers from here)."""
    import mutmut.configuration as mc

    base = _pyproject_mutmut()
    overrides = {
        "source_paths": ["tinyllm"],
        "only_mutate": [module],
        "pytest_add_cli_args_test_selection": MODULES[module],
    }

    def reader():
        def get(key, default):
            if key in overrides:
                return overrides[key]
            return base.get(key, default)

        return get

    mc._config_reader = reader  # mutmut's only entry to its settings (mutmut 3.8)
    from mutmut.__main__ import cli

    args = ["run", "--max-children", str(max_children), *mutants]
    try:
        cli(args, standalone_mode=False)
    except SystemExit as e:  # click may exit; the results are read by the parent
        return int(e.code or 0)
    return 0


def _pyproject_mutmut() -> dict:
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    return data.get("tool", {}).get("mutmut", {})


def _summary(results: str) -> dict[str, int]:
    """Count mutmut's verdicts from `mutmut results --all true` lines ("name: status")."""
    counts: dict[str, int] = {}
    for line in results.splitlines():
        m = re.match(r"\s*(\S+): (.+)$", line)
        if m and "__mutmut_" in m.group(1):
            counts[m.group(2).strip()] = counts.get(m.group(2).strip(), 0) + 1
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--module", action="append", help="a key of MODULES (repeatable); default all")
    ap.add_argument("--max-children", type=int, default=2, help="parallel mutant workers")
    ap.add_argument(
        "--resume", action="store_true", help="keep mutants/: check only the unchecked mutants"
    )
    ap.add_argument(
        "--mutants",
        action="append",
        default=[],
        help="check only the mutants whose names match this fnmatch pattern (repeatable)",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return _child(a.child, a.max_children, a.mutants)
    modules = a.module or [m for m in MODULES if m not in PACKAGE_MODULES]  # a package once
    for m in modules:
        if m not in MODULES:
            sys.exit(f"tools/mutate.py: expected one of {list(MODULES)}, got {m!r}")
    out_dir = ROOT / "mutants-results"
    out_dir.mkdir(exist_ok=True)
    mutmut = [sys.executable, "-m", "mutmut"]
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1")
    if a.resume and len(modules) != 1:
        sys.exit(f"tools/mutate.py: --resume expected one --module, got {len(modules)}")
    for m in modules:
        if not a.resume:
            shutil.rmtree(ROOT / "mutants", ignore_errors=True)
        print(f"== mutmut on {m} with {' '.join(MODULES[m])}", flush=True)
        rc = subprocess.call(
            [sys.executable, __file__, "--child", m, "--max-children", str(a.max_children)]
            + [f"--mutants={p}" for p in a.mutants],
            cwd=ROOT,
            env=env,
        )
        res = subprocess.run(
            [*mutmut, "results", "--all", "true"], cwd=ROOT, env=env, capture_output=True, text=True
        ).stdout
        counts = _summary(res)
        killed = counts.get("killed", 0)
        total = sum(counts.values())
        name = m.replace("/", "_").replace("*", "all")
        (out_dir / f"{name}.txt").write_text(res)
        (out_dir / f"{name}.json").write_text(json.dumps({"module": m, "counts": counts}) + "\n")
        print(f"== {m}: rc {rc}, killed {killed} / {total}, verdicts {counts}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
