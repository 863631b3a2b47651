"""evaluate_chunks: the report of predictions given chunk by chunk equals the independent
reference on all units, for any chunking, with or without labels, with counterfactual labels,
for binary scores and class probabilities;
bad chunks name what is wrong. (Several devices: tests/test_distributed.py.)"""

import math

import numpy as np
import pytest

import cfjax as cf
from tests import reference as ref
from tests.test_metrics_report import FIELDS, predictor


def cut(rng, n):
    """Random chunk boundaries of ``n`` units (lengths 1..n/2, the first one longest or not)."""
    edges = np.sort(rng.choice(np.arange(1, n), size=rng.integers(1, 6), replace=False))
    return [0, *edges.tolist(), n]


def chunks_of(bounds, *arrays):
    return [tuple(None if a is None else a[s:e] for a in arrays) for s, e in zip(bounds[:-1], bounds[1:])]


def assert_same(report, expected, rtol, atol, fields=FIELDS):
    for name in fields:
        a, b = np.asarray(getattr(report, name)), np.asarray(expected[name] if isinstance(expected, dict)
                                                            else getattr(expected, name))
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=name)


def test_chunks_match_the_independent_reference(rng, x64):
    p_obs, p_cf, y = predictor(rng, n=int(rng.integers(120, 300)))
    q = rng.dirichlet(np.ones(p_cf.shape[1]))
    alphas, tau, n_bins = (0.5, 0.2), 0.4, 10
    bounds = cut(rng, len(y))
    r = cf.metrics.evaluate_chunks(iter(chunks_of(bounds, p_obs, p_cf, y)), weights=q, tau=tau,
                                   alphas=alphas, n_bins=n_bins)
    whole = cf.metrics.evaluate(p_obs, p_cf, y, weights=q, tau=tau, alphas=alphas, n_bins=n_bins)
    expected = ref.report(p_obs, p_cf, y, q, tau, alphas, n_bins,
                          smece=lambda f, t: math.nan)
    no_smece = [f for f in FIELDS if not f.startswith("smece")]
    assert_same(r, expected, rtol=1e-9, atol=1e-12, fields=no_smece)
    # The smooth ECE is computed from the same (n,) vectors as in memory.
    assert_same(r, whole, rtol=1e-12, atol=1e-14, fields=["smece_orig", "smece_cm"])


def test_label_free_and_uniform_float32_chunks_equal_evaluate(rng):
    p_obs, p_cf, _ = predictor(rng, n=int(rng.integers(100, 250)), ties=False)
    p_obs, p_cf = p_obs.astype(np.float32), p_cf.astype(np.float32)
    r = cf.metrics.evaluate_chunks(chunks_of(cut(rng, len(p_obs)), p_obs, p_cf))
    whole = cf.metrics.evaluate(p_obs, p_cf)
    assert_same(r, whole, rtol=2e-5, atol=2e-6)
    assert all(math.isnan(float(getattr(r, f))) for f in cf.metrics.report.LABEL_FIELDS if f != "risk_cvar")


def test_counterfactual_labels_in_chunks(rng, x64):
    p_obs, p_cf, y = predictor(rng, n=150)
    y_cf = np.where(rng.uniform(size=p_cf.shape) < 0.2, 1 - y[:, None], y[:, None])
    bounds = cut(rng, len(y))
    r = cf.metrics.evaluate_chunks([dict(p_obs=a, p_cf=b, y=c, y_cf=d)
                                    for a, b, c, d in chunks_of(bounds, p_obs, p_cf, y, y_cf)])
    whole = cf.metrics.evaluate(p_obs, p_cf, y, y_cf=y_cf)
    assert r.labels == "counterfactual" and type(r) is type(whole)
    assert_same(r, whole, rtol=1e-12, atol=1e-14)
    # Independent check of the fields the counterfactual labels change.
    picked = np.clip(np.where(y_cf == 1, p_cf, 1 - p_cf), 1e-7, 1 - 1e-7)  # scores rounded to 0 or 1 occur
    losses = -np.log(picked)
    np.testing.assert_allclose(r.risk_ie, losses.mean(), rtol=1e-10)
    np.testing.assert_allclose(r.risk_wc, losses.max(axis=1).mean(), rtol=1e-10)


def test_evaluate_with_a_one_device_mesh_is_evaluate(rng):
    p_obs, p_cf, y = predictor(rng, n=97)
    p_obs, p_cf = p_obs.astype(np.float32), p_cf.astype(np.float32)
    mesh = cf.distributed.mesh(1)
    assert_same(cf.metrics.evaluate(p_obs, p_cf, y, mesh=mesh), cf.metrics.evaluate(p_obs, p_cf, y),
                rtol=2e-6, atol=1e-7)


def test_bad_chunks_are_named(rng):
    p_obs, p_cf, y = predictor(rng, n=40)
    p_obs, p_cf = p_obs.astype(np.float32), p_cf.astype(np.float32)
    with pytest.raises(ValueError, match=r"`chunks`: expected at least one chunk"):
        cf.metrics.evaluate_chunks([])
    with pytest.raises(ValueError, match=r"`chunks\[1\]\.p_cf`: expected 16 counterfactuals"):
        cf.metrics.evaluate_chunks([(p_obs[:20], p_cf[:20], y[:20]), (p_obs[20:], p_cf[20:, :8], y[20:])])
    with pytest.raises(ValueError, match=r"`chunks\[1\]\.y`: expected an array, as in the first chunk"):
        cf.metrics.evaluate_chunks([(p_obs[:20], p_cf[:20], y[:20]), (p_obs[20:], p_cf[20:])])
    with pytest.raises(ValueError, match=r"`chunks\[0\]`: expected a tuple"):
        cf.metrics.evaluate_chunks([p_obs])
    with pytest.raises(ValueError, match=r"`chunks\[0\]\.p_cf`: expected probabilities in \[0, 1\]"):
        cf.metrics.evaluate_chunks([(p_obs, p_cf * 2, y)])
    p = rng.dirichlet(np.ones(3), (40, 16)).astype(np.float32)
    with pytest.raises(ValueError, match=r"`chunks\[1\]\.p_obs`: expected 3 classes, as in the first chunk"):
        two = rng.dirichlet(np.ones(2), (20, 16)).astype(np.float32)
        cf.metrics.evaluate_chunks([(p[:20, 0], p[:20]), (two[:, 0], two)])
    with pytest.raises(ValueError, match=r"`chunks\[1\]\.p_obs`: expected 3 classes"):
        cf.metrics.evaluate_chunks([(p[:20, 0], p[:20], y[:20]), (p_obs[20:], p_cf[20:], y[20:])])
    with pytest.raises(ValueError, match=r"`chunks\[0\]\.y`: expected integer labels|`chunks\[0\]\.y`"):
        cf.metrics.evaluate_chunks([(p[:, 0], p, y + 3)])
    with pytest.raises(ValueError, match=r"`tau`"):
        cf.metrics.evaluate_chunks([(p[:, 0], p)], tau=0.3)


def test_class_probabilities_in_chunks_match_the_loops(rng, x64):
    """Class probabilities (C = 4), invariant and counterfactual labels, random chunkings:
    every field against the explicit loops of tests/test_metrics_multiclass_evaluate.py."""
    from tests.test_metrics_multiclass_evaluate import classes, loops, stability_loops

    n, k, c = int(rng.integers(40, 70)), 5, 4
    p_obs, p_cf, y = classes(rng, n, k, c)
    q = rng.dirichlet(np.ones(k))
    alphas, n_bins = (0.5, 0.2), 10
    y_cf = np.where(rng.uniform(size=(n, k)) < 0.2, rng.integers(0, c, (n, k)), y[:, None])
    for labels in (None, y_cf):
        bounds = cut(rng, n)
        r = cf.metrics.evaluate_chunks(chunks_of(bounds, p_obs, p_cf, y, labels), weights=q, alphas=alphas,
                                       n_bins=n_bins)
        assert isinstance(r, cf.metrics.MulticlassReport) and r.classes == c
        assert r.labels == ("invariant" if labels is None else "counterfactual")
        expected, conf, correct = loops(p_obs, p_cf, y, q, alphas, n_bins, y_cf=labels)
        expected.update(stability_loops(p_obs, p_cf, q))
        for name, value in expected.items():
            np.testing.assert_allclose(getattr(r, name), value, rtol=1e-9, atol=1e-12, err_msg=name)
        for part in ("orig", "cm"):  # top-label smooth ECE of the loops' confidences
            np.testing.assert_allclose(getattr(r, f"smece_{part}"),
                                       cf.metrics.smooth_ece(np.asarray(conf[part]), np.clip(correct[part], 0, 1)),
                                       rtol=1e-9, atol=1e-12)
