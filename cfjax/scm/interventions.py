"""Product grids of interventions, e.g. sex × 8 ages (K = 16) as in paper 000."""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

import jax
import numpy as np
from flax import struct

from cfjax._checks import ValidationError, check_weights

__all__ = ["Shift", "intervention_grid"]


@struct.dataclass
class Shift:
    """A shift intervention ``do(v := v_observed + delta)`` on a continuous node: each
    unit's own factual value moved by ``delta`` (``(K,)``, the same shift for every unit, or
    ``(K, N)``). Resolved inside the compiled counterfactual program, so the ``(K, N)`` values
    are never built on the host. Counterfactuals only: it needs the observed values.

    Example:
      >>> import cfjax as cf, numpy as np
      >>> scm = cf.scm.SCM({"age": [], "y": ["age"]},
      ...                  {"age": cf.scm.LocationScale(), "y": cf.scm.LocationScale()})
      >>> params = {"age": cf.scm.linear_gaussian_params([], 50.0, 10.0),
      ...           "y": cf.scm.linear_gaussian_params([0.1], 0.0, 1.0)}
      >>> data = {"age": np.array([30.0, 60.0]), "y": np.array([3.5, 6.0])}
      >>> out = scm.counterfactual(params, data, {"age": cf.scm.Shift(np.array([10.0]))})
      >>> out["age"].tolist(), out["y"].tolist()
      ([[40.0, 70.0]], [[4.5, 7.0]])
    """

    delta: jax.Array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self.delta))

    def resolve(self, observed: jax.Array) -> jax.Array:
        """The ``(K, N)`` intervention values for the units' observed values ``(N,)``."""
        delta = jax.numpy.asarray(self.delta).astype(observed.dtype)
        return observed[None, :] + (delta[:, None] if delta.ndim == 1 else delta)


def intervention_grid(
    values: Mapping[str, Sequence[Any]],
    weights: Any = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """All combinations of the given intervention values, the first node varying slowest.

    Args:
      values: ``node -> values`` to intervene with.
      weights: None for uniform weights ``1/K``; a ``(K,)`` array over the grid; or a mapping
        ``node -> per-value weights`` whose product gives the grid's weights (each is
        normalised to sum to 1).

    Returns:
      ``(interventions, weights)``: ``{node: (K,)}`` and ``(K,)`` weights summing to 1.

    Example:
      >>> do, q = intervention_grid({"sex": [0, 1], "age": np.linspace(20, 90, 8)})
      >>> do["sex"].shape, do["age"][:3].tolist(), float(q.sum())
      ((16,), [20.0, 30.0, 40.0], 1.0)
    """
    if not isinstance(values, Mapping) or not values:
        raise ValidationError(f"`values`: expected a non-empty mapping node -> values, got {values!r}.")
    columns = {}
    for name, vals in values.items():
        arr = np.asarray(vals)
        if arr.ndim != 1 or arr.size == 0:
            raise ValidationError(f"`values[{name!r}]`: expected a non-empty 1-d sequence, got shape {arr.shape}.")
        columns[name] = arr
    index = np.array(list(itertools.product(*(range(len(v)) for v in columns.values()))))
    grid = {name: col[index[:, j]] for j, (name, col) in enumerate(columns.items())}
    k = index.shape[0]
    if weights is None:
        q = np.full(k, 1.0 / k)
    elif isinstance(weights, Mapping):
        q = np.ones(k)
        for j, (name, col) in enumerate(columns.items()):
            if name not in weights:
                raise ValidationError(f"`weights`: missing per-value weights for {name!r}.")
            w = np.asarray(weights[name], np.float64)
            if w.shape != col.shape or (w < 0).any() or w.sum() <= 0:
                raise ValidationError(
                    f"`weights[{name!r}]`: expected {len(col)} non-negative weights, got {w.tolist()}.")
            q = q * (w / w.sum())[index[:, j]]
    else:
        check_weights("weights", weights, k)
        q = np.asarray(weights, np.float64)
    return grid, q
