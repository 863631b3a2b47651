"""Boundary validation of the metric inputs ``p_obs (n,)``, ``p_cf (n, K)``, ``y (n,)``."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from cfjax import _checks
from cfjax.metrics import _arrays


def scores(name: str, p: Any) -> None:
    _checks.check_ndim(name, p, 1, "of shape (n,)")
    _checks.check_nonempty(name, p)
    _checks.check_probabilities(name, p)


def counterfactual_scores(name: str, p_cf: Any) -> None:
    _checks.check_ndim(name, p_cf, 2, "of shape (n, K)")
    _checks.check_nonempty(name, p_cf)
    _checks.check_probabilities(name, p_cf)


def labels(name: str, y: Any, n_name: str, ref: Any) -> None:
    _checks.check_ndim(name, y, 1, "of shape (n,)")
    _checks.check_same_len(n_name, ref, name, y)
    _checks.check_binary_labels(name, y)


def prepare(
    p_obs: Any = None, p_cf: Any = None, y: Any = None, weights: Any = None
) -> tuple[jax.Array | None, jax.Array | None, jax.Array | None, jax.Array | None]:
    """Validate whichever of the four inputs are given and convert them to one float dtype.

    Returns ``(p_obs, p_cf, y, q)``; ``q`` is resolved (uniform when None) only if ``p_cf``
    is given.
    """
    if p_obs is not None:
        scores("p_obs", p_obs)
    if p_cf is not None:
        counterfactual_scores("p_cf", p_cf)
    if p_obs is not None and p_cf is not None:
        _checks.check_same_len("p_obs", p_obs, "p_cf", p_cf)
    ref_name, ref = ("p_obs", p_obs) if p_obs is not None else ("p_cf", p_cf)
    if y is not None:
        labels("y", y, ref_name, ref)
    dtype = _arrays.float_dtype(p_obs, p_cf)
    q = None
    if p_cf is not None:
        q = _arrays.resolve_weights(weights, jnp.shape(p_cf)[1], dtype)
    cast = lambda v: None if v is None else _arrays.as_float(v, dtype)  # noqa: E731
    return cast(p_obs), cast(p_cf), cast(y), q
