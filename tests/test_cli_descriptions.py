"""Every metric's one-line description (:func:`cfjax.metrics.report.descriptions`, what ``cfjax
evaluate``'s report prints beside each number) states the quantity cfjax computes.

Each field has here the formula its description must state, verbatim, and a numpy computation
of that formula (definitions §1), compared with :func:`cfjax.metrics.evaluate` on fresh random
inputs: binary scores and class probabilities, with observed and with counterfactual labels.
Every field of the report has a description, and the command's report.md prints exactly these.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.stats

from cfjax.metrics import evaluate, smooth_ece
from cfjax.metrics.report import NOTATION, descriptions

N, K, C, BINS, EPS = 150, 5, 3, 15, 1e-7


def _bins(score, target):
    """(n_b, mean target, mean score) per equal-width bin [b/B, (b+1)/B), the last closed."""
    b = np.minimum((score * BINS).astype(int), BINS - 1)
    out = []
    for j in range(BINS):
        m = b == j
        if m.any():
            out.append((m.sum(), target[m].mean(), score[m].mean()))
    return out


def _cvar(losses, q, alpha):
    """Rockafellar–Uryasev over the atoms (the minimum of a convex piecewise-linear function
    lies at one), per unit."""
    t = losses[:, :, None]  # candidate t = each atom
    values = t[..., 0] + (q[None, None, :] * np.maximum(losses[:, None, :] - t, 0)).sum(-1) / alpha
    return values.min(1)


def _references(p_obs, p_cf, y, y_cf, q, tau, classes):
    """{field: (formula stated in the description, value computed by that formula)}."""
    p_bar = np.einsum("k,nk...->n...", q, p_cf)
    if classes:
        def loss(p, lab):  # −log p[y], clipped
            return -np.log(np.clip(np.take_along_axis(p, lab[..., None], -1)[..., 0], EPS, 1 - EPS))
        onehot = lambda lab: np.eye(C)[lab]  # noqa: E731
        decide = lambda p: p.argmax(-1)  # noqa: E731
    else:
        def loss(p, lab):
            p = np.clip(p, EPS, 1 - EPS)
            return -(lab * np.log(p) + (1 - lab) * np.log(1 - p))
        decide = lambda p: p >= tau  # noqa: E731
    ycf = y_cf if y_cf is not None else np.repeat(y[:, None], K, 1)
    L = loss(p_cf, ycf)
    tag = "y_cf[k]" if y_cf is not None else "y"
    r = {
        "risk_orig": ("mean ℓ(p_obs, y)", loss(p_obs, y).mean()),
        "risk_ie": (f"mean Σ_k q_k ℓ(p_cf[k], {tag})", (L @ q).mean()),
        "risk_wc": (f"mean max_k ℓ(p_cf[k], {tag})", L.max(1).mean()),
        "s_flip": ("mean Σ_k q_k 1[d(p_cf[k]) ≠ d(p_obs)]",
                   ((decide(p_cf) != decide(p_obs)[:, None]) @ q).mean()),
        "d_obs": ("mean 1[d(p_obs) ≠ d(p̄)]", (decide(p_obs) != decide(p_bar)).mean()),
    }
    for a in (0.5, 0.25, 0.1):
        r[f"risk_cvar/{a}"] = (f"CVaR at level alpha of its losses ℓ(p_cf[k], {tag}) under q", _cvar(L, q, a).mean())
    if y_cf is None:
        r["risk_cm"] = ("mean ℓ(p̄, y)", loss(p_bar, y).mean())
    else:
        r["risk_cm"] = ("mean Σ_k q_k ℓ(p̄, y_cf[k])", (loss(np.repeat(p_bar[:, None], K, 1), y_cf) @ q).mean())
    if classes:
        r["s_var"] = ("mean Σ_k q_k ½‖p_cf[k] − p̄‖²", (0.5 * ((p_cf - p_bar[:, None]) ** 2).sum(-1) @ q).mean())
        r["score_shift"] = ("mean ½‖p_obs − p̄‖₁", 0.5 * np.abs(p_obs - p_bar).sum(-1).mean())
        r["s_tv"] = ("mean Σ_k q_k ½‖p_cf[k] − p_obs‖₁", (0.5 * np.abs(p_cf - p_obs[:, None]).sum(-1) @ q).mean())
        pairs = [(p_obs[:, c], p_bar[:, c]) for c in range(C)]
        per_class = ", averaged over the classes c"
        r["spearman"] = ("Spearman correlation of p_obs[c] and p̄[c]" + per_class,
                         np.mean([scipy.stats.spearmanr(a, b)[0] for a, b in pairs]))
        r["kendall_tau_b"] = ("Kendall tau-b of p_obs[c] and p̄[c]" + per_class,
                              np.mean([scipy.stats.kendalltau(a, b)[0] for a, b in pairs]))
        r["rank_change"] = ("mean |rank(p_obs[c]) − rank(p̄[c])|", np.mean(
            [np.abs(scipy.stats.rankdata(a) - scipy.stats.rankdata(b)).mean() for a, b in pairs]))
        r["brier_orig"] = ("mean Σ_c (p_obs[c] − 1[y = c])²", ((p_obs - onehot(y)) ** 2).sum(-1).mean())
        if y_cf is None:
            r["brier_cm"] = ("mean Σ_c (p̄[c] − 1[y = c])²", ((p_bar - onehot(y)) ** 2).sum(-1).mean())
            hit_cm, text_cm = (p_bar.argmax(-1) == y).astype(float), "mean 1[argmax p̄ = y]"
        else:
            r["brier_cm"] = ("mean Σ_k q_k Σ_c (p̄[c] − 1[y_cf[k] = c])²",
                             (((p_bar[:, None] - onehot(y_cf)) ** 2).sum(-1) @ q).mean())
            y_bar = np.einsum("k,nkc->nc", q, onehot(y_cf))
            hit_cm, text_cm = y_bar[np.arange(N), p_bar.argmax(-1)], "mean ȳ[argmax p̄]"
        scores = {"orig": (p_obs.max(-1), (p_obs.argmax(-1) == y).astype(float), "mean 1[argmax p_obs = y]",
                           "mean max_c p_obs[c]"),
                  "cm": (p_bar.max(-1), hit_cm, text_cm, "mean max_c p̄[c]")}
    else:
        r["s_var"] = ("mean Σ_k q_k (p_cf[k] − p̄)²", (((p_cf - p_bar[:, None]) ** 2) @ q).mean())
        r["score_shift"] = ("mean |p_obs − p̄|", np.abs(p_obs - p_bar).mean())
        r["spearman"] = ("Spearman correlation of p_obs and p̄", scipy.stats.spearmanr(p_obs, p_bar)[0])
        r["kendall_tau_b"] = ("Kendall tau-b of p_obs and p̄", scipy.stats.kendalltau(p_obs, p_bar)[0])
        r["rank_change"] = ("mean |rank(p_obs) − rank(p̄)|",
                            np.abs(scipy.stats.rankdata(p_obs) - scipy.stats.rankdata(p_bar)).mean())
        r["brier_orig"] = ("mean (p_obs − y)²", ((p_obs - y) ** 2).mean())
        if y_cf is None:
            r["brier_cm"] = ("mean (p̄ − y)²", ((p_bar - y) ** 2).mean())
            target_cm, text_cm = y.astype(float), "mean y"
        else:
            r["brier_cm"] = ("mean Σ_k q_k (p̄ − y_cf[k])²", (((p_bar[:, None] - y_cf) ** 2) @ q).mean())
            target_cm, text_cm = y_cf @ q, "mean ȳ"
        scores = {"orig": (p_obs, y.astype(float), "mean y", "mean p_obs"), "cm": (p_bar, target_cm, text_cm, "mean p̄")}
    for which, (s, t, t_text, s_text) in scores.items():
        cells = _bins(s, t)
        r[f"ece_{which}"] = (f"Σ_b (n_b / n) |{t_text} − {s_text}| over equal-width bins b",
                             sum(nb / N * abs(ty - sp) for nb, ty, sp in cells))
        r[f"mce_{which}"] = (f"max over non-empty equal-width bins of |{t_text} − {s_text}|",
                             max(abs(ty - sp) for _, ty, sp in cells))
        # the smooth ECE has no closed form: the described pair (score, target) through smooth_ece
        what = (f"smooth ECE of {s_text.removeprefix('mean ')}" if not classes
                else f"top-label smooth ECE of {'p_obs' if which == 'orig' else 'p̄'}")
        r[f"smece_{which}"] = (what, float(smooth_ece(s.astype(np.float32), t.astype(np.float32))))
    return r


def _inputs(rng, classes, counterfactual):
    q = rng.dirichlet(np.ones(K))
    if classes:
        p_cf = rng.dirichlet(np.ones(C), (N, K))
        p_obs = rng.dirichlet(np.ones(C), N)
        y = rng.integers(0, C, N)
        y_cf = rng.integers(0, C, (N, K)) if counterfactual else None
    else:
        p_cf = rng.uniform(0.01, 0.99, (N, K))
        p_obs = np.clip(p_cf[:, 0] + rng.normal(0, 0.1, N), 0.01, 0.99)
        y = rng.integers(0, 2, N)
        y_cf = np.where(rng.uniform(size=(N, K)) < 0.3, 1 - y[:, None], y[:, None]) if counterfactual else None
    # float32 values, compared in float64
    f32 = lambda a: None if a is None else np.asarray(a, np.float32).astype(np.float64)  # noqa: E731
    return f32(p_obs), f32(p_cf), y, y_cf, f32(q)


@pytest.mark.parametrize("classes", [False, True], ids=["binary", "classes"])
@pytest.mark.parametrize("counterfactual", [False, True], ids=["y", "y_cf"])
def test_each_description_states_what_evaluate_computes(rng, classes, counterfactual):
    p_obs, p_cf, y, y_cf, q = _inputs(rng, classes, counterfactual)
    tau = 0.5 if classes else float(rng.uniform(0.3, 0.7))
    report = evaluate(p_obs.astype(np.float32), p_cf.astype(np.float32), y, y_cf=y_cf, weights=q.astype(np.float32),
                      tau=tau).to_dict()
    text = descriptions(classes=classes, counterfactual_labels=counterfactual)
    fields = [f for f in report if f not in ("labels", "classes")]
    assert list(text) == fields  # every field described, in the report's order, nothing else
    refs = _references(p_obs, p_cf, y, y_cf, q, tau, classes)
    for key, (formula, expected) in refs.items():
        field, _, alpha = key.partition("/")
        assert formula in text[field], (field, formula, text[field])
        got = report[field][float(alpha)] if alpha else report[field]
        assert got == pytest.approx(float(expected), rel=2e-4, abs=2e-5), (field, alpha, got, expected)
    assert set(k.partition("/")[0] for k in refs) == set(fields)


def test_score_shift_is_not_the_mean_shift_under_the_interventions(rng):
    """The described score_shift, |p_obs − p̄|, is not the mean absolute change of a unit's
    score under each intervention (Σ_k q_k |p_cf[k] − p_obs|), which the command used to print
    beside it: on these scores the two differ, and cfjax's value is the first."""
    p_obs, p_cf, y, _, _ = _inputs(rng, False, False)
    # uniform weights: random ones that pile onto one intervention shrink the gap below (the
    # per-intervention mean is never below the described one, by the triangle inequality)
    q = np.full(K, 1.0 / K)
    got = float(evaluate(p_obs.astype(np.float32), p_cf.astype(np.float32), y, weights=q.astype(np.float32)).score_shift)
    described = np.abs(p_obs - p_cf @ q).mean()
    per_intervention = (np.abs(p_cf - p_obs[:, None]) @ q).mean()
    assert got == pytest.approx(described, rel=1e-4)
    assert abs(per_intervention - described) > 0.02
    assert "under the interventions" not in descriptions()["score_shift"]


def test_the_notation_defines_every_symbol_the_descriptions_use():
    every = " ".join(d for c in (False, True) for cf in (False, True)
                     for d in descriptions(classes=c, counterfactual_labels=cf).values())
    for symbol in ("p̄", "ℓ", "d(", "q_k"):
        if symbol in every:
            assert symbol.rstrip("(_k") in NOTATION, symbol


def _report_rows(path):
    rows = {}
    for line in path.read_text().splitlines():
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
        if len(cells) == 4 and cells[0] not in ("metric", "---"):
            rows[cells[0].split(" (alpha=")[0]] = cells[3]
    return rows


@pytest.mark.parametrize("classes", [False, True], ids=["binary", "classes"])
def test_the_command_prints_these_descriptions(rng, tmp_path, classes):
    """report.md's definition column is :func:`descriptions`' line of each field; a class-
    probability report names the argmax decision, not a threshold (results.json's tau is null)."""
    import json

    from cfjax.cli import main

    p_obs, p_cf, y, y_cf, _ = _inputs(rng, classes, True)
    path = tmp_path / "preds.npz"
    np.savez(path, p_obs=p_obs.astype(np.float32), p_cf=p_cf.astype(np.float32), y=y, y_cf=y_cf)
    with _no_exit():
        main(["evaluate", str(path), "--quick", "--resamples", "10", "--out", str(tmp_path / "out")])
    rows = _report_rows(tmp_path / "out" / "report.md")
    assert rows == descriptions(classes=classes, counterfactual_labels=True)
    text = (tmp_path / "out" / "report.md").read_text()
    assert NOTATION in text
    options = json.loads((tmp_path / "out" / "results.json").read_text())["options"]
    if classes:
        assert "tau =" not in text and "decisions by the argmax class" in text and options["tau"] is None
    else:
        assert "decision threshold tau = 0.5" in text and options["tau"] == 0.5


class _no_exit:
    """The command returns normally (a SystemExit would be a user error)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is SystemExit:
            raise AssertionError(f"cfjax evaluate exited with {value.code}")
        return False
