"""Rank statistics and AUC, exact with ties (as scipy and scikit-learn compute them).

All of them work from one integer sort per score vector (floats are mapped to order-
preserving integer keys, which XLA sorts several times faster than floats) plus binary
searches: O(n log n) work and O(n) memory. Kendall's τ_b counts discordant pairs with a
bottom-up merge count (O(n log² n) work, O(n) memory), never an n×n matrix.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import DTypeLike

from cfjax import _checks
from cfjax.metrics import _arrays
from cfjax.typing import ArrayLike

__all__ = ["rankdata", "spearman", "kendall_tau_b", "rank_change", "auc"]


# ----------------------------------------------------------------------------- validation


def _scores(name: str, x: ArrayLike) -> None:
    _checks.check_ndim(name, x, 1, "of shape (n,)")
    _checks.check_nonempty(name, x)
    _checks.check_finite(name, x)


def _pair(a: ArrayLike, b: ArrayLike) -> tuple[jax.Array, jax.Array]:
    _scores("a", a)
    _scores("b", b)
    _checks.check_same_len("a", a, "b", b)
    dtype = _arrays.float_dtype(a, b)
    return _arrays.as_float(a, dtype), _arrays.as_float(b, dtype)


# ----------------------------------------------------------------------------- public API


def rankdata(x: ArrayLike) -> jax.Array:
    """Average ranks 1..n of ``x (n,)``, ties averaged (``scipy.stats.rankdata``).

    Example:
      >>> rankdata([0.3, 0.1, 0.3]).tolist()
      [2.5, 1.0, 2.5]
    """
    _scores("x", x)
    return _ranks_jit(jnp.asarray(x, _arrays.float_dtype(x)))


def spearman(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Spearman's ρ of ``a (n,)`` and ``b (n,)``: Pearson correlation of average ranks.
    NaN when either input is constant (as ``scipy.stats.spearmanr``).

    Example:
      >>> round(float(spearman([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0])), 4)
      0.8
    """
    return _spearman_jit(*_pair(a, b))


def kendall_tau_b(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Kendall's τ_b of ``a (n,)`` and ``b (n,)``, ties handled as ``scipy.stats.kendalltau``.

    Example:
      >>> round(float(kendall_tau_b([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0])), 4)
      0.6667
    """
    return _kendall_jit(*_pair(a, b))


def rank_change(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Mean absolute change of average rank, ``mean_i |r_i − r̄_i|`` (ranks 1..n).

    Example:
      >>> round(float(rank_change([1.0, 2.0, 3.0], [3.0, 2.0, 1.0])), 4)
      1.3333
    """
    return _rank_change_jit(*_pair(a, b))


def auc(p: ArrayLike, y: ArrayLike) -> jax.Array:
    """Area under the ROC curve of scores ``p (n,)`` for labels ``y (n,)``, ties counted half
    (equal to ``sklearn.metrics.roc_auc_score``). Needs both classes.

    Example:
      >>> float(auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]))
      0.75
    """
    _scores("p", p)
    _checks.check_ndim("y", y, 1, "of shape (n,)")
    _checks.check_same_len("p", p, "y", y)
    _checks.check_binary_labels("y", y)
    if _checks.is_concrete(y):
        n_pos = int(np.sum(np.asarray(y) == 1))
        if n_pos in (0, len(np.asarray(y))):
            _checks.fail("y", "both classes 0 and 1 for an AUC", f"only class {int(n_pos > 0)}")
    dtype = _arrays.float_dtype(p)
    p = jnp.asarray(p).astype(dtype)
    y = jnp.asarray(y).astype(dtype)
    return _auc_jit(p, y)


# ----------------------------------------------------------------------------- kernels


def _ranks(x: jax.Array) -> jax.Array:
    return _arrays.average_ranks_from_bounds(*_arrays.rank_bounds(x), x.dtype)


def _spearman(ra: jax.Array, rb: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    # Average ranks always sum to n(n+1)/2, so centring by (n+1)/2 is exact: a constant input
    # gives exactly zero spread (NaN result, as scipy), and float32 keeps its precision.
    # With `mask`, the ranks among the n units in it (the others ranked after them), centred
    # by (n+1)/2 and the others left out.
    centre: float | jax.Array
    if mask is None:
        centre = (ra.shape[0] + 1) / 2
        ca = ra - centre
        cb = rb - centre
    else:
        centre = (jnp.sum(mask).astype(ra.dtype) + 1) / 2
        ca = jnp.where(mask, ra - centre, 0)
        cb = jnp.where(mask, rb - centre, 0)
    den = jnp.sqrt(jnp.sum(ca * ca) * jnp.sum(cb * cb))
    rho = jnp.sum(ca * cb) / jnp.where(den > 0, den, 1)
    return jnp.where(den > 0, jnp.clip(rho, -1, 1), jnp.nan)


def _tied_pairs(lower: jax.Array, upper: jax.Array, dtype: DTypeLike) -> jax.Array:
    """Σ over tie groups of c(c−1)/2, from each element's group bounds."""
    return jnp.sum((upper - lower - 1).astype(dtype)) / 2


def _lexsort_by_rank(lx: jax.Array, ly: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Rank pairs sorted lexicographically by (x, y). Inputs are integer ranks in [0, n)."""
    n = lx.shape[0]
    x64 = jax.config.jax_enable_x64  # type: ignore[attr-defined]  # a run-time flag
    wide = jnp.int64 if x64 else jnp.int32
    if n * n <= jnp.iinfo(wide).max:  # pack both ranks into one integer: one fast sort
        key = jnp.sort(lx.astype(wide) * n + ly.astype(wide))
        return (key // n).astype(jnp.int32), (key % n).astype(jnp.int32)
    sx, sy = lax.sort((lx, ly), num_keys=2)
    return sx, sy


_BASE_BLOCK = 32  # block size below which inversions are counted pairwise


def _count_inversions(v: jax.Array, dtype: DTypeLike) -> jax.Array:
    """Number of pairs i < j with v[i] > v[j], for integers ``v`` in [0, n).

    Bottom-up merge count: at block size b, every right-half element of a 2b-block counts the
    left-half elements above it. The halves are merged by an integer sort of ``2 v + side``
    (equal values: left first), after which a right element at merged position m, the j-th
    right element, has exactly ``b − (m − j)`` larger left elements. log2(n) levels.
    """
    n = v.shape[0]
    size = 1 << max(1, (n - 1).bit_length())
    v = jnp.concatenate([v, jnp.full((size - n,), n, v.dtype)])  # pads: largest, at the end
    # Small blocks: count within-block inversions by brute force, then sort each block.
    b = min(_BASE_BLOCK, size)
    blocks = v.reshape(-1, b)
    pos = jnp.arange(b)
    later = pos[:, None] < pos[None, :]
    inverted = (blocks[:, :, None] > blocks[:, None, :]) & later[None]
    total = jnp.sum(jnp.sum(inverted, axis=(1, 2)).astype(dtype))
    v = jnp.sort(blocks, axis=1).reshape(-1)
    while b < size:
        side = (jnp.arange(2 * b) >= b).astype(v.dtype)[None, :]
        merged = jnp.sort(v.reshape(-1, 2 * b) * 2 + side, axis=1)
        right = merged & 1
        before_right = jnp.cumsum(right, axis=1, dtype=v.dtype) - right
        larger_left = b - jnp.arange(2 * b, dtype=v.dtype)[None, :] + before_right
        total = total + jnp.sum(jnp.where(right == 1, larger_left, 0).astype(dtype))
        v = (merged >> 1).reshape(-1)
        b *= 2
    return total


def _kendall_tau_b(
    bounds_a, bounds_b, dtype: DTypeLike, mask: jax.Array | None = None
) -> jax.Array:
    """τ_b from the rank bounds of both orders. With ``mask``, of the units in it, the bounds
    computed with the others at the largest key in both orders: those come last in the
    lexicographic order and above every unit in both, so they add no discordant pair; their
    ties and pairs are left out of the counts."""
    (la, ua), (lb, ub) = bounds_a, bounds_b
    n = la.shape[0]
    sa, sb = _lexsort_by_rank(la, lb)
    discordant = _count_inversions(sb, dtype)
    idx = jnp.arange(n, dtype=jnp.int32)
    new = jnp.concatenate([jnp.ones((1,), bool), (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])])
    start = lax.cummax(jnp.where(new, idx, 0))
    if mask is None:
        joint_ties = jnp.sum((idx - start).astype(dtype))
        ties_a = _tied_pairs(la, ua, dtype)
        ties_b = _tied_pairs(lb, ub, dtype)
        total = jnp.asarray(n * (n - 1) / 2, dtype)
    else:
        m = jnp.sum(mask).astype(jnp.int32)  # the units: sorted positions 0 .. m - 1
        joint_ties = jnp.sum(jnp.where(idx < m, idx - start, 0).astype(dtype))
        ties_a = jnp.sum(jnp.where(mask, ua - la - 1, 0).astype(dtype)) / 2
        ties_b = jnp.sum(jnp.where(mask, ub - lb - 1, 0).astype(dtype)) / 2
        mf = m.astype(dtype)
        total = mf * (mf - 1) / 2
    con_minus_dis = total - ties_a - ties_b + joint_ties - 2 * discordant
    den = jnp.sqrt(total - ties_a) * jnp.sqrt(total - ties_b)
    tau = con_minus_dis / jnp.where(den > 0, den, 1)
    return jnp.where(den > 0, jnp.clip(tau, -1, 1), jnp.nan)


def _masked_auc(p: jax.Array, y: jax.Array, mask: jax.Array) -> jax.Array:
    """AUC among the units where ``mask`` is True (Mann–Whitney with average ranks).

    Units outside the mask get the largest key, so they rank after every member and the
    members' ranks are their ranks among members. NaN when a class is absent.
    """
    key = _arrays.sortable_key(p)
    key = jnp.where(mask, key, jnp.iinfo(key.dtype).max)
    lower, upper = _arrays.key_rank_bounds(key)
    ranks = _arrays.average_ranks_from_bounds(lower, upper, p.dtype)
    pos = (y == 1) & mask
    n_pos = jnp.sum(pos).astype(p.dtype)
    n_neg = jnp.sum(mask & ~pos).astype(p.dtype)
    u = jnp.sum(jnp.where(pos, ranks, 0)) - n_pos * (n_pos + 1) / 2
    den = n_pos * n_neg
    return jnp.where(den > 0, u / jnp.where(den > 0, den, 1), jnp.nan)


# One compiled program per public function and input shape (each is otherwise a few dozen
# operations dispatched one by one, every one compiled on its first call per shape).
_ranks_jit = jax.jit(_ranks)
_spearman_jit = jax.jit(lambda a, b: _spearman(_ranks(a), _ranks(b)))
_kendall_jit = jax.jit(
    lambda a, b: _kendall_tau_b(_arrays.rank_bounds(a), _arrays.rank_bounds(b), a.dtype)
)
_rank_change_jit = jax.jit(lambda a, b: jnp.mean(jnp.abs(_ranks(a) - _ranks(b))))
_auc_jit = jax.jit(lambda p, y: _masked_auc(p, y, jnp.ones(p.shape, bool)))
