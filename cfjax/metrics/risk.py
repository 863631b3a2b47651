"""Counterfactual risks (paper 000, definitions §1): R_orig, R_CM, R_IE, CVaR_alpha, R_WC.

Shapes: ``p_obs (n,)``, ``p_cf (n, K)`` with ``p_cf[i, k] = g(x̃_i(ã_k))``, ``y (n,)`` in
{0, 1}, intervention weights ``weights (K,)`` (non-negative, summing to 1; uniform when None).
Each risk is a reduction over the intervention axis K for every unit, then a mean over units.

Internally the kernels work on the intervention-major layout ``(K, n)``: every step is then
an operation over contiguous rows of n units, which XLA vectorises well, whereas reductions
over a short minor K axis compile to slow code on CPU.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from cfjax import _checks
from cfjax.metrics import _inputs

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


def marginalise(p_cf: Any, weights: Any = None) -> jax.Array:
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


def bce(p: Any, y: Any) -> jax.Array:
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


def cvar(losses: Any, weights: Any, alpha: Any) -> jax.Array:
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


def marginal_risk(p_cf: Any, y: Any, weights: Any = None) -> jax.Array:
    """``R_CM = mean_i bce(p_bar[i], y[i])``: the risk of the marginalised predictor.

    Example:
      >>> import numpy as np
      >>> p = np.array([[0.9, 0.1]], np.float32)
      >>> round(float(marginal_risk(p, np.array([1.0], np.float32))), 4)  # -log 0.5
      0.6931
    """
    _, p_cf, y, q = _inputs.prepare(p_cf=p_cf, y=require_labels(y), weights=weights)
    return jnp.mean(binary_bce(p_cf @ q, y))


def interventional_risk(p_cf: Any, y: Any, weights: Any = None) -> jax.Array:
    """``R_IE = mean_i Σ_k q_k bce(p_cf[i, k], y[i])``: expected loss over interventions.

    By Jensen ``R_CM ≤ R_IE``.
    """
    _, p_cf, y, q = _inputs.prepare(p_cf=p_cf, y=require_labels(y), weights=weights)
    return jnp.mean(q @ losses_kn(p_cf.T, y))


def cvar_risk(p_cf: Any, y: Any, alpha: Any, weights: Any = None) -> jax.Array:
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
    out = cvar_risks_kn(losses_kn(p_cf.T, y), q, levels, uniform=weights is None)
    return out[0] if scalar else out


def worst_case_risk(p_cf: Any, y: Any) -> jax.Array:
    """``R_WC = mean_i max_k bce(p_cf[i, k], y[i])`` (CVaR as alpha → 0)."""
    _, p_cf, y, _ = _inputs.prepare(p_cf=p_cf, y=require_labels(y))
    return jnp.mean(jnp.max(losses_kn(p_cf.T, y), axis=0))


# ----------------------------------------------------------------------------- kernels


def require_labels(y: Any) -> Any:
    if y is None:
        raise _checks.ValidationError("`y`: expected labels of shape (n,), got None.")
    return y


def binary_bce(p: jax.Array, y: jax.Array) -> jax.Array:
    """``bce`` for labels known to be 0 or 1: one logarithm instead of two."""
    return -jnp.log(jnp.clip(jnp.where(y == 1, p, 1 - p), EPS, 1 - EPS))


def losses_kn(x: jax.Array, y: jax.Array) -> jax.Array:
    """``L[k, i] = bce(p_cf[i, k], y[i])`` from ``x = p_cf.T`` of shape ``(K, n)``.

    Materialised once (the barrier keeps XLA from recomputing the logarithms inside every
    consumer fusion).
    """
    return lax.optimization_barrier(binary_bce(x, y[None, :]))


def cvar_units_kn(
    losses: jax.Array, q: jax.Array, levels: tuple[float, ...], *, uniform: bool
) -> jax.Array:
    """``CVaR_a(L[:, i])`` of every unit i for each level a, ``(len(levels), n)``, from
    losses of shape ``(K, n)``.

    With ``uniform`` weights (known statically) each unit's atoms are sorted by a bitonic
    network along K (O(K log² K) elementwise steps over rows of n units), and the worst
    ``a`` mass is read off the sorted atoms. With general weights the Rockafellar–Uryasev
    excess ``e_t = Σ_j q_j (L_j − L_t)_+`` is accumulated by a scan over j (O(K²) work).
    Both are exact.
    """
    k = losses.shape[0]
    if uniform:
        worst_first = _sort_descending(losses)
        before = jnp.arange(k, dtype=losses.dtype)[:, None] / k  # mass above each atom
        mass = jnp.asarray(1.0 / k, losses.dtype)
        per_level = [
            jnp.sum(worst_first * jnp.clip(a - before, 0, mass), axis=0) / a for a in levels
        ]
    else:
        def accumulate(excess, atom):
            loss_j, q_j = atom
            return excess + q_j * jnp.maximum(loss_j[None, :] - losses, 0), None

        excess, _ = lax.scan(accumulate, jnp.zeros_like(losses), (losses, q))
        per_level = [jnp.min(losses + excess / a, axis=0) for a in levels]
    return jnp.stack(per_level)


def cvar_risks_kn(
    losses: jax.Array, q: jax.Array, levels: tuple[float, ...], *, uniform: bool
) -> jax.Array:
    """``mean_i CVaR_a(L[:, i])`` for each level a (:func:`cvar_units_kn` averaged over units)."""
    return jnp.mean(cvar_units_kn(losses, q, levels, uniform=uniform), axis=1)


def _sort_descending(x: jax.Array) -> jax.Array:
    """Sort ``x (K, n)`` along K, largest first, with a bitonic network.

    K is padded to a power of two with −inf (which sorts last). Each stage compares every
    row with its partner row ``k ^ j``, obtained by a reshape-and-flip rather than a gather.
    """
    k = x.shape[0]
    size = 1 << max(0, (k - 1).bit_length())
    if size > k:
        x = jnp.concatenate([x, jnp.full((size - k,) + x.shape[1:], -jnp.inf, x.dtype)])
    idx = np.arange(size)
    block = 2
    while block <= size:
        j = block // 2
        while j >= 1:
            ascending_pair = (idx & block) == 0
            first = idx < (idx ^ j)
            take_larger = np.where(first, ascending_pair, ~ascending_pair)
            partner = jnp.flip(x.reshape((size // (2 * j), 2, j) + x.shape[1:]), axis=1)
            partner = partner.reshape(x.shape)
            mask = jnp.asarray(take_larger).reshape((size,) + (1,) * (x.ndim - 1))
            x = jnp.where(mask, jnp.maximum(x, partner), jnp.minimum(x, partner))
            j //= 2
        block *= 2
    return x[:k]
