"""Counterfactual unfairness, the bivariate grid, the worst-case search and the inverse question
against brute-force references (numpy, scipy, scikit-learn) and the invariants of definitions §3."""

import sys
import warnings

import jax
import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import PolynomialFeatures

import cfjax as cf
from cfjax.sensitivity.cfu import bivariate_correlation
from cfjax.sensitivity.problem import distinct_units
from cfjax.sensitivity.projection import sign_corners
from cfjax.sensitivity.ridge import fold_ids, ridge_cv

S = cf.sensitivity


# ----------------------------------------------------------------------------- references
def blocks_of(graph, degrees, a_codes, X):
    """Each equation's embedding with scikit-learn's PolynomialFeatures (reference)."""
    out = []
    for j, parents in enumerate(graph.parents):
        cols = [a_codes if p == graph.sensitive else X[:, [graph.index(p)]] for p in parents]
        out.append(PolynomialFeatures(degrees[j]).fit_transform(np.concatenate(cols, 1)))
    return out


def stacked_gls(F, X, prec, lam):
    """``(Σ_i Φ_iᵀ S Φ_i + λI)⁻¹ Σ_i Φ_iᵀ S x_i`` assembled block by block."""
    widths = np.cumsum([0] + [f.shape[1] for f in F])
    A, b = np.diag(np.full(widths[-1], lam, float)), np.zeros(widths[-1])
    for j, Fj in enumerate(F):
        for k, Fk in enumerate(F):
            A[widths[j]:widths[j + 1], widths[k]:widths[k + 1]] += prec[j, k] * Fj.T @ Fk
            b[widths[j]:widths[j + 1]] += prec[j, k] * Fj.T @ X[:, k]
    w = np.linalg.solve(A, b)
    return [w[widths[j]:widths[j + 1]] for j in range(len(F))]


def reference_cfu(model, P, predictor="fair"):
    """CFU by the recipe of definitions §3 in numpy/scipy/scikit-learn, unit loops where it is clearer;
    ``predictor`` a baseline: the same mean over its own predictions (a ridge on (A, X) or on X)."""
    g, data = model.graph, model.data
    codes, group = np.asarray(data.codes), np.asarray(data.group)
    X, y, lam = np.asarray(data.X), np.asarray(data.y), float(model.lam)
    n, m = X.shape
    F = blocks_of(g, model.degrees, codes[group], X)
    # Model A: ridge, residual variances, GLS.
    w_r = stacked_gls(F, X, np.eye(m), lam)
    res = np.stack([X[:, j] - F[j] @ w_r[j] for j in range(m)], 1)
    w_dag = stacked_gls(F, X, np.diag(1 / res.var(0)), lam)
    eps = np.stack([X[:, j] - F[j] @ w_dag[j] for j in range(m)], 1)
    Z = np.where(np.asarray(g.fair_mask)[None, :], X, eps)
    pf = PolynomialFeatures(model.predictor_degree)
    pred = Ridge(alpha=model.selection["predictor"]["lam"], fit_intercept=False).fit(pf.fit_transform(Z), y)
    f = pred.predict(pf.transform(Z))
    a = codes[group]
    if predictor != "fair":
        inputs = (lambda a, x: np.concatenate([a, x], 1)) if predictor == "unconstrained" else (lambda a, x: x)
        chosen = model.selection["baselines"][predictor]
        bf = PolynomialFeatures(chosen["degree"])
        base = Ridge(alpha=chosen["lam"], fit_intercept=False).fit(bf.fit_transform(inputs(a, X)), y)
        f = base.predict(bf.transform(inputs(a, X)))

    # Model B: σ by a derivative-free search on the profile likelihood, w by GLS.
    def profile(log_s):
        D = np.diag(np.exp(log_s))
        prec = np.linalg.inv(D @ P @ D)
        w = stacked_gls(F, X, prec, lam)
        e = np.stack([X[:, j] - F[j] @ w[j] for j in range(m)], 1)
        return np.einsum("ij,jk,ik->", e, prec, e) + n * np.linalg.slogdet(D @ P @ D)[1]

    s = minimize(profile, np.log(res.std(0)), method="Nelder-Mead",
                 options=dict(xatol=1e-11, fatol=1e-13, maxiter=8000)).x
    D = np.diag(np.exp(s))
    w_star = stacked_gls(F, X, np.linalg.inv(D @ P @ D), lam)
    delta = np.stack([X[:, j] - F[j] @ w_star[j] for j in range(m)], 1)
    total = np.zeros(n)
    for level in range(len(codes)):  # every counterfactual world
        a_cf = np.repeat(codes[[level]], n, 0)
        x_cf = X.copy()
        for j in range(m):  # ancestral propagation
            if g.fair_mask[j]:
                continue
            Fj = blocks_of(g, model.degrees, a_cf, x_cf)[j]
            x_cf[:, j] = Fj @ w_star[j] + delta[:, j]
        F_cf = blocks_of(g, model.degrees, a_cf, x_cf)
        eps_cf = np.stack([x_cf[:, j] - F_cf[j] @ w_dag[j] for j in range(m)], 1)
        Z_cf = np.where(np.asarray(g.fair_mask)[None, :], X, eps_cf)
        f_cf = (pred.predict(pf.transform(Z_cf)) if predictor == "fair"
                else base.predict(bf.transform(inputs(a_cf, x_cf))))
        total += np.where(group == level, 0.0, (f - f_cf) ** 2)
    return np.mean(total / (len(codes) - 1))


def three_feature_problem(rng, n=1500, categorical=False, fair=(), grid=None):
    """A → O, (A, O) → M, (A, O, M) → J with correlated, non-linear equations; ``grid``: the
    features rounded to multiples of it (a survey's discrete scores: units share rows)."""
    c = 3 if categorical else 2
    group = rng.integers(0, c, n)
    a = np.array([-1.0, 0.5, 1.0])[group] if categorical else np.where(group == 1, 1.0, -1.0)
    e = rng.multivariate_normal(np.zeros(3), [[1, 0.3, 0.2], [0.3, 1, -0.2], [0.2, -0.2, 1]], size=n)
    o = 0.5 * a + e[:, 0]
    mm = 0.3 * a + 0.6 * o + 0.2 * o**2 + e[:, 1]
    j = -0.2 * a + 0.4 * o + 0.3 * mm - 0.15 * mm**2 + e[:, 2]
    y = o + mm + 0.5 * j + 0.2 * o * mm + rng.normal(size=n)
    X = np.stack([o, mm, j], 1) if grid is None else np.round(np.stack([o, mm, j], 1) / grid) * grid
    graph = S.FairnessGraph({"O": ["A"], "M": ["A", "O"], "J": ["A", "O", "M"]}, fair=fair)
    codes = "one_hot" if categorical else None
    return graph, S.make_data(group if categorical else a, X, y, codes=codes)


SMALL = S.FitConfig(degrees=(1, 2), lambdas=(0.1, 10.0), predictor_degrees=(1, 2), predictor_lambdas=(0.1, 10.0))


# Every search on the bivariate model uses these options and two budgets (4 runs): compiled once
# for the module (each new option, budget count or restart count compiles the search again).
BIV = dict(restarts=2, steps=200)


@pytest.fixture(scope="module")
def bivariate():
    with jax.enable_x64(True):
        prob = S.synthetic(1200, correlation=0.4, key=3)
        yield S.fit(prob.graph, prob.data, SMALL), prob


# ----------------------------------------------------------------------------- model selection
def test_fold_ids_are_sklearn_kfold():
    for n in (10, 23):
        ids = fold_ids(n, 5)
        for k, (_, test) in enumerate(KFold(5).split(np.zeros(n))):
            np.testing.assert_array_equal(np.flatnonzero(ids == k), test)
    shuffled = fold_ids(23, 5, shuffle=True, key=1)
    assert np.array_equal(np.bincount(shuffled), np.bincount(fold_ids(23, 5)))
    assert not np.array_equal(shuffled, fold_ids(23, 5))


def test_ridge_cv_matches_sklearn_grid_search(rng, x64):
    Z = rng.normal(size=(211, 2))
    y = Z[:, 0] - 0.5 * Z[:, 1] ** 2 + 0.3 * Z[:, 0] * Z[:, 1] + 0.3 * rng.normal(size=211)
    degrees, lambdas = (1, 2, 3), (1e-3, 1.0, 30.0, 1e3)
    # The MSE option (the paper's R² default is checked in test_sensitivity_cv.py).
    ours = ridge_cv(Z, y, degrees=degrees, lambdas=lambdas, score="mse")
    pipe = make_pipeline(PolynomialFeatures(), Ridge(fit_intercept=False))
    grid = GridSearchCV(pipe, {"polynomialfeatures__degree": degrees, "ridge__alpha": lambdas}, cv=5,
                        scoring="neg_mean_squared_error").fit(Z, y)
    ref = -grid.cv_results_["mean_test_score"].reshape(len(degrees), len(lambdas))
    np.testing.assert_allclose(ours.scores, ref, rtol=1e-8)
    assert (ours.degree, ours.lam) == (grid.best_params_["polynomialfeatures__degree"], grid.best_params_["ridge__alpha"])
    np.testing.assert_allclose(ours.theta, grid.best_estimator_[-1].coef_, rtol=1e-8, atol=1e-10)


def test_fit_selects_a_shared_lambda_and_the_best_degree_per_equation(rng, x64):
    graph, data = three_feature_problem(rng, n=300)
    settings = SMALL.replace(cv_score="mse")  # summed held-out MSE (R²: test_sensitivity_cv.py)
    model = S.fit(graph, data, settings)
    table = model.selection["equation_cv"]  # (m, degrees, lambdas)
    best = table.min(1).sum(0)
    k = int(np.argmin(best))
    assert model.selection["lam"] == [SMALL.lambdas[k]] * 3
    assert model.degrees == tuple(SMALL.degrees[i] for i in table[:, :, k].argmin(1))
    per_eq = S.fit(graph, data, settings.replace(shared_lambda=False))
    assert per_eq.selection["lam"] == [SMALL.lambdas[i] for i in table.min(1).argmin(1)]
    # The fair predictor is a ridge on Model A's residuals; baselines' unfairness by definition.
    pf = PolynomialFeatures(model.predictor_degree).fit_transform(np.asarray(model.model_a.residuals))
    ref = Ridge(alpha=model.selection["predictor"]["lam"], fit_intercept=False).fit(pf, np.asarray(data.y))
    np.testing.assert_allclose(model.fair_pred, ref.predict(pf), rtol=1e-7, atol=1e-9)
    for name, pred in model.baselines.items():
        assert float(model.baseline_unfairness[name]) == pytest.approx(float(np.mean((model.fair_pred - pred) ** 2)))


# ----------------------------------------------------------------------------- CFU
@pytest.mark.parametrize("case", ["binary", "categorical", "path_specific"])
def test_cfu_equals_the_brute_force_recipe(rng, x64, case):
    graph, data = three_feature_problem(rng, n=300, categorical=case == "categorical",
                                        fair=("O",) if case == "path_specific" else ())
    model = S.fit(graph, data, SMALL)
    P = np.array([[1.0, 0.5, -0.3], [0.5, 1.0, 0.2], [-0.3, 0.2, 1.0]])
    ours = float(S.cfu(model, P))
    assert ours > 0
    assert ours == pytest.approx(reference_cfu(model, P), rel=2e-5)


def random_correlation(rng, m):
    C = rng.normal(size=(m, m))
    C = C @ C.T + 0.5 * np.eye(m)
    d = 1 / np.sqrt(np.diag(C))
    return d[:, None] * C * d[None, :]


@pytest.mark.parametrize("categorical", [False, True])
def test_cfu_over_the_distinct_rows_equals_the_mean_over_every_unit(rng, x64, categorical, monkeypatch):
    graph, data = three_feature_problem(rng, n=300, categorical=categorical, grid=1.0)
    model = S.fit(graph, data, SMALL)
    group, X = np.asarray(data.group), np.asarray(data.X)
    counts = {}
    for i in range(data.n):  # brute force: each row's multiplicity
        counts[(group[i], *X[i])] = counts.get((group[i], *X[i]), 0) + 1
    u = model.distinct
    assert u is not None and u.index.shape == (len(counts),) < (data.n,)
    rows = [(group[i], *X[i]) for i in np.asarray(u.index)]
    assert sorted(rows) == sorted(counts) and [counts[r] for r in rows] == np.asarray(u.count).tolist()
    every_unit = model.replace(distinct=None)
    P = random_correlation(rng, 3)
    ours = float(S.cfu(model, P))
    assert ours == pytest.approx(reference_cfu(model, P), rel=2e-5)
    assert ours == pytest.approx(float(S.cfu(every_unit, P)), rel=1e-12)
    for predictor in ("unconstrained", "blind"):
        assert float(S.cfu(model.scoring(predictor), P)) == pytest.approx(
            float(S.cfu(every_unit.scoring(predictor), P)), rel=1e-12)
    grad = jax.grad(lambda Q, mod: S.cfu(mod, Q))
    np.testing.assert_allclose(grad(P, model), grad(P, every_unit), rtol=1e-9, atol=1e-15)
    monkeypatch.setattr(sys.modules["cfjax.sensitivity.cfu"], "_CHUNK", 16)  # chunks (lax.map): the same weights
    assert float(S.cfu(model, P)) == pytest.approx(ours, rel=1e-12)
    # Continuous features: every row is distinct, and the model keeps no index.
    graph, data = three_feature_problem(rng, n=200)
    assert distinct_units(data) is None and S.fit(graph, data, SMALL).distinct is None


@pytest.mark.parametrize("predictor", ["unconstrained", "blind"])
def test_a_baselines_cfu_equals_the_brute_force_recipe(rng, x64, predictor):
    graph, data = three_feature_problem(rng, n=300)
    model = S.fit(graph, data, SMALL)
    P = np.array([[1.0, 0.5, -0.3], [0.5, 1.0, 0.2], [-0.3, 0.2, 1.0]])
    scored = model.scoring(predictor)
    ours = float(S.cfu(scored, P))
    assert ours == pytest.approx(reference_cfu(model, P, predictor), rel=2e-5)
    assert ours > 10 * float(S.cfu(model, P))  # a baseline moves with A; the fair predictor barely
    with pytest.raises(ValueError, match="predictor"):
        model.scoring("oracle")
    with warnings.catch_warnings():  # a baseline's CFU at P = I is real unfairness, not the ridge's floor
        warnings.simplefilter("error", S.ShrinkageWarning)
        wc = S.worst_case(scored, [0.0, 0.5], key=jax.random.key(0),
                          config=S.SearchConfig(restarts=1, steps=5, boundary_starts=1, polish=2))
    assert float(wc.cfu[0]) == pytest.approx(float(S.cfu(scored, np.eye(3))), rel=1e-9)
    assert float(wc.cfu[1]) >= float(wc.cfu[0])


def test_cfu_is_zero_at_the_identity_and_positive_elsewhere(bivariate, x64):
    model, prob = bivariate
    at_half = float(S.cfu(model, bivariate_correlation(0.5)))
    assert at_half > 0
    # The paper's Model A (one GLS refit) differs from Model B at P = I by its σ: tiny, not 0.
    assert float(S.cfu(model, np.eye(2))) <= 1e-6 * at_half
    ml = S.fit(prob.graph, prob.data, SMALL.replace(model_a="ml"))
    assert float(S.cfu(ml, np.eye(2))) <= 1e-14 * float(S.cfu(ml, bivariate_correlation(0.5)))


def test_cfu_gradient_matches_finite_differences(bivariate, x64):
    model, _ = bivariate
    f = jax.jit(lambda p: S.cfu(model, bivariate_correlation(p)))
    for p in (-0.6, 0.2, 0.7):
        h = 1e-5
        fd = (f(p + h) - f(p - h)) / (2 * h)
        assert float(jax.grad(f)(p)) == pytest.approx(float(fd), rel=1e-4)


def test_cfu_rejects_a_non_positive_definite_or_misshapen_p(bivariate, x64):
    model, _ = bivariate
    with pytest.raises(ValueError, match="positive definite"):
        S.cfu(model, np.array([[1.0, 1.2], [1.2, 1.0]]))
    with pytest.raises(ValueError, match="2 x 2"):
        S.cfu(model, np.eye(3))
    with pytest.raises(ValueError, match="two confounded features"):
        graph, data = three_feature_problem(np.random.default_rng(0), n=100)
        S.cfu_grid(S.fit(graph, data, SMALL), [0.1])


def test_grid_marks_points_too_close_to_singular(bivariate, x64):
    model, _ = bivariate
    grid = np.asarray(S.cfu_grid(model, [-1.0, -0.9995, 0.0, 0.5, 1.0], min_eig=1e-3))
    assert np.isnan(grid[[0, 1, 4]]).all() and np.isfinite(grid[[2, 3]]).all()


# ----------------------------------------------------------------------------- search
def test_bivariate_worst_case_sits_at_the_budget_edge_and_matches_the_grid(bivariate, x64):
    model, prob = bivariate
    calls = [S.worst_case(model, pair, key=jax.random.key(0),
                          config=S.SearchConfig(**BIV)) for pair in ([0.2, 0.5], [0.8, 0.65])]
    budgets, cfu, P, eig = (np.concatenate([np.asarray(getattr(wc, f)) for wc in calls])
                            for f in ("p_max", "cfu", "P", "eigenvalues"))
    grid = np.asarray(S.cfu_grid(model, np.concatenate([np.linspace(-b, b, 41) for b in budgets])))
    grid_best = grid.reshape(4, 41).max(1)
    np.testing.assert_allclose(np.abs(P[:, 0, 1]), budgets, rtol=1e-6)  # at the edge
    assert (cfu >= grid_best * (1 - 1e-7)).all()  # never below the grid
    np.testing.assert_allclose(cfu, grid_best, rtol=1e-5)
    np.testing.assert_allclose(eig, np.linalg.eigvalsh(P), atol=1e-12)
    # The true confounding (correlation 0.4) lies under the worst case at budget 0.5.
    true = float(S.cfu(model, prob.true_correlation))
    assert true <= float(cfu[1])


def test_multivariate_worst_case_beats_every_sign_corner(rng, x64):
    # n = 300 as in the brute-force CFU tests: the same shapes, so their compiled fits are reused.
    graph, data = three_feature_problem(rng, n=300)
    model = S.fit(graph, data, SMALL)
    p_max, min_eig = 0.45, 1e-3
    wc = S.worst_case(model, [p_max], key=jax.random.key(int(rng.integers(1 << 30))),
                      config=S.SearchConfig(restarts=4, steps=200, min_eig=min_eig))
    corners = sign_corners(3, p_max, min_eig)
    assert len(corners) > 0
    corner_cfu = [float(S.cfu(model, P)) for P in corners]
    assert float(wc.cfu[0]) >= max(corner_cfu) * (1 - 1e-7)
    P = np.asarray(wc.P[0])
    assert np.abs(P - np.eye(3)).max() <= p_max + 1e-12
    assert float(wc.eigenvalues[0, 0]) >= min_eig
    assert float(S.cfu(model, P)) == pytest.approx(float(wc.cfu[0]), rel=1e-6)
    # The "pd" parameterisation (and tanh again) against a brute-force supremum over the usable set,
    # which bounds every sign corner: test_sensitivity_search.py.


def test_clique_parameterisation_keeps_unconfounded_pairs_at_zero(rng, x64):
    graph, data = three_feature_problem(rng, n=300)
    model = S.fit(graph, data, SMALL)
    cliques = np.array([[1, 0], [1, 1], [0, 1]], bool)  # O-M and M-J confounded, O-J not
    wc = S.worst_case(model, [0.6], key=jax.random.key(0),
                      config=S.SearchConfig(restarts=2, steps=100, cliques=cliques))
    assert float(wc.P[0, 0, 2]) == 0.0
    assert abs(float(wc.P[0, 0, 1])) > 0 and abs(float(wc.P[0, 1, 2])) > 0


def test_minibatch_and_warm_start_options_agree_with_full_batch(bivariate, x64):
    model, _ = bivariate
    budgets = [0.3, 0.7]
    full = S.worst_case(model, budgets, key=jax.random.key(0), config=S.SearchConfig(**BIV))
    # Both options at once (the paper's recipe: minibatches and the curriculum over budgets), one
    # compilation instead of two: each changes its own part of the search.
    warm = S.worst_case(model, budgets[::-1], key=jax.random.key(0),
                        config=S.SearchConfig(**BIV, batch_size=256, warm_start=True))
    np.testing.assert_allclose(warm.p_max, budgets)  # sorted for the curriculum
    np.testing.assert_allclose(warm.cfu, full.cfu, rtol=1e-3)
    assert (np.asarray(full.steps) < 200).any()  # early stopping fired somewhere
    # Minibatch runs track a noisy average: they stop on other steps than full-batch runs.
    assert not np.array_equal(np.asarray(warm.steps), np.asarray(full.steps))


def test_inverse_budget_recovers_the_budget_of_a_level(bivariate, x64):
    model, _ = bivariate
    level = float(np.nanmax(np.asarray(S.cfu_grid(model, [-0.55, 0.55]))))
    # Two restarts sit at the two sign corners, whose CFU differ by 20-30x here: no warning wanted,
    # and no adaptive rounds (max_rounds=0), which would add restarts at every probe without
    # moving the bracket: the bisection is what this test is about (the rounds: test_sensitivity_search).
    # A coarse curve of two budgets (0.495, 0.99) and probes of two (0.495 and the midpoint): the
    # same two-budget search as the tests above, compiled once.
    opts = dict(BIV, warn_ratio=None, max_rounds=0)
    inv = S.inverse_budget(model, level, key=jax.random.key(0), grid=2, tol=2e-3, config=S.SearchConfig(**opts))
    assert inv.lo <= 0.55 + 1e-3 and inv.p_max == pytest.approx(0.55, abs=3e-3)
    assert inv.lo < inv.p_max == inv.hi <= inv.lo + 2e-3 and len(inv.evaluated) > 2
    assert all((c >= level) == (p >= inv.hi) for p, c in inv.evaluated)  # the bracket splits the probes
    huge = S.inverse_budget(model, 1e6, key=jax.random.key(0), grid=2, config=S.SearchConfig(**opts))
    assert huge.reached is False and huge.p_max is None and huge.lo == pytest.approx(0.99)
    assert 0.0 <= huge.max_cfu < 1e6 and huge.to_dict()["p_max"] is None
    # A curve already computed is the coarse one: the same bracket from the same two budgets; a
    # level it does not reach needs no search at all (its largest value is the answer's max_cfu).
    coarse = S.worst_case(model, [0.99, 0.495], key=jax.random.key(0), config=S.SearchConfig(**opts))
    given = S.inverse_budget(model, level, key=jax.random.key(0), worst=coarse, tol=2e-3,
                             config=S.SearchConfig(**opts))
    assert given.evaluated[:2] == inv.evaluated[:2] and given.p_max == inv.p_max
    far = S.inverse_budget(model, 1e6, key=jax.random.key(0), worst=coarse, config=S.SearchConfig(**opts))
    assert far.reached is False and far.evaluated == huge.evaluated and far.max_cfu == huge.max_cfu
    with pytest.raises(ValueError, match="`worst`"):
        S.inverse_budget(model, level, key=jax.random.key(0), worst="curve")


# ----------------------------------------------------------------------------- validation and plots
def test_bad_input_is_rejected(rng, bivariate):
    model, _ = bivariate
    for bad in (-0.1, 1.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="p_max"):
            S.worst_case(model, [0.2, bad], key=jax.random.key(0))
    with pytest.raises(ValueError, match="cycle"):
        S.FairnessGraph({"G": ["A", "L"], "L": ["G"]})
    with pytest.raises(ValueError, match="unknown"):
        S.FairnessGraph({"G": ["A", "Q"]})
    with pytest.raises(ValueError, match="fair"):
        S.FairnessGraph({"G": ["A"], "L": ["A", "G"]}, fair=("L",))  # its parent G is unfair
    X = rng.normal(size=(50, 2))
    with pytest.raises(ValueError, match=r"constant column\(s\) X\[:, 1\]"):
        S.make_data(np.tile([-1.0, 1.0], 25), np.stack([X[:, 0], np.ones(50)], 1), X[:, 1])
    with pytest.raises(ValueError, match=r"constant column\(s\) 'L'"):  # by its name when it has one
        S.make_data(np.tile([-1.0, 1.0], 25), np.stack([X[:, 0], np.ones(50)], 1), X[:, 1], names=["G", "L"])
    with pytest.raises(ValueError, match="two groups"):
        S.make_data(np.ones(50), X, X[:, 0])
    with pytest.raises(ValueError, match="NaN"):
        S.make_data(np.tile([-1.0, 1.0], 25), np.where(np.arange(100).reshape(50, 2) == 7, np.nan, X), X[:, 0])
    with pytest.raises(ValueError, match="min_eig"):
        S.worst_case(model, [0.2], key=jax.random.key(0), config=S.SearchConfig(min_eig=0.0))


def test_float64_data_in_float32_warns_once_per_argument(rng, monkeypatch):
    """make_data names X and y when their float64 values will be computed in float32 (64-bit
    mode off), once per process and argument; never in 64-bit mode or for float32 input."""
    from cfjax import _checks

    a, X, y = np.tile([-1.0, 1.0], 25), rng.normal(size=(50, 2)), rng.normal(size=50)
    monkeypatch.setattr(_checks, "_DOWNCAST_WARNED", set())
    with jax.enable_x64(False):
        with pytest.warns(_checks.PrecisionWarning) as caught:
            S.make_data(a, X, y)
        names = sorted(str(w.message).split("`")[1] for w in caught if issubclass(w.category, _checks.PrecisionWarning))
        assert names == ["X", "y"]
        with warnings.catch_warnings():
            warnings.simplefilter("error", _checks.PrecisionWarning)
            S.make_data(a, X, y)  # once per argument name
            monkeypatch.setattr(_checks, "_DOWNCAST_WARNED", set())
            S.make_data(a, X.astype(np.float32), y.astype(np.float32))
    monkeypatch.setattr(_checks, "_DOWNCAST_WARNED", set())
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("error", _checks.PrecisionWarning)
        S.make_data(a, X, y)


def test_plot_curve_draws_the_curve_and_baselines(tmp_path):
    fig = S.plot_curve(np.linspace(0, 0.9, 5), [1e-6, 2e-6, 1e-5, 1e-4, np.nan], baselines={"blind": 3e-4},
                       true_value=(0.4, 5e-6))
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and len(ax.lines) == 3
    fig.savefig(tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000


def test_runs_are_grouped_only_where_xla_cpu_needs_it(monkeypatch):
    from cfjax import platform

    monkeypatch.setenv("XLA_FLAGS", "")
    expected = 4 if jax.default_backend() == "cpu" else None
    assert platform.run_group(64) == expected
    assert platform.run_group(4) is None
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_concurrency_optimized_scheduler=false")
    assert platform.run_group(64) is None


@pytest.mark.parametrize("group", [None, 4])
def test_map_runs_equals_a_vmap_grouped_or_not(monkeypatch, group, rng):
    from cfjax import platform

    monkeypatch.setattr(platform, "run_group", lambda n: group if group and n > group else None)
    a, b = rng.normal(size=(11, 3, 3)), rng.normal(size=(11,))
    traced = []

    def fn(args):
        traced.append(1)
        x, y = args
        return x @ x.T * y, {"trace": jax.numpy.trace(x) + y}

    got = jax.jit(lambda a, b: platform.map_runs(fn, (a, b)))(a, b)
    assert len(traced) == 1  # 11 runs in groups of 4: the last group padded, fn traced once
    want = [fn((a[i], b[i])) for i in range(11)]
    np.testing.assert_allclose(got[0], np.stack([w[0] for w in want]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1]["trace"], np.array([w[1]["trace"] for w in want]), rtol=1e-5, atol=1e-5)
