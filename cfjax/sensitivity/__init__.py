"""Sensitivity of counterfactual fairness to unmeasured confounding (paper 001; SPEC §3).

So far: the error-correlation parameterisations and the positive-definiteness gate. Model A/B
fitting, counterfactual unfairness and the worst-case search are the rest of issue 5."""

from cfjax.sensitivity.correlation import check_budget as check_budget
from cfjax.sensitivity.correlation import check_correlation as check_correlation
from cfjax.sensitivity.correlation import clique_correlation as clique_correlation
from cfjax.sensitivity.correlation import correlation_margin as correlation_margin
from cfjax.sensitivity.correlation import pd_correlation as pd_correlation
from cfjax.sensitivity.correlation import star_correlation as star_correlation
from cfjax.sensitivity.correlation import tanh_correlation as tanh_correlation

__all__ = [
    "check_budget",
    "check_correlation",
    "clique_correlation",
    "correlation_margin",
    "pd_correlation",
    "star_correlation",
    "tanh_correlation",
]
