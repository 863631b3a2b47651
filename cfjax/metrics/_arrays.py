"""Array plumbing shared by the metric modules: dtype handling, weights, sortable keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import DTypeLike

from cfjax import _checks
from cfjax.typing import ArrayLike


def float_dtype(*xs: ArrayLike | None) -> jnp.dtype:
    """The common floating dtype of ``xs`` (float32 unless a float64 input and x64 are on)."""
    dtypes = [jnp.asarray(x).dtype for x in xs if x is not None]
    dtype = jnp.result_type(*dtypes) if dtypes else jnp.float32
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    return jnp.dtype(dtype)


def as_float(x: ArrayLike, dtype: DTypeLike) -> jax.Array:
    return jnp.asarray(x).astype(dtype)


def resolve_weights(
    weights: ArrayLike | None, k: int, dtype: DTypeLike, name: str = "weights"
) -> jax.Array:
    """Validated intervention weights ``q`` of shape ``(K,)``; uniform ``1/K`` when None."""
    if weights is None:
        return jnp.full((k,), 1.0 / k, dtype)
    _checks.check_weights(name, weights, k)
    return as_float(weights, dtype)


def sortable_key(x: jax.Array) -> jax.Array:
    """Integer keys with the same order as the floats ``x`` (ties kept as ties).

    Sorting integers is several times faster than sorting floats on XLA:CPU, whose float
    comparator has to order NaNs. ``-0.0`` and ``0.0`` map to the same key.
    """
    if x.dtype == jnp.float64:
        itype = jnp.int64
    else:
        x = x.astype(jnp.float32)
        itype = jnp.int32
    x = jnp.where(x == 0, jnp.zeros_like(x), x)
    bits = lax.bitcast_convert_type(x, itype)
    flip = jnp.array(jnp.iinfo(itype).max, itype)
    return jnp.where(bits < 0, bits ^ flip, bits)


def rank_bounds(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """For each element, ``(#elements < x_i, #elements <= x_i)`` as int32, shape ``(n,)``.

    One integer sort and two binary searches: O(n log n) work, O(n) memory.
    The average rank (1-based, ties averaged as ``scipy.stats.rankdata``) is
    ``(lower + upper + 1) / 2``.
    """
    return key_rank_bounds(sortable_key(x))


def key_rank_bounds(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """:func:`rank_bounds` for integer keys that are already sortable."""
    sorted_key = jnp.sort(key)
    lower = jnp.searchsorted(sorted_key, key, side="left").astype(jnp.int32)
    # End of each tie group, indexed by sorted position: a reverse running minimum over the
    # positions where the next key differs. Gathering it at ``lower`` gives ``upper``.
    n = key.shape[0]
    idx = jnp.arange(n, dtype=jnp.int32)
    last = jnp.concatenate([sorted_key[1:] != sorted_key[:-1], jnp.ones((1,), bool)])
    group_end = lax.cummin(jnp.where(last, idx + 1, n), reverse=True)
    return lower, group_end[lower]


def average_ranks_from_bounds(lower: jax.Array, upper: jax.Array, dtype: DTypeLike) -> jax.Array:
    return (lower + upper + 1).astype(dtype) / 2
