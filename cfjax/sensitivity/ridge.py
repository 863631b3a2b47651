"""Polynomial ridge regression with K-fold cross-validation over degree and penalty, from Gram
matrices (paper 001's model selection; definitions §3).

Every fold's training Gram is the full Gram minus the fold's own, so a whole grid of penalties ×
folds is one batched solve per degree after one pass over the data. The ridge penalises every
coefficient, the intercept column included (the closed form of definitions §3); scikit-learn's
``Ridge(fit_intercept=False)`` on ``PolynomialFeatures`` is the same estimator.

The CV score (``score``) is one of :data:`SCORES`:

- ``"r2"`` (the paper's recipe): scikit-learn's ``GridSearchCV(cv=5)`` with its default
  scoring, i.e. the regressor's own ``score``: R² = 1 − SS_res / SS_tot of each held-out fold
  (SS_tot about the fold's own mean), averaged over folds; the largest wins.
- ``"mse"``: the held-out mean squared error averaged over folds (``scoring=
  "neg_mean_squared_error"``); the smallest wins.

Ties go to the first candidate in grid order, as ``GridSearchCV``'s ``best_index_``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax._core.keys import numpy_rng
from cfjax._results import headline
from cfjax._results import strict_plain as plain
from cfjax.sensitivity.linear import polynomial_features
from cfjax.typing import KeyLike

__all__ = [
    "SCORES",
    "check_score",
    "fold_ids",
    "fold_errors",
    "fold_totals",
    "fold_scores",
    "best_index",
    "cv_scores",
    "RidgeFit",
    "ridge_cv",
    "polynomial_predict",
    "embed",
]

SCORES = ("r2", "mse")


def check_score(name: str, score: Any) -> str:
    """``score`` if it is one of :data:`SCORES`, else a :class:`cfjax.ValidationError`."""
    if not isinstance(score, str) or score not in SCORES:
        _checks.fail(
            name,
            "'r2' (held-out R² averaged over folds, the paper's recipe) or 'mse' "
            "(held-out mean squared error averaged over folds)",
            repr(score),
        )
    return score


def fold_ids(n: int, folds: int = 5, shuffle: bool = False, *, key: KeyLike = 0) -> np.ndarray:
    """The fold of each of ``n`` rows, ``(n,)``: contiguous blocks in row order (the first
    ``n % folds`` one row longer, as scikit-learn's ``KFold``), or a random assignment of the
    same sizes when ``shuffle``, drawn with ``key`` (a PRNG key or an int seed:
    :func:`cfjax._core.keys.numpy_rng`; the same key, the same folds)."""
    folds = _checks.check_positive_int("folds", folds)
    if folds < 2 or folds > n:
        _checks.fail("folds", f"an integer in [2, n = {n}]", repr(folds))
    sizes = np.full(folds, n // folds)
    sizes[: n % folds] += 1
    ids = np.repeat(np.arange(folds), sizes)
    if shuffle:
        ids = ids[numpy_rng(key).permutation(n)]
    return ids


@functools.partial(jax.jit, static_argnums=1)
def embed(Z: jax.Array, degree: int) -> jax.Array:
    """Polynomial features with intercept of every row of ``Z (n, p)``: ``(n, F)`` (one compiled
    program per shape and degree, not a dozen small ones)."""
    return jax.vmap(lambda z: polynomial_features(z, degree))(Z)


@jax.jit
def _fold_grams(F: jax.Array, y: jax.Array, onehot: jax.Array):
    """Per-fold ``FᵀF``, ``Fᵀy`` and ``yᵀy``; ``onehot (n, folds)``."""
    # One masked matmul per fold (a handful): no (n, folds, p) intermediate.
    G = jnp.stack([(F * onehot[:, k, None]).T @ F for k in range(onehot.shape[1])])
    c = onehot.T @ (F * y[:, None])
    return G, c, onehot.T @ (y * y)


@jax.jit
def _sse(G_k, c_k, yy_k, lambdas):
    """Held-out sum of squared errors for every (penalty, fold): ``(len(lambdas), folds)``."""
    G, c = G_k.sum(0), c_k.sum(0)
    eye = jnp.eye(G.shape[0], dtype=G.dtype)

    def one(lam, Gk, ck, yyk):
        w = jnp.linalg.solve(G - Gk + lam * eye, c - ck)
        return yyk - 2 * ck @ w + w @ Gk @ w

    return jax.vmap(jax.vmap(one, (None, 0, 0, 0)), (0, None, None, None))(lambdas, G_k, c_k, yy_k)


def _onehot(fold: np.ndarray, dtype) -> jax.Array:
    return jnp.asarray(fold[:, None] == np.arange(fold.max() + 1)[None, :], dtype)


def fold_errors(F: Any, y: Any, lambdas: Any, fold: np.ndarray) -> np.ndarray:
    """Held-out sum of squared errors of ridge on the design ``F (n, p)``, trained on the other
    folds, for each penalty and fold: ``(L, folds)`` (float64 on the host). ``fold (n,)`` from
    :func:`fold_ids`."""
    F = jnp.asarray(F)
    y = jnp.asarray(y, F.dtype)
    sse = _sse(*_fold_grams(F, y, _onehot(fold, F.dtype)), jnp.asarray(lambdas, F.dtype))
    return np.asarray(sse, np.float64)


def fold_totals(Y: Any, fold: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each fold's total sum of squares and number of targets, ``(folds,)`` each.

    ``Y (n,)``: one target; ``Y (n, m)``: m targets stacked into one (a shared-λ fit of several
    equations scored as one estimator), centred at the mean of all the fold's m·n_k values.
    """
    Y = np.asarray(Y, np.float64)
    Y = Y[:, None] if Y.ndim == 1 else Y
    k = fold.max() + 1
    count = np.bincount(fold, minlength=k) * Y.shape[1]
    mean = np.bincount(fold, Y.sum(1), minlength=k) / count
    total = np.bincount(fold, ((Y - mean[fold, None]) ** 2).sum(1), minlength=k)
    return total, count


def fold_scores(sse: Any, total: np.ndarray, count: np.ndarray, score: str) -> np.ndarray:
    """Per-fold scores from held-out errors ``sse (..., folds)``: R² = 1 − SSE / SS_tot
    (scikit-learn's ``r2_score``: 1 for a constant fold predicted exactly, else 0 when SS_tot = 0)
    or MSE = SSE / count. Average over the last axis for the CV score."""
    sse = np.asarray(sse, np.float64)
    if check_score("score", score) == "mse":
        return sse / count
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = 1.0 - sse / total
    return np.where(total > 0, r2, np.where(sse == 0, 1.0, 0.0))


def best_index(table: Any, score: str) -> tuple[int, ...]:
    """Index of the best entry of a CV table in row-major (grid) order: the largest R² or the
    smallest MSE; the first one on ties, NaN scores last (``GridSearchCV``'s ``best_index_``)."""
    table = np.asarray(table, np.float64)
    if np.isnan(table).all():
        _checks.fail("table", "at least one finite CV score", "only NaN scores")
    flat = np.nanargmax(table) if check_score("score", score) == "r2" else np.nanargmin(table)
    return tuple(int(i) for i in np.unravel_index(flat, table.shape))


def cv_scores(F: Any, y: Any, lambdas: Any, fold: np.ndarray, score: str = "r2") -> np.ndarray:
    """The CV score of ridge on the design ``F (n, p)`` for each penalty, ``(L,)``: held-out R²
    (``"r2"``) or MSE (``"mse"``) averaged over folds. ``fold (n,)`` from :func:`fold_ids`.

    Example:
      >>> import numpy as np
      >>> F = np.stack([np.ones(20), np.arange(20.0)], 1)
      >>> np.round(cv_scores(F, 1 + 2 * F[:, 1], [1e-8], fold_ids(20, 4), score="mse"), 6).tolist()
      [0.0]
    """
    score = check_score("score", score)
    return fold_scores(fold_errors(F, y, lambdas, fold), *fold_totals(y, fold), score).mean(-1)


class RidgeFit(NamedTuple):
    """A polynomial ridge model chosen by CV: ``degree``, penalty ``lam``, coefficients
    ``theta (F,)``, the CV table ``scores (len(degrees), len(lambdas))`` and what it holds,
    ``score`` (``"r2"`` or ``"mse"``)."""

    degree: int
    lam: float
    theta: jax.Array
    scores: np.ndarray
    score: str = "r2"

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-serialisable plain Python (``scores`` as nested lists,
        non-finite numbers as None)."""
        return {
            "degree": int(self.degree),
            "lam": plain(self.lam),
            "theta": plain(self.theta),
            "scores": plain(self.scores),
            "score": self.score,
        }

    def __repr__(self) -> str:
        try:
            best = headline(np.asarray(self.scores)[best_index(self.scores, self.score)])
        except Exception:
            best = "?"
        return (
            f"RidgeFit(degree={self.degree}, lam={headline(self.lam)}, best CV {self.score}={best}, "
            f"theta {tuple(np.shape(self.theta))}, scores {tuple(np.shape(self.scores))})"
        )


#: ridge_cv's candidate penalties: 10 log-spaced from 1e-4 to 1e4
_LAMBDAS = tuple(np.logspace(-4, 4, 10))


def ridge_cv(
    Z: Any,
    y: Any,
    *,
    degrees: Sequence[int] = (1, 2, 3, 4),
    lambdas: Sequence[float] | np.ndarray = _LAMBDAS,
    folds: int = 5,
    shuffle: bool = False,
    key: KeyLike = 0,
    score: str = "r2",
) -> RidgeFit:
    """Polynomial ridge of ``y (n,)`` on ``Z (n, p)``, degree and penalty by K-fold CV (rows
    in order unless ``shuffle``, then folds drawn with ``key``, a PRNG key or an int seed) on
    ``score`` (held-out R², scikit-learn's default, or MSE), refitted on all rows. The grid's
    order is degrees × lambdas, as scikit-learn's for a ``PolynomialFeatures`` → ``Ridge``
    pipeline.

    Example:
      >>> import numpy as np
      >>> z = np.linspace(-1, 1, 50)[:, None]
      >>> fit = ridge_cv(z, 2 + 3 * z[:, 0] ** 2, degrees=(1, 2), lambdas=(1e-6, 1.0))
      >>> fit.degree, fit.lam, (np.round(np.asarray(fit.theta), 3) + 0.0).tolist()
      (2, 1e-06, [2.0, 0.0, 3.0])
    """
    score = check_score("score", score)
    Z, y = _predictor_inputs(Z, y)
    degrees = tuple(_checks.check_positive_int("degrees", d) for d in degrees)
    lambdas = _check_lambdas(lambdas)
    fold = fold_ids(Z.shape[0], folds, shuffle, key=key)
    totals = fold_totals(y, fold)
    table = np.stack(
        [
            fold_scores(fold_errors(embed(Z, d), y, lambdas, fold), *totals, score).mean(-1)
            for d in degrees
        ]
    )
    i, j = best_index(table, score)
    F = embed(Z, degrees[i])
    lam = float(lambdas[j])
    return RidgeFit(degrees[i], lam, _refit(F, y, lam), table, score)


@jax.jit
def _refit(F: jax.Array, y: jax.Array, lam: Any) -> jax.Array:
    """The ridge coefficients on every row, ``(FᵀF + λI)⁻¹ Fᵀy`` (one program per shape)."""
    return jnp.linalg.solve(F.T @ F + lam * jnp.eye(F.shape[1], dtype=F.dtype), F.T @ y)


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
        _checks.fail(
            "lambdas",
            "a non-empty sequence of positive penalties (CV solves need lambda > 0)",
            repr(lambdas),
        )
    return lam
