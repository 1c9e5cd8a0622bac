"""The zoo's row names say what each row scores (bert-mlm-*, electra-rtd-*), and a store whose
earlier releases used the older names (bert-polarity, ...) still reads: history, compare and the
dashboard show a renamed row as one row removed and one added."""

from __future__ import annotations

import json

import numpy as np
from test_compare import acc_row, report
from typer.testing import CliRunner

from tinyllm import cli, train
from tinyllm.store import open_store

HITS = (np.random.default_rng(3).random(120) < 0.4).astype(np.float64)
RENAMED = {
    "bert-polarity": "bert-mlm-polarity",
    "bert-langid": "bert-mlm-langid",
    "electra-polarity": "electra-rtd-polarity",
    "electra-langid": "electra-rtd-langid",
}


def test_the_encoder_rows_are_named_by_what_they_score():
    names = [n for name, r in train.default_recipes().items() for n in r.entries_of(name)]
    assert set(RENAMED.values()) <= set(names)
    assert not set(RENAMED) & set(names)
    # every name fits the report schema and the piped zoo table (tinyllm.console.PIPED_WIDTH)
    assert max(len(n) for n in names) <= 20


def invoke(*args: str):
    return CliRunner().invoke(cli.app, [str(a) for a in args])


def test_a_store_with_the_old_names_reads_with_the_renamed_rows_as_new_rows(tmp_path):
    st = open_store(tmp_path / "store")
    for release, day, names in (("r1", 1, list(RENAMED)), ("r2", 2, list(RENAMED.values()))):
        rows = [acc_row(n, HITS, family=n.split("-")[0]) for n in names]
        st.write_report(release, report(release, rows, day))
        for n in names:
            st.write_items(release, n, HITS)
    res = invoke("compare", "r1", "r2", "--store", tmp_path / "store", "--json", "--n-perm", 50)
    assert res.exit_code == 0, res.output
    verdicts = {r["name"]: r["verdict"] for r in json.loads(res.stdout)["rows"]}
    assert verdicts == {
        **dict.fromkeys(RENAMED, "removed"),
        **dict.fromkeys(RENAMED.values(), "added"),
    }
    res = invoke("history", "--store", tmp_path / "store", "--n-perm", 50)
    assert res.exit_code == 0, res.output
    assert "bert-polarity" in res.output and "bert-mlm-polarity" in res.output
    res = invoke("dashboard", "--store", tmp_path / "store", "--out", tmp_path / "site")
    assert res.exit_code == 0, res.output
    pages = " ".join(p.read_text(encoding="utf-8") for p in (tmp_path / "site").rglob("*.html"))
    assert "bert-polarity" in pages and "electra-rtd-langid" in pages
