"""Results a user can keep: to_dict (strict JSON), short reprs, pytrees that jit and vmap, and
the inverse question's answer for a level it cannot reach."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax.sensitivity as S
from cfjax.sensitivity import datasets as D
from cfjax.sensitivity import fitting as M
from cfjax.sensitivity import inverse as I
from cfjax.sensitivity import search as Q

TINY = M.FitConfig(degrees=(2,), lambdas=(1.0,), predictor_degrees=(2,), predictor_lambdas=(1.0,), folds=2)
OPTS = dict(restarts=2, steps=5, screen_corners=False, snap=None, polish=0, warn_ratio=None)


@pytest.fixture(scope="module")
def fitted():
    prob = D.synthetic(150, correlation=0.3, key=1)
    model = M.fit(prob.graph, prob.data, TINY)
    return model, Q.worst_case(model, 0.6, key=jax.random.key(0), config=Q.SearchConfig(**OPTS))


def roundtrip(d):
    return json.loads(json.dumps(d, allow_nan=False))  # strict JSON: no NaN or inf


def test_worst_case_to_dict_repr_and_pytree(fitted, rng):
    model, wc = fitted
    d = roundtrip(wc.to_dict())
    np.testing.assert_allclose(d["cfu"], np.asarray(wc.cfu), rtol=1e-6)
    np.testing.assert_allclose(d["P"], np.asarray(wc.P), rtol=1e-6)
    assert d["steps"] == np.asarray(wc.steps).tolist() and d["min_eig"] == wc.min_eig and "history" not in d
    hist = roundtrip(wc.to_dict(history=True))["history"]
    ref = np.asarray(wc.history)
    assert np.array_equal(np.array([[v is None for v in r] for r in hist[0]]), np.isnan(ref[0]))  # NaN -> None
    text = repr(wc)
    assert len(text) < 400 and f"{float(wc.cfu[0]):.4g}" in text and "budgets=1, restarts=2" in text
    # Still a pytree: jit and vmap carry it (a vmapped copy's repr shows shapes only).
    scale = float(rng.uniform(1, 3))
    out = jax.jit(lambda w: w.replace(cfu=w.cfu * scale))(wc)
    assert isinstance(out, Q.WorstCase)
    np.testing.assert_allclose(out.cfu, np.asarray(wc.cfu) * scale, rtol=1e-6)
    stacked = jax.tree.map(lambda x: jnp.stack([x, x]), wc)
    both = jax.vmap(lambda w: w.cfu.sum())(stacked)
    np.testing.assert_allclose(both, [float(wc.cfu.sum())] * 2, rtol=1e-6)
    assert len(repr(stacked)) < 400


def test_fair_model_to_dict_and_repr(fitted):
    model, _ = fitted
    d = roundtrip(model.to_dict())
    assert d["features"] == ["G", "L"] and d["parents"] == [["A"], ["A", "G"]] and d["n"] == 150
    np.testing.assert_allclose(d["theta"], np.asarray(model.theta), rtol=1e-6)
    np.testing.assert_allclose(np.concatenate(d["w"]), np.asarray(model.model_a.w), rtol=1e-6)
    assert d["baseline_unfairness"]["blind"] == pytest.approx(float(model.baseline_unfairness["blind"]))
    text = repr(model)
    assert len(text) < 400 and f"{float(model.baseline_unfairness['blind']):.4g}" in text
    # The parts a user may hold on to: short reprs, plain dicts without per-unit arrays.
    assert f"{float(model.model_a.sigma[0]):.4g}" in repr(model.model_a) and len(repr(model.model_a)) < 400
    for part in (model.design, model.data):
        assert "n=150, m=2" in repr(part) and len(repr(part)) < 400
    a = roundtrip(model.model_a.to_dict())
    assert set(a) == {"w_ridge", "sigma", "w"}
    np.testing.assert_allclose(a["sigma"], np.asarray(model.model_a.sigma), rtol=1e-6)


def test_an_unreachable_level_is_a_clear_result(fitted, rng):
    model, wc = fitted
    level = float(rng.uniform(1e3, 1e6))
    inv = I.inverse_budget(model, level, key=jax.random.key(0), hi=0.6, grid=1, config=I.SearchConfig(**OPTS))
    assert inv.reached is False and inv.p_max is None
    assert inv.lo == pytest.approx(0.6) and inv.hi == 1.0  # the answer, if any, lies beyond 0.6
    # The same search as the fixture's: the largest CFU found and where.
    assert np.isfinite(inv.max_cfu) and inv.max_cfu == pytest.approx(float(wc.cfu[0]), rel=1e-6)
    assert inv.max_cfu_p_max == pytest.approx(0.6)
    d = roundtrip(inv.to_dict())
    assert d["reached"] is False and d["p_max"] is None and d["evaluated"] == [[pytest.approx(0.6), d["max_cfu"]]]
    text = repr(inv)
    assert len(text) < 400 and "reached=False" in text and f"{inv.max_cfu:.4g}" in text
    assert jax.tree.leaves(inv) == [] and jax.jit(lambda r: r)(inv) == inv  # a pytree, all static


def test_a_reachable_level_is_bracketed(fitted, rng):
    model, wc = fitted
    level = float(rng.uniform(0.3, 0.9)) * float(wc.cfu[0])
    inv = I.inverse_budget(model, level, key=jax.random.key(0), hi=0.6, grid=1, tol=0.1,
                           config=I.SearchConfig(**OPTS))
    assert inv.reached is True and 0 <= inv.lo < inv.p_max == inv.hi <= 0.6 and inv.hi - inv.lo <= 0.1
    # Every probe at or above p_max reached the level; those at or below lo did not.
    for p, c in inv.evaluated:
        assert (c >= level) == (p >= inv.p_max)
    assert inv.max_cfu == pytest.approx(max(c for _, c in inv.evaluated))
    assert f"{inv.p_max:.4g}" in repr(inv) and roundtrip(inv.to_dict())["p_max"] == inv.p_max


def test_bisection_by_local_searches_equals_brute_force(fitted, rng):
    """The bisection's probes are local searches from the bracket's worst cases. Two features,
    one correlation: the worst case at a budget is the largest CFU on a fine grid of |rho| <= p
    (cfu_grid), so a bisection on that grid is the reference, probe by probe."""
    model, wc = fitted
    level = float(rng.uniform(0.2, 0.9)) * float(wc.cfu[0])
    tol = 0.02
    inv = I.inverse_budget(model, level, key=jax.random.key(0), worst=wc, tol=tol, config=I.SearchConfig(**OPTS))
    lo, hi, probes = 0.0, float(wc.p_max[0]), []
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        value = float(np.nanmax(np.asarray(S.cfu_grid(model, np.linspace(-mid, mid, 801)))))
        probes.append((mid, value))
        lo, hi = (lo, mid) if value >= level else (mid, hi)
    assert inv.reached and (inv.lo, inv.hi) == pytest.approx((lo, hi), abs=1e-12)
    got = np.asarray(inv.evaluated[1:])
    np.testing.assert_allclose(got[:, 0], [p for p, _ in probes], rtol=0, atol=1e-12)
    np.testing.assert_allclose(got[:, 1], [v for _, v in probes], rtol=1e-3)
