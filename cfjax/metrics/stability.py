"""Label-free stability of a predictor under counterfactual marginalisation (paper 000,
Table 5; SPEC §1). Shapes: ``p_obs (n,)``, ``p_cf (n, K)``, ``weights (K,)``, threshold
``tau`` with decisions ``d(p) = 1[p >= tau]``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from cfjax import _checks
from cfjax.metrics import _inputs

__all__ = ["stability_variance", "flip_rate", "decision_disagreement", "score_shift"]


def stability_variance(p_cf: Any, weights: Any = None) -> jax.Array:
    """``S_var = mean_i Σ_k q_k (p_cf[i, k] − p_bar[i])²``.

    Example:
      >>> import numpy as np
      >>> round(float(stability_variance(np.array([[0.2, 0.6]], np.float32))), 4)
      0.04
    """
    _, p_cf, _, q = _inputs.prepare(p_cf=p_cf, weights=weights)
    x = p_cf.T
    return s_var_kn(x, q, q @ x)


def flip_rate(p_obs: Any, p_cf: Any, weights: Any = None, tau: Any = 0.5) -> jax.Array:
    """``S_flip = mean_i Σ_k q_k 1[d(p_cf[i, k]) ≠ d(p_obs[i])]``: how often an intervention
    flips the decision."""
    _checks.check_threshold("tau", tau)
    p_obs, p_cf, _, q = _inputs.prepare(p_obs=p_obs, p_cf=p_cf, weights=weights)
    return s_flip_kn(p_obs, p_cf.T, q, tau)


def decision_disagreement(p_obs: Any, p_cf: Any, weights: Any = None, tau: Any = 0.5) -> jax.Array:
    """``D_obs = mean_i 1[d(p_obs[i]) ≠ d(p_bar[i])]``: disagreement between the original and
    the marginalised decision."""
    _checks.check_threshold("tau", tau)
    p_obs, p_cf, _, q = _inputs.prepare(p_obs=p_obs, p_cf=p_cf, weights=weights)
    return d_obs(p_obs, p_cf @ q, tau)


def score_shift(p_obs: Any, p_cf: Any, weights: Any = None) -> jax.Array:
    """``mean_i |p_obs[i] − p_bar[i]|`` (the quantity paper 000's Table 5 caption calls D_obs)."""
    p_obs, p_cf, _, q = _inputs.prepare(p_obs=p_obs, p_cf=p_cf, weights=weights)
    return mean_abs_shift(p_obs, p_cf @ q)


# Kernels on the intervention-major layout x = p_cf.T of shape (K, n).


def s_var_kn(x: jax.Array, q: jax.Array, p_bar: jax.Array) -> jax.Array:
    return jnp.mean(q @ jnp.square(x - p_bar[None, :]))


def s_flip_kn(p_obs: jax.Array, x: jax.Array, q: jax.Array, tau: Any) -> jax.Array:
    flips = (x >= tau) != (p_obs >= tau)[None, :]
    return jnp.mean(q @ flips.astype(x.dtype))


def d_obs(p_obs: jax.Array, p_bar: jax.Array, tau: Any) -> jax.Array:
    return jnp.mean(((p_obs >= tau) != (p_bar >= tau)).astype(p_obs.dtype))


def mean_abs_shift(p_obs: jax.Array, p_bar: jax.Array) -> jax.Array:
    return jnp.mean(jnp.abs(p_obs - p_bar))
