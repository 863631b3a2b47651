"""Stratified AUC / ΔAUC, subgroup-mean estimators and the correct transition count."""

import jax
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

import cfjax as cf
from tests import reference as ref


def test_stratified_and_delta_auc_match_sklearn_per_stratum(rng, x64):
    n = 600
    groups = rng.choice(np.array(["<45", "45-65", ">65"]), size=n)
    y = rng.integers(0, 2, n)
    p = np.round(rng.normal(size=n) + y * (1 + (groups == ">65")), 1)
    labels = np.unique(groups)
    expected = [roc_auc_score(y[groups == g], p[groups == g]) for g in labels]
    np.testing.assert_allclose(cf.metrics.stratified_auc(p, y, groups), expected, rtol=1e-12)
    assert float(cf.metrics.delta_auc(p, y, groups)) == pytest.approx(max(expected) - min(expected))


def test_delta_auc_under_jit_needs_codes_and_count(rng):
    n = 300
    codes = rng.integers(0, 2, n).astype(np.int32)
    y = rng.integers(0, 2, n)
    p = rng.uniform(size=n).astype(np.float32)
    eager = cf.metrics.delta_auc(p, y, codes)
    jitted = jax.jit(lambda p, c: cf.metrics.delta_auc(p, y, c, num_groups=2))(p, codes)
    assert float(jitted) == pytest.approx(float(eager), abs=1e-6)
    with pytest.raises(ValueError, match="num_groups"):
        jax.jit(lambda p, c: cf.metrics.delta_auc(p, y, c))(p, codes)


def test_stratum_without_both_classes_is_rejected(rng):
    y = np.array([0, 1, 0, 0])
    with pytest.raises(ValueError, match="stratum 1"):
        cf.metrics.delta_auc(np.linspace(0, 1, 4, dtype=np.float32), y, np.array([0, 0, 1, 1]))


def test_subgroup_means_match_numpy(rng, x64):
    n, z = 500, 3
    a = rng.integers(0, z, n)
    p_do = rng.uniform(size=(n, z))
    p_obs = p_do[np.arange(n), a]
    r = cf.metrics.subgroup_means(p_obs, a, p_do)
    for v in range(z):
        members = p_obs[a == v]
        assert float(r.obs_mean[v]) == pytest.approx(members.mean())
        assert float(r.obs_se[v]) == pytest.approx(members.std(ddof=1) / np.sqrt(len(members)))
        assert float(r.obs_count[v]) == len(members)
        assert float(r.cf_mean[v]) == pytest.approx(p_do[:, v].mean())
        assert float(r.cf_se[v]) == pytest.approx(p_do[:, v].std(ddof=1) / np.sqrt(n))


def test_counterfactual_estimator_has_smaller_variance_across_draws(rng):
    # Proposition 1: over repeated samples the CF estimator of E[g | do(A=z)] varies less.
    obs, cfm = [], []
    for _ in range(200):
        n = 200
        a = rng.integers(0, 2, n)
        u = rng.normal(size=n)
        p_do = 1 / (1 + np.exp(-(u[:, None] + np.array([0.0, 0.5])[None, :])))
        p_obs = p_do[np.arange(n), a]
        r = cf.metrics.subgroup_means(p_obs.astype(np.float32), a, p_do.astype(np.float32))
        obs.append(float(r.obs_mean[1]))
        cfm.append(float(r.cf_mean[1]))
    assert np.var(cfm) < 0.75 * np.var(obs)


def test_correct_transition_count_matches_loop(rng):
    values = rng.normal(size=(3, 10))
    chains = [(0, 1, 2, 3), (0, 4, 5, 6), (0, 7, 8, 9)]
    for increasing in (True, False):
        expected = ref.correct_transitions(values, chains, increasing)
        got = float(cf.metrics.correct_transition_count(values, chains, increasing=increasing))
        assert got == pytest.approx(expected)
    assert float(cf.metrics.correct_transition_count(np.arange(10.0), chains)) == 9
    assert len(cf.study.families.PAPER_CHAINS) == 3


def test_correct_transition_count_rejects_bad_chains():
    with pytest.raises(ValueError, match="chains"):
        cf.metrics.correct_transition_count(np.zeros(4), [(0, 7)])
    with pytest.raises(ValueError, match="chains"):
        cf.metrics.correct_transition_count(np.zeros(4), [(0,)])
