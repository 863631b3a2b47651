"""Counterfactual-marginalisation metrics (paper 000; definitions §1).

Inputs: ``p_obs (n,)`` predictions on observed units, ``p_cf (n, K)`` predictions on their K
counterfactuals, labels ``y (n,)`` in {0, 1}, intervention weights ``weights (K,)``. The
stability metrics and :func:`evaluate` also take class probabilities ``p_obs (n, C)``,
``p_cf (n, K, C)`` with labels in ``0..C-1`` (``cfjax.metrics.stability``: one core, equal to
the binary values for C = 2; :class:`MulticlassReport`). Labels that change under the
interventions are given as ``y_cf (n, K)`` (:func:`evaluate`, :func:`evaluate_bootstrap`);
without them every report records ``labels == "invariant"``.
Every function is pure JAX, jittable, and vmappable over a leading predictor axis.

Beside :func:`evaluate`: :func:`evaluate_chunks` (any N: chunks, devices, processes),
:func:`evaluate_many` (many predictors, sharded),
:func:`evaluate_bootstrap` (percentile bootstrap intervals of every field),
:func:`smooth_ece`, :func:`reliability_curve` and :func:`reliability_band` (kernel-smoothed
calibration, the diagram with its bootstrap band; drawn by
:func:`cfjax.metrics.plots.reliability_diagram`, behind the ``plots`` extra).

Each definitions §1 metric is a function of the same name here (``marginal_risk``, ``ece``,
``flip_rate``, ``spearman``, ...). The steps beneath them live in their modules:
``cfjax.metrics.risk`` (``bce``, ``cvar`` for one unit), ``.calibration``
(``calibration_bins``), ``.ranking`` (``rankdata``), ``.smooth_calibration``
(``smooth_ece_bandwidth``), ``.report`` (``descriptions``, ``NOTATION``, ``LABEL_FIELDS``).
The results the functions return (``BootstrapReport``, ``ReliabilityCurve``,
``ReliabilityBand``, ``SubgroupMeans``) are documented with them, in the same modules.
"""

from cfjax import _deprecations
from cfjax.metrics import bootstrap as _bootstrap
from cfjax.metrics import calibration as _calibration
from cfjax.metrics import ranking as _ranking
from cfjax.metrics import reliability as _reliability
from cfjax.metrics import report as _report
from cfjax.metrics import risk as _risk
from cfjax.metrics import smooth_calibration as _smooth_calibration
from cfjax.metrics import subgroups as _subgroups
from cfjax.metrics.bootstrap import bootstrap_indices as bootstrap_indices
from cfjax.metrics.bootstrap import evaluate_bootstrap as evaluate_bootstrap
from cfjax.metrics.calibration import brier as brier
from cfjax.metrics.calibration import ece as ece
from cfjax.metrics.calibration import mce as mce
from cfjax.metrics.ranking import auc as auc
from cfjax.metrics.ranking import kendall_tau_b as kendall_tau_b
from cfjax.metrics.ranking import rank_change as rank_change
from cfjax.metrics.ranking import spearman as spearman
from cfjax.metrics.reliability import reliability_band as reliability_band
from cfjax.metrics.reliability import reliability_curve as reliability_curve
from cfjax.metrics.report import MarginalisationReport as MarginalisationReport
from cfjax.metrics.report import MulticlassReport as MulticlassReport
from cfjax.metrics.report import evaluate as evaluate
from cfjax.metrics.risk import cvar_risk as cvar_risk
from cfjax.metrics.risk import interventional_risk as interventional_risk
from cfjax.metrics.risk import marginal_risk as marginal_risk
from cfjax.metrics.risk import marginalise as marginalise
from cfjax.metrics.risk import worst_case_risk as worst_case_risk
from cfjax.metrics.smooth_calibration import smooth_ece as smooth_ece
from cfjax.metrics.stability import decision_disagreement as decision_disagreement
from cfjax.metrics.stability import flip_rate as flip_rate
from cfjax.metrics.stability import score_shift as score_shift
from cfjax.metrics.stability import stability_variance as stability_variance
from cfjax.metrics.streaming import evaluate_chunks as evaluate_chunks
from cfjax.metrics.subgroups import delta_auc as delta_auc
from cfjax.metrics.subgroups import stratified_auc as stratified_auc
from cfjax.metrics.subgroups import subgroup_means as subgroup_means
from cfjax.metrics.sweep import evaluate_many as evaluate_many
from cfjax.metrics.transitions import correct_transition_count as correct_transition_count

__all__ = [
    "MarginalisationReport",
    "MulticlassReport",
    "auc",
    "bootstrap_indices",
    "brier",
    "correct_transition_count",
    "cvar_risk",
    "decision_disagreement",
    "delta_auc",
    "ece",
    "evaluate",
    "evaluate_bootstrap",
    "evaluate_chunks",
    "evaluate_many",
    "flip_rate",
    "interventional_risk",
    "kendall_tau_b",
    "marginal_risk",
    "marginalise",
    "mce",
    "rank_change",
    "reliability_band",
    "reliability_curve",
    "score_shift",
    "smooth_ece",
    "spearman",
    "stability_variance",
    "stratified_auc",
    "subgroup_means",
    "worst_case_risk",
]

#: Names that left the package's namespace (still importable from their modules) or were
#: renamed: each warns, naming the new place, for one release.
_DEPRECATED = {
    "bce": ("cfjax.metrics.risk.bce", _risk.bce),
    "BootstrapReport": ("cfjax.metrics.bootstrap.BootstrapReport", _bootstrap.BootstrapReport),
    "calibration_bins": (
        "cfjax.metrics.calibration.calibration_bins",
        _calibration.calibration_bins,
    ),
    "CounterfactualLabelReport": (
        "cfjax.metrics.report.CounterfactualLabelReport",
        _report.CounterfactualLabelReport,
    ),
    "cvar": ("cfjax.metrics.risk.cvar", _risk.cvar),
    "descriptions": ("cfjax.metrics.report.descriptions", _report.descriptions),
    "LABEL_FIELDS": ("cfjax.metrics.report.LABEL_FIELDS", _report.LABEL_FIELDS),
    "NOTATION": ("cfjax.metrics.report.NOTATION", _report.NOTATION),
    "rankdata": ("cfjax.metrics.ranking.rankdata", _ranking.rankdata),
    "ReliabilityBand": ("cfjax.metrics.reliability.ReliabilityBand", _reliability.ReliabilityBand),
    "ReliabilityCurve": (
        "cfjax.metrics.reliability.ReliabilityCurve",
        _reliability.ReliabilityCurve,
    ),
    "smooth_ece_bandwidth": (
        "cfjax.metrics.smooth_calibration.smooth_ece_bandwidth",
        _smooth_calibration.smooth_ece_bandwidth,
    ),
    "SubgroupMeans": ("cfjax.metrics.subgroups.SubgroupMeans", _subgroups.SubgroupMeans),
}
__getattr__ = _deprecations.getattr_for(__name__, _DEPRECATED)
