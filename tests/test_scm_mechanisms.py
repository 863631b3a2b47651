"""Mechanisms, one unit at a time: invertibility, densities, vmap/jit consistency, and the
exact Gumbel-max posterior."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

import cfjax as cf

S = cf.scm

CONTINUOUS = {
    "linear-gaussian": (S.LocationScale(), 2),
    "location-scale-mlp": (S.LocationScale(hidden=(16,), heteroscedastic=True), 2),
    "spline": (S.Spline(num_bins=6, hidden=(16,)), 2),
    "spline-bounded": (S.Spline(low=20.0, high=90.0, hidden=(16,)), 2),
    "root-flow": (S.Spline(num_bins=6), 0),
}


def perturbed_params(mech, parent_dim, seed, scale=0.3):
    params = mech.init(jax.random.key(seed), parent_dim)
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
    return jax.tree.unflatten(tree, [l + scale * jax.random.normal(k, l.shape) for l, k in zip(leaves, keys)])


@pytest.mark.parametrize("name", list(CONTINUOUS))
def test_inverse_and_forward_compose_to_identity(rng, name):
    mech, p_dim = CONTINUOUS[name]
    params = perturbed_params(mech, p_dim, int(rng.integers(1 << 30)))
    n = 2000
    pa = jnp.asarray(rng.uniform(size=(n, p_dim)), jnp.float32)
    u = jnp.asarray(rng.normal(size=n), jnp.float32)
    x = jax.vmap(mech.forward, in_axes=(None, 0, 0))(params, u, pa)
    u_back = jax.vmap(mech.inverse, in_axes=(None, 0, 0))(params, x, pa)
    x_back = jax.vmap(mech.forward, in_axes=(None, 0, 0))(params, u_back, pa)
    if not getattr(mech, "bounded", False):  # a saturated sigmoid loses u's digits, not x's
        np.testing.assert_allclose(u_back, u, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x_back, x, rtol=1e-5, atol=1e-5 * float(jnp.std(x)))


@pytest.mark.parametrize("name", list(CONTINUOUS))
def test_log_prob_is_the_change_of_variables_density_and_integrates_to_one(rng, x64, name):
    mech, p_dim = CONTINUOUS[name]
    params = perturbed_params(mech, p_dim, int(rng.integers(1 << 30)))
    params = jax.tree.map(lambda a: a.astype(jnp.float64), params)
    pa = jnp.asarray(rng.uniform(size=p_dim))
    u = jnp.asarray(rng.normal(size=50))
    x = jax.vmap(mech.forward, in_axes=(None, 0, None))(params, u, pa)
    dxdu = jax.vmap(jax.grad(mech.forward, argnums=1), in_axes=(None, 0, None))(params, u, pa)
    expected = -0.5 * u**2 - 0.5 * np.log(2 * np.pi) - jnp.log(jnp.abs(dxdu))
    got = jax.vmap(mech.log_prob, in_axes=(None, 0, None))(params, x, pa)
    np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-8)
    # Total mass over the support: integrate in u-space to avoid the tails' grid problems.
    # (compiled once: quad calls it a few hundred times)
    density = jax.jit(lambda t: jnp.exp(mech.log_prob(params, mech.forward(params, t, pa), pa))
                      * jnp.abs(jax.grad(mech.forward, argnums=1)(params, t, pa)))
    mass, _ = integrate.quad(lambda t: float(density(t)), -9, 9, limit=200)
    assert mass == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("name", list(CONTINUOUS))
def test_jit_and_vmap_match_the_single_unit_functions(rng, name):
    mech, p_dim = CONTINUOUS[name]
    params = perturbed_params(mech, p_dim, 3)
    pa = jnp.asarray(rng.uniform(size=(7, p_dim)), jnp.float32)
    u = jnp.asarray(rng.normal(size=7), jnp.float32)
    batched = jax.jit(jax.vmap(mech.forward, in_axes=(None, 0, 0)))(params, u, pa)
    single = np.array([float(mech.forward(params, u[i], pa[i])) for i in range(7)])
    np.testing.assert_allclose(batched, single, rtol=1e-5, atol=1e-5)
    lp = jax.jit(jax.vmap(mech.log_prob, in_axes=(None, 0, 0)))(params, batched, pa)
    lp_single = np.array([float(mech.log_prob(params, batched[i], pa[i])) for i in range(7)])
    np.testing.assert_allclose(lp, lp_single, rtol=1e-4, atol=1e-4)


def test_bounded_spline_stays_in_its_support_and_accepts_the_bounds(rng):
    mech = S.Spline(low=20.0, high=90.0)
    params = perturbed_params(mech, 0, 0, scale=2.0)
    u = jnp.asarray(rng.normal(size=5000) * 4, jnp.float32)
    x = jax.vmap(mech.forward, in_axes=(None, 0, None))(params, u, jnp.zeros((0,)))
    assert float(x.min()) >= 20 and float(x.max()) <= 90
    edge = jnp.array([20.0, 90.0])
    back = jax.vmap(lambda v: mech.forward(params, mech.inverse(params, v, jnp.zeros((0,))), jnp.zeros((0,))))(edge)
    np.testing.assert_allclose(back, edge, rtol=1e-5)
    with pytest.raises(ValueError, match=r"support \[20.0, 90.0\]"):
        mech.check_values("age", np.array([19.0]), "data")


# ---------------------------------------------------------------------------- Gumbel-max


def test_gumbel_abduction_returns_the_factual_class_every_time(rng):
    n, c = 20_000, 5
    mech = S.GumbelMax(c, hidden=(8,))
    params = perturbed_params(mech, 3, int(rng.integers(1 << 30)), scale=3.0)
    pa = jnp.asarray(rng.normal(size=(n, 3)) * 3, jnp.float32)
    # Factual classes from the prior, plus deliberately improbable ones.
    x = jax.vmap(mech.forward, in_axes=(None, 0, 0))(
        params, jax.vmap(mech.sample_noise)(jax.random.split(jax.random.key(1), n)), pa)
    x = jnp.where(jnp.arange(n) % 4 == 0, jnp.asarray(rng.integers(0, c, n)), x)
    keys = jax.random.split(jax.random.key(2), n)
    g = jax.vmap(mech.abduct, in_axes=(None, 0, 0, 0))(params, x, pa, keys)
    again = jax.vmap(mech.forward, in_axes=(None, 0, 0))(params, g, pa)
    assert int(jnp.sum(again != x)) == 0


def test_gumbel_posterior_matches_rejection_sampling(rng):
    """Counterfactual class frequencies under new logits: exact posterior vs a brute-force
    Monte Carlo reference that keeps only prior draws reproducing the observed class."""
    c = 4
    logits = jnp.asarray(rng.normal(size=c) * 1.5, jnp.float32)
    new_logits = jnp.asarray(rng.normal(size=c) * 1.5, jnp.float32)
    observed = int(rng.integers(0, c))
    n = 200_000
    post = jax.vmap(S.gumbel_posterior, in_axes=(0, None, None))(
        jax.random.split(jax.random.key(3), n), logits, observed)
    ours = np.bincount(np.asarray(jnp.argmax(post - logits[None] + new_logits[None], axis=1)), minlength=c) / n
    prior = jax.random.gumbel(jax.random.key(4), (4 * n, c))
    keep = np.asarray(jnp.argmax(logits[None] + prior, axis=1) == observed)
    brute = np.bincount(np.asarray(jnp.argmax(new_logits[None] + prior[keep], axis=1)), minlength=c) / keep.sum()
    se = np.sqrt(brute * (1 - brute) / keep.sum() + ours * (1 - ours) / n)
    assert np.all(np.abs(ours - brute) <= 5 * se + 1e-3), (ours, brute)
    # and the factual class comes back under the old logits
    assert np.all(np.asarray(jnp.argmax(post, axis=1)) == observed)


def test_gumbel_log_prob_is_log_softmax(rng):
    mech = S.GumbelMax(3)
    params = perturbed_params(mech, 2, 0, scale=1.0)
    pa = jnp.asarray(rng.normal(size=2), jnp.float32)
    logits = mech.logits(params, pa)
    for k in range(3):
        assert float(mech.log_prob(params, jnp.int32(k), pa)) == pytest.approx(
            float(jax.nn.log_softmax(logits)[k]), abs=1e-6)


def test_gumbel_needs_a_key_and_is_not_invertible():
    mech = S.GumbelMax(2)
    params = mech.init(jax.random.key(0), 0)
    with pytest.raises(ValueError, match="key"):
        mech.abduct(params, jnp.int32(1), jnp.zeros((0,)), None)
    with pytest.raises(TypeError):
        mech.inverse(params, jnp.int32(1), jnp.zeros((0,)))
