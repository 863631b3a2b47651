"""Labels that change under intervention (``y_cf (n, K)``) and per-predictor labels in
``evaluate_many``: binary fields against plain loops, ``y_cf`` equal to ``y`` against the
invariant report, the label assumption recorded in the report, the bootstrap resampling
``y_cf`` with the units, one-vs-rest sweeps, and validation."""

import numpy as np
import pytest

import cfjax as cf
from tests import reference as ref


# One shape (N, K) for the float32 tests, so they share compiled programs.
N, K = 40, 5


def scores(rng, n=N, k=K):
    y_cf = rng.integers(0, 2, (n, k))
    logits = rng.normal(size=(n, 1)) + 1.2 * (2 * y_cf - 1) + 0.5 * rng.normal(size=(n, k))
    p_cf = 1 / (1 + np.exp(-logits))
    p_obs = 1 / (1 + np.exp(-(logits[:, 0] + 0.3 * rng.normal(size=n))))
    return p_obs, p_cf, y_cf[:, 0].copy(), y_cf


def binary_loops(p_obs, p_cf, y, y_cf, q, alphas, n_bins):
    """Label fields of a binary report with counterfactual labels, by loops over units and
    interventions: p_cf[i, k] against y_cf[i, k]; p_bar[i] by its expected loss over the
    y_cf[i, k] (and calibrated against their q-mean)."""
    n, k = p_cf.shape
    risk_cm = risk_ie = risk_wc = brier_cm = 0.0
    cvars = np.zeros(len(alphas))
    p_bars, y_bars = np.zeros(n), np.zeros(n)
    for i in range(n):
        p_bar = sum(q[j] * p_cf[i, j] for j in range(k))
        losses = [ref.bce(p_cf[i, j], y_cf[i, j]) for j in range(k)]
        risk_cm += sum(q[j] * ref.bce(p_bar, y_cf[i, j]) for j in range(k))
        risk_ie += sum(q[j] * losses[j] for j in range(k))
        risk_wc += max(losses)
        brier_cm += sum(q[j] * (p_bar - y_cf[i, j]) ** 2 for j in range(k))
        for a, alpha in enumerate(alphas):
            cvars[a] += ref.cvar_sorted(losses, q, alpha)
        p_bars[i], y_bars[i] = p_bar, sum(q[j] * y_cf[i, j] for j in range(k))
    ece_cm, mce_cm = ref.calibration(p_bars, y_bars, n_bins, dtype=np.float64)
    ece_o, mce_o = ref.calibration(p_obs, y, n_bins, dtype=np.float64)
    return dict(
        risk_orig=np.mean([ref.bce(p_obs[i], y[i]) for i in range(n)]),
        risk_cm=risk_cm / n, risk_ie=risk_ie / n, risk_cvar=cvars / n, risk_wc=risk_wc / n,
        brier_orig=np.mean((p_obs - y) ** 2), brier_cm=brier_cm / n,
        ece_orig=ece_o, mce_orig=mce_o, ece_cm=ece_cm, mce_cm=mce_cm,
    ), p_bars, y_bars


def test_binary_counterfactual_labels_match_loops(rng, x64):
    p_obs, p_cf, y, y_cf = scores(rng, 50, 6)
    q = rng.dirichlet(np.ones(6))
    alphas, n_bins = (0.5, 0.2), 10
    r = cf.metrics.evaluate(p_obs, p_cf, y, y_cf=y_cf, weights=q, alphas=alphas, n_bins=n_bins)
    assert isinstance(r, cf.metrics.MarginalisationReport)  # a subclass: same fields
    assert r.labels == "counterfactual" and r.to_dict()["labels"] == "counterfactual"
    expected, p_bars, y_bars = binary_loops(p_obs, p_cf, y, y_cf, q, alphas, n_bins)
    for name, value in expected.items():
        np.testing.assert_allclose(getattr(r, name), value, rtol=1e-9, atol=1e-12, err_msg=name)
    # Smooth ECE against the soft labels: the direct-sum reference (midpoint rule).
    np.testing.assert_allclose(r.smece_cm, ref.smooth_ece(p_bars, y_bars, points=2000)[0],
                               rtol=1e-4, atol=1e-7)
    # The label-free fields do not look at labels.
    s_var, s_flip, d_obs, shift = ref.stability(p_obs, p_cf, q, 0.5)
    np.testing.assert_allclose([r.s_var, r.s_flip, r.d_obs, r.score_shift],
                               [s_var, s_flip, d_obs, shift], rtol=1e-9, atol=1e-12)


def test_binary_y_cf_equal_to_y_gives_the_invariant_report(rng):
    p_obs, p_cf, y, _ = scores(rng)
    p_obs, p_cf = p_obs.astype(np.float32), p_cf.astype(np.float32)
    plain = cf.metrics.evaluate(p_obs, p_cf, y)
    broadcast = cf.metrics.evaluate(p_obs, p_cf, y, y_cf=np.repeat(y[:, None], K, 1))
    assert plain.labels == "invariant" and "labels" not in plain.to_dict()
    a, b = plain.to_dict(), broadcast.to_dict()
    assert b.pop("labels") == "counterfactual" and set(a) == set(b)
    for name in a:
        va, vb = a[name], b[name]
        if name == "risk_cvar":
            va, vb = list(va.values()), list(vb.values())
        # 5 × 1/5 sums to 1 only up to rounding: the soft label q @ y_cf may be 1 − 1 ulp.
        np.testing.assert_allclose(vb, va, rtol=1e-5, atol=1e-6, err_msg=name)


def test_class_y_cf_equal_to_y_gives_the_invariant_report(rng):
    n, k, c = N, K, 3
    y = rng.integers(0, c, n)
    p_cf = rng.dirichlet(np.ones(c), (n, k)).astype(np.float32)
    p_obs = rng.dirichlet(np.ones(c), n).astype(np.float32)
    plain = cf.metrics.evaluate(p_obs, p_cf, y)
    broadcast = cf.metrics.evaluate(p_obs, p_cf, y, y_cf=np.repeat(y[:, None], k, 1))
    assert (plain.labels, broadcast.labels) == ("invariant", "counterfactual")
    assert broadcast.to_dict()["labels"] == "counterfactual"
    for name in plain.__dataclass_fields__:
        if name not in ("alphas", "labels", "classes"):
            np.testing.assert_allclose(getattr(broadcast, name), getattr(plain, name),
                                       rtol=1e-5, atol=1e-6, err_msg=name)


def test_changing_labels_can_break_jensen(rng):
    # A predictor that follows a label which changes with the intervention is near perfect
    # per intervention (R_IE ≈ 0), but its average p_bar = ȳ (the share of interventions
    # with label 1) pays the binary entropy of ȳ: R_CM > R_IE.
    y_cf = rng.integers(0, 2, (N, K))
    y_cf[:, 0], y_cf[:, 1] = 0, 1  # both labels in every row
    p_cf = np.where(y_cf == 1, 1 - 2.0**-20, 2.0**-20).astype(np.float32)
    r = cf.metrics.evaluate(p_cf[:, 0], p_cf, y_cf[:, 0], y_cf=y_cf)
    assert float(r.risk_ie) < 1e-5
    y_bar = y_cf.mean(axis=1)
    entropy = -(y_bar * np.log(y_bar) + (1 - y_bar) * np.log(1 - y_bar))
    np.testing.assert_allclose(float(r.risk_cm), entropy.mean(), rtol=1e-4)
    assert float(r.risk_cm) > float(r.risk_ie)


def test_bootstrap_resamples_y_cf_with_the_units(rng):
    p_obs, p_cf, y, y_cf = scores(rng)
    p_obs, p_cf = p_obs.astype(np.float32), p_cf.astype(np.float32)
    r = cf.metrics.evaluate_bootstrap(p_obs, p_cf, y, y_cf=y_cf, key=7, resamples=5)
    assert r.estimate.labels == "counterfactual"
    assert r.to_dict()["high"]["labels"] == "counterfactual"
    idx = np.asarray(cf.metrics.bootstrap_indices(N, 5, key=7))
    for b in (0, 4):
        direct = cf.metrics.evaluate(p_obs[idx[b]], p_cf[idx[b]], y[idx[b]], y_cf=y_cf[idx[b]])
        for name in ("risk_cm", "risk_ie", "risk_cvar", "brier_cm", "ece_cm"):
            np.testing.assert_allclose(getattr(r.replicates, name)[b], getattr(direct, name),
                                       rtol=1e-5, atol=1e-6, err_msg=name)


def test_evaluate_many_one_vs_rest_labels_equal_per_class_calls(rng):
    n, k, c = N, K, 3
    y = rng.integers(0, c, n)
    p_cf = rng.dirichlet(np.ones(c), (n, k)).astype(np.float32)
    p_obs = rng.dirichlet(np.ones(c), n).astype(np.float32)
    P_obs, P_cf = np.moveaxis(p_obs, -1, 0), np.moveaxis(p_cf, -1, 0)  # (C, n), (C, n, K)
    Y = (y[None, :] == np.arange(c)[:, None]).astype(np.int32)  # (C, n)
    many = cf.metrics.evaluate_many(P_obs, P_cf, Y)
    for j in range(c):
        one = cf.metrics.evaluate(P_obs[j], P_cf[j], Y[j])
        for name in ("risk_orig", "risk_cm", "risk_cvar", "brier_cm", "ece_orig", "s_var"):
            np.testing.assert_allclose(getattr(many, name)[j], getattr(one, name),
                                       rtol=1e-5, atol=1e-6, err_msg=f"{name} class {j}")
        # Each class against its own labels: the per-unit log loss of class j's scores.
        expected = np.mean([ref.bce(P_obs[j, i], Y[j, i]) for i in range(n)])
        np.testing.assert_allclose(many.risk_orig[j], expected, rtol=1e-5)


@pytest.mark.parametrize("y, match", [
    (np.zeros((2, 6), int), r"`y`: expected labels of shape \(6,\).*\(3, 6\).*got shape \(2, 6\)"),
    (np.zeros(5, int), r"`y`:.*got shape \(5,\)"),
    (np.zeros((3, 6, 1), int), r"`y`:.*got shape \(3, 6, 1\)"),
    (np.full((3, 6), 2), r"`y`: expected labels in \{0, 1\}"),
])
def test_evaluate_many_bad_labels_raise(y, match):
    p_cf = np.full((3, 6, 2), 0.5, np.float32)
    with pytest.raises(cf._checks.ValidationError, match=match):
        cf.metrics.evaluate_many(p_cf[..., 0], p_cf, y)


@pytest.mark.parametrize("y, y_cf, match", [
    (np.zeros(4, int), np.zeros((4, 2), int), r"`y_cf`: expected shape \(4, 3\)"),
    (np.zeros(4, int), np.zeros(4, int), r"`y_cf`: expected shape \(4, 3\)"),
    (np.zeros(4, int), np.full((4, 3), 2), r"`y_cf`: expected labels in \{0, 1\}"),
    (None, np.zeros((4, 3), int), r"`y`: expected observed labels"),
])
def test_bad_binary_y_cf_raises(y, y_cf, match):
    p_cf = np.full((4, 3), 0.5, np.float32)
    for call in (lambda: cf.metrics.evaluate(p_cf[:, 0], p_cf, y, y_cf=y_cf),
                 lambda: cf.metrics.evaluate_bootstrap(p_cf[:, 0], p_cf, y, y_cf=y_cf, key=0,
                                                       resamples=2)):
        with pytest.raises(cf._checks.ValidationError, match=match):
            call()


@pytest.mark.parametrize("classes", [None, 3])
@pytest.mark.parametrize("per_predictor", [False, True])
def test_evaluate_many_with_counterfactual_labels_and_classes_equals_evaluate_per_predictor(rng, classes,
                                                                                           per_predictor):
    """The one pipeline: class probabilities and labels that change under the interventions,
    shared or per predictor, give predictor j the report of ``evaluate`` on its own arrays."""
    m, n, k = 3, N, K
    if classes is None:
        p_cf = rng.uniform(size=(m, n, k)).astype(np.float32)
        p_obs = rng.uniform(size=(m, n)).astype(np.float32)
        draw = lambda *shape: rng.integers(0, 2, shape)  # noqa: E731
    else:
        p_cf = rng.dirichlet(np.ones(classes), (m, n, k)).astype(np.float32)
        p_obs = rng.dirichlet(np.ones(classes), (m, n)).astype(np.float32)
        draw = lambda *shape: rng.integers(0, classes, shape)  # noqa: E731
    y, y_cf = (draw(m, n), draw(m, n, k)) if per_predictor else (draw(n), draw(n, k))
    weights = rng.dirichlet(np.ones(k))
    many = cf.metrics.evaluate_many(p_obs, p_cf, y, y_cf=y_cf, weights=weights)
    for j in range(m):
        one = cf.metrics.evaluate(p_obs[j], p_cf[j], y[j] if per_predictor else y,
                                  y_cf=y_cf[j] if per_predictor else y_cf, weights=weights)
        assert type(one) is type(many)
        for name, value in one.to_dict().items():
            if isinstance(value, float):
                np.testing.assert_allclose(getattr(many, name)[j], value, rtol=1e-5, atol=1e-6, err_msg=name)
    with pytest.raises(cf._checks.ValidationError, match=r"`y_cf`: expected labels of shape"):
        cf.metrics.evaluate_many(p_obs, p_cf, y, y_cf=np.zeros((n, k + 1), int))


@pytest.mark.parametrize("where, match", [
    ("p_cf", r"`p_cf`: expected probabilities without NaN"),
    ("p_obs", r"`p_obs`: expected probabilities in \[0, 1\]"),
    ("y", r"`y`: expected labels in \{0, 1\}"),
    ("y_cf", r"`y_cf`: expected labels in \{0, 1\}"),
    ("classes", r"`y`: expected integer class labels in 0\.\.2"),
    ("simplex", r"`p_cf`: expected class probabilities whose last axis sums to 1"),
])
def test_evaluate_many_checks_every_predictor_not_only_the_first(rng, where, match):
    # evaluate_many checks shapes on the first predictor's rows and values over all of them:
    # a bad value in the last predictor's rows must still be found.
    m, n, k = 3, 8, 4
    p_cf = rng.uniform(0.05, 0.95, (m, n, k)).astype(np.float32)
    p_obs, y, y_cf = p_cf[..., 0].copy(), rng.integers(0, 2, (m, n)), rng.integers(0, 2, (m, n, k))
    i = int(rng.integers(n))
    if where in ("classes", "simplex"):
        p_cf = rng.dirichlet(np.ones(3), (m, n, k)).astype(np.float32)
        p_obs, y = p_cf[:, :, 0].copy(), rng.integers(0, 3, (m, n))
        if where == "classes":
            y[-1, i] = 3
        else:
            p_cf[-1, i, 0] = 0.2  # a row summing to 0.6
        y_cf = None
    elif where == "p_cf":
        p_cf[-1, i, 1] = np.nan
    elif where == "p_obs":
        p_obs[-1, i] = 1.5
    elif where == "y":
        y[-1, i] = 2
    else:
        y_cf[-1, i, 2] = 2
    with pytest.raises(cf._checks.ValidationError, match=match):
        cf.metrics.evaluate_many(p_obs, p_cf, y, y_cf=y_cf)
