"""``evaluate`` on class probabilities ``p_obs (n, C)``, ``p_cf (n, K, C)``: every field against
plain loops over units, interventions and classes (scipy for the rank statistics), C = 2
against the binary report, the label-free report, jit / vmap, and validation."""

import math

import jax
import numpy as np
import pytest
from scipy import stats

import cfjax as cf
from cfjax.metrics import report as rp
from tests import reference as ref

EPS = 1e-7


# One shape (N, K, C) and dtype for the float32 tests, so they share compiled programs.
N, K, C = 30, 4, 3


def classes(rng, n=N, k=K, c=C):
    """Class probabilities that depend on the label, so the risks are not all the same."""
    y = rng.integers(0, c, n)
    logits = rng.normal(size=(n, 1, c)) + 1.5 * np.eye(c)[y][:, None, :] \
        + 0.7 * rng.normal(size=(n, k, c))
    p_cf = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    p_obs = p_cf[:, 0] * 0.8 + 0.2 * rng.dirichlet(np.ones(c), n)
    return p_obs, p_cf, y


def nll(p):
    return -math.log(min(max(p, EPS), 1 - EPS))


def first_argmax(v):
    return max(range(len(v)), key=lambda a: (v[a], -a))


def loops(p_obs, p_cf, y, q, alphas, n_bins, y_cf=None):
    """Every label field of the class-probability report by explicit loops. ``y_cf`` None:
    each counterfactual is scored against ``y[i]``."""
    n, k, c = p_cf.shape
    if y_cf is None:
        y_cf = np.repeat(y[:, None], k, axis=1)
    out = dict.fromkeys(("risk_orig", "risk_cm", "risk_ie", "risk_wc", "brier_orig", "brier_cm"),
                        0.0)
    cvars = np.zeros(len(alphas))
    conf = {"orig": [], "cm": []}
    correct = {"orig": [], "cm": []}
    for i in range(n):
        p_bar = [sum(q[j] * p_cf[i, j, a] for j in range(k)) for a in range(c)]
        losses = [nll(p_cf[i, j, y_cf[i, j]]) for j in range(k)]
        out["risk_orig"] += nll(p_obs[i, y[i]])
        out["risk_cm"] += sum(q[j] * nll(p_bar[y_cf[i, j]]) for j in range(k))
        out["risk_ie"] += sum(q[j] * losses[j] for j in range(k))
        out["risk_wc"] += max(losses)
        for a, alpha in enumerate(alphas):
            cvars[a] += ref.cvar_sorted(losses, q, alpha)
        out["brier_orig"] += sum((p_obs[i, a] - (a == y[i])) ** 2 for a in range(c))
        out["brier_cm"] += sum(q[j] * sum((p_bar[a] - (a == y_cf[i, j])) ** 2 for a in range(c))
                               for j in range(k))
        top = first_argmax(p_obs[i])
        conf["orig"].append(p_obs[i, top])
        correct["orig"].append(float(top == y[i]))
        top = first_argmax(p_bar)
        conf["cm"].append(p_bar[top])
        correct["cm"].append(sum(q[j] * (top == y_cf[i, j]) for j in range(k)))
    out = {f: v / n for f, v in out.items()}
    out["risk_cvar"] = cvars / n
    for part in ("orig", "cm"):
        ece, mce = ref.calibration(conf[part], correct[part], n_bins, dtype=np.float64)
        out[f"ece_{part}"], out[f"mce_{part}"] = ece, mce
    return out, conf, correct


def stability_loops(p_obs, p_cf, q):
    n, k, c = p_cf.shape
    s_var = s_flip = d_obs = shift = s_tv = 0.0
    p_bars = np.zeros((n, c))
    for i in range(n):
        p_bar = [sum(q[j] * p_cf[i, j, a] for j in range(k)) for a in range(c)]
        p_bars[i] = p_bar
        decided = first_argmax(p_obs[i])
        s_var += sum(q[j] * 0.5 * sum((p_cf[i, j, a] - p_bar[a]) ** 2 for a in range(c))
                     for j in range(k))
        s_flip += sum(q[j] * (first_argmax(p_cf[i, j]) != decided) for j in range(k))
        d_obs += first_argmax(p_bar) != decided
        shift += 0.5 * sum(abs(p_obs[i, a] - p_bar[a]) for a in range(c))
        s_tv += sum(q[j] * 0.5 * sum(abs(p_cf[i, j, a] - p_obs[i, a]) for a in range(c))
                    for j in range(k))
    ranks = [(stats.spearmanr(p_obs[:, a], p_bars[:, a]).statistic,
              stats.kendalltau(p_obs[:, a], p_bars[:, a]).statistic,
              np.mean(np.abs(stats.rankdata(p_obs[:, a]) - stats.rankdata(p_bars[:, a]))))
             for a in range(c)]
    spearman, kendall, rank_change = np.mean(ranks, axis=0)
    return dict(s_var=s_var / n, s_flip=s_flip / n, d_obs=d_obs / n, score_shift=shift / n,
                s_tv=s_tv / n, spearman=spearman, kendall_tau_b=kendall, rank_change=rank_change)


def test_class_probability_report_matches_loops(rng, x64):
    p_obs, p_cf, y = classes(rng, 40, 5, 4)
    p_cf[:6, 1] = p_obs[:6]  # some interventions change nothing
    q = rng.dirichlet(np.ones(5))
    alphas, n_bins = (0.5, 0.2), 10
    r = cf.metrics.evaluate(p_obs, p_cf, y, weights=q, alphas=alphas, n_bins=n_bins)
    assert isinstance(r, cf.metrics.MulticlassReport)
    assert (r.labels, r.classes, r.alphas) == ("invariant", 4, alphas)
    expected, conf, correct = loops(p_obs, p_cf, y, q, alphas, n_bins)
    expected.update(stability_loops(p_obs, p_cf, q))
    for name, value in expected.items():
        np.testing.assert_allclose(getattr(r, name), value, rtol=1e-9, atol=1e-12, err_msg=name)
    # Top-label smooth ECE: the direct-sum reference (midpoint rule, hence the tolerance).
    for part in ("orig", "cm"):
        np.testing.assert_allclose(getattr(r, f"smece_{part}"),
                                   ref.smooth_ece(conf[part], correct[part], points=2000)[0],
                                   rtol=1e-4, atol=1e-7)


def test_uniform_weights_and_float32(rng):
    p_obs, p_cf, y = classes(rng)
    r = cf.metrics.evaluate(p_obs.astype(np.float32), p_cf.astype(np.float32), y)
    q = np.full(K, 1 / K)
    expected, _, _ = loops(p_obs, p_cf, y, q, (0.5, 0.25, 0.1), 15)
    expected.update(stability_loops(p_obs, p_cf, q))
    for name in ("risk_orig", "risk_cm", "risk_ie", "risk_cvar", "risk_wc", "brier_orig",
                 "brier_cm", "s_var", "s_tv", "score_shift"):
        np.testing.assert_allclose(getattr(r, name), expected[name], rtol=2e-5, atol=2e-6,
                                   err_msg=name)
    assert float(r.risk_cm) <= float(r.risk_ie) + 1e-6  # Jensen, invariant labels
    assert float(r.risk_ie) <= float(r.risk_cvar[0]) + 1e-6 <= float(r.risk_wc) + 2e-6


def test_two_classes_agree_with_the_binary_report(rng, x64):
    # Dyadic scores (odd multiples of 1/64): 1 − p is exact and no score is a 0.5 tie.
    n, k = 60, 4
    p_cf = (2 * rng.integers(0, 32, (n, k)) + 1) / 64
    p_obs = (2 * rng.integers(0, 32, n) + 1) / 64
    y = rng.integers(0, 2, n)
    q = rng.dirichlet(np.ones(k))
    binary = cf.metrics.evaluate(p_obs, p_cf, y, weights=q)
    two = cf.metrics.evaluate(np.stack([1 - p_obs, p_obs], -1), np.stack([1 - p_cf, p_cf], -1),
                              y, weights=q)
    same = ("risk_orig", "risk_cm", "risk_ie", "risk_cvar", "risk_wc", "s_var", "s_flip",
            "score_shift", "spearman", "kendall_tau_b", "rank_change")
    for name in same:
        np.testing.assert_allclose(getattr(two, name), getattr(binary, name), rtol=1e-9,
                                   atol=1e-12, err_msg=name)
    # Brier over both classes is twice the binary one; s_tv is the mean |p_cf − p_obs|.
    np.testing.assert_allclose(two.brier_orig, 2 * binary.brier_orig, rtol=1e-12)
    np.testing.assert_allclose(two.brier_cm, 2 * binary.brier_cm, rtol=1e-12)
    np.testing.assert_allclose(two.s_tv, np.mean(np.abs(p_cf - p_obs[:, None]) @ q), rtol=1e-12)
    # D_obs: ties of p_bar at 0.5 are decided differently (argmax takes class 0).
    p_bar = p_cf @ q
    np.testing.assert_allclose(two.d_obs, np.mean((p_obs > 0.5) != (p_bar > 0.5)), atol=1e-12)


def test_label_free_report_has_nan_label_fields_and_the_same_stability(rng):
    p_obs, p_cf, y = classes(rng)
    p_obs, p_cf = p_obs.astype(np.float32), p_cf.astype(np.float32)
    with_y = cf.metrics.evaluate(p_obs, p_cf, y).to_dict()
    without = cf.metrics.evaluate(p_obs, p_cf).to_dict()
    assert without["labels"] == "invariant" and without["classes"] == 3
    for name, value in without.items():
        if name in cf.metrics.report.LABEL_FIELDS:
            values = list(value.values()) if name == "risk_cvar" else [value]
            assert all(math.isnan(v) for v in values), name
        else:
            assert value == with_y[name], name


def test_to_dict_and_jit_vmap(rng):
    data = [classes(rng) for _ in range(3)]
    y = data[0][2]
    P_obs = np.stack([d[0] for d in data]).astype(np.float32)
    P_cf = np.stack([d[1] for d in data]).astype(np.float32)
    single = [cf.metrics.evaluate(P_obs[j], P_cf[j], y) for j in range(3)]
    d = single[0].to_dict()
    assert set(d) == set(rp.MulticlassReport.__dataclass_fields__) - {"alphas"}
    assert all(type(v) is float for f, v in d.items() if f not in ("risk_cvar", "labels",
                                                                    "classes"))
    assert list(d["risk_cvar"]) == [0.5, 0.25, 0.1]
    vmapped = jax.jit(jax.vmap(lambda a, b: cf.metrics.evaluate(a, b, y)))(P_obs, P_cf)
    assert vmapped.classes == 3 and vmapped.labels == "invariant"
    for name, value in d.items():
        if name in ("labels", "classes"):
            continue
        stacked = np.stack([np.asarray(getattr(s, name)) for s in single])
        np.testing.assert_allclose(getattr(vmapped, name), stacked, rtol=1e-5, atol=1e-6,
                                   err_msg=name)


def test_bootstrap_of_class_probabilities_replays_evaluate(rng):
    p_obs, p_cf, y = classes(rng)
    p_obs, p_cf = p_obs.astype(np.float32), p_cf.astype(np.float32)
    r = cf.metrics.evaluate_bootstrap(p_obs, p_cf, y, key=3, resamples=6)
    assert isinstance(r.estimate, cf.metrics.MulticlassReport)
    idx = np.asarray(cf.metrics.bootstrap_indices(N, 6, key=3))
    for b in (0, 5):
        direct = cf.metrics.evaluate(p_obs[idx[b]], p_cf[idx[b]], y[idx[b]])
        for name in ("risk_cm", "risk_cvar", "ece_cm", "s_tv", "spearman"):
            np.testing.assert_allclose(getattr(r.replicates, name)[b], getattr(direct, name),
                                       rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("args, kwargs, name", [
    (((4, 3), (4, 2, 3), np.array([0, 1, 3, 2])), {}, "y"),       # label out of range
    (((4, 3), (4, 2, 3), np.array([0, 1, -1, 2])), {}, "y"),      # negative label
    (((4, 3), (4, 2, 3), np.array([0, 1, 0.5, 2])), {}, "y"),     # not an integer
    (((4, 3), (4, 2, 3), np.array([0, 1, 2])), {}, "y"),          # wrong length
    (((4, 3), (4, 2, 3), np.zeros((4, 1), int)), {}, "y"),        # wrong rank
    (((4, 3), (4, 2, 3), np.zeros(4, int)), {"y_cf": np.zeros((4, 3), int)}, "y_cf"),
    (((4, 3), (4, 2, 3), np.zeros(4, int)), {"y_cf": np.full((4, 2), 3)}, "y_cf"),
    (((4, 3), (4, 2, 3), None), {"y_cf": np.zeros((4, 2), int)}, "y"),
    (((4, 3), (4, 2, 3), np.zeros(4, int)), {"tau": 0.3}, "tau"),
    (((4, 3), (5, 2, 3), np.zeros(4, int)), {}, "p_cf"),          # n mismatch
    (((4, 3), (4, 2, 2), np.zeros(4, int)), {}, "p_cf"),          # C mismatch
    (((4,), (4, 2, 3), np.zeros(4, int)), {}, "p_obs"),           # binary p_obs, classes p_cf
])
def test_bad_class_inputs_raise_naming_the_argument(args, kwargs, name):
    (s_obs, s_cf, y) = args
    p_obs = np.full(s_obs, 1 / s_obs[-1]) if len(s_obs) == 2 else np.full(s_obs, 0.5)
    p_cf = np.full(s_cf, 1 / s_cf[-1])
    with pytest.raises(cf._checks.ValidationError, match=f"`{name}`"):
        cf.metrics.evaluate(p_obs, p_cf, y, **kwargs)


def test_rows_off_the_simplex_raise():
    p_cf = np.full((3, 2, 3), 0.3)
    with pytest.raises(cf._checks.ValidationError, match="`p_cf`.*sums to 1"):
        cf.metrics.evaluate(np.full((3, 3), 1 / 3), p_cf, np.zeros(3, int))
