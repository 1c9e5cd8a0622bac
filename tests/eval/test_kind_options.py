"""Each kind's options model: declared in the kind's own module from the fields of
tinyllm.report.EntryOptions (type, bounds and description written once there), frozen and
strict, unknown fields refused; an entry option its kind does not read is an error row for that
entry, from the library, the CLI and the EvalSuite flow's task alike; formats/manifest.md's
table of them is KINDS'."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner
from zoo_helpers import uniform_bigram  # same folder: on sys.path

from tinyllm import cli, train
from tinyllm.eval import zoo
from tinyllm.eval.kinds import KIND_MODULES, KINDS
from tinyllm.eval.kinds.common import ZOO_OPTIONS, Kind, KindOptions, options_model
from tinyllm.models import FAMILIES
from tinyllm.report import Entry, EntryOptions, parse_manifest

ROOT = Path(__file__).resolve().parents[2]
READS = {
    "lm": ("ctx_len", "stride", "doc_sep"),
    "seq2seq": ("beam",),
    "classifier": ("split",),
    "mlm": (),
    "rtd": (),
    "embeddings": (),
    "lmeval": ("task", "include_path", "num_fewshot", "limit", "metric", "ctx_len", "cluster_key"),
}


def _entry(family: str = "bigram", kind: str | None = None, **options) -> Entry:
    doc = {"name": "x", "family": family, "checkpoint": "c", "data": "d", "options": options}
    return Entry.model_validate(doc | ({"kind": kind} if kind else {}))


# ---- the models ---------------------------------------------------------------------------------


@pytest.mark.parametrize("module", KIND_MODULES, ids=lambda m: m.KIND)
def test_each_kind_declares_its_options_model_in_its_own_module(module):
    model = KINDS[module.KIND].options
    assert model is module.Options and issubclass(model, KindOptions)
    assert tuple(model.model_fields) == READS[module.KIND]
    assert dict(model.model_config) == {"extra": "forbid", "frozen": True, "strict": True}
    for name, f in model.model_fields.items():  # as written once in report.EntryOptions
        want = EntryOptions.model_fields[name]
        assert (f.annotation, f.default, f.description, f.metadata) == (
            want.annotation,
            want.default,
            want.description,
            want.metadata,
        )
        assert (
            f.description
            and model.model_json_schema()["properties"][name]
            == (EntryOptions.model_json_schema()["properties"][name])
        )
    assert set(READS[module.KIND]).isdisjoint(ZOO_OPTIONS) and set(ZOO_OPTIONS) <= set(
        EntryOptions.model_fields
    )


def test_an_options_model_refuses_unknown_fields_and_keeps_bounds_types_and_rules():
    lm, seq2seq, lmeval = (KINDS[k].options for k in ("lm", "seq2seq", "lmeval"))
    cases = [
        (lm, {"beam": 4}, "beam", "extra_forbidden"),
        (lm, {"device": "cpu"}, "device", "extra_forbidden"),  # the zoo's, not the kind's
        (lm, {"ctx_len": 1}, "ctx_len", "greater_than_equal"),
        (lm, {"ctx_len": "8"}, "ctx_len", "int_type"),  # strict: no coercion
        (seq2seq, {"beam": 0}, "beam", "greater_than_equal"),
        (lmeval, {"metric": "f1"}, "metric", "literal_error"),
        (lmeval, {"cluster_key": ""}, "cluster_key", "string_too_short"),
    ]
    for model, given, loc, kind in cases:
        with pytest.raises(ValidationError) as ei:
            model(**given)
        assert [(e["loc"], e["type"]) for e in ei.value.errors()] == [((loc,), kind)], given
    with pytest.raises(ValidationError, match="expected stride < ctx_len"):
        lm(ctx_len=8, stride=8)  # the cross-field rule of EntryOptions
    opts = lm(ctx_len=8, stride=4)
    assert (opts.ctx_len, opts.stride, opts.doc_sep) == (8, 4, None)
    with pytest.raises(ValidationError, match="frozen"):
        opts.stride = 2
    assert KINDS["mlm"].options().model_dump() == {}


def test_a_kind_holds_an_options_model_not_names():
    with pytest.raises(ValueError) as ei:
        Kind("x", "acc", "wilson", KINDS["mlm"].score, options=("beam",))
    assert str(ei.value) == "kind 'x': expected an options model (options_model), got ('beam',)"
    assert Kind("x", "acc", "wilson", KINDS["mlm"].score).options is KindOptions  # reads none


def test_the_builder_takes_only_fields_of_entry_options_but_the_zoos():
    assert tuple(options_model("t", "beam", "limit").model_fields) == ("beam", "limit")
    with pytest.raises(ValueError) as ei:
        options_model("t", "beam", "nope", "device")
    assert str(ei.value).startswith("kind 't': expected options among ['ctx_len', 'stride'")
    assert str(ei.value).endswith("(tinyllm.report.EntryOptions), got ['nope', 'device']")


# ---- reading an entry's options -----------------------------------------------------------------


def test_read_options_gives_the_kinds_typed_options_with_the_zoos_left_out():
    e = _entry(ctx_len=16, stride=8, device="cpu", dtype="float32", beam=None)
    opts = KINDS["lm"].read_options(e)  # a null option is unset; device and dtype the zoo's
    assert isinstance(opts, KINDS["lm"].options)
    assert opts.model_dump() == {"ctx_len": 16, "stride": 8, "doc_sep": None}
    lmeval = KINDS["lmeval"].read_options(_entry("gpt", "lmeval", limit=3, ctx_len=16))
    assert (lmeval.limit, lmeval.ctx_len, lmeval.task) == (3, 16, None)
    for kind in KINDS.values():
        assert kind.read_options(_entry(device="cpu", dtype="auto")).model_dump() == (
            dict.fromkeys(READS[kind.name])
        )


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        ("lm", {"beam": 4},
         "options.beam: expected options of kind lm (ctx_len, stride, doc_sep, device, dtype), "
         "got beam"),
        ("seq2seq", {"ctx_len": 8, "split": "val", "beam": 2},
         "options.ctx_len, options.split: expected options of kind seq2seq (beam, device, "
         "dtype), got ctx_len, split"),
        ("mlm", {"split": "val"},
         "options.split: expected options of kind mlm (device, dtype), got split"),
        ("embeddings", {"doc_sep": "none"},
         "options.doc_sep: expected options of kind embeddings (device, dtype), got doc_sep"),
        ("lmeval", {"stride": 8},
         "options.stride: expected options of kind lmeval (task, include_path, num_fewshot, "
         "limit, metric, ctx_len, cluster_key, device, dtype), got stride"),
    ],
)  # fmt: skip
def test_an_option_the_kind_does_not_read_is_refused_naming_it(kind, options, message):
    with pytest.raises(ValueError) as ei:
        KINDS[kind].read_options(_entry(**options))
    assert str(ei.value) == f"entry 'x': {message}"


# ---- an error row, from every path that scores --------------------------------------------------

BEAM_ERROR = (
    "entry 'beamed': options.beam: expected options of kind lm (ctx_len, stride, doc_sep, "
    "device, dtype), got beam"
)


def _manifest(d: Path) -> dict:
    """A uniform bigram scored as itself and as an entry with an option lm does not read."""
    uniform = uniform_bigram(d)
    return {"suite": "zoo", "entries": [uniform, dict(uniform, name="beamed", options={"beam": 4})]}


def test_an_unread_option_is_an_error_row_and_the_rest_of_the_zoo_is_scored(tmp_path):
    m = _manifest(tmp_path)
    report = zoo.run_zoo(m, base_dir=tmp_path)
    ok, bad = report.rows
    assert (ok.status, ok.value) == ("ok", 8.0)
    assert (bad.status, bad.value, bad.kind, bad.metric) == ("error", None, "lm", "bpb")
    assert (bad.error.type, bad.error.message) == ("ValueError", BEAM_ERROR)
    assert bad.options == {**dict.fromkeys(EntryOptions.model_fields), "beam": 4}
    assert "beamed" not in report.item_scores
    # the workflow's task scores one entry by the same function
    res = zoo.score_entry_result(m["entries"][1], base_dir=tmp_path, raise_transient=True)
    assert res.row["error"] == {"type": "ValueError", "message": BEAM_ERROR}
    assert res.items is None


def test_the_cli_zoo_and_the_flows_task_give_the_same_error_row(tmp_path):
    m = _manifest(tmp_path)
    (tmp_path / "zoo.yaml").write_text(yaml.safe_dump(m))
    out = tmp_path / "out" / "report.json"
    args = ["eval", "--suite", "zoo", "--manifest", str(tmp_path / "zoo.yaml"), "--out", str(out)]
    res = CliRunner().invoke(cli.app, args)
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["uniform"]["status"] == "ok"
    assert rows["beamed"]["error"] == {"type": "ValueError", "message": BEAM_ERROR}
    eval_tasks = pytest.importorskip("tinyllm_suite.eval_tasks")
    got = eval_tasks.score_entry_task.fn(m["entries"][1], 0, str(tmp_path))
    assert got["row"]["error"] == rows["beamed"]["error"] and got["items"] is None


# ---- the documentation and the demo zoo ---------------------------------------------------------


def _kind_of(e: Entry) -> str:
    return e.kind or FAMILIES[e.family].KIND


def test_the_demo_zoo_and_the_docs_manifests_set_only_options_their_kinds_read():
    entries = []
    for name, r in train.default_recipes().items():  # the entries build_zoo writes
        family = r.family_of(name)
        options = train.lm_options(family, r.options)
        entries += [_entry(family, **options) for _ in r.entries_of(name)]
        entries += [_entry(family, "lmeval", **(s.get("options") or {})) for s in
                    r.lmeval_entries.values()]  # fmt: skip
    docs = [ROOT / "README.md", *sorted((ROOT / "formats").glob("*.md"))]
    docs += sorted((ROOT / "docs").glob("*.md"))
    for path in docs:
        for m in re.finditer(r"^```yaml\n(.*?)^```", path.read_text("utf-8"), flags=re.S | re.M):
            if re.search(r"^entries:", m.group(1), flags=re.M):
                entries += parse_manifest(yaml.safe_load(m.group(1))).entries
    assert len(entries) > 20 and {_kind_of(e) for e in entries} >= {"lm", "seq2seq", "lmeval"}
    for e in entries:
        KINDS[_kind_of(e)].read_options(e)  # no option the kind does not read


def test_the_manifest_formats_table_of_options_by_kind_is_kinds():
    text = (ROOT / "formats" / "manifest.md").read_text("utf-8")
    table = text.split("| kind | options it reads |\n|---|---|\n", 1)[1].split("\n\n", 1)[0]
    got = {}
    for line in table.splitlines():
        kind, reads = (c.strip() for c in line.strip("|").split("|"))
        got[kind] = () if reads == "none" else tuple(re.findall(r"`(\w+)`", reads))
    assert got == {name: tuple(k.options.model_fields) for name, k in KINDS.items()}
    assert list(got) == list(KINDS)
