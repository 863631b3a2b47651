"""The full report: parity with independent references, invariants, label-free use,
jit / vmap / sharded sweeps, and property tests."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats
from sklearn.metrics import brier_score_loss

import cfjax as cf
from tests import reference as ref

FIELDS = [
    "risk_orig", "risk_cm", "risk_ie", "risk_cvar", "risk_wc", "brier_orig", "ece_orig",
    "mce_orig", "smece_orig", "brier_cm", "ece_cm", "mce_cm", "smece_cm", "s_var", "s_flip",
    "d_obs", "score_shift", "spearman", "kendall_tau_b", "rank_change",
]


def predictor(rng, n=200, k=16, ties=True):
    y = rng.integers(0, 2, n)
    logits = rng.normal(size=(n, 1)) + y[:, None] + 0.5 * rng.normal(size=(n, k))
    p_cf = 1 / (1 + np.exp(-logits))
    p_obs = 1 / (1 + np.exp(-(logits[:, 0] + 0.3 * rng.normal(size=n))))
    if ties:
        p_cf, p_obs = np.round(p_cf, 2), np.round(p_obs, 2)
    return p_obs, p_cf, y


def test_report_has_exactly_the_spec_fields():
    assert [f for f in cf.metrics.MarginalisationReport.__dataclass_fields__ if f != "alphas"] == FIELDS


def test_report_matches_independent_references(rng, x64):
    p_obs, p_cf, y = predictor(rng)
    k = p_cf.shape[1]
    q = rng.dirichlet(np.ones(k))
    alphas, tau, n_bins = (0.5, 0.2), 0.4, 10
    r = cf.metrics.evaluate(p_obs, p_cf, y, weights=q, tau=tau, alphas=alphas, n_bins=n_bins)
    r_orig, r_cm, r_ie, cvars, r_wc = ref.risks(p_obs, p_cf, y, q, alphas)
    p_bar = p_cf @ q
    ece_o, mce_o = ref.calibration(p_obs, y, n_bins, dtype=np.float64)
    ece_c, mce_c = ref.calibration(p_bar, y, n_bins, dtype=np.float64)
    s_var, s_flip, d_obs, shift = ref.stability(p_obs, p_cf, q, tau)
    expected = dict(
        risk_orig=r_orig, risk_cm=r_cm, risk_ie=r_ie, risk_cvar=cvars, risk_wc=r_wc,
        brier_orig=brier_score_loss(y, p_obs), ece_orig=ece_o, mce_orig=mce_o,
        brier_cm=brier_score_loss(y, p_bar), ece_cm=ece_c, mce_cm=mce_c,
        s_var=s_var, s_flip=s_flip, d_obs=d_obs, score_shift=shift,
        spearman=stats.spearmanr(p_obs, p_bar).statistic,
        kendall_tau_b=stats.kendalltau(p_obs, p_bar).statistic,
        rank_change=np.mean(np.abs(stats.rankdata(p_obs) - stats.rankdata(p_bar))),
    )
    for name, value in expected.items():
        np.testing.assert_allclose(getattr(r, name), value, rtol=1e-9, atol=1e-12, err_msg=name)
    # Smooth ECE: grid discretisation against a direct sum (tests/test_metrics_smooth_ece.py).
    np.testing.assert_allclose(r.smece_orig, ref.smooth_ece(p_obs, y)[0], rtol=1e-4)
    np.testing.assert_allclose(r.smece_cm, ref.smooth_ece(p_bar, y)[0], rtol=1e-4)


def test_float32_report_close_to_float64_reference(rng):
    p_obs, p_cf, y = predictor(rng, n=3000, ties=False)
    r32 = cf.metrics.evaluate(p_obs.astype(np.float32), p_cf.astype(np.float32), y).to_dict()
    with jax.enable_x64(True):
        r64 = cf.metrics.evaluate(p_obs, p_cf, y).to_dict()
    for name in FIELDS:
        a, b = r32[name], r64[name]
        if name == "risk_cvar":
            a, b = list(a.values()), list(b.values())
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6, err_msg=name)


def test_predictor_ignoring_the_intervention_is_perfectly_stable(rng):
    # Dyadic probabilities (multiples of 2^-12): the float32 mean of 16 copies is exact, so
    # marginalising changes nothing (a uniform p near 1 could move by an ulp, 1e-4 in its risk).
    p_obs = (rng.integers(1, 4096, size=300) / 4096).astype(np.float32)
    p_cf = np.repeat(p_obs[:, None], 16, axis=1)
    r = cf.metrics.evaluate(p_obs, p_cf, rng.integers(0, 2, 300))
    assert float(r.s_var) == pytest.approx(0, abs=1e-10)
    assert float(r.s_flip) == 0 and float(r.d_obs) == 0
    assert float(r.spearman) == pytest.approx(1, abs=1e-6)
    assert float(r.kendall_tau_b) == pytest.approx(1, abs=1e-6)
    assert float(r.rank_change) == pytest.approx(0, abs=1e-6)
    assert float(r.risk_cm) == pytest.approx(float(r.risk_orig), rel=1e-6)
    assert float(r.risk_ie) == pytest.approx(float(r.risk_orig), rel=1e-6)


def test_label_free_report_keeps_stability_and_blanks_label_fields(rng):
    p_obs, p_cf, y = predictor(rng)
    p_obs, p_cf = p_obs.astype(np.float32), p_cf.astype(np.float32)
    with_labels = cf.metrics.evaluate(p_obs, p_cf, y).to_dict()
    without = cf.metrics.evaluate(p_obs, p_cf).to_dict()
    for name in FIELDS:
        if name in cf.metrics.report.LABEL_FIELDS:
            values = list(without[name].values()) if name == "risk_cvar" else [without[name]]
            assert all(math.isnan(v) for v in values), name
        else:
            assert without[name] == with_labels[name], name


def test_to_dict_gives_plain_floats(rng):
    p_obs, p_cf, y = predictor(rng)
    d = cf.metrics.evaluate(p_obs.astype(np.float32), p_cf.astype(np.float32), y,
                            alphas=(0.3, 0.1)).to_dict()
    assert set(d) == set(FIELDS)
    assert all(type(v) is float for k, v in d.items() if k != "risk_cvar")
    assert list(d["risk_cvar"]) == [0.3, 0.1]
    assert all(type(v) is float for v in d["risk_cvar"].values())


def test_jit_and_vmap_over_predictors_give_the_same_numbers(rng):
    n_pred = 5
    data = [predictor(rng) for _ in range(n_pred)]
    y = data[0][2]
    P_obs = np.stack([d[0] for d in data]).astype(np.float32)
    P_cf = np.stack([d[1] for d in data]).astype(np.float32)
    single = [cf.metrics.evaluate(P_obs[j], P_cf[j], y) for j in range(n_pred)]
    jitted = jax.jit(lambda a, b: cf.metrics.evaluate(a, b, y))(P_obs[0], P_cf[0])
    vmapped = jax.jit(jax.vmap(lambda a, b: cf.metrics.evaluate(a, b, y)))(P_obs, P_cf)
    many = cf.metrics.evaluate_many(P_obs, P_cf, y)
    vmapped_sweep = cf.metrics.evaluate_many(P_obs, P_cf, y, predictor_chunk=None)
    for name in FIELDS:
        stacked = np.stack([np.asarray(getattr(s, name)) for s in single])
        np.testing.assert_allclose(getattr(jitted, name), stacked[0], rtol=1e-6, err_msg=name)
        for batched in (vmapped, many, vmapped_sweep):
            np.testing.assert_allclose(getattr(batched, name), stacked, rtol=1e-5, atol=1e-6,
                                       err_msg=name)
    assert many.to_dict()["s_var"] == pytest.approx([float(s.s_var) for s in single], rel=1e-5)


def test_evaluate_many_pads_to_the_device_count(rng):
    # Three predictors over a one-device list and with batching: padding is invisible.
    p_obs, p_cf, y = predictor(rng)
    P_obs = np.stack([p_obs, p_obs[::-1], p_obs]).astype(np.float32)
    P_cf = np.stack([p_cf, p_cf[::-1], p_cf]).astype(np.float32)
    r = cf.metrics.evaluate_many(P_obs, P_cf, y, predictor_chunk=2, mesh=jax.devices()[:1])
    assert r.risk_cvar.shape == (3, 3)
    np.testing.assert_allclose(r.risk_ie[0], r.risk_ie[2], rtol=1e-6)


probabilities = hnp.arrays(
    np.float32, st.tuples(st.integers(2, 40), st.integers(1, 9)),
    elements=st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.5, 0.75, 0.9, 1.0]) | st.floats(0, 1, width=32))


# Each new (n, K) shape compiles evaluate again: 15 examples keep the suite's time in bounds.
@settings(max_examples=10)
@given(p_cf=probabilities, seed=st.integers(0, 2**31 - 1), alpha=st.floats(0.01, 1.0))
def test_property_risk_ordering_and_bounds(p_cf, seed, alpha):
    rng = np.random.default_rng(seed)
    n, k = p_cf.shape
    y = rng.integers(0, 2, n)
    q = rng.dirichlet(np.ones(k)).astype(np.float32)
    q = q / q.sum()
    r = cf.metrics.evaluate(p_cf[:, 0], p_cf, y, weights=q, alphas=(1.0, alpha, min(alpha, 0.05)))
    cv = np.asarray(r.risk_cvar)
    tol = 1e-4 * (1 + float(r.risk_wc))
    assert float(r.risk_cm) <= float(r.risk_ie) + tol
    assert cv[0] == pytest.approx(float(r.risk_ie), rel=1e-4, abs=1e-5)
    assert cv[0] <= cv[1] + tol and cv[1] <= cv[2] + tol
    assert cv[2] <= float(r.risk_wc) + tol
    assert 0 <= float(r.s_flip) <= 1 + 1e-6 and float(r.s_var) >= 0
    assert -1 - 1e-6 <= float(r.kendall_tau_b) <= 1 + 1e-6 or math.isnan(float(r.kendall_tau_b))


@settings(max_examples=10)
@given(p=hnp.arrays(np.float64, st.integers(2, 60),
                    elements=st.sampled_from([0.0, 0.2, 0.5, 0.8, 1.0])),
       seed=st.integers(0, 2**31 - 1))
def test_property_rank_statistics_match_scipy_under_heavy_ties(p, seed):
    rng = np.random.default_rng(seed)
    b = np.where(rng.uniform(size=p.shape) < 0.3, rng.permutation(p), p)
    with jax.enable_x64(True):
        rho = float(cf.metrics.spearman(p, b))
        tau = float(cf.metrics.kendall_tau_b(p, b))
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rho_ref = stats.spearmanr(p, b).statistic
            tau_ref = stats.kendalltau(p, b).statistic
    np.testing.assert_allclose(rho, rho_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(tau, tau_ref, rtol=1e-9, atol=1e-12)


def test_gradients_flow_through_the_risks(rng):
    # The risks are differentiable in the predictions (useful for training-time penalties).
    p_obs, p_cf, y = predictor(rng, ties=False)
    p_cf = jnp.asarray(p_cf, jnp.float32)
    grad = jax.grad(lambda p: cf.metrics.evaluate(p_obs.astype(np.float32), p, y).risk_ie)(p_cf)
    expected = jnp.where(y[:, None] == 1, -1 / p_cf, 1 / (1 - p_cf)) / p_cf.size
    np.testing.assert_allclose(grad, expected, rtol=1e-4)
