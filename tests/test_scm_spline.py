"""The spline mechanism's numerics: float32 abduction stays accurate for large conditioner
outputs and unbounded parents, the spline's slope is bounded for any parameters, and the
rational-quadratic pieces interpolate their knots."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax as cf
from cfjax.scm import spline as spline_module

S = cf.scm


def large_params(mech, parent_dim, rng, reach=4.0):
    """Random parameters whose conditioner outputs reach ±``reach`` on standard normal parents
    (every weight perturbed at scale 1, the last layer rescaled; on parents of scale 10 they
    reach about ±40), and an output map ``loc + exp(log_scale)·z`` of moderate size."""
    params = mech.init(jax.random.key(int(rng.integers(1 << 30))), parent_dim)
    params = jax.tree.map(lambda a: a + jnp.asarray(rng.normal(size=a.shape), a.dtype), params)
    if not mech.bounded:
        params["log_scale"] = jnp.asarray(rng.uniform(-1, 1), jnp.float32)
    pa = jnp.asarray(rng.normal(size=(4096, parent_dim)), jnp.float32)
    out = jax.vmap(mech._net().apply, in_axes=(None, 0))(params["net"], pa)
    factor = reach / jnp.max(jnp.abs(out))
    last = max(params["net"]["params"])  # "Dense_<last>", or "bias" for a root flow
    last_layer = params["net"]["params"][last]
    params["net"]["params"][last] = jax.tree.map(lambda a: a * factor, last_layer)
    return params


@functools.partial(jax.jit, static_argnums=(0, 1))
def apply(mech, method, params, values, pa):
    """``mech.<method>`` over units (compiled once per mechanism, method and dtype)."""
    return jax.vmap(getattr(mech, method), in_axes=(None, 0, 0))(params, values, pa)


@functools.partial(jax.jit, static_argnums=0)
def spline_knots(mech, params, pa):
    """Each unit's knots ``(x_k, y_k, d_k)``, each ``(N, K + 1)``."""
    raw = jax.vmap(mech._net().apply, in_axes=(None, 0))(params["net"], pa)
    return jax.vmap(lambda r: spline_module._knots(r, mech.num_bins, mech.bound))(raw)


@functools.partial(jax.jit, static_argnums=0)
def evaluate(fn, knots, values):
    """``fn(knots, value)[0]`` per unit."""
    return jax.vmap(lambda k, v: fn(k, v)[0])(knots, values)


@functools.partial(jax.jit, static_argnums=0)
def slopes(mech, params, u):
    """dx/du of a root flow by autodiff: ``(P, U)`` for P parameter sets and U noise values."""
    slope = jax.grad(mech.forward, argnums=1)
    return jax.vmap(lambda p: jax.vmap(slope, in_axes=(None, 0, None))(p, u, jnp.zeros((0,), u.dtype)))(params)


@pytest.mark.parametrize("parent_dim", [3, 0])
def test_float32_round_trips_with_large_parameters_and_parents_of_scale_10(rng, parent_dim):
    mech = S.Spline(hidden=(32,))
    params = large_params(mech, parent_dim, rng, reach=4.0 if parent_dim else 40.0)
    n = 20_000
    pa = jnp.asarray(rng.normal(size=(n, parent_dim)) * 10, jnp.float32)
    u = jnp.asarray(rng.normal(size=n) * 2, jnp.float32)
    x = apply(mech, "forward", params, u, pa)
    u_back = apply(mech, "inverse", params, x, pa)
    assert float(jnp.max(jnp.abs(u_back - u))) <= 1e-4
    x_back = apply(mech, "forward", params, u_back, pa)
    np.testing.assert_allclose(x_back, x, rtol=1e-5, atol=1e-5 * float(jnp.std(x)))
    # Against float64 with the same (rounded) parameters and observations: the float32
    # conditioner's own rounding (outputs near ±40 here) moves the knots, hence the 5e-4.
    with jax.enable_x64(True):
        p64 = jax.tree.map(lambda a: a.astype(jnp.float64), params)
        pa64 = pa.astype(jnp.float64)
        x64 = np.asarray(apply(mech, "forward", p64, u.astype(jnp.float64), pa64))
        u64 = np.asarray(apply(mech, "inverse", p64, x.astype(jnp.float64), pa64))
    np.testing.assert_allclose(x, x64, rtol=1e-4, atol=1e-4 * np.std(x64))
    assert np.max(np.abs(np.asarray(u_back, np.float64) - u64)) <= 5e-4


def test_float32_spline_evaluation_matches_float64_on_the_same_knots(rng):
    """The rational-quadratic pieces themselves (stable root of the inverse, no cancellation)
    lose only a few ulps in float32, for the knots of large conditioner outputs."""
    mech = S.Spline(hidden=(32,))
    params = large_params(mech, 3, rng)
    n = 20_000
    pa = jnp.asarray(rng.normal(size=(n, 3)) * 10, jnp.float32)
    u = jnp.asarray(rng.normal(size=n) * 2, jnp.float32)
    knots = spline_knots(mech, params, pa)
    z = evaluate(spline_module._rq_forward, knots, u)
    u_back = evaluate(spline_module._rq_inverse, knots, z)
    with jax.enable_x64(True):
        k64 = jax.tree.map(lambda a: a.astype(jnp.float64), knots)
        z64 = np.asarray(evaluate(spline_module._rq_forward, k64, u.astype(jnp.float64)))
        u64 = np.asarray(evaluate(spline_module._rq_inverse, k64, z.astype(jnp.float64)))
    np.testing.assert_allclose(z, z64, rtol=0, atol=1e-5)
    np.testing.assert_allclose(u_back, u64, rtol=0, atol=2e-5)


def test_bounded_float32_round_trip_with_large_parameters_and_parents_of_scale_10(rng):
    mech = S.Spline(low=20.0, high=90.0, hidden=(32,))
    params = large_params(mech, 2, rng)
    n = 20_000
    pa = jnp.asarray(rng.normal(size=(n, 2)) * 10, jnp.float32)
    x = jnp.asarray(rng.uniform(20, 90, size=n), jnp.float32)
    u = apply(mech, "inverse", params, x, pa)
    np.testing.assert_allclose(apply(mech, "forward", params, u, pa), x, rtol=2e-5)
    # Where the sigmoid is far from saturation (|z| <= 1), the noise comes back too.
    t = (np.asarray(x, np.float64) - 20) / 70
    inner = jnp.asarray(np.abs(np.log(t) - np.log1p(-t)) <= 1)
    u_back = apply(mech, "inverse", params, apply(mech, "forward", params, u, pa), pa)
    assert float(jnp.max(jnp.where(inner, jnp.abs(u_back - u), 0))) <= 1e-4


def test_the_slope_is_bounded_for_any_conditioner_output(rng, x64):
    """S' in [0.02, 25] (the documented bound), measured by autodiff of the forward map on a
    fine grid, for extreme outputs of a root flow's free vector."""
    for num_bins in (2, 8, 16):
        mech = S.Spline(num_bins=num_bins, hidden=())
        raw = np.concatenate([rng.normal(size=(200, 3 * num_bins + 1)) * 30,
                              rng.choice([-40.0, 0.0, 40.0], size=(200, 3 * num_bins + 1))])
        params = jax.vmap(lambda b: {"net": {"params": {"bias": b}}, "loc": jnp.zeros(()),
                                     "log_scale": jnp.zeros(())})(jnp.asarray(raw))
        u = jnp.linspace(-5.5, 5.5, 1101)
        d = slopes(mech, params, u)
        assert float(d.min()) >= 0.02 and float(d.max()) <= 25, (num_bins, float(d.min()), float(d.max()))
        np.testing.assert_allclose(d[:, jnp.abs(u) > 5], 1.0, rtol=1e-12)  # identity tails


def test_rational_quadratic_pieces_interpolate_the_knots(rng, x64):
    """S(x_k) = y_k and S'(x_k) = d_k from both sides, for the knots the parameterisation
    builds; bin slopes in [1/9, 9], widths at least 1e-3/(1 + 1e-3 K) of the range, and zeros
    give the identity."""
    k, bound = 6, 5.0
    raw = jnp.asarray(rng.normal(size=3 * k + 1) * 3)
    xk, yk, dk = spline_module._knots(raw, k, bound)
    knots = (xk, yk, dk)
    assert float(xk[0]) == -bound and float(xk[-1]) == bound
    assert float(yk[0]) == -bound and float(yk[-1]) == bound
    widths = jnp.diff(xk)
    assert float(jnp.min(widths)) >= 2 * bound * 1e-3 / (1 + 1e-3 * k) * (1 - 1e-9)
    slope = jnp.diff(yk) / widths
    assert float(jnp.min(slope)) >= 1 / 9 * (1 - 1e-9) and float(jnp.max(slope)) <= 9 * (1 + 1e-9)
    fwd = jax.jit(jax.vmap(lambda kn, v: spline_module._rq_forward(kn, v)[0], in_axes=(None, 0)))
    np.testing.assert_allclose(fwd(knots, xk), yk, rtol=1e-13, atol=1e-13)
    # Derivatives just right and just left of each knot (each side in its own piece or tail).
    grad = jax.jit(jax.vmap(jax.grad(lambda kn, v: spline_module._rq_forward(kn, v)[0], argnums=1),
                            in_axes=(None, 0)))
    np.testing.assert_allclose(grad(knots, xk + 1e-12), dk, rtol=1e-7)
    np.testing.assert_allclose(grad(knots, xk - 1e-12), dk, rtol=1e-7)
    inv = jax.jit(jax.vmap(lambda kn, v: spline_module._rq_inverse(kn, v)[0], in_axes=(None, 0)))
    np.testing.assert_allclose(inv(knots, yk), xk, rtol=1e-13, atol=1e-13)
    zero = spline_module._knots(jnp.zeros(3 * k + 1), k, bound)
    u = jnp.asarray(rng.uniform(-7, 7, size=100))
    np.testing.assert_allclose(fwd(zero, u), u, rtol=1e-14, atol=1e-14)
