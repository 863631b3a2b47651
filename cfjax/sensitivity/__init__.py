"""Sensitivity of counterfactual fairness to unmeasured confounding (paper 001; definitions §3).

Graph and data (:class:`FairnessGraph`, :func:`make_data`, :func:`from_frame` for a table with
named columns, the loaders and :func:`synthetic`)
→ :func:`fit` (degrees and λ by CV, Model A, the fair predictor on its residuals, the
unconstrained and blind baselines) → :func:`cfu` of any error correlation P (Model B,
counterfactual propagation; differentiable in P) → :func:`cfu_grid` (two features) and
:func:`worst_case` (any number: one vmapped optax program over budgets × restarts; its options a
:class:`SearchConfig`) →
:func:`inverse_budget`; :func:`plot_curve` draws a curve beside the baselines (readable scales,
intervals as bands) and :func:`curve_caption` says what to conclude from it.

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
"""

from cfjax.sensitivity.benchmarks import Benchmarks as Benchmarks
from cfjax.sensitivity.benchmarks import benchmark_cfu as benchmark_cfu
from cfjax.sensitivity.benchmarks import benchmark_correlations as benchmark_correlations
from cfjax.sensitivity.benchmarks import benchmarks as benchmarks
from cfjax.sensitivity.benchmarks import identified_pairs as identified_pairs
from cfjax.sensitivity.benchmarks import partial_r2 as partial_r2
from cfjax.sensitivity.benchmarks import residual_correlations as residual_correlations
from cfjax.sensitivity.benchmarks import yardstick_children as yardstick_children
from cfjax.sensitivity.benchmarks import yardsticks as yardsticks
from cfjax.sensitivity.bootstrap import BootstrapConfig as BootstrapConfig
from cfjax.sensitivity.bootstrap import Intervals as Intervals
from cfjax.sensitivity.bootstrap import bootstrap as bootstrap
from cfjax.sensitivity.bootstrap import refit as refit
from cfjax.sensitivity.bootstrap import resample_analysis as resample_analysis
from cfjax.sensitivity.cfu import bivariate_correlation as bivariate_correlation
from cfjax.sensitivity.cfu import cfu as cfu
from cfjax.sensitivity.cfu import cfu_at_zero_correlation as cfu_at_zero_correlation
from cfjax.sensitivity.cfu import cfu_grid as cfu_grid
from cfjax.sensitivity.cfu import cfu_of as cfu_of
from cfjax.sensitivity.cfu import counterfactual_features as counterfactual_features
from cfjax.sensitivity.contour import Surface as Surface
from cfjax.sensitivity.contour import cfu_surface as cfu_surface
from cfjax.sensitivity.correlation import boundary_scale as boundary_scale
from cfjax.sensitivity.correlation import check_budget as check_budget
from cfjax.sensitivity.correlation import check_correlation as check_correlation
from cfjax.sensitivity.correlation import clique_correlation as clique_correlation
from cfjax.sensitivity.correlation import correlation_margin as correlation_margin
from cfjax.sensitivity.correlation import pd_correlation as pd_correlation
from cfjax.sensitivity.correlation import star_correlation as star_correlation
from cfjax.sensitivity.correlation import tanh_correlation as tanh_correlation
from cfjax.sensitivity.datasets import Problem as Problem
from cfjax.sensitivity.diagnostics import ConvergenceWarning as ConvergenceWarning
from cfjax.sensitivity.diagnostics import DegenerateProblemWarning as DegenerateProblemWarning
from cfjax.sensitivity.diagnostics import ShrinkageWarning as ShrinkageWarning
from cfjax.sensitivity.datasets import load_law_school as load_law_school
from cfjax.sensitivity.datasets import load_nhs as load_nhs
from cfjax.sensitivity.datasets import synthetic as synthetic
from cfjax.sensitivity.frame import from_frame as from_frame
from cfjax.sensitivity.linear import Design as Design
from cfjax.sensitivity.linear import ModelA as ModelA
from cfjax.sensitivity.linear import ModelB as ModelB
from cfjax.sensitivity.linear import design as design
from cfjax.sensitivity.linear import fit_model_a as fit_model_a
from cfjax.sensitivity.linear import fit_model_b as fit_model_b
from cfjax.sensitivity.linear import gls as gls
from cfjax.sensitivity.linear import polynomial_features as polynomial_features
from cfjax.sensitivity.linear import profile_objective as profile_objective
from cfjax.sensitivity.linear import residual_products as residual_products
from cfjax.sensitivity.plots import curve_caption as curve_caption
from cfjax.sensitivity.plots import plot_contour as plot_contour
from cfjax.sensitivity.plots import plot_curve as plot_curve
from cfjax.sensitivity.problem import PREDICTORS as PREDICTORS
from cfjax.sensitivity.problem import FairModel as FairModel
from cfjax.sensitivity.problem import DistinctUnits as DistinctUnits
from cfjax.sensitivity.problem import distinct_units as distinct_units
from cfjax.sensitivity.problem import FairnessData as FairnessData
from cfjax.sensitivity.problem import FairnessGraph as FairnessGraph
from cfjax.sensitivity.problem import Settings as Settings
from cfjax.sensitivity.problem import embeddings as embeddings
from cfjax.sensitivity.problem import fit as fit
from cfjax.sensitivity.problem import make_data as make_data
from cfjax.sensitivity.problem import predictor_inputs as predictor_inputs
from cfjax.sensitivity.ridge import RidgeFit as RidgeFit
from cfjax.sensitivity.ridge import cv_scores as cv_scores
from cfjax.sensitivity.ridge import fold_ids as fold_ids
from cfjax.sensitivity.ridge import ridge_cv as ridge_cv
from cfjax.sensitivity.inverse import InverseBudget as InverseBudget
from cfjax.sensitivity.inverse import inverse_budget as inverse_budget
from cfjax.sensitivity.projection import sign_corners as sign_corners
from cfjax.sensitivity.search import WorstCase as WorstCase
from cfjax.sensitivity.search import paper_optimizer as paper_optimizer
from cfjax.sensitivity.search_config import SearchConfig as SearchConfig
from cfjax.sensitivity.search import worst_case as worst_case

__all__ = [
    "Benchmarks",
    "BootstrapConfig",
    "ConvergenceWarning",
    "DegenerateProblemWarning",
    "Design",
    "DistinctUnits",
    "FairModel",
    "FairnessData",
    "FairnessGraph",
    "Intervals",
    "InverseBudget",
    "ModelA",
    "ModelB",
    "PREDICTORS",
    "Problem",
    "RidgeFit",
    "SearchConfig",
    "Settings",
    "ShrinkageWarning",
    "Surface",
    "WorstCase",
    "benchmark_cfu",
    "benchmark_correlations",
    "benchmarks",
    "bivariate_correlation",
    "bootstrap",
    "boundary_scale",
    "cfu",
    "cfu_at_zero_correlation",
    "cfu_grid",
    "cfu_of",
    "cfu_surface",
    "check_budget",
    "check_correlation",
    "clique_correlation",
    "correlation_margin",
    "counterfactual_features",
    "curve_caption",
    "cv_scores",
    "design",
    "distinct_units",
    "embeddings",
    "fit",
    "fit_model_a",
    "fit_model_b",
    "fold_ids",
    "from_frame",
    "gls",
    "identified_pairs",
    "inverse_budget",
    "load_law_school",
    "load_nhs",
    "make_data",
    "paper_optimizer",
    "partial_r2",
    "pd_correlation",
    "plot_contour",
    "plot_curve",
    "polynomial_features",
    "predictor_inputs",
    "profile_objective",
    "refit",
    "residual_correlations",
    "resample_analysis",
    "residual_products",
    "ridge_cv",
    "sign_corners",
    "star_correlation",
    "synthetic",
    "tanh_correlation",
    "worst_case",
    "yardstick_children",
    "yardsticks",
]
