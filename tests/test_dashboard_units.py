"""The dashboard shows both p-values of a comparison row and what an "unchanged" row could
have seen (docs/definitions.md, "Holm", "The detectable difference")."""

from __future__ import annotations

import re

from test_store_units import DOC_OF, _publish_pair, nlls_pair

from tinyllm import dashboard
from tinyllm.store import open_store


def test_pages_show_p_the_holm_p_and_the_smallest_change_an_unchanged_row_could_see(tmp_path):
    prev, cur = nlls_pair()
    st = open_store(tmp_path / "store")
    out = _publish_pair(st, prev, cur, {"gpt": DOC_OF}, {"gpt": DOC_OF})
    (c,) = out["compare"].rows
    assert c.verdict == "unchanged"
    could = f"(could see ±{c.mde:.4f})"
    site = dashboard.build_site(st)
    for page in ("release/r2.html", "index.html", "entry/gpt.html"):
        html = site[page].decode()
        assert '<th class="num">p (Holm)</th>' in html, page
        assert f'<span class="mde">{could}</span>' in html, page
        # p and the Holm-adjusted p: two columns, or one "p (Holm)" cell on the overview
        cells = re.findall(r'<td data-label="p(?: \(Holm\))?" class="num">(.*?)</td>', html)
        assert any(dashboard.fmt_p(c.p) in x for x in cells), page
        assert any(f"{dashboard.fmt_p(c.p_adjusted)}" in x for x in cells), page
    release = site["release/r2.html"].decode()
    assert f'<td data-label="mde" class="num">±{c.mde:.4f}</td>' in release
    assert "p adjusted by Holm over the rows tested" in release
    assert dashboard.could_see(c.model_copy(update={"verdict": "regressed"})) == ""
    # a comparison stored before units has no mde
    assert dashboard.could_see(c.model_copy(update={"mde": None})) == ""
