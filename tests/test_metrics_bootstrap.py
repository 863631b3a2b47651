"""Bootstrap intervals of the report: a numpy loop over the same resample indices, the
independent reference report and ``np.percentile``; chunking, vmap over predictors, label-free
use and validation."""

import math

import jax
import numpy as np
import pytest

import cfjax as cf
from tests import reference as ref

LEVEL = 0.9


def predictor(rng, n, k, ties=True):
    y = rng.integers(0, 2, n)
    logits = rng.normal(size=(n, 1)) + y[:, None] + 0.5 * rng.normal(size=(n, k))
    p_cf = 1 / (1 + np.exp(-logits))
    p_obs = 1 / (1 + np.exp(-(logits[:, 0] + 0.3 * rng.normal(size=n))))
    if ties:
        p_cf, p_obs = np.round(p_cf, 2), np.round(p_obs, 2)
    return p_obs, p_cf, y


def fields(report):
    return {f: np.asarray(getattr(report, f))
            for f in report.__dataclass_fields__ if f != "alphas"}


def cf_smece(f, y):
    # The reference smooth ECE (a root search over direct sums) costs about a second per
    # call; the bootstrap loop takes cfjax's, which tests/test_metrics_smooth_ece.py checks
    # against it (and the first resamples are checked against it below).
    return float(cf.metrics.smooth_ece(f, y))


def expected_bounds(p_obs, p_cf, y, q, idx, **options):
    """The numpy loop: the reference report of every resample, then np.percentile."""
    reps = [ref.report(p_obs[i], p_cf[i], None if y is None else y[i], q, smece=cf_smece,
                       **options) for i in idx]
    stacked = {f: np.stack([np.asarray(r[f], dtype=np.float64) for r in reps]) for f in reps[0]}
    lo, hi = 50 * (1 - LEVEL), 50 * (1 + LEVEL)
    with np.errstate(invalid="ignore"):
        low = {f: np.percentile(v, lo, axis=0) for f, v in stacked.items()}
        high = {f: np.percentile(v, hi, axis=0) for f, v in stacked.items()}
    return stacked, low, high


def test_intervals_match_a_numpy_loop_over_the_same_resamples(rng, x64):
    n, k, b = 40, 4, 30
    p_obs, p_cf, y = predictor(rng, n, k)
    q = rng.dirichlet(np.ones(k))
    options = dict(tau=0.4, alphas=(0.5, 0.2), n_bins=10)
    key = jax.random.key(int(rng.integers(2**31)))
    r = cf.metrics.evaluate_bootstrap(p_obs, p_cf, y, key=key, resamples=b, level=LEVEL,
                                      weights=q, **options)
    idx = np.asarray(cf.metrics.bootstrap_indices(n, b, key=key))
    assert idx.shape == (b, n) and idx.min() >= 0 and idx.max() < n
    stacked, low, high = expected_bounds(p_obs, p_cf, y, q, idx, **options)
    full = ref.report(p_obs, p_cf, y, q, smece=cf_smece, **options)
    got_est, got_low, got_high = fields(r.estimate), fields(r.low), fields(r.high)
    got_reps = fields(r.replicates)
    assert set(got_low) == set(low)
    for f in low:
        tol = dict(rtol=1e-9, atol=1e-12, err_msg=f)
        np.testing.assert_allclose(got_est[f], full[f], **tol)
        np.testing.assert_allclose(got_reps[f], stacked[f], **tol)
        np.testing.assert_allclose(got_low[f], low[f], **tol)
        np.testing.assert_allclose(got_high[f], high[f], **tol)
    for b in range(2):  # rtol: the grid's discretisation error, see test_metrics_smooth_ece
        smece_ref = ref.smooth_ece(p_obs[idx[b]], y[idx[b]])[0]
        np.testing.assert_allclose(got_reps["smece_orig"][b], smece_ref, rtol=1e-4)
    high_cvar = dict(zip((0.5, 0.2), high["risk_cvar"]))
    assert r.to_dict()["high"]["risk_cvar"] == pytest.approx(high_cvar)


def test_a_nan_replicate_gives_nan_bounds_like_numpy(x64):
    # Two units: resamples drawing one unit twice have constant scores, so their rank
    # correlations are NaN, and np.percentile propagates NaN.
    p_obs = np.array([0.2, 0.7])
    p_cf = np.array([[0.3, 0.1], [0.6, 0.9]])
    y = np.array([0, 1])
    q = np.full(2, 0.5)
    r = cf.metrics.evaluate_bootstrap(p_obs, p_cf, y, key=3, resamples=20, level=LEVEL)
    idx = np.asarray(cf.metrics.bootstrap_indices(2, 20, key=3))
    assert any(len(set(row)) == 1 for row in idx)
    _, low, high = expected_bounds(p_obs, p_cf, y, q, idx)
    assert math.isnan(float(r.low.spearman)) and math.isnan(low["spearman"])
    np.testing.assert_allclose(float(r.high.risk_orig), high["risk_orig"], rtol=1e-12)


def test_chunking_does_not_change_the_resamples(rng, monkeypatch):
    # Chunks of 4 and one vmap over all resamples; the default (one at a
    # time on CPU) is checked against the reference above.
    p_obs, p_cf, y = predictor(rng, 50, 6)
    p_obs, p_cf = p_obs.astype(np.float32), p_cf.astype(np.float32)
    idx = np.asarray(cf.metrics.bootstrap_indices(50, 12, key=7))
    direct = [fields(cf.metrics.evaluate(p_obs[i], p_cf[i], y[i])) for i in idx]
    for bs in (4, None):
        monkeypatch.setattr(cf.platform, "default_resample_batch", lambda *_, bs=bs: bs)
        run = cf.metrics.evaluate_bootstrap(p_obs, p_cf, y, key=7, resamples=12)
        for f, v in fields(run.replicates).items():
            np.testing.assert_allclose(v, np.stack([d[f] for d in direct]), rtol=1e-5,
                                       atol=1e-6, err_msg=f"resample_chunk={bs} {f}")


def test_the_removed_keywords_warn_and_keep_working():
    p_cf = np.linspace(0.1, 0.9, 40, dtype=np.float32).reshape(10, 4)
    y = np.arange(10) % 2
    new = cf.metrics.evaluate_bootstrap(p_cf[:, 0], p_cf, y, key=1, resamples=5)
    with pytest.warns(DeprecationWarning, match="replicates are always returned"):
        old = cf.metrics.evaluate_bootstrap(p_cf[:, 0], p_cf, y, key=1, resamples=5, return_replicates=True)
    with pytest.warns(DeprecationWarning, match="default_resample_batch"):
        chunked = cf.metrics.evaluate_bootstrap(p_cf[:, 0], p_cf, y, key=1, resamples=5, resample_chunk=None)
    for other in (old, chunked):
        np.testing.assert_allclose(other.replicates.risk_cm, new.replicates.risk_cm, rtol=1e-6)
    with pytest.raises(TypeError, match="resample_size"):
        cf.metrics.evaluate_bootstrap(p_cf[:, 0], p_cf, y, key=1, resample_size=3)


def test_label_free_bounds_equal_the_labelled_ones_and_label_fields_are_nan(rng):
    p_obs, p_cf, y = predictor(rng, 60, 5)
    p_obs, p_cf = p_obs.astype(np.float32), p_cf.astype(np.float32)
    with_y = cf.metrics.evaluate_bootstrap(p_obs, p_cf, y, key=1, resamples=25)
    without = cf.metrics.evaluate_bootstrap(p_obs, p_cf, key=1, resamples=25)
    for part in ("low", "high", "estimate"):
        a, b = fields(getattr(with_y, part)), fields(getattr(without, part))
        for f in a:
            if f in cf.metrics.report.LABEL_FIELDS:
                assert np.isnan(b[f]).all(), (part, f)
            else:
                np.testing.assert_array_equal(a[f], b[f], err_msg=f"{part} {f}")


def test_vmap_over_predictors_is_a_paired_bootstrap(rng):
    data = [predictor(rng, 40, 4) for _ in range(3)]
    y = data[0][2]
    P_obs = np.stack([d[0] for d in data]).astype(np.float32)
    P_cf = np.stack([d[1] for d in data]).astype(np.float32)
    key = jax.random.key(5)

    def run(po, pc):
        return cf.metrics.evaluate_bootstrap(po, pc, y, key=key, resamples=20)

    batched = jax.jit(jax.vmap(run))(P_obs, P_cf)
    for j in range(3):
        single = run(P_obs[j], P_cf[j])
        for part in ("estimate", "low", "high"):
            for f, v in fields(getattr(single, part)).items():
                np.testing.assert_allclose(fields(getattr(batched, part))[f][j], v, rtol=1e-5,
                                           atol=1e-6, err_msg=f"{part} {f}")


def test_interval_of_a_mean_matches_normal_theory(rng):
    # risk_orig is a mean of per-unit losses: its percentile interval brackets the estimate
    # and its width is close to the normal one, 2 z sd(loss) / sqrt(n) (300 resamples: the
    # width's Monte Carlo error is a few percent).
    n = 400
    p_obs, p_cf, y = predictor(rng, n, 2, ties=False)
    p_obs = p_obs.astype(np.float32)
    r = cf.metrics.evaluate_bootstrap(p_obs, p_cf.astype(np.float32), y,
                                      key=int(rng.integers(2**31)), resamples=300, level=LEVEL)
    assert float(r.low.risk_orig) <= float(r.estimate.risk_orig) <= float(r.high.risk_orig)
    loss = np.array([ref.bce(p, t) for p, t in zip(p_obs, y)])
    normal = 2 * 1.6449 * loss.std() / np.sqrt(n)
    assert float(r.high.risk_orig - r.low.risk_orig) == pytest.approx(normal, rel=0.2)


@pytest.mark.parametrize("kwargs, name", [
    (dict(key=None), "key"),
    (dict(key=np.zeros(3, np.uint32)), "key"),
    (dict(key=0, resamples=0), "resamples"),
    (dict(key=0, level=1.0), "level"),
    (dict(key=0, level="0.9"), "level"),
    (dict(key=0, weights=np.ones(3)), "weights"),
    (dict(key=0, n_bins=0), "n_bins"),
])
def test_bad_options_name_the_argument(kwargs, name):
    p_cf = np.full((4, 2), 0.5, np.float32)
    with pytest.raises(cf.ValidationError, match=f"`{name}`"):
        cf.metrics.evaluate_bootstrap(p_cf[:, 0], p_cf, np.array([0, 1, 0, 1]), **kwargs)


@pytest.mark.parametrize("args, name", [
    ((np.full(4, 0.5, np.float32), np.full((4,), 0.5, np.float32)), "p_cf"),
    ((np.full(4, 1.5, np.float32), np.full((4, 2), 0.5, np.float32)), "p_obs"),
    ((np.full(3, 0.5, np.float32), np.full((4, 2), 0.5, np.float32)), "p_cf"),
])
def test_bad_inputs_name_the_argument(args, name):
    with pytest.raises(cf.ValidationError, match=f"`{name}`"):
        cf.metrics.evaluate_bootstrap(*args, key=0)
    with pytest.raises(cf.ValidationError, match="`n`"):
        cf.metrics.bootstrap_indices(0, 3, key=0)
