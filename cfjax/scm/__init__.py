"""Invertible structural causal models (definitions §2): graphs, mechanisms written for one unit,
maximum-likelihood fitting, and counterfactuals over K interventions by abduction–action–
prediction in one vmapped call.

The results (``Fit``, ``FitInfo`` in ``cfjax.scm.fit``; ``InterventionAxis`` in
``cfjax.scm.interventions``), the mechanisms' network (``cfjax.scm.nets.Conditioner``) and the
parameter store beneath ``SCM.save`` / ``SCM.load`` (``cfjax.scm.checkpoint``) are in their
modules."""

from cfjax import _deprecations
from cfjax.scm import checkpoint as _checkpoint
from cfjax.scm import fit as _fit
from cfjax.scm import interventions as _interventions
from cfjax.scm import nets as _nets
from cfjax.scm.graph import Graph as Graph
from cfjax.scm.gumbel import GumbelMax as GumbelMax
from cfjax.scm.gumbel import gumbel_posterior as gumbel_posterior
from cfjax.scm.interventions import Shift as Shift
from cfjax.scm.interventions import intervention_axis as intervention_axis
from cfjax.scm.interventions import intervention_grid as intervention_grid
from cfjax.scm.location_scale import LocationScale as LocationScale
from cfjax.scm.location_scale import linear_gaussian_params as linear_gaussian_params
from cfjax.scm.mechanism import Mechanism as Mechanism
from cfjax.scm.model import SCM as SCM
from cfjax.scm.plots import counterfactual_grid as counterfactual_grid
from cfjax.scm.spline import Spline as Spline

__all__ = [
    "Graph",
    "GumbelMax",
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
]

#: Names that left the package's namespace (still importable from their modules) or were
#: renamed: each warns, naming the new place, for one release.
_DEPRECATED = {
    "Conditioner": ("cfjax.scm.nets.Conditioner", _nets.Conditioner),
    "Fit": ("cfjax.scm.fit.Fit", _fit.Fit),
    "FitInfo": ("cfjax.scm.fit.FitInfo", _fit.FitInfo),
    "InterventionAxis": (
        "cfjax.scm.interventions.InterventionAxis",
        _interventions.InterventionAxis,
    ),
    "load_params": ("cfjax.scm.checkpoint.load_params", _checkpoint.load_params),
    "save_params": ("cfjax.scm.checkpoint.save_params", _checkpoint.save_params),
}
__getattr__ = _deprecations.getattr_for(__name__, _DEPRECATED)
