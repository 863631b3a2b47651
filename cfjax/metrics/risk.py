"""Counterfactual risks (paper 000, definitions §1): R_orig, R_CM, R_IE, CVaR_alpha, R_WC.

Shapes: ``p_obs (n,)``, ``p_cf (n, K)`` with ``p_cf[i, k] = g(x̃_i(ã_k))``, ``y (n,)`` in
{0, 1}, intervention weights ``weights (K,)`` (non-negative, summing to 1; uniform when None).
Each risk is a reduction over the intervention axis K for every unit (on the ``(n, K)``
layout the scores come in: a unit's K values are contiguous), then a mean over units.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax.metrics import _inputs
from cfjax.typing import ArrayLike

__all__ = [
    "marginalise",
    "bce",
    "cvar",
    "marginal_risk",
    "interventional_risk",
    "cvar_risk",
    "worst_case_risk",
]

EPS = 1e-7


# ----------------------------------------------------------------------------- public API


def marginalise(p_cf: ArrayLike, weights: ArrayLike | None = None) -> jax.Array:
    """Marginalised prediction ``p_bar[i] = Σ_k q_k p_cf[i, k]``.

    Args:
      p_cf: counterfactual probabilities, shape ``(n, K)``.
      weights: intervention weights ``q``, shape ``(K,)``; uniform when None.

    Returns:
      ``p_bar``, shape ``(n,)``.

    Example:
      >>> import numpy as np
      >>> p = marginalise(np.array([[0.2, 0.4], [1.0, 0.0]], np.float32))
      >>> [round(v, 4) for v in p.tolist()]
      [0.3, 0.5]
    """
    _, p_cf, _, q = _inputs.prepare(p_cf=p_cf, weights=weights)
    return p_cf @ q


def bce(p: ArrayLike, y: ArrayLike) -> jax.Array:
    """Elementwise binary cross-entropy ``−y log p − (1−y) log(1−p)``, p clipped to
    ``[1e-7, 1 − 1e-7]`` (definitions §1). Soft labels in [0, 1] are allowed here.

    Example:
      >>> round(float(bce(0.5, 1.0)), 4)  # log 2
      0.6931
    """
    p = jnp.asarray(p)
    dtype = p.dtype if jnp.issubdtype(p.dtype, jnp.floating) else jnp.result_type(float)
    p = jnp.clip(p.astype(dtype), EPS, 1 - EPS)
    y = jnp.asarray(y).astype(dtype)
    return -(y * jnp.log(p) + (1 - y) * jnp.log1p(-p))


def cvar(losses: ArrayLike, weights: ArrayLike, alpha: ArrayLike) -> jax.Array:
    """Exact CVaR of one unit's discrete loss distribution (atoms ``losses (K,)``, masses
    ``weights (K,)``) at level ``alpha ∈ (0, 1]``: the weighted mean of the worst ``alpha``
    probability mass, splitting one atom fractionally.

    Computed as the Rockafellar–Uryasev minimum ``min_t t + Σ_k q_k (L_k − t)_+ / alpha``,
    which is attained at an atom, so ``t`` ranges over the K atoms. Written for one unit;
    ``jax.vmap`` it over units.

    Example:
      >>> import numpy as np
      >>> L = np.array([1.0, 2.0, 4.0], np.float32); q = np.array([0.5, 0.25, 0.25], np.float32)
      >>> float(cvar(L, q, 0.5))  # worst half of the mass: 4 (0.25) and 2 (0.25)
      3.0
    """
    losses = jnp.asarray(losses)
    q = jnp.asarray(weights, losses.dtype)
    excess = jnp.sum(q[None, :] * jnp.maximum(losses[None, :] - losses[:, None], 0), axis=1)
    return jnp.min(losses + excess / alpha)


def marginal_risk(p_cf: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None) -> jax.Array:
    """``R_CM = mean_i bce(p_bar[i], y[i])``: the risk of the marginalised predictor.

    Example:
      >>> import numpy as np
      >>> p = np.array([[0.9, 0.1]], np.float32)
      >>> round(float(marginal_risk(p, np.array([1.0], np.float32))), 4)  # -log 0.5
      0.6931
    """
    _, p_cf, y, q = _inputs.prepare(p_cf=p_cf, y=require_labels(y), weights=weights)
    return jnp.mean(binary_bce(p_cf @ q, y))


def interventional_risk(
    p_cf: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None
) -> jax.Array:
    """``R_IE = mean_i Σ_k q_k bce(p_cf[i, k], y[i])``: expected loss over interventions.

    By Jensen ``R_CM ≤ R_IE``.
    """
    _, p_cf, y, q = _inputs.prepare(p_cf=p_cf, y=require_labels(y), weights=weights)
    return jnp.mean(jnp.sum(q[None, :] * bce_losses(p_cf, y), axis=1))


def cvar_risk(
    p_cf: ArrayLike, y: ArrayLike, alpha: ArrayLike, weights: ArrayLike | None = None
) -> jax.Array:
    """``mean_i CVaR_alpha(L_i)``, ``L_i[k] = bce(p_cf[i, k], y[i])`` with atoms weighted by q.

    Args:
      p_cf: ``(n, K)`` counterfactual probabilities.
      y: ``(n,)`` labels in {0, 1}.
      alpha: a level in (0, 1], or a sequence of levels (the result is then aligned with it).
      weights: ``(K,)`` intervention weights; uniform when None.

    Returns:
      A scalar, or an array of shape ``(len(alpha),)``. ``CVaR_1 = R_IE``; CVaR is
      non-increasing in alpha and bounded by ``R_WC``.
    """
    _, p_cf, y, q = _inputs.prepare(p_cf=p_cf, y=require_labels(y), weights=weights)
    scalar = np.ndim(alpha) == 0
    levels = _checks.check_alphas("alpha", alpha)
    out = jnp.mean(cvar_units(bce_losses(p_cf, y), q, levels, uniform=weights is None), axis=0)
    return out[0] if scalar else out


def worst_case_risk(p_cf: ArrayLike, y: ArrayLike) -> jax.Array:
    """``R_WC = mean_i max_k bce(p_cf[i, k], y[i])`` (CVaR as alpha → 0)."""
    _, p_cf, y, _ = _inputs.prepare(p_cf=p_cf, y=require_labels(y))
    return jnp.mean(jnp.max(bce_losses(p_cf, y), axis=1))


# ----------------------------------------------------------------------------- kernels


def require_labels(y: ArrayLike | None) -> ArrayLike:
    if y is None:
        raise _checks.ValidationError("`y`: expected labels of shape (n,), got None.")
    return y


def binary_bce(p: jax.Array, y: jax.Array) -> jax.Array:
    """``bce`` for labels known to be 0 or 1: one logarithm instead of two."""
    return -jnp.log(jnp.clip(jnp.where(y == 1, p, 1 - p), EPS, 1 - EPS))


def bce_losses(p_cf: jax.Array, y: jax.Array) -> jax.Array:
    """``L[i, k] = bce(p_cf[i, k], y[i])`` of ``p_cf (n, K)`` and labels ``y (n,)``."""
    return binary_bce(p_cf, y[:, None])


def unit_cvar(losses: jax.Array, q: jax.Array, levels: tuple[float, ...]) -> jax.Array:
    """``CVaR_a`` of one unit's losses ``(K,)`` under the weights ``q (K,)``, for each level a:
    ``(len(levels),)``."""
    return cvar_units(losses[None], q, levels)[0]


def cvar_units(
    losses: jax.Array, q: jax.Array, levels: tuple[float, ...], *, uniform: bool = False
) -> jax.Array:
    """``CVaR_a`` of every unit's losses ``losses (n, K)`` under the weights ``q (K,)``, for
    each level a: ``(n, len(levels))``. Exact.

    Each unit's atoms, with their masses, are sorted worst first by a bitonic network along
    K whose compare-exchange steps run over rows of n units (the layout ``(K, n)``: each step
    is elementwise work on whole rows, which XLA:CPU vectorises, where a per-unit sort or a
    per-unit O(K²) comparison does not); the worst ``a`` of the mass is then read off the
    running sums: ``CVaR_a = Σ_i L_(i) clip(a − m_(i), 0, q_(i)) / a`` with ``m_(i)`` the mass
    before atom i. Ties need no order: equal losses contribute equally whatever their order.
    ``uniform`` (static: ``q`` is known to be ``1/K``) sorts the losses alone, the masses
    being known.
    """
    return cvar_units_kn(losses.T, q, levels, uniform=uniform).T


def cvar_units_kn(
    x: jax.Array, q: jax.Array, levels: tuple[float, ...], *, uniform: bool = False
) -> jax.Array:
    """:func:`cvar_units` of losses laid out ``(K, n)`` (units last): ``(len(levels), n)``."""
    k = x.shape[0]
    if uniform:
        (x,) = _sort_descending(x)
        w = jnp.full((k, 1), 1.0 / k, x.dtype)
        mass = (jnp.arange(k, dtype=x.dtype) / k)[:, None]
    else:
        x, w = _sort_descending(x, jnp.broadcast_to(q.astype(x.dtype)[:, None], x.shape))
        mass = jnp.cumsum(w, axis=0) - w
    return jnp.stack([jnp.sum(x * jnp.clip(a - mass, 0, w), axis=0) / a for a in levels])


def _sort_descending(x: jax.Array, *payload: jax.Array) -> tuple[jax.Array, ...]:
    """Sort ``x (K, n)`` along K, largest first, carrying the ``payload`` arrays ``(K, n)``
    along: a bitonic network. K is padded to a power of two with −inf atoms (payload 0),
    which sort last. Each stage compares every row with its partner row ``k ^ j``, read by a
    reshape and a flip rather than a gather, and keeps the larger or the smaller of the two
    (a row whose value ties its partner's keeps its own payload)."""
    k = x.shape[0]
    size = 1 << max(0, (k - 1).bit_length())
    if size > k:
        pad = (size - k,) + x.shape[1:]
        x = jnp.concatenate([x, jnp.full(pad, -jnp.inf, x.dtype)])
        payload = tuple(jnp.concatenate([w, jnp.zeros(pad, w.dtype)]) for w in payload)
    idx = np.arange(size)
    column = (size,) + (1,) * (x.ndim - 1)

    def partner_of(a, j):
        return jnp.flip(a.reshape((size // (2 * j), 2, j) + a.shape[1:]), axis=1).reshape(a.shape)

    block = 2
    while block <= size:
        j = block // 2
        while j >= 1:
            first = idx < (idx ^ j)
            larger = jnp.asarray(np.where(first, (idx & block) == 0, (idx & block) != 0)).reshape(
                column
            )
            partner = partner_of(x, j)
            if payload:
                keep = jnp.where(larger, x >= partner, x <= partner)
                payload = tuple(jnp.where(keep, w, partner_of(w, j)) for w in payload)
            x = jnp.where(larger, jnp.maximum(x, partner), jnp.minimum(x, partner))
            j //= 2
        block *= 2
    return (x[:k], *(w[:k] for w in payload))
