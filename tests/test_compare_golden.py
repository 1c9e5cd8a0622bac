"""The bytes of a stored compare.json, pinned: two small releases written to a local store with
every shape of row the comparison meets (mean metrics with and without units, a tokenizer's
bpb, a Spearman row over covered pairs, error and skipped rows, different data, different
tokenizers, no per-item scores, added and removed rows), compared from the reports and loaders
the store gives and written back with ``Store.write_compare``; the file must equal
``golden/compare.json`` byte for byte.

``TINYLLM_WRITE_GOLDEN=1 pytest tests/test_compare_golden.py`` rewrites the golden file: only
when a change of the comparison is meant.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
from scipy import stats as sps
from store_helpers import SHA, acc_row, make_report, make_row

from tinyllm.compare import compare_reports
from tinyllm.store import open_store

GOLDEN = Path(__file__).parent / "golden" / "compare.json"
OTHER_SHA = "cd" * 32
LN2 = math.log(2.0)


def bpb_row(name: str, nll: np.ndarray, **kw) -> dict:
    """A byte-level bpb row of per-token NLLs ``nll`` (nats): value ``mean / ln 2``."""
    value = float(np.mean(nll)) / LN2
    return make_row(name, value, n=int(nll.size), **({"n_units": int(nll.size)} | kw))


def spearman_row(name: str, cos: np.ndarray, human: np.ndarray, **kw) -> dict:
    covered = ~np.isnan(cos)
    rho = float(sps.spearmanr(cos[covered], human[covered]).statistic)
    return make_row(
        name,
        rho,
        family="embeddings",
        kind="embeddings",
        metric="spearman",
        lo=rho - 0.2,
        hi=rho + 0.2,
        interval="bootstrap_percentile",
        n=int(covered.sum()),
        details={"human_scores": [float(h) for h in human]},
        **kw,
    )


def releases(st) -> None:
    """r1 and r2 in ``st`` with their per-item scores and unit ids."""
    rng = np.random.default_rng(11)
    nll = rng.gamma(2.0, 0.8, 120)
    hits = (rng.random(80) < 0.7).astype(np.float64)
    hits2 = hits.copy()
    hits2[:12] = 1.0
    tok = rng.gamma(2.0, 1.1, 60)
    human = rng.uniform(0.0, 10.0, 30)
    cos = human / 10.0 + rng.normal(0.0, 0.3, 30)
    cos[[3, 17]] = np.nan
    cos2 = human / 10.0 + rng.normal(0.0, 0.2, 30)
    cos2[[3, 20]] = np.nan
    groups = np.repeat(np.arange(30), 4)
    side = {
        "r1": {
            "lm": nll,
            "lm-units": nll,
            "acc": hits,
            "tok": tok,
            "tok-diff": tok,
            "emb": cos,
            "old": nll,
            "data": hits,
            "gone": hits,
        },
        "r2": {
            "lm": nll + 0.04,
            "lm-units": nll - 0.03,
            "acc": hits2,
            "tok": tok,
            "tok-diff": tok,
            "emb": cos2,
            "old": nll,
            "data": hits,
            "new": hits,
        },
    }
    for day, (release, items) in enumerate(side.items(), start=1):
        for name, a in items.items():
            st.write_items(release, name, a)
        units = st.write_units_ref(release, "lm-units", groups)
        tok_details = {"tokenizer": "hf-sha256:0123456789abcdef", "n_bytes": 250}
        other_tok = {"tokenizer": f"hf-sha256:{release}0123456789ab", "n_bytes": 250}
        rows = [
            bpb_row("lm", items["lm"]),
            bpb_row("lm-units", items["lm-units"], n_units=30, units=units),
            acc_row("acc", items["acc"]),
            make_row("tok", float(np.sum(tok)) / (250 * LN2), n=60, details=tok_details),
            make_row("tok-diff", float(np.sum(tok)) / (250 * LN2), n=60, details=other_tok),
            spearman_row("emb", items["emb"], human),
            bpb_row("old", items["old"]) | {"n_units": None},
            acc_row("data", items["data"], data_sha256=SHA if release == "r1" else OTHER_SHA),
            make_row("no-items", items=None),
        ]
        if release == "r1":
            rows.append(acc_row("gone", items["gone"]))
            rows.append(
                make_row("err", 2.0)
                | dict(
                    value=None,
                    status="error",
                    lo=None,
                    hi=None,
                    error={"type": "RuntimeError", "message": "out of memory " * 20},
                )
            )
            rows.append(make_row("skip", 2.0))
        else:
            rows.append(make_row("err", 2.0))
            rows.append(
                make_row("skip", 2.0)
                | dict(value=None, status="skipped", lo=None, hi=None, reason="no family")
            )
            rows.append(acc_row("new", items["new"]))
        rows = [{k: v for k, v in r.items() if v is not None or k != "n_units"} for r in rows]
        st.write_report(release, make_report(release, f"2026-11-0{day}T12:00:00Z", rows))


def stored_compare(tmp_path) -> bytes:
    st = open_store(tmp_path / "store")
    releases(st)
    cmp = compare_reports(
        st.read_report("r1"),
        st.read_report("r2"),
        st.items_loader("r1"),
        st.items_loader("r2"),
        n_perm=300,
        seed=3,
        load_units_prev=st.units_loader("r1"),
        load_units_cur=st.units_loader("r2"),
    )
    st.write_compare("r2", cmp)
    return (tmp_path / "store" / "releases" / "r2" / "compare.json").read_bytes()


def test_a_stored_comparison_has_the_golden_bytes(tmp_path):
    got = stored_compare(tmp_path)
    if os.environ.get("TINYLLM_WRITE_GOLDEN") == "1":
        GOLDEN.write_bytes(got)
    assert got == GOLDEN.read_bytes()


def test_the_golden_comparison_meets_every_verdict():
    cmp = json.loads(GOLDEN.read_text("utf-8"))
    verdicts = {r["name"]: r["verdict"] for r in cmp["rows"]}
    assert verdicts["lm"] == "regressed" and verdicts["lm-units"] == "improved"
    assert verdicts["tok"] == "unchanged" and verdicts["new"] == "added"
    assert verdicts["gone"] == "removed"
    for name in ("tok-diff", "err", "skip", "data", "no-items"):
        assert verdicts[name] == "not comparable", name
    assert cmp["summary"]["not comparable"] == 5
    notes = {r["name"]: r["note"] for r in cmp["rows"]}
    assert notes["old"].startswith("units unknown in either release")
