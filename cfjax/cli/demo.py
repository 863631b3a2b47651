"""``cfjax demo``: the three pillars at a small scale on built-in synthetic data.

1. Counterfactual marginalisation (paper 000) with :func:`cfjax.study.run`: CNN effusion
   classifiers trained on the synthetic chest radiographs (the ten predictors, two seeds each,
   one vmapped ensemble per site), K = 16 exact counterfactual images per test unit, then the
   same tables with learned counterfactuals from an HVAE generator trained per site.
2. Sensitivity of counterfactual fairness to unmeasured confounding (paper 001) on
   :func:`cfjax.sensitivity.synthetic`, whose true error correlation is known: the worst-case
   CFU curve over budgets, the CFU at the true correlation, and the smallest budget whose worst
   case reaches the blind baseline's unfairness.
3. Counterfactual representations (paper 002) on synthetic embeddings with true
   counterfactuals, from a balanced and an aggressively biased split.
4. Counterfactual training (:mod:`cfjax.study.cftraining`): on the study's site A, a
   sex-biased training set (α = 0.95), counterfactual objectives trained with the exact and the
   learned counterfactuals (the study's site-A generator) rendered inside the training step,
   against the basic classifier, reweighting, group DRO and an unbiased reference.

Writes ``report.md`` (tables and figures), ``results.json`` (every number; the same seed gives
byte-identical JSON on the same machine: run times and checkpoint reuse are left out),
``run_times.json`` (the stages' wall times, the CPUs, the date, the load average and whether
trained checkpoints were reused) and PNG figures into ``--out``; the full study report is in
``marginalisation/``. The README's demo section is generated from ``results.json`` and
``run_times.json`` (``python -m experiments.demo_readme``).
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from typing import Any, Callable

import click
import numpy as np

from cfjax._results import plain
from cfjax.cli import common
from cfjax.cli.common import UserError

__all__ = ["command", "Scale", "DEMO", "QUICK", "demo"]

_EXAMPLE = """\b
Example:
  cfjax demo                      # about 5 minutes on a 2-core CPU
  cfjax demo --quick --out results/demo_quick
  cfjax demo --devices 2 --force  # the ensembles' members over 2 devices
"""


@dataclasses.dataclass(frozen=True)
class Scale:
    """The sizes of one demo run (the study's :class:`cfjax.study.Config` and generator, and
    the sensitivity and representation problems)."""

    study: Any
    generator: Any
    seeds: int = 2
    sensitivity_n: int = 1000
    budgets: int = 6
    restarts: int | None = None  # None: worst_case's default search (restarts until two agree to 1e-3)
    search_steps: int | None = None  # None: worst_case's default
    inverse_tol: float = 0.05
    sensitivity_resamples: int = 100
    embeddings_n: int = 4000
    embeddings_d: int = 32
    draws: int = 16
    arm: Any = None


def _scales() -> tuple[Scale, Scale]:
    from cfjax import study
    from cfjax.generative import GeneratorConfig
    from cfjax.generative.hvae import HVAEConfig
    from cfjax.predictors import EnsembleConfig, Objective
    from cfjax.study import cftraining

    # the arm's study sizes are the scale's (its training pool is the study's site A)
    arm = cftraining.ArmConfig(biases=(0.95,), seeds=(0, 1), baselines=True,
                               objectives=(Objective("augment"), Objective("variance", 1.0)),
                               learned_objectives=(Objective("augment"),))

    demo = Scale(
        study=study.Config(size=32, n_train=1500, n_val=300, test_per_cell=20, n_natural=120, features=(8, 16, 32),
                           predictor=EnsembleConfig(steps=600, learning_rate=5e-3, batch_size=32, weight_decay=1e-4,
                                                    eval_every=100, patience=2, warmup=30),
                           bootstrap=50, prop1_resamples=200, effusion_size=0.4),
        generator=study.GeneratorSettings(
            GeneratorConfig(hvae=HVAEConfig(image_size=32, channels=(8, 16, 16), latent_dims=(0, 4, 4)), steps=200,
                            warmup=20, kl_warmup=60, ema_decay=0.98, chunk_steps=100, cf_weight=0.0, cf_warmup=500),
            chunk=120),
        arm=arm)
    quick = Scale(
        study=study.Config(size=32, n_train=400, n_val=120, test_per_cell=8, n_natural=48, features=(4, 8),
                           predictor=EnsembleConfig(steps=40, batch_size=16, learning_rate=2e-3, weight_decay=1e-4,
                                                    eval_every=20, patience=2, warmup=4),
                           bootstrap=20, prop1_resamples=50, effusion_size=0.4, chunk=256),
        generator=study.GeneratorSettings(
            GeneratorConfig(hvae=HVAEConfig(image_size=32, channels=(4, 4, 4), latent_dims=(0, 2, 2)), steps=20,
                            warmup=2, kl_warmup=5, ema_decay=0.9, chunk_steps=10, cf_weight=0.0, cf_warmup=500),
            chunk=64),
        sensitivity_n=600, budgets=4, sensitivity_resamples=10, inverse_tol=0.3, embeddings_n=1000,
        embeddings_d=16, draws=4, arm=arm)
    return demo, quick


def __getattr__(name: str) -> Scale:
    """``DEMO`` and ``QUICK``, built on first use: they import :mod:`cfjax.study`, which starts
    JAX, and ``cfjax --help`` imports this module."""
    if name in ("DEMO", "QUICK"):
        return _scales()[("DEMO", "QUICK").index(name)]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: results.json keys left out: run times and checkpoint reuse vary between identical runs
_VOLATILE = ("seconds", "wall_time_s", "resumed_from_checkpoint", "devices")


def _stable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _stable(v) for k, v in x.items() if k not in _VOLATILE}
    if isinstance(x, list):
        return [_stable(v) for v in x]
    return x


# ------------------------------------------------------------------------- 1. marginalisation
def image_grid(res: dict[str, Any], path: str, units: int, seed: int) -> dict[str, Any]:
    """Factual images of site A's test units, their exact counterfactuals under do(sex, age) and,
    when the study trained generators, the learned ones below them, with what each intervention
    changed (:func:`cfjax.scm.counterfactual_grid`, the 32×32 images drawn 75 px a side), as
    ``path`` (PNG) and its PDF; returns the units and the mean absolute change per intervention."""
    import jax

    from cfjax import figures
    from cfjax.cli.chest import AGES
    from cfjax.scm import counterfactual_grid, intervention_grid

    chest, test = res["_chests"]["A"], res["_tests"]["A"]
    effusion = np.asarray(test["parents"]["effusion"])
    half = units // 2
    idx = np.concatenate([np.flatnonzero(effusion == 0)[:units - half], np.flatnonzero(effusion == 1)[:half]])
    sub = {"parents": {v: np.asarray(x)[idx] for v, x in test["parents"].items()},
           "noise": jax.tree.map(lambda a: a[idx], test["noise"]), "image": np.asarray(test["image"])[idx]}
    do, _, axis = intervention_grid({"sex": [0, 1], "age": list(AGES)}, describe=True)
    key = jax.random.key(seed)
    factual = np.asarray(sub["image"], np.float64)
    groups = {"exact": np.asarray(chest.counterfactuals(sub, do, key=key, label="fixed")["image"], np.float64)}
    if "_learned_source" in res:
        learned = res["_learned_source"](chest, sub, do, key=key, label="fixed")  # (N, K, H, W)
        groups["learned"] = np.asarray(learned["image"], np.float64)
    labels = [f"unit {i + 1}\n{'effusion' if e else 'no effusion'}" for i, e in enumerate(effusion[idx])]
    fig = counterfactual_grid(factual, groups, axis, unit_labels=labels, tile_inches=0.5, image_limits=(0.0, 1.0))
    figures.save_figure(fig, path)
    change = {name: np.mean(np.abs(v - factual[:, None]), axis=(0, 2, 3)) for name, v in groups.items()}  # (K,)
    out = {"units": [int(i) for i in idx], "learned": "learned" in groups,
           "effusion": effusion[idx].astype(int).tolist(), "size": int(factual.shape[-1]),
           "interventions": list(axis.labels),
           "mean_abs_change": {name: c.tolist() for name, c in change.items()}}
    if "learned" in groups:
        out["learned_vs_exact_mae"] = float(np.mean(np.abs(groups["learned"] - groups["exact"])))
    return out


def marginalisation(scale: Scale, out: str, seed: int, command: str, log: Callable[[str], None],
                    progress: bool | None) -> tuple[dict[str, Any], dict[str, Any]]:
    from cfjax import study

    res = study.run(scale.study, os.path.join(out, "marginalisation"), tuple(range(scale.seeds)), "fixed",
                    quick=True, generator=scale.generator, key=seed, command=command, progress=progress, log=log)
    grid = image_grid(res, os.path.join(out, "counterfactual_grid.png"), 4, seed)
    with open(os.path.join(out, "marginalisation", "results.json"), encoding="utf-8") as f:
        import json

        payload = json.load(f)
    return res, {"study": _stable(payload), "grid": grid}


# ------------------------------------------------------------------------- 2. sensitivity
def sensitivity(scale: Scale, out: str, seed: int, log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """Paper 001 on the built-in synthetic SCM (true error correlation 0.5), in float64; ``log``
    receives a line as each stage starts."""
    import jax

    import cfjax.sensitivity as S

    with jax.enable_x64(True):  # scoped: the rest of the demo runs at its own precision
        prob = S.synthetic(scale.sensitivity_n, correlation=0.5, key=seed)
        settings = S.Settings(degrees=(2,), lambdas=(1e-2, 1.0, 1e2), predictor_degrees=(2,))
        key = jax.random.key(seed)
        budgets = np.unique(np.append(np.linspace(0.0, 0.99, scale.budgets), 0.5))  # with the true |p|
        search = {k: v for k, v in (("restarts", scale.restarts), ("steps", scale.search_steps)) if v is not None}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", S.ConvergenceWarning)
            warnings.simplefilter("ignore", S.ShrinkageWarning)  # the floor is reported beside the curve
            log(f"    fitting the working model, the fair predictor and the baselines on {scale.sensitivity_n} units")
            model = S.fit(prob.graph, prob.data, settings)
            log(f"    worst-case CFU over {len(budgets)} budgets, "
                f"{scale.restarts or 'the default'} restarts and more where two disagree (the first search compiles)")
            wc = S.worst_case(model, budgets, key=key, **search)
            main_warnings = len(caught)  # the curve's own: restated below with the table's budgets
            baselines = {k: float(v) for k, v in model.baseline_unfairness.items()}
            true_cfu = float(S.cfu(model, prob.true_correlation))
            log("    inverse question: the smallest budgets reaching the true correlation's CFU and the blind baseline's")
            inverse = {name: S.inverse_budget(model, level, key=key, grid=len(budgets), hi=0.99,
                                              tol=scale.inverse_tol, **search).to_dict()
                       for name, level in (("true_correlation_cfu", true_cfu), ("blind_baseline", baselines["blind"]))}
            log("    benchmarks (a confounder 1, 2, 3 times as strong as A) and the baselines' own worst cases")
            bench = S.benchmarks(model, k=(1.0, 2.0, 3.0))
            others = {p: S.worst_case(model.scoring(p), budgets, key=key, **search) for p in S.PREDICTORS if p != "fair"}
            log(f"    bootstrap: {scale.sensitivity_resamples} resamples of the units, every model refitted")
            intervals = S.bootstrap(model, budgets, key=jax.random.fold_in(key, 7), resamples=scale.sensitivity_resamples,
                                    worst=wc, levels={"blind": "blind"})
        seen = _search_notes(wc, model, sum(issubclass(w.category, S.ConvergenceWarning) for w in caught[main_warnings:]))
        from cfjax import figures
        from cfjax.cli.sensitivity import benchmark_marks

        # Every predictor's worst case, the fair one's bootstrap band, the benchmarks' budgets marked.
        curves, marks = {"fair": wc, **others}, benchmark_marks(bench)
        bands = dict(lower={"fair": np.asarray(intervals.lower["worst_case"])},
                     upper={"fair": np.asarray(intervals.upper["worst_case"])})
        fig = S.plot_curve(curves, model=model, true_value=(0.5, true_cfu), benchmarks=marks or None,
                           title="Worst-case CFU (true correlation 0.5)", **bands)
        figures.save_figure(fig, os.path.join(out, "cfu_curve.png"))  # and cfu_curve.pdf
        caption = S.curve_caption(curves, model=model, benchmarks=marks or None)
        return plain({"n": scale.sensitivity_n, "true_correlation": 0.5, "true_cfu": true_cfu, "caption": caption,
                      "settings": {"degrees": [2], "lambdas": [1e-2, 1.0, 1e2], "search": search,
                                   "inverse_tol": scale.inverse_tol, "resamples": scale.sensitivity_resamples},
                      "model": model.to_dict(), "baselines": baselines, "worst_case": wc.to_dict(),
                      "predictors": {p: w.to_dict() for p, w in others.items()}, "benchmarks": bench.to_dict(),
                      "intervals": intervals.to_dict(), "inverse": inverse, "warnings": seen},
                     strict=True, shortest=True)


def _budget(p: float) -> str:
    """A budget as the demo's report prints it, in its table and in every note."""
    return f"{p:.3g}"


def _search_notes(wc: Any, model: Any, inverse_warnings: int) -> list[str]:
    """The demo search's warnings, every budget quoted as the report's table prints it: the
    curve's budgets whose worst case no second restart confirmed (after the search's adaptive
    rounds) or found no finite CFU, whether the CFU at zero correlation carries the curve, and
    how often the inverse question's searches (at budgets of their own) warned."""
    from cfjax.sensitivity.cfu import negligible_cfu
    from cfjax.sensitivity.diagnostics import floor_dominates

    p, cfu = np.asarray(wc.p_max, np.float64), np.asarray(wc.cfu, np.float64)
    ratio = np.asarray(wc.restart_ratio, np.float64)
    notes = []
    none = np.flatnonzero(~np.isfinite(cfu))
    if none.size:
        notes.append("no restart ended with a finite CFU at p_max = " + ", ".join(_budget(p[i]) for i in none)
                     + " (n/a in the table)")
    # worst_case's own test: two restarts agree on the worst case (its adaptive rounds add restarts until they do)
    confirmed, rounds = getattr(wc, "confirmed", None), getattr(wc, "rounds", None)
    confirmed = ~(ratio > 10) if confirmed is None else np.asarray(confirmed, bool)  # without rounds: the old test
    apart = np.flatnonzero(~confirmed & np.isfinite(cfu))
    if apart.size:
        rounds = np.zeros(p.shape, int) if rounds is None else np.asarray(rounds)
        notes.append("the worst case at p_max = " + ", ".join(f"{_budget(p[i])} ({ratio[i]:.3g}x)" for i in apart)
                     + " rests on one restart (the best restart's CFU over the second best's), after "
                     + ", ".join(str(int(rounds[i])) for i in apart) + " adaptive round(s) of more restarts there: "
                     "more steps may find a larger one")
    floor = wc.cfu_at_zero_correlation
    if floor_dominates(floor, cfu, negligible_cfu(model)):
        notes.append(f"the CFU at zero correlation ({floor:.3g}) is more than a tenth of the curve's range: the "
                     "ridge penalty, not confounding, carries the curve")
    if inverse_warnings:
        notes.append(f"the inverse question's searches, at budgets of their own (`inverse` in results.json), warned "
                     f"{inverse_warnings} time(s) that a worst case rested on one restart or found no finite CFU")
    return notes


# ------------------------------------------------------------------------- 3. representations
def representations(scale: Scale, seed: int, log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """Paper 002 on synthetic embeddings: CFRs scored against the true counterfactuals, for a
    classifier and CFR fitted on a balanced and on an aggressively biased split."""
    import cfjax.representations as R
    from cfjax.cli.cfr import analyse

    out = {}
    for j, split in enumerate(("balanced", "aggressive")):
        d = R.synthetic_embeddings(scale.embeddings_n, d=scale.embeddings_d, split=split, key=seed,
                                   sample_key=seed + 1 + j)
        log(f"    {split} split: {scale.embeddings_n} embeddings")
        out[split] = analyse(d.X, d.z, d.y, d.X_cf, d.z_cf, method="orth", ridge=1.0, draws=scale.draws, seed=seed,
                             log=lambda message: log(f"      {message}"))
    return {"n": scale.embeddings_n, "d": scale.embeddings_d, "splits": out}


# ------------------------------------------------------------------------- report
# ------------------------------------------------------------------------- 4. counterfactual training
def training(scale: Scale, out: str, seed: int, study_res: dict[str, Any], log: Callable[[str], None],
             progress: bool | None) -> dict[str, Any]:
    """The training arm on the study's site-A training pool (same sizes and seed), its learned
    counterfactuals from the study's site-A generator; writes ``training/`` (report, results,
    figure)."""
    from cfjax.study import SITE_A
    from cfjax.study import cftraining as ct

    config = dataclasses.replace(scale.arm, study=scale.study)
    fit = study_res["_learned_source"].fits[SITE_A] if "_learned_source" in study_res else None
    res = ct.run_arm(config, os.path.join(out, "training"), key=seed, generator_fit=fit, progress=progress,
                     log=lambda message: log("    " + message))
    return _stable(plain({k: v for k, v in res.items() if k != "config"}, strict=True, shortest=True))


def _training_section(t: dict[str, Any]) -> list[str]:
    from cfjax.study.cftraining import METRICS

    shown = ("auc_a", "auc_b", "sex_effect", "s_flip")
    labels = {m: label for m, label, _ in METRICS}
    alpha = max(r["bias"] for r in t["rows"])
    rows = [r for r in t["rows"] if r["bias"] in (0.0, alpha)]
    lines = ["", "## 4. Counterfactual training against the sex shortcut", "",
             f"The study's site-A training pool with paper 000's sex corruption at α = {alpha:g}; each method "
             f"trained with {len(rows[0]['auc_a']['per_seed'])} seeds as one vmapped ensemble per counterfactual source, K = {t['k']} counterfactuals per training "
             "unit rendered (exact) or decoded (learned) inside the training step. Seed means [95% bootstrap "
             "intervals over test units and seeds]; the CF sex effect is mean p(do(F)) − p(do(M)) on site A's exact "
             "test counterfactuals (`training/report.md` has every metric).", "",
             "| method | " + " | ".join(labels[m] for m in shown) + " |", "|---" * (len(shown) + 1) + "|"]
    for r in rows:
        name = "unbiased (reference)" if r["bias"] == 0 else r["method"]
        lines.append(f"| {name} | " + " | ".join(
            f"{r[m]['mean']:.3f} [{r[m]['ci95'][0]:.3f}, {r[m]['ci95'][1]:.3f}]" for m in shown) + " |")
    lines += ["", *[f"- {f}" for f in t["findings"]], "", "![CF sex effect per method](training/sex_effect.png)"]
    return lines


def _f(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{digits}f}"


def _grid_caption(grid: dict[str, Any] | None) -> str:
    """What to read in the counterfactual grid: which interventions change the image most, and
    how far the learned counterfactuals are from the exact ones."""
    text = ("(a) Each row: a test unit's factual image, then its counterfactuals under do(sex, age) (sex 0 then 1, "
            "ages 20 to 90); the exact rows re-render the unit's own image noise with the new parents")
    if grid is None or "mean_abs_change" not in grid:
        return text + "."
    if grid["learned"]:
        text += ", the learned rows decode the noise the HVAE abducted under each intervention"
    labels, exact = grid["interventions"], np.asarray(grid["mean_abs_change"]["exact"])
    order = np.argsort(-exact, kind="stable")
    text += (". (b) Counterfactual − factual (red: brighter, blue: darker), one colour scale for all. "
             "The exact images change most under "
             + ", ".join(f"{labels[j]} ({exact[j]:.3f})" for j in order[:3])
             + f" and least under {labels[order[-1]]} ({exact[order[-1]]:.3f}), as mean absolute pixel change "
             "over these units")
    if grid["learned"]:
        learned = np.asarray(grid["mean_abs_change"]["learned"])
        r = np.corrcoef(exact, learned)[0, 1] if exact.std() > 0 and learned.std() > 0 else float("nan")
        text += (f"; the learned images change by {learned.mean():.3f} on average (exact {exact.mean():.3f}), "
                 f"correlation over the {len(labels)} interventions {_f(float(r), 2)}, and differ from the exact "
                 f"ones by a pixel MAE of {grid['learned_vs_exact_mae']:.3f}: where a learned row differs from its "
                 "exact row, the difference is the generator's error, not an effect of the intervention")
    return text + f". The {grid['size']}×{grid['size']} images are drawn enlarged (nearest pixels), not re-rendered."


def _study_section(res: dict[str, Any], grid: dict[str, Any] | None = None) -> list[str]:
    from cfjax.study.paper import PAPER_RISK
    from cfjax.study.report import classifier_section, scatter_caption

    cfg = res["config"]
    a = res["settings"]["A"]
    names = a["names"]
    lines = ["## 1. Counterfactual marginalisation of trained classifiers (paper 000)", "",
             f"Synthetic chest radiographs ({cfg['size']}×{cfg['size']}), {cfg['n_train']} training units per site; "
             f"the ten predictors of paper 000 ({len(res['seeds'])} seeds of each trained one, all trained as one "
             "vmapped ensemble per site); K = 16 counterfactual images per test unit (do(sex) × 8 ages, effusion "
             "held at its observed value). Setting A (train and test on site A), seed means:", "",
             "| predictor | AUC | ΔAUC sex | R_orig | R_CM | R_IE | CVaR 0.1 | s_flip | CF sex effect |",
             "|---|---|---|---|---|---|---|---|---|"]
    for i, p in enumerate(names):
        ps = a["per_seed"]
        lines.append(f"| {p} | {np.mean(a['auc'][i]):.3f} | {np.mean(a['delta_auc']['sex'][i]):.3f} | "
                     + " | ".join(f"{np.mean(ps[f][i]):.3f}" for f in ("risk_orig", "risk_cm", "risk_ie", "cvar_0.1",
                                                                        "s_flip"))
                     + f" | {np.mean(a['cf_sex_effect'][i]):+.3f} |")
    c = a["ctc"]
    lines += ["", "Correct transition count (CTC, of 9 transitions of increasing bias; higher: the metric tracks the "
              "bias better), per setting, with paper 000's on CheXpert / MIMIC-CXR:", "",
              "| setting | R_orig | R_CM | R_IE | s_flip | paper R_orig | paper R_CM | paper R_IE |",
              "|---|---|---|---|---|---|---|---|"]
    for name, r in res["settings"].items():
        c, pr = r["ctc"], PAPER_RISK[name][-1]
        lines.append(f"| {name} | {c['risk_orig']:.2f} | {c['risk_cm']:.2f} | {c['risk_ie']:.2f} | "
                     f"{c['s_flip']:.2f} | {pr[0]:.2f} | {pr[1]:.2f} | {pr[2]:.2f} |")
    lines += [""] + classifier_section(res.get("classifier_checks"), heading=False)[:-1]
    if "learned" in res:
        comp = res["learned"]["comparison"]
        lines += ["", "The same with learned counterfactual images (an HVAE image mechanism per site, "
                  "`cfjax.generative`), exact → learned:", "",
                  "| setting | CTC R_CM | CTC R_IE | CTC s_flip | pixel MAE vs exact |", "|---|---|---|---|---|"]
        for name, cm in comp.items():
            g = res["learned"]["settings"][name]["generator"]
            lines.append(f"| {name} | " + " | ".join(
                f"{cm['ctc'][f]['exact']:.2f} → {cm['ctc'][f]['learned']:.2f}" for f in ("risk_cm", "risk_ie", "s_flip"))
                + f" | {g['pixel_mae']:.4f} |")
    lines += ["", "![counterfactual images](counterfactual_grid.png)", "", _grid_caption(grid), "",
              "![reliability diagrams](marginalisation/reliability_A.png)", "",
              "![ΔAUC against stability](marginalisation/scatter_A.png)", "",
              scatter_caption(a, "marginalisation/scatter_A_supplementary.png"), "",
              "Every table of the study, with bootstrap intervals, the three settings, Proposition 1 and the "
              "exact-vs-learned comparison: [marginalisation/report.md](marginalisation/report.md)."]
    return lines


def _g(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.3g}"


def _at(wc: dict[str, Any], p: float) -> float | None:
    hits = [c for q, c in zip(wc["p_max"], wc["cfu"]) if abs(q - p) < 1e-9]
    return hits[0] if hits else None


def _inverse_line(name: str, inv: dict[str, Any]) -> str:
    what = {"true_correlation_cfu": "the CFU at the true correlation",
            "blind_baseline": "the blind baseline's unfairness"}[name]
    if inv.get("reached"):
        return f"{what} ({_g(inv['level'])}) from p_max = {_f(inv['p_max'], 3)}"
    return (f"{what} ({_g(inv['level'])}) is not reached below p_max = 0.99 (largest worst case "
            f"{_g(inv.get('max_cfu'))})")


def _sensitivity_section(s: dict[str, Any]) -> list[str]:
    wc, inv = s["worst_case"], s["inverse"]
    lines = ["", "## 2. Sensitivity of counterfactual fairness to unmeasured confounding (paper 001)", "",
             f"The built-in synthetic SCM (n = {s['n']}; A → G → L with correlated errors, true correlation "
             f"{s['true_correlation']}). The fair predictor's counterfactual unfairness (CFU) would be 0 if the "
             "errors were uncorrelated (Model A) and the model unpenalised; the curve is its worst case over every "
             "correlation within the budget p_max, found by a differentiable search. Its floor, the CFU at zero "
             f"correlation (P = I), is {_g(wc.get('cfu_at_zero_correlation'))}: at a ridge penalty λ > 0 (here λ = "
             f"{_g(s['model']['lam'])}) the penalty's shrinkage artefact, not unfairness caused by confounding.", "",
             "| p_max | " + " | ".join(_budget(p) for p in wc["p_max"]) + " |",
             "|---|" + "---|" * len(wc["p_max"]),
             "| worst-case CFU | " + " | ".join(_g(v) for v in wc["cfu"]) + " |"]
    iv = s.get("intervals")
    if iv:
        lines.append(f"| {iv['level']:.0%} interval ({iv['resamples']} resamples) | " + " | ".join(
            f"[{_g(a)}, {_g(b)}]" for a, b in zip(iv["lower"]["worst_case"], iv["upper"]["worst_case"])) + " |")
    for name, other in (s.get("predictors") or {}).items():
        lines.append(f"| {name} predictor's worst case | " + " | ".join(_g(v) for v in other["cfu"]) + " |")
    lines += ["",
             f"- CFU at the true correlation (0.5): {_g(s['true_cfu'])}; the worst case within p_max = 0.5 is "
             f"{_g(_at(wc, 0.5))} (a search over every correlation matrix within the budget, so at least as large)."
             if _at(wc, 0.5) is not None else f"- CFU at the true correlation (0.5): {_g(s['true_cfu'])}.",
             "- Baselines' unfairness (mean squared difference from the fair predictor): "
             + ", ".join(f"{k} {_g(v)}" for k, v in s["baselines"].items()) + ".",
             "- Inverse question, the smallest budget whose worst case reaches a level: "
             + "; ".join(_inverse_line(name, v) for name, v in inv.items()) + "."]
    if s.get("benchmarks"):
        lines.append("- " + _benchmark_line(s["benchmarks"], iv))
    if s.get("predictors"):
        lines.append("- The baselines' own worst-case CFU (how much their output moves between a unit's factual and "
                     "counterfactual worlds) stays near " + " and ".join(
                         f"{_g(min(v['cfu']))} ({k})" for k, v in s["predictors"].items())
                     + " at every budget: what the fair predictor buys.")
    lines += ["", "![worst-case CFU curve](cfu_curve.png)"]
    if s.get("caption"):  # what to conclude from the figure (cfu_curve.pdf: the same, vector)
        lines += ["", f"*Figure: {s['caption']}*"]
    if s.get("warnings"):
        lines += ["", "The search warned (a small demo search; `cfjax sensitivity` and `worst_case` take more "
                  "restarts and steps):", ""] + [f"- {w}" for w in s["warnings"]]
    return lines


def _benchmark_line(b: dict[str, Any], iv: dict[str, Any] | None) -> str:
    """The demo's benchmarks in words: the budget each multiple of each yardstick implies (with
    its interval), the CFU there, or why no such confounder exists."""
    parts = []
    for v, z in enumerate(b["yardsticks"]):
        for i, k in enumerate(b["k"]):
            if not b["feasible"][v][i] or not b["p_max"][v][i]:
                short = "impossible (it would explain all of a feature's error variance)" if not b["feasible"][v][i] \
                    else "no correlation (it causes one feature)"
                parts.append(f"{k:g} × {z}: {short}")
                continue
            ci = ""
            if iv and "benchmark_budget" in iv["lower"]:
                ci = f" [{_f(iv['lower']['benchmark_budget'][v][i], 3)}, {_f(iv['upper']['benchmark_budget'][v][i], 3)}]"
            parts.append(f"{k:g} × {z}: p_max {_f(b['p_max'][v][i], 3)}{ci}, CFU there {_g(b['cfu'][v][i])}")
    return ("Benchmarks, a confounder k times as strong as an observed parent (its partial R² in each feature's "
            "equation; definitions §3.9): " + "; ".join(parts) + ".")


def _representations_section(r: dict[str, Any]) -> list[str]:
    lines = ["", "## 3. Counterfactual representations (paper 002)", "",
             f"Synthetic embeddings (n = {r['n']}, d = {r['d']}) with a binary concept and true counterfactual "
             "embeddings. A logistic classifier and the counterfactual representations (CFRs) are fitted per "
             "split; PIP (agreement of the decisions on CFRs and on the true counterfactuals, higher is better) "
             "and ATV (error of the estimated treatment effect, lower is better) against the no-intervention "
             "baseline (the factual embedding as its own counterfactual).", "",
             "| split | accuracy | TPR gap | PIP | PIP baseline | ATV | ATV baseline | concept readable from x⊥ |",
             "|---|---|---|---|---|---|---|---|"]
    for split, v in r["splits"].items():
        sc = v["scores"]
        gap = v["tpr_gap"]["1"]
        lines.append(f"| {split} | {_f(v['accuracy'])} | {' / '.join(_f(g) for g in gap)} | {_f(sc['pip'])} | "
                     f"{_f(sc['pip_baseline'])} | {_f(sc['atv'])} | {_f(sc['atv_baseline'])} | "
                     f"{_f(v['concept_readout']['accuracy_from_x_perp'])} (majority "
                     f"{_f(v['concept_readout']['majority'])}) |")
    return lines


def report(results: dict[str, Any], study_results: dict[str, Any], times: dict[str, float]) -> str:
    lines = ["# cfjax demo", "",
             f"Generated by `{results['command']}` (seed {results['seed']}); built-in synthetic data, nothing "
             "downloaded. Run times: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()) + ".", ""]
    lines += _study_section(study_results, results["marginalisation"].get("grid"))
    lines += _sensitivity_section(results["sensitivity"])
    lines += _representations_section(results["representations"])
    if "training" in results:
        lines += _training_section(results["training"])
    lines += ["", "## Files", "",
              "`results.json` (every number above and the study's), `run_times.json`, "
              "`counterfactual_grid.png` (and `.pdf`), "
              "`cfu_curve.png`, "
              "`marginalisation/` (the study: report.md, results.json, reliability and ΔAUC-vs-stability figures "
              "per setting, predictions, orbax checkpoints of the classifiers and generators)."]
    return "\n".join(lines) + "\n"


def demo(out: str, *, quick: bool = False, seed: int = 0, command: str = "cfjax demo",
         log: Callable[[str], None] = click.echo, progress: bool | None = None) -> dict[str, Any]:
    """Run the demo into ``out`` (which must exist); returns what ``results.json`` holds."""
    scale = _scales()[1 if quick else 0]
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    log("1/4 counterfactual marginalisation: training classifiers and generators on synthetic chest radiographs")
    study_res, marg = marginalisation(scale, out, seed, command, log, progress)
    times["marginalisation"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    log("2/4 sensitivity of counterfactual fairness: worst-case CFU curve")
    sens = sensitivity(scale, out, seed, log)
    times["sensitivity"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    log("3/4 counterfactual representations on synthetic embeddings")
    reps = representations(scale, seed, log)
    times["representations"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    log("4/4 counterfactual training against the sex shortcut (exact and learned counterfactuals in the step)")
    train_res = training(scale, out, seed, study_res, log, progress)
    times["training"] = time.perf_counter() - t3
    times["total"] = time.perf_counter() - t0
    results = {"command": command, "seed": seed, "quick": quick,
               "scale": plain({"study": dataclasses.asdict(scale.study),
                               "generator": dataclasses.asdict(scale.generator),
                               **{f.name: getattr(scale, f.name) for f in dataclasses.fields(scale)
                                  if f.name not in ("study", "generator", "arm")},
                               "arm": {k: v for k, v in dataclasses.asdict(scale.arm).items() if k != "study"}},
                              strict=True, shortest=True),
               "marginalisation": marg, "sensitivity": sens, "representations": reps, "training": train_res}
    common.write_json(os.path.join(out, "results.json"), results)
    common.write_text(os.path.join(out, "report.md"), report(results, study_res, times))
    # run times and the machine vary between identical runs: beside results.json, not in it
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    resumed = any(t["resumed_from_checkpoint"] for t in study_res["training"].values()) or any(
        g["resumed_from_checkpoint"] for g in study_res.get("learned", {}).get("generator", {}).get("sites", {}).values())
    common.write_json(os.path.join(out, "run_times.json"),
                      {"seconds": times, "cpus": cpus, "date": time.strftime("%Y-%m-%d", time.gmtime()),
                       "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                       "resumed_from_checkpoint": resumed})
    return results


@click.command(epilog=_EXAMPLE, context_settings={"help_option_names": ["-h", "--help"]})
@common.out_option("results/demo")
@common.force_option
@common.seed_option
@common.devices_option
@click.option("--quick", is_flag=True, help="a tiny scale that checks the pipeline in about a minute")
def command(out: str, force: bool, seed: int, quick: bool, devices: int | None) -> None:
    """All three pillars of cfjax on built-in synthetic data: paper 000's study (trained
    classifiers, exact and learned counterfactual images), the sensitivity of counterfactual
    fairness to confounding, and counterfactual representations. Writes report.md,
    results.json and PNG figures into --out.
    """
    if seed < 0:
        raise UserError(f"--seed {seed}: expected a non-negative integer")
    # Before JAX starts: with N devices the ensembles' members are trained and run side by
    # side over them (equal to one device's numbers to float rounding).
    common.use_devices(devices)
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UserError("the demo draws figures with matplotlib: pip install 'cfjax[plots]' "
                        "(make demo installs it)") from None
    folder = common.prepare_out(out, force)
    cmd = "cfjax demo" + (" --quick" if quick else "") + (f" --seed {seed}" if seed else "")
    t0 = time.perf_counter()
    demo(folder, quick=quick, seed=seed, command=cmd)
    click.echo(f"cfjax demo: done in {time.perf_counter() - t0:.0f} s; report: {os.path.join(folder, 'report.md')} "
               f"(results.json and figures beside it)")
