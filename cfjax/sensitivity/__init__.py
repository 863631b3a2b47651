"""Sensitivity of counterfactual fairness to unmeasured confounding (paper 001; SPEC §3).

So far: polynomial embeddings, the Gram-matrix design, GLS for any error precision, Model A,
Model B for any P (its σ solve differentiated implicitly), the error-correlation
parameterisations and the positive-definiteness gate. The counterfactual unfairness and the
worst-case search are the rest of issue 5."""

from cfjax.sensitivity.correlation import check_budget as check_budget
from cfjax.sensitivity.correlation import check_correlation as check_correlation
from cfjax.sensitivity.correlation import clique_correlation as clique_correlation
from cfjax.sensitivity.correlation import correlation_margin as correlation_margin
from cfjax.sensitivity.correlation import pd_correlation as pd_correlation
from cfjax.sensitivity.correlation import star_correlation as star_correlation
from cfjax.sensitivity.correlation import tanh_correlation as tanh_correlation
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

__all__ = [
    "Design",
    "ModelA",
    "ModelB",
    "check_budget",
    "check_correlation",
    "clique_correlation",
    "correlation_margin",
    "design",
    "fit_model_a",
    "fit_model_b",
    "gls",
    "pd_correlation",
    "polynomial_features",
    "profile_objective",
    "residual_products",
    "star_correlation",
    "tanh_correlation",
]
