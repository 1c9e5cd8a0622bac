"""The EvalSuite flow over a manifest with seq2seq entries (under prefect_test_harness): rows,
per-item 0/1 scores in the store, and the paired comparison of exact-match rows."""

import json

import numpy as np
import pytest
import torch
import yaml
from zoo_rows import assert_flow_rows_equal_run_zoo

from tinyllm import stats
from tinyllm.eval import zoo
from tinyllm.models import copy_baseline, seq2seq
from tinyllm.store import open_store
from tinyllm.tokens import EOS
from tinyllm_suite.eval_suite import eval_suite

# 24 pairs: 16 with an empty target (answered right by a model that always says ""), 6 spelled
# alike (answered right by the copy baseline), 2 neither; "" -> "" is right for both
PAIRS = (
    [(f"word {i}", "") for i in range(15)]
    + [("", "")]
    + [(w, w) for w in ("Canada", "Afar", "Chili", "Mali", "Togo", "Niger")]
    + [("Algeria", "Algérie"), ("Germany", "Allemagne")]
)
EMPTY = [float(t == "") for _, t in PAIRS]
SAME = [float(s == t) for s, t in PAIRS]


def biased_seq2seq(token: int, seed: int = 0) -> seq2seq.Model:
    """A small seq2seq model whose output bias makes ``token`` win every step."""
    torch.manual_seed(seed)
    m = seq2seq.Model(seq2seq.Config(emb_dim=8, hidden=16, max_len=12)).eval()
    with torch.no_grad():
        m.out.bias[token] = 1e4
    return m


@pytest.fixture
def s2s_dir(tmp_path):
    lines = [json.dumps({"src": s, "tgt": t}, ensure_ascii=False) for s, t in PAIRS]
    (tmp_path / "val.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    seq2seq.save(biased_seq2seq(EOS), tmp_path / "s2s")  # always answers ""
    copy_baseline.save(copy_baseline.Model(copy_baseline.Config()), tmp_path / "copy")
    doc = {
        "suite": "zoo",
        "entries": [
            {"name": "s2s-val", "family": "seq2seq", "checkpoint": "s2s", "data": "val.jsonl"},
            {
                "name": "copy-val",
                "family": "copy",
                "checkpoint": "copy",
                "data": "val.jsonl",
                "options": {"beam": 2},
            },
        ],
    }
    (tmp_path / "zoo.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path


def test_flow_scores_seq2seq_rows_and_stores_their_items(s2s_dir, tmp_path):
    m = str(s2s_dir / "zoo.yaml")
    out = eval_suite(manifest=m, release="r1", store=str(tmp_path / "store"))
    rows = {r["name"]: r for r in out["report"]["rows"]}
    assert [r["name"] for r in out["report"]["rows"]] == ["s2s-val", "copy-val"]
    st = open_store(tmp_path / "store")
    for name, want in (("s2s-val", EMPTY), ("copy-val", SAME)):
        r = rows[name]
        assert r["status"] == "ok", r
        assert (r["kind"], r["metric"], r["interval"], r["n"]) == (
            "seq2seq",
            "exact_match",
            "wilson",
            len(PAIRS),
        )
        w = stats.wilson_interval(int(sum(want)), len(PAIRS))
        assert (r["value"], r["lo"], r["hi"]) == (w.value, w.lo, w.hi)
        assert st.items_loader("r1")(name).tolist() == want
    assert rows["s2s-val"]["details"]["beam"] == 4  # the default
    assert rows["copy-val"]["details"]["beam"] == 2  # from the entry's options
    # the copy baseline's 0/1 per pair stored for both rows, equal to run_zoo's
    assert assert_flow_rows_equal_run_zoo(out["report"]["rows"], zoo.run_zoo(m), st, "r1") == 2
    for name in rows:  # copying the source is right where the target is spelled alike
        assert st.read_items("r1", name, rows[name]["baseline"]["items"]).tolist() == SAME


def test_compare_flags_a_regressed_exact_match_row_and_keeps_the_unchanged_one(s2s_dir, tmp_path):
    m = str(s2s_dir / "zoo.yaml")
    store = str(tmp_path / "store")
    eval_suite(manifest=m, release="r1", store=store)
    same = eval_suite(manifest=m, release="r2", store=store)
    assert {r["name"]: r["verdict"] for r in same["compare"]["rows"]} == {
        "s2s-val": "unchanged",
        "copy-val": "unchanged",
    }
    # replace the seq2seq checkpoint by one that never stops ("xxxx..."): no item is right now
    seq2seq.save(biased_seq2seq(ord("x"), seed=1), s2s_dir / "s2s")
    worse = eval_suite(manifest=m, release="r3", store=store)
    cmp = {r["name"]: r for r in worse["compare"]["rows"]}
    assert cmp["s2s-val"]["verdict"] == "regressed"
    assert cmp["s2s-val"]["delta"] == pytest.approx(-sum(EMPTY) / len(PAIRS))
    # 16 items went 1 -> 0, none the other way: the paired sign-flip test gives 2 / 2^16 exactly
    # (compare runs 10,000 random flips, so p is (1 + #hits) / 10,001 ~ 1e-4)
    assert cmp["s2s-val"]["p"] < 0.001
    assert stats.paired_permutation_test(np.zeros(16), np.ones(16), n_perm=2**16) == 2 / 2**16
    assert cmp["copy-val"]["verdict"] == "unchanged" and cmp["copy-val"]["p"] == 1.0
    assert open_store(store).items_loader("r3")("s2s-val").tolist() == [0.0] * len(PAIRS)
