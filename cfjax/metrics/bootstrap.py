"""Bootstrap confidence intervals for every field of the marginalisation report.

The units (rows of ``p_obs``, ``p_cf``, ``y`` and of the counterfactual labels ``y_cf``) are
resampled with replacement B times; each resample is evaluated by the same traced core as
:func:`~cfjax.metrics.evaluate`, mapped over the resamples (:func:`cfjax.distributed.map_batch`:
in chunks, so memory stays bounded for any B, and split over devices with ``mesh=``), and the
interval of each field is the pair of percentiles
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
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cfjax import _checks, platform
from cfjax import distributed as _dist
from cfjax._core.keys import as_key
from cfjax.metrics import _stages
from cfjax.metrics._report_types import MarginalisationReport, MulticlassReport
from cfjax.typing import ArrayLike, KeyLike, MeshLike, PyTree

__all__ = ["BootstrapReport", "bootstrap_indices", "evaluate_bootstrap"]

# Elements of the gathered ``(chunk, n, K)`` counterfactual block one chunk may hold when
# ``resample_chunk="auto"`` picks the chunk on an accelerator (2^25 float32 = 128 MiB).
_AUTO_CHUNK_ELEMENTS = 2**25


@struct.dataclass
class BootstrapReport:
    """A report with percentile bootstrap intervals.

    ``estimate`` is :func:`~cfjax.metrics.evaluate` on all units; ``low`` and ``high`` hold the
    interval bounds of every field (same structure and shapes); ``replicates`` holds the B
    resample reports (each field with a leading axis of length B).
    Under ``vmap`` over predictors every leaf gains a leading predictor axis.
    """

    estimate: MarginalisationReport | MulticlassReport
    low: MarginalisationReport | MulticlassReport
    high: MarginalisationReport | MulticlassReport
    replicates: MarginalisationReport | MulticlassReport
    level: float = struct.field(pytree_node=False, default=0.95)
    resamples: int = struct.field(pytree_node=False, default=0)

    def to_dict(self) -> dict[str, Any]:
        """``{"level", "resamples", "estimate", "low", "high"}``, the reports as plain numbers
        (:meth:`MarginalisationReport.to_dict`); the replicates are left out."""
        return {
            "level": self.level,
            "resamples": self.resamples,
            "estimate": self.estimate.to_dict(),
            "low": self.low.to_dict(),
            "high": self.high.to_dict(),
        }


def _draw(key: jax.Array, b: jax.Array, n: int) -> jax.Array:
    """The n unit indices of resample ``b``: uniform over ``0 … n−1``, with replacement."""
    return jax.random.randint(jax.random.fold_in(key, b), (n,), 0, n, dtype=jnp.int32)


def bootstrap_indices(n: int, resamples: int, *, key: KeyLike) -> jax.Array:
    """The unit indices of every resample :func:`evaluate_bootstrap` draws with ``key``.

    Args:
      n: number of units.
      resamples: number of resamples B.
      key: a JAX PRNG key (``jax.random.key(seed)``), raw key data or an int seed.

    Returns:
      ``(B, n)`` int32 indices; row b is resample b (drawn from ``fold_in(key, b)``).

    Example:
      >>> idx = bootstrap_indices(5, 3, key=0)
      >>> idx.shape, bool(((idx >= 0) & (idx < 5)).all())
      ((3, 5), True)
    """
    key = as_key(key)
    n = _checks.check_positive_int("n", n)
    resamples = _checks.check_positive_int("resamples", resamples)
    return jax.vmap(lambda b: _draw(key, b, n))(jnp.arange(resamples, dtype=jnp.int32))


def evaluate_bootstrap(
    p_obs: ArrayLike,
    p_cf: ArrayLike,
    y: ArrayLike | None = None,
    *,
    key: KeyLike,
    y_cf: ArrayLike | None = None,
    resamples: int = 1000,
    level: float = 0.95,
    weights: ArrayLike | None = None,
    tau: ArrayLike = 0.5,
    alphas: Sequence[float] = (0.5, 0.25, 0.1),
    n_bins: int = 15,
    mesh: MeshLike = None,
    **deprecated: Any,
) -> BootstrapReport:
    """:func:`~cfjax.metrics.evaluate` with percentile bootstrap intervals over units.

    Args:
      p_obs: ``(n,)`` predictions on the observed units, or ``(n, C)`` class probabilities.
      p_cf: ``(n, K)`` predictions on their K counterfactuals, or ``(n, K, C)``.
      y: ``(n,)`` labels (in {0, 1}, or ``0..C-1`` for class probabilities), or None (label
        fields and their bounds are NaN).
      key: PRNG key of the resamples (``jax.random.key(seed)``, raw key data or an int seed).
      y_cf: ``(n, K)`` counterfactual labels (as in ``evaluate``), resampled by row with the
        units; None: labels assumed invariant.
      resamples: number of bootstrap resamples B.
      level: coverage of the intervals, in (0, 1).
      weights, tau, alphas, n_bins: as in ``evaluate``.
      mesh: None (the default device), a device count, a sequence of devices or a one-axis
        ``jax.sharding.Mesh`` to split the B resamples over
        (:func:`cfjax.distributed.map_batch`; the units whole on every device). Resample b
        draws the same units whatever the device count, so the replicates and bounds equal
        the one-device call's (up to float rounding).

    The resamples evaluated together on a device (one ``vmap``, the chunks one after another)
    are :func:`cfjax.platform.default_resample_batch`'s choice: 1 on CPU, where the unbatched
    kernels are faster; elsewhere as many as keep a chunk's gathered ``(chunk, n, K)`` block
    under 2^25 elements. (``resample_chunk=`` and ``return_replicates=`` are deprecated: the
    first still sets the chunk for one release, the replicates are always returned.)

    Returns:
      A :class:`BootstrapReport`: ``replicates`` the B resample reports, ``estimate`` on all
      units, ``low``/``high`` the
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
    resample_chunk = _deprecated_options(deprecated)
    alphas, n_bins = _stages.check_options(alphas, n_bins, tau)
    where = _dist.as_mesh(mesh)
    key = as_key(key)
    resamples = _checks.check_positive_int("resamples", resamples)
    if (
        isinstance(level, bool)
        or not isinstance(level, (float, int, np.floating, np.integer))
        or not 0.0 < float(level) < 1.0
    ):
        _checks.fail("level", "a coverage level in (0, 1)", repr(level))
    level = float(level)
    p_obs, p_cf, y, y_cf, q, tau = _stages.prepare(p_obs, p_cf, y, y_cf, weights, tau)
    if resample_chunk == "auto":
        resample_chunk = platform.default_resample_batch(
            int(np.prod(p_cf.shape)), resamples, _AUTO_CHUNK_ELEMENTS
        )
    elif resample_chunk is not None:
        resample_chunk = _checks.check_positive_int("resample_chunk", resample_chunk)
    data = dict(p_obs=p_obs, p_cf=p_cf, y=y, y_cf=y_cf, q=q, tau=tau)
    uniform = weights is None
    estimate = _stages.report(
        p_obs, p_cf, y, y_cf, q, tau, alphas=alphas, n_bins=n_bins, uniform=uniform
    )
    ids = jnp.arange(resamples, dtype=jnp.int32)
    replicates = _dist.map_batch(
        _Replicates(alphas, n_bins, uniform),
        ids,
        shared=(data, key),
        mesh=where,
        chunk_size=resample_chunk,
    )
    low, high = _bounds(replicates, level=level)
    return BootstrapReport(
        estimate=estimate,
        low=low,
        high=high,
        replicates=replicates,
        level=level,
        resamples=resamples,
    )


def _deprecated_options(deprecated: dict[str, Any]) -> int | None | str:
    """``evaluate_bootstrap``'s removed keywords: ``resample_chunk`` (returned, still used for
    one release) and ``return_replicates`` (the replicates are always returned), each with a
    DeprecationWarning; any other keyword is a TypeError."""
    unknown = set(deprecated) - {"resample_chunk", "return_replicates"}
    if unknown:
        raise TypeError(
            f"evaluate_bootstrap() got an unexpected keyword argument {sorted(unknown)[0]!r}"
        )
    if "return_replicates" in deprecated:
        warnings.warn(
            "evaluate_bootstrap(return_replicates=) is deprecated and will be removed in the next "
            "release: the report's replicates are always returned",
            DeprecationWarning,
            stacklevel=3,
        )
    if "resample_chunk" in deprecated:
        warnings.warn(
            "evaluate_bootstrap(resample_chunk=) is deprecated and will be removed in the next "
            "release: cfjax.platform.default_resample_batch chooses the chunk",
            DeprecationWarning,
            stacklevel=3,
        )
        return deprecated["resample_chunk"]
    return "auto"


@struct.dataclass
class _Replicates:
    """The reports of a block of resamples ``ids (b,)`` of ``data`` (a hashable callable for
    :func:`cfjax.distributed.map_batch`): resample b is ``data``'s units at
    :func:`bootstrap_indices`' row b."""

    alphas: tuple[float, ...] = struct.field(pytree_node=False)
    n_bins: int = struct.field(pytree_node=False)
    uniform: bool = struct.field(pytree_node=False, default=False)

    def __call__(self, ids: jax.Array, data: dict, key: jax.Array):
        n = data["p_obs"].shape[0]
        units = ("p_obs", "p_cf", "y", "y_cf")
        resampled = jax.vmap(
            lambda b: {f: None if data[f] is None else data[f][_draw(key, b, n)] for f in units}
        )
        return _stages.BatchReports(self.alphas, self.n_bins, self.uniform)(
            resampled(ids), {"q": data["q"], "tau": data["tau"]}
        )


@functools.partial(jax.jit, static_argnames=("level",))
def _bounds(replicates: PyTree, *, level: float) -> tuple[PyTree, PyTree]:
    """The ``100 (1 − level) / 2`` and ``100 (1 + level) / 2`` percentiles of every field."""
    return tuple(
        jax.tree.map(functools.partial(_percentile, q=q_), replicates)
        for q_ in (50.0 * (1.0 - level), 50.0 * (1.0 + level))
    )


def _percentile(values: jax.Array, q: float) -> jax.Array:
    """numpy's ``'linear'`` percentile over the leading (resample) axis; NaN if any is NaN."""
    pct = jnp.percentile(values, q, axis=0, method="linear")
    return jnp.where(jnp.any(jnp.isnan(values), axis=0), jnp.full_like(pct, math.nan), pct)
