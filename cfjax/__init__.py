"""cfjax: evaluating models with counterfactuals, in JAX.

Pillars: counterfactual marginalisation metrics (``cfjax.metrics``), invertible structural
causal models (``cfjax.scm``) with learned image mechanisms (``cfjax.generative``), sensitivity of counterfactual fairness to unmeasured confounding, and
counterfactual representations; paper 000's study end to end (``cfjax.study``). The definitions it implements, with their equations and the
papers they come from, are in the project's ``docs/definitions.md`` ("definitions §n" in the
docstrings).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cfjax._errors import PrecisionWarning as PrecisionWarning
from cfjax._errors import TrainingError as TrainingError
from cfjax._errors import ValidationError as ValidationError

__version__ = "0.1.0"

#: The pillars, imported on first use (``cfjax.metrics`` or ``import cfjax.metrics``): importing
#: ``cfjax`` alone does not start JAX, so the ``cfjax`` command's ``--help`` answers at once.
_SUBMODULES = (
    "checkpoint",
    "data",
    "distributed",
    "figures",
    "generative",
    "io",
    "metrics",
    "platform",
    "predictors",
    "representations",
    "scm",
    "sensitivity",
    "study",
)

if TYPE_CHECKING:
    from cfjax import (
        checkpoint,
        data,
        distributed,
        figures,
        generative,
        io,
        metrics,
        platform,
        predictors,
        representations,
        scm,
        sensitivity,
        study,
    )


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"cfjax.{name}")  # also binds it as an attribute of cfjax
    raise AttributeError(f"module 'cfjax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SUBMODULES))


__all__ = [
    "PrecisionWarning",
    "TrainingError",
    "ValidationError",
    "checkpoint",
    "data",
    "distributed",
    "figures",
    "generative",
    "io",
    "metrics",
    "platform",
    "predictors",
    "representations",
    "scm",
    "sensitivity",
    "study",
    "__version__",
]
