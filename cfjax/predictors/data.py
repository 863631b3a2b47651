"""The training data of an ensemble's members: one shared training set, each member's weights
over it (:class:`MemberData`, :func:`member_data`), and the checks of a training set."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks, _results
from cfjax.typing import ArrayLike

__all__ = ["MemberData", "member_data"]


class MemberData(NamedTuple):
    """One member's view of the shared training set.

    ``images (N, H, W)`` and ``labels (N,)`` are shared by every member; ``cdf (N,)`` is the
    cumulative sum of the member's weights (a mask as 0/1), from which its minibatches are drawn.
    For a training objective (:class:`cfjax.predictors.Objective`): ``strength ()`` the
    member's penalty strength (group DRO's step size), ``groups (N,)`` each unit's group for
    group DRO (shared); None where unused.
    """

    images: jax.Array
    labels: jax.Array
    cdf: jax.Array
    strength: jax.Array | None = None
    groups: jax.Array | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field as (nested) lists for ``json.dumps`` (the images in full: large)."""
        return {
            f: _results.plain(getattr(self, f))
            for f in self._fields
            if getattr(self, f) is not None
        }

    def __repr__(self) -> str:
        return _results.fields_repr(
            type(self).__name__,
            (
                (f, _results.sized(getattr(self, f)))
                for f in self._fields
                if getattr(self, f) is not None
            ),
        )


def member_data(
    images: ArrayLike,
    labels: ArrayLike,
    weights: ArrayLike,
    *,
    strengths: ArrayLike | None = None,
    groups: ArrayLike | None = None,
) -> MemberData:
    """:class:`MemberData` of the members whose weights (or boolean masks) are the rows of
    ``weights (M, N)`` (``cdf`` is then ``(M, N)``; one row ``(N,)`` gives ``(N,)``), with
    their objectives' ``strengths (M,)`` (or ``()``) and the units' ``groups (N,)`` when given.

    Example:
      >>> d = member_data(jnp.zeros((4, 16, 16)), jnp.array([0, 1, 0, 1]),
      ...                 jnp.array([[True, True, False, True]]))
      >>> d.cdf.tolist()
      [[1.0, 2.0, 2.0, 3.0]]
    """
    _check_training_set(images, labels, weights, "weights")
    x = jnp.asarray(images)
    w = jnp.asarray(weights).astype(x.dtype)
    strength = None if strengths is None else jnp.asarray(strengths, x.dtype)
    g = None if groups is None else jnp.asarray(groups, jnp.int32)
    return MemberData(x, jnp.asarray(labels).astype(x.dtype), jnp.cumsum(w, axis=-1), strength, g)


def _check_training_set(
    images: ArrayLike, labels: ArrayLike, weights: ArrayLike, weights_name: str
) -> None:
    _checks.check_ndim("images", images, 3, "of shape (N, H, W)")
    _checks.check_nonempty("images", images)
    dtype = np.dtype(getattr(images, "dtype", None) or np.asarray(images).dtype)
    if not np.issubdtype(dtype, np.floating):
        _checks.fail("images", "floating-point images in [0, 1]", f"dtype {dtype}")
    _checks.check_finite("images", images)
    _checks.check_ndim("labels", labels, 1, "of shape (N,)")
    _checks.check_same_len("images", images, "labels", labels)
    _checks.check_binary_labels("labels", labels)
    w_shape = _checks.shape_of(weights)
    if len(w_shape) not in (1, 2) or w_shape[-1] != _checks.shape_of(images)[0]:
        _checks.fail(
            weights_name,
            f"shape (M, {_checks.shape_of(images)[0]}) (one row per member)",
            f"shape {w_shape}",
        )
    if w_shape[0] == 0:
        _checks.fail(weights_name, "at least one member", f"shape {w_shape}")
    if _checks.is_concrete(weights):
        w = np.asarray(weights)
        if w.dtype != bool:
            if not np.issubdtype(w.dtype, np.number):
                _checks.fail(
                    weights_name, "a boolean mask or non-negative weights", f"dtype {w.dtype}"
                )
            w = w.astype(np.float64)
            if not np.isfinite(w).all() or (w < 0).any():
                _checks.fail(
                    weights_name, "finite non-negative weights", "negative, NaN or infinite values"
                )
        sums = np.atleast_2d(w).sum(axis=-1)
        if (sums <= 0).any():
            _checks.fail(
                weights_name,
                "every member with at least one unit of positive weight",
                f"member(s) {np.flatnonzero(sums <= 0).tolist()} with none",
            )
