"""Rank statistics and AUC against scipy, scikit-learn and O(n²) loops, ties included."""

import jax
import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

import cfjax as cf
from tests import reference as ref


def scores(rng, n, levels=None):
    x = rng.normal(size=n)
    if levels:
        x = np.round(x * levels) / levels  # heavy ties
    return x


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
@pytest.mark.parametrize("n", [1, 2, 3, 17, 64, 1000, 5003])
@pytest.mark.parametrize("levels", [None, 3])
def test_spearman_kendall_rankdata_match_scipy(rng, x64, n, levels):
    a = scores(rng, n, levels)
    b = a + scores(rng, n, levels) * 0.8
    np.testing.assert_array_equal(cf.metrics.ranking.rankdata(a), stats.rankdata(a))
    if n < 2:
        return
    rho = stats.spearmanr(a, b).statistic
    tau = stats.kendalltau(a, b).statistic
    np.testing.assert_allclose(cf.metrics.spearman(a, b), rho, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(cf.metrics.kendall_tau_b(a, b), tau, rtol=1e-10, atol=1e-12)


def test_kendall_matches_pair_loop(rng, x64):
    for _ in range(10):
        n = int(rng.integers(2, 80))
        a, b = scores(rng, n, 2), scores(rng, n, 2)
        expected = ref.kendall_tau_b(a, b)
        got = float(cf.metrics.kendall_tau_b(a, b))
        if np.isnan(expected):
            assert np.isnan(got)
        else:
            assert got == pytest.approx(expected, rel=1e-10, abs=1e-12)


def test_kendall_float32_large_n_with_ties_and_two_key_sort(rng):
    # n above 46,340 takes the two-key sort path when 64-bit integers are off.
    n = 50_000
    a = np.round(rng.uniform(size=n), 3).astype(np.float32)
    b = np.clip(a + 0.1 * rng.normal(size=n), 0, 1).astype(np.float32)
    np.testing.assert_allclose(cf.metrics.kendall_tau_b(a, b), stats.kendalltau(a, b).statistic,
                               atol=2e-6)
    np.testing.assert_allclose(cf.metrics.spearman(a, b), stats.spearmanr(a, b).statistic,
                               atol=2e-6)


def test_constant_input_gives_nan_like_scipy():
    a = np.ones(10)
    b = np.arange(10.0)
    assert np.isnan(float(cf.metrics.spearman(a, b)))
    assert np.isnan(float(cf.metrics.kendall_tau_b(a, b)))


def test_rank_change_matches_loop(rng, x64):
    a, b = scores(rng, 50, 2), scores(rng, 50, 2)
    expected = np.mean(np.abs(ref.average_ranks(a) - ref.average_ranks(b)))
    assert float(cf.metrics.rank_change(a, b)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("levels", [None, 4])
def test_auc_matches_sklearn(rng, x64, levels):
    y = rng.integers(0, 2, 500)
    p = scores(rng, 500, levels) + y * 0.7
    assert float(cf.metrics.auc(p, y)) == pytest.approx(roc_auc_score(y, p), rel=1e-12)


def test_rank_metrics_jit_and_vmap_agree(rng):
    a = rng.uniform(size=(4, 300)).astype(np.float32)
    b = np.round(a + 0.2 * rng.uniform(size=(4, 300)), 2).astype(np.float32)
    batched = jax.jit(jax.vmap(cf.metrics.kendall_tau_b))(a, b)
    batched_rho = jax.vmap(cf.metrics.spearman)(a, b)
    for j in range(4):
        assert float(batched[j]) == pytest.approx(stats.kendalltau(a[j], b[j]).statistic, abs=1e-6)
        assert float(batched_rho[j]) == pytest.approx(stats.spearmanr(a[j], b[j]).statistic, abs=1e-6)
