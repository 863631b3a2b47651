"""Invertible structural causal models (definitions §2): graphs, mechanisms written for one unit,
maximum-likelihood fitting, and counterfactuals over K interventions by abduction–action–
prediction in one vmapped call."""

from cfjax.scm.checkpoint import load_params as load_params
from cfjax.scm.checkpoint import save_params as save_params
from cfjax.scm.graph import Graph as Graph
from cfjax.scm.gumbel import GumbelMax as GumbelMax
from cfjax.scm.gumbel import gumbel_posterior as gumbel_posterior
from cfjax.scm.interventions import InterventionAxis as InterventionAxis
from cfjax.scm.interventions import Shift as Shift
from cfjax.scm.interventions import intervention_axis as intervention_axis
from cfjax.scm.interventions import intervention_grid as intervention_grid
from cfjax.scm.location_scale import LocationScale as LocationScale
from cfjax.scm.location_scale import linear_gaussian_params as linear_gaussian_params
from cfjax.scm.mechanism import Mechanism as Mechanism
from cfjax.scm.fit import Fit as Fit
from cfjax.scm.fit import FitInfo as FitInfo
from cfjax.scm.model import SCM as SCM
from cfjax.scm.nets import Conditioner as Conditioner
from cfjax.scm.plots import counterfactual_grid as counterfactual_grid
from cfjax.scm.spline import Spline as Spline

__all__ = [
    "Conditioner",
    "Fit",
    "FitInfo",
    "Graph",
    "GumbelMax",
    "InterventionAxis",
    "LocationScale",
    "Mechanism",
    "SCM",
    "Shift",
    "Spline",
    "counterfactual_grid",
    "gumbel_posterior",
    "intervention_axis",
    "intervention_grid",
    "linear_gaussian_params",
    "load_params",
    "save_params",
]
