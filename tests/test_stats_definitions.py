"""Every worked example of docs/definitions.md, computed by the code and found, as printed, on the
page: the page cannot drift from what tinyllm computes."""

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from tinyllm import stats
from tinyllm.windows import windows

DOC = (Path(__file__).resolve().parents[1] / "docs" / "definitions.md").read_text(encoding="utf-8")
FLAT = " ".join(DOC.split())  # line breaks inside a sentence do not matter

# the four documents of the cluster_ratio and paired examples, per-token NLLs in nats
DOCS_A = [[2.0, 3.0], [1.0, 2.0, 3.0], [4.0], [2.5, 1.5]]
DOCS_B = [[2.5, 3.0], [1.0, 2.5, 3.0], [4.5], [2.5, 2.0]]


def flat(docs):
    return [x for d in docs for x in d], [g for g, d in enumerate(docs) for _ in d]


def on_page(*texts: str) -> None:
    for text in texts:
        assert text in FLAT, f"docs/definitions.md: expected {text!r} on the page"


def ends(iv, digits: int = 4) -> str:
    return f"({iv.lo:.{digits}f}, {iv.hi:.{digits}f})"


def strided_nlls(n: int, ctx: int, stride: int) -> list[float]:
    # the page's model: the true next token has probability 1/(j+2) at window position j
    return [
        math.log(t - 1 - a + 2) for a, e, first in windows(n, ctx, stride) for t in range(first, e)
    ]


def test_strided_perplexity_example():
    s2, s3 = strided_nlls(6, 4, 2), strided_nlls(6, 4, 3)
    assert s2 == pytest.approx([math.log(k) for k in (2, 3, 4, 3, 4)])
    assert s3 == pytest.approx([math.log(k) for k in (2, 3, 4, 2, 3)])
    acc = stats.NLLAccumulator()
    acc.add(s2)
    assert acc.ppl == pytest.approx(288 ** (1 / 5), rel=1e-12)
    on_page(
        "| 2 | [0,4), [2,6) |",
        "| 3 | [0,4), [3,6) |",
        f"`ln(288) / 5 = {acc.mean:.4f}` nats and ppl = `288^(1/5) = {acc.ppl:.4f}`",
        f"ppl = `144^(1/5) = {math.exp(np.mean(s3)):.4f}`",
        f"`log2(288) / 5 = {acc.bpb(5):.4f}` bits per byte",
    )


def test_multiple_choice_example():
    ll_bb, ll_c = math.log(0.4) + math.log(0.9), math.log(0.45)
    assert ll_c > ll_bb and ll_bb / 2 > ll_c / 1  # acc picks "c", acc_norm picks "bb"
    on_page(
        f"ln 0.4 + ln 0.9 = {ll_bb:.4f} | 2 | {ll_bb / 2:.4f} |",
        f"ln 0.45 = {ll_c:.4f} | 1 | {ll_c:.4f} |",
        'acc picks "c", acc_norm picks "bb"',
    )


def test_uniform_bigram_is_8_bits_per_byte():
    nll = stats.cluster_ratio(np.full(40, math.log(256)), np.repeat(np.arange(10), 4))
    bpb = stats.bpb_interval(nll, 40)
    assert (bpb.value, bpb.lo, bpb.hi) == (8.0, 8.0, 8.0)
    on_page("bpb is exactly 8, with a zero-width interval")


def test_cluster_ratio_example():
    items, ids = flat(DOCS_A)
    iv = stats.cluster_ratio(items, ids)
    S, N = [sum(d) for d in DOCS_A], [len(d) for d in DOCS_A]
    r = sum(S) / sum(N)
    u = [s - r * n for s, n in zip(S, N, strict=True)]
    assert iv.value == r == 2.375 and iv.df == 3
    assert u == [0.25, -1.125, 1.625, -0.75] and sum(x * x for x in u) == 4.53125
    ppl, bpb = stats.ppl_interval(iv), stats.bpb_interval(iv, len(items))
    token = stats.iid(items)
    on_page(
        "`S = [5, 6, 4, 4]`, `N = [2, 3, 1, 2]`, `r = 19 / 8 = 2.375`",
        "`u = [0.25, -1.125, 1.625, -0.75]`, `sum u^2 = 4.53125`",
        f"`se = sqrt(4/3 * 4.53125) / 8 = {iv.se:.4f}`",
        f"`t_{{0.975, 3}} = {stats.core.t_quantile(4, 0.95):.4f}`",
        f"mean NLL 2.375 in {ends(iv)} nats per token",
        f"ppl {ppl.value:.3f} in ({ppl.lo:.4f}, {ppl.hi:.3f})",
        f"bpb {bpb.value:.4f} in {ends(bpb)}",
        f"(`iid`) give {ends(token)}",
    )
    assert iv.warning.startswith("only 4 units")
    on_page("with a warning, as 4 units are fewer than 10")


def test_wilson_fisher_z_and_iid_examples():
    w = stats.wilson([1] * 8 + [0] * 2, range(10))
    fz = stats.fisher_z_interval(0.5, 28)
    iid = stats.iid([1.0, 2.0, 3.0])
    on_page(
        f"8 of 10: 0.8 in {ends(w)}",
        f"rho = 0.5 on 28 pairs: {ends(fz)}",
        f"`[1, 2, 3]`: 2 in {ends(iid)}",
    )


def test_cluster_bootstrap_example():
    iv = stats.cluster_bootstrap([0.0, 1.0, 1.0, 1.0], [1, 1, 2, 2], np.random.default_rng(0))
    assert (iv.value, iv.lo, iv.hi) == (0.75, 0.5, 1.0)
    on_page("the value is 0.75", "the interval is (0.5, 1.0)", "(1,000 by default)")


def test_paired_ratio_example():
    a, ids = flat(DOCS_A)
    b, _ = flat(DOCS_B)
    r = stats.paired_difference(a, b, ids, np.random.default_rng(0), kind="ratio")
    assert (r.value_a, r.value_b, r.delta) == (2.375, 2.625, -0.25)
    assert r.p == 0.125 and r.exact
    on_page(
        "`r_A = 2.375`, `r_B = 21 / 8 = 2.625`, `delta = -0.25` nats per token",
        "`D = [-0.5, -0.5, -0.5, -0.5]`",
        "`e = D - delta N = [0, 0.25, -0.25, 0]`",
        f"`se = sqrt(4/3 * 0.125) / 8 = {r.se:.4f}`, interval {ends(r)}",
        "exact p = 2/16 = 0.125",
    )


def test_holm_example():
    adj = stats.holm_adjust([0.01, 0.04, None, 0.03])
    assert adj == [pytest.approx(0.03), pytest.approx(0.06), None, pytest.approx(0.06)]
    on_page("Raw p `0.01, 0.04, –, 0.03`", "adjusted `0.03, 0.06, –, 0.06`")


def test_detectable_difference_examples():
    t975, t80 = sps.t.ppf(0.975, 28), sps.t.ppf(0.80, 28)
    assert stats.mde_factor(28) == pytest.approx(t975 + t80, abs=1e-12)
    sd = stats.unit_sd(0.01, 29)
    on_page(
        f"`t_{{0.975, 28}} + t_{{0.80, 28}} = {t975:.5f} + {t80:.5f} = {stats.mde_factor(28):.5f}`",
        f"so mde = {stats.mde(0.01, 28):.4f} bpb",
        f"`sd = 0.01 * sqrt(29) = {sd:.4f}` bpb",
        f"detecting 0.02 bpb needs {stats.units_needed(sd, 0.02)} documents, "
        f"0.01 bpb {stats.units_needed(sd, 0.01)}",
        "`((1.9600 + 0.8416) sd / D)^2`",
    )


def test_every_method_name_is_on_the_page():
    for name in stats.ESTIMATORS:
        on_page(f"| `{name}` |", f"### {name}")
