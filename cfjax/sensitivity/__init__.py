"""Sensitivity of counterfactual fairness to unmeasured confounding (paper 001; definitions §3).

Graph and data (:class:`FairnessGraph`, :func:`make_data`, :func:`from_frame` for a table with
named columns, the loaders and :func:`synthetic`)
→ :func:`fit` (degrees and λ by CV, Model A, the fair predictor on its residuals, the
unconstrained and blind baselines) → :func:`cfu` of any error correlation P (Model B,
counterfactual propagation; differentiable in P) → :func:`cfu_grid` (two features) and
:func:`worst_case` (any number: one vmapped optax program over budgets × restarts; its options a
:class:`SearchConfig`) →
:func:`inverse_budget`; :func:`plot_curve` draws a curve beside the baselines (readable scales,
intervals as bands; its labels a :class:`CurveStyle`) and :func:`curve_caption` says what to conclude from it.

What a reviewer asks next: how strong is a budget's confounding, against the data
(:func:`benchmarks`: the correlation a confounder k times as strong as an observed parent would
induce, definitions §3.9); what does the fair predictor buy (:meth:`FairModel.scoring` scores
CFU on the unconstrained or blind baseline instead, so every predictor's worst case goes on one
curve); how sure are the numbers (:func:`bootstrap`: percentile intervals over resamples of the
units, every model refitted by :func:`refit`, one vmapped program); and what does CFU look like
over two correlations (:func:`cfu_surface`, :func:`plot_contour`).
:func:`cfu_at_zero_correlation` is every curve's floor (0 without a ridge penalty); the warnings
(:class:`ConvergenceWarning`, :class:`ShrinkageWarning`, :class:`DegenerateProblemWarning`) say
when a number is not what it seems.

:func:`analyse` runs all of it on one problem, as ``cfjax sensitivity`` does: its
:class:`Analysis` gives the numbers (``to_dict()``), the report (``report_markdown()``,
:mod:`cfjax.sensitivity.report`) and the figures.

The steps beneath live in their modules: ``cfjax.sensitivity.linear`` (Models A and B:
``design``, ``fit_model_a``, ``fit_model_b``, ``gls``), ``.ridge`` (``ridge_cv``, ``fold_ids``),
``.correlation`` (``check_correlation``, ``pd_correlation``, ...), ``.cfu`` (``cfu_of``,
``bivariate_correlation``), ``.benchmarks`` (``partial_r2``, ``benchmark_correlations``, ...),
``.resample`` (``refit``, ``resample_analysis``), ``.fitting`` (``embeddings``,
``predictor_inputs``), ``.problem`` (``distinct_units``).
"""

from cfjax import _deprecations

# the modules first: a submodule's name (benchmarks, cfu) is rebound to its function below
from cfjax.sensitivity import benchmarks as _benchmarks
from cfjax.sensitivity import cfu as _cfu
from cfjax.sensitivity import correlation as _correlation
from cfjax.sensitivity import fitting as _fitting
from cfjax.sensitivity import linear as _linear
from cfjax.sensitivity import problem as _problem
from cfjax.sensitivity import projection as _projection
from cfjax.sensitivity import resample as _resample
from cfjax.sensitivity import ridge as _ridge
from cfjax.sensitivity import search as _search
from cfjax.sensitivity.analysis import Analysis as Analysis
from cfjax.sensitivity.analysis import analyse as analyse
from cfjax.sensitivity.benchmarks import Benchmarks as Benchmarks
from cfjax.sensitivity.benchmarks import benchmarks as benchmarks
from cfjax.sensitivity.bootstrap import BootstrapConfig as BootstrapConfig
from cfjax.sensitivity.bootstrap import Intervals as Intervals
from cfjax.sensitivity.bootstrap import bootstrap as bootstrap
from cfjax.sensitivity.cfu import cfu as cfu
from cfjax.sensitivity.cfu import cfu_at_zero_correlation as cfu_at_zero_correlation
from cfjax.sensitivity.cfu import cfu_grid as cfu_grid
from cfjax.sensitivity.contour import Surface as Surface
from cfjax.sensitivity.contour import cfu_surface as cfu_surface
from cfjax.sensitivity.contour_plot import plot_contour as plot_contour
from cfjax.sensitivity.correlation import tanh_correlation as tanh_correlation
from cfjax.sensitivity.datasets import Problem as Problem
from cfjax.sensitivity.datasets import load_law_school as load_law_school
from cfjax.sensitivity.datasets import load_nhs as load_nhs
from cfjax.sensitivity.datasets import synthetic as synthetic
from cfjax.sensitivity.diagnostics import ConvergenceWarning as ConvergenceWarning
from cfjax.sensitivity.diagnostics import DegenerateProblemWarning as DegenerateProblemWarning
from cfjax.sensitivity.diagnostics import ShrinkageWarning as ShrinkageWarning
from cfjax.sensitivity.fitting import PREDICTORS as PREDICTORS
from cfjax.sensitivity.fitting import FairModel as FairModel
from cfjax.sensitivity.fitting import FitConfig as FitConfig
from cfjax.sensitivity.fitting import fit as fit
from cfjax.sensitivity.frame import from_frame as from_frame
from cfjax.sensitivity.inverse import InverseBudget as InverseBudget
from cfjax.sensitivity.inverse import inverse_budget as inverse_budget
from cfjax.sensitivity.plots import CurveStyle as CurveStyle
from cfjax.sensitivity.plots import curve_caption as curve_caption
from cfjax.sensitivity.plots import plot_curve as plot_curve
from cfjax.sensitivity.problem import FairnessData as FairnessData
from cfjax.sensitivity.problem import FairnessGraph as FairnessGraph
from cfjax.sensitivity.problem import make_data as make_data
from cfjax.sensitivity.search import WorstCase as WorstCase
from cfjax.sensitivity.search import worst_case as worst_case
from cfjax.sensitivity.search_config import SearchConfig as SearchConfig

__all__ = [
    "Analysis",
    "Benchmarks",
    "BootstrapConfig",
    "ConvergenceWarning",
    "CurveStyle",
    "DegenerateProblemWarning",
    "FairModel",
    "FairnessData",
    "FairnessGraph",
    "FitConfig",
    "Intervals",
    "InverseBudget",
    "PREDICTORS",
    "Problem",
    "SearchConfig",
    "ShrinkageWarning",
    "Surface",
    "WorstCase",
    "analyse",
    "benchmarks",
    "bootstrap",
    "cfu",
    "cfu_at_zero_correlation",
    "cfu_grid",
    "cfu_surface",
    "curve_caption",
    "fit",
    "from_frame",
    "inverse_budget",
    "load_law_school",
    "load_nhs",
    "make_data",
    "plot_contour",
    "plot_curve",
    "synthetic",
    "tanh_correlation",
    "worst_case",
]

#: Names that left the package's namespace (still importable from their modules) or were
#: renamed (``Settings``: :class:`FitConfig`): each warns, naming the new place, for one release.
_DEPRECATED = {
    "Settings": ("cfjax.sensitivity.FitConfig", FitConfig),
    "benchmark_cfu": ("cfjax.sensitivity.benchmarks.benchmark_cfu", _benchmarks.benchmark_cfu),
    "benchmark_correlations": (
        "cfjax.sensitivity.benchmarks.benchmark_correlations",
        _benchmarks.benchmark_correlations,
    ),
    "bivariate_correlation": (
        "cfjax.sensitivity.cfu.bivariate_correlation",
        _cfu.bivariate_correlation,
    ),
    "boundary_scale": ("cfjax.sensitivity.correlation.boundary_scale", _correlation.boundary_scale),
    "cfu_of": ("cfjax.sensitivity.cfu.cfu_of", _cfu.cfu_of),
    "check_budget": ("cfjax.sensitivity.correlation.check_budget", _correlation.check_budget),
    "check_correlation": (
        "cfjax.sensitivity.correlation.check_correlation",
        _correlation.check_correlation,
    ),
    "clique_correlation": (
        "cfjax.sensitivity.correlation.clique_correlation",
        _correlation.clique_correlation,
    ),
    "correlation_margin": (
        "cfjax.sensitivity.correlation.correlation_margin",
        _correlation.correlation_margin,
    ),
    "counterfactual_features": (
        "cfjax.sensitivity.cfu.counterfactual_features",
        _cfu.counterfactual_features,
    ),
    "cv_scores": ("cfjax.sensitivity.ridge.cv_scores", _ridge.cv_scores),
    "Design": ("cfjax.sensitivity.linear.Design", _linear.Design),
    "design": ("cfjax.sensitivity.linear.design", _linear.design),
    "distinct_units": ("cfjax.sensitivity.problem.distinct_units", _problem.distinct_units),
    "DistinctUnits": ("cfjax.sensitivity.problem.DistinctUnits", _problem.DistinctUnits),
    "embeddings": ("cfjax.sensitivity.fitting.embeddings", _fitting.embeddings),
    "fit_model_a": ("cfjax.sensitivity.linear.fit_model_a", _linear.fit_model_a),
    "fit_model_b": ("cfjax.sensitivity.linear.fit_model_b", _linear.fit_model_b),
    "fold_ids": ("cfjax.sensitivity.ridge.fold_ids", _ridge.fold_ids),
    "gls": ("cfjax.sensitivity.linear.gls", _linear.gls),
    "identified_pairs": (
        "cfjax.sensitivity.benchmarks.identified_pairs",
        _benchmarks.identified_pairs,
    ),
    "ModelA": ("cfjax.sensitivity.linear.ModelA", _linear.ModelA),
    "ModelB": ("cfjax.sensitivity.linear.ModelB", _linear.ModelB),
    "paper_optimizer": ("cfjax.sensitivity.search.paper_optimizer", _search.paper_optimizer),
    "partial_r2": ("cfjax.sensitivity.benchmarks.partial_r2", _benchmarks.partial_r2),
    "pd_correlation": ("cfjax.sensitivity.correlation.pd_correlation", _correlation.pd_correlation),
    "polynomial_features": (
        "cfjax.sensitivity.linear.polynomial_features",
        _linear.polynomial_features,
    ),
    "predictor_inputs": ("cfjax.sensitivity.fitting.predictor_inputs", _fitting.predictor_inputs),
    "profile_objective": ("cfjax.sensitivity.linear.profile_objective", _linear.profile_objective),
    "refit": ("cfjax.sensitivity.resample.refit", _resample.refit),
    "resample_analysis": (
        "cfjax.sensitivity.resample.resample_analysis",
        _resample.resample_analysis,
    ),
    "residual_correlations": (
        "cfjax.sensitivity.benchmarks.residual_correlations",
        _benchmarks.residual_correlations,
    ),
    "residual_products": ("cfjax.sensitivity.linear.residual_products", _linear.residual_products),
    "ridge_cv": ("cfjax.sensitivity.ridge.ridge_cv", _ridge.ridge_cv),
    "RidgeFit": ("cfjax.sensitivity.ridge.RidgeFit", _ridge.RidgeFit),
    "sign_corners": ("cfjax.sensitivity.projection.sign_corners", _projection.sign_corners),
    "star_correlation": (
        "cfjax.sensitivity.correlation.star_correlation",
        _correlation.star_correlation,
    ),
    "yardstick_children": (
        "cfjax.sensitivity.benchmarks.yardstick_children",
        _benchmarks.yardstick_children,
    ),
    "yardsticks": ("cfjax.sensitivity.benchmarks.yardsticks", _benchmarks.yardsticks),
}
__getattr__ = _deprecations.getattr_for(__name__, _DEPRECATED)
