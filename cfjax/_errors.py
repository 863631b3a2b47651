"""cfjax's exception and warning classes, importable without JAX (the ``cfjax`` command's
``--help`` and its error handling load this module alone). :mod:`cfjax._checks` re-exports
them."""

from __future__ import annotations

__all__ = ["PrecisionWarning", "TrainingError", "ValidationError"]


class ValidationError(ValueError):
    """Bad input to a cfjax function: the message names the argument and the problem."""


class PrecisionWarning(UserWarning):
    """A float64 input is computed in float32 because JAX's 64-bit mode is off."""


class TrainingError(ValueError):
    """Training diverged: a loss became NaN or infinite (the message names the step, and the
    member where there are several)."""
