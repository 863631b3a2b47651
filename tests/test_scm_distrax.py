"""The mechanisms' distrax view: bijectors and base distributions agree with the mechanisms."""

from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfjax.scm import GumbelMax, LocationScale, Spline

P, N = 3, 64

CONTINUOUS = {
    "linear_gaussian": LocationScale(),
    "heteroscedastic": LocationScale(hidden=(8,), heteroscedastic=True),
    "spline": Spline(num_bins=5, hidden=(8,)),
    "spline_bounded": Spline(num_bins=5, hidden=(8,), low=-2.0, high=3.0),
}


def _random_params(mech, rng):
    """Fresh parameters with every leaf perturbed, so that the spline is not the identity."""
    params = mech.init(jax.random.key(int(rng.integers(2**31))), P)
    return jax.tree.map(
        lambda leaf: leaf + jnp.asarray(0.7 * rng.standard_normal(leaf.shape), leaf.dtype), params)


def _unit(mech, params, u, pa):
    """Everything the bijector says about one unit, next to what the mechanism says."""
    bij = mech.bijector(params, pa)
    x, log_det = bij.forward_and_log_det(u)
    u_back, log_det_inv = bij.inverse_and_log_det(x)
    # log |dx/du| by autodiff, against the bijector's closed form
    log_det_ad = jnp.log(jnp.abs(jax.grad(bij.forward)(u)))
    return {
        "x": x, "x_fwd": bij.forward(u), "x_mech": mech.forward(params, u, pa),
        "u": u_back, "u_inv": bij.inverse(x), "u_mech": mech.inverse(params, x, pa),
        "log_det": log_det, "log_det_fwd": bij.forward_log_det_jacobian(u),
        "log_det_ad": log_det_ad, "log_det_inv": log_det_inv,
        "d_log_det": jax.grad(bij.forward_log_det_jacobian)(u),
        "lp_mech": mech.log_prob(params, x, pa),
        "lp_parts": mech.base_distribution.log_prob(u_back) + log_det_inv,
        "lp_transformed": distrax.Transformed(mech.base_distribution, bij).log_prob(x),
    }


@pytest.mark.parametrize("name", sorted(CONTINUOUS))
def test_bijector_matches_mechanism(name, rng):
    mech = CONTINUOUS[name]
    params = _random_params(mech, rng)
    u = jnp.asarray(np.clip(1.5 * rng.standard_normal(N), -4, 4), jnp.float32)
    pa = jnp.asarray(rng.standard_normal((N, P)), jnp.float32)
    out = jax.jit(jax.vmap(lambda q, u_, pa_: _unit(mech, q, u_, pa_), in_axes=(None, 0, 0)))(params, u, pa)
    out = {k: np.asarray(v) for k, v in out.items()}
    for v in out.values():
        assert v.shape == (N,)
    # The mechanism's hot paths are the bijector's code: the same numbers, bit for bit.
    np.testing.assert_array_equal(out["x"], out["x_mech"])
    np.testing.assert_array_equal(out["x_fwd"], out["x_mech"])
    np.testing.assert_array_equal(out["u"], out["u_mech"])
    np.testing.assert_array_equal(out["u_inv"], out["u_mech"])
    np.testing.assert_array_equal(out["log_det"], out["log_det_fwd"])
    # The round trip, and log |dx/du| three ways: closed form forward, autodiff, minus inverse.
    # (u is recovered to float32 rounding of x over dx/du: a small σ(pa) magnifies it)
    slack = 2e-4 + 1e-5 * (1 + np.abs(out["x"])) * np.exp(-out["log_det"])
    assert (np.abs(out["u"] - np.asarray(u)) <= slack).all()
    np.testing.assert_allclose(out["log_det"], out["log_det_ad"], atol=1e-4)
    # the inverse's log-det is minus the forward's, up to what x's rounding moves it: the inverse
    # sees u within the slack above, and log |dx/du| moves by its derivative times that
    tol = 2e-5 + np.abs(out["d_log_det"]) * slack
    assert (np.abs(out["log_det_inv"] + out["log_det"]) <= tol).all()
    # log p(x | pa) = log N(u) − log |dx/du| at u = f⁻¹(x), and distrax.Transformed agrees.
    np.testing.assert_allclose(out["lp_parts"], out["lp_mech"], rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(out["lp_transformed"], out["lp_mech"], rtol=1e-5, atol=2e-5)
    assert np.isfinite(out["lp_mech"]).all()


@pytest.mark.parametrize("name", sorted(CONTINUOUS))
def test_base_distribution_is_the_noise_prior(name, rng):
    mech = CONTINUOUS[name]
    base = mech.base_distribution
    assert isinstance(base, distrax.Normal)
    u = mech.sample_noise(jax.random.key(int(rng.integers(2**31))))
    assert base.event_shape == u.shape == ()
    np.testing.assert_allclose(base.log_prob(u), -0.5 * (u * u + np.log(2 * np.pi)), rtol=1e-6)


def test_bijector_types():
    assert isinstance(LocationScale().bijector(LocationScale().init(jax.random.key(0), P), jnp.zeros(P)),
                      distrax.ScalarAffine)
    spline = Spline(num_bins=3, hidden=())
    bij = spline.bijector(spline.init(jax.random.key(0), P), jnp.zeros(P))
    assert isinstance(bij, distrax.Bijector) and not isinstance(bij, distrax.RationalQuadraticSpline)
    assert bij.event_ndims_in == bij.event_ndims_out == 0


def test_location_scale_bijector_is_the_affine_map(rng):
    mech = LocationScale(hidden=(8,), heteroscedastic=True)
    params = _random_params(mech, rng)
    pa = jnp.asarray(rng.standard_normal(P), jnp.float32)
    loc, log_scale = mech._loc_log_scale(params, pa)
    bij = mech.bijector(params, pa)
    np.testing.assert_array_equal(bij.shift, loc)
    np.testing.assert_array_equal(bij.log_scale, log_scale)


def test_gumbel_max_has_no_bijector_but_a_gumbel_noise_prior(rng):
    mech = GumbelMax(num_classes=4)
    params = mech.init(jax.random.key(0), P)
    with pytest.raises(NotImplementedError, match="not one-to-one"):
        mech.bijector(params, jnp.zeros(P))
    base = mech.base_distribution
    g = mech.sample_noise(jax.random.key(int(rng.integers(2**31))))
    assert base.event_shape == g.shape == (4,)
    np.testing.assert_allclose(base.log_prob(g), np.sum(-(g + np.exp(-g))), rtol=1e-5)
