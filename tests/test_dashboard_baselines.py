"""The dashboard's rows table shows each row's trivial baseline and the verdict against it."""

from __future__ import annotations

import re

from test_dashboard import BUILT, ENTRIES, T0, _publish, _row

from tinyllm import dashboard
from tinyllm.store import open_store


def test_rows_table_has_a_baseline_column_with_value_and_verdict(tmp_path):
    st = open_store(tmp_path / "store")
    rows = [_row(n, f, k, m, 1) for n, f, k, m in ENTRIES]
    ok = next(r for r in rows if r["status"] == "ok")
    ok["baseline"] = {"name": "unigram", "value": 4.41919, "interval": None, "items": None}
    ok["beats_baseline"] = {
        "verdict": "better",
        "test": "paired permutation",
        "p": 0.0001,
        "delta": -2.0,
        "interval": [-2.1, -1.9],
        "n": 10,
    }
    _publish(st, "r1", rows, T0, 1)
    page = dashboard.build_site(st, built_at=BUILT)["release/r1.html"].decode()
    assert '<th class="num">baseline</th>' in page
    cells = re.findall(r'<td data-label="baseline" class="num baseline">(.*?)</td>', page)
    assert len(cells) == len(rows)
    mine = [c for c in cells if 'title="unigram"' in c]
    assert len(mine) == 1 and "4.4192" in mine[0] and ">better<" in mine[0]
    assert sum(c == "-" for c in cells) == len(rows) - 1  # rows without a baseline


def test_the_baseline_cell_shows_the_verdicts_p_and_its_holm_p(tmp_path):
    st = open_store(tmp_path / "store")
    rows = [_row(n, f, k, m, 1) for n, f, k, m in ENTRIES]
    ok = [r for r in rows if r["status"] == "ok"][:2]
    for r in ok:  # each "better" at p 0.03 alone; the publish decides the two together
        r["baseline"] = {"name": "unigram", "value": 4.41919, "interval": None, "items": None}
        r["beats_baseline"] = {
            "verdict": "better",
            "test": "paired permutation",
            "p": 0.03,
            "delta": -2.0 if r["metric"] == "bpb" else 0.2,
            "interval": [-2.1, -1.9],
            "n": 10,
        }
    _publish(st, "r1", rows, T0, 1)
    page = dashboard.build_site(st, built_at=BUILT)["release/r1.html"].decode()
    mine = [c for c in re.findall(r'class="num baseline">(.*?)</td>', page) if "unigram" in c]
    want = '>not distinguishable</span> <span class="bp">p 0.030, Holm 0.060</span>'
    assert len(mine) == 2 and all(want in c for c in mine)
