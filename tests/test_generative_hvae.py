"""The conditional HVAE image mechanism (cfjax.generative.hvae / .mechanism): exact pixel-noise
abduction through cfjax.scm.SCM, deterministic abduction at temperature 0, the analytic KL and
the ELBO against numpy/scipy references, counterfactual parents change the image, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import cfjax as cf
from cfjax._checks import ValidationError
from cfjax.generative.hvae import HVAEConfig, gaussian_kl, gaussian_log_prob
from cfjax.generative.mechanism import ImageHVAE

CFG = HVAEConfig(image_size=16, channels=(4, 4, 4), latent_dims=(0, 2, 2))
N = 6


def _scm(temperature: float = 1.0) -> cf.scm.SCM:
    return cf.scm.SCM({"sex": [], "age": [], "image": ["sex", "age"]},
                      {"sex": cf.scm.GumbelMax(2), "age": cf.scm.LocationScale(),
                       "image": ImageHVAE(CFG, temperature)})


def _init(mech: ImageHVAE, seed: int, parent_dim: int = 2):
    return jax.jit(mech.init, static_argnums=1)(jax.random.key(seed), parent_dim)


def _perturbed(params, rng, scale=0.2):
    """Random parameters: the initialisation (whose output layers start near zero) plus
    Gaussian noise on every leaf, so that pixel means, scales and the parents' effect vary."""
    return jax.tree.map(lambda a: a + jnp.asarray(scale * rng.normal(size=a.shape), a.dtype), params)


def _data(rng, n=N):
    return {"sex": rng.integers(0, 2, n).astype(np.int32), "age": rng.normal(size=n).astype(np.float32),
            "image": rng.uniform(size=(n, 16, 16)).astype(np.float32)}


def test_pixel_noise_abduction_is_exact_and_parents_change_the_image(rng, x64):
    # In float64 (the x64 fixture) so that exactness is tested, not float32 rounding, which the
    # random parameters amplify (images far outside [0, 1] under the flipped parent).
    scm = _scm()
    params = jax.jit(lambda k: scm.init(key=k))(jax.random.key(int(rng.integers(2**31))))
    params = {**params, "image": _perturbed(params["image"], rng)}
    data = _data(rng)
    s, age = data["sex"], data["age"]
    # do(sex := observed sex), do(sex := other sex), do(age := observed age): every action
    # recomputes the image from its abducted latents and pixel noise.
    interventions = [{"sex": np.stack([s, 1 - s], axis=1)}, {"age": age[:, None]}]  # per unit (N, K)
    # sex's noise is given (any Gumbels: sex is either kept or set by the action), the other
    # nodes are abducted: GumbelMax's posterior sampling does not run under x64 with strict
    # dtype promotion (an int64 arange against int32 classes).
    gumbels = {"sex": rng.gumbel(size=(N, 2))}
    out = scm.counterfactual(params, data, interventions, key=jax.random.key(int(rng.integers(2**31))),
                             noise=gumbels)
    images = np.asarray(out["image"])
    assert images.shape == (N, 3, 16, 16)
    assert images.dtype == np.float64
    np.testing.assert_allclose(images[:, 0], data["image"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(images[:, 2], data["image"], rtol=0, atol=1e-10)
    change = np.abs(images[:, 1] - data["image"]).reshape(N, -1).max(axis=1)
    assert (change > 1e-3).all(), change
    np.testing.assert_array_equal(np.asarray(out["sex"][:, 1]), 1 - s)


def test_temperature_zero_abduction_is_deterministic(rng):
    mech = ImageHVAE(CFG, temperature=0.0)
    params = _perturbed(_init(mech, 0), rng)
    x = jnp.asarray(rng.uniform(size=(N, 16, 16)), jnp.float32)
    pa = jnp.asarray(rng.normal(size=(N, 2)), jnp.float32)
    with_key = jax.jit(jax.vmap(mech.abduct, in_axes=(None, 0, 0, 0)))
    without = jax.jit(jax.vmap(lambda p, xi, pi: mech.abduct(p, xi, pi, None), in_axes=(None, 0, 0)))
    keys = jax.random.split(jax.random.key(int(rng.integers(2**31))), 2 * N)
    u1, u2, u0 = with_key(params, x, pa, keys[:N]), with_key(params, x, pa, keys[N:]), without(params, x, pa)
    for a, b in ((u1, u2), (u1, u0)):
        for la, lb in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            np.testing.assert_array_equal(np.asarray(la), np.asarray(lb))
    with pytest.raises(ValidationError, match="`key`"):
        ImageHVAE(CFG, temperature=0.5).abduct(params, x[0], pa[0], None)


def test_gaussian_kl_and_log_prob_match_closed_forms(rng):
    shape = (5, 7)
    mu_q, mu_p = rng.normal(size=shape), rng.normal(size=shape)
    ls_q, ls_p = rng.uniform(-2, 1, size=shape), rng.uniform(-2, 1, size=shape)
    s_q, s_p = np.exp(ls_q), np.exp(ls_p)
    ref = np.log(s_p / s_q) + (s_q**2 + (mu_q - mu_p) ** 2) / (2 * s_p**2) - 0.5
    f32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    got = np.asarray(gaussian_kl(f32(mu_q), f32(ls_q), f32(mu_p), f32(ls_p)))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert np.allclose(np.asarray(gaussian_kl(f32(mu_q), f32(ls_q), f32(mu_q), f32(ls_q))), 0, atol=1e-6)
    x = rng.normal(size=shape)
    np.testing.assert_allclose(np.asarray(gaussian_log_prob(f32(x), f32(mu_q), f32(ls_q))),
                               stats.norm.logpdf(x, mu_q, s_q), rtol=1e-4, atol=1e-4)


def test_elbo_matches_a_numpy_computation_from_the_posterior_pass(rng):
    mech = ImageHVAE(CFG)
    params = _perturbed(_init(mech, 1), rng, scale=0.1)
    x = jnp.asarray(rng.uniform(size=(16, 16)), jnp.float32)
    pa = jnp.asarray(rng.normal(size=2), jnp.float32)
    key = jax.random.key(int(rng.integers(2**31)))

    @jax.jit
    def run(params, x, pa, key):
        out = mech.posterior(params, x, pa, key, 1.0)
        loc, log_scale = mech.decode(params, tuple(e[0] for e in out.eps), pa)
        return out, mech.elbo(params, x, pa, key), loc, log_scale

    out, elbo, loc, log_scale = run(params, x, pa, key)
    kl = np.array([float(k[0]) for k in out.kl])
    assert (kl >= -1e-4).all()
    ref = stats.norm.logpdf(np.asarray(x, np.float64), np.asarray(out.loc[0], np.float64),
                            np.exp(np.asarray(out.log_scale[0], np.float64))).sum() - kl.sum()
    np.testing.assert_allclose(float(elbo), ref, rtol=1e-4, atol=1e-2)
    # decoding the posterior's prior-standardised latents with the same parents gives the same pixels
    np.testing.assert_allclose(np.asarray(loc), np.asarray(out.loc[0]), rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(log_scale), np.asarray(out.log_scale[0]), rtol=0, atol=1e-5)
    assert np.all(np.asarray(out.log_scale) <= 1e-6) and np.all(np.asarray(out.log_scale) >= np.log(0.01) - 1e-5)


def test_bad_input_names_the_argument(rng):
    scm = _scm()
    params = jax.jit(lambda k: scm.init(key=k))(jax.random.key(0))
    data = _data(rng)
    key = jax.random.key(0)
    with pytest.raises(ValidationError, match=r"`data\['image'\]`"):
        scm.abduct(params, {**data, "image": data["image"][:, :8, :8]}, key=key)
    bad = data["image"].copy()
    bad[1, 2, 3] = np.nan
    with pytest.raises(ValidationError, match=r"`data\['image'\]`.*NaN"):
        scm.abduct(params, {**data, "image": bad}, key=key)
    with pytest.raises(ValidationError, match=r"`data`: missing column 'age'"):
        scm.abduct(params, {"sex": data["sex"], "image": data["image"]}, key=key)
    with pytest.raises(ValidationError, match="`temperature`"):
        ImageHVAE(CFG, temperature=-0.5)
    mech = ImageHVAE(CFG)
    with pytest.raises(ValidationError, match="`x`"):
        mech.abduct(params["image"], jnp.zeros((8, 8)), jnp.zeros(2), key)
    with pytest.raises(ValidationError, match="`pa`"):
        mech.abduct(params["image"], jnp.zeros((16, 16)), jnp.zeros(3), key)
    with pytest.raises(ValidationError, match="`config`"):
        ImageHVAE("not a config")
