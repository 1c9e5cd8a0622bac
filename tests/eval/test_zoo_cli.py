"""``tinyllm eval --suite zoo``: the table, the report it writes, a bad manifest; and the manifest
that ``build_zoo`` writes is scored.
"""

import json

from typer.testing import CliRunner
from zoo_helpers import (  # same folder: pytest puts it on sys.path
    LM_FAMILIES,
)

from tinyllm.eval import zoo
from tinyllm.report import validate_report

# ---- CLI ---------------------------------------------------------------------------------------


def test_cli_eval_suite_zoo_prints_the_table_and_writes_the_report(zoo_dir, tmp_path):
    from tinyllm.cli import app

    out = tmp_path / "rep" / "report.json"
    args = ["eval", "--suite", "zoo", "--manifest", str(zoo_dir / "zoo.yaml"), "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    for col in ("family", "metric", "value", "95% interval", "status"):
        assert col in res.output
    for arch in LM_FAMILIES:
        assert arch in res.output
    doc = json.loads(out.read_text())
    validate_report(doc)
    assert doc["release"] is None and len(doc["rows"]) == len(LM_FAMILIES)

    res = CliRunner().invoke(app, [*args, "--json", "--seed", "4"])
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout[res.stdout.index("{") :])
    assert printed == json.loads(out.read_text()) and printed["seed"] == 4


def test_cli_bad_manifest_exits_2_with_the_problem(tmp_path):
    from tinyllm.cli import app

    bad = tmp_path / "bad.yaml"
    bad.write_text("entries:\n  - name: x\n")
    out = tmp_path / "report.json"
    res = CliRunner().invoke(
        app, ["eval", "--suite", "zoo", "--manifest", str(bad), "--out", str(out)]
    )
    assert res.exit_code == 2
    assert "entries.0.family: required field missing" in res.output
    assert not out.exists()
    res = CliRunner().invoke(app, ["eval", "--suite", "glue", "--manifest", str(bad)])
    assert res.exit_code == 2 and "expected one of ['zoo']" in res.output


def test_the_manifest_that_zoo_build_writes_is_scored(tmp_path):
    from tinyllm.train import MANIFEST_NAME, Recipe, build_zoo

    recipes = {"bigram": Recipe(config={"k": 0.5}), "ngram": Recipe(config={"order": 2})}
    built = build_zoo(tmp_path, progress=False, threads=1, recipes=recipes)
    report = zoo.run_zoo(tmp_path / MANIFEST_NAME, seed=0)
    assert [r.name for r in report.rows] == [name for name, _ in built]
    for r in report.rows:
        assert r.status == "ok", r.error
        assert r.n > 10_000 and 1.0 < r.value < 8.0
    validate_report(report.to_json())
