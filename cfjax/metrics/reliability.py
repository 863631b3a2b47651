"""Smoothed reliability diagrams that stay in [0, 1], with percentile bootstrap bands.

The diagram at a score ``t`` is the kernel average of the labels (Nadaraya–Watson regression
of the labels on the scores; Błasiok & Nakkiran 2023, §5, and their ``relplot`` package),

    ``μ(t) = Σ_i K_σ(t, p_i) y_i / Σ_i K_σ(t, p_i)``,
    ``K_σ(t, p) = φ_σ(t − p) + φ_σ(t + p) + φ_σ(2 − t − p)``,

the Gaussian kernel reflected once at 0 and at 1 (each prediction also counts at its mirror
images ``−p`` and ``2 − p``, as in relplot). With labels in [0, 1] (0/1, or expected labels
such as a unit's label averaged over its counterfactuals) ``μ(t)`` is a convex combination of
labels, hence in [0, 1] at every ``t``; far from every prediction it tends to the label of the
nearest ones. The images left out (``±p + 2k``, ``k ≠ 0``, except ``2 − p``) lie at distance
at least 1 from ``t``: their relative weight is below ``exp(−1 / (2σ²))`` (2e-11 at σ = 0.1).
The density of the predictions uses the same kernel, ``δ̂(t) = (1/n) Σ_i K_σ(t, p_i)``
(integrates to 1 over [0, 1] up to those images).

By default σ is the bandwidth σ* of :func:`cfjax.metrics.smooth_ece` on the same scores and
labels, so the diagram smooths at the scale of the miscalibration it shows. The sums are exact
(no grid): the weights are computed relative to the nearest prediction of each ``t``
(``exp(−((t − p_i)² − min_j (t − p_j)²) / 2σ²)``), so they never all underflow and the
average is defined at every ``t``. Cost and memory: ``O(T n)`` for ``T`` points and ``n``
units.

:func:`reliability_band` adds percentile bootstrap intervals over units: resample b draws the
units :func:`cfjax.metrics.bootstrap_indices` gives for the same key (so its smooth-ECE
interval is :func:`cfjax.metrics.evaluate_bootstrap`'s), the curve of each resample at the
estimate's σ, the smooth ECE of each resample with its own σ*.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax
from jax.typing import DTypeLike

from cfjax import _checks
from cfjax._core.keys import as_key
from cfjax.metrics.bootstrap import _draw
from cfjax.metrics.smooth_calibration import (
    _check_bandwidth,
    _prepare,
    _residual_spectrum,
    _smece_at,
    _smooth_ece,
)
from cfjax.typing import ArrayLike, KeyLike

__all__ = ["ReliabilityBand", "ReliabilityCurve", "reliability_band", "reliability_curve"]

# Elements of the (chunk, n) resample-count block evaluated together (2^22 float32 = 16 MiB).
_CHUNK_ELEMENTS = 2**22


@struct.dataclass
class ReliabilityCurve:
    """A smoothed reliability diagram on points ``t (T,)`` (module docstring).

    Attributes:
      t: ``(T,)`` points of [0, 1].
      mean_label: ``(T,)`` ``μ(t)``, the kernel average of the labels at score t, in [0, 1].
      density: ``(T,)`` ``δ̂(t)``, the kernel density of the scores (integrates to 1 over [0, 1]).
      count: ``(T,)`` the units counted by the kernel at t, ``Σ_i K_σ(t, p_i) / K_σ(0)``
        (``= n σ √(2π) δ̂(t)``): about the number of predictions within σ of t. Below 1, the
        curve only repeats the label of the few nearest predictions (the plot leaves it out).
      bandwidth: σ, the kernel width.
      smooth_ece: the smooth ECE at σ (:func:`cfjax.metrics.smooth_ece`; at the automatic σ*
        unless a bandwidth was given).

    Plot ``mean_label`` against ``t`` beside the diagonal, ``density`` beneath
    (:func:`cfjax.metrics.plots.reliability_diagram`).
    """

    t: jax.Array
    mean_label: jax.Array
    density: jax.Array
    count: jax.Array
    bandwidth: jax.Array
    smooth_ece: jax.Array


@struct.dataclass
class ReliabilityBand:
    """A reliability diagram with percentile bootstrap intervals.

    Attributes:
      curve: the :class:`ReliabilityCurve` of all units.
      low, high: ``(T,)`` the ``100 (1 − level) / 2`` and ``100 (1 + level) / 2`` percentiles
        (numpy's ``'linear'`` definition) of the resampled curves at each point, in [0, 1].
      smooth_ece_low, smooth_ece_high: the same percentiles of the resampled smooth ECE.
      level: the coverage; resamples: their number B.
    """

    curve: ReliabilityCurve
    low: jax.Array
    high: jax.Array
    smooth_ece_low: jax.Array
    smooth_ece_high: jax.Array
    level: float = struct.field(pytree_node=False, default=0.95)
    resamples: int = struct.field(pytree_node=False, default=0)


def _points(grid: ArrayLike, dtype: DTypeLike) -> jax.Array:
    """The validated points ``t (T,)``: ``grid`` equally spaced ones, or ``grid`` itself."""
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
        if grid < 2:
            _checks.fail("grid", "an int >= 2 or a 1-d array of points in [0, 1]", repr(grid))
        return jnp.linspace(0.0, 1.0, int(grid), dtype=dtype)
    if isinstance(grid, bool) or np.ndim(grid) != 1:
        _checks.fail("grid", "an int >= 2 or a 1-d array of points in [0, 1]", f"{grid!r}"[:80])
    _checks.check_nonempty("grid", grid)
    _checks.check_probabilities("grid", grid)
    return jnp.asarray(grid).astype(dtype)


def _bandwidth(bandwidth: ArrayLike | None, dtype: DTypeLike) -> jax.Array | None:
    if bandwidth is None:
        return None
    _check_bandwidth(bandwidth)
    return jnp.asarray(bandwidth, dtype)


def _kernel(t: jax.Array, p: jax.Array, sigma: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(W (T, n), log_scale (T,))``: the reflected kernel ``K_σ(t, p_i)`` divided by its value
    at the nearest prediction's distance, ``K = W exp(log_scale) / (σ √(2π))``. Every row of
    ``W`` holds a 1 (the nearest prediction), so its sums never underflow."""
    d0 = jnp.square(t[:, None] - p[None, :])
    nearest = jnp.min(
        d0, axis=1, keepdims=True
    )  # the image p itself is the nearest for t, p in [0, 1]
    scale = 0.5 / jnp.square(sigma)
    w = (
        jnp.exp(-(d0 - nearest) * scale)
        + jnp.exp(-(jnp.square(t[:, None] + p[None, :]) - nearest) * scale)
        + jnp.exp(-(jnp.square(2 - t[:, None] - p[None, :]) - nearest) * scale)
    )
    return w, -nearest[:, 0] * scale


def _matvec(w: jax.Array, v: jax.Array) -> jax.Array:
    return jnp.matmul(w, v, precision=lax.Precision.HIGHEST)


def _average(num: jax.Array, den: jax.Array) -> jax.Array:
    """``num / den`` clipped to [0, 1] (a convex combination of labels, up to rounding); NaN
    where ``den`` underflowed (no unit within reach)."""
    ok = den > 0
    return jnp.where(ok, jnp.clip(num / jnp.where(ok, den, 1), 0, 1), jnp.nan)


def _sigma_and_smece(
    p: jax.Array, y: jax.Array, bandwidth: jax.Array | None
) -> tuple[jax.Array, jax.Array]:
    if bandwidth is None:
        smece, sigma = _smooth_ece(p, y)
        return sigma, smece
    return bandwidth, _smece_at(_residual_spectrum(p, y), bandwidth, p.dtype)


def _curve_core(
    p: jax.Array, y: jax.Array, t: jax.Array, bandwidth: jax.Array | None
) -> tuple[ReliabilityCurve, jax.Array]:
    """The curve, and the kernel weights ``W (T, n)`` the bootstrap reuses."""
    dtype = p.dtype
    sigma, smece = _sigma_and_smece(p, y, bandwidth)
    w, log_scale = _kernel(t, p, sigma)
    den = jnp.sum(w, axis=1)
    mean = _average(_matvec(w, y), den)
    count = den * jnp.exp(log_scale)
    density = count * (jnp.asarray(1.0 / math.sqrt(2 * math.pi), dtype) / (sigma * p.shape[0]))
    return ReliabilityCurve(
        t=t, mean_label=mean, density=density, count=count, bandwidth=sigma, smooth_ece=smece
    ), w


@jax.jit
def _curve(p, y, t, bandwidth) -> ReliabilityCurve:
    return _curve_core(p, y, t, bandwidth)[0]


def reliability_curve(
    p: ArrayLike, y: ArrayLike, grid: ArrayLike = 201, bandwidth: ArrayLike | None = None
) -> ReliabilityCurve:
    """The smoothed reliability diagram of scores ``p (n,)`` against labels ``y (n,)``: the
    kernel average of the labels at each point, in [0, 1] (module docstring).

    Args:
      p: ``(n,)`` predicted probabilities of the positive class.
      y: ``(n,)`` labels in {0, 1}, or expected labels in [0, 1] (a float array: the label's
        probability, e.g. ``Σ_k q_k y_cf[i, k]`` over a unit's counterfactuals).
      grid: number of equally spaced points on [0, 1] (an int >= 2), or the points
        themselves, a 1-d array of values in [0, 1].
      bandwidth: kernel width σ in (0, 10]; None for the automatic σ* of
        :func:`cfjax.metrics.smooth_ece`.

    Returns:
      A :class:`ReliabilityCurve`.

    Example:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> p = rng.uniform(size=500).astype(np.float32)
      >>> c = reliability_curve(p, (rng.uniform(size=500) < p).astype(np.int32), grid=5)
      >>> c.t.tolist(), c.mean_label.shape, bool(((c.mean_label >= 0) & (c.mean_label <= 1)).all())
      ([0.0, 0.25, 0.5, 0.75, 1.0], (5,), True)
    """
    p, y = _prepare(p, y)
    t = _points(grid, p.dtype)
    return _curve(p, y, t, _bandwidth(bandwidth, p.dtype))


@functools.partial(jax.jit, static_argnames=("resamples", "level", "chunk"))
def _band(p, y, t, bandwidth, key, *, resamples: int, level: float, chunk: int) -> ReliabilityBand:
    n = p.shape[0]
    curve, w = _curve_core(p, y, t, bandwidth)
    fixed = bandwidth is not None

    def one(b):
        idx = _draw(key, b, n)
        counts = jnp.zeros((n,), p.dtype).at[idx].add(1)
        mean = _average(_matvec(w, counts * y), _matvec(w, counts))
        pb, yb = p[idx], y[idx]
        smece = (
            _smece_at(_residual_spectrum(pb, yb), bandwidth, p.dtype)
            if fixed
            else _smooth_ece(pb, yb)[0]
        )
        return mean, smece

    means, smeces = lax.map(one, jnp.arange(resamples, dtype=jnp.int32), batch_size=chunk)
    qs = (50.0 * (1.0 - level), 50.0 * (1.0 + level))
    # A resample whose units all lie out of the kernel's reach of t (weights underflowed) has
    # no curve there and does not count at t; where none has one, the band is the estimate.
    low, high = (jnp.nanpercentile(means, q, axis=0, method="linear") for q in qs)
    low, high = (jnp.where(jnp.isnan(v), curve.mean_label, v) for v in (low, high))
    s_low, s_high = (jnp.percentile(smeces, q, method="linear") for q in qs)
    return ReliabilityBand(
        curve=curve,
        low=low,
        high=high,
        smooth_ece_low=s_low,
        smooth_ece_high=s_high,
        level=level,
        resamples=resamples,
    )


def reliability_band(
    p: ArrayLike,
    y: ArrayLike,
    *,
    key: KeyLike,
    resamples: int = 200,
    level: float = 0.95,
    grid: ArrayLike = 201,
    bandwidth: ArrayLike | None = None,
) -> ReliabilityBand:
    """:func:`reliability_curve` with percentile bootstrap intervals over units: a band around
    the curve at each point and an interval of the smooth ECE.

    Args:
      p: ``(n,)`` predicted probabilities of the positive class.
      y: ``(n,)`` labels in {0, 1}, or expected labels in [0, 1] (e.g. ``ȳ = y_cf @ q`` for
        the counterfactually marginalised prediction).
      key: PRNG key of the resamples (``jax.random.key(seed)``, raw key data or an int seed);
        resample b draws the units of :func:`cfjax.metrics.bootstrap_indices`' row b.
      resamples: number of bootstrap resamples B.
      level: coverage of the intervals, in (0, 1).
      grid, bandwidth: as in :func:`reliability_curve`. Every resampled curve uses the
        estimate's σ; every resampled smooth ECE its own σ* (or ``bandwidth`` when given).

    Returns:
      A :class:`ReliabilityBand`. Jittable and vmappable over a leading predictor axis (with
      one key: a paired bootstrap); value checks are skipped on traced inputs.

    Example:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> p = rng.uniform(size=300).astype(np.float32)
      >>> b = reliability_band(p, (rng.uniform(size=300) < p).astype(np.int32), key=0, resamples=50, grid=11)
      >>> bool((b.low <= b.curve.mean_label + 1e-6).all() and (b.curve.mean_label <= b.high + 1e-6).all())
      True
    """
    key = as_key(key)
    resamples = _checks.check_positive_int("resamples", resamples)
    if (
        isinstance(level, bool)
        or not isinstance(level, (float, int, np.floating, np.integer))
        or not 0.0 < float(level) < 1.0
    ):
        _checks.fail("level", "a coverage level in (0, 1)", repr(level))
    p, y = _prepare(p, y)
    t = _points(grid, p.dtype)
    chunk = max(1, min(resamples, _CHUNK_ELEMENTS // max(p.shape[0], 1)))
    return _band(
        p,
        y,
        t,
        _bandwidth(bandwidth, p.dtype),
        key,
        resamples=resamples,
        level=float(level),
        chunk=chunk,
    )
