"""Calibration of a score against labels (paper 000, definitions §1): Brier score, ECE and MCE.

Bins are equal-width, ``[b/B, (b+1)/B)`` for ``b < B − 1`` and the last bin closed, with the
edges ``b/B`` computed in the scores' dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax.metrics import _inputs
from cfjax.typing import ArrayLike

__all__ = ["brier", "ece", "mce", "calibration_bins"]


def brier(p: ArrayLike, y: ArrayLike) -> jax.Array:
    """Brier score ``mean (p − y)²`` of scores ``p (n,)`` against labels ``y (n,)``.

    Example:
      >>> import numpy as np
      >>> round(float(brier(np.array([0.5, 1.0], np.float32), np.array([1, 1]))), 4)
      0.125
    """
    p, _, y, _ = _inputs.prepare(p_obs=p, y=y)
    return _brier(p, y)


def _brier(p: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean(jnp.square(p - y))


def calibration_bins(
    p: ArrayLike, y: ArrayLike, n_bins: int = 15
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-bin ``(count, Σ p, Σ y)``, each of shape ``(n_bins,)``."""
    n_bins = _checks.check_positive_int("n_bins", n_bins)
    p, _, y, _ = _inputs.prepare(p_obs=p, y=y)
    return _bins(p, y, n_bins)


def _bins(
    p: jax.Array, y: jax.Array, n_bins: int, mask: jax.Array | None = None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    # Edges as constants, divided in numpy (XLA may turn a division by a constant into a
    # multiplication, which rounds differently at the edges).
    dtype = np.dtype(p.dtype)
    edges = jnp.asarray(np.arange(1, n_bins, dtype=dtype) / dtype.type(n_bins))
    idx = jnp.searchsorted(edges, p, side="right")
    stacked = jnp.stack([jnp.ones_like(p), p, y], axis=-1)  # (n, 3)
    if mask is not None:  # units outside the mask (padding) in no bin
        stacked = jnp.where(mask[:, None], stacked, jnp.zeros((), stacked.dtype))
    sums = jax.ops.segment_sum(stacked, idx, num_segments=n_bins)  # (B, 3)
    return sums[:, 0], sums[:, 1], sums[:, 2]


def _ece(p: jax.Array, y: jax.Array, n_bins: int) -> jax.Array:
    count, sum_p, sum_y = _bins(p, y, n_bins)
    return jnp.sum(jnp.abs(sum_y - sum_p)) / p.shape[0]


def _mce(p: jax.Array, y: jax.Array, n_bins: int) -> jax.Array:
    count, sum_p, sum_y = _bins(p, y, n_bins)
    gap = jnp.abs(sum_y - sum_p) / jnp.maximum(count, 1)
    return jnp.max(jnp.where(count > 0, gap, 0))


def ece(p: ArrayLike, y: ArrayLike, n_bins: int = 15) -> jax.Array:
    """Expected calibration error ``Σ_b (n_b/n) |mean y_b − mean p_b|``.

    Example:
      >>> import numpy as np
      >>> round(float(ece(np.array([0.9, 0.9], np.float32), np.array([1, 0]), n_bins=10)), 4)
      0.4
    """
    n_bins = _checks.check_positive_int("n_bins", n_bins)
    p, _, y, _ = _inputs.prepare(p_obs=p, y=y)
    return _ece(p, y, n_bins)


def mce(p: ArrayLike, y: ArrayLike, n_bins: int = 15) -> jax.Array:
    """Maximum calibration error: the largest ``|mean y_b − mean p_b|`` over non-empty bins."""
    n_bins = _checks.check_positive_int("n_bins", n_bins)
    p, _, y, _ = _inputs.prepare(p_obs=p, y=y)
    return _mce(p, y, n_bins)
