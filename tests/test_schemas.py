"""The JSON schemas are package data (tinyllm/schemas/), read by one loader, and an installed
wheel validates reports and comparisons without the source tree.

The wheel test builds a wheel from a copy of the project (``pip wheel --no-deps``), lists the
schema files inside it, unpacks it into a folder outside the checkout and publishes two
releases from a child Python that imports tinyllm from that folder only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tinyllm import compare, report, schemas

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_FILES = [f"tinyllm/schemas/{name}" for name in schemas.NAMES]


def test_the_schemas_are_files_of_the_package():
    package = Path(schemas.__file__).parent
    for name in schemas.NAMES:
        f = schemas.schema_file(name)
        assert Path(f) == package / name
        schema = schemas.load_schema(f, name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    # report and compare validate with the packaged files
    assert Path(report.REPORT_SCHEMA_PATH) == package / "eval-results.schema.json"
    assert Path(report.MANIFEST_SCHEMA_PATH) == package / "manifest.schema.json"
    assert Path(compare.SCHEMA_PATH) == package / "compare.schema.json"
    with pytest.raises(ValueError) as ei:
        schemas.schema_file("report.json")
    assert str(ei.value) == (
        "schema: expected one of eval-results.schema.json, compare.schema.json, "
        "manifest.schema.json, got 'report.json'"
    )


def test_a_missing_schema_file_is_named(tmp_path):
    missing = tmp_path / "gone.schema.json"
    with pytest.raises(FileNotFoundError) as ei:
        schemas.load_schema(missing, "compare")
    assert str(ei.value) == (
        f"{missing}: the compare schema is missing (tinyllm reads it from its package data, "
        "tinyllm/schemas/; reinstall tinyllm)"
    )


def test_build_validator_is_draft_2020_12_whatever_else_is_registered():
    import jsonschema
    import prefect.utilities.schema_tools.validation  # noqa: F401 (registers its own 2020-12)

    schema = schemas.load_schema(schemas.schema_file(schemas.COMPARE), "c")
    assert jsonschema.validators.validator_for(schema) is not jsonschema.Draft202012Validator
    v = schemas.build_validator(schema)
    assert type(v) is jsonschema.Draft202012Validator
    assert type(schemas.build_validator({"type": "integer"})) is jsonschema.Draft202012Validator
    with pytest.raises(jsonschema.SchemaError):
        schemas.build_validator({"type": 5})
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "integer"}
    with pytest.raises(ValueError) as ei:
        schemas.build_validator(draft7)
    assert str(ei.value) == (
        "schema: expected $schema 'https://json-schema.org/draft/2020-12/schema', "
        "got 'http://json-schema.org/draft-07/schema#'"
    )


CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tinyllm
    from tinyllm.publish import publish_run
    from tinyllm.report import ReportSchemaError, validate_report
    from tinyllm.store import open_store

    site = sys.argv[1]
    assert tinyllm.__file__.startswith(site), tinyllm.__file__

    def report(release, day, items):
        value = float(np.mean(items))
        row = {
            "name": "cls", "family": "classifier", "kind": "classifier", "metric": "acc",
            "value": value, "lo": 0.0, "hi": 1.0, "interval": "wilson", "n": int(items.size),
            "status": "ok", "error": None, "reason": None, "checkpoint_sha256": "ab" * 32,
            "data_sha256": "ab" * 32, "seconds": 0.1, "items": None, "checkpoint": "c/",
            "data": "rows.tsv", "options": {}, "details": None,
        }
        return {
            "schema_version": 1, "suite": "zoo", "release": release,
            "created_at": f"2026-11-{day:02d}T18:00:00Z", "seed": 0, "tinyllm_version": "0.1.0",
            "manifest_sha256": "cd" * 32, "rows": [row],
        }

    bad = report("r0", 1, np.ones(4))
    bad["seed"] = -1
    try:
        validate_report(bad)
    except ReportSchemaError as e:
        refused = str(e).splitlines()[0]
    store = open_store(sys.argv[2])
    a = np.array([1.0, 0.0] * 20)
    publish_run(store, "r1", report("r1", 1, a), {"cls": a})
    out = publish_run(store, "r2", report("r2", 2, np.ones(40)), {"cls": np.ones(40)})
    print(json.dumps({
        "refused": refused,
        "verdict": out["compare"].rows[0].verdict,
        "stored": store.read_compare("r2").summary,
        "history": store.releases(),
    }))
    """
)


def test_an_installed_wheel_ships_the_schemas_and_validates(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("tinyllm", "tinyllm_suite", "flows"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        + ["--no-cache-dir", "-q", "-w", str(wheels), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = wheels.glob("tinyllm-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        tops = {n.split("/")[0] for n in names if not n.startswith("tinyllm-")}
        assert tops == {"tinyllm", "tinyllm_suite"}, tops  # no bare flows/ or tasks/ packages
        assert set(SCHEMA_FILES) <= names, sorted(n for n in names if "schema" in n)
        for f in SCHEMA_FILES:  # byte for byte the files of the source tree
            assert z.read(f) == (ROOT / f).read_bytes(), f
        site = tmp_path / "site"
        z.extractall(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(site)  # before site-packages: the editable install is not used
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(site), str(tmp_path / "store")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["refused"] == "report does not match eval-results.schema.json (1 problem):"
    assert out["verdict"] == "improved"
    assert out["stored"]["improved"] == 1
    assert out["history"] == ["r1", "r2"]
