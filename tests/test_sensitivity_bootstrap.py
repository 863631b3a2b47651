"""Bootstrap intervals of the sensitivity analysis (cfjax.sensitivity.bootstrap, .resample): refit against
fit on the resampled data, the vmapped program against a loop of per-resample calls, the
identity resample against the full data's worst case, the percentiles against numpy, errors; and
(slow) the intervals' coverage on a simulated SCM."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax.sensitivity as S
from cfjax import ValidationError
from cfjax.sensitivity.bootstrap import _percentiles
from cfjax.sensitivity.benchmarks import partial_r2, residual_correlations
from cfjax.sensitivity.linear import design
from cfjax.sensitivity.resample import (
    _analysis_jit,
    _Config,
    _one,
    _penalties,
    _prepare,
    _refit_counts,
    _rows,
    _starts,
    refit,
    resample_analysis,
)
from cfjax.sensitivity.cfu import bivariate_correlation

BUDGETS = (0.3, 0.6, 0.9)
SMALL = S.FitConfig(degrees=(2,), lambdas=(1.0,), predictor_degrees=(2,), predictor_lambdas=(1.0,))


def _resampled(data, idx):
    """``data[idx]`` through the public constructor (an independent path to the resample)."""
    a = np.asarray(data.codes)[np.asarray(data.group)][:, 0]
    return S.make_data(a[idx], np.asarray(data.X)[idx], np.asarray(data.y)[idx])


@pytest.mark.parametrize("model_a, lam", [("paper", None), ("ml", 0.0)])
def test_refit_equals_fit_on_the_resample(rng, x64, model_a, lam):
    n = int(rng.integers(80, 160))
    prob = S.synthetic(n, key=int(rng.integers(2**31)))
    settings = S.FitConfig(degrees=(1, 2), lambdas=(0.1, 10.0), predictor_degrees=(1, 2),
                          predictor_lambdas=(0.01, 1.0, 100.0), model_a=model_a, lam=lam)
    model = S.fit(prob.graph, prob.data, settings)
    idx = rng.integers(0, n, n)
    got = refit(model, idx, model_a=model_a)
    sel = model.selection
    fixed = settings.replace(lam=float(np.asarray(model.lam)), equation_degrees=model.degrees)
    data = _resampled(prob.data, idx)
    want = S.fit(prob.graph, data, fixed.replace(predictor_degrees=(model.predictor_degree,),
                                                 predictor_lambdas=(sel["predictor"]["lam"],)))
    close = dict(rtol=1e-8, atol=1e-10)
    for a, b in ((got.model_a.w, want.model_a.w), (got.model_a.sigma, want.model_a.sigma),
                 (got.model_a.residuals, want.model_a.residuals), (got.theta, want.theta),
                 (got.fair_pred, want.fair_pred), (got.design.G, want.design.G)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **close)
    for name, degree in model.baseline_degrees:  # each baseline with its own choices fixed
        b = S.fit(prob.graph, data, fixed.replace(predictor_degrees=(degree,),
                                                  predictor_lambdas=(sel["baselines"][name]["lam"],)))
        np.testing.assert_allclose(np.asarray(got.baseline_theta[name]), np.asarray(b.baseline_theta[name]), **close)
        np.testing.assert_allclose(np.asarray(got.baselines[name]), np.asarray(b.baselines[name]), **close)
        np.testing.assert_allclose(float(got.baseline_unfairness[name]),
                                   np.mean((np.asarray(want.fair_pred) - np.asarray(b.baselines[name])) ** 2), **close)
    assert got.selection == {} and got.degrees == model.degrees and got.scored == model.scored
    # Traceable: vmapped over two resamples, each as refitted alone.
    two = np.stack([idx, rng.integers(0, n, n)])
    batch = jax.jit(jax.vmap(lambda i: refit(model, i, model_a=model_a)))(jnp.asarray(two))
    for k in range(2):
        alone = refit(model, two[k], model_a=model_a)
        np.testing.assert_allclose(np.asarray(batch.theta[k]), np.asarray(alone.theta), **close)
        np.testing.assert_allclose(np.asarray(batch.model_a.sigma[k]), np.asarray(alone.model_a.sigma), **close)


def _coarse(rng, n):
    """A synthetic problem whose features are rounded to a coarse grid (a survey's discrete
    scores): units repeat rows (A, x), as in the NHS survey."""
    prob = S.synthetic(n, key=int(rng.integers(2**31)))
    d = prob.data
    a = np.asarray(d.codes)[np.asarray(d.group)][:, 0]
    return prob.graph, S.make_data(a, np.round(np.asarray(d.X) * 2) / 2, np.asarray(d.y))


def test_a_weighted_design_equals_its_rows_repeated(rng, x64):
    n, D, m = int(rng.integers(5, 30)), 4, 2
    F, X = rng.standard_normal((n, D)), rng.standard_normal((n, m))
    count = rng.integers(0, 4, n)
    count[0] = 1  # at least one unit
    got = design([F[:, :2], F[:, 2:]], X, weight=count.astype(float))
    rep = np.repeat(np.arange(n), count)
    want = design([F[rep, :2], F[rep, 2:]], X[rep])
    for name in ("G", "C", "XX", "F_mean", "X_mean"):
        np.testing.assert_allclose(np.asarray(getattr(got, name)), np.asarray(getattr(want, name)), rtol=1e-12,
                                   atol=1e-12, err_msg=name)
    assert float(got.count) == count.sum() and want.count == count.sum()
    with pytest.raises(ValidationError, match="`weight`"):
        design([F[:, :2], F[:, 2:]], X, weight=np.ones(n + 1))


@pytest.mark.parametrize("model_a", ["paper", "ml"])
def test_a_resample_as_counts_over_distinct_rows_equals_reading_its_units(rng, x64, model_a):
    """The bootstrap refits each resample on the distinct rows (A, x), weighted by how many of
    their units it drew (the NHS survey: 209,112 units, 39,373 rows): the same fit, CFU,
    benchmarks and resample numbers as the refit that reads the drawn units one by one."""
    graph, data = _coarse(rng, int(rng.integers(150, 300)))
    model = S.fit(graph, data, SMALL.replace(model_a=model_a))
    rows, row = _rows(model.data)
    assert rows.n < data.n and model.distinct is not None and rows.n == model.distinct.index.size
    idx = rng.integers(0, data.n, data.n)
    lams = _penalties(model)
    units = refit(model, idx, model_a=model_a)
    counts = jax.jit(_refit_counts, static_argnums=5)(model, rows, row, jnp.asarray(idx), lams, model_a)
    close = dict(rtol=1e-8, atol=1e-12)
    mine = np.asarray(row)[idx]  # each drawn unit's row
    for a, b in ((counts.model_a.w, units.model_a.w), (counts.model_a.sigma, units.model_a.sigma),
                 (counts.theta, units.theta), (counts.fair_pred[mine], units.fair_pred),
                 (counts.model_a.residuals[mine], units.model_a.residuals),
                 (partial_r2(counts), partial_r2(units)), (residual_correlations(counts), residual_correlations(units))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **close)
    for name in units.baseline_unfairness:
        np.testing.assert_allclose(float(counts.baseline_unfairness[name]), float(units.baseline_unfairness[name]),
                                   **close)
        np.testing.assert_allclose(np.asarray(counts.baseline_theta[name]), np.asarray(units.baseline_theta[name]),
                                   **close)
    for _ in range(3):  # CFU at random correlations, scored on each predictor
        P = np.asarray(bivariate_correlation(float(rng.uniform(-0.8, 0.8)))) if graph.m == 2 else None
        if P is None:
            L = rng.standard_normal((graph.m, graph.m))
            C = L @ L.T + graph.m * np.eye(graph.m)
            P = C / np.sqrt(np.outer(np.diag(C), np.diag(C)))
        for predictor in S.PREDICTORS:
            np.testing.assert_allclose(float(S.cfu(counts.scoring(predictor), P)),
                                       float(S.cfu(units.scoring(predictor), P)), rtol=1e-7, err_msg=predictor)
    if model_a == "ml":  # the resample's program is the same for both (one compilation spared)
        return
    # The whole resample's numbers: counts (what bootstrap runs) against the units read one by one.
    # Any usable P per budget starts the local searches: the smallest search gives them.
    tiny = S.SearchConfig(restarts=1, steps=5, screen_corners=False, snap=None, polish=0, warn_ratio=None,
                          max_rounds=0)
    wc = S.worst_case(model, BUDGETS, key=0, config=tiny)
    levels = {"mid": float(np.sqrt(wc.cfu[0] * wc.cfu[1]))}
    got = resample_analysis(model, BUDGETS, idx, worst=wc, levels=levels, steps=4, bisect=3, model_a=model_a)
    cfg, names, _, shared = _prepare(model, BUDGETS, wc, (1, 2, 3), levels, 4, 3, model_a, None, None)
    want = _analysis_jit(cfg, units, *shared[4:])
    for i, name in enumerate(names):
        want[f"inverse/{name}"], want[f"level/{name}"] = want.pop(f"inverse/{i}"), want.pop(f"level/{i}")
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=1e-6, atol=0, err_msg=k)


@pytest.fixture(scope="module")
def run():
    """A small model, its worst case and one bootstrap (40 resamples in chunks of 6: lax.map over
    chunks, the last padded) with two levels and the benchmarks."""
    with jax.enable_x64(True):
        prob = S.synthetic(200, key=3)
        model = S.fit(prob.graph, prob.data, SMALL)
        wc = S.worst_case(model, BUDGETS, key=0, config=S.SearchConfig(warn_ratio=None))
        half = float(np.sqrt(wc.cfu[0] * wc.cfu[1]))  # between the first two budgets' worst cases
        levels = {"mid": half, "blind": "blind"}
        iv = S.bootstrap(model, BUDGETS, key=7, resamples=40, worst=wc, levels=levels,
                         options=S.BootstrapConfig(steps=4, bisect=3, chunk=6))
        return model, wc, iv, levels


def test_identity_resample_reproduces_the_worst_case(run, x64):
    model, wc, iv, _ = run
    np.testing.assert_allclose(iv.estimate["worst_case"], np.asarray(wc.cfu), rtol=1e-6)
    for name, value in model.baseline_unfairness.items():
        np.testing.assert_allclose(iv.estimate[f"baseline_unfairness/{name}"], value, rtol=1e-9)
    bench = S.benchmarks(model)  # the benchmarks' own host-side result on the full data
    np.testing.assert_allclose(iv.estimate["benchmark_cfu"], np.asarray(bench.cfu), rtol=1e-8)
    np.testing.assert_allclose(iv.estimate["benchmark_budget"], np.asarray(bench.p_max), rtol=1e-12)


def test_vmapped_program_equals_a_loop_of_resamples(run, x64):
    model, wc, iv, levels = run
    keys = jax.random.split(jax.random.key(7), 40)
    n = model.data.n
    for b in (0, 1, 39):  # resample b draws its units with split(key, resamples)[b]
        idx = jax.random.randint(keys[b], (n,), 0, n, jnp.int32)
        out = resample_analysis(model, BUDGETS, idx, worst=wc, levels=levels, steps=4, bisect=3)
        assert set(out) == set(iv.values)
        for k, v in out.items():
            np.testing.assert_allclose(iv.values[k][b], np.asarray(v), rtol=1e-9, atol=0, err_msg=k)
    whole = resample_analysis(model, BUDGETS, np.arange(n), worst=wc, levels=levels, steps=4, bisect=3)
    for k, v in whole.items():  # the identity resample: the estimate
        np.testing.assert_allclose(iv.estimate[k], np.asarray(v), rtol=1e-9, atol=0, err_msg=k)


def test_each_resample_is_a_local_search_from_the_full_data_maximisers(run, x64):
    """Independently: each resample's worst case is at least CFU (cfjax.sensitivity.cfu) of its
    refit at the full data's worst P (where its search starts), and grows with the budget."""
    model, wc, iv, _ = run
    keys = jax.random.split(jax.random.key(7), 40)
    n = model.data.n
    for b in range(2):
        fitted = refit(model, jax.random.randint(keys[b], (n,), 0, n, jnp.int32))
        for k, P in enumerate(np.asarray(wc.P)):
            assert iv.values["worst_case"][b, k] >= float(S.cfu(fitted, P)) * (1 - 1e-9)
    assert np.all(np.diff(iv.values["worst_case"], axis=1) >= 0)


def test_interval_ends_are_low_and_high_and_the_old_names_warn(run):
    _, _, iv, _ = run
    out = iv.to_dict()
    assert "low" in out and "high" in out and "lower" not in out and "upper" not in out
    for old, new in (("lower", "low"), ("upper", "high")):
        with pytest.warns(DeprecationWarning, match=rf"Intervals\.{old} is deprecated.*Intervals\.{new}"):
            assert getattr(iv, old) is getattr(iv, new)


def test_intervals_are_percentiles_and_inverse_budgets_are_bracketed(run, x64):
    model, wc, iv, levels = run
    for name, values in iv.values.items():
        finite = np.where(np.isfinite(values), values, np.nan)
        if np.isfinite(values).all():
            np.testing.assert_allclose(iv.low[name], np.quantile(values, 0.025, axis=0), rtol=1e-12)
            np.testing.assert_allclose(iv.high[name], np.quantile(values, 0.975, axis=0), rtol=1e-12)
        assert np.all(~(iv.low[name] > iv.high[name])), name
        np.testing.assert_array_equal(iv.not_finite[name], np.sum(np.isnan(finite) & ~np.isposinf(values), axis=0))
    assert np.all(iv.low["worst_case"] <= iv.high["worst_case"])
    # The level between the first two budgets' worst cases: reached in (0.3, 0.6], by bisection.
    p = iv.estimate["inverse/mid"]
    assert BUDGETS[0] < p <= BUDGETS[1] and iv.resolution == pytest.approx(0.3 / 8)
    curve = iv.values["worst_case"]
    for b in range(40):  # each resample's answer in its own grid bracket
        k = int(np.argmax(curve[b] >= levels["mid"])) if (curve[b] >= levels["mid"]).any() else None
        got = iv.values["inverse/mid"][b]
        if k is None:
            assert np.isposinf(got)
        else:
            assert (BUDGETS[k - 1] if k else 0.0) < got <= BUDGETS[k]
    # The blind baseline's unfairness (about 2) is far above every worst case: never reached.
    assert np.isposinf(iv.estimate["inverse/blind"]) and iv.not_reached["inverse/blind"] == 40
    assert np.isposinf(iv.high["inverse/blind"])
    np.testing.assert_allclose(iv.values["level/blind"], iv.values["baseline_unfairness/blind"])
    out = iv.to_dict()
    json.dumps(out)
    assert out["levels"] == {"mid": levels["mid"], "blind": "blind"} and "values" not in out
    assert "values" in iv.to_dict(values=True)
    assert repr(iv).startswith("Intervals(resamples=40, level=0.95, worst_case at p_max=0.9")


def test_percentiles_against_numpy(rng):
    values = rng.standard_normal((int(rng.integers(3, 40)), 3))
    for q in (0.025, 0.5, 0.975):
        np.testing.assert_allclose(_percentiles(values, q), np.quantile(values, q, axis=0), rtol=1e-12)
    values[0, 0], values[1, 1], values[:, 2] = np.nan, np.inf, np.nan
    got = _percentiles(values, 0.975)
    np.testing.assert_allclose(got[0], np.quantile(values[1:, 0], 0.975), rtol=1e-12)
    assert np.isposinf(got[1]) and np.isnan(got[2])


def test_the_intervals_contain_the_estimate(run, x64):
    """With 40 resamples (a fixed key), the full data's values lie inside their 95% intervals."""
    _, _, iv, _ = run
    for name in ("worst_case", "baseline_unfairness/blind", "baseline_unfairness/unconstrained", "benchmark_cfu",
                 "inverse/mid"):
        est = iv.estimate[name]
        ok = ~np.isfinite(est) | ((iv.low[name] <= est) & (est <= iv.high[name]))
        assert np.all(ok), name


def test_errors(run, x64):
    model, wc, _, _ = run
    call = lambda **kw: S.bootstrap(model, kw.pop("p_max", BUDGETS), key=kw.pop("key", 0),  # noqa: E731
                                    worst=kw.pop("worst", wc), **kw)
    for kw, name in [(dict(p_max=[0.3, 1.2]), "p_max"), (dict(p_max=[[0.3]]), "p_max"),
                     (dict(resamples=1), "resamples"), (dict(level=1.5), "level"),
                     (dict(levels={"x": "fair"}), "levels['x']"), (dict(levels={"x": -1.0}), "levels['x']"),
                     (dict(levels=[0.1]), "levels"), (dict(benchmarks=(0.0,)), "benchmarks"),
                     (dict(p_max=[0.3, 0.6]), "worst"), (dict(worst="no"), "worst"),
                     (dict(key=-1), "key")]:
        with pytest.raises(ValidationError, match=f"`{name}`" if "[" not in name else "levels"):
            call(**kw)
    for kw, name in [(dict(chunk=0), "chunk"), (dict(model_a="x"), "model_a"), (dict(steps=0), "steps"),
                     (dict(bisect=0), "bisect")]:
        with pytest.raises(ValidationError, match=f"`BootstrapConfig.{name}`"):
            S.BootstrapConfig(**kw)
    with pytest.raises(ValidationError, match="`config`"):
        call(worst=None, config={"restarts": 2})
    with pytest.raises(ValidationError, match="`model`"):
        S.bootstrap("model", BUDGETS, key=0)
    with pytest.raises(ValidationError, match="`idx`"):
        refit(model, [0, model.data.n])
    with pytest.raises(ValidationError, match="`idx`"):
        refit(model, np.zeros((2, 2), int))
    with pytest.raises(ValidationError, match="`model`"):
        refit(model.replace(selection={}), [0, 1])


def test_the_old_keyword_arguments_still_work_with_a_warning(run, x64):
    """bootstrap(steps=, bisect=, chunk=) and search={...} are deprecated: folded into options and
    config with a DeprecationWarning naming the new spelling, the same numbers."""
    model, wc, _, _ = run
    new = S.bootstrap(model, BUDGETS, key=7, resamples=3, worst=wc, options=S.BootstrapConfig(steps=4, bisect=3))
    with pytest.warns(DeprecationWarning, match=r"bootstrap\(steps=4, bisect=3\) is deprecated.*"
                      r"options=BootstrapConfig\(steps=4, bisect=3\)"):
        old = S.bootstrap(model, BUDGETS, key=7, resamples=3, worst=wc, steps=4, bisect=3)
    np.testing.assert_array_equal(old.values["worst_case"], new.values["worst_case"])
    with pytest.warns(DeprecationWarning, match=r"config=SearchConfig\(restarts=1\)"):
        with pytest.raises(ValidationError, match="`worst`"):  # folded in before the checks
            S.bootstrap(model, BUDGETS, key=7, worst="no", search={"restarts": 1})
    with pytest.raises(TypeError, match="unexpected keyword argument 'resample'"):
        S.bootstrap(model, BUDGETS, key=7, worst=wc, resample=3)


@pytest.mark.slow
def test_coverage_on_a_simulated_scm():
    """The 95% percentile interval of the worst-case CFU at budget 0.5 covers the true value in at
    least 90 of 100 replications (n = 400 units each, 200 resamples; every replication's
    bootstrap vmapped together). The true value: the same estimand on 10⁶ units of the same SCM
    (with two features the worst case at a budget is at its edge, P_12 = ±0.5). Degrees fixed
    (no CV) and ridge penalties proportional to n (λ = n / 200 for the equations and the
    predictors: a fixed penalty per unit), so that the large sample estimates the same
    quantity; without a penalty this SCM's CFU is 0 to rounding (an estimand of 1e-29)."""
    with jax.enable_x64(True):
        def settings(n):
            return S.FitConfig(lam=n / 200, equation_degrees=(2, 2), predictor_degrees=(2,),
                              predictor_lambdas=(n / 200,))

        budget, reps, n, B = 0.5, 100, 400, 200
        big = S.synthetic(1_000_000, correlation=0.5, key=10**6)
        model = S.fit(big.graph, big.data, settings(big.data.n))
        truth = max(float(S.cfu(model, bivariate_correlation(s * budget))) for s in (1.0, -1.0))
        del model, big
        models, starts = [], []
        for r in range(reps):
            prob = S.synthetic(n, correlation=0.5, key=r)
            fitted = S.fit(prob.graph, prob.data, settings(n))
            edges = [bivariate_correlation(s * budget) for s in (1.0, -1.0)]
            worst = edges[int(np.argmax([float(S.cfu(fitted, P)) for P in edges]))]
            models.append(fitted.replace(selection={}, baseline_unfairness={k: jnp.asarray(v) for k, v in
                                                                             fitted.baseline_unfairness.items()}))
            starts.append(np.broadcast_to(np.asarray(worst), (1, 3, 2, 2)))
        lams = _penalties(fitted)
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *models)
        cfg = _Config("paper", 1e-3, 5, 1, (), ())
        p = jnp.asarray([budget])

        def replication(model, start, key):
            keys = jax.random.split(key, B + 1)
            same = jnp.arange(B + 1) == 0

            def one(args):  # every unit its own row (continuous data)
                return _one(cfg, args[0], args[1], model, lams, model.data, jnp.arange(n), p, start,
                            jnp.zeros(0))["worst_case"][0]

            return jax.lax.map(one, (keys, same), batch_size=25)

        keys = jax.random.split(jax.random.key(2024), reps)
        out = np.asarray(jax.jit(lambda m, s, k: jax.lax.map(lambda a: replication(*a), (m, s, k), batch_size=4))(
            stacked, jnp.asarray(np.stack(starts)), keys))
        low, high = np.quantile(out[:, 1:], 0.025, axis=1), np.quantile(out[:, 1:], 0.975, axis=1)
        covered = int(np.sum((low <= truth) & (truth <= high)))
        print(f"coverage: {covered} of {reps} (truth {truth:.4g}, median estimate {np.median(out[:, 0]):.4g})")
        assert covered >= 90
