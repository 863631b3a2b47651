"""Conditional rational-quadratic spline flows: ``x = T(S_{θ(pa)}(u))``, u ~ N(0, 1)."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import distrax
import jax
import jax.numpy as jnp
import numpy as np

from cfjax._checks import ValidationError
from cfjax.scm.mechanism import Mechanism
from cfjax.scm.nets import Conditioner
from cfjax.typing import PyTree

__all__ = ["Spline"]

_LOG_2PI = float(np.log(2 * np.pi))

# Conditioning of the spline. Abduction from a float32 observation can only be as accurate as
# ulp(z) / S'(u): where the spline is nearly flat, float32 cannot tell the noise values apart
# (with unconstrained knots, S' reaches 1e-10 for conditioner outputs of ±20, and abduction
# errs by up to 8). So the parameterisation bounds the slope, not the bin sizes: bin widths
# are free (a softmax, each at least _MIN_WIDTH/(1 + K·_MIN_WIDTH) of the range), and each
# bin's slope h/w is exp(a_k) over the width-weighted mean of exp(a_j), with
# a = log(_RHO)/2·tanh(·) smoothly bounded, so h/w ∈ [1/_RHO, _RHO] and the heights sum to
# the range. An inner knot's derivative is the harmonic mean of its two bin slopes (the
# Fritsch–Butland choice: between the smaller slope and twice it) times exp(±_KNOT_LOG_RANGE);
# the end knots have slope 1 (identity tails). Then S' lies in [0.021, 25] everywhere, for
# any parameters and parents.
_RHO = 9.0
_KNOT_LOG_RANGE = 1.0
_MIN_WIDTH = 1e-3


def _knots(raw: jax.Array, num_bins: int, bound: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The spline's knots ``(x_k, y_k)`` and derivatives ``d_k``, each ``(K + 1,)``, from the
    conditioner's ``3K + 1`` unconstrained outputs: K width logits, K slope logits, the
    derivatives at the K + 1 knots (the two ends unused). All zero: the identity."""
    k = num_bins
    width = 2 * bound * (_MIN_WIDTH + jax.nn.softmax(raw[:k])) / (1 + k * _MIN_WIDTH)
    half_log_rho = float(np.log(_RHO)) / 2
    weight = jnp.exp(half_log_rho * jnp.tanh(raw[k : 2 * k] / half_log_rho))
    slopes = 2 * bound * weight / jnp.sum(width * weight)

    def edges(sizes):
        inner = -bound + jnp.cumsum(sizes[:-1])
        return jnp.concatenate(
            [jnp.full((1,), -bound, raw.dtype), inner, jnp.full((1,), bound, raw.dtype)]
        )

    xk, yk = edges(width), edges(width * slopes)
    # The derivatives come from the slopes as computed, not from differences of knots (which
    # lose digits in narrow bins and would carry the loss into the wide neighbours' shape).
    harmonic = 2 * slopes[:-1] * slopes[1:] / (slopes[:-1] + slopes[1:])
    inner = harmonic * jnp.exp(_KNOT_LOG_RANGE * jnp.tanh(raw[2 * k + 1 : 3 * k] / _KNOT_LOG_RANGE))
    one = jnp.ones((1,), raw.dtype)
    return xk, yk, jnp.concatenate([one, inner, one])


def _bin(edges: jax.Array, v: jax.Array, *arrays: jax.Array):
    """Left and right values of ``arrays`` for the bin of ``edges`` holding v (the first or
    last bin outside the range)."""
    i = jnp.sum(v >= edges[1:-1])
    return [(a[i], a[i + 1]) for a in arrays]


def _rq_log_slope(s, d0, d1, xi):
    """log S' at relative position xi of a bin with slope s and end derivatives d0, d1."""
    m = xi * (1 - xi)
    denominator = s + (d0 + d1 - 2 * s) * m
    return (
        2 * jnp.log(s)
        + jnp.log(d1 * xi * xi + 2 * s * m + d0 * (1 - xi) * (1 - xi))
        - 2 * jnp.log(denominator)
    )


def _rq_forward(knots, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(S(u), log S'(u))`` for one scalar u."""
    xk, yk, dk = knots
    (x0, x1), (y0, y1), (d0, d1) = _bin(xk, u, xk, yk, dk)
    w, h = x1 - x0, y1 - y0
    s = h / w
    xi = jnp.clip((u - x0) / w, 0, 1)
    m = xi * (1 - xi)
    z = y0 + h * (s * xi * xi + d0 * m) / (s + (d0 + d1 - 2 * s) * m)
    log_det = _rq_log_slope(s, d0, d1, xi)
    inside = (u >= xk[0]) & (u <= xk[-1])
    return jnp.where(inside, z, u), jnp.where(inside, log_det, jnp.zeros_like(log_det))


def _rq_inverse(knots, z: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(S⁻¹(z), log S'(S⁻¹(z)))`` for one scalar z."""
    xk, yk, dk = knots
    (x0, x1), (y0, y1), (d0, d1) = _bin(yk, z, xk, yk, dk)
    w, h = x1 - x0, y1 - y0
    s = h / w
    eta = jnp.clip((z - y0) / h, 0, 1)
    # S(x0 + w·xi) = z is a·xi² + b·xi + c = 0 with c = -s·eta ≤ 0 < a + b = s: one root in
    # [0, 1]. Take it in the form that adds terms of one sign (no cancellation): 2c/(-b - √D)
    # when b ≥ 0, (-b + √D)/(2a) when b < 0 (then a = s - b > s).
    b = d0 - eta * (d0 + d1 - 2 * s)
    a = s - b
    c = -s * eta
    root = jnp.sqrt(jnp.maximum(b * b - 4 * a * c, 0))
    positive = b >= 0
    xi = jnp.where(positive, 2 * c, root - b) / jnp.where(positive, -b - root, 2 * a)
    xi = jnp.clip(xi, 0, 1)
    u = x0 + w * xi
    log_det = _rq_log_slope(s, d0, d1, xi)
    inside = (z >= yk[0]) & (z <= yk[-1])
    return jnp.where(inside, u, z), jnp.where(inside, log_det, jnp.zeros_like(log_det))


# Not distrax.RationalQuadraticSpline: its bins take free heights and knot slopes, so S' can
# reach 1e-10 and float32 abduction fails; these knots bound it (see the top of the file).
class _BoundedSlopeSpline(distrax.Bijector):
    """``u -> x = T(S(u))`` for one unit (scalar events): the bounded-slope spline S on the
    knots of the unit's parents, then the :class:`Spline`'s output map T. Log-determinants
    are ``log |dx/du| = log S'(u) + log T'(S(u))``."""

    def __init__(self, mech: Spline, params: PyTree, knots: tuple[jax.Array, jax.Array, jax.Array]):
        super().__init__(event_ndims_in=0)
        self._mech, self._params, self._knots = mech, params, knots

    def forward(self, u: jax.Array) -> jax.Array:
        return self._mech._out(self._params, _rq_forward(self._knots, u)[0])

    def forward_and_log_det(self, u: jax.Array) -> tuple[jax.Array, jax.Array]:
        z, log_ds = _rq_forward(self._knots, u)
        return self._mech._out(self._params, z), log_ds + self._mech._out_log_det(self._params, z)

    def inverse(self, x: jax.Array) -> jax.Array:
        return _rq_inverse(self._knots, self._mech._out_inverse(self._params, x)[0])[0]

    def inverse_terms(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(u, log S'(u), log T'(z))`` for an observed x, ``z = T⁻¹(x)``."""
        z, log_dt = self._mech._out_inverse(self._params, x)
        u, log_ds = _rq_inverse(self._knots, z)
        return u, log_ds, log_dt

    def inverse_and_log_det(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        u, log_ds, log_dt = self.inverse_terms(x)
        return u, -log_ds - log_dt


@dataclasses.dataclass(frozen=True)
class Spline(Mechanism):
    """A monotone rational-quadratic spline of standard normal noise, its knots given by an
    MLP of the parents (Durkan et al. 2019), followed by an output map T.

    ``S`` is a rational-quadratic spline on ``[-bound, bound]`` and the identity outside
    (continuously differentiable). Its bin widths are free, each bin's slope (height over
    width) lies in ``[1/9, 9]`` and each inner knot's derivative within ``e^±1`` of the
    harmonic mean of its two bin slopes, so that ``S'`` lies in ``[0.021, 25]`` for any
    parameters and parents: abduction in float32 recovers the noise to a few 1e-5 (an error
    of about ``ulp(z) / S'``). ``T`` is
    ``loc + exp(log_scale)·z`` (learned) for an unbounded node, and a scaled sigmoid onto
    ``(low, high)`` for a bounded one: samples never leave the support, and data and
    interventions are accepted on the closed ``[low, high]``. An observation on a bound (an
    age of exactly 20) is abducted as if it lay ``16 ε`` of the range inside it (ε the dtype's
    machine epsilon); the round trip reproduces it to about 1e-5 relative. With no parents
    this is a root flow on a standard normal. Fresh parameters give the identity spline.

    :meth:`bijector` is ``T∘S`` as a ``distrax.Bijector`` on :attr:`base_distribution`
    ``distrax.Normal(0, 1)``; :meth:`forward`, :meth:`inverse` and :meth:`log_prob` run
    through it.

    Args:
      num_bins: spline bins. hidden: conditioner widths. bound: spline half-range.
      low, high: the support, or None for an unbounded node.

    Example:
      >>> mech = Spline(num_bins=4)
      >>> params = mech.init(jax.random.key(0), 2)
      >>> x = mech.forward(params, jnp.float32(0.3), jnp.array([1.0, 2.0]))
      >>> round(float(mech.inverse(params, x, jnp.array([1.0, 2.0]))), 6)
      0.3
      >>> dist = distrax.Transformed(mech.base_distribution, mech.bijector(params, jnp.array([1.0, 2.0])))
      >>> bool(jnp.isclose(dist.log_prob(x), mech.log_prob(params, x, jnp.array([1.0, 2.0]))))
      True
    """

    num_bins: int = 8
    hidden: tuple[int, ...] = (32,)
    bound: float = 5.0
    low: float | None = None
    high: float | None = None

    def __post_init__(self):
        if not (isinstance(self.num_bins, int) and self.num_bins >= 1):
            raise ValidationError(
                f"`num_bins`: expected a positive integer, got {self.num_bins!r}."
            )
        if not self.bound > 0:
            raise ValidationError(f"`bound`: expected a positive half-range, got {self.bound!r}.")
        if (self.low is None) != (self.high is None):
            raise ValidationError("`low`/`high`: expected both bounds or neither.")
        if self.low is not None and not self.low < self.high:
            raise ValidationError(
                f"`low`/`high`: expected low < high, got {self.low} and {self.high}."
            )

    @property
    def bounded(self) -> bool:
        return self.low is not None

    def _range(self) -> tuple[float, float]:
        """``(low, high)`` of a bounded node."""
        assert self.low is not None and self.high is not None, "a bounded node"
        return self.low, self.high

    def _net(self) -> Conditioner:
        return Conditioner(3 * self.num_bins + 1, self.hidden)

    def init(self, key: jax.Array, parent_dim: int) -> PyTree:
        params: dict[str, PyTree] = {"net": self._net().init(key, jnp.zeros((parent_dim,)))}
        if not self.bounded:
            params["loc"] = jnp.zeros(())
            params["log_scale"] = jnp.zeros(())
        return params

    def _knots(self, params: PyTree, pa: jax.Array):
        out = cast(jax.Array, self._net().apply(params["net"], pa))  # no mutable state: the output
        return _knots(out, self.num_bins, self.bound)

    def sample_noise(self, key: jax.Array) -> jax.Array:
        return jax.random.normal(key, ())

    @property
    def base_distribution(self) -> distrax.Normal:
        """The noise prior ``distrax.Normal(0, 1)``."""
        return distrax.Normal(0.0, 1.0)

    def bijector(self, params: PyTree, pa: jax.Array) -> distrax.Bijector:
        """``u -> T(S(u))`` for one unit with parents ``pa (P,)``, a ``distrax.Bijector`` on
        scalars with ``log |dx/du|``."""
        return _BoundedSlopeSpline(self, params, self._knots(params, pa))

    # T and its inverse with log |dT/dz|.
    def _out(self, params: PyTree, z: jax.Array) -> jax.Array:
        if self.bounded:
            low, high = self._range()
            return low + (high - low) * jax.nn.sigmoid(z)
        return params["loc"] + jnp.exp(params["log_scale"]) * z

    def _out_log_det(self, params: PyTree, z: jax.Array) -> jax.Array:
        """``log |dT/dz|`` at z."""
        if self.bounded:
            low, high = self._range()
            return jnp.log(high - low) + jax.nn.log_sigmoid(z) + jax.nn.log_sigmoid(-z)
        return jnp.broadcast_to(params["log_scale"], jnp.shape(z))

    def _out_inverse(self, params: PyTree, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(z, log |dT/dz|)`` for an observed x."""
        if self.bounded:
            low, high = self._range()
            inside = 16 * jnp.finfo(x.dtype).eps
            t = jnp.clip((x - low) / (high - low), inside, 1 - inside)
            z = jnp.log(t) - jnp.log1p(-t)
            return z, jnp.log(high - low) + jnp.log(t) + jnp.log1p(-t)
        return (x - params["loc"]) * jnp.exp(-params["log_scale"]), params["log_scale"]

    def forward(self, params: PyTree, u: jax.Array, pa: jax.Array) -> jax.Array:
        return self.bijector(params, pa).forward(u)

    def inverse(self, params: PyTree, x: jax.Array, pa: jax.Array) -> jax.Array:
        return self.bijector(params, pa).inverse(x)

    def log_prob(self, params: PyTree, x: jax.Array, pa: jax.Array) -> jax.Array:
        u, log_ds, log_dt = self.bijector(params, pa).inverse_terms(x)
        return -0.5 * (u * u + _LOG_2PI) - log_ds - log_dt

    def encode(self, x: jax.Array) -> jax.Array:
        """Bounded nodes enter their children rescaled to [0, 1] over ``[low, high]``."""
        x = x.reshape(1).astype(jnp.result_type(float))
        if self.bounded:
            low, high = self._range()
            return (x - low) / (high - low)
        return x

    def values_ok(self, values: jax.Array) -> jax.Array:
        ok = super().values_ok(values)
        if self.bounded:
            low, high = self._range()
            ok = ok & jnp.all((values >= low) & (values <= high))
        return ok

    def check_values(self, name: str, values: Any, what: str) -> None:
        super().check_values(name, values, what)
        if self.bounded:
            v = np.asarray(values, np.float64)
            if v.size and (v.min() < self.low or v.max() > self.high):
                raise ValidationError(
                    f"`{what}`: node {name!r} has support [{self.low}, {self.high}], got values "
                    f"in [{v.min():.6g}, {v.max():.6g}]."
                )
