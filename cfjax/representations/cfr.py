"""Counterfactual representations (CFRs) built in embedding space (paper 002; definitions §4).

Per concept value z a linear map ``ν_z: x⊥ → c`` (closed-form ridge with an unpenalised
intercept, fitted on the units with Z = z) and a Gaussian for its residuals. The deterministic
CFR of a unit for target value z' keeps its orthogonal part and replaces its concept
coordinates by the prediction of the target class's regression:

    x_{Z←z'} = x⊥ + basis @ ν_{z'}(x⊥);

the stochastic CFR adds ``basis @ ε``, ``ε ~ N(0, Σ_{z'})`` (the class-z' residual covariance).

Everything is written for one unit and lifted with ``vmap`` over units, so the unit axis comes
first (the contract's ``(N, K, ...)``, docs/contract.md): one unit's CFRs to the k target values
are ``(k, d)``, and :func:`counterfactuals` returns ``(n, k, d)``, every target value for every
unit in one call; :func:`sample_counterfactuals` returns ``(n, k, draws, d)`` (a unit's draws of
each target value's CFR, after the target axis) and :func:`stochastic_proba` ``(n, k, C)`` when
no targets are given, with the same noise draws for every target value.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.tree_util import PyTreeDef

from cfjax import _checks, _results
from cfjax._core.keys import as_key
from cfjax.platform import full_precision
from cfjax.representations.subspace import ConceptSubspace, _check_embeddings, _fit_subspace
from cfjax.typing import ArrayLike, KeyLike

__all__ = [
    "CFRModel",
    "ClassMoments",
    "class_moments",
    "counterfactual",
    "counterfactuals",
    "fit_cfr",
    "fit_regressions",
    "sample_counterfactuals",
    "stochastic_proba",
]


class CFRModel(struct.PyTreeNode):
    """A fitted CFR generator.

    Attributes:
        subspace: the :class:`ConceptSubspace` (rank r).
        coef: ``(k, d, r)``, ``ν_z(x⊥) = x⊥ @ coef[z] + intercept[z]``.
        intercept: ``(k, r)``.
        resid_chol: ``(k, r, r)``, Cholesky factors of the class residual covariances.
    """

    subspace: ConceptSubspace
    coef: jax.Array
    intercept: jax.Array
    resid_chol: jax.Array

    @property
    def n_values(self) -> int:
        return int(self.coef.shape[0])

    def to_dict(self) -> dict[str, Any]:
        """Plain Python for ``json.dumps``: the subspace (:meth:`ConceptSubspace.to_dict`),
        ``n_values``, ``dtype`` and the arrays ``coef``, ``intercept``, ``resid_chol`` as
        (nested) lists; :meth:`from_dict` rebuilds the model (k·d·r numbers, no data)."""
        return {
            "subspace": self.subspace.to_dict(),
            "n_values": self.n_values,
            "dtype": jnp.dtype(self.coef.dtype).name,
            **{f: _results.plain(getattr(self, f)) for f in ("coef", "intercept", "resid_chol")},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CFRModel:
        """The model whose :meth:`to_dict` is ``data``."""
        dtype = data.get("dtype", "float32")
        arrays = {
            f: jnp.asarray(np.asarray(data[f], dtype)) for f in ("coef", "intercept", "resid_chol")
        }
        return cls(subspace=ConceptSubspace.from_dict(data["subspace"]), **arrays)

    def __repr__(self) -> str:
        d, r = self.coef.shape[-2:]
        return (
            f"{type(self).__name__}(method={self.subspace.method!r}, n_values={self.coef.shape[-3]}, "
            f"dim={d}, rank={r}, dtype={jnp.dtype(self.coef.dtype).name})"
        )


class ClassMoments(NamedTuple):
    """Each concept value's sufficient statistics of the embeddings: ``counts (k,)``,
    ``means (k, d)`` and centred Gram matrices ``grams (k, d, d)``."""

    counts: jax.Array
    means: jax.Array
    grams: jax.Array

    def to_dict(self) -> dict[str, Any]:
        """``counts``, ``means`` and ``grams`` as (nested) lists of floats for ``json.dumps``."""
        return {f: _results.plain(getattr(self, f)) for f in self._fields}

    def __repr__(self) -> str:
        return _results.fields_repr(
            type(self).__name__, ((f, getattr(self, f)) for f in self._fields)
        )


_CHUNK = 1024  # rows per block in :func:`_class_outer`


def _class_outer(
    X: jax.Array, z: jax.Array, k: int, feature: Callable[[jax.Array, jax.Array], jax.Array]
) -> jax.Array:
    """``Σ_{i: z_i = v} f(x_i, v) f(x_i, v)ᵀ`` for each concept value v: ``(k, p, p)``.

    ``feature(rows (m, d), v) -> (m, p)`` maps rows of X by value v's map: the rows themselves
    for the class Gram matrices (p = d, n·d² work in all), the regression residuals for the
    residual covariances (p = r, n·d·r work).

    A masked sum per class would cost k times as much, and slicing each class's rows out of
    the sorted data would make the class counts static (one compilation per set of counts).
    Instead the row indices are sorted by value and cut into fixed blocks of B: each block's
    rows of its first row's value are gathered and go to that value's sum in one matmul (a scan
    over blocks, so no sorted copy of X is made); the rows of any other value — they follow one
    of the k - 1 boundaries between values, so there are fewer than (k - 1)·B of them — are
    gathered into a fixed-size buffer, mapped by every value's map and added with one-hot
    weights. Every shape depends on n, d and k only.
    """
    n, d = X.shape
    B = min(_CHUNK, n)
    m = -(-n // B)
    pad = m * B - n + 1  # padding positions (weight 0, row 0), the last one the gather's fill
    order = jnp.argsort(z, stable=True)
    order = jnp.concatenate([order, jnp.zeros((pad,), order.dtype)])
    zs = jnp.concatenate([z[order[:n]], jnp.full((pad,), k - 1, z.dtype)])  # still sorted
    real = jnp.arange(m * B + 1) < n
    rows, codes = order[: m * B].reshape(m, B), zs[: m * B].reshape(m, B)
    lead = codes[:, 0]
    regular = codes == lead[:, None]
    keep = (regular & real[: m * B].reshape(m, B)).astype(X.dtype)

    def step(acc, block):
        i, w, v = block
        f = feature(X[i], v)  # one block's rows gathered at a time: no sorted copy of X
        return acc.at[v].add(f.T @ (f * w[:, None])), None

    p = jax.eval_shape(feature, X[:B], lead[0]).shape[-1]
    sums, _ = jax.lax.scan(step, jnp.zeros((k, p, p), X.dtype), (rows, keep, lead))
    if k > 1:
        (rest,) = jnp.nonzero(~regular.reshape(-1), size=(k - 1) * B, fill_value=m * B)
        xr = X[order[rest]]
        weights = jax.nn.one_hot(zs[rest], k, dtype=X.dtype) * real[rest][:, None].astype(X.dtype)
        f = jax.vmap(feature, in_axes=(None, 0))(xr, jnp.arange(k))  # (k, (k - 1) B, p)
        sums = sums + jnp.einsum("vip,iv,viq->vpq", f, weights, f)
    return sums


def _class_grams(X: jax.Array, z: jax.Array, k: int) -> jax.Array:
    """``Σ_{i: z_i = v} x_i x_iᵀ`` for each concept value v: ``(k, d, d)``, n·d² work in all."""
    return _class_outer(X, z, k, lambda x, v: x)


@functools.partial(jax.jit, static_argnames="k")
def _moments(X: jax.Array, z: jax.Array, k: int) -> ClassMoments:
    # Data centred globally first; class counts are traced values, so new counts (same n, d,
    # k) reuse the compiled program.
    center = jnp.mean(X, axis=0, keepdims=True)
    Xc = X - center
    counts = jnp.zeros(k, X.dtype).at[z].add(1)
    means = jax.ops.segment_sum(Xc, z, num_segments=k) / counts[:, None]
    with full_precision():  # float32 products, not TF32: CFR accuracy
        grams = (
            _class_grams(Xc, z, k) - counts[:, None, None] * means[:, :, None] * means[:, None, :]
        )
    return ClassMoments(counts, means + center, grams)


def class_moments(X: jax.Array, z: ArrayLike, n_values: int) -> ClassMoments:
    """Per-concept-value counts, means and centred Gram matrices of ``X (n, d)``.

    One compilation per ``(n, d, k)`` and dtype: the class counts are not static.
    """
    _checks.warn_if_downcast("X", X)
    return _moments(jnp.asarray(X), jnp.asarray(z, jnp.int32), int(n_values))


@jax.jit
def fit_regressions(
    subspace: ConceptSubspace, moments: ClassMoments, ridge: jax.Array | float
) -> tuple[jax.Array, jax.Array]:
    """Ridge regressions of the concept coordinates ``c`` on the orthogonal part ``x⊥``, one per
    concept value, from the class moments of the embeddings alone.

    x⊥ and c are affine in x (``x⊥ = x T + t`` with ``T = I - coordᵀ basisᵀ``, ``c - c̄ =
    coord (x - x̄)``), so each class's centred Gram of x⊥ is ``Tᵀ G T`` and its cross-products
    with c are ``Tᵀ G coordᵀ``: no pass over the units beyond :func:`class_moments`.
    Coefficients ``(Tᵀ G T + ridge·I)⁻¹ Tᵀ G coordᵀ`` and an unpenalised intercept, as
    scikit-learn's ``Ridge`` fitted on the class's x⊥.

    The residual covariances are not computed here: see :func:`fit_cfr` for why they take a
    pass over the units.

    Returns:
        ``coef (k, d, r)``, ``intercept (k, r)``.
    """
    coord, basis, center = subspace.coord, subspace.basis, subspace.center
    d = coord.shape[1]
    eye = jnp.eye(d, dtype=coord.dtype)
    T = eye - coord.T @ basis.T

    def one(mean, G):
        Gp = T.T @ G @ T
        cross = T.T @ G @ coord.T  # (d, r)
        coef = jnp.linalg.solve(Gp + ridge * eye, cross)
        mean_perp = mean - basis @ (coord @ (mean - center))
        intercept = coord @ (mean - center) - mean_perp @ coef
        return coef, intercept

    with full_precision():  # float32 products, not TF32: CFR accuracy
        return jax.vmap(one)(moments.means, moments.grams)


@functools.partial(jax.jit, static_argnames="k")
def _residual_covariances(
    subspace: ConceptSubspace,
    X: jax.Array,
    z: jax.Array,
    k: int,
    moments: ClassMoments,
    coef: jax.Array,
) -> jax.Array:
    """Each class's covariance of its regression residuals ``(k, r, r)`` (divided by the class
    size), summed over the residuals themselves.

    With the intercept fitted (the class means of c and of x⊥ meet the regression), a unit's
    residual is a linear map of its class-centred embedding:
    ``c_i - ν_z(x⊥_i) = (x_i - x̄_z) M_z`` with ``M_z = coordᵀ - T coef_z`` (``(d, r)``).
    """
    coord, basis = subspace.coord, subspace.basis
    with full_precision():  # float32 products, not TF32: CFR accuracy
        M = coord.T[None] - (
            coef - coord.T[None] @ (basis.T[None] @ coef)
        )  # T coef without T: (k, d, r)

        def residuals(x, v):
            return (x - moments.means[v][None]) @ M[v]

        cov = _class_outer(X, z, k, residuals) / moments.counts[:, None, None]
    return 0.5 * (cov + jnp.swapaxes(cov, 1, 2))


def fit_cfr(
    X: ArrayLike,
    z: ArrayLike,
    *,
    n_values: int | None = None,
    method: str = "orth",
    ridge: float = 1.0,
    shrinkage: float | str = "ledoit_wolf",
    jitter: float = 1e-6,
) -> CFRModel:
    """Fit the concept subspace, the per-concept-value regressions and their residual Gaussians.

    The regressions come from the class moments (:func:`class_moments`, :func:`fit_regressions`);
    the residual covariances from the residuals themselves, in a second pass over the units
    (n·d·r work against the moments' n·d², and one compilation per ``(n, d, k)`` as well): a
    unit's residual is ``(x_i - x̄_z) M_z`` with ``M_z = coordᵀ - T coef_z`` (``(d, r)``).
    From the moments, ``coord G coordᵀ - coefᵀ cross - crossᵀ coef + coefᵀ Gp coef`` would
    subtract terms as large as c's class variance (and ``‖coef‖² ‖Gp‖``) down to the residual
    variance: when x⊥ predicts c closely that cancellation loses every digit in float32 and can
    leave a negative variance (a NaN Cholesky factor). Summed from the residuals, the rounding
    stays relative to the residuals, and the covariance is that of the coefficients actually
    fitted, so stochastic CFRs spread exactly as the fitted model's residuals.

    Args:
        X: embeddings ``(n, d)`` (their dtype is kept).
        z: concept codes ``(n,)`` in ``0..k-1``, every value present.
        n_values: k (default ``max(z) + 1``).
        method: ``"orth"`` or ``"leace"`` (see :func:`concept_subspace`).
        ridge: ridge penalty (>= 0) of the regressions ``x⊥ → c``. x⊥ lies in a (d - r)-dim
            subspace, so ``ridge = 0`` needs the per-class Gram matrices to be non-singular there.
        shrinkage: LEACE covariance shrinkage.
        jitter: added to the residual covariances' diagonal (relative to their trace) before the
            Cholesky factorisation, for classes with rank-deficient residuals.

    Returns:
        A :class:`CFRModel`.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> z = rng.integers(0, 2, 2000); h = rng.normal(size=(2000, 4))
        >>> X = np.c_[2.0 * z + h[:, 0], h].astype(np.float32)  # concept shifts column 0
        >>> model = fit_cfr(X, z)
        >>> cfr = counterfactuals(model, X)  # (n, k, d): every unit sent to both values
        >>> cfr.shape
        (2000, 2, 5)
        >>> X_true = X.copy(); X_true[:, 0] += 2.0 * (1 - 2 * z)  # the exact counterfactuals
        >>> bool(np.abs(np.asarray(cfr[np.arange(2000), 1 - z]) - X_true).max() < 0.1)
        True
    """
    ridge = float(ridge)
    if not ridge >= 0:
        _checks.fail("ridge", "a penalty >= 0", repr(ridge))
    X, z, k = _check_embeddings(X, z, n_values)
    counts = np.bincount(np.asarray(z), minlength=k)
    if counts.min() < 2:
        _checks.fail("z", "at least two units per concept value", f"counts {counts.tolist()}")
    sub = _fit_subspace(X, z, k, method, shrinkage)
    moments = class_moments(X, z, k)
    coef, intercept = fit_regressions(sub, moments, jnp.asarray(ridge, X.dtype))
    cov = _residual_covariances(sub, X, z, k, moments, coef)
    r = cov.shape[-1]
    scale = jnp.trace(cov, axis1=1, axis2=2)[:, None, None] / r
    chol = jnp.linalg.cholesky(
        cov + (jitter * scale + jnp.finfo(X.dtype).tiny) * jnp.eye(r, dtype=X.dtype)[None]
    )
    return CFRModel(subspace=sub, coef=coef, intercept=intercept, resid_chol=chol)


def counterfactual(
    model: CFRModel, x: jax.Array, target: jax.Array, noise: jax.Array | None = None
) -> jax.Array:
    """CFR of one embedding ``x (d,)`` for concept value ``target``.

    ``noise (r,)``: standard-normal draws for the stochastic CFR (``None``: deterministic).
    """
    sub, coef = model.subspace, model.coef[target]
    with full_precision():  # float32 products, not TF32: CFR accuracy
        c = sub.coord @ (x - sub.center)
        # x⊥ @ coef without forming x⊥ (x⊥ = x - basis c): one read of x, all work in r dimensions.
        c_new = x @ coef - c @ (sub.basis.T @ coef) + model.intercept[target]
        if noise is not None:
            c_new = c_new + model.resid_chol[target] @ noise
        return x + sub.basis @ (c_new - c)  # = x⊥ + basis c_new


def _check_x(model: CFRModel, X: ArrayLike) -> jax.Array:
    _checks.check_ndim("X", X, 2, "of embeddings (n, d)")
    _checks.warn_if_downcast("X", X)
    d = model.coef.shape[1]
    if np.shape(X)[1] != d:
        _checks.fail("X", f"{d} embedding dimensions, as fitted", f"shape {tuple(np.shape(X))}")
    _checks.check_finite("X", X)
    return jnp.asarray(X, model.coef.dtype)


def _check_targets(model: CFRModel, targets: ArrayLike, n: int) -> jax.Array:
    t = jnp.asarray(targets)
    if t.shape != (n,) or not jnp.issubdtype(t.dtype, jnp.integer):
        _checks.fail(
            "targets", f"integer concept codes of shape ({n},)", f"shape {t.shape}, dtype {t.dtype}"
        )
    if _checks.is_concrete(t) and (int(t.min()) < 0 or int(t.max()) >= model.n_values):
        _checks.fail(
            "targets",
            f"codes in 0..{model.n_values - 1}",
            f"values in [{int(t.min())}, {int(t.max())}]",
        )
    return t


# Written for one unit; the vmap over units is the outermost, so units come first (docs/contract.md).
# One unit: its CFR for each target (k, d), one noise draw shared by every target.
_unit_targets = jax.vmap(counterfactual, in_axes=(None, None, 0))
_unit_targets_noisy = jax.vmap(counterfactual, in_axes=(None, None, 0, None))
# One unit and one target: its draws (draws, d) from noise (draws, r); then every target (k, draws, d).
_unit_draws = jax.vmap(counterfactual, in_axes=(None, None, None, 0))
_unit_targets_draws = jax.vmap(_unit_draws, in_axes=(None, None, 0, None))
# Lifted over units: X (n, d), per-unit targets t (n,) or every target (k,), noise (n, r) or (n, draws, r).
_per_unit = jax.vmap(counterfactual, in_axes=(None, 0, 0))  # (n, d)
_per_unit_noisy = jax.vmap(counterfactual, in_axes=(None, 0, 0, 0))  # (n, d)
_all_targets_noisy = jax.vmap(_unit_targets_noisy, in_axes=(None, 0, None, 0))  # (n, k, d)
_to_targets = jax.jit(_per_unit)
_all_targets = jax.jit(jax.vmap(_unit_targets, in_axes=(None, 0, None)))  # (n, k, d)
_sample_to_targets = jax.jit(jax.vmap(_unit_draws, in_axes=(None, 0, 0, 0)))  # (n, draws, d)
_sample_all_targets = jax.jit(
    jax.vmap(_unit_targets_draws, in_axes=(None, 0, None, 0))
)  # (n, k, draws, d)


def counterfactuals(model: CFRModel, X: ArrayLike, targets: ArrayLike | None = None) -> jax.Array:
    """Deterministic CFRs.

    Args:
        X: embeddings ``(n, d)``.
        targets: ``None`` for every concept value (returns ``(n, k, d)``: ``result[i, t]`` is
            unit i's CFR for value t), or per-unit target codes ``(n,)`` (returns ``(n, d)``).
    """
    X = _check_x(model, X)
    if targets is None:
        return _all_targets(model, X, jnp.arange(model.n_values))
    return _to_targets(model, X, _check_targets(model, targets, X.shape[0]))


def sample_counterfactuals(
    model: CFRModel, X: ArrayLike, targets: ArrayLike | None, *, key: KeyLike, draws: int = 1
) -> jax.Array:
    """Stochastic CFRs: ``x⊥ + basis @ (ν_{z'}(x⊥) + L_{z'} ε)``, ``ε ~ N(0, I_r)``.

    Args:
        X: embeddings ``(n, d)``.
        targets: ``None`` for every concept value (returns ``(n, k, draws, d)``: ``result[i, t]``
            holds unit i's draws for value t), or per-unit target codes ``(n,)`` (returns
            ``(n, draws, d)``).
        key: a PRNG key or an int seed. The standard-normal draws ``ε (n, draws, r)`` come from it alone, so every
            target value uses the same ones (common random numbers): ``result[:, t]`` of the
            all-values call equals the call with ``targets = t`` for every unit and the same key.
        draws: CFRs per unit and target value.

    Example:
        >>> import jax, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> z = rng.integers(0, 2, 500); X = rng.normal(size=(500, 4)).astype(np.float32)
        >>> X[:, 0] += 2 * z
        >>> model = fit_cfr(X, z)
        >>> every = sample_counterfactuals(model, X, None, key=0, draws=3)
        >>> every.shape   # (n, k, draws, d)
        (500, 2, 3, 4)
        >>> to_one = sample_counterfactuals(model, X, np.ones(500, int), key=0, draws=3)
        >>> to_one.shape  # (n, draws, d)
        (500, 3, 4)
        >>> bool(np.allclose(every[:, 1], to_one, atol=1e-5))
        True
    """
    X = _check_x(model, X)
    t = None if targets is None else _check_targets(model, targets, X.shape[0])
    draws = _checks.check_positive_int("draws", draws)
    noise = jax.random.normal(as_key(key), (X.shape[0], draws, model.subspace.rank), X.dtype)
    if t is None:
        return _sample_all_targets(model, X, jnp.arange(model.n_values), noise)
    return _sample_to_targets(model, X, t, noise)


def stochastic_proba(
    model: CFRModel,
    proba: Callable[..., ArrayLike],
    X: ArrayLike,
    targets: ArrayLike | None,
    *,
    key: KeyLike,
    draws: int = 32,
    jit: bool | None = None,
) -> jax.Array:
    """Class probabilities averaged over ``draws`` stochastic CFRs.

    Args:
        proba: maps embeddings ``(m, d)`` to probabilities ``(m, C)``: a
            :class:`~cfjax.representations.classifiers.LinearClassifier` (traced as a pytree), any jittable
            callable, or a host (numpy) callable such as a fitted scikit-learn model's
            ``predict_proba``.
        X: embeddings ``(n, d)``.
        targets: ``None`` for every concept value (returns ``(n, k, C)``), or per-unit target
            codes ``(n,)`` (returns ``(n, C)``).
        key: a PRNG key or an int seed, split into one key per draw; each draw's ``ε (n, r)`` is shared by every
            target value, so ``result[:, t]`` of the all-values call equals the call with
            ``targets = t`` for every unit and the same key.
        draws: number of stochastic CFRs averaged.
        jit: ``True``: ``proba`` is traced into one compiled program with the CFRs (draws
            scanned, so memory stays that of one batch of CFRs, ``(n, d)`` or ``(n k, d)``).
            ``False``: the host path: each draw's CFRs are generated by a compiled program,
            copied to the host as a numpy array and passed to ``proba`` in one call (``draws``
            calls in all, each on every unit and target value at once); its outputs are
            averaged in float64. ``None`` (default): try tracing ``proba``, and take the host
            path when it cannot be traced (it converts a traced array to numpy, or branches on
            its values): pass ``jit=False`` for a numpy callable to skip that trial. Both paths
            draw the same noise, so they agree to float rounding.

    Returns:
        The mean probabilities, ``(n, k, C)`` or ``(n, C)``, a JAX array (float32 for a
        float64 host callable when ``jax_enable_x64`` is off).

    Example:
        >>> import jax, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> z = rng.integers(0, 2, 300); X = rng.normal(size=(300, 3)).astype(np.float32)
        >>> X[:, 0] += 2 * z
        >>> model = fit_cfr(X, z)
        >>> W = np.array([[2.0, -2.0], [0.5, 0.0], [0.0, 0.5]], np.float32)
        >>> def host(x):  # numpy only: cannot be traced
        ...     e = np.exp(np.asarray(x) @ W); return e / e.sum(axis=1, keepdims=True)
        >>> def traced(x):
        ...     return jax.nn.softmax(x @ W, axis=-1)
        >>> a = stochastic_proba(model, host, X, None, key=0, draws=4)
        >>> b = stochastic_proba(model, traced, X, None, key=0, draws=4)
        >>> a.shape, bool(np.allclose(a, b, atol=1e-5))
        ((300, 2, 2), True)
    """
    X = _check_x(model, X)
    t = None if targets is None else _check_targets(model, targets, X.shape[0])
    draws = _checks.check_positive_int("draws", draws)
    if jit is not None and not isinstance(jit, bool):
        _checks.fail("jit", "True, False or None", repr(jit))
    if not callable(proba):
        _checks.fail(
            "proba",
            "a callable mapping embeddings (m, d) to probabilities (m, C)",
            type(proba).__name__,
        )
    keys = jax.random.split(as_key(key), draws)
    if jit is not False:
        arrays, static = _split_callable(proba)
        try:
            return _stochastic(model, arrays, static, X, t, keys)
        except _NOT_TRACEABLE:
            if jit:
                raise
    return _stochastic_host(model, proba, X, t, keys)


#: What tracing a host-only (numpy) callable raises: it reads a traced array's values.
_NOT_TRACEABLE = (
    jax.errors.TracerArrayConversionError,
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerIntegerConversionError,
)


@jax.jit
def _cfr_draw(model: CFRModel, X: jax.Array, t: jax.Array | None, key: jax.Array) -> jax.Array:
    """One draw's stochastic CFRs: ``(n, k, d)`` for every value (``t`` None) or ``(n, d)``."""
    noise = jax.random.normal(key, (X.shape[0], model.subspace.rank), X.dtype)
    if t is None:
        return _all_targets_noisy(model, X, jnp.arange(model.coef.shape[0]), noise)
    return _per_unit_noisy(model, X, t, noise)


def _stochastic_host(
    model: CFRModel,
    proba: Callable[..., ArrayLike],
    X: jax.Array,
    t: jax.Array | None,
    keys: jax.Array,
) -> jax.Array:
    """:func:`stochastic_proba`'s host path: one call of ``proba`` per draw on a numpy array."""
    total: np.ndarray | None = None
    dtype = None
    for i in range(keys.shape[0]):  # over draws only: each call takes every unit and target
        cfr = np.asarray(_cfr_draw(model, X, t, keys[i]))
        rows = cfr.reshape(-1, cfr.shape[-1])
        p = np.asarray(proba(rows))
        if p.ndim != 2 or p.shape[0] != rows.shape[0] or not np.issubdtype(p.dtype, np.floating):
            _checks.fail(
                "proba",
                f"floating-point probabilities of shape ({rows.shape[0]}, C) for embeddings "
                f"of shape {rows.shape}",
                f"{p.dtype} of shape {p.shape}",
            )
        dtype = p.dtype
        total = p.astype(np.float64) if total is None else total + p
    assert total is not None  # draws >= 1 (checked by stochastic_proba)
    mean = np.asarray(total / keys.shape[0]).reshape(cfr.shape[:-1] + (-1,))
    return jnp.asarray(mean.astype(jax.dtypes.canonicalize_dtype(dtype)))


def _split_callable(
    f: Callable[..., ArrayLike],
) -> tuple[list[ArrayLike], tuple[PyTreeDef, tuple[object, ...]]]:
    """A callable pytree → (its array leaves, hashable rest), so jit traces parameters, not constants."""
    leaves, treedef = jax.tree.flatten(f)
    is_array = [isinstance(v, (jax.Array, np.ndarray)) for v in leaves]
    arrays = [v for v, a in zip(leaves, is_array) if a]
    rest = tuple(None if a else v for v, a in zip(leaves, is_array))
    return arrays, (treedef, rest)


def _join_callable(
    arrays: list[ArrayLike], static: tuple[PyTreeDef, tuple[object, ...]]
) -> Callable[..., ArrayLike]:
    treedef, rest = static
    it = iter(arrays)
    return jax.tree.unflatten(treedef, [next(it) if v is None else v for v in rest])


@functools.partial(jax.jit, static_argnames="static")
def _stochastic(model, arrays, static, X, t, keys):
    proba = _join_callable(arrays, static)
    n, d = X.shape

    def step(acc, key):
        noise = jax.random.normal(key, (n, model.subspace.rank), X.dtype)
        if t is None:
            cfr = _all_targets_noisy(model, X, jnp.arange(model.coef.shape[0]), noise)  # (n, k, d)
            p = proba(cfr.reshape(-1, d)).reshape(n, cfr.shape[1], -1)
        else:
            p = proba(_per_unit_noisy(model, X, t, noise))
        return acc + p, None

    first = jax.eval_shape(proba, X)
    if (
        len(first.shape) != 2
        or first.shape[0] != n
        or not jnp.issubdtype(first.dtype, jnp.floating)
    ):
        _checks.fail(
            "proba",
            f"floating-point probabilities of shape ({n}, C) for embeddings of shape {(n, d)}",
            f"{first.dtype} of shape {first.shape}",
        )
    shape = first.shape if t is not None else (n, model.coef.shape[0], first.shape[1])
    total, _ = jax.lax.scan(step, jnp.zeros(shape, first.dtype), keys)
    return total / keys.shape[0]
