"""Geometry of the usable set of correlations within a budget: ``|P_jk| ≤ p_max`` off the
diagonal and smallest eigenvalue ``λ_min(P) ≥ min_eig``.

Worst cases sit on its boundary — a budget's edge, the eigenvalue margin, often a corner where
they meet — so the search needs: the nearest usable P (:func:`_project_usable`), where a ray
from I leaves the set (:func:`_on_boundary`), the ends of the usable stretch of a line
(:func:`_last_usable`, :func:`_margin_vertices`), rays along the budget's edge faces
(:func:`_face_ray`, :func:`_faces`), the sign corners and margin lines screened as starts
(:func:`_corner_signs`, :func:`_margin_lines`, :func:`sign_corners`), and a step that follows a
gradient along the boundary (:func:`_along_boundary`, the polish's step). The polish's functions
are JAX, for one matrix (``vmap`` lifts them; shapes ``(m, m)``); the screened starts' geometry
is numpy on the host, batched over leading axes (it needs no model, so it runs before any
program).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from cfjax.sensitivity.correlation import _slack as _margin_slack
from cfjax.sensitivity.correlation import boundary_scale

__all__ = ["sign_corners"]


def _project_usable(
    P: jax.Array, p_max: jax.Array, min_eig: float, iterations: int = 60
) -> jax.Array:
    """The usable P nearest to a symmetric ``P`` (Frobenius): Dykstra's alternating projections
    between the budget's box (unit diagonal, off-diagonals clipped) and the eigenvalue margin
    (eigenvalues raised to ``min_eig``), then a last pull along the ray from I, so that the
    answer is usable whatever the iterations left."""
    eye = jnp.eye(P.shape[0], dtype=P.dtype)

    def box(X):
        return eye + jnp.clip((1 - eye) * X, -p_max, p_max)

    def cone(X):
        w, V = jnp.linalg.eigh(X)
        return (V * jnp.maximum(w, min_eig)[None, :]) @ V.T

    def body(_, state):
        x, a, b = state
        y = box(x + a)
        a = x + a - y
        x = cone(y + b)
        b = y + b - x
        return x, a, b

    zero = jnp.zeros_like(P)
    x, _, _ = jax.lax.fori_loop(0, iterations, body, (P, zero, zero))
    Z = box(x) - eye
    return eye + jnp.clip(jnp.minimum(1.0, boundary_scale(Z, p_max, min_eig)) * Z, -p_max, p_max)


# The screened starts' geometry runs on the host, in numpy, batched over leading axes: the
# candidates depend only on the budgets and the search's settings, not on the model, so they are
# found before any program runs and passed to it as data (a compiled copy cost more to compile
# than numpy takes to run it). Computed in float64; ``slack`` is the margin's for the dtype the
# program will use (:func:`~cfjax.sensitivity.correlation.boundary_scale`'s aim).


def _scale(D: np.ndarray, p_max: np.ndarray, min_eig: float, slack: float) -> np.ndarray:
    """:func:`~cfjax.sensitivity.correlation.boundary_scale` for a batch ``D (..., m, m)``:
    ``min(p_max / max|D_jk|, (1 − min_eig − slack) / (−λ_min(D)))``, +inf where neither binds."""
    off = np.max(np.abs(D), axis=(-2, -1))
    neg = -np.linalg.eigvalsh(D)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.minimum(
            np.where(off > 0, p_max / np.where(off > 0, off, 1), np.inf),
            np.where(neg > 0, (1.0 - min_eig - slack) / np.where(neg > 0, neg, 1), np.inf),
        )


def _on_boundary(D: np.ndarray, p_max: np.ndarray, min_eig: float, slack: float) -> np.ndarray:
    """Where the ray from I along each direction ``D (..., m, m)`` leaves the usable set:
    ``I + s D``, ``s`` from :func:`_scale` (off-diagonals clipped to the budget against
    rounding); ``p_max (...)``."""
    s = _scale(D, p_max, min_eig, slack)
    s = np.where(np.isfinite(s), s, 0)[..., None, None]
    p = np.asarray(p_max)[..., None, None]
    return np.eye(D.shape[-1]) + np.clip(s * D, -p, p)


def _smallest_eigenvalue(P: np.ndarray) -> np.ndarray:
    return np.linalg.eigvalsh(P)[..., 0]


def _last_usable(P0: np.ndarray, D: np.ndarray, hi: np.ndarray, target: float) -> np.ndarray:
    """The largest ``t ∈ [0, hi]`` with ``λ_min(P0 + t D) ≥ target``, given that ``t = 0``
    qualifies, for a batch (``P0, D (..., m, m)``, ``hi (...)``): ``λ_min`` is concave in t, so
    the qualifying t form an interval, whose end is found by bisection (kept on the qualifying
    side)."""

    def lam(t):
        return _smallest_eigenvalue(P0 + t[..., None, None] * D)

    inside, out = np.zeros_like(hi), np.array(hi, dtype=float)
    for _ in range(60):
        mid = 0.5 * (inside + out)
        ok = lam(mid) >= target
        inside, out = np.where(ok, mid, inside), np.where(ok, out, mid)
    return np.where(lam(hi) >= target, hi, inside)


def _margin_vertices(
    S0: np.ndarray, E: np.ndarray, p_max: np.ndarray, min_eig: float, slack: float
):
    """The two ends of the usable stretch of each line ``I + p_max S0 + x E``, ``|x| ≤ p_max``
    (S0: signs on every pair but one, E: that pair; batched over leading axes): ``(lower end,
    upper end, usable)``.

    ``λ_min`` is concave in x, so the usable x form an interval: its peak by golden-section
    search, then each end by :func:`_last_usable`. Where an end is inside the box it lies on the
    eigenvalue margin — a corner where the budget's edges meet the margin, the way sign corners
    are corners of the box.
    """
    target = min_eig + slack
    p = np.asarray(p_max, float)
    P0 = np.eye(S0.shape[-1]) + p[..., None, None] * S0
    a, b = -p, p.copy()
    for _ in range(60):
        c, d = b - 0.618 * (b - a), a + 0.618 * (b - a)
        up = _smallest_eigenvalue(P0 + c[..., None, None] * E) < _smallest_eigenvalue(
            P0 + d[..., None, None] * E
        )
        a, b = np.where(up, c, a), np.where(up, b, d)
    x = 0.5 * (a + b)
    peak = P0 + x[..., None, None] * E
    usable = _smallest_eigenvalue(peak) >= target
    lower = peak - _last_usable(peak, -E, p + x, target)[..., None, None] * E
    upper = peak + _last_usable(peak, E, p - x, target)[..., None, None] * E
    return lower, upper, usable


def _face_ray(
    D: np.ndarray, E: np.ndarray, sign: np.ndarray, p_max: np.ndarray, min_eig: float, slack: float
):
    """Along the budget's edge ``P_f = sign · p_max`` (E: pair f's indicator; batched): from the
    face's centre ``I + sign p_max E`` along D (its entry on f dropped) to where the ray leaves
    the usable set (the box, or the margin by :func:`_last_usable`): ``(P, usable)``. Worst
    cases often lie on such a face where it meets the margin."""
    eye = np.eye(D.shape[-1])
    target = min_eig + slack
    p = np.asarray(p_max, float)
    C = eye + (sign * p)[..., None, None] * E
    D = np.where(E > 0, 0, D)
    size = np.max(np.abs(D), axis=(-2, -1))
    hi = np.where(size > 0, p / np.where(size > 0, size, 1), 0)
    P = C + _last_usable(C, D, hi, target)[..., None, None] * D
    return np.clip(P - eye, -p[..., None, None], p[..., None, None]) + eye, _smallest_eigenvalue(
        C
    ) >= target


def _faces(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Every edge face of the budget's box: its pair's indicator ``(2k, m, m)`` and sign ``(2k,)``."""
    Es, signs = [], []
    for i in range(m):
        for j in range(i + 1, m):
            for sign in (1.0, -1.0):
                E = np.zeros((m, m))
                E[i, j] = E[j, i] = 1.0
                Es.append(E)
                signs.append(sign)
    return np.asarray(Es).reshape(-1, m, m), np.asarray(signs)


def _along_boundary(P: jax.Array, g: jax.Array, p_max: jax.Array, min_eig: float, reach: jax.Array):
    """A step of length ``reach`` from a usable ``P`` that follows the gradient ``g`` along the
    boundary of the usable set (what is left to correct is second order in ``reach``).

    In the off-diagonals x: the constraints within reach — ``|x_jk| ≤ p_max`` (outward normal
    ``sign(x_jk)``) and the margin ``λ_min ≥ min_eig`` (outward normal ``−∂λ_min/∂x = −2 u_j
    u_k``, u the smallest eigenvector) — form a cone of directions that stay usable, and g is
    projected onto it (``g − Aᵀμ``, μ ≥ 0 by coordinate descent: a small non-negative least
    squares). Entries whose edge stays binding are set on it; the rest move by ``reach`` times
    the projected gradient scaled to a largest entry of 1.
    """
    m = P.shape[0]
    iu = np.triu_indices(m, 1)
    x, gx = P[iu], (g + g.T)[iu]
    w, V = jnp.linalg.eigh(P)
    normal = 2 * (V[:, 0][:, None] * V[:, 0][None, :])[iu]  # ∂λ_min/∂x
    near_edge = jnp.abs(x) >= p_max - reach
    on_margin = w[0] <= min_eig + max(1e-6, 4 * _margin_slack(P.dtype, m))
    A = jnp.concatenate([jnp.diag(jnp.sign(x)), -normal[None]])  # outward normals, (k + 1, k)
    active = jnp.concatenate([near_edge, on_margin[None]]) & (jnp.sum(A * A, axis=1) > 0)
    norms = jnp.where(active, jnp.sum(A * A, axis=1), 1)

    def sweep(_, mu):
        for i in range(A.shape[0]):  # one coordinate at a time: μ_i = max(0, μ_i + a_i·r / |a_i|²)
            r = gx - A.T @ mu
            mu = mu.at[i].set(jnp.where(active[i], jnp.maximum(0, mu[i] + A[i] @ r / norms[i]), 0))
        return mu

    mu = jax.lax.fori_loop(0, 20, sweep, jnp.zeros(A.shape[0], P.dtype))
    d = gx - A.T @ mu
    size = jnp.max(jnp.abs(d))
    d = jnp.where(size > 0, d / jnp.where(size > 0, size, 1), 0)
    held = near_edge & (mu[:-1] > 0)
    x = jnp.where(held, jnp.sign(x) * p_max, x) + reach * d
    T = jnp.zeros_like(P).at[iu].set(x)
    return jnp.eye(m, dtype=P.dtype) + T + T.T


def _corner_signs(m: int) -> tuple:
    """Every sign pattern of the off-diagonals as symmetric ±1 matrices with zero diagonal."""
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    out = []
    for bits in np.ndindex(*(2,) * len(pairs)):
        S = np.zeros((m, m))
        for (i, j), b in zip(pairs, bits):
            S[i, j] = S[j, i] = 1 - 2 * b
        out.append(tuple(map(tuple, S.tolist())))
    return tuple(out)


def _margin_lines(m: int) -> tuple:
    """Every line with all off-diagonals but one at a sign corner: ``((S0, E), ...)``, S0 the
    signs (zero on the free pair and the diagonal), E the free pair's indicator."""
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    out = []
    for free in pairs:
        E = np.zeros((m, m))
        E[free] = E[free[::-1]] = 1.0
        others = [q for q in pairs if q != free]
        for bits in np.ndindex(*(2,) * len(others)):
            S = np.zeros((m, m))
            for (i, j), b in zip(others, bits):
                S[i, j] = S[j, i] = 1 - 2 * b
            out.append((tuple(map(tuple, S.tolist())), tuple(map(tuple, E.tolist()))))
    return tuple(out)


def sign_corners(m: int, p_max: float, min_eig: float = 1e-3) -> np.ndarray:
    """Every correlation matrix with all off-diagonals ``±p_max`` that is positive definite
    with smallest eigenvalue ≥ ``min_eig``: ``(k, m, m)`` (a brute-force check of the
    multivariate optimiser)."""
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    out = []
    for signs in np.ndindex(*(2,) * len(pairs)):
        P = np.eye(m)
        for (i, j), s in zip(pairs, signs):
            P[i, j] = P[j, i] = p_max * (1 - 2 * s)
        if np.linalg.eigvalsh(P)[0] >= min_eig:
            out.append(P)
    return np.asarray(out).reshape(-1, m, m)
