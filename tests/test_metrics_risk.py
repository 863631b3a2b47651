"""Risks and CVaR against brute-force loops, and their invariants."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax as cf
from tests import reference as ref


def make(rng, n=60, k=16, ties=False, dtype=np.float64):
    p_cf = rng.uniform(size=(n, k))
    if ties:
        p_cf = np.round(p_cf * 8) / 8  # many equal atoms, exact 0 and 1 included
    p_obs = rng.uniform(size=n)
    y = rng.integers(0, 2, n)
    q = rng.dirichlet(np.ones(k) * 0.7)
    return p_obs.astype(dtype), p_cf.astype(dtype), y, q.astype(dtype)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("k", [16, 5, 1])
def test_risks_match_brute_force_with_nonuniform_weights(rng, x64, ties, k):
    p_obs, p_cf, y, q = make(rng, k=k, ties=ties)
    alphas = (1.0, 0.5, 0.37, 0.1, 0.01)
    r_orig, r_cm, r_ie, cvars, r_wc = ref.risks(p_obs, p_cf, y, q, alphas)
    np.testing.assert_allclose(cf.metrics.marginal_risk(p_cf, y, q), r_cm, rtol=1e-9)
    np.testing.assert_allclose(cf.metrics.interventional_risk(p_cf, y, q), r_ie, rtol=1e-9)
    np.testing.assert_allclose(cf.metrics.worst_case_risk(p_cf, y), r_wc, rtol=1e-9)
    np.testing.assert_allclose(cf.metrics.cvar_risk(p_cf, y, alphas, q), cvars, rtol=1e-9)
    report = cf.metrics.evaluate(p_obs, p_cf, y, weights=q, alphas=alphas)
    np.testing.assert_allclose(report.risk_orig, r_orig, rtol=1e-9)
    np.testing.assert_allclose(report.risk_cvar, cvars, rtol=1e-9)


@pytest.mark.parametrize("k", [16, 3, 7, 32])
def test_uniform_weights_sorting_network_matches_brute_force(rng, x64, k):
    p_obs, p_cf, y, _ = make(rng, k=k, ties=True)
    alphas = (1.0, 0.5, 0.25, 0.1, 0.03)
    q = np.full(k, 1 / k)
    *_, cvars, _ = ref.risks(p_obs, p_cf, y, q, alphas)
    np.testing.assert_allclose(cf.metrics.cvar_risk(p_cf, y, alphas), cvars, rtol=1e-9)
    np.testing.assert_allclose(cf.metrics.evaluate(p_obs, p_cf, y, alphas=alphas).risk_cvar, cvars, rtol=1e-9)
    # The same numbers through the general-weights path.
    np.testing.assert_allclose(cf.metrics.cvar_risk(p_cf, y, alphas, weights=q), cvars, rtol=1e-9)


def test_cvar_one_unit_matches_walk_over_sorted_atoms(rng, x64):
    for _ in range(50):
        k = int(rng.integers(1, 20))
        losses = np.round(rng.exponential(size=k), 1)
        q = rng.dirichlet(np.ones(k))
        alpha = float(rng.uniform(1e-3, 1))
        assert float(cf.metrics.risk.cvar(losses, q, alpha)) == pytest.approx(
            ref.cvar_sorted(losses, q, alpha), rel=1e-10)


def test_cvar_unit_function_vmaps_to_the_risk(rng, x64):
    p_obs, p_cf, y, q = make(rng)
    losses = cf.metrics.risk.bce(p_cf, y[:, None].astype(np.float64))
    per_unit = jax.vmap(cf.metrics.risk.cvar, in_axes=(0, None, None))(losses, q, 0.3)
    np.testing.assert_allclose(jnp.mean(per_unit), cf.metrics.cvar_risk(p_cf, y, 0.3, q), rtol=1e-9)


def test_risk_invariants(rng):
    p_obs, p_cf, y, q = make(rng, n=500, dtype=np.float32)
    q = q.astype(np.float32) / q.astype(np.float32).sum()
    alphas = (1.0, 0.8, 0.5, 0.25, 0.1, 0.01)
    r = cf.metrics.evaluate(p_obs, p_cf, y, weights=q, alphas=alphas)
    cv = np.asarray(r.risk_cvar)
    assert r.risk_cm <= r.risk_ie + 1e-6  # Jensen
    assert cv[0] == pytest.approx(float(r.risk_ie), rel=1e-5)  # CVaR_1 = R_IE
    assert np.all(np.diff(cv) >= -1e-5)  # non-increasing in alpha (alphas decrease)
    assert cv[-1] <= r.risk_wc + 1e-5


def test_bce_clips_and_matches_closed_form(x64):
    p = np.array([0.0, 1e-9, 0.3, 1.0])
    y = np.array([1.0, 1.0, 0.0, 0.0])
    expected = [-np.log(1e-7), -np.log(1e-7), -np.log(0.7), -np.log(1e-7)]
    np.testing.assert_allclose(cf.metrics.risk.bce(p, y), expected, rtol=1e-9)


def test_marginalise_is_the_weighted_mean(rng, x64):
    _, p_cf, _, q = make(rng)
    np.testing.assert_allclose(cf.metrics.marginalise(p_cf, q), p_cf @ q, rtol=1e-9)
    np.testing.assert_allclose(cf.metrics.marginalise(p_cf), p_cf.mean(axis=1), rtol=1e-9)
