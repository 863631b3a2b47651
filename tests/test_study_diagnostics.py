"""The study's check of each setting's basic classifier (cfjax.study.diagnostics) and the AUC's
bootstrap interval it rests on: the interval against scikit-learn's AUC on the same resamples,
the warning on a constructed near-chance classifier and one far below its validation AUC, and
none on a good one."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from cfjax import metrics as cm
from cfjax import study
from cfjax.study import diagnostics as D


def _reference_interval(p_obs: np.ndarray, y: np.ndarray, key: jax.Array, resamples: int) -> np.ndarray:
    """A loop over resamples, predictors and seeds with scikit-learn's AUC."""
    idx = np.asarray(cm.bootstrap_indices(len(y), resamples, key=key))
    n_pred, n_seeds, _ = p_obs.shape
    means = np.array([[np.mean([roc_auc_score(y[i], p_obs[p, s, i]) for s in range(n_seeds)])
                       for p in range(n_pred)] for i in idx])
    return np.stack([np.percentile(means, 2.5, axis=0), np.percentile(means, 97.5, axis=0)], axis=-1)


def _scores(rng: np.random.Generator, y: np.ndarray, strength: float, n_pred: int = 1, n_seeds: int = 2) -> np.ndarray:
    """Scores whose AUC grows with ``strength`` (0: independent of the labels, chance)."""
    return (strength * y + rng.normal(size=(n_pred, n_seeds, len(y)))).astype(np.float32)


def test_auc_interval_matches_sklearn_on_the_same_resamples(rng):
    n = int(rng.integers(80, 160))
    y = (rng.uniform(size=n) < 0.35).astype(np.int32)
    y[:2] = [0, 1]
    p = _scores(rng, y, rng.uniform(0.0, 2.0), n_pred=3)
    key = jax.random.key(int(rng.integers(2**31)))
    got = study.evaluation.auc_interval(p, y, key=key, resamples=40)
    np.testing.assert_allclose(got, _reference_interval(p, y, key, 40), atol=1e-5)
    assert got.shape == (3, 2) and np.all(got[:, 0] <= got[:, 1])


def _chance_scores(rng: np.random.Generator, n_pos: int, n_seeds: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Labels and scores whose AUC is exactly 0.5 per seed: each positive's score is given to two
    negatives too (every positive-negative comparison has its mirror)."""
    y = np.concatenate([np.ones(n_pos, np.int32), np.zeros(2 * n_pos, np.int32)])
    order = rng.permutation(len(y))
    p = np.empty((1, n_seeds, len(y)), np.float32)
    for s in range(n_seeds):
        x = rng.normal(size=n_pos)
        p[0, s] = np.concatenate([x, x, x])[order]
    return y[order], p


def test_a_near_chance_classifier_warns(rng):
    y, p = _chance_scores(rng, int(rng.integers(40, 100)))
    auc = [roc_auc_score(y, p[0, s]) for s in range(2)]
    np.testing.assert_allclose(auc, 0.5, atol=1e-12)
    lo, hi = study.evaluation.auc_interval(p, y, key=jax.random.key(int(rng.integers(2**31))), resamples=200)[0]
    assert lo < 0.5 < hi
    # a validation AUC close to the test AUC: only the interval flags it
    check = study.diagnostics.basic_auc_check("B", auc, (lo, hi), [0.55, 0.52], "B")
    assert check["near_chance"] and not check["far_below_validation"]
    assert check["auc"] == pytest.approx(0.5)
    assert "setting B" in check["warning"] and "reaches chance (0.5)" in check["warning"]
    # a weak but real signal well above chance is not flagged
    y2 = (rng.uniform(size=400) < 0.3).astype(np.int32)
    y2[:2] = [0, 1]
    p2 = _scores(rng, y2, 1.5)
    ci2 = study.evaluation.auc_interval(p2, y2, key=jax.random.key(3), resamples=200)[0]
    auc2 = [roc_auc_score(y2, p2[0, s]) for s in range(2)]
    assert ci2[0] > 0.5
    assert study.diagnostics.basic_auc_check("B", auc2, ci2, np.mean(auc2), "B")["warning"] is None


def test_a_near_chance_classifier_with_a_high_validation_auc_warns_twice_over():
    # the demo's setting B before its configuration changed: test 0.553, validation 0.797
    check = study.diagnostics.basic_auc_check("B", [0.668, 0.435], (0.47, 0.63), [0.797, 0.664], "B")
    assert check["near_chance"] and check["far_below_validation"]
    assert check["gap"] == pytest.approx(0.7305 - 0.5515)
    assert "reaches chance" in check["warning"] and "below its validation AUC" in check["warning"]
    # an interval entirely below chance (a classifier that ranks backwards) is flagged too
    assert study.diagnostics.basic_auc_check("A", 0.3, (0.2, 0.4), 0.35)["near_chance"]
    # an undefined interval cannot show the classifier is above chance
    undefined = study.diagnostics.basic_auc_check("A", 0.9, (None, None), 0.9)
    assert undefined["near_chance"] and "undefined" in undefined["warning"]


def test_a_good_classifier_does_not_warn(rng):
    n = 240
    y = (rng.uniform(size=n) < 0.3).astype(np.int32)
    y[:2] = [0, 1]
    p = _scores(rng, y, 2.5)  # AUC about 0.96
    ci = study.evaluation.auc_interval(p, y, key=jax.random.key(1), resamples=200)[0]
    auc = [roc_auc_score(y, p[0, s]) for s in range(2)]
    check = study.diagnostics.basic_auc_check("A", auc, ci, np.mean(auc) + 0.05, "A")
    assert ci[0] > 0.5
    assert not check["near_chance"] and not check["far_below_validation"] and check["warning"] is None


def test_far_below_validation_is_the_larger_of_the_threshold_and_the_interval_width():
    # width 0.06: the threshold is 0.1
    assert study.diagnostics.basic_auc_check("A", 0.80, (0.77, 0.83), 0.899)["warning"] is None
    far = study.diagnostics.basic_auc_check("A", 0.80, (0.77, 0.83), 0.901, "A")
    assert far["far_below_validation"] and not far["near_chance"]
    assert far["far_below_threshold"] == pytest.approx(D.FAR_BELOW)
    assert "site A's validation split" in far["warning"]
    # width 0.2: a drop of 0.15 is within the bootstrap noise, one of 0.21 is not
    assert study.diagnostics.basic_auc_check("A", 0.75, (0.65, 0.85), 0.90)["warning"] is None
    wide = study.diagnostics.basic_auc_check("A", 0.75, (0.65, 0.85), 0.96)
    assert wide["far_below_validation"] and wide["far_below_threshold"] == pytest.approx(0.2)
    # better on the test set than on validation is never flagged
    assert study.diagnostics.basic_auc_check("A", 0.95, (0.9, 0.99), 0.7)["warning"] is None


def _results(auc_b: list[float], ci_b: list[float], val_basic_b: list[float], keyed: bool) -> dict:
    names = ["basic", "sex0.80"]
    settings = {}
    for name in ("A", "B", "A->B"):
        auc = np.array([[0.9, 0.91], [0.8, 0.82]]) if name != "B" else np.array([auc_b, [0.5, 0.5]])
        ci = np.array([[0.85, 0.95], [0.7, 0.9]]) if name != "B" else np.array([ci_b, [0.4, 0.6]])
        settings[name] = ({"auc": {p: auc[i].tolist() for i, p in enumerate(names)},
                           "auc_ci95_seed_mean": {p: ci[i].tolist() for i, p in enumerate(names)}}
                          if keyed else {"names": names, "auc": auc, "auc_ci95_seed_mean": ci})
    members = ["basic", "basic", "sex0.80", "sex0.80"]
    training = {"A": {"members": members, "best_val_auc": [0.92, 0.93, 0.5, 0.5]},
                "B": {"members": members, "best_val_auc": val_basic_b + [0.99, 0.99]}}
    return {"settings": settings, "training": training}


@pytest.mark.parametrize("keyed", [False, True])
def test_classifier_checks_reads_the_basic_rows_and_the_training_site(keyed):
    checks = study.diagnostics.classifier_checks(_results([0.668, 0.435], [0.47, 0.63], [0.797, 0.664], keyed))
    assert set(checks) == {"A", "B", "A->B"}
    assert checks["B"]["warning"] and checks["B"]["validation_auc"] == pytest.approx(0.7305)
    assert checks["A"]["warning"] is None and checks["A->B"]["warning"] is None
    # A->B is scored against site A's validation AUC (it was trained on A)
    assert checks["A->B"]["validation_auc"] == pytest.approx(0.925)
    good = study.diagnostics.classifier_checks(_results([0.88, 0.9], [0.84, 0.93], [0.9, 0.91], keyed))
    assert all(c["warning"] is None for c in good.values())


def test_the_report_section_warns_for_flagged_settings_only():
    from cfjax.study.report import classifier_section

    checks = study.diagnostics.classifier_checks(_results([0.668, 0.435], [0.47, 0.63], [0.797, 0.664], False))
    lines = classifier_section(checks)
    assert lines[0] == "## Warnings"
    flagged = [ln for ln in lines if ln.startswith("- **Warning.**")]
    assert len(flagged) == 1 and "setting B" in flagged[0]
    good = classifier_section(study.diagnostics.classifier_checks(_results([0.88, 0.9], [0.84, 0.93], [0.9, 0.91], False)))
    assert good[0] == "## Basic classifiers" and not any("**Warning.**" in ln for ln in good)
    assert "none is." in " ".join(good)
    assert classifier_section(checks, heading=False)[0].startswith("- **Warning.**")
