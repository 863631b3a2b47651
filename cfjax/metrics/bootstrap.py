"""Bootstrap confidence intervals for every field of the marginalisation report.

The units (rows of ``p_obs``, ``p_cf``, ``y`` and of the counterfactual labels ``y_cf``) are
resampled with replacement B times; each resample is evaluated by the same traced core as
:func:`~cfjax.metrics.evaluate`, mapped over the resamples (``lax.map`` in chunks, so memory
stays bounded for any B), and the interval of each field is the pair of percentiles
``100 (1 − level) / 2`` and ``100 (1 + level) / 2`` of its B replicates (the percentile
bootstrap, Efron & Tibshirani 1993, §13.3), with numpy's default ``'linear'`` percentile
definition: the ``q``-th percentile of sorted replicates ``v_0 ≤ … ≤ v_{B−1}`` is
``v_j + (v_{j+1} − v_j) g`` with ``j + g = q (B − 1) / 100``.

Resample b draws its n unit indices from ``jax.random.fold_in(key, b)``, so the resamples do
not depend on how they are chunked or spread over devices, and :func:`bootstrap_indices`
reproduces them.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, PartitionSpec

from cfjax import _checks
from cfjax import distributed as _dist
from cfjax.metrics import _inputs
from cfjax.metrics.report import (
    MarginalisationReport,
    MulticlassReport,
    _evaluate,
    _evaluate_classes,
    check_options,
)

__all__ = ["BootstrapReport", "bootstrap_indices", "evaluate_bootstrap"]

# Elements of the gathered ``(chunk, n, K)`` counterfactual block one chunk may hold when
# ``batch_size="auto"`` picks the chunk on an accelerator (2^25 float32 = 128 MiB).
_AUTO_CHUNK_ELEMENTS = 2**25


@struct.dataclass
class BootstrapReport:
    """A report with percentile bootstrap intervals.

    ``estimate`` is :func:`~cfjax.metrics.evaluate` on all units; ``low`` and ``high`` hold the
    interval bounds of every field (same structure and shapes); ``replicates`` holds the B
    resample reports (each field with a leading axis of length B) when asked for, else None.
    Under ``vmap`` over predictors every leaf gains a leading predictor axis.
    """

    estimate: MarginalisationReport | MulticlassReport
    low: MarginalisationReport | MulticlassReport
    high: MarginalisationReport | MulticlassReport
    replicates: MarginalisationReport | MulticlassReport | None = None
    level: float = struct.field(pytree_node=False, default=0.95)
    resamples: int = struct.field(pytree_node=False, default=0)

    def to_dict(self) -> dict[str, Any]:
        """``{"level", "resamples", "estimate", "low", "high"}``, the reports as plain numbers
        (:meth:`MarginalisationReport.to_dict`); the replicates are left out."""
        return {"level": self.level, "resamples": self.resamples,
                "estimate": self.estimate.to_dict(), "low": self.low.to_dict(),
                "high": self.high.to_dict()}


def _resolve_key(key: Any) -> jax.Array:
    """A typed PRNG key from a typed key, a raw ``uint32[2]`` key or an int seed."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return jax.random.key(int(key))
    if key is None or not hasattr(key, "dtype"):
        _checks.fail("key", "a JAX PRNG key (jax.random.key(seed)) or an int seed", repr(key))
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if jnp.shape(key) != ():
            _checks.fail("key", "a single PRNG key (shape ())", f"shape {jnp.shape(key)}")
        return key
    if jnp.shape(key) != (2,) or jnp.dtype(key.dtype) != jnp.uint32:
        _checks.fail("key", "a JAX PRNG key (jax.random.key(seed)) or an int seed",
                     f"an array of shape {jnp.shape(key)} and dtype {key.dtype}")
    return jax.random.wrap_key_data(key)


def _draw(key: jax.Array, b: jax.Array, n: int) -> jax.Array:
    """The n unit indices of resample ``b``: uniform over ``0 … n−1``, with replacement."""
    return jax.random.randint(jax.random.fold_in(key, b), (n,), 0, n, dtype=jnp.int32)


def bootstrap_indices(key: Any, n: int, resamples: int) -> jax.Array:
    """The unit indices of every resample :func:`evaluate_bootstrap` draws with ``key``.

    Args:
      key: a JAX PRNG key (``jax.random.key(seed)``), a raw ``uint32[2]`` key or an int seed.
      n: number of units.
      resamples: number of resamples B.

    Returns:
      ``(B, n)`` int32 indices; row b is resample b (drawn from ``fold_in(key, b)``).

    Example:
      >>> idx = bootstrap_indices(0, n=5, resamples=3)
      >>> idx.shape, bool(((idx >= 0) & (idx < 5)).all())
      ((3, 5), True)
    """
    key = _resolve_key(key)
    n = _checks.check_positive_int("n", n)
    resamples = _checks.check_positive_int("resamples", resamples)
    return jax.vmap(lambda b: _draw(key, b, n))(jnp.arange(resamples, dtype=jnp.int32))


def evaluate_bootstrap(
    p_obs: Any,
    p_cf: Any,
    y: Any = None,
    *,
    key: Any,
    y_cf: Any = None,
    resamples: int = 1000,
    level: float = 0.95,
    weights: Any = None,
    tau: Any = 0.5,
    alphas: Sequence[float] = (0.5, 0.25, 0.1),
    n_bins: int = 15,
    batch_size: int | None | str = "auto",
    return_replicates: bool = False,
    devices: Any = None,
) -> BootstrapReport:
    """:func:`~cfjax.metrics.evaluate` with percentile bootstrap intervals over units.

    Args:
      p_obs: ``(n,)`` predictions on the observed units, or ``(n, C)`` class probabilities.
      p_cf: ``(n, K)`` predictions on their K counterfactuals, or ``(n, K, C)``.
      y: ``(n,)`` labels (in {0, 1}, or ``0..C-1`` for class probabilities), or None (label
        fields and their bounds are NaN).
      key: PRNG key of the resamples (``jax.random.key(seed)``, raw key or int seed).
      y_cf: ``(n, K)`` counterfactual labels (as in ``evaluate``), resampled by row with the
        units; None: labels assumed invariant.
      resamples: number of bootstrap resamples B.
      level: coverage of the intervals, in (0, 1).
      weights, tau, alphas, n_bins: as in ``evaluate``.
      batch_size: resamples evaluated together (``lax.map`` chunks). ``None``: all B in one
        vmap; an int: chunks of that many; ``"auto"``: 1 on CPU (the unbatched kernels are
        faster there), else as many as keep a chunk's gathered ``(chunk, n, K)`` block under
        2^25 elements.
      return_replicates: also return the B resample reports.
      devices: None (the default device); or a device count, a sequence of devices or a
        one-axis ``jax.sharding.Mesh`` (as :func:`cfjax.distributed.mesh` takes them) to split
        the B resamples over: B is padded to a multiple of the device count, each device
        evaluates its block of resamples (``jax.shard_map``, ``batch_size`` at a time; the
        units replicated on every device) and the padding is dropped before the
        percentiles. Resample b draws the same units whatever the device count, so the
        replicates and bounds equal the one-device call's (up to float rounding).

    Returns:
      A :class:`BootstrapReport`: ``estimate`` on all units, ``low``/``high`` the
      ``100(1 − level)/2`` and ``100(1 + level)/2`` percentiles (numpy's ``'linear'``
      definition) of the replicates, field by field. A field that is NaN in any replicate
      (e.g. a rank correlation of a resample with constant scores) has NaN bounds.

    Many predictors on the same units: ``jax.vmap`` over a leading predictor axis, e.g.
    ``jax.vmap(lambda po, pc: evaluate_bootstrap(po, pc, y, key=key, resamples=200))(P_obs,
    P_cf)``; every predictor then sees the same resamples (a paired bootstrap, so differences
    between predictors are compared on common units). Value checks are skipped on traced
    inputs; shape checks always run.

    Example:
      >>> import jax
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> p_cf = rng.uniform(size=(200, 8)).astype(np.float32)
      >>> y = rng.integers(0, 2, 200)
      >>> r = evaluate_bootstrap(p_cf[:, 0], p_cf, y, key=jax.random.key(0), resamples=100)
      >>> bool(r.low.risk_ie <= r.estimate.risk_ie <= r.high.risk_ie)
      True
    """
    alphas, n_bins = check_options(alphas, n_bins, tau)
    where = None if devices is None else _dist.mesh(devices)
    key = _resolve_key(key)
    resamples = _checks.check_positive_int("resamples", resamples)
    if isinstance(level, bool) or not isinstance(level, (float, int, np.floating, np.integer)) \
            or not 0.0 < float(level) < 1.0:
        _checks.fail("level", "a coverage level in (0, 1)", repr(level))
    level = float(level)
    if y is None and y_cf is not None:
        _checks.fail("y", "observed labels of shape (n,) when `y_cf` is given", "None")
    multiclass = _inputs.is_multiclass(p_obs, p_cf)
    if multiclass:
        p_obs, p_cf, q, _ = _inputs.prepare_stability(p_obs, p_cf, weights, tau)
        y, y_cf = _inputs.prepare_class_labels(y, y_cf, p_cf.shape)
        n, k, c = p_cf.shape
    else:
        p_obs, p_cf, y, q = _inputs.prepare(p_obs=p_obs, p_cf=p_cf, y=y, weights=weights)
        if y_cf is not None:
            y_cf = _inputs.prepare_counterfactual_labels(y_cf, p_cf.shape, p_obs.dtype)
        (n, k), c = p_cf.shape, 1
    if batch_size == "auto":
        if jax.devices()[0].platform == "cpu":
            batch_size = 1
        else:
            batch_size = max(1, min(resamples, _AUTO_CHUNK_ELEMENTS // (n * k * c)))
    elif batch_size is not None:
        batch_size = _checks.check_positive_int("batch_size", batch_size)
    tau = jnp.asarray(tau, p_obs.dtype)
    uniform = weights is None
    core = functools.partial(_core, q=q, tau=tau, alphas=alphas, n_bins=n_bins, uniform=uniform,
                             multiclass=multiclass)
    estimate = core(p_obs, p_cf, y, y_cf)
    low, high, replicates = _bootstrap(
        p_obs, p_cf, y, y_cf, q, tau, key, resamples=resamples, level=level, alphas=alphas,
        n_bins=n_bins, uniform=uniform, batch_size=batch_size,
        keep=bool(return_replicates), multiclass=multiclass, mesh=where)
    return BootstrapReport(estimate=estimate, low=low, high=high, replicates=replicates,
                           level=level, resamples=resamples)


def _core(p_obs, p_cf, y, y_cf, *, q, tau, alphas, n_bins, uniform, multiclass):
    """The report core of binary scores or class probabilities."""
    if multiclass:
        return _evaluate_classes(p_obs, p_cf, y, q, y_cf=y_cf, alphas=alphas, n_bins=n_bins,
                                 uniform=uniform)
    return _evaluate(p_obs, p_cf, y, q, tau, alphas=alphas, n_bins=n_bins, uniform=uniform,
                     y_cf=y_cf)


@functools.partial(jax.jit, static_argnames=("resamples", "level", "alphas", "n_bins", "uniform",
                                             "batch_size", "keep", "multiclass", "mesh"))
def _bootstrap(p_obs, p_cf, y, y_cf, q, tau, key, *, resamples, level, alphas, n_bins, uniform,
               batch_size, keep, multiclass, mesh=None):
    def replicate(ids, p_obs, p_cf, y, y_cf, q, tau, key):
        """The reports of resamples ``ids``."""
        n = p_obs.shape[0]
        evaluate = functools.partial(_core, q=q, tau=tau, alphas=alphas, n_bins=n_bins,
                                     uniform=uniform, multiclass=multiclass)
        take = lambda v, idx: None if v is None else v[idx]  # noqa: E731

        def one(b):
            idx = _draw(key, b, n)
            return evaluate(p_obs[idx], p_cf[idx], take(y, idx), take(y_cf, idx))

        if batch_size is None:
            return jax.vmap(one)(ids)
        # batch_size=1 is a plain loop (lax.map(batch_size=1) would vmap over a unit axis).
        return jax.lax.map(one, ids, batch_size=None if batch_size == 1 else batch_size)

    args = (p_obs, p_cf, y, y_cf, q, tau, key)
    if mesh is None:
        replicates = replicate(jnp.arange(resamples, dtype=jnp.int32), *args)
    else:
        # Resamples padded to a multiple of the devices (repeating the last one), each device
        # evaluating its block; the padding is dropped before the percentiles.
        ids = _dist.pad_axis(jnp.arange(resamples, dtype=jnp.int32), mesh.size)
        spec = PartitionSpec(mesh.axis_names[0])
        replicates = jax.shard_map(replicate, mesh=mesh, in_specs=(spec,) + (PartitionSpec(),) * len(args),
                                   out_specs=spec)(ids, *args)
        replicates = jax.tree.map(lambda a: a[:resamples], replicates)
    low, high = (jax.tree.map(functools.partial(_percentile, q=q_), replicates)
                 for q_ in (50.0 * (1.0 - level), 50.0 * (1.0 + level)))
    return low, high, (replicates if keep else None)


def _percentile(values: jax.Array, q: float) -> jax.Array:
    """numpy's ``'linear'`` percentile over the leading (resample) axis; NaN if any is NaN."""
    pct = jnp.percentile(values, q, axis=0, method="linear")
    return jnp.where(jnp.any(jnp.isnan(values), axis=0), jnp.full_like(pct, math.nan), pct)
