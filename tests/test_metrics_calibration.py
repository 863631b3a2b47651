"""Brier, ECE and MCE against scikit-learn and bin-by-bin loops."""

import numpy as np
import pytest
from sklearn.metrics import brier_score_loss

import cfjax as cf
from tests import reference as ref


@pytest.mark.parametrize("n_bins", [1, 2, 10, 15])
def test_ece_mce_match_bin_loops(rng, n_bins):
    n = 400
    # Include values exactly on bin edges and at both ends of [0, 1].
    p = rng.uniform(size=n).astype(np.float32)
    edges = (np.arange(n_bins + 1, dtype=np.float32) / np.float32(n_bins)).astype(np.float32)
    p[: n_bins + 1] = edges
    y = rng.integers(0, 2, n)
    ece, mce = ref.calibration(p, y, n_bins)
    assert float(cf.metrics.ece(p, y, n_bins)) == pytest.approx(ece, abs=2e-6)
    assert float(cf.metrics.mce(p, y, n_bins)) == pytest.approx(mce, abs=2e-6)


def test_brier_matches_sklearn(rng, x64):
    p = rng.uniform(size=300)
    y = rng.integers(0, 2, 300)
    assert float(cf.metrics.brier(p, y)) == pytest.approx(brier_score_loss(y, p), rel=1e-12)


def test_calibration_bins_count_every_unit(rng):
    p = rng.uniform(size=1000).astype(np.float32)
    p[:3] = [0.0, 1.0, 0.5]
    y = rng.integers(0, 2, 1000)
    count, sum_p, sum_y = cf.metrics.calibration.calibration_bins(p, y, 7)
    assert float(count.sum()) == 1000
    assert float(sum_y.sum()) == pytest.approx(y.sum())
    assert float(sum_p.sum()) == pytest.approx(float(p.sum()), rel=1e-5)


def test_perfectly_calibrated_scores_have_zero_ece():
    p = np.repeat(np.array([0.1, 0.5, 0.9], np.float32), 10)
    y = np.concatenate([np.eye(10)[0], np.arange(10) < 5, np.arange(10) < 9]).astype(int)
    assert float(cf.metrics.ece(p, y, 10)) == pytest.approx(0.0, abs=1e-6)
    assert float(cf.metrics.mce(p, y, 10)) == pytest.approx(0.0, abs=1e-6)
