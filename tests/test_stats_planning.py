"""tinyllm.stats.planning: the minimum detectable difference and the units a difference needs
(docs/definitions.md, "The detectable difference"), against t tables, a linear scan and the
power of the noncentral t."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from tinyllm import stats


def test_mde_factor_is_the_975_plus_the_80_quantile_of_t():
    # t tables: t_{.975, 28} = 2.0484, t_{.80, 28} = 0.8547
    assert stats.mde_factor(28) == pytest.approx(2.0484 + 0.8546, abs=1e-4)
    assert stats.mde_factor(28) == pytest.approx(sps.t.ppf(0.975, 28) + sps.t.ppf(0.8, 28))
    assert stats.mde_factor(10**7) == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    assert stats.mde(0.01, 28) == pytest.approx(0.029031, abs=1e-6)
    assert stats.mde(0.0, 5) == 0.0
    assert stats.mde_factor(9, alpha=0.1, power=0.9) == pytest.approx(
        sps.t.ppf(0.95, 9) + sps.t.ppf(0.9, 9)
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: stats.mde_factor(0), r"^df: expected an integer >= 1, got 0"),
        (lambda: stats.mde(-1.0, 3), r"^se_diff: expected a finite standard error >= 0"),
        (lambda: stats.mde(1.0, 3, alpha=1.5), r"^alpha: expected a level in \(0, 1\)"),
        (lambda: stats.mde(1.0, 3, power=0.0), r"^power: expected a power in \(0, 1\)"),
        (lambda: stats.units_needed(1.0, 0.0), r"^D: expected a finite nonzero difference"),
        (lambda: stats.units_needed(float("nan"), 1.0), r"^sd_unit: expected a finite"),
        (lambda: stats.unit_sd(0.1, 1), r"^n_units: expected an integer >= 2, got 1"),
    ],
)
def test_refusals(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_units_needed_docstring_example_and_a_linear_scan():
    assert stats.units_needed(1.0, 0.5) == 34
    assert stats.mde(1.0 / math.sqrt(34), 33) <= 0.5 < stats.mde(1.0 / math.sqrt(33), 32)
    assert stats.units_needed(1.0, -0.5) == 34  # the sign of D does not matter
    assert stats.units_needed(0.0, 0.1) == 2
    assert stats.units_needed(0.01, 10.0) == 2


@settings(max_examples=60, deadline=None)
@given(st.floats(0.01, 10.0), st.floats(0.05, 5.0), st.sampled_from([0.5, 0.8, 0.9]))
def test_units_needed_is_the_first_g_whose_mde_is_small_enough(sd, D, power):
    g = stats.units_needed(sd, D, power=power)

    def mde_at(k):
        return stats.mde(sd / math.sqrt(k), k - 1, power=power)

    assert mde_at(g) <= D
    assert g == 2 or mde_at(g - 1) > D
    assert g >= (sps.norm.ppf(0.975) + sps.norm.ppf(power)) ** 2 * (sd / D) ** 2 - 1e-9


@pytest.mark.parametrize("sd, D", [(1.0, 0.5), (0.2, 0.05), (3.0, 0.4)])
def test_the_planned_units_give_about_80_percent_power(sd, D):
    # the exact power of the two-sided paired t test at G units is a noncentral t probability
    g = stats.units_needed(sd, D)
    df, nc = g - 1, D / (sd / math.sqrt(g))
    crit = sps.t.ppf(0.975, df)
    power = sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc)
    assert 0.79 <= power <= 0.83


def test_unit_sd_from_a_stored_comparison_plans_the_same_design_back():
    # a comparison over 29 documents: se 0.01 -> sd 0.0539; its own mde is what 29 units detect
    rng = np.random.default_rng(0)
    d = rng.normal(0.02, 0.05, size=29)
    r = stats.paired_difference(d, np.zeros(29), np.arange(29), rng)
    sd = stats.unit_sd(r.se, r.n_units)
    assert sd == pytest.approx(np.std(d, ddof=1), abs=1e-12)
    assert stats.units_needed(sd, r.mde * (1 + 1e-9)) == 29  # (off the float boundary)
    assert stats.units_needed(sd, r.mde / 2) > 29 * 3  # half the difference: about 4x the units
