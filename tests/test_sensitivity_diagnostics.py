"""Model B at moderate ridge penalties (finite, and the profile likelihood's minimum by an
independent numpy/scipy solve), the CFU at zero correlation (the ridge floor) stated and warned
about, degenerate problems warned about, and sensitivity's data errors in 1-based rows and column
names."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize
from sklearn.preprocessing import PolynomialFeatures

import cfjax.sensitivity as S
from cfjax import ValidationError
from cfjax.sensitivity import linear
from cfjax.sensitivity.diagnostics import floor_dominates
from cfjax.sensitivity.linear import fit_model_b

GRAPH = {"education": ["gender"], "experience": ["gender", "education"]}


def salary_frame(rng: np.random.Generator, n: int = 600) -> pd.DataFrame:
    """A table of the kind a user brings: gender (f/m) -> education -> experience, gender ->
    experience, salary from both; errors of education and experience correlated 0.4."""
    g = rng.choice(["f", "m"], n, p=[0.5, 0.5])
    m = (g == "m").astype(float)
    e = rng.multivariate_normal([0, 0], [[1, 0.4], [0.4, 1]], n)
    edu = 12 + 1 * m + 2 * e[:, 0]
    exp = 5 + 0.5 * m + 0.3 * edu + 0.05 * (edu - 12) ** 2 + 2 * e[:, 1]
    sal = 30 + 1.5 * edu + 0.8 * exp + rng.normal(0, 3, n)
    return pd.DataFrame(dict(gender=g, education=edu, experience=exp, salary=sal))


def salary_model(frame: pd.DataFrame, lam: float, **settings) -> S.FairModel:
    prob = S.from_frame(frame, GRAPH, sensitive="gender", target="salary", categories={"gender": ["f", "m"]})
    return S.fit(prob.graph, prob.data, S.FitConfig(lam=lam, equation_degrees=(1, 2), **settings))


# ----------------------------------------------------------------------------- numpy references
def numpy_gls(F: np.ndarray, X: np.ndarray, block: np.ndarray, precision: np.ndarray, lam: float) -> np.ndarray:
    """``(Σ_i Φ_iᵀ S Φ_i + λI)⁻¹ Σ_i Φ_iᵀ S x_i`` from the stacked embeddings ``F (n, D)``."""
    A = (F.T @ F) * precision[block][:, block] + lam * np.eye(F.shape[1])
    return np.linalg.solve(A, ((F.T @ X) * precision[block, :]).sum(1))


def numpy_residuals(F, X, block, w):
    return X - F @ (w[:, None] * (block[:, None] == np.arange(X.shape[1])[None, :]))


def numpy_profile(F, X, block, P, lam, log_sigma):
    """The profile objective of definitions §3.4, penalty left out (reference)."""
    Sigma = np.exp(log_sigma)[:, None] * P * np.exp(log_sigma)[None, :]
    prec = np.linalg.inv(Sigma)
    E = numpy_residuals(F, X, block, numpy_gls(F, X, block, prec, lam))
    return np.einsum("ij,jk,ik->", E, prec, E) + X.shape[0] * np.linalg.slogdet(Sigma)[1]


def numpy_model_b(F, X, block, P, lam):
    """σ by BFGS from the same start as cfjax (the ridge residuals' log standard deviations),
    then the GLS: ``(log σ, w, objective)``."""
    s0 = 0.5 * np.log(numpy_residuals(F, X, block, numpy_gls(F, X, block, np.eye(X.shape[1]), lam)).var(0))

    def objective(s):  # a line search's trial far out (σ over- or underflowing) is refused, not an error
        try:
            value = numpy_profile(F, X, block, P, lam, s)
        except np.linalg.LinAlgError:
            return np.inf
        return value if np.isfinite(value) else np.inf

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ref = minimize(objective, s0, method="BFGS", options=dict(gtol=1e-8))
        if not ref.success:  # BFGS's line search gave up at a refused trial: finish derivative-free
            ref = minimize(objective, ref.x, method="Nelder-Mead",
                           options=dict(xatol=1e-12, fatol=1e-12, maxiter=20000))
    sigma = np.exp(ref.x)
    w = numpy_gls(F, X, block, np.linalg.inv(sigma[:, None] * P * sigma[None, :]), lam)
    return ref.x, w, ref.fun


def numpy_cfu(model: S.FairModel, w_star: np.ndarray) -> float:
    """CFU of the two-feature salary graph (definitions §3.5) with explicit loops over units: each
    unit's counterfactual gender propagated through education then experience under Model B's
    weights ``w_star``, read through Model A's, through the fair predictor (sklearn's features)."""
    d = model.design
    sizes = np.cumsum((0,) + d.sizes)
    w_dag = np.asarray(model.model_a.w)
    X = np.asarray(model.data.X)
    a = np.asarray(model.data.a)[:, 0]
    codes = np.asarray(model.data.codes)[:, 0]
    deg_e, deg_x = model.degrees
    poly_e, poly_x = PolynomialFeatures(deg_e), PolynomialFeatures(deg_x)
    poly_f = PolynomialFeatures(model.predictor_degree)
    theta = np.asarray(model.theta)

    def residuals(a_i, x, w):
        phi_e = poly_e.fit_transform([[a_i]])[0]
        phi_x = poly_x.fit_transform([[a_i, x[0]]])[0]
        return np.array([x[0] - phi_e @ w[:sizes[1]], x[1] - phi_x @ w[sizes[1]:sizes[2]]])

    total = 0.0
    for i in range(X.shape[0]):
        delta = residuals(a[i], X[i], w_star)
        eps = residuals(a[i], X[i], w_dag)
        a_cf = codes[codes != a[i]][0]
        edu = poly_e.fit_transform([[a_cf]])[0] @ w_star[:sizes[1]] + delta[0]
        exp = poly_x.fit_transform([[a_cf, edu]])[0] @ w_star[sizes[1]:sizes[2]] + delta[1]
        eps_cf = residuals(a_cf, np.array([edu, exp]), w_dag)
        f, f_cf = (poly_f.fit_transform([e])[0] @ theta for e in (eps, eps_cf))
        total += (f - f_cf) ** 2
    return total / X.shape[0]


# ----------------------------------------------------------------------------- Model B, item by item
def test_descent_step_is_bounded_and_downhill_for_an_indefinite_hessian(rng, x64):
    # The old damping h + (−λ_min + 1e-9) I left an eigenvalue 1e-9: a step of 1e11 in log σ.
    m = 3
    V = np.linalg.qr(rng.normal(size=(m, m)))[0]
    lam = np.array([-float(rng.uniform(100, 3000)), float(rng.uniform(100, 3000)), float(rng.uniform(1, 10))])
    h = (V * lam) @ V.T
    g = rng.normal(size=m) * 1e3
    delta, plain = linear._descent_step(jnp.asarray(g), jnp.asarray(h))
    delta = np.asarray(delta)
    assert not bool(plain) and np.abs(delta).max() <= linear._MAX_STEP + 1e-12
    assert g @ delta > 0  # −delta goes downhill
    # the direction is |h|⁻¹ g (absolute eigenvalues), shortened
    direction = V @ ((V.T @ g) / np.abs(lam))
    np.testing.assert_allclose(delta / np.linalg.norm(delta), direction / np.linalg.norm(direction), rtol=1e-9)
    # a positive-definite h: exactly Newton's step when it is short
    pd_h = (V * np.abs(lam)) @ V.T
    small = pd_h @ rng.normal(size=m) * 1e-3
    step, plain = linear._descent_step(jnp.asarray(small), jnp.asarray(pd_h))
    assert bool(plain)
    np.testing.assert_allclose(step, np.linalg.solve(pd_h, small), rtol=1e-9)


def test_model_b_at_moderate_ridge_penalties_is_finite_and_the_reference_minimum(x64):
    # The data of the report, exactly: at λ = 100 and 300 Model B's σ used to be NaN (its Newton
    # step blew up where the profile objective is not convex) and so was every CFU, silently.
    frame = salary_frame(np.random.default_rng(7))
    for lam in (100.0, 300.0):
        model = salary_model(frame, lam)
        d = model.design
        F, X, block = np.asarray(d.F), np.asarray(d.X), d.block
        for r in (0.0, 0.5, -0.4):
            P = np.array([[1.0, r], [r, 1.0]])
            with warnings.catch_warnings():
                warnings.simplefilter("error", S.ConvergenceWarning)
                ours = fit_model_b(d, P, lam)
            log_sigma = np.log(np.asarray(ours.sigma))
            assert np.isfinite(log_sigma).all() and np.isfinite(np.asarray(ours.w)).all()
            ref_s, ref_w, ref_f = numpy_model_b(F, X, block, P, lam)
            np.testing.assert_allclose(log_sigma, ref_s, atol=1e-6)
            np.testing.assert_allclose(ours.w, numpy_gls(F, X, block, np.linalg.inv(
                np.asarray(ours.sigma)[:, None] * P * np.asarray(ours.sigma)[None, :]), lam), rtol=1e-9, atol=1e-12)
            assert numpy_profile(F, X, block, P, lam, log_sigma) <= ref_f + 1e-9 * abs(ref_f)
            # a minimum: zero gradient, positive-definite Hessian (numpy's objective, differenced)
            h = 1e-4
            f0 = numpy_profile(F, X, block, P, lam, log_sigma)
            H = np.empty((2, 2))
            for i in range(2):
                for j in range(2):
                    ei, ej = np.eye(2)[i] * h, np.eye(2)[j] * h
                    H[i, j] = (numpy_profile(F, X, block, P, lam, log_sigma + ei + ej)
                               - numpy_profile(F, X, block, P, lam, log_sigma + ei - ej)
                               - numpy_profile(F, X, block, P, lam, log_sigma - ei + ej)
                               + numpy_profile(F, X, block, P, lam, log_sigma - ei - ej)) / (4 * h * h)
            assert np.linalg.eigvalsh(H)[0] > 0 and np.isfinite(f0)
        assert np.isfinite(float(S.cfu(model, np.array([[1.0, 0.5], [0.5, 1.0]]))))


def test_model_b_matches_the_reference_on_fresh_salary_data(rng, x64):
    frame = salary_frame(rng, 300)
    lam = float(rng.choice([30.0, 100.0, 300.0, 1000.0]))
    model = salary_model(frame, lam)
    d = model.design
    F, X, block = np.asarray(d.F), np.asarray(d.X), d.block
    r = float(rng.uniform(-0.8, 0.8))
    P = np.array([[1.0, r], [r, 1.0]])
    ours = fit_model_b(d, P, lam)
    ref_s, _, ref_f = numpy_model_b(F, X, block, P, lam)
    f = numpy_profile(F, X, block, P, lam, np.log(np.asarray(ours.sigma)))
    assert np.isfinite(f) and f <= ref_f + 1e-9 * abs(ref_f)
    np.testing.assert_allclose(np.log(np.asarray(ours.sigma)), ref_s, atol=1e-5)


def test_a_model_b_fit_that_is_not_finite_warns_naming_lambda_and_the_equation(x64):
    model = salary_model(salary_frame(np.random.default_rng(3), 200), 100.0)
    # a start where the profile objective is not finite: no σ, and the user is told so
    with pytest.warns(S.ConvergenceWarning, match=r"lambda = 100\b.*'education', 'experience'.*not finite"):
        out = fit_model_b(model.design, np.eye(2), model.lam, log_sigma0=jnp.array([jnp.nan, 0.0]),
                            names=model.graph.features)
    assert np.isnan(np.asarray(out.sigma)).all()
    with pytest.warns(S.ConvergenceWarning, match=r"equation 0"):  # without names: by index
        fit_model_b(model.design, np.eye(2), 100.0, log_sigma0=jnp.array([jnp.inf, 0.0]))


def test_a_model_a_fit_that_is_not_finite_warns_naming_lambda_and_the_feature(x64):
    # Five rows, λ = 0: lsat's quadratic embedding has five independent columns and interpolates it.
    r = np.random.default_rng(0)
    a = np.array([1.0, -1.0, 1.0, -1.0, 1.0])
    g = a + r.normal(size=5)
    l = g + r.normal(size=5)
    graph = S.FairnessGraph({"gpa": ["A"], "lsat": ["A", "gpa"]})
    data = S.make_data(a, np.stack([g, l], 1), l + r.normal(size=5))
    settings = S.FitConfig(degrees=(2,), lambdas=(1.0,), predictor_degrees=(1,), predictor_lambdas=(1.0,), folds=2,
                          lam=0.0)
    with pytest.warns(S.ConvergenceWarning, match=r"Model A at lambda = 0 is not finite for 'lsat'.*interpolates"):
        S.fit(graph, data, settings)


def test_the_sweep_names_model_b_and_the_feature_when_a_fit_is_not_finite(monkeypatch, x64):
    # The λ table once called a NaN Model B "numerically singular (smallest residual standard
    # deviation 0.7865 of the feature's own)", which its own number contradicted.
    from types import SimpleNamespace

    from cfjax.sensitivity.analysis import lambda_sweep

    prob = S.from_frame(salary_frame(np.random.default_rng(1), 200), GRAPH, sensitive="gender", target="salary",
                        categories={"gender": ["f", "m"]})
    real = fit_model_b

    def broken(d, P, lam, **kw):  # Model B's experience equation without a finite σ
        out = real(d, P, lam, **kw)
        return out._replace(sigma=out.sigma.at[1].set(jnp.nan), w=out.w.at[-1].set(jnp.nan))

    monkeypatch.setattr(linear, "fit_model_b", broken)
    wc = SimpleNamespace(P=np.stack([np.eye(2), np.array([[1.0, 0.5], [0.5, 1.0]])]), p_max=np.array([0.0, 0.5]))
    settings = S.FitConfig(degrees=(1,), lambdas=(1.0,), predictor_degrees=(1,), predictor_lambdas=(1.0,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", S.ConvergenceWarning)
        [row] = lambda_sweep(prob, settings, SimpleNamespace(degrees=(1, 2)), [100.0], wc)
    assert row["cfu_at_worst_case_P"] == [None, None]
    assert row["undefined"].startswith("not finite: Model B's fit of experience is not finite at this λ at the "
                                       "worst-case P of p_max = 0.000 (σ NaN)")
    assert "singular" not in row["undefined"]


# ----------------------------------------------------------------------------- the ridge floor
def test_cfu_at_zero_correlation_is_zero_without_penalty_and_the_reported_floor_with_one(x64):
    frame = salary_frame(np.random.default_rng(7), 240)
    opts = dict(restarts=1, steps=5, screen_corners=False, snap=None, polish=0, warn_ratio=None)
    free = salary_model(frame, 0.0)
    assert S.cfu_at_zero_correlation(free) <= 1e-20 * float(np.mean(np.asarray(free.fair_pred) ** 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", S.ShrinkageWarning)  # a floor of rounding never warns
        wc = S.worst_case(free, [0.0, 0.5], key=jax.random.key(0), config=S.SearchConfig(**opts))
    assert wc.cfu_at_zero_correlation == S.cfu_at_zero_correlation(free)
    penalised = salary_model(frame, 30.0)
    floor = S.cfu_at_zero_correlation(penalised)
    assert isinstance(floor, float) and floor > 1e-3  # the shrinkage artefact, far from rounding
    assert floor == pytest.approx(float(S.cfu(penalised, np.eye(2))), rel=1e-12)
    # the independent reference: Model B at P = I by BFGS, CFU by loops over units
    d = penalised.design
    _, w_star, _ = numpy_model_b(np.asarray(d.F), np.asarray(d.X), d.block, np.eye(2), 30.0)
    assert floor == pytest.approx(numpy_cfu(penalised, w_star), rel=1e-6)
    with pytest.warns(S.ShrinkageWarning, match=r"zero error correlation \(P = I\) is .*lambda = 30\.0"):
        wc = S.worst_case(penalised, [0.0, 0.5], key=jax.random.key(0), config=S.SearchConfig(**opts))
    assert wc.cfu_at_zero_correlation == floor and wc.to_dict()["cfu_at_zero_correlation"] == floor
    assert f"cfu at P=I={floor:.4g}" in repr(wc)
    # with Model A taken as Model B at P = I, the floor is 0 again at the same λ
    ml = salary_model(frame, 30.0, model_a="ml")
    assert S.cfu_at_zero_correlation(ml) <= 1e-12 * floor
    with pytest.warns(S.ShrinkageWarning):
        inv = S.inverse_budget(penalised, 1e9, key=jax.random.key(0), hi=0.5, grid=1, config=S.SearchConfig(**opts))
    assert inv.cfu_at_zero_correlation == floor and inv.to_dict()["cfu_at_zero_correlation"] == floor


def test_floor_dominates_is_a_tenth_of_the_range_with_the_floor(rng):
    curve = np.sort(rng.uniform(0, 1, size=6))
    top, bottom = curve.max(), curve.min()
    below = float(rng.uniform(0, bottom))
    span = top - below  # the floor is the curve's lowest point
    assert floor_dominates(below, curve) == (below > 0.1 * span)
    assert floor_dominates(0.11 * (top - 0.0) + 0.0, np.append(curve, 0.0)) is True
    assert floor_dominates(0.09 * top, np.append(curve, 0.0)) is False
    assert not floor_dominates(1e-30, [1e-30, 1e-30], atol=1e-20)  # rounding: no artefact
    assert floor_dominates(1e-3, [1e-3, 1e-3])  # a curve that is all floor
    assert not floor_dominates(np.nan, curve) and not floor_dominates(0.0, curve)
    assert floor_dominates(0.5, [np.nan, 0.5, -np.inf])


# ----------------------------------------------------------------------------- degenerate problems
def test_degenerate_graphs_warn_naming_the_attribute_or_the_feature(x64):
    with pytest.warns(S.DegenerateProblemWarning, match=r"sensitive attribute 'A' is a parent of no feature"):
        S.FairnessGraph({"G": [], "L": ["G"]})
    with pytest.warns(S.DegenerateProblemWarning, match=r"single feature 'G'"):
        S.FairnessGraph({"G": ["A"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", S.DegenerateProblemWarning)
        S.FairnessGraph({"G": ["A"], "L": ["G"]})  # A causes L through G: not degenerate
    frame = salary_frame(np.random.default_rng(0), 50)
    with pytest.warns(S.DegenerateProblemWarning, match=r"'gender' is a parent of no feature"):
        S.from_frame(frame, {"education": [], "experience": ["education"]}, sensitive="gender",
                     target="salary", categories={"gender": ["f", "m"]})


# ----------------------------------------------------------------------------- data errors and results
def test_data_errors_give_1_based_rows_and_column_names(rng, x64):
    frame = salary_frame(rng, 40)
    row = int(rng.integers(0, 40))
    bad = frame.copy()
    bad.loc[row, "experience"] = np.inf
    with pytest.raises(ValidationError, match=rf"frame\['experience'\].*first at row {row + 1}\b"):
        S.from_frame(bad, GRAPH, sensitive="gender", target="salary", categories={"gender": ["f", "m"]})
    flat = frame.assign(education=12.0)
    with pytest.raises(ValueError, match=r"constant column\(s\) 'education'"):
        S.from_frame(flat, GRAPH, sensitive="gender", target="salary", categories={"gender": ["f", "m"]},
                     standardise="population")
    X = rng.normal(size=(30, 2))
    X[row % 30, 1] = np.nan
    with pytest.raises(ValueError, match=rf"first at row {row % 30 + 1} \(1-based; X\[{row % 30}, 1\]\), column 'L'"):
        S.make_data(np.tile([0.0, 1.0], 15), X, rng.normal(size=30), names=["G", "L"])


def test_baseline_unfairness_is_plain_floats(x64):
    model = salary_model(salary_frame(np.random.default_rng(2), 120), 1.0)
    assert set(model.baseline_unfairness) == {"unconstrained", "blind"}
    for name, value in model.baseline_unfairness.items():
        assert type(value) is float
        pred = np.asarray(model.baselines[name])
        assert value == pytest.approx(float(np.mean((np.asarray(model.fair_pred) - pred) ** 2)), rel=1e-12)
    assert all(type(v) is float for v in model.to_dict()["baseline_unfairness"].values())
    assert isinstance(model.selection["predictor"]["score"], float) and isinstance(model.lam, float)
