"""tinyllm.eval.zoo's report: rows in manifest order, failures as rows, the seed, the schema, and
report.json with items/<name>.npy written and read back.
"""

import json
import random
import shutil
import time

import numpy as np
import pytest
import yaml
from zoo_helpers import (  # same folder: pytest puts it on sys.path
    LM_FAMILIES,
    entry_of,
    manifest_of,
    stable_row,
    uniform_bigram,
)

from tinyllm.eval import report_files, zoo
from tinyllm.models import FAMILIES
from tinyllm.report import Entry, ManifestError, ReportSchemaError, validate_report
from tinyllm.tokens import write_tokens

# ---- the report --------------------------------------------------------------------------------


def _broken_zoo(zoo_dir, tmp_path) -> dict:
    """The real zoo plus broken entries, copied to ``tmp_path`` (the originals stay intact)."""
    d = tmp_path / "z"
    shutil.copytree(zoo_dir, d)
    doc = manifest_of(d)
    # corrupt copies: a folder checkpoint with garbage weights, a truncated one-file checkpoint
    shutil.copytree(d / "models" / "bigram", d / "models" / "bigram-bad")
    (d / "models" / "bigram-bad" / "model.safetensors").write_bytes(b"\x08\x00\x00\x00garbage!")
    broken = [
        {
            "name": "missing",
            "family": "bigram",
            "checkpoint": "models/gone",
            "data": "data/val.tok",
        },
        {"name": "mystery", "family": "mystery", "checkpoint": "models/x", "data": "data/val.tok"},
        {
            "name": "corrupt",
            "family": "bigram",
            "checkpoint": "models/bigram-bad",
            "data": "data/val.tok",
        },
    ]
    if "ngram" in FAMILIES:
        src = d / entry_of(d, "ngram")["checkpoint"]
        bad = d / "models" / "ngram-bad.safetensors"
        bad.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
        broken.append(
            {
                "name": "ngram-truncated",
                "family": "ngram",
                "checkpoint": "models/ngram-bad.safetensors",
                "data": "data/val.tok",
            }
        )
    # interleave broken and healthy entries
    entries = doc["entries"]
    for i, b in enumerate(broken):
        entries.insert(min(2 * i + 1, len(entries)), b)
    (d / "zoo.yaml").write_text(yaml.safe_dump(doc))
    return doc


def test_failures_are_rows_and_healthy_rows_are_still_scored(zoo_dir, tmp_path):
    doc = _broken_zoo(zoo_dir, tmp_path)
    report = zoo.run_zoo(tmp_path / "z" / "zoo.yaml", seed=0)
    assert [r.name for r in report.rows] == [e["name"] for e in doc["entries"]]
    rows = {r.name: r for r in report.rows}
    missing = rows["missing"]
    assert missing.status == "error" and missing.value is None
    assert missing.error.type == "FileNotFoundError"
    assert str(tmp_path / "z" / "models" / "gone") in missing.error.message
    assert rows["mystery"].status == "skipped" and rows["mystery"].value is None
    assert "unknown family 'mystery'" in rows["mystery"].reason and rows["mystery"].error is None
    corrupt = rows["corrupt"]
    assert corrupt.status == "error" and corrupt.value is None
    assert "bigram-bad" in corrupt.error.message and "safetensors" in corrupt.error.message
    assert corrupt.checkpoint_sha256 is not None  # the bytes that failed are identified
    if "ngram" in FAMILIES:
        t = rows["ngram-truncated"]
        assert t.status == "error" and "ngram-bad.safetensors" in t.error.message
    for arch in LM_FAMILIES:
        assert rows[arch].status == "ok" and rows[arch].value is not None
    validate_report(report.to_json())
    # the error/skipped rows carry no per-item scores; every ok row does
    assert set(report.item_scores) == set(LM_FAMILIES)


def test_report_validates_is_in_manifest_order_and_records_the_seed(zoo_dir, tmp_path):
    report = zoo.run_zoo(zoo_dir / "zoo.yaml", seed=7, release="r1")
    doc = report.to_json()
    validate_report(doc)
    assert doc["seed"] == 7 and doc["release"] == "r1" and doc["suite"] == "zoo"
    assert [r["name"] for r in doc["rows"]] == [e["name"] for e in manifest_of(zoo_dir)["entries"]]
    from tinyllm.report import load_manifest

    assert doc["manifest_sha256"] == load_manifest(zoo_dir / "zoo.yaml").sha256()
    out = report_files.write_report(report, tmp_path / "out" / "report.json")
    on_disk = json.loads(out.read_text())
    assert on_disk == doc
    back = report_files.read_report(out)
    for row in back.rows:
        saved = report_files.load_items(out, row)
        np.testing.assert_array_equal(saved, report.item_scores[row.name])
        assert (tmp_path / "out" / "items" / f"{row.name}.npy").is_file()
    assert not list((tmp_path / "out").rglob("*.tmp"))


def test_same_seed_same_report(zoo_dir):
    a = zoo.run_zoo(zoo_dir / "zoo.yaml", seed=3).to_json()
    b = zoo.run_zoo(zoo_dir / "zoo.yaml", seed=3).to_json()
    for doc in (a, b):
        doc.pop("created_at")
        doc["rows"] = [stable_row(r) for r in doc["rows"]]
    assert a == b


def test_shuffled_manifest_gives_the_same_rows(zoo_dir, tmp_path):
    doc = manifest_of(zoo_dir)
    random.Random(1).shuffle(doc["entries"])
    doc["entries"].reverse()  # never the original order, even for two entries
    (zoo_dir / "shuffled.yaml").write_text(yaml.safe_dump(doc))
    try:
        a = zoo.run_zoo(zoo_dir / "zoo.yaml", seed=5)
        b = zoo.run_zoo(zoo_dir / "shuffled.yaml", seed=5)
    finally:
        (zoo_dir / "shuffled.yaml").unlink()
    assert [r.name for r in b.rows] == [e["name"] for e in doc["entries"]]
    assert {r.name: stable_row(r) for r in a.rows} == {r.name: stable_row(r) for r in b.rows}


def test_run_zoo_with_an_rng_records_the_seed_it_drew(zoo_dir):
    a = zoo.run_zoo(zoo_dir / "zoo.yaml", rng=np.random.default_rng(11))
    b = zoo.run_zoo(zoo_dir / "zoo.yaml", rng=np.random.default_rng(11))
    assert a.seed == b.seed == int(np.random.default_rng(11).integers(0, 2**63 - 1))


def test_bad_manifest_is_one_error_before_anything_is_scored(zoo_dir, tmp_path):
    doc = manifest_of(zoo_dir)
    doc["entries"].append(dict(doc["entries"][0]))  # duplicate name
    doc["entries"][0]["checkpointt"] = "typo"  # unknown key
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    scored = []
    with pytest.raises(ManifestError) as ei:
        zoo.run_zoo(bad, progress=lambda i, n, row: scored.append(row))
    assert scored == []
    msg = str(ei.value)
    assert str(bad) in msg and "entries.0.checkpointt: unknown key" in msg
    assert "duplicates" in msg


@pytest.mark.parametrize(
    "change, message",
    [
        ({"family": "nplm"}, "expected a 'nplm' checkpoint, got tl_arch 'bigram'"),
        ({"options": {"ctx_len": 16, "stride": 8}}, "not scored in windows"),
        ({"data": "data/nothing.tok"}, "data/nothing.tok: data file not found"),
        ({"data": "data/wide.tok"}, "expected byte ids 0..255"),
        ({"data": "data/one.tok"}, "expected at least 3 tokens"),
    ],
)
def test_entry_problems_are_error_rows(zoo_dir, tmp_path, change, message):
    write_tokens(tmp_path / "data" / "wide.tok", np.array([1, 2, 300, 4], dtype=np.uint16))
    write_tokens(tmp_path / "data" / "one.tok", np.array([1], dtype=np.uint8))
    shutil.copy(zoo_dir / "data" / "val.tok", tmp_path / "data" / "val.tok")
    entry = dict(entry_of(zoo_dir, "bigram"), **change)
    entry["checkpoint"] = str(zoo_dir / entry["checkpoint"])  # absolute: kept as it is
    row = zoo.score_entry(entry, seed=0, base_dir=tmp_path)
    assert row["status"] == "error" and row["value"] is None, row
    assert message in row["error"]["message"]


def test_score_entry_accepts_entries_and_keeps_items_only_when_asked(zoo_dir, tmp_path):
    e = Entry.model_validate(entry_of(zoo_dir, "bigram"))
    row = zoo.score_entry(e, seed=0, base_dir=zoo_dir)
    assert row["status"] == "ok" and row["items"] is None
    row2 = zoo.score_entry(e, seed=0, base_dir=zoo_dir, items_dir=tmp_path / "items")
    assert row2["items"] == "items/bigram.npy" and (tmp_path / "items" / "bigram.npy").is_file()
    # the baseline's items likewise: items/<name>.baseline.npy only when asked
    assert row["baseline"]["items"] is None
    assert row2["baseline"]["items"] == "items/bigram.baseline.npy"
    assert (tmp_path / "items" / "bigram.baseline.npy").is_file()

    # the unit ids (contiguous blocks of the token file) likewise: items/<name>.units.npy
    assert row["units"] is None and row2["units"] == "items/bigram.units.npy"
    n = row2["n"]
    np.testing.assert_array_equal(
        np.load(tmp_path / row2["units"]), np.arange(n) // row2["details"]["block_len"]
    )

    def unsaved(r):
        base = r["baseline"] | {"items": None}
        return stable_row(r) | {"items": None, "units": None, "baseline": base}

    assert unsaved(row) == unsaved(row2)


def test_write_report_refuses_a_report_that_violates_the_schema(zoo_dir, tmp_path):
    doc = zoo.run_zoo(zoo_dir / "zoo.yaml", seed=0).to_json()
    doc["rows"][0]["status"] = "fine"
    out = tmp_path / "report.json"
    with pytest.raises(ReportSchemaError, match="rows/0/status"):
        report_files.write_report(doc, out)
    assert not out.exists() and not (tmp_path / "items").exists()
    # a row naming per-item scores that do not exist is refused too
    good = zoo.run_zoo(zoo_dir / "zoo.yaml", seed=0).to_json()
    with pytest.raises(FileNotFoundError, match="neither given nor found"):
        report_files.write_report(good, out)
    assert not out.exists()


def test_build_report_puts_rows_in_manifest_order(zoo_dir):
    m = manifest_of(zoo_dir)
    rows = [zoo.score_entry(e, seed=0, base_dir=zoo_dir) for e in reversed(m["entries"])]
    report = zoo.build_report(m, rows, seed=0)
    assert [r.name for r in report.rows] == [e["name"] for e in m["entries"]]
    with pytest.raises(ValueError, match="one row per manifest entry"):
        zoo.build_report(m, rows[:-1], seed=0)


def test_report_errors_name_what_is_wrong_exactly(zoo_dir):
    m = manifest_of(zoo_dir)
    names = [e["name"] for e in m["entries"]]
    rows = [zoo.score_entry(e, seed=0, base_dir=zoo_dir) for e in m["entries"]]
    with pytest.raises(ValueError) as ei:
        zoo.build_report(m, rows[:-1], seed=0)
    assert str(ei.value) == (
        f"expected one row per manifest entry {names} (each at most once), got rows {names[:-1]}"
    )
    with pytest.raises(ValueError) as ei:
        zoo.build_run_report(m, [rows[0], dict(rows[0], name="nope")], seed=0)
    assert str(ei.value) == (
        f"expected rows naming manifest entries {names} (each at most once), "
        f"got rows {[names[0], 'nope']}; unknown ['nope']"
    )
    with pytest.raises(ValueError) as ei:
        zoo.build_run_report(m, [rows[0], rows[0]], seed=0)
    assert str(ei.value).endswith(f"got rows {[names[0]] * 2}; duplicated {[names[0]]}")


def test_created_at_is_the_given_one_or_now_in_utc(zoo_dir, monkeypatch):
    from datetime import UTC, datetime

    m = manifest_of(zoo_dir)
    rows = [zoo.score_entry(e, seed=0, base_dir=zoo_dir) for e in m["entries"]]
    stamp = "2026-01-02T03:04:05Z"
    assert zoo.build_report(m, rows, seed=0, created_at=stamp).created_at == stamp
    assert zoo.build_run_report(m, rows[:1], seed=0, created_at=stamp)["created_at"] == stamp
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # +05:30: local time is not UTC
    time.tzset()
    try:
        got = zoo.build_report(m, rows, seed=0).created_at
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    when = datetime.strptime(got, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - when).total_seconds()) < 60


def test_build_report_keeps_items_as_float64(zoo_dir):
    m = manifest_of(zoo_dir)
    rows = [zoo.score_entry(e, seed=0, base_dir=zoo_dir) for e in m["entries"]]
    name = rows[0]["name"]
    report = zoo.build_report(m, rows, seed=0, items={name: [1, 0, 1]})
    assert report.item_scores[name].dtype == np.float64
    assert report.item_scores[name].tolist() == [1.0, 0.0, 1.0]


def test_write_report_nested_folders_text_and_non_finite_numbers(tmp_path):
    entry = uniform_bigram(tmp_path)
    rows = [zoo.score_entry(entry, base_dir=tmp_path, items_dir=tmp_path / "a" / "b" / "items")]
    assert (tmp_path / "a" / "b" / "items" / "uniform.npy").is_file()  # parents made
    # per-item scores given for a row that does not name a file: nothing written for it
    plain = zoo.score_entry(entry, base_dir=tmp_path)
    report = zoo.build_report({"entries": [entry]}, [plain], seed=0, items={"uniform": [1.0]})
    out = report_files.write_report(report, tmp_path / "x" / "y" / "report.json")
    assert not (tmp_path / "x" / "y" / "items").exists()
    doc = report.to_json()
    assert out.read_text(encoding="utf-8") == json.dumps(doc, indent=2) + "\n"
    # NaN is not JSON: a report carrying one (here in free-form details) is refused
    bad = json.loads(json.dumps(doc))
    bad["rows"][0]["details"]["sum_nll"] = float("nan")
    with pytest.raises(ValueError, match="JSON compliant"):
        report_files.write_report(bad, tmp_path / "nan" / "report.json")
    assert not (tmp_path / "nan" / "report.json").exists()
    assert rows[0]["items"] == "items/uniform.npy"


def test_load_items_takes_a_row_dict_and_refuses_pickles(tmp_path):
    entry = uniform_bigram(tmp_path)
    report = zoo.run_zoo({"entries": [entry]}, base_dir=tmp_path)
    out = report_files.write_report(report, tmp_path / "rep" / "report.json")
    doc = json.loads(out.read_text())
    got = report_files.load_items(out, doc["rows"][0])  # a plain dict, as read from the JSON
    np.testing.assert_array_equal(got, report.item_scores["uniform"])
    assert report_files.load_items(out, dict(doc["rows"][0], items=None)) is None
    np.save(tmp_path / "rep" / "items" / "uniform.npy", np.array([{}], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        report_files.load_items(out, doc["rows"][0])  # an object array is never unpickled


def test_saved_items_are_float64_whatever_was_attached(tmp_path):
    """formats/manifest.md: per-item scores are saved as float64, also when a caller attached
    float32 (or integer) arrays to ``report.item_scores`` itself."""
    entry = uniform_bigram(tmp_path)
    report = zoo.run_zoo({"entries": [entry]}, base_dir=tmp_path)
    report.item_scores["uniform"] = report.item_scores["uniform"].astype(np.float32)
    out = report_files.write_report(report, tmp_path / "rep" / "report.json")
    saved = report_files.load_items(out, report.rows[0])
    assert saved.dtype == np.float64 and saved.shape == (18,)


def test_the_seed_drawn_from_an_rng_is_its_first_integer_below_2_63(zoo_dir):
    for s in (2, 4):  # rngs whose draw below 2**63 - 1 and below 2**63 - 2 differ
        want = int(np.random.default_rng(s).integers(0, 2**63 - 1))
        assert want != int(np.random.default_rng(s).integers(0, 2**63 - 2))
        assert zoo.run_zoo(zoo_dir / "zoo.yaml", rng=np.random.default_rng(s)).seed == want
