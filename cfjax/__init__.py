"""cfjax: evaluating models with counterfactuals, in JAX.

Pillars: counterfactual marginalisation metrics (``cfjax.metrics``), invertible structural
causal models (``cfjax.scm``) with learned image mechanisms (``cfjax.generative``), sensitivity of counterfactual fairness to unmeasured confounding, and
counterfactual representations; paper 000's study end to end (``cfjax.study``). The definitions it implements, with their equations and the
papers they come from, are in the project's ``docs/definitions.md`` ("definitions §n" in the
docstrings).
"""

from cfjax import data as data
from cfjax import distributed as distributed
from cfjax import generative as generative
from cfjax import metrics as metrics
from cfjax import predictors as predictors
from cfjax import representations as representations
from cfjax import scm as scm
from cfjax import sensitivity as sensitivity
from cfjax import study as study
from cfjax._checks import PrecisionWarning as PrecisionWarning
from cfjax._checks import ValidationError as ValidationError

__version__ = "0.1.0"

__all__ = ["PrecisionWarning", "ValidationError", "data", "distributed", "generative", "metrics", "predictors", "representations", "scm", "sensitivity", "study", "__version__"]
