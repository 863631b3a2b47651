"""Many predictors at once: one vmapped, jitted evaluation sharded over the available devices."""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from cfjax import _checks
from cfjax.metrics import _arrays
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
    """:func:`~cfjax.metrics.evaluate` for P predictors on the same units, with shared or
    per-predictor labels.

    Args:
      p_obs: ``(P, n)`` predictions on the observed units, one row per predictor.
      p_cf: ``(P, n, K)`` predictions on the counterfactuals.
      y: labels in {0, 1}: ``(n,)`` shared by all predictors, or ``(P, n)``, row j the labels
        of predictor j (e.g. one-vs-rest classifiers, class c scored against ``y == c``);
        None for the label-free fields only.
      weights, tau, alphas, n_bins: as in ``evaluate`` (shared by all predictors).
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

    Binary scores with labels assumed invariant; for class probabilities or counterfactual
    labels ``y_cf``, ``jax.vmap`` :func:`~cfjax.metrics.evaluate` over the predictor axis.

    Example:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> p_cf = rng.uniform(size=(3, 50, 16)).astype(np.float32)
      >>> evaluate_many(p_cf[..., 0], p_cf, rng.integers(0, 2, 50)).risk_cvar.shape
      (3, 3)

      One-vs-rest scores of 3 classes, each against its own labels ``y == c``:

      >>> y = rng.integers(0, 3, 50)
      >>> y_ovr = (y[None, :] == np.arange(3)[:, None]).astype(np.int32)  # (P, n)
      >>> evaluate_many(p_cf[..., 0], p_cf, y_ovr).risk_orig.shape
      (3,)
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
    per_predictor = _check_sweep_labels(y, n_pred, n)
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
        if per_predictor:
            y = jnp.concatenate([y, jnp.repeat(y[-1:], pad, axis=0)])
    tau = jnp.asarray(tau, dtype)
    mesh = jax.sharding.Mesh(np.asarray(devices), ("predictors",))
    labels = "none" if y is None else ("each" if per_predictor else "shared")
    run = _sweep(mesh, labels, alphas, n_bins, batch_size, weights is None)
    report = run(p_obs, p_cf, q, tau) if y is None else run(p_obs, p_cf, q, tau, y)
    return jax.tree.map(lambda v: v[:n_pred], report) if pad else report


def _check_sweep_labels(y: Any, n_pred: int, n: int) -> bool:
    """Validate ``y``: None, shared ``(n,)`` or per predictor ``(P, n)``, values in {0, 1}.
    Returns whether the labels are per predictor."""
    if y is None:
        return False
    if np.shape(y) not in ((n,), (n_pred, n)):
        _checks.fail("y", f"labels of shape ({n},), shared by all predictors, or "
                     f"({n_pred}, {n}), one row per predictor (P, n) like `p_obs`",
                     f"shape {np.shape(y)}")
    _checks.check_binary_labels("y", y)
    return np.ndim(y) == 2


@functools.lru_cache(maxsize=64)
def _sweep(mesh, labels: str, alphas, n_bins: int, batch_size: int | None, uniform: bool):
    """A jitted function evaluating the local predictors of each device, sharded over
    ``mesh``: vmap in chunks of ``batch_size`` (``lax.map``) or all at once (None).

    ``labels``: ``"none"``, ``"shared"`` (one ``(n,)`` vector, replicated) or ``"each"``
    (``(P, n)``, sharded with the predictors)."""

    def local(p_obs, p_cf, q, tau, y=None):
        def one(item):
            y_j = item[2] if labels == "each" else y
            return _evaluate(item[0], item[1], y_j, q, tau, alphas=alphas, n_bins=n_bins,
                             uniform=uniform)

        items = (p_obs, p_cf, y) if labels == "each" else (p_obs, p_cf)
        if batch_size is None:
            return jax.vmap(one)(items)
        # batch_size=1 is a plain loop: lax.map(batch_size=1) would vmap over a unit axis,
        # and the batched kernels are slower than the unbatched ones.
        return jax.lax.map(one, items, batch_size=None if batch_size == 1 else batch_size)

    batch, same = PartitionSpec("predictors"), PartitionSpec()
    label_spec = {"none": (), "shared": (same,), "each": (batch,)}[labels]
    in_specs = (batch, batch, same, same) + label_spec
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=batch))
