"""tinyllm.report: the manifest model, its generated schema, the hand-written report schema, hashes."""

import copy
import hashlib
import json

import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from tinyllm import report as rp

GOOD = {
    "suite": "zoo",
    "entries": [
        {
            "name": "gpt",
            "family": "gpt",
            "checkpoint": "models/gpt",
            "data": "data/val.tok",
            "options": {"ctx_len": 64, "stride": 32},
        },
        {"name": "bigram", "family": "bigram", "checkpoint": "m/b", "data": "data/val.tok"},
    ],
}

HEX = "ab" * 32


def ok_row(**kw) -> dict:
    row = {
        "name": "gpt",
        "family": "gpt",
        "kind": "lm",
        "metric": "bpb",
        "value": 2.1,
        "lo": 2.05,
        "hi": 2.15,
        "interval": "student_t",
        "n": 36000,
        "status": "ok",
        "error": None,
        "reason": None,
        "checkpoint_sha256": HEX,
        "data_sha256": HEX,
        "seconds": 3.2,
        "items": "items/gpt.npy",
        "checkpoint": "models/gpt",
        "data": "data/val.tok",
        "options": {"ctx_len": 64, "stride": 32, "beam": None, "split": None},
        "details": None,
    }
    row.update(kw)
    return row


def report_doc(rows=None) -> dict:
    return {
        "schema_version": 1,
        "suite": "zoo",
        "release": "r1",
        "created_at": "2026-11-29T18:00:00Z",
        "seed": 0,
        "tinyllm_version": "0.1.0",
        "manifest_sha256": HEX,
        "rows": [ok_row()] if rows is None else rows,
    }


# ---- manifest ----------------------------------------------------------------------------------


def test_committed_manifest_schema_equals_generated():
    committed = rp.MANIFEST_SCHEMA_PATH.read_text(encoding="utf-8")
    assert committed == rp.manifest_schema_text(), "run `python -m tinyllm.report` to regenerate"
    Draft202012Validator.check_schema(json.loads(committed))


def test_good_manifest_parses_with_defaults():
    m = rp.parse_manifest(GOOD)
    assert [e.name for e in m.entries] == ["gpt", "bigram"]
    assert m.entries[0].options.ctx_len == 64 and m.entries[0].options.stride == 32
    assert m.entries[1].options == rp.EntryOptions()
    # the generated JSON Schema accepts what pydantic accepts
    schema = json.loads(rp.MANIFEST_SCHEMA_PATH.read_text())
    Draft202012Validator(schema).validate(GOOD)


def _bad(mutate) -> dict:
    doc = copy.deepcopy(GOOD)
    mutate(doc)
    return doc


@pytest.mark.parametrize(
    "mutate, expect, schema_rejects",
    [
        (lambda d: d["entries"][0].pop("data"), "entries.0.data: required field missing", True),
        (lambda d: d["entries"][1].update(name="gpt"), "duplicates ['gpt']", False),
        (lambda d: d["entries"][0].update(weights="x"), "entries.0.weights: unknown key", True),
        (lambda d: d.update(extra=1), "extra: unknown key", True),
        (
            lambda d: d["entries"][0]["options"].update(ctxlen=3),
            "entries.0.options.ctxlen: unknown key",
            True,
        ),
        (
            lambda d: d["entries"][0]["options"].update(stride=64),
            "expected stride < ctx_len",
            False,
        ),
        (
            lambda d: d["entries"][0]["options"].update(ctx_len="64"),
            "entries.0.options.ctx_len",
            True,
        ),
        (lambda d: d["entries"][0].update(name="GPT 2"), "entries.0.name", True),
        (lambda d: d.update(entries=[]), "entries", True),
        (lambda d: d.update(suite="glue"), "suite", True),
    ],
)
def test_bad_manifest_is_one_clear_error(mutate, expect, schema_rejects):
    doc = _bad(mutate)
    with pytest.raises(rp.ManifestError) as ei:
        rp.parse_manifest(doc, "zoo.yaml")
    msg = str(ei.value)
    assert msg.startswith("zoo.yaml: invalid manifest")
    assert expect in msg
    schema = json.loads(rp.MANIFEST_SCHEMA_PATH.read_text())
    assert (not Draft202012Validator(schema).is_valid(doc)) == schema_rejects


def test_manifest_lists_every_problem_at_once():
    def two(d):
        d["entries"][0].pop("family")
        d["entries"][1].update(bogus=True)

    with pytest.raises(rp.ManifestError) as ei:
        rp.parse_manifest(_bad(two))
    assert "2 problems" in str(ei.value)
    assert "entries.0.family" in str(ei.value) and "entries.1.bogus" in str(ei.value)


def test_load_manifest_file_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(rp.ManifestError, match="nope.yaml: manifest not found"):
        rp.load_manifest(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("entries: [unclosed\n")
    with pytest.raises(rp.ManifestError, match="broken.yaml: expected YAML or JSON"):
        rp.load_manifest(broken)
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(rp.ManifestError, match="expected a mapping"):
        rp.load_manifest(listy)


def test_manifest_sha256_ignores_formatting_not_content(tmp_path):
    import yaml

    (tmp_path / "a.yaml").write_text(yaml.safe_dump(GOOD) + "# a comment\n")
    (tmp_path / "b.json").write_text(json.dumps(GOOD, indent=4))
    a = rp.load_manifest(tmp_path / "a.yaml")
    b = rp.load_manifest(tmp_path / "b.json")
    assert a.sha256() == b.sha256()
    changed = _bad(lambda d: d["entries"][1].update(data="data/other.tok"))
    assert rp.parse_manifest(changed).sha256() != a.sha256()


# ---- report schema -----------------------------------------------------------------------------


def test_report_schema_is_valid_draft_2020_12_and_accepts_a_good_report():
    schema = rp.report_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)
    err = ok_row(
        name="broken",
        status="error",
        value=None,
        lo=None,
        hi=None,
        interval=None,
        n=None,
        items=None,
        error={"type": "FileNotFoundError", "message": "x: not found"},
    )
    skip = ok_row(
        name="mystery",
        family="mystery",
        kind=None,
        metric=None,
        status="skipped",
        value=None,
        lo=None,
        hi=None,
        interval=None,
        n=None,
        items=None,
        reason="unknown family 'mystery'",
    )
    acc = ok_row(name="clf", kind="classifier", metric="acc", value=0.8, lo=0.49, hi=0.94)
    acc.update(interval="wilson")
    rho = ok_row(name="w2v", kind="embeddings", metric="spearman", value=0.5, lo=0.16, hi=0.74)
    rho.update(interval="fisher_z", items=None)
    doc = report_doc([ok_row(), err, skip, acc, rho])
    rp.validate_report(doc)
    # the pydantic model reads the same document and writes it back unchanged
    assert rp.Report.model_validate(doc).to_json() == doc


@pytest.mark.parametrize(
    "mutate, where",
    [
        (lambda d: d["rows"][0].update(status="done"), "rows/0/status"),
        (lambda d: d["rows"][0].update(value="2.1"), "rows/0/value"),
        (lambda d: d["rows"][0].update(value=None), "rows/0/value"),  # ok row without a value
        (lambda d: d["rows"][0].update(error={"type": "E", "message": "m"}), "rows/0/error"),
        (lambda d: d["rows"][0].update(status="error"), "rows/0/error"),  # error row w/o error
        (lambda d: d["rows"][0].update(interval="wilson"), "rows/0/interval"),  # bpb: not wilson
        (lambda d: d["rows"][0].update(interval="paired_t"), "rows/0/interval"),  # not a row's
        (lambda d: d["rows"][0].update(units="../gpt.units.npy"), "rows/0/units"),
        (lambda d: d["rows"][0].update(n_units=0), "rows/0/n_units"),
        (lambda d: d["rows"][0].update(iid_interval={"lo": 1.0}), "rows/0/iid_interval"),
        (lambda d: d["rows"][0].update(metric="perplexity"), "rows/0/metric"),
        (lambda d: d["rows"][0].update(items="../etc/passwd"), "rows/0/items"),
        (lambda d: d["rows"][0].update(checkpoint_sha256="xyz"), "rows/0/checkpoint_sha256"),
        (lambda d: d["rows"][0].update(surprise=1), "rows/0"),
        (lambda d: d["rows"][0].pop("seconds"), "rows/0"),
        (lambda d: d.pop("manifest_sha256"), "<top>"),
        (lambda d: d.update(created_at="yesterday"), "created_at"),
        (lambda d: d.update(seed=-1), "seed"),
        (lambda d: d.update(schema_version=2), "schema_version"),
    ],
)
def test_report_violating_the_schema_is_refused(mutate, where):
    doc = report_doc()
    mutate(doc)
    with pytest.raises(rp.ReportSchemaError) as ei:
        rp.validate_report(doc)
    assert f"  {where}" in str(ei.value)


def test_row_model_and_schema_name_the_same_fields():
    schema = rp.report_schema()
    assert set(schema["$defs"]["row"]["properties"]) == set(rp.Row.model_fields)
    assert set(schema["properties"]) == set(rp.Report.model_fields)
    # the agreed enums
    props = schema["$defs"]["row"]["properties"]
    assert set(props["metric"]["enum"]) - {None} == set(rp.METRICS)
    assert set(props["interval"]["enum"]) - {None} == set(rp.INTERVALS)
    assert set(props["status"]["enum"]) == set(rp.STATUSES)
    assert set(props["kind"]["enum"]) - {None} == set(rp.KINDS)


def test_row_model_refuses_inconsistent_status():
    with pytest.raises(ValidationError, match="expected value null"):
        rp.Row.model_validate(ok_row(status="skipped", reason="x"))
    with pytest.raises(ValidationError, match="'error' must be set exactly for error rows"):
        rp.Row.model_validate(ok_row(error={"type": "E", "message": "m"}))


# ---- hashes ------------------------------------------------------------------------------------


def test_sha256_path_of_a_file_is_its_bytes_hash(tmp_path):
    f = tmp_path / "x.bin"
    data = bytes(range(256)) * 5000  # > 1 MiB: several read chunks
    f.write_bytes(data)
    assert rp.sha256_path(f) == hashlib.sha256(data).hexdigest()


def test_sha256_path_of_a_folder_follows_the_definition(tmp_path):
    d = tmp_path / "ckpt"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "b.bin").write_bytes(b"bee")
    (d / "a.json").write_bytes(b"{}")

    def h(b: bytes) -> str:
        return hashlib.sha256(b).hexdigest()

    # sorted by relative path: "a.json" < "sub/b.bin"
    text = f"a.json\0{h(b'{}')}\nsub/b.bin\0{h(b'bee')}\n"
    assert rp.sha256_path(d) == h(text.encode())
    before = rp.sha256_path(d)
    (d / "a.json").rename(d / "c.json")  # same bytes, another name: another hash
    assert rp.sha256_path(d) != before
    with pytest.raises(FileNotFoundError, match="nothing"):
        rp.sha256_path(tmp_path / "nothing")


# ---- the manifest's hash, its errors word for word, reading and validating -----------------------


def test_manifest_sha256_is_the_sha256_of_the_canonical_json_written_by_hand():
    doc = {
        "entries": [
            {"name": "zeta", "family": "gpt", "checkpoint": "m/é", "data": "d.tok"},
        ],
    }
    # sorted keys, no spaces, non-ASCII escaped, every option spelled out (defaults included)
    canon = (
        '{"entries":[{"checkpoint":"m/\\u00e9","data":"d.tok","family":"gpt","kind":null,'
        '"name":"zeta","options":{"beam":null,"cluster_key":null,"ctx_len":null,"device":null,'
        '"doc_sep":null,"dtype":null,'
        '"include_path":null,"limit":null,"metric":null,"num_fewshot":null,"split":null,'
        '"stride":null,"task":null}}],"suite":"zoo"}'
    )
    assert rp.parse_manifest(doc).sha256() == hashlib.sha256(canon.encode("ascii")).hexdigest()


def test_manifest_error_messages_word_for_word():
    dup = _bad(lambda d: d["entries"][1].update(name="gpt"))
    with pytest.raises(rp.ManifestError) as ei:
        rp.parse_manifest(dup)  # the default source
    assert str(ei.value) == (
        "<manifest>: invalid manifest (1 problem):\n"
        "  <top>: expected unique entry names, got duplicates ['gpt']"
    )
    stride = _bad(lambda d: d["entries"][0]["options"].update(stride=64))
    with pytest.raises(rp.ManifestError) as ei:
        rp.parse_manifest(stride, "zoo.yaml")
    assert str(ei.value) == (
        "zoo.yaml: invalid manifest (1 problem):\n"
        "  entries.0.options: expected stride < ctx_len (a window must keep some context), "
        "got stride=64, ctx_len=64 (got {'ctx_len': 64, 'stride': 64})"
    )
    # a field error hides pydantic's duplicate check: the duplicates are still reported, once
    both = _bad(lambda d: (d["entries"][1].update(name="gpt"), d["entries"][0].pop("data")))
    with pytest.raises(rp.ManifestError) as ei:
        rp.parse_manifest(both, "zoo.yaml")
    assert str(ei.value) == (
        "zoo.yaml: invalid manifest (2 problems):\n"
        "  entries.0.data: required field missing\n"
        "  entries: expected unique entry names, got duplicates ['gpt']"
    )
    two = _bad(lambda d: (d["entries"][0].pop("family"), d["entries"][1].update(bogus=True)))
    with pytest.raises(rp.ManifestError) as ei:
        rp.parse_manifest(two, "zoo.yaml")
    assert str(ei.value) == (
        "zoo.yaml: invalid manifest (2 problems):\n"
        "  entries.0.family: required field missing\n"
        "  entries.1.bogus: unknown key (got True)"
    )
    with pytest.raises(rp.ManifestError) as ei:
        rp.parse_manifest([GOOD], "zoo.yaml")
    assert str(ei.value) == "zoo.yaml: expected a mapping with 'suite' and 'entries', got list"
    with pytest.raises(rp.ManifestError, match=r"^zoo.yaml: invalid manifest \(1 problem\):\n"):
        rp.parse_manifest({"entries": 5}, "zoo.yaml")  # not a list: no duplicate hunt


def test_manifest_problem_lines_are_cut_at_300_characters():
    long = _bad(lambda d: d["entries"][0].update(name="x" * 400))
    with pytest.raises(rp.ManifestError) as ei:
        rp.parse_manifest(long, "zoo.yaml")
    line = str(ei.value).splitlines()[1]
    assert (
        line.startswith("  entries.0.name: String should have at most 64 characters (got 'xxx")
        and len(line) == 300
    )


def test_a_manifest_that_is_already_validated_is_returned_as_is():
    m = rp.parse_manifest(GOOD)
    assert rp.parse_manifest(m) is m


def test_load_manifest_reads_utf8_and_names_the_file_in_every_error(tmp_path):
    import yaml

    good = _bad(lambda d: d["entries"][1].update(data="données/val.tok"))
    f = tmp_path / "zoo.yaml"
    f.write_bytes(yaml.safe_dump(good, allow_unicode=True).encode("utf-8"))
    assert rp.load_manifest(f).entries[1].data == "données/val.tok"
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("suite: zoo\nentries: [{name: a, data: donn\xe9es}]\n".encode("latin-1"))
    with pytest.raises(rp.ManifestError) as ei:
        rp.load_manifest(latin)
    assert str(ei.value).startswith(f"{latin}: expected a readable UTF-8 manifest, got: 'utf-8'")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_bad(lambda d: d.update(extra=1))))
    with pytest.raises(rp.ManifestError) as ei:
        rp.load_manifest(bad)
    assert str(ei.value) == f"{bad}: invalid manifest (1 problem):\n  extra: unknown key (got 1)"


def test_write_manifest_schema_writes_the_generated_text(tmp_path):
    out = rp.write_manifest_schema(tmp_path / "m.schema.json")
    assert out == tmp_path / "m.schema.json"
    assert out.read_bytes() == rp.manifest_schema_text().encode("utf-8")
    assert out.read_bytes() == rp.MANIFEST_SCHEMA_PATH.read_bytes()


def test_report_row_lookup_and_json_types():
    rep = rp.Report.model_validate(report_doc([ok_row(details={"shape": (2, 3)})]))
    assert rep.row("gpt").value == 2.1
    with pytest.raises(KeyError, match=r"no row 'bert'; rows are \['gpt'\]"):
        rep.row("bert")
    # to_json is the document written to disk: JSON types only (a tuple becomes a list)
    details = rep.to_json()["rows"][0]["details"]
    assert details == {"shape": [2, 3]} and type(details["shape"]) is list
    rp.validate_report(rep)  # a Report object is validated through its JSON


def test_validate_report_message_counts_and_cuts(tmp_path):
    def message(doc) -> str:
        with pytest.raises(rp.ReportSchemaError) as ei:
            rp.validate_report(doc)
        return str(ei.value)

    one = report_doc()
    one["seed"] = -1
    assert message(one) == (
        "report does not match eval-results.schema.json (1 problem):\n"
        "  seed: -1 is less than the minimum of 0"
    )
    two = report_doc()
    two["seed"] = -1
    two["suite"] = 5
    assert message(two) == (
        "report does not match eval-results.schema.json (2 problems):\n"
        "  seed: -1 is less than the minimum of 0\n"
        "  suite: 5 is not of type 'string'"
    )

    # at most 20 problem lines, then how many more; each line cut at 300 characters
    def rows(k):
        return report_doc([ok_row(name=f"r{i:02d}", seconds=-1.0) for i in range(k)])

    assert message(rows(20)).count("\n") == 20 and "more" not in message(rows(20))
    m21 = message(rows(21)).splitlines()
    assert m21[0].endswith("(21 problems):") and len(m21) == 22
    assert m21[-1] == "  ... and 1 more"
    assert message(rows(25)).splitlines()[-1] == "  ... and 5 more"
    huge = report_doc([ok_row(kind="k" * 500)])
    line = message(huge).splitlines()[1]
    assert line.startswith("  rows/0/kind: 'kkk") and len(line) == 300


def test_the_report_validator_is_built_from_the_schema_file(tmp_path, monkeypatch):
    # a fresh validator (as in a new process) reads tinyllm/schemas/eval-results.schema.json
    monkeypatch.setattr(rp, "_REPORT_VALIDATOR", None)
    rp.validate_report(report_doc())
    bad = report_doc()
    bad["seed"] = -1
    with pytest.raises(rp.ReportSchemaError, match="seed"):
        rp.validate_report(bad)
    # without the file: a clear error naming it
    missing = tmp_path / "gone.schema.json"
    monkeypatch.setattr(rp, "_REPORT_VALIDATOR", None)
    monkeypatch.setattr(rp, "REPORT_SCHEMA_PATH", missing)
    with pytest.raises(FileNotFoundError) as ei:
        rp.validate_report(report_doc())
    assert str(ei.value) == (
        f"{missing}: the report schema is missing (tinyllm reads it from its package data, "
        "tinyllm/schemas/; reinstall tinyllm)"
    )


def test_load_manifest_is_utf8_whatever_the_locale(tmp_path):
    # a child Python in the plain C locale (ASCII, no UTF-8 mode) still reads a UTF-8 manifest
    import os
    import subprocess
    import sys

    import yaml

    f = tmp_path / "zoo.yaml"
    good = _bad(lambda d: d["entries"][1].update(data="données/val.tok"))
    f.write_bytes(yaml.safe_dump(good, allow_unicode=True).encode("utf-8"))
    assert rp.load_manifest(f).entries[1].data == "données/val.tok"  # here (a UTF-8 locale)
    env = dict(os.environ, LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    code = (
        "import locale, sys; from tinyllm.report import load_manifest; "
        "print(locale.getpreferredencoding(False), ascii(load_manifest(sys.argv[1]).entries[1].data))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(f)], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] != "UTF-8"  # the child really has a non-UTF-8 locale
    assert out[1] == ascii("données/val.tok")
