"""Statistics behind every number tinyllm reports (docs/definitions.md, "Intervals" and
"Paired tests").

Everything here is plain numpy/scipy on float64 arrays; nothing knows about models. One concept
per module, each importing only those below it (pyproject.toml's ``stats`` contract):

* :mod:`~tinyllm.stats.core` -- :class:`Interval`, the method names (:class:`Method`),
  ``CONFIDENCE``, ``ALPHA``, ``POWER``, ``LN2``, the input checks;
* :mod:`~tinyllm.stats.intervals` -- :func:`mean_ci` (Student t), :func:`bootstrap_ci`
  (percentile bootstrap from the caller's rng), :func:`wilson_interval`,
  :func:`fisher_z_interval` / :func:`spearman_ci`;
* :mod:`~tinyllm.stats.permutation` -- :func:`paired_permutation_test` and :func:`sign_flip_p`,
  the sign-flip test of "do paired scores differ?";
* :mod:`~tinyllm.stats.accumulator` -- :class:`NLLAccumulator`, per-token NLLs streamed in
  chunks: N, the sum, mean NLL, perplexity, bits per byte, the Student t interval over tokens;
* :mod:`~tinyllm.stats.spearman` -- two rank correlations on the same items (compare's
  Spearman rows);
* :mod:`~tinyllm.stats.units` -- :class:`Units`, the sampling unit of each item
  (:func:`group_units`, :func:`units_from_lengths`, :func:`contiguous_blocks`);
* :mod:`~tinyllm.stats.cluster` -- intervals over units: :func:`cluster_ratio` (from items) and
  :func:`ratio_from_sums` (from per-unit sums), :func:`cluster_bootstrap`, and the ends of
  perplexity and bits per byte (:func:`ppl_interval`, :func:`bpb_interval`);
* :mod:`~tinyllm.stats.registry` -- :data:`ESTIMATORS`, interval method name (:class:`Method`)
  -> estimator ``(items, units, rng) -> Interval``, and :func:`estimate`;
* :mod:`~tinyllm.stats.paired` -- :func:`paired_difference`, the one paired comparison over
  units (delta, interval, permutation p, se, mde): :class:`PairedDifference`;
* :mod:`~tinyllm.stats.planning` -- :func:`mde`, the minimum detectable difference, and
  :func:`units_needed` to detect a difference (from :func:`unit_sd` of a stored comparison);
* :mod:`~tinyllm.stats.holm` -- :func:`holm_adjust` (the rows of one comparison) and
  :func:`verdict` (the call from an adjusted p).

Every name callers use is importable from ``tinyllm.stats`` itself.
"""

from __future__ import annotations

from tinyllm.stats.accumulator import NLLAccumulator
from tinyllm.stats.cluster import (
    bpb_interval,
    cluster_bootstrap,
    cluster_ratio,
    ppl_interval,
    ratio_from_sums,
    scale_interval,
)
from tinyllm.stats.core import (
    ALPHA,
    CONFIDENCE,
    LEGACY_METHODS,
    LN2,
    POWER,
    Interval,
    Method,
    read_method,
)
from tinyllm.stats.holm import BASELINE_WORDS, COMPARE_WORDS, holm_adjust, verdict
from tinyllm.stats.intervals import (
    bootstrap_ci,
    fisher_z_interval,
    mean_ci,
    spearman_ci,
    wilson_interval,
)
from tinyllm.stats.paired import KINDS as PAIRED_KINDS
from tinyllm.stats.paired import PairedDifference, paired_difference
from tinyllm.stats.permutation import exact_sign_flips, paired_permutation_test, sign_flip_p
from tinyllm.stats.planning import mde, mde_factor, unit_sd, units_needed
from tinyllm.stats.registry import ESTIMATORS, Estimator, estimate, fisher_z, iid, wilson
from tinyllm.stats.spearman import (
    spearman_along,
    spearman_difference,
    spearman_difference_ci,
    spearman_difference_test,
)
from tinyllm.stats.units import (
    MIN_UNITS,
    Units,
    as_units,
    contiguous_blocks,
    group_units,
    units_from_lengths,
)

__all__ = [
    "ALPHA",
    "BASELINE_WORDS",
    "COMPARE_WORDS",
    "holm_adjust",
    "verdict",
    "CONFIDENCE",
    "ESTIMATORS",
    "LEGACY_METHODS",
    "Estimator",
    "Method",
    "bpb_interval",
    "cluster_bootstrap",
    "cluster_ratio",
    "estimate",
    "fisher_z",
    "iid",
    "ppl_interval",
    "ratio_from_sums",
    "read_method",
    "scale_interval",
    "wilson",
    "LN2",
    "PAIRED_KINDS",
    "PairedDifference",
    "mde",
    "mde_factor",
    "paired_difference",
    "unit_sd",
    "units_needed",
    "MIN_UNITS",
    "POWER",
    "Interval",
    "NLLAccumulator",
    "Units",
    "as_units",
    "contiguous_blocks",
    "group_units",
    "bootstrap_ci",
    "exact_sign_flips",
    "fisher_z_interval",
    "mean_ci",
    "paired_permutation_test",
    "sign_flip_p",
    "spearman_along",
    "spearman_ci",
    "spearman_difference",
    "spearman_difference_ci",
    "spearman_difference_test",
    "units_from_lengths",
    "wilson_interval",
]
