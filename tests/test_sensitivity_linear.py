"""Polynomial embeddings, GLS from Gram matrices and Model A against scikit-learn / numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.preprocessing import PolynomialFeatures

import cfjax as cf
from cfjax.sensitivity.linear import (
    design,
    fit_model_a,
    fit_model_b,
    gls,
    polynomial_features,
    profile_objective,
    residual_products,
)

S = cf.sensitivity


@pytest.mark.parametrize("p, degree", [(1, 1), (1, 4), (2, 3), (3, 2)])
def test_polynomial_features_match_sklearn(rng, x64, p, degree):
    z = rng.normal(size=(20, p))
    ours = jax.vmap(lambda u: polynomial_features(u, degree))(jnp.asarray(z))
    np.testing.assert_allclose(ours, PolynomialFeatures(degree).fit_transform(z), rtol=1e-12)


def law_school_like(rng, n=2000):
    """A -> G, A -> L, G -> L with correlated errors (so GLS and ridge differ)."""
    a = rng.choice([-1.0, 1.0], size=n)
    e = rng.multivariate_normal([0, 0], [[1.0, 0.4], [0.4, 0.5]], size=n)
    g = 0.5 * a + 0.2 * a**2 + e[:, 0]
    l = 0.3 * a + 0.8 * g - 0.1 * g**2 + e[:, 1]
    emb_g = PolynomialFeatures(2).fit_transform(a[:, None])
    emb_l = PolynomialFeatures(2).fit_transform(np.stack([a, g], 1))
    return [emb_g, emb_l], np.stack([g, l], 1)


def test_model_a_matches_ridge_then_gls_references(rng, x64):
    embeddings, X = law_school_like(rng)
    lam = 3.0
    d = design(embeddings, X)
    model = fit_model_a(d, lam)
    # Ridge per equation, all coefficients penalised (the intercept is a feature).
    ridge = np.concatenate([Ridge(alpha=lam, fit_intercept=False, solver="cholesky").fit(F, X[:, j]).coef_
                            for j, F in enumerate(embeddings)])
    np.testing.assert_allclose(model.w_ridge, ridge, rtol=1e-9, atol=1e-10)
    # Residual variances, then the GLS refit with them (block-diagonal, diagonal Sigma).
    res = np.stack([X[:, j] - F @ c for j, (F, c) in enumerate(zip(embeddings, np.split(ridge, [3])))], 1)
    sigma2 = res.var(axis=0)
    np.testing.assert_allclose(model.sigma**2, sigma2, rtol=1e-9)
    w = np.concatenate([np.linalg.solve(F.T @ F / s2 + lam * np.eye(F.shape[1]), F.T @ X[:, j] / s2)
                        for j, (F, s2) in enumerate(zip(embeddings, sigma2))])
    np.testing.assert_allclose(model.w, w, rtol=1e-9, atol=1e-10)
    eps = np.stack([X[:, j] - F @ c for j, (F, c) in enumerate(zip(embeddings, np.split(w, [3])))], 1)
    np.testing.assert_allclose(model.residuals, eps, rtol=1e-9, atol=1e-10)


def test_gls_with_a_full_precision_matches_the_stacked_normal_equations(rng, x64):
    embeddings, X = law_school_like(rng, n=300)
    d = design(embeddings, X)
    Sigma = np.array([[1.0, 0.3], [0.3, 0.6]])
    prec = np.linalg.inv(Sigma)
    lam = 0.7
    D = sum(F.shape[1] for F in embeddings)
    A, b = lam * np.eye(D), np.zeros(D)
    for i in range(X.shape[0]):  # the definitions' sums over units, literally
        Phi = np.zeros((2, D))
        Phi[0, :3], Phi[1, 3:] = embeddings[0][i], embeddings[1][i]
        A += Phi.T @ prec @ Phi
        b += Phi.T @ prec @ X[i]
    ref = np.linalg.solve(A, b)
    # a component near zero carries the others' rounding: an absolute floor at the solution's scale
    np.testing.assert_allclose(gls(d, jnp.asarray(prec), lam), ref, rtol=1e-9, atol=1e-11 * np.abs(ref).max())
    # residual cross-products from the Grams equal the direct ones
    w = np.linalg.solve(A, b)
    R, mean = residual_products(d, jnp.asarray(w))
    E = np.stack([X[:, 0] - embeddings[0] @ w[:3], X[:, 1] - embeddings[1] @ w[3:]], 1)
    np.testing.assert_allclose(R, E.T @ E, rtol=1e-9)
    np.testing.assert_allclose(mean, E.mean(0), rtol=1e-9, atol=1e-12)


def test_unpenalised_gls_is_the_pseudo_inverse_solution_for_any_precision(rng, x64):
    # A = ±1 makes A² collinear with the intercept: the normal equations are singular.
    embeddings, X = law_school_like(rng, n=300)
    d = design(embeddings, X)
    assert d.range_basis.shape == (9, 7)  # one collinear direction per equation
    D = 9
    precs = []
    for _ in range(3):
        M = rng.normal(size=(2, 2))
        precs.append(M @ M.T + 0.5 * np.eye(2))
    got = jax.jit(jax.vmap(lambda P: gls(d, P, 0.0)))(jnp.asarray(np.stack(precs)))
    for prec, w in zip(precs, np.asarray(got)):
        A, b = np.zeros((D, D)), np.zeros(D)
        for i in range(X.shape[0]):
            Phi = np.zeros((2, D))
            Phi[0, :3], Phi[1, 3:] = embeddings[0][i], embeddings[1][i]
            A += Phi.T @ prec @ Phi
            b += Phi.T @ prec @ X[i]
        np.testing.assert_allclose(w, np.linalg.pinv(A, hermitian=True) @ b, rtol=1e-7, atol=1e-9)


def test_gls_is_differentiable_in_the_precision(rng, x64):
    embeddings, X = law_school_like(rng, n=200)
    d = design(embeddings, X)

    def f(rho):
        P = jnp.array([[1.0, 0.0], [0.0, 1.0]]) + rho * jnp.array([[0.0, 1.0], [1.0, 0.0]])
        return jnp.sum(gls(d, jnp.linalg.inv(P), 0.5) ** 2)

    h = 1e-6
    fd = (f(0.3 + h) - f(0.3 - h)) / (2 * h)
    assert float(jax.grad(f)(0.3)) == pytest.approx(float(fd), rel=1e-6)


def test_design_rejects_mismatched_shapes(rng):
    embeddings, X = law_school_like(rng, n=50)
    with pytest.raises(ValueError, match="embeddings\\[1\\]"):
        design([embeddings[0], embeddings[1][:-1]], X)
    with pytest.raises(ValueError, match="`X`"):
        design(embeddings, X[:, :1])


def numpy_profile(embeddings, X, log_sigma, P, lam):
    """The profile objective with explicit per-unit sums (reference)."""
    D = np.diag(np.exp(log_sigma))
    prec = np.linalg.inv(D @ P @ D)
    widths = [F.shape[1] for F in embeddings]
    A, b = lam * np.eye(sum(widths)), np.zeros(sum(widths))
    Phis = []
    for i in range(X.shape[0]):
        Phi = np.zeros((len(embeddings), sum(widths)))
        start = 0
        for j, F in enumerate(embeddings):
            Phi[j, start:start + widths[j]] = F[i]
            start += widths[j]
        Phis.append(Phi)
        A += Phi.T @ prec @ Phi
        b += Phi.T @ prec @ X[i]
    w = np.linalg.solve(A, b)
    quad = sum((X[i] - Phis[i] @ w) @ prec @ (X[i] - Phis[i] @ w) for i in range(X.shape[0]))
    return quad + X.shape[0] * np.linalg.slogdet(D @ P @ D)[1]


@pytest.mark.parametrize("lam", [0.0, 0.7, (0.2, 3.0)])
def test_the_closed_form_gradient_in_log_sigma_matches_finite_differences_and_autodiff(rng, x64, lam):
    # Model B's σ solve differentiates this gradient (Newton's Hessian, the implicit derivative
    # in P) instead of the objective twice: it must be the objective's gradient, penalty term
    # included (the objective leaves the penalty out, so w does not minimise it).
    from cfjax.sensitivity import linear

    embeddings, X = law_school_like(rng, n=120)
    d = design(embeddings, X)
    rho = rng.uniform(-0.8, 0.8)
    P = np.array([[1.0, rho], [rho, 1.0]])
    s = rng.normal(scale=0.5, size=2)
    lam_arg = np.asarray(lam) if isinstance(lam, tuple) else lam
    ours = np.asarray(linear._profile_gradient(d, jnp.asarray(s), jnp.linalg.inv(jnp.asarray(P)), lam_arg))
    auto = np.asarray(jax.grad(profile_objective, argnums=1)(d, jnp.asarray(s), jnp.asarray(P), lam_arg))
    h = 1e-5
    lam_ref = np.repeat(np.asarray(lam, float), [F.shape[1] for F in embeddings]) if isinstance(lam, tuple) else lam
    fd = [(numpy_profile_penalties(embeddings, X, s + h * e, P, lam_ref)
           - numpy_profile_penalties(embeddings, X, s - h * e, P, lam_ref)) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(ours, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())
    np.testing.assert_allclose(ours, auto, rtol=1e-10, atol=1e-10 * np.abs(auto).max())


def numpy_profile_penalties(embeddings, X, log_sigma, P, lam):
    """:func:`numpy_profile` with one penalty per coefficient (an array) or one for all; without a
    penalty, the minimum-norm fit (reference)."""
    D = np.diag(np.exp(log_sigma))
    prec = np.linalg.inv(D @ P @ D)
    if np.ndim(lam) == 0 and lam == 0:
        w, quad = unpenalised_gls(embeddings, X, prec)
        return quad + X.shape[0] * np.linalg.slogdet(D @ P @ D)[1]
    widths = [F.shape[1] for F in embeddings]
    F = np.concatenate(embeddings, axis=1)
    block = np.repeat(np.arange(len(widths)), widths)
    A = (F.T @ F) * prec[block][:, block] + np.diag(np.broadcast_to(lam, (sum(widths),)))
    b = np.sum((F.T @ X) * prec[block, :], axis=1)
    w = np.linalg.solve(A, b)
    E = X - np.stack([F[:, block == j] @ w[block == j] for j in range(len(widths))], axis=1)
    return np.einsum("ij,jk,ik->", E, prec, E) + X.shape[0] * np.linalg.slogdet(D @ P @ D)[1]


def test_model_b_sigma_minimises_the_profile_likelihood(rng, x64):
    from scipy.optimize import minimize

    embeddings, X = law_school_like(rng, n=150)
    d = design(embeddings, X)
    P = np.array([[1.0, 0.35], [0.35, 1.0]])
    lam = 0.5
    np.testing.assert_allclose(profile_objective(d, jnp.array([0.1, -0.3]), jnp.asarray(P), lam),
                               numpy_profile(embeddings, X, np.array([0.1, -0.3]), P, lam), rtol=1e-9)
    model = fit_model_b(d, P, lam)
    ref = minimize(lambda s: numpy_profile(embeddings, X, s, P, lam), x0=np.zeros(2), method="Nelder-Mead",
                   options=dict(xatol=1e-10, fatol=1e-12, maxiter=4000))
    np.testing.assert_allclose(np.log(model.sigma), ref.x, atol=1e-5)
    w = gls(d, jnp.linalg.inv(jnp.diag(model.sigma) @ jnp.asarray(P) @ jnp.diag(model.sigma)), lam)
    np.testing.assert_allclose(model.w, w, rtol=1e-9)


def unpenalised_gls(embeddings, X, prec):
    """Minimum-norm ``argmin_w Σ_i (x_i − Φ_i w)ᵀ S (x_i − Φ_i w)`` (pseudo-inverse of the
    stacked normal equations, assembled block by block) and that minimum (reference)."""
    widths = np.cumsum([0] + [F.shape[1] for F in embeddings])
    A, b = np.zeros((widths[-1],) * 2), np.zeros(widths[-1])
    for j, Fj in enumerate(embeddings):
        for k, Fk in enumerate(embeddings):
            A[widths[j]:widths[j + 1], widths[k]:widths[k + 1]] = prec[j, k] * Fj.T @ Fk
            b[widths[j]:widths[j + 1]] += prec[j, k] * Fj.T @ X[:, k]
    w = np.linalg.pinv(A, hermitian=True) @ b
    E = X - np.stack([F @ w[widths[j]:widths[j + 1]] for j, F in enumerate(embeddings)], 1)
    return w, np.einsum("ij,jk,ik->", E, prec, E)


def test_unpenalised_model_b_is_the_least_squares_fit_at_the_profile_optimum(rng, x64):
    # λ = 0 with collinear embeddings (A² = 1 is the intercept): Model B, jitted with λ traced
    # inside, once solved the singular penalised normal equations and gave NaN (and so did CFU
    # in the λ sweep of `cfjax sensitivity`).
    from scipy.optimize import minimize

    embeddings, X = law_school_like(rng, n=300)
    d = design(embeddings, X)
    P = np.array([[1.0, -0.45], [-0.45, 1.0]])
    model = fit_model_b(d, P, 0.0)

    def profile(log_s):
        Sigma = np.exp(log_s)[:, None] * P * np.exp(log_s)[None, :]
        return unpenalised_gls(embeddings, X, np.linalg.inv(Sigma))[1] + X.shape[0] * np.linalg.slogdet(Sigma)[1]

    ref = minimize(profile, x0=np.zeros(2), method="Nelder-Mead", options=dict(xatol=1e-10, fatol=1e-12, maxiter=4000))
    np.testing.assert_allclose(np.log(model.sigma), ref.x, atol=1e-5)
    sigma = np.asarray(model.sigma)
    w, _ = unpenalised_gls(embeddings, X, np.linalg.inv(sigma[:, None] * P * sigma[None, :]))
    np.testing.assert_allclose(model.w, w, rtol=1e-7, atol=1e-9)
    # A per-equation λ of zeros is the same unpenalised fit.
    np.testing.assert_allclose(fit_model_b(d, P, jnp.zeros(2)).w, model.w, rtol=1e-12, atol=1e-12)


def test_model_b_gradient_in_the_correlation_matches_finite_differences(rng, x64):
    embeddings, X = law_school_like(rng, n=400)
    d = design(embeddings, X)

    def f(rho):
        P = jnp.eye(2) + rho * (1 - jnp.eye(2))
        m = fit_model_b(d, P, 0.5)
        return jnp.sum(m.w**2) + jnp.sum(m.sigma)

    for rho in (-0.4, 0.0, 0.6):
        h = 1e-5
        fd = (f(rho + h) - f(rho - h)) / (2 * h)
        assert float(jax.grad(f)(rho)) == pytest.approx(float(fd), rel=1e-5, abs=1e-8)
