"""Many predictors at once: one vmapped, jitted evaluation sharded over the available devices."""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from cfjax import _checks
from cfjax.metrics import _arrays, _inputs
from cfjax.metrics.report import MarginalisationReport, _evaluate, check_options

__all__ = ["evaluate_many"]


def evaluate_many(
    p_obs: Any,
    p_cf: Any,
    y: Any = None,
    *,
    weights: Any = None,
    tau: Any = 0.5,
    alphas: Sequence[float] = (0.5, 0.25, 0.1),
    n_bins: int = 15,
    devices: Sequence[jax.Device] | None = None,
    batch_size: int | None | str = "auto",
) -> MarginalisationReport:
    """:func:`~cfjax.metrics.evaluate` for P predictors on the same units and labels.

    Args:
      p_obs: ``(P, n)`` predictions on the observed units, one row per predictor.
      p_cf: ``(P, n, K)`` predictions on the counterfactuals.
      y, weights, tau, alphas, n_bins: as in ``evaluate`` (shared by all predictors).
      devices: devices to shard the predictor axis over; default all devices of the default
        backend (several CPU devices exist only if the caller asked XLA for them, e.g.
        ``XLA_FLAGS=--xla_force_host_platform_device_count=2``). P is padded to a multiple of
        the device count and the padding dropped from the result.
      batch_size: predictors evaluated together on a device. ``None``: all of a device's
        predictors in one vmap (best on accelerators); an int: ``lax.map`` over chunks of that
        many, which keeps each predictor's working set in cache (best on CPU). ``"auto"``
        picks 1 on CPU and None elsewhere.

    Returns:
      A report whose every field has a leading axis of length P.

    Example:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> p_cf = rng.uniform(size=(3, 50, 16)).astype(np.float32)
      >>> evaluate_many(p_cf[..., 0], p_cf, rng.integers(0, 2, 50)).risk_cvar.shape
      (3, 3)
    """
    alphas, n_bins = check_options(alphas, n_bins, tau)
    _checks.check_ndim("p_obs", p_obs, 2, "of shape (P, n)")
    _checks.check_ndim("p_cf", p_cf, 3, "of shape (P, n, K)")
    _checks.check_nonempty("p_obs", p_obs)
    _checks.check_nonempty("p_cf", p_cf)
    n_pred, n = np.shape(p_obs)
    if np.shape(p_cf)[:2] != (n_pred, n):
        _checks.fail("p_cf", f"shape ({n_pred}, {n}, K) to match `p_obs` {np.shape(p_obs)}",
                     f"shape {np.shape(p_cf)}")
    _checks.check_probabilities("p_obs", p_obs)
    _checks.check_probabilities("p_cf", p_cf)
    if y is not None:
        _inputs.labels("y", y, "p_obs[0]", np.zeros(n))
    dtype = _arrays.float_dtype(p_obs, p_cf)
    q = _arrays.resolve_weights(weights, np.shape(p_cf)[2], dtype)
    y = None if y is None else _arrays.as_float(y, dtype)
    p_obs = jnp.asarray(p_obs).astype(dtype)
    p_cf = jnp.asarray(p_cf).astype(dtype)
    devices = tuple(jax.devices() if devices is None else devices)
    if batch_size == "auto":
        batch_size = 1 if devices[0].platform == "cpu" else None
    elif batch_size is not None:
        batch_size = _checks.check_positive_int("batch_size", batch_size)
    pad = (-n_pred) % len(devices)
    if pad:
        p_obs = jnp.concatenate([p_obs, jnp.repeat(p_obs[-1:], pad, axis=0)])
        p_cf = jnp.concatenate([p_cf, jnp.repeat(p_cf[-1:], pad, axis=0)])
    tau = jnp.asarray(tau, dtype)
    mesh = jax.sharding.Mesh(np.asarray(devices), ("predictors",))
    run = _sweep(mesh, y is None, alphas, n_bins, batch_size, weights is None)
    report = run(p_obs, p_cf, q, tau) if y is None else run(p_obs, p_cf, q, tau, y)
    return jax.tree.map(lambda v: v[:n_pred], report) if pad else report


@functools.lru_cache(maxsize=64)
def _sweep(mesh, label_free: bool, alphas, n_bins: int, batch_size: int | None, uniform: bool):
    """A jitted function evaluating the local predictors of each device, sharded over
    ``mesh``: vmap in chunks of ``batch_size`` (``lax.map``) or all at once (None)."""

    def local(p_obs, p_cf, q, tau, y=None):
        def one(pair):
            return _evaluate(pair[0], pair[1], y, q, tau, alphas=alphas, n_bins=n_bins,
                             uniform=uniform)

        if batch_size is None:
            return jax.vmap(one)((p_obs, p_cf))
        # batch_size=1 is a plain loop: lax.map(batch_size=1) would vmap over a unit axis,
        # and the batched kernels are slower than the unbatched ones.
        return jax.lax.map(one, (p_obs, p_cf), batch_size=None if batch_size == 1 else batch_size)

    batch, same = PartitionSpec("predictors"), PartitionSpec()
    in_specs = (batch, batch, same, same) + (() if label_free else (same,))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=batch))
