"""Polynomial ridge regression with K-fold cross-validation over degree and penalty, from Gram
matrices (paper 001's model selection; SPEC §3).

Every fold's training Gram is the full Gram minus the fold's own, so a whole grid of penalties ×
folds is one batched solve per degree after one pass over the data. The ridge penalises every
coefficient, the intercept column included (the closed form of SPEC §3); scikit-learn's
``Ridge(fit_intercept=False)`` on ``PolynomialFeatures`` is the same estimator. The CV score is
scikit-learn's: the mean over folds of the held-out mean squared error.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax.sensitivity.linear import polynomial_features

__all__ = ["fold_ids", "cv_scores", "RidgeFit", "ridge_cv", "polynomial_predict", "embed"]


def fold_ids(n: int, folds: int = 5, shuffle: bool = False, seed: int = 0) -> np.ndarray:
    """The fold of each of ``n`` rows, ``(n,)``: contiguous blocks in row order (the first
    ``n % folds`` one row longer, as scikit-learn's ``KFold``), or a seeded random assignment of
    the same sizes when ``shuffle``."""
    folds = _checks.check_positive_int("folds", folds)
    if folds < 2 or folds > n:
        _checks.fail("folds", f"an integer in [2, n = {n}]", repr(folds))
    sizes = np.full(folds, n // folds)
    sizes[: n % folds] += 1
    ids = np.repeat(np.arange(folds), sizes)
    if shuffle:
        ids = ids[np.random.default_rng(seed).permutation(n)]
    return ids


def embed(Z: jax.Array, degree: int) -> jax.Array:
    """Polynomial features with intercept of every row of ``Z (n, p)``: ``(n, F)``."""
    return jax.vmap(lambda z: polynomial_features(z, degree))(Z)


@jax.jit
def _fold_grams(F: jax.Array, y: jax.Array, onehot: jax.Array):
    """Per-fold ``FᵀF``, ``Fᵀy``, ``yᵀy`` and row counts; ``onehot (n, folds)``."""
    # One masked matmul per fold (a handful): no (n, folds, p) intermediate.
    G = jnp.stack([(F * onehot[:, k, None]).T @ F for k in range(onehot.shape[1])])
    c = onehot.T @ (F * y[:, None])
    return G, c, onehot.T @ (y * y), onehot.sum(0)


@jax.jit
def _scores(G_k, c_k, yy_k, n_k, lambdas):
    """Held-out MSE for every (penalty, fold), averaged over folds: ``(len(lambdas),)``."""
    G, c = G_k.sum(0), c_k.sum(0)
    eye = jnp.eye(G.shape[0], dtype=G.dtype)

    def one(lam, Gk, ck, yyk, nk):
        w = jnp.linalg.solve(G - Gk + lam * eye, c - ck)
        return (yyk - 2 * ck @ w + w @ Gk @ w) / nk

    per = jax.vmap(jax.vmap(one, (None, 0, 0, 0, 0)), (0, None, None, None, None))(lambdas, G_k, c_k, yy_k, n_k)
    return per.mean(1)


def cv_scores(F: Any, y: Any, lambdas: Any, fold: np.ndarray) -> jax.Array:
    """Mean held-out MSE of ridge on the design ``F (n, p)`` for each penalty: ``(L,)``.
    ``fold (n,)`` from :func:`fold_ids`."""
    F, y = jnp.asarray(F), jnp.asarray(y, jnp.asarray(F).dtype)
    onehot = jnp.asarray(fold[:, None] == np.arange(fold.max() + 1)[None, :], F.dtype)
    return _scores(*_fold_grams(F, y, onehot), jnp.asarray(lambdas, F.dtype))


class RidgeFit(NamedTuple):
    """A polynomial ridge model chosen by CV: ``degree``, penalty ``lam``, coefficients
    ``theta (F,)`` and the CV table ``scores (len(degrees), len(lambdas))``."""

    degree: int
    lam: float
    theta: jax.Array
    scores: np.ndarray


def ridge_cv(Z: Any, y: Any, *, degrees: Sequence[int] = (1, 2, 3, 4),
             lambdas: Sequence[float] = tuple(np.logspace(-4, 4, 10)), folds: int = 5,
             shuffle: bool = False, seed: int = 0) -> RidgeFit:
    """Polynomial ridge of ``y (n,)`` on ``Z (n, p)``, degree and penalty by K-fold CV (rows
    in order unless ``shuffle``), refitted on all rows.

    Example:
      >>> import numpy as np
      >>> z = np.linspace(-1, 1, 50)[:, None]
      >>> fit = ridge_cv(z, 2 + 3 * z[:, 0] ** 2, degrees=(1, 2), lambdas=(1e-6, 1.0))
      >>> fit.degree, fit.lam, np.round(np.asarray(fit.theta), 3).tolist()
      (2, 1e-06, [2.0, 0.0, 3.0])
    """
    Z, y = _predictor_inputs(Z, y)
    degrees = tuple(_checks.check_positive_int("degrees", d) for d in degrees)
    lambdas = _check_lambdas(lambdas)
    fold = fold_ids(Z.shape[0], folds, shuffle, seed)
    table = np.stack([np.asarray(cv_scores(embed(Z, d), y, lambdas, fold)) for d in degrees])
    i, j = np.unravel_index(np.nanargmin(table), table.shape)
    F = embed(Z, degrees[i])
    lam = float(lambdas[j])
    theta = jnp.linalg.solve(F.T @ F + lam * jnp.eye(F.shape[1], dtype=F.dtype), F.T @ y)
    return RidgeFit(degrees[i], lam, theta, table)


def polynomial_predict(Z: jax.Array, degree: int, theta: jax.Array) -> jax.Array:
    """``φ(z)ᵀθ`` for every row of ``Z (n, p)``."""
    return embed(Z, degree) @ theta


def _predictor_inputs(Z: Any, y: Any) -> tuple[jax.Array, jax.Array]:
    Z = np.asarray(Z)
    y = np.asarray(y)
    if Z.ndim != 2 or Z.shape[0] == 0:
        _checks.fail("Z", "a non-empty 2-d array (n, p)", f"shape {Z.shape}")
    if y.shape != (Z.shape[0],):
        _checks.fail("y", f"shape ({Z.shape[0]},) like Z's rows", f"shape {y.shape}")
    if not (np.isfinite(Z).all() and np.isfinite(y).all()):
        _checks.fail("Z/y", "finite values", "NaN or infinite values")
    dtype = jnp.result_type(float)
    return jnp.asarray(Z, dtype), jnp.asarray(y, dtype)


def _check_lambdas(lambdas: Any) -> np.ndarray:
    lam = np.asarray(lambdas, np.float64).reshape(-1)
    if lam.size == 0 or not np.isfinite(lam).all() or (lam <= 0).any():
        _checks.fail("lambdas", "a non-empty sequence of positive penalties (CV solves need lambda > 0)",
                     repr(lambdas))
    return lam
