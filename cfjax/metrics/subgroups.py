"""Subgroup views of a predictor: stratified AUC, the ΔAUC gap, and the observational vs
counterfactual subgroup-mean estimators of paper 000's Proposition 1 (definitions §1).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax.metrics import _arrays, _inputs
from cfjax.metrics.ranking import _masked_auc, _scores
from cfjax.typing import ArrayLike

__all__ = ["stratified_auc", "delta_auc", "SubgroupMeans", "subgroup_means"]


def _group_codes(name: str, groups: ArrayLike, n_ref: ArrayLike, num_groups: int | None):
    """Integer codes in [0, G) and G. Concrete labels of any kind are encoded with
    ``np.unique``; traced ones must already be codes, with ``num_groups`` given."""
    _checks.check_ndim(name, groups, 1, "of shape (n,)")
    _checks.check_same_len("p", n_ref, name, groups)
    if num_groups is not None:
        num_groups = _checks.check_positive_int("num_groups", num_groups)
        if _checks.is_concrete(groups):
            g = np.asarray(groups)
            if not np.issubdtype(g.dtype, np.integer) or g.min() < 0 or g.max() >= num_groups:
                _checks.fail(
                    name,
                    f"integer codes in [0, {num_groups})",
                    f"values {np.unique(g)[:5].tolist()}",
                )
        return jnp.asarray(groups), num_groups
    if not _checks.is_concrete(groups):
        _checks.fail("num_groups", "an int when `groups` is traced (inside jit/vmap)", "None")
    _, codes = np.unique(np.asarray(groups), return_inverse=True)
    return jnp.asarray(codes.reshape(-1).astype(np.int32)), int(codes.max()) + 1


def stratified_auc(
    p: ArrayLike, y: ArrayLike, groups: ArrayLike, num_groups: int | None = None
) -> jax.Array:
    """AUC within each stratum of ``groups``, shape ``(G,)`` (strata in sorted label order).

    Args:
      p: ``(n,)`` scores (any finite values). y: ``(n,)`` labels in {0, 1}. groups: ``(n,)`` stratum labels.
      num_groups: G, needed only when ``groups`` is traced (it must then hold codes 0..G−1).

    A stratum without both classes has no AUC: a ``ValidationError`` for concrete input,
    NaN when traced.
    """
    _scores("p", p)
    _inputs.labels("y", y, "p", p)
    dtype = _arrays.float_dtype(p)
    p, y = _arrays.as_float(p, dtype), _arrays.as_float(y, dtype)
    codes, g = _group_codes("groups", groups, p, num_groups)
    if _checks.is_concrete(y) and _checks.is_concrete(codes):
        yy, cc = np.asarray(y), np.asarray(codes)
        for s in range(g):
            classes = np.unique(yy[cc == s])
            if len(classes) < 2:
                _checks.fail(
                    "groups",
                    "both classes of `y` in every stratum",
                    f"stratum {s} with classes {classes.tolist()}",
                )
    masks = codes[None, :] == jnp.arange(g, dtype=codes.dtype)[:, None]
    return jax.vmap(_masked_auc, in_axes=(None, None, 0))(p, y, masks)


def delta_auc(
    p: ArrayLike, y: ArrayLike, groups: ArrayLike, num_groups: int | None = None
) -> jax.Array:
    """ΔAUC: ``max_s AUC_s − min_s AUC_s`` over the strata of an attribute (paper 000).

    Example:
      >>> import numpy as np
      >>> p = np.array([0.1, 0.9, 0.2, 0.8, 0.6, 0.4], np.float32)
      >>> y = np.array([0, 1, 0, 1, 0, 1]); s = np.array([0, 0, 0, 1, 1, 1])
      >>> float(delta_auc(p, y, s))
      0.5
    """
    aucs = stratified_auc(p, y, groups, num_groups)
    return jnp.max(aucs) - jnp.min(aucs)


class SubgroupMeans(NamedTuple):
    """Estimators of ``E[g(X) | do(A = z)]`` for each attribute value z, shape ``(Z,)`` each.

    ``obs_*``: mean of ``p_obs`` over units with ``a = z`` (standard error ``sd/√n_z``).
    ``cf_*``: mean over all n units of ``p_do[:, z]`` (standard error ``sd/√n``).
    Standard deviations use ``ddof = 1``.
    """

    obs_mean: jax.Array
    obs_se: jax.Array
    obs_count: jax.Array
    cf_mean: jax.Array
    cf_se: jax.Array


def subgroup_means(p_obs: ArrayLike, a: ArrayLike, p_do: ArrayLike) -> SubgroupMeans:
    """Observational vs counterfactual subgroup means (paper 000, Proposition 1).

    Args:
      p_obs: ``(n,)`` predictions on the observed units.
      a: ``(n,)`` observed attribute codes in ``[0, Z)``.
      p_do: ``(n, Z)`` predictions with A alone intervened to each value, ``p_do[i, z] =
        g(x̃_i(do(A = z)))``.

    The counterfactual estimator averages over all n units instead of the ``n_z`` in the
    stratum, so its variance is smaller (Proposition 1).

    Example:
      >>> import numpy as np
      >>> r = subgroup_means(np.array([0.2, 0.4, 0.9], np.float32), np.array([0, 0, 1]),
      ...                    np.array([[0.2, 0.8], [0.4, 0.9], [0.3, 0.9]], np.float32))
      >>> [round(v, 4) for v in r.obs_mean.tolist()], [round(v, 4) for v in r.cf_mean.tolist()]
      ([0.3, 0.9], [0.3, 0.8667])
    """
    p_obs, p_do, _, _ = _inputs.prepare(p_obs=p_obs, p_cf=p_do)
    _checks.check_ndim("a", a, 1, "of shape (n,)")
    _checks.check_same_len("p_obs", p_obs, "a", a)
    z = p_do.shape[1]
    if _checks.is_concrete(a):
        av = np.asarray(a)
        if not np.issubdtype(av.dtype, np.integer) or av.min() < 0 or av.max() >= z:
            _checks.fail(
                "a",
                f"integer codes in [0, {z}) matching the columns of `p_do`",
                f"values {np.unique(av)[:5].tolist()}",
            )
    a = jnp.asarray(a)
    onehot = (a[:, None] == jnp.arange(z, dtype=a.dtype)[None, :]).astype(p_obs.dtype)  # (n, Z)
    count = jnp.sum(onehot, axis=0)
    mean = (p_obs @ onehot) / count
    ss = (jnp.square(p_obs) @ onehot) - count * jnp.square(mean)
    sd = jnp.sqrt(jnp.maximum(ss, 0) / (count - 1))
    n = p_obs.shape[0]
    cf_mean = jnp.mean(p_do, axis=0)
    cf_sd = jnp.std(p_do, axis=0, ddof=1)
    return SubgroupMeans(mean, sd / jnp.sqrt(count), count, cf_mean, cf_sd / math.sqrt(n))
