"""Additive-noise SCMs that are linear in their parameters (paper 001, definitions §3).

Every feature ``x_j = φ_j(pa_j)ᵀ w_j + ε_j`` with a polynomial embedding ``φ_j`` (intercept
included) of its parents. Stacking one unit's equations, ``x_i = Φ_i w + ε_i`` with ``Φ_i``
block-diagonal, so every quantity the fits need is a function of three Gram matrices computed
once: ``G = FᵀF`` (D × D, F the n × D matrix of all embeddings side by side), ``C = FᵀX``
(D × m) and ``XᵀX`` (m × m). For any error precision ``S = Σ⁻¹`` the GLS normal equations are
``(G ⊙ S[b, b] + λI) w = (C ⊙ S[b, :]) 1`` (``b[a]`` the equation of coefficient a), and the
residual cross-products are ``XᵀX − CᵀW − WᵀC + WᵀGW`` with W the coefficients laid out per
equation. Model A (diagonal Σ) and, later, Model B for any correlation P cost O(D³) per fit
after one O(n D²) pass over the data.
"""

from __future__ import annotations

import functools
import itertools
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cfjax import _checks
from cfjax._results import headline
from cfjax._results import strict_plain as plain
from cfjax.sensitivity.diagnostics import ConvergenceWarning
from cfjax.typing import ArrayLike

__all__ = [
    "polynomial_features",
    "Design",
    "design",
    "gls",
    "residual_products",
    "ModelA",
    "fit_model_a",
    "ModelB",
    "fit_model_b",
    "profile_objective",
]


def _exponents(p: int, degree: int) -> np.ndarray:
    """Monomial exponents of total degree 0..degree over p variables, scikit-learn's order."""
    rows = [np.zeros(p, int)]
    for d in range(1, degree + 1):
        for combo in itertools.combinations_with_replacement(range(p), d):
            e = np.zeros(p, int)
            for v in combo:
                e[v] += 1
            rows.append(e)
    return np.stack(rows)


def polynomial_features(z: jax.Array, degree: int) -> jax.Array:
    """One unit's polynomial embedding with intercept, ``z (p,) -> (F,)``, ordered as
    ``sklearn.preprocessing.PolynomialFeatures(degree)``. Lift over units with ``jax.vmap``.

    Example:
      >>> polynomial_features(jnp.array([2.0, 3.0]), 2).tolist()
      [1.0, 2.0, 3.0, 4.0, 6.0, 9.0]
    """
    degree = _checks.check_positive_int("degree", degree)
    z = jnp.asarray(z)
    # Monomials as products of integer powers (static exponents): exact for negative values,
    # unlike a float power. Each variable's powers are selected by a constant 0/1 matrix, so a
    # batch (under vmap) is a few small matmuls and products: few kernels forward and backward.
    exps = _exponents(z.shape[0], degree)  # (F, p)
    powers = [jnp.ones_like(z)]
    for _ in range(degree):
        powers.append(powers[-1] * z)
    table = jnp.stack(powers)  # (degree + 1, p)
    select = np.eye(degree + 1, dtype=np.float64)
    phi = jnp.ones((exps.shape[0],), z.dtype)
    for v in range(z.shape[0]):
        if exps[:, v].any():
            phi = phi * (table[:, v] @ jnp.asarray(select[exps[:, v]].T, z.dtype))
    return phi


@struct.dataclass
class Design:
    """The data of a linear-in-parameters SCM, reduced to its sufficient statistics.

    ``F (n, D)``: every equation's embedding side by side; ``X (n, m)``: the features;
    ``G``, ``C``, ``XX``: the Gram matrices ``FᵀF``, ``FᵀX``, ``XᵀX``; ``F_mean``, ``X_mean``:
    column means; ``sizes``: each equation's number of coefficients (static, hashable).
    ``weight``: None, or each row's weight ``(n,)`` — how many units it stands for (a
    bootstrap resample's counts over distinct rows): the Grams and means are then weighted
    sums, ``FᵀWF`` and so on, and every fit the same as on the rows repeated.
    """

    F: jax.Array
    X: jax.Array
    G: jax.Array
    C: jax.Array
    XX: jax.Array
    F_mean: jax.Array
    X_mean: jax.Array
    sizes: tuple[int, ...] = struct.field(pytree_node=False)
    range_basis: Any = None
    weight: Any = None

    if TYPE_CHECKING:  # flax.struct adds it

        def replace(self, **changes: Any) -> Design: ...

    def __repr__(self) -> str:
        n, m = np.shape(self.X)[-2:]
        return f"Design(n={n}, m={m}, D={sum(self.sizes)}, sizes={self.sizes})"

    @property
    def count(self) -> Any:
        """How many units the rows stand for: n, or the weights' sum."""
        return self.X.shape[0] if self.weight is None else jnp.sum(self.weight)

    @property
    def block(self) -> np.ndarray:
        """The equation of each coefficient, ``(D,)``."""
        return np.repeat(np.arange(len(self.sizes)), self.sizes)

    def blocks(self, w: jax.Array) -> list[jax.Array]:
        """``w (D,)`` split into one coefficient vector per equation."""
        return jnp.split(w, np.cumsum(self.sizes)[:-1])


def design(embeddings: Sequence[Any], X: Any, weight: Any = None) -> Design:
    """Build a :class:`Design` from one ``(n, F_j)`` embedding per equation and ``X (n, m)``;
    ``weight (n,)``: each row's weight (None: every row one unit)."""
    X = jnp.asarray(X)
    if X.ndim != 2 or X.shape[1] != len(embeddings):
        _checks.fail(
            "X", f"shape (n, {len(embeddings)}) with one column per embedding", f"shape {X.shape}"
        )
    blocks = [jnp.asarray(e, X.dtype) for e in embeddings]
    for j, e in enumerate(blocks):
        if e.ndim != 2 or e.shape[0] != X.shape[0]:
            _checks.fail(f"embeddings[{j}]", f"shape ({X.shape[0]}, F_{j})", f"shape {e.shape}")
    F = jnp.concatenate(blocks, axis=1)
    sizes = tuple(int(e.shape[1]) for e in blocks)
    if weight is None:
        G = F.T @ F
        return Design(
            F, X, G, F.T @ X, X.T @ X, F.mean(0), X.mean(0), sizes, _range_basis(G, sizes)
        )
    weight = jnp.asarray(weight, X.dtype)
    if weight.shape != (X.shape[0],):
        _checks.fail(
            "weight", f"shape ({X.shape[0]},): one weight per row", f"shape {weight.shape}"
        )
    Fw, total = F * weight[:, None], jnp.sum(weight)
    G = Fw.T @ F
    return Design(
        F,
        X,
        G,
        Fw.T @ X,
        (X * weight[:, None]).T @ X,
        jnp.sum(Fw, axis=0) / total,
        weight @ X / total,
        sizes,
        _range_basis(G, sizes),
        weight,
    )


def _range_basis(G: ArrayLike, sizes: tuple[int, ...]) -> jax.Array | None:
    """Orthonormal basis ``(D, r)`` of the span of every equation's embedding (block-diagonal),
    with the cut-off of ``pinv``; None for a traced G.

    For any positive-definite error precision S the null space of ``G ⊙ S[b, b]`` is the direct
    sum of the blocks' null spaces (the collinear directions of each embedding), whatever S is;
    so the unpenalised GLS is a non-singular solve in this basis, computed once per design.
    """
    if not _checks.is_concrete(G):
        return None
    G = np.asarray(G)
    D = G.shape[0]
    start, cols = 0, []
    for size in sizes:
        lam, V = np.linalg.eigh(G[start : start + size, start : start + size])
        keep = lam > 10 * size * np.finfo(G.dtype).eps * max(lam.max(), 0.0)
        block = np.zeros((D, int(keep.sum())), G.dtype)
        block[start : start + size] = V[:, keep]
        cols.append(block)
        start += size
    return jnp.asarray(np.concatenate(cols, axis=1))


def gls(d: Design, precision: jax.Array, lam: Any, *, positive_definite: bool = True) -> jax.Array:
    """``w = (Σ_i Φ_iᵀ S Φ_i + Λ)⁻¹ Σ_i Φ_iᵀ S x_i`` for the error precision ``S (m, m)``;
    shape ``(D,)``. Differentiable in S and λ.

    For a positive-definite S the normal equations are too (a Hadamard product of positive
    semi-definite matrices, plus the penalty) and are solved by Cholesky (:func:`spd_solve`).
    ``positive_definite=False`` solves by LU instead: Model A's refit, whose variances are 0 or
    negative to rounding where a fit interpolates a feature, so that only that equation comes
    out NaN (by LU, a ridge residual variance that is 0 to rounding stays 0 or negative).

    ``lam`` is one ridge penalty for every coefficient, or one per equation (``(m,)``). A
    concrete ``lam`` of exactly 0 (no penalty) solves with the pseudo-inverse, so that
    collinear embeddings (``A²`` = 1 when A = ±1) give the minimum-norm least-squares fit
    instead of a singular solve: a solve in the span of the embeddings (``Design.range_basis``,
    found once per design), which is the pseudo-inverse's answer without an eigendecomposition
    at every call (batched eigendecompositions inside the vmapped search stalled XLA:CPU).
    """
    b = d.block
    unpenalised = _checks.is_concrete(lam) and not np.any(np.asarray(lam))
    A = d.G * precision[b][:, b] + jnp.diag(_penalty(d, lam))
    rhs = jnp.sum(d.C * precision[b, :], axis=1)
    solve = spd_solve if positive_definite else jnp.linalg.solve
    if unpenalised:
        if d.range_basis is None:
            return jnp.linalg.pinv(A, hermitian=True) @ rhs
        Q = d.range_basis
        return Q @ solve(Q.T @ A @ Q, Q.T @ rhs)
    return solve(A, rhs)


def _penalty(d: Design, lam: Any) -> jax.Array:
    """Each coefficient's ridge penalty ``(D,)`` from one penalty or one per equation."""
    lam = jnp.asarray(lam, d.G.dtype)
    return lam[d.block] if lam.ndim == 1 else jnp.full(d.block.shape, lam)


def spd_solve(A: jax.Array, b: jax.Array) -> jax.Array:
    """``A⁻¹ b`` for a symmetric positive-definite ``A``: a Cholesky solve, differentiated
    implicitly (the derivative is another solve with the same factor)."""
    c = jnp.linalg.cholesky(jax.lax.stop_gradient(A))

    def solve(_, x):
        return jax.scipy.linalg.cho_solve((c, True), x)

    return jax.lax.custom_linear_solve(lambda x: A @ x, b, solve, symmetric=True)


def _layout(d: Design, w: jax.Array) -> jax.Array:
    """Coefficients as a ``(D, m)`` matrix, column j holding equation j's block."""
    onehot = jnp.asarray(d.block[:, None] == np.arange(d.X.shape[1])[None, :], w.dtype)
    return w[:, None] * onehot


def residual_products(d: Design, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(Σ_i e_i e_iᵀ, mean_i e_i)`` of the residuals ``e_i = x_i − Φ_i w``, from the Grams."""
    W = _layout(d, w)
    R = d.XX - d.C.T @ W - W.T @ d.C + W.T @ d.G @ W
    return R, d.X_mean - d.F_mean @ W


class ModelA(NamedTuple):
    """Paper 001's Model A: ridge ``w_ridge``, residual standard deviations ``sigma``, the GLS
    refit ``w`` (w† in definitions §3) and the estimated errors ``residuals (n, m)``."""

    w_ridge: jax.Array
    sigma: jax.Array
    w: jax.Array
    residuals: jax.Array

    def to_dict(self) -> dict[str, Any]:
        """``w_ridge``, ``sigma`` and ``w`` as lists of floats (the per-unit residuals left out)."""
        return {"w_ridge": plain(self.w_ridge), "sigma": plain(self.sigma), "w": plain(self.w)}

    def __repr__(self) -> str:
        return (
            f"ModelA(sigma={_numbers(self.sigma)}, w {tuple(np.shape(self.w))}, "
            f"residuals {tuple(np.shape(self.residuals))})"
        )


def fit_model_a(d: Design, lam: Any) -> ModelA:
    """Model A (P = I): ridge, ``Σ = diag(var(residuals))``, then one GLS refit (definitions §3)."""
    m = d.X.shape[1]
    identity = jnp.eye(m, dtype=d.G.dtype)
    # With S = I the normal equations are block-wise ridge. Both solves by LU: where a fit
    # interpolates a feature its variance is 0 or negative to rounding, and only its equation is NaN.
    w_ridge = gls(d, identity, lam, positive_definite=False)
    R, mean = residual_products(d, w_ridge)
    var = jnp.diag(R) / d.count - mean**2
    w = gls(d, jnp.diag(1.0 / var), lam, positive_definite=False)
    residuals = d.X - d.F @ _layout(d, w)
    return ModelA(w_ridge, jnp.sqrt(var), w, residuals)


class ModelB(NamedTuple):
    """Paper 001's Model B for a correlation P: GLS weights ``w`` (w* in definitions §3), error
    standard deviations ``sigma`` and the estimated errors ``residuals (n, m)`` (δ̂)."""

    w: jax.Array
    sigma: jax.Array
    residuals: jax.Array

    def to_dict(self) -> dict[str, Any]:
        """``w`` and ``sigma`` as lists of floats (the per-unit residuals left out)."""
        return {"w": plain(self.w), "sigma": plain(self.sigma)}

    def __repr__(self) -> str:
        return (
            f"ModelB(sigma={_numbers(self.sigma)}, w {tuple(np.shape(self.w))}, "
            f"residuals {tuple(np.shape(self.residuals))})"
        )


def _numbers(x: Any, at_most: int = 8) -> str:
    """A short vector for a ``repr``: its numbers when few and concrete, else its shape."""
    shape = tuple(np.shape(x))
    if len(shape) != 1 or shape[0] > at_most:
        return f"array{shape}"
    return "[" + ", ".join(headline(x[i]) for i in range(shape[0])) + "]"


def profile_objective(d: Design, log_sigma: jax.Array, P: jax.Array, lam: Any) -> jax.Array:
    """``Σ_i e_iᵀ Σ⁻¹ e_i + n log det Σ`` with ``Σ = D P D``, ``D = diag(exp(log_sigma))`` and
    ``e_i = x_i − Φ_i w(Σ)``, w the penalised GLS (the penalty itself is left out, as in the
    paper's code)."""
    return _profile_value(d, log_sigma, jnp.linalg.inv(P), jnp.linalg.slogdet(P)[1], lam)


def _precision(log_sigma: jax.Array, Q: jax.Array) -> jax.Array:
    """``Σ⁻¹ = D⁻¹ P⁻¹ D⁻¹`` from log σ and ``Q = P⁻¹``."""
    inv_d = jnp.exp(-log_sigma)
    return inv_d[:, None] * Q * inv_d[None, :]


def _profile_value(
    d: Design, log_sigma: jax.Array, Q: jax.Array, logdet_P: jax.Array, lam: Any
) -> jax.Array:
    """:func:`profile_objective` given ``Q = P⁻¹`` and ``log det P``."""
    S = _precision(log_sigma, Q)
    R, _ = residual_products(d, gls(d, S, lam))
    return jnp.sum(S * R) + d.count * (2 * jnp.sum(log_sigma) + logdet_P)


def _profile_gradient(d: Design, log_sigma: jax.Array, Q: jax.Array, lam: Any) -> jax.Array:
    """The gradient of :func:`profile_objective` in log σ, ``(m,)``, in closed form.

    With ``S = Σ⁻¹`` and w(S) the GLS, ``∂f/∂S = R + Vᵀ(C − G W)``: R the residual
    cross-products, W and V the coefficients w and ``v = A⁻¹(−2Λw)`` laid out per equation (A
    the normal equations' matrix, Λ the penalties). The second term is the penalty's: the
    objective leaves the penalty out, so w does not minimise it and its change with S counts
    (``∂f/∂w = −2Λw``; zero without a penalty). ``S_jk = Q_jk e^{−s_j − s_k}`` then gives
    ``∂f/∂s_l = 2n − Σ_k (Γ ⊙ S)_lk − Σ_j (Γ ⊙ S)_jl``. Differentiated once more (Newton's
    Hessian, the σ solve's implicit derivative), it is a first-order program, where automatic
    differentiation of the objective would nest reverse inside forward mode."""
    S = _precision(log_sigma, Q)
    w = gls(d, S, lam)
    gamma, _ = residual_products(d, w)
    if not _unpenalised(lam):
        b = d.block
        penalty = _penalty(d, lam)
        v = spd_solve(d.G * S[b][:, b] + jnp.diag(penalty), -2 * penalty * w)
        gamma = gamma + _layout(d, v).T @ (d.C - d.G @ _layout(d, w))
    weighted = gamma * S
    return 2 * d.count - jnp.sum(weighted, axis=0) - jnp.sum(weighted, axis=1)


def fit_model_b(
    d: Design,
    P: Any,
    lam: Any,
    log_sigma0: Any = None,
    newton_steps: int = 30,
    names: Sequence[str] | None = None,
) -> ModelB:
    """Model B for the error correlation ``P (m, m)`` (definitions §3.4): σ from the profile
    likelihood (:func:`profile_objective`) by Newton steps in log σ, then the closed-form GLS.

    The σ solve starts at ``log_sigma0`` (default: the log standard deviations of the ridge
    residuals, Model A's) and only ever goes downhill: Newton's step where the Hessian is
    positive definite, elsewhere the step with the Hessian's eigenvalues made positive (their
    absolute values), at most 1 in any log σ per step and halved until the objective falls; at
    most ``newton_steps`` steps, until a step would move log σ by less than 1e-10 (1e-5 in
    float32) or none lowers the objective. Under a ridge penalty the profile objective need not
    be convex in log σ (the penalty weighs more against the precision 1/σ² as σ grows), and it
    can have a second minimum where an equation is shrunk toward zero and its σ takes the
    feature's own scale: σ is the minimum that this descent reaches from its start.

    Differentiable in P (and λ): the σ solve is differentiated implicitly (``lax.custom_root``:
    the derivative of the stationarity condition, not of the iterations).

    A concrete ``lam`` of exactly 0 (a number, or a concrete array of zeros; ``FairModel.lam``
    is one even inside a jitted function, being static) is the unpenalised fit: every GLS solve
    is the minimum-norm least-squares one (:func:`gls`), so that collinear embeddings (``A²`` =
    1 when A = ±1) do not make it singular. A traced ``lam`` is always solved as a penalty.

    Called eagerly (not under ``jit``, ``vmap`` or ``grad``), a fit whose σ or coefficients are
    NaN or infinite warns (:class:`~cfjax.sensitivity.ConvergenceWarning`) naming λ and the
    equations, by ``names`` (one per equation; default: their indices).
    """
    unpenalised = _unpenalised(lam)
    out = _fit_model_b(d, P, None if unpenalised else lam, log_sigma0, newton_steps, unpenalised)
    if _checks.is_concrete(out.sigma) and _checks.is_concrete(out.w):
        _warn_if_not_finite(d, out, lam, names)
    return out


def _unpenalised(lam: Any) -> bool:
    """Whether ``lam`` is a concrete penalty of exactly 0 everywhere (the minimum-norm fit)."""
    return all(map(_checks.is_concrete, jax.tree.leaves(lam))) and not np.any(np.asarray(lam))


def _warn_if_not_finite(d: Design, out: ModelB, lam: Any, names: Sequence[str] | None) -> None:
    """:class:`ConvergenceWarning` naming λ and each equation whose σ or coefficients are not finite."""
    sigma = np.asarray(out.sigma)
    blocks = [np.asarray(w) for w in d.blocks(out.w)]
    bad = [
        j
        for j in range(sigma.shape[0])
        if not (np.isfinite(sigma[j]) and np.isfinite(blocks[j]).all())
    ]
    if not bad:
        return
    label = [f"{names[j]!r}" if names is not None else f"equation {j}" for j in bad]
    lam_text = (
        headline(lam)
        if np.ndim(lam) == 0
        else "(" + ", ".join(headline(v) for v in np.asarray(lam)) + ")"
    )
    warnings.warn(
        f"Model B at lambda = {lam_text}: the fit of {', '.join(label)} is not finite (sigma "
        f"{', '.join(headline(sigma[j]) for j in bad)}); the profile likelihood in log sigma had no finite "
        "value at its start or along its descent (a feature the fit interpolates, sigma -> 0, or extreme "
        "values), so every CFU computed from it is NaN",
        ConvergenceWarning,
        stacklevel=3,
    )


_CURVATURE_FLOOR = (
    1e-8  # the smallest |eigenvalue| a Newton step divides by, relative to the largest
)
_MAX_STEP = 1.0  # the largest move of any log σ in one Newton step (σ by a factor e at most)
_TRUSTED = 0.1  # a plain Newton step up to this long is taken without a line search
_ARMIJO = 1e-4  # the decrease a shortened step must achieve, relative to the slope's prediction
_HALVINGS = 40  # line-search halvings before the step is refused (the minimum, to rounding)


def _descent_step(grad: jax.Array, h: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The step of Model B's σ solve (subtract it): Newton's ``h⁻¹ grad`` where the Hessian
    ``h`` is positive definite, else a descent direction with Newton's scale (the eigenvalues
    of h replaced by their absolute values, floored at 1e-8 of the largest), shortened so that
    no log σ moves by more than ``_MAX_STEP``; and whether it is the plain Newton step.

    Damping an indefinite h only up to its most negative eigenvalue (h + μI, μ = −λ_min + ε)
    leaves a matrix with an eigenvalue ε: its solve is a step of 1e11 in log σ, σ overflows and
    Model B comes out NaN, which happened at moderate ridge penalties, where the profile
    objective is not convex."""
    lam, V = jnp.linalg.eigh(h)
    floor = _CURVATURE_FLOOR * jnp.max(jnp.abs(lam)) + jnp.finfo(h.dtype).tiny
    delta = V @ ((V.T @ grad) / jnp.maximum(jnp.abs(lam), floor))
    size = jnp.max(jnp.abs(delta))
    delta = delta * jnp.minimum(1.0, _MAX_STEP / jnp.where(size > 0, size, 1.0))
    return delta, (lam[0] > floor) & (size <= _MAX_STEP)


# Jitted: eagerly, ``custom_root`` would trace fresh closures and compile its loops anew at every
# call (thousands of programs over a long run); jitted, one program per shape and dtype. Whether
# λ is exactly 0 is static: inside the program λ is traced, and :func:`gls` would no longer see
# that it may take the unpenalised (pseudo-inverse) solve; the penalised one is singular there.
def _start_log_sigma(d: Design, lam: Any, dtype) -> jax.Array:
    """The σ solve's default start: the log standard deviations of the ridge residuals
    (Model A's σ), ``(m,)``."""
    R, mean = residual_products(d, gls(d, jnp.eye(d.X.shape[1], dtype=dtype), lam))
    return 0.5 * jnp.log(jnp.diag(R) / d.count - mean**2)


@functools.partial(jax.jit, static_argnames=("newton_steps", "unpenalised"))
def _fit_model_b(
    d: Design, P: Any, lam: Any, log_sigma0: Any, newton_steps: int, unpenalised: bool
) -> ModelB:
    return _model_b(d, P, lam, log_sigma0, newton_steps, unpenalised)


def _model_b(
    d: Design, P: Any, lam: Any, log_sigma0: Any, newton_steps: Any, unpenalised: bool
) -> ModelB:
    """:func:`fit_model_b`'s body, traceable: ``newton_steps`` may be traced (a program that
    fits Model B both warm-started and from scratch traces the fit once)."""
    if unpenalised:
        lam = 0.0
    P = jnp.asarray(P)
    if log_sigma0 is None:
        log_sigma0 = _start_log_sigma(d, lam, P.dtype)
    log_sigma = _log_sigma(
        d, P, None if unpenalised else lam, jnp.asarray(log_sigma0, P.dtype), newton_steps
    )
    w = gls(d, _precision(log_sigma, jnp.linalg.inv(P)), lam)
    return ModelB(w, jnp.exp(log_sigma), d.X - d.F @ _layout(d, w))


@jax.custom_vjp
def _log_sigma(
    d: Design, P: jax.Array, lam: Any, log_sigma0: jax.Array, newton_steps: Any
) -> jax.Array:
    """Model B's log σ for the correlation ``P`` (:func:`_descend` from ``log_sigma0``); ``lam``
    None: unpenalised.

    Differentiated implicitly: at the minimum the gradient ``g(s; P, λ)`` of the profile
    objective is 0, so ``ds = −H⁻¹ ∂g/∂(P, λ)``, H the Hessian in s, which the descent
    computed at its answer. The reverse pass is one m × m solve and one reverse pass through
    the gradient; the descent itself is never differentiated."""
    return _descend(d, P, lam, log_sigma0, newton_steps)[0]


def _log_sigma_fwd(d, P, lam, log_sigma0, newton_steps):
    log_sigma, hessian = _descend(d, P, lam, log_sigma0, newton_steps)
    return log_sigma, (d, P, lam, log_sigma, hessian)


def _log_sigma_bwd(residuals, cotangent):
    d, P, lam, log_sigma, hessian = residuals
    u = jnp.linalg.solve(hessian, cotangent)
    _, pullback = jax.vjp(
        lambda P, lam: _profile_gradient(
            d, log_sigma, jnp.linalg.inv(P), 0.0 if lam is None else lam
        ),
        P,
        lam,
    )
    P_bar, lam_bar = pullback(-u)
    # Not differentiated in the data (a fixed design): zero cotangents.
    return jax.tree.map(jnp.zeros_like, d), P_bar, lam_bar, None, None


_log_sigma.defvjp(_log_sigma_fwd, _log_sigma_bwd)


def _descend(
    d: Design, P: jax.Array, lam: Any, log_sigma0: jax.Array, newton_steps: Any
) -> tuple[jax.Array, jax.Array]:
    """The σ solve's descent (see :func:`fit_model_b`): Newton steps in log σ from
    ``log_sigma0``, the Hessian by forward mode through :func:`_profile_gradient`; ``lam``
    None: unpenalised. Returns log σ (NaN where the objective is not finite at the end) and
    the Hessian there (what the implicit derivative needs).

    Each iteration evaluates the gradient and Hessian at the current point, then steps unless
    the step would move log σ by less than ``tol`` (1e-10, 1e-5 in float32), the steps are
    spent, or no step along its direction lowers the objective (the minimum, to rounding): the
    iteration that stops has evaluated the Hessian at the answer."""
    lam = 0.0 if lam is None else lam
    Q, logdet_P = jnp.linalg.inv(P), jnp.linalg.slogdet(P)[1]
    eye = jnp.eye(P.shape[0], dtype=P.dtype)
    tol = 1e-10 if P.dtype == jnp.float64 else 1e-5

    def objective(s):
        return _profile_value(d, s, Q, logdet_P, lam)

    def step(state):
        s, f, _, i, _ = state
        grad, tangent = jax.linearize(lambda s: _profile_gradient(d, s, Q, lam), s)
        hessian = jax.vmap(tangent)(eye)
        delta, newton_step = _descent_step(grad, hessian)
        move = (i < newton_steps) & (jnp.max(jnp.abs(delta)) >= tol)
        slope = grad @ delta  # > 0 for a non-zero gradient: −delta goes downhill
        # A short plain Newton step (positive definite Hessian) is taken as it is: near the
        # minimum its decrease is below the objective's rounding (float32 would stop early).
        trusted = newton_step & (jnp.max(jnp.abs(delta)) <= _TRUSTED)

        def accepted(t, f_t, k):
            return (f_t <= f - _ARMIJO * t * slope) | (trusted & (k == 0) & jnp.isfinite(f_t))

        def shorter(c):  # the first pass tries the whole step (t = 1, k = 0)
            t, _, k = c
            return t / 2, objective(s - (t / 2) * delta), k + 1

        def refused(c):
            return move & ((c[2] < 0) | (~accepted(*c) & (c[2] < _HALVINGS)))

        c = jax.lax.while_loop(refused, shorter, (jnp.asarray(2.0, s.dtype), f, -1))
        ok = move & accepted(*c)  # False for a NaN objective: the step is refused
        return jnp.where(ok, s - c[0] * delta, s), jnp.where(ok, c[1], f), hessian, i + 1, ~ok

    state = (log_sigma0, objective(log_sigma0), eye, jnp.asarray(0, jnp.int32), jnp.asarray(False))
    s, f, hessian, _, _ = jax.lax.while_loop(lambda state: ~state[4], step, state)
    return jnp.where(jnp.isfinite(f), s, jnp.nan), hessian  # an objective that is not finite: no σ
