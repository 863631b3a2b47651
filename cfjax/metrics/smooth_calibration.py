"""Smooth ECE and smoothed reliability diagrams (Błasiok & Nakkiran 2023, "Smooth ECE:
Principled Reliability Diagrams via Kernel Smoothing").

For scores ``f_i ∈ [0, 1]`` and labels ``y_i ∈ {0, 1}`` (or expected labels ``y_i ∈ [0, 1]``,
e.g. a unit's label averaged over its counterfactuals) the residuals are smoothed with the
reflected Gaussian kernel on [0, 1],

    ``K_σ(t, f) = Σ_{k∈Z} φ_σ(t − f − 2k) + φ_σ(t + f − 2k)``,

the density at ``t`` of ``π(f + η)``, ``η ~ N(0, σ²)``, where ``π`` folds the real line onto
[0, 1] by reflection at 0 and 1 (so ``∫_0^1 K_σ(t, f) dt = 1`` for every ``f``, including
``f = 0`` and ``f = 1``). Then

    ``r̂_σ(t) = (1/n) Σ_i K_σ(t, f_i) (y_i − f_i)``,   ``smECE_σ = ∫_0^1 |r̂_σ(t)| dt``,

and smooth ECE is ``smECE_σ*`` at the fixed point ``smECE_σ* = σ*``, which exists and is
unique because ``smECE_σ`` does not increase with σ (the reflected heat semigroup contracts
L1). The smoothed reliability diagram at σ*, a kernel average of the labels that stays in
[0, 1], is :mod:`cfjax.metrics.reliability`.

Computation (jittable, fixed cost): the weights are spread onto ``G = 4097`` grid nodes
``t_j = j / 4096`` by linear interpolation, the grid is extended by reflection to a circle of
length 2 (period ``L = 8192`` nodes; the nodes at 0 and 1 carry both the point and its mirror
image), and the convolution with the 2-periodic Gaussian is one real FFT with its exact Fourier
coefficients ``exp(−π² m² σ² / 2)``; ``∫|r̂|`` is the trapezoid rule on the nodes. The relative
discretisation error is about ``(h/σ)²/8`` with ``h = 1/4096``: below 1e-4 for σ ≥ 0.01 and
about 7e-3 at the smallest bandwidth searched, ``σ_min = 1e-3``. σ* is found by 24 bisection
steps on ``[σ_min, 1]`` (an interval of 6e-8); when ``smECE_σmin ≤ σ_min`` (scores
calibrated to within the resolution) the bandwidth is ``σ_min``.

Differences from the authors' ``relplot`` package, whose ``smECE`` uses a 200-node grid
(refined for small σ), a kernel truncated at distance 0.5 and reflected once, endpoints without
their mirror mass, and 10 bisection steps: here the full reflected kernel, a finer grid and more
steps. The definitions agree; the numbers agree up to those approximations.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import DTypeLike

from cfjax import _checks
from cfjax.metrics import _arrays, _inputs
from cfjax.typing import ArrayLike

__all__ = ["smooth_ece", "smooth_ece_bandwidth"]

_INTERVALS = 4096  # grid spacing h = 1 / _INTERVALS; nodes t_j = j h, j = 0 … _INTERVALS
SIGMA_MIN = 1e-3
_STEPS = 24


def _grid_masses(p: jax.Array, w: jax.Array) -> jax.Array:
    """Weights ``w`` at scores ``p`` spread linearly onto the ``G`` nodes, shape ``(G,)``."""
    x = p * _INTERVALS
    j = jnp.clip(jnp.floor(x).astype(jnp.int32), 0, _INTERVALS - 1)
    frac = x - j.astype(p.dtype)
    idx = jnp.concatenate([j, j + 1])
    mass = jnp.concatenate([w * (1 - frac), w * frac])
    return jax.ops.segment_sum(mass, idx, num_segments=_INTERVALS + 1)


def _circle_spectrum(v: jax.Array) -> jax.Array:
    """rfft of the reflected extension of node masses ``v (G,)`` to the circle of length 2."""
    u = jnp.concatenate([2 * v[:1], v[1:-1], 2 * v[-1:], v[-2:0:-1]])  # (2 * _INTERVALS,)
    return jnp.fft.rfft(u)


def _smooth(spectrum: jax.Array, sigma: jax.Array, dtype: DTypeLike) -> jax.Array:
    """Σ_l masses_l K_σ(t_j, t_l) at the nodes, ``(G,)``: the circular convolution with the
    2-periodic Gaussian, whose Fourier coefficients are ``exp(−π² m² σ² / 2)``."""
    m = jnp.arange(_INTERVALS + 1, dtype=dtype)
    coef = jnp.exp(-0.5 * jnp.square(jnp.asarray(math.pi, dtype) * m * sigma))
    # Node spacing h = 2/L, so the Riemann factor of the continuous convolution is 1/h.
    full = jnp.fft.irfft(spectrum * coef.astype(spectrum.dtype), n=2 * _INTERVALS) * _INTERVALS
    return full[: _INTERVALS + 1].astype(dtype)


def _integral(values: jax.Array) -> jax.Array:
    """Trapezoid rule on the nodes of [0, 1]."""
    return (jnp.sum(values) - 0.5 * (values[0] + values[-1])) / _INTERVALS


def _residual_spectrum(p: jax.Array, y: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    if mask is None:
        return _circle_spectrum(_grid_masses(p, (y - p) / p.shape[0]))
    # only the units in `mask` (the others padding): zero mass, n the units'
    w = jnp.where(mask, y - p, jnp.zeros((), p.dtype)) / jnp.sum(mask).astype(p.dtype)
    return _circle_spectrum(_grid_masses(p, w))


def _smece_at(spectrum: jax.Array, sigma: jax.Array, dtype: DTypeLike) -> jax.Array:
    return _integral(jnp.abs(_smooth(spectrum, sigma, dtype)))


def _smooth_ece(
    p: jax.Array, y: jax.Array, mask: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """``(smECE, σ*)`` of scores ``p (n,)`` and labels ``y (n,)`` (traced core); with ``mask``
    (bool ``(n,)``), of the units in it."""
    dtype = p.dtype
    spectrum = _residual_spectrum(p, y, mask)
    at = lambda s: _smece_at(spectrum, s, dtype)  # noqa: E731

    def step(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        above = at(mid) > mid  # the fixed point lies above mid
        return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

    sigma_min = jnp.asarray(SIGMA_MIN, dtype)
    at_min = at(sigma_min)
    # The bracket derives from the data (a no-op `where`) so that, under shard_map, the loop
    # carry has the data's varying type.
    data_calibrated = at_min <= sigma_min
    lo0 = jnp.where(data_calibrated, sigma_min, sigma_min)
    hi0 = jnp.where(data_calibrated, jnp.ones_like(sigma_min), jnp.ones_like(sigma_min))
    _, hi = lax.fori_loop(0, _STEPS, step, (lo0, hi0))
    sigma = jnp.where(data_calibrated, sigma_min, hi)
    return at(sigma), sigma


def _prepare(p: ArrayLike, y: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """Validated scores ``p (n,)`` and labels ``y (n,)`` in the scores' float dtype."""
    _inputs.scores("p", p)
    _inputs.expected_labels("y", y, "p", p)
    dtype = _arrays.float_dtype(p)
    return _arrays.as_float(p, dtype), _arrays.as_float(y, dtype)


def _check_bandwidth(bandwidth: ArrayLike) -> None:
    if not _checks.is_concrete(bandwidth):
        return
    b = np.asarray(bandwidth, dtype=np.float64)
    if b.shape != () or not (0.0 < float(b) <= 10.0):
        _checks.fail(
            "bandwidth",
            "a kernel width σ in (0, 10] (or None for the automatic one)",
            repr(bandwidth),
        )


@functools.partial(jax.jit, static_argnames=("fixed",))
def _smooth_ece_jit(p, y, bandwidth, *, fixed):
    if fixed:
        return _smece_at(_residual_spectrum(p, y), bandwidth, p.dtype), bandwidth
    return _smooth_ece(p, y)


def smooth_ece(p: ArrayLike, y: ArrayLike, bandwidth: ArrayLike | None = None) -> jax.Array:
    """Smooth ECE of scores ``p (n,)`` against labels ``y (n,)`` (Błasiok & Nakkiran 2023).

    Args:
      p: ``(n,)`` predicted probabilities of the positive class.
      y: ``(n,)`` labels in {0, 1}, or expected labels in [0, 1] (a float array: the label's
        probability, e.g. ``Σ_k q_k y_cf[i, k]`` over a unit's counterfactuals).
      bandwidth: kernel width σ; None (default) for the automatic one, the fixed point
        ``smECE_σ = σ`` (:func:`smooth_ece_bandwidth`).

    Returns:
      A scalar in [0, 1]: ``∫_0^1 |r̂_σ(t)| dt`` (module docstring).

    Example:
      >>> import numpy as np
      >>> # Constant scores: r̂ is the kernel times (mean y − c), so smECE = |mean y − c|.
      >>> round(float(smooth_ece(np.full(4, 0.5, np.float32), np.array([1, 1, 1, 0]))), 4)
      0.25
    """
    p, y = _prepare(p, y)
    if bandwidth is None:
        return _smooth_ece_jit(p, y, None, fixed=False)[0]
    _check_bandwidth(bandwidth)
    return _smooth_ece_jit(p, y, jnp.asarray(bandwidth, p.dtype), fixed=True)[0]


def smooth_ece_bandwidth(p: ArrayLike, y: ArrayLike) -> jax.Array:
    """The automatic kernel width σ* of :func:`smooth_ece`: the fixed point
    ``smECE_σ* = σ*`` (so it equals the smooth ECE, up to the bisection's 1e-7), or
    ``σ_min = 1e-3`` when the scores are calibrated to within that resolution.

    Example:
      >>> import numpy as np
      >>> round(float(smooth_ece_bandwidth(np.full(4, 0.5, np.float32), np.array([1, 1, 1, 0]))), 4)
      0.25
    """
    p, y = _prepare(p, y)
    return _smooth_ece_jit(p, y, None, fixed=False)[1]
