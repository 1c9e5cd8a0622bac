"""The report a zoo run writes, byte for byte: a small manifest (a uniform and a trained bigram
on a token file and on a text of documents, an unknown family, a missing data file) scored by
:func:`tinyllm.eval.zoo.run_zoo` and written by :func:`tinyllm.eval.report_files.write_report`
gives the report.json text and item files of ``golden/zoo_report.json``, but for what changes
from run to run (``created_at``, ``tinyllm_version``, each row's ``seconds``).

``TINYLLM_WRITE_GOLDEN=1 pytest tests/eval/test_zoo_golden.py`` rewrites the golden file: only
for a change meant to change what a report says."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
from zoo_helpers import uniform_bigram

from tinyllm.data import lee_bytes, lee_split
from tinyllm.eval.report_files import write_report
from tinyllm.eval.zoo import run_zoo
from tinyllm.models import bigram

GOLDEN = Path(__file__).parent / "golden" / "zoo_report.json"
VOLATILE = ("created_at", "tinyllm_version")


def zoo_dir(d: Path) -> dict:
    """The manifest (relative paths in ``d``): an ok row of each lm input, a skipped and an
    error row."""
    uniform = uniform_bigram(d)
    bigram.save(bigram.train(bigram.Config(k=0.5), lee_bytes("train"), seed=0), d / "trained")
    _, val = lee_split()
    (d / "val.txt").write_text("\n".join(val[:5]) + "\n", encoding="utf-8")
    return {
        "suite": "zoo",
        "entries": [
            uniform,
            {"name": "trained-text", "family": "bigram", "checkpoint": "trained",
             "data": "val.txt"},
            {"name": "uniform-text", "family": "bigram", "checkpoint": "uniform",
             "data": "val.txt", "options": {"doc_sep": "none"}},
            {"name": "unknown", "family": "nope", "checkpoint": "uniform", "data": "val.tok"},
            {"name": "missing", "family": "bigram", "checkpoint": "uniform",
             "data": "missing.tok"},
        ],
    }  # fmt: skip


def written(d: Path) -> dict:
    """What a run writes: report.json without the volatile fields (the run's folder written
    ``<zoo>``), and the sha256 of each file under items/."""
    manifest = zoo_dir(d)
    (d / "out").mkdir()
    write_report(run_zoo(manifest, seed=7, release="golden", base_dir=d), d / "out" / "report.json")
    text = (d / "out" / "report.json").read_text("utf-8")
    doc = json.loads(text.replace(str(d), "<zoo>"))  # an error names the file it missed
    for key in VOLATILE:
        assert key in doc
        doc[key] = None
    for row in doc["rows"]:
        assert row["seconds"] >= 0
        row["seconds"] = None
    items = sorted((d / "out" / "items").iterdir())
    return {
        "report": doc,
        "files": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in items},
    }


def test_a_zoo_run_writes_the_golden_report(tmp_path):
    got = written(tmp_path)
    text = json.dumps(got, indent=1) + "\n"
    if os.environ.get("TINYLLM_WRITE_GOLDEN") == "1":
        GOLDEN.write_text(text, encoding="utf-8")
    want = json.loads(GOLDEN.read_text("utf-8"))
    # the key order of every row too: the report's bytes, not only its values
    assert [list(r) for r in got["report"]["rows"]] == [list(r) for r in want["report"]["rows"]]
    assert list(got["report"]) == list(want["report"])
    assert got == want
    statuses = [r["status"] for r in got["report"]["rows"]]
    assert statuses == ["ok", "ok", "ok", "skipped", "error"]
    assert np.isclose(got["report"]["rows"][0]["value"], 8.0)  # uniform over 256 bytes
