"""The concept subspace of an embedding space (paper 002; definitions §4).

An embedding ``x (d,)`` is split into a part that carries no linear information about the
concept Z and concept coordinates ``c (r,)``, ``r <= k - 1`` for a concept with k values:

    c = coord @ (x - center),    x⊥ = x - basis @ c,    x = x⊥ + basis @ c.

* ``method="orth"`` (the paper's): ``coord = E``, an orthonormal basis (rows) of the column
  space of the cross-covariance ``Σ_XZ`` of the embeddings and one-hot Z, ``basis = Eᵀ`` and
  ``center = 0``, so ``x⊥ = (I - EᵀE) x`` and ``c = E x``.
* ``method="leace"``: the whitened oblique projection of LEACE (Belrose et al., 2023). With
  ``W = Σ_XX^{-1/2}`` and ``U`` an orthonormal basis of the column space of ``W Σ_XZ``:
  ``coord = Uᵀ W``, ``basis = W⁻¹ U``, ``center = E[x]``. It moves x the least in the
  Mahalanobis sense. ``Σ_XX`` is shrunk towards a multiple of the identity (Ledoit–Wolf by
  default) so that its inverse square root exists for ill-conditioned embeddings.

Either way ``Cov(x⊥, Z) = 0`` exactly, so no linear probe can read Z from x⊥.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cfjax import _checks, _results
from cfjax.platform import full_precision
from cfjax.typing import ArrayLike

__all__ = ["ConceptSubspace", "concept_subspace", "cross_covariance", "ledoit_wolf_shrinkage"]


class ConceptSubspace(struct.PyTreeNode):
    """A linear split of embeddings into an orthogonal part and concept coordinates.

    Attributes:
        coord: ``(r, d)``, ``c = coord @ (x - center)``.
        basis: ``(d, r)``, ``x = x⊥ + basis @ c``; ``coord @ basis = I_r``.
        center: ``(d,)``.
        method: ``"orth"`` or ``"leace"`` (static).
    """

    coord: jax.Array
    basis: jax.Array
    center: jax.Array
    method: str = struct.field(pytree_node=False, default="orth")

    @property
    def rank(self) -> int:
        return int(self.coord.shape[0])

    def split(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """One embedding ``x (d,)`` → ``(x⊥ (d,), c (r,))``; vmap for a batch."""
        c = self.coord @ (x - self.center)
        return x - self.basis @ c, c

    def to_dict(self) -> dict[str, Any]:
        """Plain Python for ``json.dumps``: ``method``, ``dtype`` and the arrays ``coord``,
        ``basis``, ``center`` as (nested) lists; :meth:`from_dict` rebuilds the subspace."""
        return {
            "method": self.method,
            "dtype": jnp.dtype(self.coord.dtype).name,
            **{f: _results.plain(getattr(self, f)) for f in ("coord", "basis", "center")},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConceptSubspace:
        """The subspace whose :meth:`to_dict` is ``data``."""
        dtype = data.get("dtype", "float32")
        arrays = {f: jnp.asarray(np.asarray(data[f], dtype)) for f in ("coord", "basis", "center")}
        return cls(**arrays, method=data.get("method", "orth"))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(method={self.method!r}, dim={self.coord.shape[-1]}, "
            f"rank={self.coord.shape[-2]}, dtype={jnp.dtype(self.coord.dtype).name})"
        )


def _as_embeddings(X: ArrayLike) -> jax.Array | np.ndarray:
    """A non-empty, finite ``(n, d)`` floating-point array (float32 unless already floating)."""
    if not isinstance(X, (jax.Array, np.ndarray)) or not jnp.issubdtype(X.dtype, jnp.floating):
        X = np.asarray(X, dtype=np.float32)
    _checks.warn_if_downcast("X", X)
    if isinstance(X, np.ndarray):  # float64 is float32 when jax_enable_x64 is off (warned above)
        X = X.astype(jax.dtypes.canonicalize_dtype(X.dtype), copy=False)
    _checks.check_ndim("X", X, 2, "of embeddings (n, d)")
    _checks.check_nonempty("X", X)
    _checks.check_finite("X", X)
    return X


def _check_embeddings(
    X: ArrayLike, z: ArrayLike, n_values: int | None
) -> tuple[jax.Array, jax.Array, int]:
    X = _as_embeddings(X)
    z = np.asarray(z)
    _checks.check_ndim("z", z, 1, "of concept values (n,)")
    _checks.check_same_len("X", X, "z", z)
    if not np.issubdtype(z.dtype, np.integer):
        if (
            np.issubdtype(z.dtype, np.floating)
            and np.all(np.isfinite(z))
            and np.all(z == np.round(z))
        ):
            z = z.astype(np.int32)
        else:
            _checks.fail("z", "integer concept codes 0..k-1", f"dtype {z.dtype}")
    k = int(z.max()) + 1 if n_values is None else int(n_values)
    if z.min() < 0 or z.max() >= k:
        _checks.fail("z", f"concept codes in 0..{k - 1}", f"values in [{z.min()}, {z.max()}]")
    counts = np.bincount(z, minlength=k)
    if (counts > 0).sum() < 2:
        _checks.fail(
            "z",
            "at least two concept values present",
            f"only value(s) {np.flatnonzero(counts).tolist()}",
        )
    if (counts == 0).any():
        _checks.fail(
            "z",
            f"every concept value 0..{k - 1} present",
            f"no unit with value(s) {np.flatnonzero(counts == 0).tolist()}",
        )
    return jnp.asarray(X), jnp.asarray(z, jnp.int32), k


@functools.partial(jax.jit, static_argnames="k")
def cross_covariance(X: jax.Array, z: jax.Array, k: int) -> jax.Array:
    """``Σ_XZ (d, k)``: covariance of the embeddings ``X (n, d)`` with one-hot ``z (n,)``."""
    n = X.shape[0]
    onehot = jax.nn.one_hot(z, k, dtype=X.dtype)
    Xc = X - jnp.mean(X, axis=0, keepdims=True)
    with full_precision():
        return Xc.T @ (onehot - jnp.mean(onehot, axis=0, keepdims=True)) / n


@jax.jit
def ledoit_wolf_shrinkage(X: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Ledoit–Wolf shrinkage of the covariance of ``X (n, d)`` towards ``μ I``.

    Returns ``(shrinkage in [0, 1], shrunk covariance (d, d))`` with the maximum-likelihood
    covariance ``S`` (divided by n), ``μ = tr S / d``, ``δ = ‖S - μI‖²_F / d``,
    ``β = Σ_i ‖x_i x_iᵀ - S‖²_F / (d n²)`` and shrinkage ``min(β, δ) / δ``.
    """
    n, d = X.shape
    Xc = X - jnp.mean(X, axis=0, keepdims=True)
    with full_precision():
        S = Xc.T @ Xc / n
    mu = jnp.trace(S) / d
    delta = jnp.sum((S - mu * jnp.eye(d, dtype=X.dtype)) ** 2) / d
    sq = jnp.sum(Xc**2, axis=1)
    beta = (jnp.sum(sq**2) / n - jnp.sum(S**2)) / (d * n)
    s = jnp.where(delta > 0, jnp.minimum(beta, delta) / jnp.where(delta > 0, delta, 1), 0)
    return s, (1 - s) * S + s * mu * jnp.eye(d, dtype=X.dtype)


def _column_basis(M: jax.Array, max_rank: int) -> jax.Array:
    """Orthonormal basis (columns) of the column space of ``M`` (JAX SVD), with scipy's ``orth``
    cut-off; the rank is read on the host, so the result's shape is concrete."""
    U, s, _ = jnp.linalg.svd(M, full_matrices=False)
    s = np.asarray(s)
    tol = max(M.shape) * np.finfo(s.dtype).eps * (s[0] if s.size else 0.0)
    r = min(int(np.sum(s > tol)), max_rank)
    return U[:, :r]


def concept_subspace(
    X: ArrayLike,
    z: ArrayLike,
    *,
    n_values: int | None = None,
    method: str = "orth",
    shrinkage: float | str = "ledoit_wolf",
) -> ConceptSubspace:
    """Fit the concept subspace of embeddings ``X (n, d)`` for concept codes ``z (n,)``.

    Args:
        X: embeddings, floating point; the result has their dtype.
        z: integer concept codes ``0..k-1``, every value present.
        n_values: k (default ``max(z) + 1``).
        method: ``"orth"`` (orthogonal projection, the paper's) or ``"leace"``.
        shrinkage: LEACE only: ``"ledoit_wolf"`` or a fixed weight in [0, 1] on ``tr(Σ)/d · I``.

    Returns:
        :class:`ConceptSubspace` of rank ``r <= k - 1`` (the numerical rank of ``Σ_XZ``, as
        ``scipy.linalg.orth`` computes it).

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> z = rng.integers(0, 2, 500)
        >>> X = rng.normal(size=(500, 8)).astype(np.float32); X[:, 0] += 3 * z
        >>> sub = concept_subspace(X, z)
        >>> sub.rank, round(abs(float(sub.coord[0, 0])), 2)
        (1, 1.0)
    """
    X, z, k = _check_embeddings(X, z, n_values)
    return _fit_subspace(X, z, k, method, shrinkage)


def _fit_subspace(
    X: jax.Array, z: jax.Array, k: int, method: str, shrinkage: float | str
) -> ConceptSubspace:
    """:func:`concept_subspace` on validated inputs."""
    with full_precision():
        return _fit(X, z, k, method, shrinkage)


def _fit(
    X: jax.Array, z: jax.Array, k: int, method: str, shrinkage: float | str
) -> ConceptSubspace:
    if method not in ("orth", "leace"):
        _checks.fail("method", "'orth' or 'leace'", repr(method))
    dtype = X.dtype
    cross = cross_covariance(X, z, k)
    if method == "orth":
        E = _column_basis(cross, k - 1).T
        if E.shape[0] == 0:
            _checks.fail("X", "embeddings that covary with the concept", "a zero cross-covariance")
        return ConceptSubspace(
            coord=E, basis=E.T, center=jnp.zeros(X.shape[1], dtype), method="orth"
        )

    if isinstance(shrinkage, str):
        if shrinkage != "ledoit_wolf":
            _checks.fail("shrinkage", "'ledoit_wolf' or a weight in [0, 1]", repr(shrinkage))
        _, cov = ledoit_wolf_shrinkage(X)
    else:
        s = float(shrinkage)
        if not 0.0 <= s <= 1.0:
            _checks.fail("shrinkage", "'ledoit_wolf' or a weight in [0, 1]", repr(shrinkage))
        Xc = X - jnp.mean(X, axis=0, keepdims=True)
        S = Xc.T @ Xc / X.shape[0]
        cov = (1 - s) * S + s * jnp.trace(S) / X.shape[1] * jnp.eye(X.shape[1], dtype=dtype)
    lam, V = jnp.linalg.eigh(cov)
    lo, hi = float(lam[0]), float(lam[-1])
    if lo <= hi * 100 * float(jnp.finfo(dtype).eps):
        _checks.fail(
            "X",
            "a non-singular embedding covariance for LEACE (use shrinkage > 0)",
            f"minimum eigenvalue {lo:.3g} (maximum {hi:.3g})",
        )
    root = jnp.sqrt(lam)[None, :]
    W = (V / root) @ V.T  # Σ^{-1/2}
    W_inv = (V * root) @ V.T  # Σ^{1/2}
    U = _column_basis(W @ cross, k - 1)
    if U.shape[1] == 0:
        _checks.fail("X", "embeddings that covary with the concept", "a zero cross-covariance")
    return ConceptSubspace(
        coord=U.T @ W, basis=W_inv @ U, center=jnp.mean(X, axis=0), method="leace"
    )
