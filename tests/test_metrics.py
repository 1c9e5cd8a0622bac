"""tinyllm.metrics: each metric's facts, declared once, and the tables the kinds, the zoo, compare,
the dashboard and the report read from them."""

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
    read = {o for k in KINDS.values() for o in k.options}
    assert read <= fields
    assert fields - read == {"device", "dtype"}  # the zoo's, for every kind
    assert KINDS["lm"].options == ("ctx_len", "stride", "doc_sep")
    assert dict(KINDS["lmeval"].interval_options) == {"n_boot": 1000}
    assert KINDS["embeddings"].rows == (("spearman", "fisher_z"), ("acc", "wilson"))
    assert len(KINDS["lmeval"].rows) == 6  # acc, acc_norm, exact_match; Wilson or clustered
    assert [k.name for k in KINDS.values() if k.nan_items] == ["embeddings"]


def test_a_kind_is_checked_when_it_is_defined():
    def score(entry, model, data_path, rng):
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
