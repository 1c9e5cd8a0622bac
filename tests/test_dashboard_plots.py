"""The dashboard's plots as drawn (tinyllm/dashboard/plots.py): every marker is where its number
puts it. The SVG is parsed and each marker's position checked against the linear map that two
of the plot's own points define (matplotlib's axes are linear), so a point, an interval end or a
baseline drawn at the wrong value fails. tests/test_dashboard_browser.py checks the same plots
on the pages in headless Chromium.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from tinyllm.dashboard import Series, baseline_value, overview_svg, trend_svg
from tinyllm.report import StoredRow


def _tree(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def _group(root: ET.Element, gid: str) -> ET.Element | None:
    return next((e for e in root.iter() if e.get("id") == gid), None)


def _uses(root: ET.Element, gid: str) -> list[tuple[float, float]]:
    g = _group(root, gid)
    assert g is not None, f"no group {gid!r}"
    return [(float(u.get("x")), float(u.get("y"))) for u in g.iter() if u.tag.endswith("use")]


def _segments(root: ET.Element, gid: str) -> list[tuple[float, float, float]]:
    """The horizontal lines of a group: (x from, x to, y) of each ``M x y L x y`` path."""
    out = []
    for p in _group(root, gid).iter():
        if p.tag.endswith("path"):
            x0, y0, x1, y1 = map(float, re.findall(r"-?\d+(?:\.\d+)?", p.get("d")))
            assert y0 == y1
            out.append((x0, x1, y0))
    return out


def _row(name, metric, value, lo=None, hi=None, status="ok", baseline=None) -> StoredRow:
    """A stored row with what the overview reads; ``baseline``: (its name, its value)."""
    return StoredRow.model_validate(
        {
            **dict.fromkeys(("kind", "interval", "n", "error", "reason", "items")),
            "family": "f",
            **dict.fromkeys(("checkpoint_sha256", "data_sha256")),
            "seconds": 0.0,
            "name": name,
            "metric": metric,
            "status": status,
            "value": value,
            "lo": lo,
            "hi": hi,
            "baseline": None
            if baseline is None
            else {"name": baseline[0], "value": baseline[1], "interval": None, "items": None},
        }
    )


ROWS = [
    _row("gpt", "bpb", 2.0, 1.5, 2.5, baseline=("unigram", 3.0)),
    _row("bigram", "bpb", 1.0, 0.8, 1.2),
    _row("kn3", "bpb", 1.4, 1.3, 1.6, baseline=("unigram", 3.0)),
    _row("clf", "acc", 0.8, 0.7, 0.88, baseline=("majority class", 0.6)),
    _row("clf-broken", "acc", None, status="error"),
    _row("weird", None, None, status="skipped"),
]


def test_the_overview_draws_every_row_in_one_panel_per_metric():
    root = _tree(overview_svg(ROWS))
    bpb = _uses(root, "ov-bpb-points")
    assert len(bpb) == 3 and len(_uses(root, "ov-acc-points")) == 1
    assert len(_uses(root, "ov-bpb-baselines")) == 2  # bigram has no baseline: nothing drawn
    assert len(_uses(root, "ov-acc-baselines")) == 1
    assert len(_uses(root, "ov-acc-errors")) == 1  # the error row: a cross, no value
    assert _group(root, "ov-bpb-errors") is None
    # the skipped row has no metric: no panel, no label
    assert "weird" not in "".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    # rows top to bottom in the report's order
    ys = [y for _, y in bpb]
    assert ys == sorted(ys)
    # the panels: bpb above acc, each with its own title
    titles = [t.text for t in root.iter() if t.tag.endswith("text") and "better" in (t.text or "")]
    assert titles == ["bpb ↓ (lower is better)", "acc ↑ (higher is better)"]


def test_each_marker_sits_at_its_value():
    root = _tree(overview_svg(ROWS))
    (xg, yg), (xb, yb), (xk, yk) = _uses(root, "ov-bpb-points")

    def at(v: float) -> float:  # the panel's map from a value to x, from gpt (2.0) and bigram
        return xb + (v - 1.0) * (xg - xb) / (2.0 - 1.0)

    assert xk == pytest.approx(at(1.4), abs=0.01)
    # the intervals (lo, hi) at their ends (paths are rounded to 0.1 pt)
    segs = _segments(root, "ov-bpb-intervals")
    want = [(1.5, 2.5, yg), (0.8, 1.2, yb), (1.3, 1.6, yk)]
    assert len(segs) == 3
    for (x0, x1, y), (lo, hi, wy) in zip(segs, want, strict=True):
        assert (x0, x1) == (pytest.approx(at(lo), abs=0.1), pytest.approx(at(hi), abs=0.1))
        assert y == pytest.approx(wy, abs=0.1)
    # the baselines on their rows, at the baseline's value: right of every point (3.0)
    bases = _uses(root, "ov-bpb-baselines")
    assert [y for _, y in bases] == [yg, yk]
    assert [x for x, _ in bases] == [pytest.approx(at(3.0), abs=0.01)] * 2


def test_the_overview_is_none_without_a_row_to_draw():
    assert overview_svg([]) is None
    assert overview_svg([_row("weird", None, None, status="skipped")]) is None


def test_a_rows_baseline_value():
    assert baseline_value(_row("a", "acc", 0.5, baseline=("copy", 0.25))) == 0.25
    assert baseline_value(_row("a", "acc", 0.5)) is None
    assert baseline_value(_row("a", "acc", 0.5, baseline=("copy", float("nan")))) is None


def _tick_labels(svg: str, gid: str) -> list[str]:
    axis = _group(_tree(svg), f"{gid}-matplotlib.axis_1")
    return [t.text for t in axis.iter() if t.tag.endswith("text") and t.text]


def _series(n: int) -> Series:
    return Series(
        "gpt",
        "bpb",
        [f"r{i + 1}" for i in range(n)],
        [2.0 + 0.1 * i for i in range(n)],
        [1.9 + 0.1 * i for i in range(n)],
        [2.1 + 0.1 * i for i in range(n)],
        [False] * n,
        [False] * n,
    )


@pytest.mark.parametrize(("n", "labels"), [(1, ["r1"]), (2, ["r1", "r2"]), (3, ["r1", "r2", "r3"])])
def test_a_trend_labels_each_release_once(n, labels):
    assert _tick_labels(trend_svg(_series(n)), "t-gpt") == labels
