"""Smooth ECE and the smoothed reliability diagram against a direct numpy implementation
(tests/reference.py: the reflected kernel summed over units and mirror images, the midpoint
rule on 4000 cells, Brent's root of smECE_σ = σ), closed forms, invariants and validation.

Tolerances: cfjax spreads the scores linearly onto a grid of spacing h = 1/4096 and integrates
by the trapezoid rule; its relative error is about (h/σ)²/8, i.e. 2e-5 at σ = 0.02 and below
1e-6 for σ >= 0.1; the reference's midpoint rule adds (1/4000)²/(24 σ²) < 1e-5. Hence rtol
2e-4 at σ >= 0.02, with a margin of 10.
"""

import jax
import numpy as np
import pytest
from scipy import stats

import cfjax as cf
from tests import reference as ref


def miscalibrated(rng, n):
    """Scores with a reliability curve f^1.5 (over-confident for positives) and some ties."""
    f = rng.uniform(size=n)
    y = (rng.uniform(size=n) < f ** 1.5).astype(np.int32)
    f[: n // 10] = np.round(f[: n // 10], 1)  # ties, and mass at the endpoints 0 and 1
    return f, y


@pytest.mark.parametrize("sigma", [0.02, 0.1, 0.5])
def test_fixed_bandwidth_matches_the_direct_sum(rng, x64, sigma):
    f, y = miscalibrated(rng, 150)
    np.testing.assert_allclose(cf.metrics.smooth_ece(f, y, bandwidth=sigma),
                               ref.smooth_ece_at(f, y, sigma), rtol=2e-4)


def test_automatic_bandwidth_is_the_fixed_point_of_the_reference(rng, x64):
    f, y = miscalibrated(rng, 150)
    expected, sigma_ref = ref.smooth_ece(f, y, points=2000)  # σ* ~ 0.07: midpoint error 2e-6
    got = float(cf.metrics.smooth_ece(f, y))
    sigma = float(cf.metrics.smooth_calibration.smooth_ece_bandwidth(f, y))
    # smECE_σ − σ has slope <= −1, so the root moves by at most the function's error.
    np.testing.assert_allclose(got, expected, rtol=2e-4)
    np.testing.assert_allclose(sigma, sigma_ref, rtol=2e-4)
    assert got == pytest.approx(sigma, abs=2e-7)  # smECE_σ* = σ*, to the bisection's 6e-8


def test_float32_agrees_with_float64(rng):
    f, y = miscalibrated(rng, 2000)
    got32 = float(cf.metrics.smooth_ece(f.astype(np.float32), y))
    with jax.enable_x64(True):
        got64 = float(cf.metrics.smooth_ece(f, y))
    assert got32 == pytest.approx(got64, rel=1e-4)


def test_constant_scores_give_the_global_bias_at_every_bandwidth(rng):
    # r̂_σ(t) = (mean y − c) K_σ(t, c) and K integrates to 1: smECE_σ = |mean y − c| for all σ.
    c = float(rng.choice([0.0, 0.3, 1.0]))
    y = rng.integers(0, 2, 64)
    p = np.full(64, c, np.float32)
    bias = abs(y.mean() - c)
    for sigma in (0.01, 0.2, None):
        assert float(cf.metrics.smooth_ece(p, y, bandwidth=sigma)) == pytest.approx(bias, abs=1e-5)


def test_calibrated_to_the_resolution_gives_the_smallest_bandwidth():
    # Scores equal to the labels: no residual at all.
    y = np.array([0, 1, 1, 0, 1])
    assert float(cf.metrics.smooth_ece(y.astype(np.float32), y)) == 0.0
    assert float(cf.metrics.smooth_calibration.smooth_ece_bandwidth(y.astype(np.float32), y)) == pytest.approx(1e-3)


def test_smooth_ece_does_not_increase_with_the_bandwidth(rng):
    f, y = miscalibrated(rng, 300)
    f = f.astype(np.float32)
    values = [float(cf.metrics.smooth_ece(f, y, bandwidth=s)) for s in np.geomspace(0.002, 1, 12)]
    assert all(b <= a + 1e-6 for a, b in zip(values, values[1:])), values
    # The binned ECE is a comparable scale for well-populated bins (same order of magnitude).
    assert 0.3 < values[6] / float(cf.metrics.ece(f, y, n_bins=10)) < 3


def test_reliability_curve_matches_the_direct_smoother(rng, x64):
    # The kernel average of the labels (Σ K y / Σ K) and the density (1/n) Σ K with the kernel
    # reflected once (images f, −f and 2 − f), summed directly: equal to rounding. Against the
    # fully reflected kernel (images ±f + 2k) they differ by the images left out, each at least
    # 1 from any t in [0, 1]: at most 4 φ(1/σ)/σ per unit (φ the standard normal density),
    # about 1e-44 at σ* ~ 0.07, 2e-9 at σ* ~ 0.16 (CFJAX_TEST_SEED=930030375).
    f, y = miscalibrated(rng, 200)
    t = np.linspace(0, 1, 23)
    c = cf.metrics.reliability_curve(f, y, grid=t)
    sigma = float(c.bandwidth)
    assert sigma == pytest.approx(float(cf.metrics.smooth_calibration.smooth_ece_bandwidth(f, y)))
    assert float(c.smooth_ece) == pytest.approx(float(cf.metrics.smooth_ece(f, y)), rel=1e-12)
    once = sum(stats.norm.pdf(t[:, None], image[None, :], sigma) for image in (f, -f, 2 - f))
    np.testing.assert_allclose(c.density, once.mean(axis=1), rtol=1e-9)
    np.testing.assert_allclose(c.mean_label, once @ y / once.sum(axis=1), rtol=1e-9, atol=1e-12)
    kern = ref.reflected_kernel(t, f, sigma)
    left_out = 4 * stats.norm.pdf(1 / sigma) / sigma
    np.testing.assert_allclose(c.density, kern.mean(axis=1), rtol=1e-9, atol=left_out)
    np.testing.assert_allclose(c.mean_label, kern @ y / kern.sum(axis=1), rtol=1e-9,
                               atol=1e-12 + left_out / kern.mean(axis=1).min())
    np.testing.assert_allclose(c.t, t)


def test_reliability_curve_integrates_to_one_and_to_the_mean_label(rng):
    # ∫ δ̂ = 1 and ∫ δ̂ μ = (1/n) Σ y_i ∫ K(t, f_i) dt = mean y: the diagram weighted by the
    # density of the scores averages to the base rate.
    f, y = miscalibrated(rng, 500)
    c = cf.metrics.reliability_curve(f.astype(np.float32), y, grid=4097)
    t, dens, mu = (np.asarray(v, np.float64) for v in (c.t, c.density, c.mean_label))
    assert np.trapezoid(dens, t) == pytest.approx(1.0, abs=1e-4)
    assert np.trapezoid(dens * mu, t) == pytest.approx(y.mean(), abs=1e-4)
    assert mu.min() >= 0 and mu.max() <= 1


def test_vmap_over_predictors_and_report_fields(rng):
    f, y = miscalibrated(rng, 100)
    P = np.stack([f, f ** 2, np.sqrt(f)]).astype(np.float32)
    batched = jax.vmap(lambda p: cf.metrics.smooth_ece(p, y))(P)
    single = [float(cf.metrics.smooth_ece(p, y)) for p in P]
    np.testing.assert_allclose(batched, single, rtol=1e-6)
    p_cf = np.stack([P[1], P[2]], axis=1)
    r = cf.metrics.evaluate(P[0], p_cf, y)
    assert float(r.smece_orig) == pytest.approx(single[0], rel=1e-6)
    p_bar = p_cf.mean(axis=1)
    assert float(r.smece_cm) == pytest.approx(float(cf.metrics.smooth_ece(p_bar, y)), rel=1e-5)


def test_expected_labels_match_the_reference_and_the_counterfactual_label_report(rng, x64):
    """Labels given as probabilities (a unit's label averaged over its counterfactuals): the
    same smoothing of y − f, against the direct sum; the report's smece_cm with y_cf is the
    smooth ECE of p_bar against ȳ = Σ_k q_k y_cf[:, k]."""
    n, k = 150, 4
    f = rng.uniform(size=n)
    y_cf = (rng.uniform(size=(n, k)) < f[:, None] ** 1.5).astype(np.int32)
    q = rng.dirichlet(np.ones(k))
    y_bar = np.clip(y_cf @ q, 0, 1)  # a sum of weights may round above 1
    expected, sigma_ref = ref.smooth_ece(f, y_bar, points=2000)
    np.testing.assert_allclose(cf.metrics.smooth_ece(f, y_bar), expected, rtol=2e-4)
    np.testing.assert_allclose(cf.metrics.smooth_calibration.smooth_ece_bandwidth(f, y_bar), sigma_ref, rtol=2e-4)
    curve = cf.metrics.reliability_curve(f, y_bar, grid=11)
    assert float(curve.smooth_ece) == pytest.approx(float(cf.metrics.smooth_ece(f, y_bar)), rel=1e-9)
    p_cf = np.clip(f[:, None] + rng.normal(0, 0.05, (n, k)), 0, 1)
    r = cf.metrics.evaluate(p_cf[:, 0], p_cf, y_cf[:, 0], y_cf=y_cf, weights=q)
    assert float(r.smece_cm) == pytest.approx(float(cf.metrics.smooth_ece(p_cf @ q, y_bar)), rel=1e-6)


@pytest.mark.parametrize("call, name", [
    (lambda: cf.metrics.smooth_ece(np.array([0.2, 1.2]), np.array([0, 1])), "p"),
    (lambda: cf.metrics.smooth_ece(np.array([[0.2, 0.3]]), np.array([0, 1])), "p"),
    (lambda: cf.metrics.smooth_ece(np.array([0.2, 0.3]), np.array([0, 2])), "y"),
    (lambda: cf.metrics.smooth_ece(np.array([0.2, 0.3]), np.array([0, 1, 1])), "y"),
    (lambda: cf.metrics.smooth_ece(np.array([0.2, 0.3]), np.array([0.5, 1.5])), "y"),
    (lambda: cf.metrics.reliability_curve(np.array([0.2, 0.3]), np.array([0.5, np.nan])), "y"),
    (lambda: cf.metrics.smooth_ece(np.array([0.2, 0.3]), np.array([0, 1]), bandwidth=0.0),
     "bandwidth"),
    (lambda: cf.metrics.smooth_calibration.smooth_ece_bandwidth(np.array([np.nan, 0.3]), np.array([0, 1])), "p"),
    (lambda: cf.metrics.reliability_curve(np.array([0.2, 0.3]), np.array([0, 1]), grid=1), "grid"),
    (lambda: cf.metrics.reliability_curve(np.array([0.2, 0.3]), np.array([0, 1]),
                                          grid=np.array([0.5, 1.5])), "grid"),
    (lambda: cf.metrics.reliability_curve(np.array([0.2, 0.3]), np.array([0, 1]),
                                          bandwidth=-1.0), "bandwidth"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(cf.ValidationError, match=f"`{name}`"):
        call()
