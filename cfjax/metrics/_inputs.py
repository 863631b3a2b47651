"""Boundary validation of the metric inputs ``p_obs (n,)``, ``p_cf (n, K)``, ``y (n,)``, and of
class probabilities ``p_obs (n, C)``, ``p_cf (n, K, C)`` for the stability metrics."""

from __future__ import annotations

from typing import overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from cfjax import _checks
from cfjax.metrics import _arrays
from cfjax.typing import Array, ArrayLike


def scores(name: str, p: ArrayLike) -> None:
    _checks.check_ndim(name, p, 1, "of shape (n,)")
    _checks.check_nonempty(name, p)
    _checks.check_probabilities(name, p)


def counterfactual_scores(name: str, p_cf: ArrayLike) -> None:
    _checks.check_ndim(name, p_cf, 2, "of shape (n, K)")
    _checks.check_nonempty(name, p_cf)
    _checks.check_probabilities(name, p_cf)


def labels(name: str, y: ArrayLike, n_name: str, ref: ArrayLike) -> None:
    _checks.check_ndim(name, y, 1, "of shape (n,)")
    _checks.check_same_len(n_name, ref, name, y)
    _checks.check_binary_labels(name, y)


def expected_labels(name: str, y: ArrayLike, n_name: str, ref: ArrayLike) -> None:
    """Labels in {0, 1}, or expected labels in [0, 1] (a float array), shape ``(n,)``."""
    _checks.check_ndim(name, y, 1, "of shape (n,)")
    _checks.check_same_len(n_name, ref, name, y)
    dtype = np.dtype(getattr(y, "dtype", None) or np.asarray(y).dtype)
    if np.issubdtype(dtype, np.floating):
        _checks.check_probabilities(name, y)
    else:
        _checks.check_binary_labels(name, y)


# The overloads: an input left out (None) comes back None, a given one as an array.
@overload
def prepare(*, p_obs: ArrayLike, y: ArrayLike) -> tuple[Array, None, Array, None]: ...
@overload
def prepare(
    *,
    p_obs: ArrayLike,
    p_cf: ArrayLike,
    y: ArrayLike | None = None,
    weights: ArrayLike | None = None,
) -> tuple[Array, Array, Array | None, Array]: ...
@overload
def prepare(
    *, p_cf: ArrayLike, weights: ArrayLike | None = None
) -> tuple[None, Array, None, Array]: ...
@overload
def prepare(
    *, p_cf: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None
) -> tuple[None, Array, Array, Array]: ...
@overload
def prepare(
    p_obs: ArrayLike | None = None,
    p_cf: ArrayLike | None = None,
    y: ArrayLike | None = None,
    weights: ArrayLike | None = None,
) -> tuple[Array | None, Array | None, Array | None, Array | None]: ...
def prepare(
    p_obs: ArrayLike | None = None,
    p_cf: ArrayLike | None = None,
    y: ArrayLike | None = None,
    weights: ArrayLike | None = None,
) -> tuple[jax.Array | None, jax.Array | None, jax.Array | None, jax.Array | None]:
    """Validate whichever of the four inputs are given and convert them to one float dtype.

    Returns ``(p_obs, p_cf, y, q)``; ``q`` is resolved (uniform when None) only if ``p_cf``
    is given.
    """
    if p_obs is not None:
        scores("p_obs", p_obs)
    if p_cf is not None:
        counterfactual_scores("p_cf", p_cf)
    if p_obs is not None and p_cf is not None:
        _checks.check_same_len("p_obs", p_obs, "p_cf", p_cf)
    ref_name, ref = ("p_obs", p_obs) if p_obs is not None else ("p_cf", p_cf)
    if y is not None:
        assert ref is not None, "labels come with scores"
        labels("y", y, ref_name, ref)
    dtype = _arrays.float_dtype(p_obs, p_cf)
    q = None
    if p_cf is not None:
        q = _arrays.resolve_weights(weights, jnp.shape(p_cf)[1], dtype)
    cast = lambda v: None if v is None else _arrays.as_float(v, dtype)  # noqa: E731
    return cast(p_obs), cast(p_cf), cast(y), q


def check_simplex_rows(name: str, p: ArrayLike, atol: float = 1e-3) -> None:
    """Rows along the last axis sum to 1 within ``atol`` (concrete inputs only)."""
    if not _checks.is_concrete(p):
        return
    sums = np.asarray(jnp.sum(jnp.asarray(p), axis=-1), dtype=np.float64)
    worst = float(np.max(np.abs(sums - 1.0)))
    if not worst <= atol:  # also catches NaN
        _checks.fail(
            name,
            f"class probabilities whose last axis sums to 1 (within {atol:g})",
            f"a row summing to {float(sums.flat[np.argmax(np.abs(sums - 1.0))]):.6g}",
        )


def class_probabilities(name: str, p: ArrayLike, ndim: int, what: str) -> None:
    _checks.check_ndim(name, p, ndim, what)
    _checks.check_nonempty(name, p)
    _checks.check_probabilities(name, p)
    check_simplex_rows(name, p)


@overload
def prepare_stability(
    p_obs: ArrayLike, p_cf: ArrayLike, weights: ArrayLike | None = None, tau: ArrayLike = 0.5
) -> tuple[Array, Array, Array, bool]: ...
@overload
def prepare_stability(
    p_obs: None = None, *, p_cf: ArrayLike, weights: ArrayLike | None = None, tau: ArrayLike = 0.5
) -> tuple[None, Array, Array, bool]: ...
@overload
def prepare_stability(
    p_obs: ArrayLike | None = None,
    p_cf: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    tau: ArrayLike = 0.5,
) -> tuple[Array | None, Array | None, Array | None, bool]: ...
def prepare_stability(
    p_obs: ArrayLike | None = None,
    p_cf: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    tau: ArrayLike = 0.5,
) -> tuple[jax.Array | None, jax.Array | None, jax.Array | None, bool]:
    """Validate the inputs of a stability metric, binary scores or class probabilities.

    Binary: ``p_obs (n,)``, ``p_cf (n, K)``. Class probabilities: ``p_obs (n, C)``,
    ``p_cf (n, K, C)`` (rows summing to 1); decisions are then the argmax, so ``tau`` must be
    left at 0.5. Returns ``(p_obs, p_cf, q, multiclass)``, ``q`` resolved when ``p_cf`` is
    given.
    """
    if p_cf is not None:
        if np.ndim(p_cf) not in (2, 3):
            _checks.fail(
                "p_cf",
                "a 2-d array (n, K) of scores or a 3-d array (n, K, C) of class probabilities",
                f"shape {np.shape(p_cf)}",
            )
        multiclass = np.ndim(p_cf) == 3
    else:
        if _ndim(p_obs) not in (1, 2):
            _checks.fail(
                "p_obs",
                "a 1-d array (n,) of scores or a 2-d array (n, C) of class probabilities",
                f"shape {_checks.shape_of(p_obs)}",
            )
        multiclass = _ndim(p_obs) == 2
    if not multiclass:
        _checks.check_threshold("tau", tau)
        p_obs, p_cf, _, q = prepare(p_obs=p_obs, p_cf=p_cf, weights=weights)
        return p_obs, p_cf, q, False
    if _checks.is_concrete(tau) and not (np.shape(tau) == () and float(np.asarray(tau)) == 0.5):
        _checks.fail(
            "tau",
            "0.5 (the default) with class probabilities, whose decision is the argmax",
            repr(tau),
        )
    if p_cf is not None:
        class_probabilities("p_cf", p_cf, 3, "of class probabilities (n, K, C)")
    if p_obs is not None:
        if p_cf is not None and np.ndim(p_obs) != 2:
            _checks.fail(
                "p_obs",
                "class probabilities (n, C) like `p_cf` (n, K, C)",
                f"shape {np.shape(p_obs)}",
            )
        class_probabilities("p_obs", p_obs, 2, "of class probabilities (n, C)")
    if p_obs is not None and p_cf is not None:
        n, c = np.shape(p_obs)
        if np.shape(p_cf)[0] != n or np.shape(p_cf)[2] != c:
            _checks.fail(
                "p_cf",
                f"shape ({n}, K, {c}) to match `p_obs` {np.shape(p_obs)}",
                f"shape {np.shape(p_cf)}",
            )
    dtype = _arrays.float_dtype(p_obs, p_cf)
    q = None if p_cf is None else _arrays.resolve_weights(weights, np.shape(p_cf)[1], dtype)
    cast = lambda v: None if v is None else _arrays.as_float(v, dtype)  # noqa: E731
    return cast(p_obs), cast(p_cf), q, True


def is_multiclass(p_obs: ArrayLike | None, p_cf: ArrayLike | None) -> bool:
    """Class probabilities (``p_cf (n, K, C)`` or ``p_obs (n, C)``) rather than binary scores."""
    return _ndim(p_cf) == 3 or _ndim(p_obs) == 2


def _ndim(x: ArrayLike | None) -> int:
    """``np.ndim``, 0 for None."""
    return len(_checks.shape_of(x))


def check_class_labels(name: str, y: ArrayLike, n_classes: int) -> None:
    """Integer values in ``0..n_classes-1`` (concrete inputs only; bool counts as 0/1)."""
    if not _checks.is_concrete(y):
        return
    v = np.asarray(y)
    if v.dtype == bool:
        v = v.astype(np.int64)
    if not (np.issubdtype(v.dtype, np.integer) or np.issubdtype(v.dtype, np.floating)):
        _checks.fail(name, f"integer class labels in 0..{n_classes - 1}", f"dtype {v.dtype}")
    bad = (
        ~np.isfinite(v) | (v != np.round(v)) | (v < 0) | (v > n_classes - 1)
        if np.issubdtype(v.dtype, np.floating)
        else (v < 0) | (v > n_classes - 1)
    )
    if bad.any():
        found = np.unique(v[bad])[:5].tolist()
        _checks.fail(
            name, f"integer class labels in 0..{n_classes - 1}", f"other values, e.g. {found}"
        )


def _label_shape(name: str, y: ArrayLike, shape: tuple[int, ...], what: str) -> None:
    if tuple(np.shape(y)) != tuple(shape):
        _checks.fail(name, f"shape {tuple(shape)} {what}", f"shape {tuple(np.shape(y))}")


def prepare_counterfactual_labels(
    y_cf: ArrayLike, cf_shape: tuple[int, ...], dtype: DTypeLike
) -> jax.Array:
    """Binary counterfactual labels ``y_cf (n, K)`` in {0, 1}, matching ``p_cf (n, K)``, cast
    to the scores' float dtype."""
    _label_shape(
        "y_cf", y_cf, cf_shape[:2], "(n, K), one label per unit and intervention, like `p_cf`"
    )
    _checks.check_binary_labels("y_cf", y_cf)
    return _arrays.as_float(y_cf, dtype)


def prepare_class_labels(
    y: ArrayLike | None, y_cf: ArrayLike | None, cf_shape: tuple[int, ...]
) -> tuple[jax.Array | None, jax.Array | None]:
    """Integer labels ``y (n,)`` and ``y_cf (n, K)`` in ``0..C-1`` for class probabilities
    ``p_cf`` of shape ``(n, K, C)``; returned as int32 (None stays None)."""
    n, k, c = cf_shape
    out: list[Array | None] = []
    for name, v, shape, what in (
        ("y", y, (n,), "(n,), one label per unit, like `p_obs`"),
        ("y_cf", y_cf, (n, k), "(n, K), one label per unit and intervention, like `p_cf`"),
    ):
        if v is None:
            out.append(None)
            continue
        _label_shape(name, v, shape, what)
        check_class_labels(name, v, c)
        out.append(jnp.asarray(v).astype(jnp.int32))
    return out[0], out[1]
