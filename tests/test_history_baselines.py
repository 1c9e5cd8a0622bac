"""tinyllm.history carries each release's rows' verdicts against their trivial baselines."""

from __future__ import annotations

import numpy as np
from test_compare import lm_row, report

from tinyllm import history
from tinyllm.dashboard import load_history
from tinyllm.store import open_store


def test_each_step_carries_its_rows_baseline_verdicts(tmp_path):
    st = open_store(tmp_path / "store")
    items = np.full(20, 1.0)
    old = report("r1", [lm_row("gpt", items)], 1)  # written before rows carried a baseline
    new = report("r2", [lm_row("gpt", items), lm_row("bigram", items)], 2)
    verdict = {"test": "paired permutation", "p": 0.001, "delta": -0.5, "interval": [-0.6, -0.4]}
    new["rows"][0]["baseline"] = {"name": "unigram", "value": 2.0, "interval": None, "items": None}
    new["rows"][0]["beats_baseline"] = verdict | {"verdict": "better", "n": 20}
    for rep in (old, new):
        st.write_report(rep["release"], rep)
        for r in rep["rows"]:
            st.write_items(rep["release"], r["name"], items)
    steps = list(history.release_history(st, load_history(st), n_perm=100))
    assert [s.baseline_verdicts for s in steps] == [{}, {"gpt": "better"}]
