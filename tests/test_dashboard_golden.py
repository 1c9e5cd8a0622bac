"""The rendered dashboard, pinned: a store of four releases (every verdict, error, skipped and
rerun rows, a planted script in a family and an error message, rows with a baseline and its
verdict, an unreadable report.json and a corrupt compare.json) rendered by
``dashboard.build_site`` at a fixed time; the sha256 of every page, with the store's location
written as ``<store>`` and run ids' random suffixes as ``-xxxxxx``, must equal
``golden/dashboard_pages.json``.

``TINYLLM_WRITE_GOLDEN=1 pytest tests/test_dashboard_golden.py`` rewrites the golden file: only
when a change of the pages is meant.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from datetime import timedelta
from pathlib import Path

from test_dashboard import BUILT, ENTRIES, T0, _publish, _row, build_store

from tinyllm import dashboard

GOLDEN = Path(__file__).parent / "golden" / "dashboard_pages.json"
RUN_ID_SUFFIX = re.compile(rb"(\d{8}T\d{6}Z)-[0-9a-f]{6}")
"""A run id's random suffix (store.new_run_id): written as ``-xxxxxx``."""


def golden_store(root):
    """build_store's three releases, then r4 with baselines (one beats it, one is not
    distinguishable), a release whose report.json is not JSON and a corrupt compare.json."""
    st = build_store(root)
    rows = [_row(n, f, k, m, 4) for n, f, k, m in ENTRIES]
    ok = [r for r in rows if r["status"] == "ok"]
    for r, (verdict, p) in zip(
        ok[:2], [("better", 1e-4), ("not distinguishable", 0.4)], strict=True
    ):
        r["baseline"] = {"name": "unigram", "value": 4.41919, "interval": None, "items": None}
        r["beats_baseline"] = {
            "verdict": verdict,
            "test": "paired permutation",
            "p": p,
            "delta": -2.0,
            "interval": [-2.1, -1.9],
            "n": 10,
        }
    _publish(st, "r4", rows, T0 + timedelta(days=4), 4)
    st.put_bytes("releases/r5-broken/report.json", b"{not json")
    st.put_bytes("releases/r3/compare.json", b"[]")
    return st


def normalized(st, data: bytes) -> bytes:
    """A page with the store's location written as ``<store>`` and run ids' random suffixes
    as ``-xxxxxx``."""
    return RUN_ID_SUFFIX.sub(rb"\1-xxxxxx", data.replace(st.uri.encode(), b"<store>"))


def pages(st) -> dict[str, str]:
    """sha256 of each normalized page of the site."""
    files = dashboard.build_site(st, built_at=BUILT)
    return {
        path: hashlib.sha256(normalized(st, data)).hexdigest()
        for path, data in sorted(files.items())
    }


def test_the_rendered_pages_equal_the_golden_ones(tmp_path):
    got = pages(golden_store(tmp_path / "store"))
    if os.environ.get("TINYLLM_WRITE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=2) + "\n", encoding="utf-8")
    assert got == json.loads(GOLDEN.read_text(encoding="utf-8"))
