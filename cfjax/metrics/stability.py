"""Label-free stability of a predictor under counterfactual marginalisation (paper 000,
Table 5; definitions §1), for binary scores or class probabilities.

Binary scores: ``p_obs (n,)``, ``p_cf (n, K)`` (the positive class's probability), threshold
``tau`` with decisions ``d(p) = 1[p >= tau]``. Class probabilities: ``p_obs (n, C)``,
``p_cf (n, K, C)``, each row on the simplex, decisions ``d(p) = argmax_c p_c`` (the first
maximal class on ties, as ``jnp.argmax``). Weights ``q (K,)``; ``p_bar = Σ_k q_k p_cf[:, k]``.

One core for both: a binary score ``p`` is the class vector ``(1 − p, p)``, and each metric is
defined so that this gives exactly the binary value:

* ``S_var = mean_i Σ_k q_k ½‖p_cf[i, k] − p_bar[i]‖²``: the ½ makes the two equal squared
  deviations of ``(1 − p, p)`` count once;
* ``S_flip`` and ``D_obs`` compare argmax decisions; for C = 2 they equal the binary ones at
  ``tau = 0.5`` except at exact ties ``p = 0.5``, where ``1[p >= 0.5] = 1`` but the argmax of
  ``(0.5, 0.5)`` is class 0;
* ``score_shift = mean_i TV(p_obs[i], p_bar[i])`` with the total variation
  ``TV(a, b) = ½‖a − b‖₁``, which for C = 2 is ``|a_1 − b_1|``.

The per-unit kernels :func:`class_decisions`, :func:`decisions_agree` and
:func:`total_variation` are the ones ``cfjax.representations`` scores counterfactual
representations with (PIP is the mean of ``decisions_agree``, ATV and ATE means of
``total_variation``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cfjax.metrics import _inputs
from cfjax.typing import ArrayLike

__all__ = ["stability_variance", "flip_rate", "decision_disagreement", "score_shift"]


def stability_variance(p_cf: ArrayLike, weights: ArrayLike | None = None) -> jax.Array:
    """``S_var = mean_i Σ_k q_k (p_cf[i, k] − p_bar[i])²``; for class probabilities
    ``mean_i Σ_k q_k ½‖p_cf[i, k] − p_bar[i]‖²`` (module docstring).

    Args:
      p_cf: ``(n, K)`` scores or ``(n, K, C)`` class probabilities on the counterfactuals.
      weights: ``(K,)`` intervention weights; uniform when None.

    Example:
      >>> import numpy as np
      >>> round(float(stability_variance(np.array([[0.2, 0.6]], np.float32))), 4)
      0.04
      >>> round(float(stability_variance(np.array([[[0.8, 0.2], [0.4, 0.6]]], np.float32))), 4)
      0.04
    """
    _, p_cf, q, multiclass = _inputs.prepare_stability(p_cf=p_cf, weights=weights)
    if multiclass:
        return s_var_classes(p_cf, q, p_bar_classes(p_cf, q))
    return jnp.mean(jnp.sum(q[None, :] * jnp.square(p_cf - (p_cf @ q)[:, None]), axis=1))


def flip_rate(
    p_obs: ArrayLike, p_cf: ArrayLike, weights: ArrayLike | None = None, tau: ArrayLike = 0.5
) -> jax.Array:
    """``S_flip = mean_i Σ_k q_k 1[d(p_cf[i, k]) ≠ d(p_obs[i])]``: how often an intervention
    flips the decision.

    Args:
      p_obs: ``(n,)`` scores or ``(n, C)`` class probabilities on the observed units.
      p_cf: ``(n, K)`` scores or ``(n, K, C)`` class probabilities on the counterfactuals.
      weights: ``(K,)`` intervention weights; uniform when None.
      tau: decision threshold for binary scores (class probabilities use the argmax).

    Example:
      >>> import numpy as np
      >>> p_obs = np.array([[0.7, 0.2, 0.1]], np.float32)
      >>> p_cf = np.array([[[0.6, 0.3, 0.1], [0.2, 0.1, 0.7]]], np.float32)
      >>> float(flip_rate(p_obs, p_cf))
      0.5
    """
    p_obs, p_cf, q, multiclass = _inputs.prepare_stability(p_obs, p_cf, weights, tau)
    if multiclass:
        return s_flip_classes(p_obs, p_cf, q)
    flips = (p_cf >= tau) != (p_obs >= tau)[:, None]
    return jnp.mean(jnp.sum(q[None, :] * flips.astype(p_cf.dtype), axis=1))


def decision_disagreement(
    p_obs: ArrayLike, p_cf: ArrayLike, weights: ArrayLike | None = None, tau: ArrayLike = 0.5
) -> jax.Array:
    """``D_obs = mean_i 1[d(p_obs[i]) ≠ d(p_bar[i])]``: disagreement between the original and
    the marginalised decision. Shapes and arguments as in :func:`flip_rate`.

    Example:
      >>> import numpy as np
      >>> p_obs = np.array([[0.7, 0.2, 0.1]], np.float32)
      >>> p_cf = np.array([[[0.6, 0.3, 0.1], [0.2, 0.1, 0.7]]], np.float32)
      >>> float(decision_disagreement(p_obs, p_cf))  # p_bar = (0.4, 0.2, 0.4): class 0
      0.0
    """
    p_obs, p_cf, q, multiclass = _inputs.prepare_stability(p_obs, p_cf, weights, tau)
    if multiclass:
        return jnp.mean(~decisions_agree(p_obs, p_bar_classes(p_cf, q)), dtype=p_obs.dtype)
    return d_obs(p_obs, p_cf @ q, tau)


def score_shift(p_obs: ArrayLike, p_cf: ArrayLike, weights: ArrayLike | None = None) -> jax.Array:
    """``mean_i |p_obs[i] − p_bar[i]|`` (the quantity paper 000's Table 5 caption calls D_obs);
    for class probabilities the mean total variation ``mean_i ½‖p_obs[i] − p_bar[i]‖₁``.
    Shapes as in :func:`flip_rate`.

    Example:
      >>> import numpy as np
      >>> p_obs = np.array([[0.7, 0.2, 0.1]], np.float32)
      >>> p_cf = np.array([[[0.6, 0.3, 0.1], [0.2, 0.1, 0.7]]], np.float32)
      >>> round(float(score_shift(p_obs, p_cf)), 4)  # ½(|0.7 − 0.4| + 0 + |0.1 − 0.4|)
      0.3
    """
    p_obs, p_cf, q, multiclass = _inputs.prepare_stability(p_obs, p_cf, weights)
    if multiclass:
        return jnp.mean(total_variation(p_obs, p_bar_classes(p_cf, q)))
    return mean_abs_shift(p_obs, p_cf @ q)


# Binary kernels.


def d_obs(p_obs: jax.Array, p_bar: jax.Array, tau: ArrayLike) -> jax.Array:
    return jnp.mean(((p_obs >= tau) != (p_bar >= tau)).astype(p_obs.dtype))


def mean_abs_shift(p_obs: jax.Array, p_bar: jax.Array) -> jax.Array:
    return jnp.mean(jnp.abs(p_obs - p_bar))


# Class-probability kernels (class axis last), shared with cfjax.representations.


def class_decisions(p: jax.Array) -> jax.Array:
    """The decided class ``argmax_c p[..., c]`` (first maximal class on ties), int."""
    return jnp.argmax(p, axis=-1)


def decisions_agree(a: jax.Array, b: jax.Array) -> jax.Array:
    """Per unit, whether the argmax decisions of ``a (..., C)`` and ``b (..., C)`` agree."""
    return class_decisions(a) == class_decisions(b)


def total_variation(a: jax.Array, b: jax.Array) -> jax.Array:
    """Per unit, ``½‖a − b‖₁`` over the class axis: ``(..., C) → (...)``."""
    return 0.5 * jnp.sum(jnp.abs(a - b), axis=-1)


def p_bar_classes(p_cf: jax.Array, q: jax.Array) -> jax.Array:
    """Marginalised class probabilities ``Σ_k q_k p_cf[:, k]``: ``(n, K, C) → (n, C)``."""
    return jnp.einsum("nkc,k->nc", p_cf, q)


def s_var_classes(p_cf: jax.Array, q: jax.Array, p_bar: jax.Array) -> jax.Array:
    dev = p_cf - p_bar[:, None, :]
    return jnp.mean((0.5 * jnp.sum(jnp.square(dev), axis=-1)) @ q)


def s_flip_classes(p_obs: jax.Array, p_cf: jax.Array, q: jax.Array) -> jax.Array:
    flips = class_decisions(p_cf) != class_decisions(p_obs)[:, None]
    return jnp.mean(flips.astype(p_cf.dtype) @ q)
