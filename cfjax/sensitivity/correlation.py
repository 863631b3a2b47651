"""Error-correlation matrices within a confounding budget (paper 001, definitions §3).

A budget ``p_max ∈ [0, 1)`` bounds every off-diagonal ``|P_jk| ≤ p_max``; a usable P must also
be positive definite with smallest eigenvalue at least ``min_eig`` (as P nears singular the
worst-case counterfactual unfairness can grow without bound, so a worst case is only defined
with a margin). Three parameterisations map unconstrained ``L`` to P:

- :func:`tanh_correlation`, the paper's ``P = I + p_max (J − I) ⊙ tanh(L Lᵀ)``: every entry
  within the budget but not always positive definite (see :func:`star_correlation`);
- :func:`clique_correlation`: the same with ``L ∈ R^{m×c}`` masked to known cliques, so the
  pairs that share no clique have correlation exactly zero;
- :func:`pd_correlation`: R the correlation matrix of ``L Lᵀ``, pulled toward I along the ray
  from I only as far as the budget and the eigenvalue margin require: usable by construction,
  and onto the whole usable set (every usable P is reached, the margin and the budget's edges
  included).

:func:`boundary_scale` is the closed form behind it: how far from I along a direction a P stays
usable (the usable set is convex and contains I, so every ray from I leaves it exactly once).

:func:`check_correlation` is the gate that every P passes before it is used: a P outside the
budget or below the eigenvalue margin raises ValidationError; :func:`correlation_margin` is its
traceable twin (the smallest eigenvalue minus ``min_eig``, negative when P is unusable), which an
optimiser uses to reject or penalise a step instead of silently using a non-PD P.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks

__all__ = [
    "tanh_correlation",
    "clique_correlation",
    "pd_correlation",
    "star_correlation",
    "boundary_scale",
    "check_budget",
    "check_correlation",
    "correlation_margin",
]


def check_budget(p_max: Any) -> float:
    """``p_max`` as a float in [0, 1), or ValidationError."""
    try:
        value = float(p_max)
    except (TypeError, ValueError):
        _checks.fail("p_max", "a number in [0, 1)", repr(p_max))
    if not 0.0 <= value < 1.0:  # also rejects NaN
        _checks.fail("p_max", "a number in [0, 1)", repr(p_max))
    return value


def tanh_correlation(L: jax.Array, p_max: Any) -> jax.Array:
    """Paper 001's ``P = I + p_max (J − I) ⊙ tanh(L Lᵀ)`` for ``L`` of shape ``(m, c)``.

    Unit diagonal and ``|P_jk| < p_max``, differentiable in L, but not always positive
    definite: pass P through :func:`check_correlation` or :func:`correlation_margin`.

    Example:
      >>> P = tanh_correlation(jnp.array([[1.0], [1.0]]), 0.5)
      >>> [round(v, 4) for v in P.reshape(-1).tolist()]
      [1.0, 0.3808, 0.3808, 1.0]
    """
    L = jnp.asarray(L)
    m = L.shape[0]
    off = 1.0 - jnp.eye(m, dtype=L.dtype)
    return jnp.eye(m, dtype=L.dtype) + p_max * off * jnp.tanh(L @ L.T)


def clique_correlation(L: jax.Array, cliques: Any, p_max: Any) -> jax.Array:
    """The clique parameterisation: ``L ∈ R^{m×c}`` with ``L_jk`` used only when node j is in
    clique k (``cliques``: a boolean ``(m, c)`` membership matrix), then
    :func:`tanh_correlation`. Pairs of nodes sharing no clique get exactly zero correlation.
    """
    mask = jnp.asarray(cliques, bool)
    L = jnp.asarray(L)
    if mask.shape != L.shape:
        _checks.fail(
            "cliques", f"a boolean membership matrix of shape {L.shape}", f"shape {mask.shape}"
        )
    return tanh_correlation(jnp.where(mask, L, 0), p_max)


def _safe_div(num: jax.Array, den: jax.Array) -> jax.Array:
    """``num / den`` where ``den > 0``, +inf elsewhere (NaN-free gradients)."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1), jnp.inf)


def _slack(dtype, m: int) -> float:
    """How far inside the eigenvalue margin a P built to sit on it is aimed, so that rounding
    in its eigenvalues never puts it below (a few ulps per row)."""
    return 8.0 * m * float(jnp.finfo(dtype).eps)


def boundary_scale(D: jax.Array, p_max: Any, min_eig: float = 1e-3) -> jax.Array:
    """The largest ``s ≥ 0`` for which ``I + s D`` is usable: every ``|s D_jk| ≤ p_max`` and
    ``λ_min(I + s D) ≥ min_eig`` (aimed a few ulps inside the margin, so that the point passes
    :func:`correlation_margin` despite rounding).

    Closed form, for ``D (m, m)`` symmetric with zero diagonal: ``λ_min(I + s D) = 1 + s λ_min(D)``,
    so ``s = min(p_max / max|D_jk|, (1 − min_eig) / (−λ_min(D)))``; +inf for ``D = 0``.
    Differentiable almost everywhere (NaN-free).

    Example:
      >>> S = jnp.array([[0.0, 1, 1], [1, 0, -1], [1, -1, 0]])  # a frustrated sign pattern
      >>> round(float(boundary_scale(S, 0.6, 0.01)), 4)  # λ_min(S) = −2: the margin, not the box
      0.495
    """
    D = jnp.asarray(D)
    m = D.shape[0]
    p_max = jnp.asarray(p_max, D.dtype)
    off = jnp.max(jnp.abs(D))
    neg = -jnp.linalg.eigvalsh(D)[0]
    room = 1.0 - min_eig - _slack(D.dtype, m)
    return jnp.minimum(_safe_div(p_max, off), _safe_div(jnp.asarray(room, D.dtype), neg))


def pd_correlation(L: jax.Array, p_max: Any, min_eig: float = 1e-3) -> jax.Array:
    """Every usable correlation matrix from an unconstrained ``L (m, c)``.

    ``R`` is the correlation matrix of ``L Lᵀ`` (rows of L normalised; a zero row is
    uncorrelated with the others), then ``P = I + min(1, s) (R − I)`` with
    ``s = boundary_scale(R − I, p_max, min_eig)``: R itself when it is usable, otherwise R
    pulled toward I along the ray from I until it meets the budget's edge (``|P_jk| = p_max``)
    or the eigenvalue margin (``λ_min(P) = min_eig``). So every P is within the budget with
    smallest eigenvalue ≥ ``min_eig``, and every such P is reached (``L = cholesky(P)`` gives
    ``P``): the margin and the budget's edges included, where worst cases usually sit.
    Continuous and differentiable almost everywhere in L (beyond the boundary the ray's
    direction still moves P along it).

    Example:
      >>> P = pd_correlation(jnp.array([[1.0, 0.0], [1.0, 0.1]]), 0.5)
      >>> [round(v, 4) for v in P.reshape(-1).tolist()]
      [1.0, 0.5, 0.5, 1.0]
    """
    L = jnp.asarray(L)
    m = L.shape[0]
    eye = jnp.eye(m, dtype=L.dtype)
    G = L @ L.T
    inv = jax.lax.rsqrt(jnp.maximum(jnp.diag(G), jnp.finfo(L.dtype).tiny))
    D = (1 - eye) * (G * inv[:, None] * inv[None, :])  # R − I
    s = jnp.minimum(1.0, boundary_scale(D, p_max, min_eig))
    p = jnp.asarray(p_max, L.dtype)
    return eye + jnp.clip(s * D, -p, p)


def star_correlation(m: int, p: float) -> np.ndarray:
    """Paper 001's appendix A counterexample: node 0 correlated ``p`` with every other node,
    the others uncorrelated. Its eigenvalues are ``1 ± p √(m − 1)`` and 1, so it is not
    positive semi-definite once ``|p| > 1/√(m − 1)``, although every entry is within a budget
    ``p_max ≥ |p|``."""
    P = np.eye(m)
    P[0, 1:] = P[1:, 0] = p
    return P


def correlation_margin(P: jax.Array, min_eig: float = 1e-3) -> jax.Array:
    """``λ_min(P) − min_eig``: negative when P is not usable (traceable, differentiable)."""
    return jnp.linalg.eigvalsh(P)[0] - min_eig


def check_correlation(
    P: Any, p_max: Any | None = None, min_eig: float = 1e-3, name: str = "P"
) -> np.ndarray:
    """Validate a correlation matrix: square, symmetric, unit diagonal, off-diagonals within the
    budget (when ``p_max`` is given) and smallest eigenvalue ≥ ``min_eig``.

    Returns the eigenvalues (ascending). Raises ValidationError naming what failed.
    """
    P = np.asarray(P, np.float64)
    if P.ndim != 2 or P.shape[0] != P.shape[1]:
        _checks.fail(name, "a square matrix", f"shape {P.shape}")
    if not np.isfinite(P).all():
        _checks.fail(name, "finite entries", "NaN or infinite entries")
    if not np.allclose(P, P.T, atol=1e-10):
        _checks.fail(name, "a symmetric matrix", f"max asymmetry {np.abs(P - P.T).max():.3g}")
    if not np.allclose(np.diag(P), 1.0, atol=1e-10):
        _checks.fail(name, "a unit diagonal", f"diagonal {np.diag(P).tolist()}")
    if p_max is not None:
        budget = check_budget(p_max)
        off = np.abs(P - np.eye(P.shape[0])).max(initial=0.0)
        if off > budget + 1e-12:
            _checks.fail(
                name,
                f"off-diagonal entries within the budget p_max = {budget}",
                f"|P_jk| up to {off:.6g}",
            )
    eig = np.linalg.eigvalsh(P)
    if not eig[0] >= min_eig:
        _checks.fail(
            name,
            f"a positive definite matrix with smallest eigenvalue >= {min_eig}",
            f"eigenvalues {np.round(eig, 6).tolist()}",
        )
    return eig
