"""Paper 001's sensitivity analyses: law school (bivariate grid, Figure 2) and NHS staff survey
(3-variable optimiser, Figure 4), plus the built-in synthetic SCM with a known confounding.

Follows the paper's recipe as the data README spells it out (A = ±1, z-scored features with the
population std, unshuffled 5-fold CV scored as scikit-learn's ``GridSearchCV(cv=5)`` by default —
held-out R², Model A's equations as one estimator — one shared λ for Models A and B); each choice
is an option of the loaders / ``FitConfig`` and the report shows what changes when it is changed,
the CV score (R² against MSE) beside every curve. Also a λ sweep (including λ = 0) next to every
curve, and the inverse question (the smallest budget whose worst case reaches the blind
baseline's unfairness).

Run: ``python -m experiments.sensitivity [--data-dir ../shared/data] [--out experiments/reports/sensitivity]``
(float64; about 10 minutes on 2 CPU cores, ``--quick`` for a smaller run).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import cfjax as cf  # noqa: E402
import cfjax.sensitivity as S  # noqa: E402
from cfjax.io import atomic_write_bytes  # noqa: E402

# degrees 1-4, λ in logspace(-4, 4, 10), unshuffled 5-fold CV on held-out R², shared λ
LAW_SETTINGS = S.FitConfig()
NHS_SETTINGS = S.FitConfig(degrees=(1, 2, 3), lambdas=tuple(float(v) for v in np.logspace(-3, 3, 8)),
                          predictor_degrees=(1, 2, 3))
SCORE_NAMES = {"r2": "held-out R² (the paper's recipe)", "mse": "held-out MSE"}
BUDGETS = np.linspace(0.0, 0.99, 16)


def _save_fig(fig, path):
    """``path`` (PNG, for the report) and the same figure as PDF beside it (vector, for a paper)."""
    from cfjax import figures

    figures.save_figure(fig, path)


def _fmt(x):
    return "NaN" if not np.isfinite(x) else f"{x:.3g}"


def _summary(model, settings):
    sel = model.selection
    return {"cv_score": settings.cv_score, "degrees": list(model.degrees), "lam": sel["lam"][0],
            "cv": None if sel["lambda_cv"] is None else [float(v) for v in sel["lambda_cv"]],
            "lambdas": [float(v) for v in settings.lambdas],
            "predictor": sel["predictor"], "baselines": sel["baselines"],
            "baseline_unfairness": {k: float(v) for k, v in model.baseline_unfairness.items()}}


def _sweep_lambdas(base, *chosen):
    """A λ sweep's grid: ``base`` and the penalties CV chose, sorted, without repeats."""
    return sorted({float(v) for v in (*base, *chosen)})


def lambda_sweep(prob, settings, lams, evaluate):
    """CFU as a function of the shared ridge penalty, degrees fixed at the CV choice."""
    base = S.fit(prob.graph, prob.data, settings)
    rows = []
    for lam in lams:
        model = S.fit(prob.graph, prob.data, settings.replace(lam=float(lam), equation_degrees=base.degrees))
        rows.append({"lam": float(lam), **evaluate(model),
                     "blind": float(model.baseline_unfairness["blind"])})
    return rows


def _edge(model, budgets):
    """The bivariate worst case at each budget: the larger of CFU(±p_max) (at the budget's edge)."""
    g = np.asarray(S.cfu_grid(model, np.concatenate([-budgets, budgets])))
    return np.fmax(g[: len(budgets)], g[len(budgets):])


def law_school(path, out, key, quick, mesh=None):
    t0 = time.perf_counter()
    prob = S.load_law_school(path)
    model = S.fit(prob.graph, prob.data, LAW_SETTINGS)
    ps = np.linspace(-0.99, 0.99, 41 if quick else 81)
    grid = np.asarray(S.cfu_grid(model, ps))
    wc = S.worst_case(model, BUDGETS, key=key, mesh=mesh, config=S.SearchConfig(restarts=4))
    blind = float(model.baseline_unfairness["blind"])
    inverse = S.inverse_budget(model, blind, key=key, mesh=mesh, config=S.SearchConfig(restarts=4))
    t_main = time.perf_counter() - t0
    # The same recipe with CV on held-out MSE instead of R²: its bivariate curve from the grid.
    mse_settings = LAW_SETTINGS.replace(cv_score="mse")
    mse_model = S.fit(prob.graph, prob.data, mse_settings)
    mse_grid = np.asarray(S.cfu_grid(mse_model, ps))

    def at(model):
        g = np.asarray(S.cfu_grid(model, [-0.9, -0.5, 0.5, 0.9]))
        return {"cfu_p0.5": float(np.nanmax(g[1:3])), "cfu_p0.9": float(np.nanmax(g[[0, 3]]))}

    sweep = lambda_sweep(prob, LAW_SETTINGS, _sweep_lambdas([0.0, 1e-4, 1e-2, 1.0, 1e2, 1e4], model.lam,
                                                            mse_model.lam), at)
    # The recipe's details, one at a time (each refit with its own CV).
    variants = {"paper recipe": at(model)}
    for name, p2, settings in [
        ("CV on MSE", prob, mse_settings),
        ("A coded 0/1", S.load_law_school(path, sensitive_coding="01"), LAW_SETTINGS),
        ("shuffled CV", prob, LAW_SETTINGS.replace(shuffle=True)),
        ("sample std", S.load_law_school(path, standardise="sample"), LAW_SETTINGS),
        ("per-equation λ", prob, LAW_SETTINGS.replace(shared_lambda=False)),
        ("Model A = ML (P = I)", prob, LAW_SETTINGS.replace(model_a="ml")),
    ]:
        m2 = S.fit(p2.graph, p2.data, settings)
        variants[name] = {**at(m2), "degrees": list(m2.degrees), "lam": m2.selection["lam"],
                          "blind": float(m2.baseline_unfairness["blind"])}
    fig = S.plot_curve(ps, {_label(model, "CV on R² (paper's recipe)"): grid, _label(mse_model, "CV on MSE"): mse_grid},
                       model=model, floor=_floor(model, mse_model),
                       style=S.CurveStyle(xlabel="p (error correlation of G and L)", title="Law school: CFU over the grid"))
    _save_fig(fig, os.path.join(out, "law_school_grid.png"))
    mse_edge = _edge(mse_model, BUDGETS)
    fig = S.plot_curve(wc.p_max, {_label(model, "worst case, CV on R² (paper's recipe)"): wc.cfu,
                                  _label(mse_model, "CV on MSE, CFU(±p_max)"): mse_edge},
                       model=model, floor=_floor(model, mse_model),
                       style=S.CurveStyle(title="Law school: worst-case CFU (optimiser)"))
    _save_fig(fig, os.path.join(out, "law_school_curve.png"))
    return {"n": prob.data.n, "model": _summary(model, LAW_SETTINGS), "grid": {"p": ps.tolist(), "cfu": grid.tolist()},
            "worst_case": _curve(wc), "inverse": _inverse(inverse), "lambda_sweep": sweep,
            "mse": {"model": _summary(mse_model, mse_settings), "grid": mse_grid.tolist(),
                    "p_max": BUDGETS.tolist(), "cfu": mse_edge.tolist()},
            "variants": variants, "seconds": t_main, "quick": quick}


def _label(model, what):
    """A curve's legend entry: what it is, with the model's CV choices."""
    return f"{what}; degrees {list(model.degrees)}, λ = {model.selection['lam'][0]:.3g}"


def _floor(*models):
    """The floor of curves of several models: the lowest CFU at zero correlation among them (none
    of them is below its own)."""
    return min(S.cfu_at_zero_correlation(m) for m in models)


def nhs(path, out, key, quick, mesh=None):
    t0 = time.perf_counter()
    prob = S.load_nhs(path)
    model = S.fit(prob.graph, prob.data, NHS_SETTINGS)
    search = dict(restarts=4, batch_size=4096, steps=100 if quick else 200)
    wc = S.worst_case(model, BUDGETS, key=key, mesh=mesh, config=S.SearchConfig(**search))
    paper = S.worst_case(model, BUDGETS, key=key, mesh=mesh,
                         config=S.SearchConfig(restarts=4, batch_size=4096, steps=prob.data.n // 4096, optimizer="sgd",
                                               learning_rate=100.0, momentum=0.9, nesterov=True, warm_start=True,
                                               log_objective=False, patience=10**6))
    blind = float(model.baseline_unfairness["blind"])
    inverse = S.inverse_budget(model, blind, key=key, mesh=mesh, tol=5e-3, config=S.SearchConfig(**search))
    t_main = time.perf_counter() - t0
    # The same recipe with CV on held-out MSE instead of R²: its own worst-case curve, or, when both
    # scores choose the same Model A (degrees and λ; only the predictors' λ differ), its CFU at the
    # R² curve's maximisers, so that the search's spread between runs does not pose as a difference.
    mse_settings = NHS_SETTINGS.replace(cv_score="mse")
    mse_model = S.fit(prob.graph, prob.data, mse_settings)
    if mse_model.degrees == model.degrees and mse_model.lam == model.lam:
        mse_curve = {"p_max": BUDGETS.tolist(), "cfu": [float(S.cfu(mse_model, P)) for P in np.asarray(wc.P)],
                     "at_recipe_P": True}
    else:
        mse_curve = {**_curve(S.worst_case(mse_model, BUDGETS, key=key, mesh=mesh,
                                           config=S.SearchConfig(**search))), "at_recipe_P": False}

    def at(model):
        w = S.worst_case(model, [0.5, 0.9], key=key, mesh=mesh,
                         config=S.SearchConfig(restarts=4, batch_size=4096, steps=100))
        return {"cfu_p0.5": float(w.cfu[0]), "cfu_p0.9": float(w.cfu[1])}

    lams = [0.0, 1e-3, 1.0, 1e3] if not quick else [0.0]
    sweep = lambda_sweep(prob, NHS_SETTINGS, _sweep_lambdas(lams, model.lam, *([] if quick else [mse_model.lam])), at)
    # Every curve over the same budgets (BUDGETS is sorted: the warm-started search keeps its order).
    curves = {_label(model, "worst case, CV on R² (paper's recipe)"): wc.cfu,
              "paper's optimiser (SGD, warm start)": paper.cfu,
              _label(mse_model, "CV on MSE, CFU at the same P" if mse_curve["at_recipe_P"] else "CV on MSE"):
                  np.asarray(mse_curve["cfu"])}
    fig = S.plot_curve(wc.p_max, curves, model=model, floor=_floor(model, mse_model),
                       style=S.CurveStyle(title="NHS staff survey: worst-case CFU (optimiser)"))
    _save_fig(fig, os.path.join(out, "nhs_curve.png"))
    return {"n": prob.data.n, "model": _summary(model, NHS_SETTINGS), "worst_case": _curve(wc),
            "paper_optimizer": _curve(paper), "inverse": _inverse(inverse), "lambda_sweep": sweep,
            "mse": {"model": _summary(mse_model, mse_settings), **mse_curve}, "seconds": t_main, "quick": quick}


def synthetic(out, key, mesh=None):
    prob = S.synthetic(5000, correlation=0.5, key=0)
    model = S.fit(prob.graph, prob.data, LAW_SETTINGS)
    wc = S.worst_case(model, BUDGETS, key=key, mesh=mesh, config=S.SearchConfig(restarts=4))
    true = float(S.cfu(model, prob.true_correlation))
    fig = S.plot_curve(wc, model=model, true_value=(0.5, true),
                       style=S.CurveStyle(title="Synthetic SCM (true correlation 0.5)"))
    _save_fig(fig, os.path.join(out, "synthetic_curve.png"))
    at_half = float(S.worst_case(model, [0.5], key=key, mesh=mesh, config=S.SearchConfig(restarts=4)).cfu[0])
    return {"model": _summary(model, LAW_SETTINGS), "worst_case": _curve(wc), "true_cfu": true,
            "worst_at_0.5": at_half}


def _curve(wc):
    return {"p_max": np.asarray(wc.p_max).tolist(), "cfu": np.asarray(wc.cfu).tolist(),
            "min_eigenvalue": np.asarray(wc.eigenvalues[:, 0]).tolist(),
            "P_offdiag": [np.asarray(P)[np.triu_indices(P.shape[0], 1)].tolist() for P in wc.P],
            "steps_max": int(np.asarray(wc.steps).max())}


def _inverse(inv):
    return {"level": inv.level, "p_max": inv.p_max, "reached": inv.reached, "bracket": [inv.lo, inv.hi],
            "max_cfu": inv.max_cfu, "max_cfu_p_max": inv.max_cfu_p_max, "probes": [list(p) for p in inv.evaluated]}


def _reached(inv) -> bool:
    """Whether the inverse question has an answer (a finite ``p_max``; None when not reached)."""
    return inv["p_max"] is not None and bool(np.isfinite(inv["p_max"]))


def _choices(m, label):
    """One paragraph: the CV choices of a fitted model's summary and its CV scores."""
    unit = "R²" if m.get("cv_score", "r2") == "r2" else "MSE"
    cv = m.get("cv")
    model_a = "" if not cv else f" (Model A's stacked CV {unit} {_fmt(max(cv) if unit == 'R²' else min(cv))})"
    pred, base = m["predictor"], m["baselines"]
    return [f"{label}, {SCORE_NAMES[m.get('cv_score', 'r2')]}: equation degrees {m['degrees']}, shared λ = "
            f"{_fmt(m['lam'])}{model_a}; fair predictor degree {pred['degree']}, λ = {_fmt(pred['lam'])} "
            f"(CV {unit} {_fmt(pred.get('score', np.nan))}); baselines: unconstrained degree "
            f"{base['unconstrained']['degree']}, λ = {_fmt(base['unconstrained']['lam'])}, blind degree "
            f"{base['blind']['degree']}, λ = {_fmt(base['blind']['lam'])}. Baselines' unfairness (mean squared "
            f"difference from the fair predictor): unconstrained {_fmt(m['baseline_unfairness']['unconstrained'])}, "
            f"blind {_fmt(m['baseline_unfairness']['blind'])}.", ""]


PAPER_FIGURES = {
    "law_school": ("Figure 2", "CFU of the law school model against the error correlation of G and L; with two "
                   "variables the worst case within a budget sits at its edge, p = ±p_max"),
    "nhs": ("Figure 4", "the worst-case CFU of the NHS model against the budget p_max, found by the optimiser "
            "over a full 3 × 3 error correlation"),
}


def _at(p_max, cfu, budget):
    i = int(np.argmin(np.abs(np.asarray(p_max) - budget)))
    return p_max[i], cfu[i]


def _paper_comparison(name, r) -> str:
    """How this section's curve stands next to the paper's figure, from what the paper's text says."""
    fig, what = PAPER_FIGURES[name]
    wc, m = r["worst_case"], r["model"]
    text = (f"**Next to the paper's {fig}** ({what}; the baselines' unfairness is the breaking point the text "
            f"proposes). The paper's text available to this project ends before its Section 5 (the experiments): "
            f"it states no values read off {fig}, so the numbers below cannot be set against the paper's own; "
            f"what the text does fix — CFU = 0 at P = I, a curve rising with the budget, the baselines as the "
            f"level of concern — these curves show. ")
    if "mse" in r:
        mm, mc = r["mse"]["model"], r["mse"]
        parts = []
        for b in (0.5, 0.924, 0.99):
            pb, v = _at(wc["p_max"], wc["cfu"], b)
            _, w = _at(mc["p_max"], mc["cfu"], b)
            ratio = f", ×{v / w:.3g}" if np.isfinite(v) and np.isfinite(w) and w > 0 else ""
            parts.append(f"p_max = {pb:.2f}: {_fmt(v)} against {_fmt(w)}{ratio}")
        against = ("the MSE-selected model's CFU at the same P (both scores choose the same Model A)"
                   if mc.get("at_recipe_P") else "MSE")
        text += (f"The paper's recipe (R²) selects λ = {_fmt(m['lam'])} with degrees {m['degrees']}; CV on MSE "
                 f"selects λ = {_fmt(mm['lam'])} with degrees {mm['degrees']}. Worst-case CFU, R² recipe against "
                 f"{against}: " + "; ".join(parts) + ".")
    return text


def report(res) -> str:
    lines = ["# cfjax: sensitivity of counterfactual fairness to unmeasured confounding (paper 001)", "",
             "Generated by `python -m experiments.sensitivity` (float64). CFU is the mean squared change of "
             "the counterfactually fair predictor's output between each unit and its counterfactual "
             "(the other group) when the errors are correlated by P (definitions §3). Worst cases: Adam on log CFU "
             "over the paper's tanh parameterisation, 4 restarts per budget seeded by the best sign corners, "
             "smallest eigenvalue of P >= 1e-3.", "",
             "Model selection is the paper's recipe: scikit-learn's `GridSearchCV(cv=5)` with its default "
             "scoring, i.e. held-out R² averaged over 5 unshuffled folds (`FitConfig(cv_score=\"r2\")`). "
             "Model A's equations are one estimator with a shared λ, scored by the R² of all equations' "
             "held-out targets stacked together; the fair predictor and the baselines by the R² of their own "
             "target. Each section also shows the choice and the curve under held-out MSE "
             "(`FitConfig(cv_score=\"mse\")`, what this report used before).", "",
             "Benchmarked budgets (a confounder k times as strong as an observed parent), every predictor's worst "
             "case and bootstrap intervals: [review.md](review.md) (`python -m experiments.sensitivity_review`); the "
             "default search against a 10× larger one: [search_check.md](search_check.md).", ""]
    for name in ("law_school", "nhs", "synthetic"):
        if name not in res:
            continue
        r = res[name]
        m = r["model"]
        title = {"law_school": "Law school (A -> G, A -> L, G -> L; Figure 2)",
                 "nhs": "NHS staff survey (O <- A; M <- A, O; J <- A, O, M; Figure 4)",
                 "synthetic": "Synthetic SCM with a known error correlation (0.5)"}[name]
        lines += [f"## {title}", ""]
        if "n" in r:
            lines.append(f"{r['n']:,} units. ")
        lines += _choices(m, "CV choices")
        if "mse" in r:
            lines += _choices(r["mse"]["model"], "With CV on MSE instead")
        if "grid" in r:
            g = np.asarray(r["grid"]["cfu"])
            p = np.asarray(r["grid"]["p"])
            lines += ["![grid](law_school_grid.png)", "",
                      "Bivariate grid, CFU at selected correlations:", "",
                      "| p | " + " | ".join(f"{v:+.2f}" for v in p[:: max(len(p) // 10, 1)]) + " |",
                      "|---|" + "---|" * len(p[:: max(len(p) // 10, 1)]),
                      "| CFU | " + " | ".join(_fmt(v) for v in g[:: max(len(p) // 10, 1)]) + " |", ""]
        wc = r["worst_case"]
        fig = {"law_school": "law_school_curve.png", "nhs": "nhs_curve.png", "synthetic": "synthetic_curve.png"}[name]
        mse_col = "" if "mse" not in r else (
            " CV on MSE: worst-case CFU (max CFU(±p_max)) |" if name == "law_school" else
            " CV on MSE: CFU at the same P |" if r["mse"].get("at_recipe_P") else " CV on MSE: worst-case CFU |")
        lines += [f"![curve]({fig})", "", "| p_max | worst-case CFU | smallest eigenvalue of P | P off-diagonals |"
                  + (" paper's optimiser |" if "paper_optimizer" in r else "") + mse_col,
                  "|---|---|---|---|" + ("---|" if "paper_optimizer" in r else "") + ("---|" if mse_col else "")]
        for i, pm in enumerate(wc["p_max"]):
            row = (f"| {pm:.3f} | {_fmt(wc['cfu'][i])} | {wc['min_eigenvalue'][i]:.4f} | "
                   + ", ".join(f"{v:+.3f}" for v in wc["P_offdiag"][i]) + " |")
            if "paper_optimizer" in r:
                row += f" {_fmt(r['paper_optimizer']['cfu'][i])} |"
            if mse_col:
                mse_at = dict(zip(np.round(r["mse"]["p_max"], 6), r["mse"]["cfu"]))
                row += f" {_fmt(mse_at[round(pm, 6)]) if round(pm, 6) in mse_at else '—'} |"
            lines.append(row)
        lines.append("")
        if name in PAPER_FIGURES:
            lines += [_paper_comparison(name, r), ""]
        if "inverse" in r:
            inv = r["inverse"]
            ans = (f"not reached within p_max <= {inv['bracket'][0]:.2f} (largest worst-case CFU found "
                   f"{_fmt(inv.get('max_cfu', float('nan')))})" if not _reached(inv)
                   else f"p_max = {inv['p_max']:.3f} (bracket [{inv['bracket'][0]:.3f}, {inv['bracket'][1]:.3f}])")
            lines += [f"**Inverse question**: the smallest budget whose worst-case CFU reaches the blind "
                      f"baseline's unfairness ({_fmt(inv['level'])}): {ans}.", ""]
        if "true_cfu" in r:
            lines += [f"CFU at the true correlation: {_fmt(r['true_cfu'])}; worst case at budget 0.5: "
                      f"{_fmt(r['worst_at_0.5'])} (the true confounding lies under the curve).", ""]
        if "lambda_sweep" in r:
            lines += ["λ sweep (degrees fixed at the CV choice; Models A and B share λ; λ = 0 solved by "
                      "pseudo-inverse):", "", "| λ | CFU at budget 0.5 | CFU at budget 0.9 | blind baseline |",
                      "|---|---|---|---|"]
            lines += [f"| {_fmt(s['lam'])} | {_fmt(s['cfu_p0.5'])} | {_fmt(s['cfu_p0.9'])} | {_fmt(s['blind'])} |"
                      for s in r["lambda_sweep"]]
            lines.append("")
        if "variants" in r:
            lines += ["The recipe's details, changed one at a time (CFU = grid maximum at |p| = 0.5 / 0.9; λ per "
                      "equation where they differ):", "",
                      "| variant | CFU 0.5 | CFU 0.9 | degrees | λ | blind |", "|---|---|---|---|---|---|"]
            for k, v in r["variants"].items():
                lam = np.atleast_1d(v.get("lam", m["lam"]))
                lam = lam[:1] if np.all(lam == lam[0]) else lam  # per equation only when they differ
                blind = _fmt(v.get("blind", m["baseline_unfairness"]["blind"]))
                lines.append(f"| {k} | {_fmt(v['cfu_p0.5'])} | {_fmt(v['cfu_p0.9'])} | {v.get('degrees', m['degrees'])} | "
                             f"{', '.join(_fmt(x) for x in lam)} | {blind} |")
            lines.append("")
        if "seconds" in r:
            reduced = (" Reduced run (`--quick`: " + ("41 grid points" if name == "law_school" else
                       "100 optimiser steps per run, λ sweep at 0 and the CV choice only") + ")."
                       if r.get("quick") else "")
            lines += [f"Fit, curve and inverse question: {r['seconds']:.0f} s (2 shared CPU cores).{reduced}", ""]
    lines += ["## What drives the curves", "", res.get("discussion", ""), ""]
    return "\n".join(lines)


DISCUSSION = """\
The λ sweeps answer it: at λ = 0 CFU is zero up to float error for every P on these curves, and
below the CV choice it grows as λ² (each factor 100 in λ multiplies CFU by 1e4). What drives the
curves is the ridge penalty that Models A and B share, not the non-linearity of the equations.
The reason: when each child's embedding contains its parents and spans its parents' own
embeddings (true of every CV choice here: A is binary, and the degrees are nested), a Model B with
correlated errors is an exact reparameterisation of Model A — writing ε_child = c·ε_parent + ε′
moves c·(parent − φ_parent w_parent) into the child's equation — and the counterfactual then
changes each unit's residuals by exactly nothing, whatever P is. Unpenalised, both models find
the same fitted values and CFU = 0. The penalty breaks the equivalence, because it charges the
two parameterisations differently, and CFU measures that difference; it then grows with the
budget and without bound as P nears singularity (hence the eigenvalue margin). A curve from this
recipe is therefore a statement about the penalty as much as about confounding: a sensitivity
analysis should report it next to the λ sweep, and a CFU far below the baselines' unfairness (as
on the law school data) says the fair predictor is robust to this kind of misspecification at the
chosen λ.
The recipe's details (coding of A, unshuffled folds, shared λ, the CV score) change CV's choice of
degrees and λ, and with it the curve, by an order of magnitude or more, as the variants table
shows."""


def _score_discussion(res) -> str:
    """What the CV score (R², the paper's, against MSE) changes, with this run's numbers."""
    parts = []
    for name, label in (("law_school", "law school"), ("nhs", "NHS")):
        r = res.get(name)
        if not r or "mse" not in r:
            continue
        m, mm = r["model"], r["mse"]["model"]
        wc, mc = r["worst_case"], r["mse"]
        _, v = _at(wc["p_max"], wc["cfu"], 0.924)
        _, w = _at(mc["p_max"], mc["cfu"], 0.924)
        tail = f"the worst case at p_max = 0.92 is {_fmt(v)} against {_fmt(w)} (×{v / w:.3g})"
        if m["lam"] == mm["lam"] and m["degrees"] == mm["degrees"]:
            a, b = np.asarray(wc["cfu"]), np.asarray(mc["cfu"])
            keep = a > 1e-12 * np.nanmax(a)  # not at P = I, where both are float noise
            gap = np.nanmax(np.abs(b - a)[keep] / a[keep])
            parts.append(f"on {label} both select Model A's λ = {_fmt(m['lam'])} and degrees {m['degrees']}; only the "
                         f"fair predictor's λ differs ({_fmt(m['predictor']['lam'])} against "
                         f"{_fmt(mm['predictor']['lam'])}), and at the worst-case P of every budget p_max > 0 the "
                         f"two models' CFU differ by at most {gap:.1e} relative")
            continue
        part = (f"on {label} R² selects λ = {_fmt(m['lam'])}, degrees {m['degrees']}, where MSE selects "
                f"λ = {_fmt(mm['lam'])}, degrees {mm['degrees']}, and {tail}")
        if m.get("cv") and mm.get("cv") and m["degrees"] == mm["degrees"]:
            i, k = m["lambdas"].index(m["lam"]), mm["lambdas"].index(mm["lam"])
            part += (f" — a near tie: at λ = {_fmt(m['lam'])} and λ = {_fmt(mm['lam'])} Model A's stacked CV R² is "
                     f"{m['cv'][i]:.6f} and {m['cv'][k]:.6f}, its CV MSE {mm['cv'][i]:.6f} and {mm['cv'][k]:.6f}")
        parts.append(part)
    if not parts:
        return ""
    return ("\n\nThe CV score is one of those details. R² and MSE rank candidates differently because R² "
            "divides each fold's error by that fold's own spread, and, for Model A's shared λ, by the spread of "
            "all equations' targets stacked: " + "; ".join(parts) + ". As the λ sweep shows, CFU grows about "
            "as λ² below the λ chosen, so a score that picks a larger λ moves the whole curve up.")


def _nhs_discussion(res) -> str:
    r = res.get("nhs")
    if not r:
        return ""
    wc, inv = r["worst_case"], r["inverse"]
    blind = r["model"]["baseline_unfairness"]["blind"]
    cfu, eig = np.asarray(wc["cfu"]), np.asarray(wc["min_eigenvalue"])
    text = (f"\n\nOn the NHS data the worst case stays below 1e-5 while P is well conditioned, then jumps to "
            f"{_fmt(cfu.max())} (above the blind baseline's {_fmt(blind)}) once the budget admits nearly singular "
            f"correlations: the maximisers sit on the eigenvalue margin (smallest eigenvalue {eig[cfu.argmax()]:.0e}). ")
    if _reached(inv):
        text += (f"The inverse question's answer, p_max = {inv['p_max']:.3f}, is therefore as much a statement about "
                 f"the allowed margin from singular P as about the strength of confounding. ")
    paper = np.asarray(r["paper_optimizer"]["cfu"])
    text += (f"The paper's optimiser (SGD, learning rate 100, on CFU itself) reaches only {_fmt(paper.max())}: at this "
             f"scale of CFU its gradients are too small to move L far from the start; ascending log CFU from the "
             f"best sign corners (cfjax's default) finds the near-singular maximisers.")
    return text


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data-dir", default=os.path.join("..", "shared", "data"))
    ap.add_argument("--out", default=os.path.join("experiments", "reports", "sensitivity"))
    ap.add_argument("--quick", action="store_true", help="fewer grid points, steps and λ values")
    ap.add_argument("--only", choices=["law_school", "nhs", "synthetic"], nargs="*")
    ap.add_argument("--devices", type=int, default=None, metavar="N",
                    help="split every search's budgets x restarts over N devices (on a CPU: N host devices)")
    args = ap.parse_args(argv)
    cf.platform.use_compilation_cache()  # load what an earlier run compiled (CFJAX_CACHE_DIR=off: compile afresh)
    if args.devices is not None:  # before the first JAX computation
        cf.distributed.host_devices(args.devices)
    mesh = args.devices  # every search's runs split over that many devices (None: one)
    os.makedirs(args.out, exist_ok=True)
    key = jax.random.key(0)
    res = {}
    previous = os.path.join(args.out, "results.json")
    if args.only and os.path.isfile(previous):  # a partial run updates the other sections' report
        with open(previous) as f:
            res = json.load(f)
    only = set(args.only or ["law_school", "nhs", "synthetic"])
    law = os.path.join(args.data_dir, "lawschool.csv")
    nhs_path = os.path.join(args.data_dir, "nhs.npz")
    if "law_school" in only:
        if os.path.isfile(law):
            res["law_school"] = law_school(law, args.out, key, args.quick, mesh)
        else:
            print(f"law school data not found in {args.data_dir}; skipped")
    if "nhs" in only:
        if os.path.isfile(nhs_path):
            res["nhs"] = nhs(nhs_path, args.out, key, args.quick, mesh)
        else:
            print(f"NHS data not found in {args.data_dir}; skipped")
    if "synthetic" in only:
        res["synthetic"] = synthetic(args.out, key, mesh)
    res["discussion"] = DISCUSSION + _score_discussion(res) + _nhs_discussion(res)
    atomic_write_bytes(os.path.join(args.out, "results.json"), json.dumps(res, indent=1, default=float).encode())
    atomic_write_bytes(os.path.join(args.out, "report.md"), report(res).encode())
    print(report(res))
    return res


if __name__ == "__main__":
    main()
