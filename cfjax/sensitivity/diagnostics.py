"""The warnings of :mod:`cfjax.sensitivity`, and the test behind the ridge-floor warning.

- :class:`ConvergenceWarning`: a search or a solve that did not end where it should (a worst
  case resting on one restart, a budget without a finite CFU, a Model B fit that is not finite).
- :class:`ShrinkageWarning`: a number that the ridge penalty carries rather than confounding
  (the CFU at zero error correlation, a Model B that shrinks an equation toward zero).
- :class:`DegenerateProblemWarning`: a problem whose CFU is 0 (or the floor) at every
  correlation by construction (the sensitive attribute causes no feature, a single feature).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "ConvergenceWarning",
    "ShrinkageWarning",
    "DegenerateProblemWarning",
    "FLOOR_SHARE",
    "floor_dominates",
]


class ConvergenceWarning(UserWarning):
    """The worst case rests on one restart: the best two restarts' answers differ by more than
    the factor :func:`~cfjax.sensitivity.worst_case`'s ``warn_ratio`` allows (more restarts or
    steps may find more); or at some budget no restart ended with a finite CFU; or a Model B fit
    (:func:`~cfjax.sensitivity.linear.fit_model_b`) or Model A fit came out NaN or infinite (the
    message names λ and the equation)."""


class ShrinkageWarning(UserWarning):
    """The ridge penalty, not confounding, carries a CFU curve: its value at zero error
    correlation (P = I, where CFU would be 0 without a penalty) is more than a tenth of the
    curve's range (definitions §3.5)."""


class DegenerateProblemWarning(UserWarning):
    """The problem cannot show any sensitivity to confounding: the sensitive attribute has no
    child among the features (nothing depends on it), or there is a single feature (one error
    term, nothing to correlate). Its CFU curve is flat at the floor."""


#: The ridge floor warns above this fraction of a curve's range.
FLOOR_SHARE = 0.1


def floor_dominates(floor: Any, curve: Any, atol: float = 0.0) -> bool:
    """Whether the CFU at zero correlation ``floor`` is more than :data:`FLOOR_SHARE` of the
    range of the curve ``curve`` (its finite values together with the floor itself: a worst
    case is never below the floor, as P = I is within every budget). False for a floor that is
    not finite or at most ``atol`` (rounding: a flat curve at 1e-27 is no artefact)."""
    floor = float(floor)
    if not (np.isfinite(floor) and floor > atol):
        return False
    values = np.asarray(curve, np.float64).reshape(-1)
    values = np.append(values[np.isfinite(values)], floor)
    return bool(floor > FLOOR_SHARE * (values.max() - values.min()))
