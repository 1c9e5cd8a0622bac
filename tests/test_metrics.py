"""tinyllm.metrics: each metric's facts, declared once, and the tables the kinds, the zoo, compare,
the dashboard and the report read from them."""

import json
import math
import subprocess
import sys
import typing

import pytest

from tinyllm import metrics, report, stats
from tinyllm.eval import zoo
from tinyllm.eval.kinds import KIND_MODULES, KINDS, METRIC_OF_KIND, SCORERS, Kind, proportion_scored


def test_the_metrics_and_their_facts():
    assert metrics.NAMES == ("bpb", "acc", "acc_norm", "exact_match", "spearman")
    assert metrics.DIRECTION == {
        "bpb": "lower",
        "acc": "higher",
        "acc_norm": "higher",
        "exact_match": "higher",
        "spearman": "higher",
    }
    assert list(metrics.DIRECTION) == list(metrics.NAMES)  # compare lists them in this order
    assert {"bpb": 1.0 / math.log(2.0)} == metrics.ITEM_SCALE
    assert metrics.MEAN_METRICS == ("bpb", "acc", "acc_norm", "exact_match")
    assert metrics.BPB.item_scale_text == " / ln 2"
    assert [m.item_scale_text for m in metrics.METRICS.values()].count("") == 4
    assert not hasattr(metrics, "INTERVALS")  # interval names live in tinyllm.stats (Method)
    assert metrics.ARROW == {"lower": " ↓", "higher": " ↑"}
    # what the report schema's rule for a row of each metric is written from
    proportion = ("wilson", "cluster_ratio", "cluster_bootstrap", "bootstrap_percentile")
    assert {n: m.intervals for n, m in metrics.METRICS.items()} == {
        "bpb": ("cluster_ratio", "iid", "student_t"),
        "acc": proportion,
        "acc_norm": proportion,
        "exact_match": proportion,
        "spearman": ("fisher_z", "cluster_bootstrap"),
    }
    assert {n: m.value_range for n, m in metrics.METRICS.items()} == {
        "bpb": (0, None),
        "acc": (0, 1),
        "acc_norm": (0, 1),
        "exact_match": (0, 1),
        "spearman": (-1, 1),
    }
    assert [n for n, m in metrics.METRICS.items() if not m.interval_in_range] == ["bpb"]
    assert {n: m.kind for n, m in metrics.METRICS.items() if m.kind} == {"bpb": "lm"}


def test_a_metric_has_a_known_direction():
    with pytest.raises(ValueError) as ei:
        metrics.Metric("x", "up")
    assert str(ei.value) == "metric 'x': expected direction one of ['lower', 'higher'], got 'up'"


@pytest.mark.parametrize("module", KIND_MODULES, ids=lambda m: m.KIND)
def test_each_kind_is_defined_once_in_its_module_and_reads_its_metrics_facts(module):
    kind = KINDS[module.KIND]
    assert kind is module.DEFINITION and kind.score is module.score
    assert (kind.name, kind.metric, kind.interval) == (module.KIND, module.METRIC, module.INTERVAL)
    facts = metrics.METRICS[kind.metric]
    assert (kind.direction, kind.item_scale, kind.mean_of_items) == (
        facts.direction,
        facts.item_scale,
        facts.mean_of_items,
    )
    for restated in ("DIRECTION", "ITEM_SCALE", "MEAN_OF_ITEMS"):
        assert not hasattr(module, restated)  # the facts live in tinyllm.metrics only
    assert set(kind.intervals) <= set(stats.ESTIMATORS) and kind.interval in report.INTERVALS
    assert set(kind.metrics) <= set(report.METRICS)
    assert METRIC_OF_KIND[kind.name] == kind.metric and SCORERS[kind.name] is kind.score


def test_a_kinds_options_are_entry_options_and_every_entry_option_is_read():
    fields = set(report.EntryOptions.model_fields)
    read = {o for k in KINDS.values() for o in k.options.model_fields}
    assert read <= fields
    assert fields - read == {"device", "dtype"}  # the zoo's, for every kind
    assert tuple(KINDS["lm"].options.model_fields) == ("ctx_len", "stride", "doc_sep")
    assert dict(KINDS["lmeval"].interval_options) == {"n_boot": 1000}
    assert KINDS["embeddings"].rows == (("spearman", "fisher_z"), ("acc", "wilson"))
    assert len(KINDS["lmeval"].rows) == 6  # acc, acc_norm, exact_match; Wilson or clustered
    assert [k.name for k in KINDS.values() if k.nan_items] == ["embeddings"]
    # the lmeval entry's metric option names the metrics its rows may report
    metric_option = report.EntryOptions.model_fields["metric"].annotation
    assert typing.get_args(typing.get_args(metric_option)[0]) == KINDS["lmeval"].metrics


def test_a_kind_is_checked_when_it_is_defined():
    def score(entry, model, data_path, rng, opts):
        raise AssertionError("never called")

    with pytest.raises(ValueError) as ei:
        Kind("x", "ppl", "wilson", score)
    assert str(ei.value) == (
        "kind 'x': expected metrics of ['bpb', 'acc', 'acc_norm', 'exact_match', 'spearman'], "
        "got 'ppl'"
    )
    with pytest.raises(ValueError, match=r"^interval method: expected one of \["):
        Kind("x", "acc", "bca", score)
    with pytest.raises(ValueError) as ei:
        Kind("x", "acc", "wilson", score, also=(("acc", "fisher"),))
    assert str(ei.value).startswith("interval method: expected one of [")
    with pytest.raises(ValueError) as ei:
        Kind("x", "spearman", "wilson", score)
    assert str(ei.value) == (
        "kind 'x': expected an interval of spearman among ['fisher_z', 'cluster_bootstrap'] "
        "(tinyllm.metrics), got 'wilson'"
    )
    k = Kind("x", "bpb", "iid", score)
    assert (k.metrics, k.intervals, k.direction) == (("bpb",), ("iid",), "lower")
    k = Kind("x", "acc", "wilson", score, also=(("acc", "cluster_ratio"), ("acc_norm", "wilson")))
    assert k.rows == (("acc", "wilson"), ("acc", "cluster_ratio"), ("acc_norm", "wilson"))
    assert (k.metrics, k.intervals) == (("acc", "acc_norm"), ("wilson", "cluster_ratio"))
    with pytest.raises(TypeError):
        k.interval_options["n_boot"] = 5  # read-only


def test_the_kinds_tables_are_the_zoos_and_the_reports():
    assert zoo.METRIC_OF_KIND is METRIC_OF_KIND
    assert METRIC_OF_KIND == {
        "lm": "bpb",
        "seq2seq": "exact_match",
        "classifier": "acc",
        "mlm": "acc",
        "rtd": "acc",
        "embeddings": "spearman",
        "lmeval": "acc",  # an lm-eval task's main metric; acc_norm or exact_match by option
    }
    assert tuple(KINDS) == report.KINDS
    assert {name: k.interval for name, k in KINDS.items()} == {
        "lm": "cluster_ratio",  # over documents, or blocks of a text without boundaries
        "seq2seq": "wilson",
        "classifier": "wilson",
        "mlm": "cluster_ratio",  # over rows
        "rtd": "cluster_ratio",
        "embeddings": "fisher_z",
        "lmeval": "wilson",
    }
    assert proportion_scored("acc", [1, 0, 1]).method == KINDS["classifier"].interval == "wilson"
    clustered = proportion_scored("acc", [1, 0, 1, 1], units=[0, 0, 1, 1])
    assert clustered.method == "cluster_ratio" and clustered.n_units == 2


def test_the_report_schema_reads_the_same_facts():
    assert report.METRICS == metrics.NAMES == typing.get_args(report.Metric)
    assert (*stats.ESTIMATORS, "student_t", "bootstrap_percentile") == report.INTERVALS
    assert typing.get_args(report.IntervalMethod) == report.INTERVALS
    # the legacy names of stored rows read as what they computed
    assert [stats.read_method(m) for m in report.LEGACY_INTERVALS] == ["iid", "cluster_bootstrap"]
    assert frozenset({"bpb"}) == report.LOWER_IS_BETTER


def test_the_committed_report_schema_is_written_from_the_tables():
    committed = report.REPORT_SCHEMA_PATH.read_text(encoding="utf-8")
    assert committed == report.report_schema_text(tuple(KINDS)), (
        'run python -c "from tinyllm.eval.kinds import write_report_schema; '
        'write_report_schema()" to rewrite tinyllm/schemas/eval-results.schema.json'
    )
    row = report.report_schema()["$defs"]["row"]
    assert row["properties"]["metric"]["enum"] == [*metrics.METRICS, None]
    assert row["properties"]["interval"]["enum"] == [*report.INTERVALS, None]
    assert report.KINDS == tuple(KINDS) == typing.get_args(report.Kind)
    rules = [r for r in row["allOf"] if "metric" in r["if"]["properties"]]
    assert [r["if"]["properties"]["metric"] for r in rules] == [
        {"const": "bpb"},
        {"enum": ["acc", "acc_norm", "exact_match"]},  # one rule for metrics with the same facts
        {"const": "spearman"},
    ]
    assert rules[0]["then"]["properties"] == {
        "kind": {"const": "lm"},
        "interval": {"enum": ["cluster_ratio", "iid", "student_t", None]},
        "value": {"type": ["number", "null"], "minimum": 0},
    }
    spearman = {"type": ["number", "null"], "minimum": -1, "maximum": 1}
    assert rules[2]["then"]["properties"] == {
        "interval": {"enum": ["fisher_z", "cluster_bootstrap", None]},
        "value": spearman,
        "lo": spearman,
        "hi": spearman,
    }


# A new metric is one entry of tinyllm.metrics.METRICS and a new kind its module's DEFINITION in
# KIND_MODULES: the run below adds both to the tables (a fresh interpreter whose tinyllm/metrics.py
# has one more entry), writes the report schema from them, and reads the report formats again.
ONE_HOP = r"""
import importlib, json, sys, types, typing
from pathlib import Path

import tinyllm
from tinyllm import schemas

path = Path(tinyllm.__file__).parent / "metrics.py"
table = "(BPB, ACC, ACC_NORM, EXACT_MATCH, SPEARMAN)"
src = path.read_text()
assert src.count(table) == 1
ppl = "Metric('ppl', 'lower', intervals=('iid',), value_range=(1, None), interval_in_range=False)"
mod = types.ModuleType("tinyllm.metrics")
sys.modules["tinyllm.metrics"] = tinyllm.metrics = mod
exec(compile(src.replace(table, table[:-1] + ", " + ppl + ")"), str(path), "exec"), mod.__dict__)

from tinyllm import report
from tinyllm.eval.kinds import KINDS, Kind

perplexity = Kind("perplexity", "ppl", "iid", lambda entry, model, data_path, rng: None)
out = Path(sys.argv[1])
report.write_report_schema((*KINDS, perplexity.name), out)
schemas.schema_file = lambda name: out  # the report formats read the schema just written
report = importlib.reload(report)

row = dict(
    name="p", family="gpt", kind="perplexity", metric="ppl", value=3.5, lo=3.0, hi=4.0,
    interval="iid", n=10, status="ok", error=None, reason=None, checkpoint_sha256=None,
    data_sha256=None, seconds=0.0, items=None, checkpoint="c", data="d", options={},
)
doc = dict(
    schema_version=1, suite="zoo", release=None, created_at="2026-01-01T00:00:00Z", seed=0,
    tinyllm_version="0", manifest_sha256="0" * 64,
)
report.validate_report(report.Report(**doc, rows=[report.Row(**row)]))
try:  # below ppl's minimum: refused by the rule written from its facts
    report.validate_report({**doc, "rows": [{**row, "value": 0.5}]})
except report.ReportSchemaError as e:
    refused = str(e)
print(json.dumps({
    "Metric": typing.get_args(report.Metric),
    "Kind": typing.get_args(report.Kind),
    "direction": perplexity.direction,
    "refused": refused,
}))
"""


def test_a_metric_and_a_kind_are_one_table_entry_each(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", ONE_HOP, str(tmp_path / "eval-results.schema.json")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["Metric"] == [*metrics.NAMES, "ppl"]
    assert seen["Kind"] == [*KINDS, "perplexity"]
    assert seen["direction"] == "lower"
    assert seen["refused"] == (
        "report does not match eval-results.schema.json (1 problem):\n"
        "  rows/0/value: 0.5 is less than the minimum of 1"
    )


def test_learning_a_direction_loads_no_model():
    code = (
        "import sys, tinyllm.metrics, tinyllm.compare; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers') "
        "or m.startswith(('tinyllm.models', 'tinyllm.eval'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_report_schema_admits_every_kinds_metrics_and_intervals():
    """The schema's per-metric rules (tinyllm/schemas/eval-results.schema.json) agree with
    KINDS: each metric a kind reports may carry each interval the kind computes, a bpb row is
    an lm row, and the schema's kinds are KINDS'."""
    import json
    from importlib import resources

    schema = json.loads(
        resources.files("tinyllm.schemas").joinpath("eval-results.schema.json").read_text()
    )
    row = schema["$defs"]["row"]
    assert row["properties"]["kind"]["enum"] == [*KINDS, None]
    rules = {}
    for rule in row["allOf"]:
        m = rule.get("if", {}).get("properties", {}).get("metric")
        if m is not None:
            for name in m.get("enum", [m.get("const")]):
                rules[name] = rule["then"]["properties"]
    for kind in KINDS.values():
        for metric, interval in kind.rows:
            assert interval in rules[metric]["interval"]["enum"], (kind.name, metric)
            if "kind" in rules[metric]:
                assert rules[metric]["kind"]["const"] == kind.name
