"""Correlation parameterisations within a confounding budget, and the PD gate."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cfjax.sensitivity import correlation

C = correlation  # the correlation parameterisations and checks (cfjax.sensitivity.correlation)


@given(m=st.integers(2, 6), c=st.integers(1, 4), p_max=st.floats(0.0, 0.99), seed=st.integers(0, 2**31 - 1))
def test_tanh_parameterisation_stays_within_the_budget(m, c, p_max, seed):
    L = np.random.default_rng(seed).normal(size=(m, c)) * 3
    P = np.asarray(C.tanh_correlation(jnp.asarray(L, jnp.float32), p_max))
    np.testing.assert_allclose(np.diag(P), 1.0)
    np.testing.assert_allclose(P, P.T)
    assert np.abs(P - np.eye(m)).max() <= p_max + 1e-6
    # the closed form, entry by entry
    G = L @ L.T
    for j in range(m):
        for k in range(m):
            if j != k:
                assert P[j, k] == pytest.approx(p_max * np.tanh(G[j, k]), abs=1e-5)


@given(m=st.integers(2, 7), p_max=st.floats(0.0, 0.99), log_eig=st.floats(-4, -0.5), scale=st.floats(0.01, 10),
       seed=st.integers(0, 2**31 - 1))
def test_pd_parameterisation_is_usable_by_construction(m, p_max, log_eig, scale, seed):
    min_eig = 10.0**log_eig
    L = np.random.default_rng(seed).normal(size=(m, m)) * scale
    with jax.enable_x64(True):
        P = np.asarray(C.pd_correlation(jnp.asarray(L), p_max, min_eig))
    eig = C.check_correlation(P, p_max=p_max, min_eig=min_eig)
    # Within the budget, above the margin, and on the boundary unless L's own correlations are usable.
    R = (L @ L.T) / np.outer(np.linalg.norm(L, axis=1), np.linalg.norm(L, axis=1))
    inside = np.abs(R - np.eye(m)).max() <= p_max and np.linalg.eigvalsh(R)[0] >= min_eig
    if inside:
        np.testing.assert_allclose(P, R, atol=1e-10)
    else:
        assert eig[0] == pytest.approx(min_eig, abs=1e-9) or np.abs(P - np.eye(m)).max() == pytest.approx(p_max)


def test_clique_parameterisation_zeroes_pairs_without_a_shared_clique(rng):
    cliques = np.array([[1, 0], [1, 1], [0, 1]], bool)  # {0, 1} and {1, 2}: 0 and 2 share none
    L = jnp.asarray(rng.normal(size=(3, 2)), jnp.float32)
    P = np.asarray(C.clique_correlation(L, cliques, 0.8))
    assert P[0, 2] == 0 and P[2, 0] == 0
    assert P[0, 1] != 0 and P[1, 2] != 0
    with pytest.raises(ValueError, match="cliques"):
        C.clique_correlation(L, cliques[:2], 0.8)


@pytest.mark.parametrize("m", [3, 5, 10])
def test_star_counterexample_is_detected_beyond_one_over_root_m_minus_1(m):
    threshold = 1 / np.sqrt(m - 1)
    below, above = C.star_correlation(m, 0.95 * threshold), C.star_correlation(m, 1.05 * threshold)
    eig = np.linalg.eigvalsh(above)
    np.testing.assert_allclose(eig[[0, -1]], [1 - 1.05 * threshold * np.sqrt(m - 1),
                                              1 + 1.05 * threshold * np.sqrt(m - 1)])
    C.check_correlation(below, p_max=0.99, min_eig=0.0)  # fine
    with pytest.raises(ValueError, match="positive definite"):
        C.check_correlation(above, p_max=0.99, min_eig=0.0)  # within the budget, yet not PSD
    assert float(C.correlation_margin(jnp.asarray(above), 0.0)) < 0 < float(C.correlation_margin(jnp.asarray(below), 0.0))


def test_the_paper_parameterisation_can_leave_the_pd_cone():
    # Row 0 overlaps every other row and the others are orthogonal: L L^T is a star, so P is
    # the appendix A star with p = 0.95 tanh(4) > 1/2 = 1/sqrt(5 - 1): indefinite, yet every
    # entry is within the budget.
    L = 2.0 * jnp.concatenate([jnp.ones((1, 4)), jnp.eye(4)])
    P = C.tanh_correlation(L, 0.95)
    np.testing.assert_allclose(np.asarray(P), C.star_correlation(5, 0.95 * np.tanh(4.0)), atol=1e-6)
    assert float(C.correlation_margin(P, 0.0)) < 0
    with pytest.raises(ValueError, match="eigenvalues"):
        C.check_correlation(np.asarray(P), p_max=0.95)


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, float("nan"), "x"])
def test_budget_outside_zero_one_is_rejected(bad):
    with pytest.raises(ValueError, match="p_max"):
        C.check_budget(bad)


def test_check_correlation_rejects_malformed_matrices():
    with pytest.raises(ValueError, match="square"):
        C.check_correlation(np.eye(3)[:2])
    with pytest.raises(ValueError, match="symmetric"):
        C.check_correlation(np.array([[1.0, 0.2], [0.1, 1.0]]))
    with pytest.raises(ValueError, match="unit diagonal"):
        C.check_correlation(np.array([[2.0, 0.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="budget"):
        C.check_correlation(np.array([[1.0, 0.6], [0.6, 1.0]]), p_max=0.5)


def test_margin_is_differentiable_for_optimisers(rng):
    L = jnp.asarray(rng.normal(size=(3, 3)), jnp.float32)
    g = jax.grad(lambda L: C.correlation_margin(C.tanh_correlation(L, 0.9)))(L)
    assert g.shape == (3, 3) and bool(jnp.all(jnp.isfinite(g)))
