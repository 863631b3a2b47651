"""The study's report: findings measured from the numbers, the basic classifiers' section,
``report.md`` (:func:`write_report`), the short section of ``cfjax demo``'s report
(:func:`summary_section`) and ``results.json``'s per-predictor layout. Its figures and their
captions are in :mod:`cfjax.study.report_figures`, the exact-vs-learned comparison in
:mod:`cfjax.study.comparison`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from cfjax.io import atomic_write_bytes
from cfjax.study.comparison import _nanmean, learned_report
from cfjax.study.diagnostics import FAR_BELOW
from cfjax.study.families import BIAS_STRENGTHS
from cfjax.study.paper import (
    ATTRIBUTES,
    CALIBRATION,
    DELTA_NAMES,
    PAPER_CALIBRATION,
    PAPER_RISK,
    PAPER_STABILITY_A,
    RISKS,
    SETTINGS,
    SITE_B,
    STABILITY,
)
from cfjax.study.report_figures import (
    RELIABILITY_CAPTION,
    _fmt,
    _interval,
    _slug,
    grid_caption,
    scatter_caption,
)

__all__ = [
    "findings",
    "classifier_section",
    "write_report",
    "summary_section",
]


# ------------------------------------------------------------------------- report
def _metric_table(
    res: Mapping[str, Any],
    fields: tuple[str, ...],
    headers: tuple[str, ...],
    ci: bool,
    digits: int = 3,
) -> list[str]:
    names = res["names"]
    lines = ["| predictor | " + " | ".join(headers) + " |", "|---|" + "---|" * len(headers)]
    for i, p in enumerate(names):
        cells = []
        for f in fields:
            m = res["per_seed"][f][i].mean()
            cell = _fmt(m, digits)
            if ci:
                lo, hi = res["ci95_seed_mean"][f][i]
                cell += f" [{_fmt(lo, digits)}, {_fmt(hi, digits)}]"
            cells.append(cell)
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    lines.append("| **CTC** | " + " | ".join(f"**{res['ctc'][f]:.2f}**" for f in fields) + " |")
    return lines


def findings(results: Mapping[str, Any]) -> list[str]:
    """Findings measured from the numbers, one bullet each."""
    out = []
    for name, _, _ in SETTINGS:
        r = results["settings"][name]
        names = r["names"]
        d_sex, d_age = (
            np.asarray(r["delta_auc"]["sex"]).mean(1),
            np.asarray(r["delta_auc"]["age_group"]).mean(1),
        )
        sex_rows = [names.index(f"sex{a:.2f}") for a in BIAS_STRENGTHS]
        age_rows = [names.index(f"age{a:.2f}") for a in BIAS_STRENGTHS]
        b = names.index("basic")
        sex_eff = np.asarray(r["cf_sex_effect"]).mean(1)
        age_eff = np.asarray(r["cf_age_effect"]).mean(1)
        exceeds_sex = all(d_sex[i] > d_sex[b] for i in sex_rows)
        grows_sex = bool(np.all(np.diff(d_sex[sex_rows]) > 0))
        exceeds_age = all(d_age[i] > d_age[b] for i in age_rows)
        grows_age = bool(np.all(np.diff(d_age[age_rows]) > 0))
        out.append(
            f"**{name}: shortcut, ΔAUC.** ΔAUC over sex: basic {d_sex[b]:.3f}, sex-biased "
            f"{', '.join(f'{d_sex[i]:.3f}' for i in sex_rows)} — {'all exceed' if exceeds_sex else 'not all exceed'} "
            f"basic's, {'growing' if grows_sex else 'not monotone'} with α. ΔAUC over age groups: basic "
            f"{d_age[b]:.3f}, age-biased {', '.join(f'{d_age[i]:.3f}' for i in age_rows)} — "
            f"{'all exceed' if exceeds_age else 'not all exceed'} basic's, {'growing' if grows_age else 'not monotone'} "
            f"with β_age (seed means)."
        )
        out.append(
            f"**{name}: shortcut, counterfactual effect.** Mean p(do(female)) − p(do(male)): basic "
            f"{sex_eff[b]:+.3f}, sex-biased {', '.join(f'{sex_eff[i]:+.3f}' for i in sex_rows)}; mean "
            f"p(do(age 90)) − p(do(age 20)): basic {age_eff[b]:+.3f}, age-biased "
            f"{', '.join(f'{age_eff[i]:+.3f}' for i in age_rows)}."
        )
        ctc = r["ctc"]
        paper = PAPER_RISK[name][-1]
        out.append(
            f"**{name}: CTC.** R_orig {ctc['risk_orig']:.2f}, R_CM {ctc['risk_cm']:.2f}, R_IE {ctc['risk_ie']:.2f} "
            f"(of 9; paper 000: {paper[0]:.2f}, {paper[1]:.2f}, {paper[2]:.2f}). "
            + " ".join(
                f"{lab} {'beats' if ctc[f] > ctc['risk_orig'] else 'ties' if ctc[f] == ctc['risk_orig'] else 'is below'} R_orig"
                + (
                    ""
                    if ctc[f] > ctc["risk_orig"]
                    else " (the paper's finding does NOT reproduce here)"
                )
                + "."
                for f, lab in (("risk_cm", "R_CM"), ("risk_ie", "R_IE"))
            )
            + (
                " **These rest on a basic classifier flagged under Warnings.**"
                if (results.get("classifier_checks") or {}).get(name, {}).get("warning")
                else ""
            )
        )
        cs = r["correlations"]["sex"]
        pos = [
            f
            for f, _ in STABILITY
            if f in ("s_var", "s_flip", "d_obs", "score_shift")
            and np.isfinite(cs[f]["pearson"])
            and cs[f]["pearson"] > 0
        ]
        strong = [f for f in pos if cs[f]["pearson"] >= 0.5]
        intervals = all(
            "pearson_interval" in cs[f] for f in ("s_var", "s_flip", "d_obs", "score_shift")
        )
        sure = [
            f
            for f in pos
            if intervals
            and np.isfinite(cs[f]["pearson_interval"][0])
            and cs[f]["pearson_interval"][0] > 0
        ]
        out.append(
            f"**{name}: stability vs ΔAUC(sex)** over the {len(DELTA_NAMES) * len(r['seeds'])} predictor-seed pairs: "
            + ", ".join(
                f"{f} r = {cs[f]['pearson']:.2f}{_interval(cs[f])} (ρ = {cs[f]['spearman']:.2f})"
                for f in ("s_var", "s_flip", "d_obs", "score_shift")
            )
            + f"; {len(pos)} of 4 instability measures correlate positively, {len(strong)} strongly (r ≥ 0.5)"
            + (
                f", {len(sure)} with r's 95% interval (bootstrap over the predictors) above 0"
                if intervals
                else ""
            )
            + (
                " — as paper 000 reports (strong positive correlation)."
                if len(strong) >= 2
                else " — paper 000's strong positive correlation does NOT reproduce here."
            )
        )
        p1 = r["proposition1"]
        vo, vc = np.asarray(p1["var_obs"]).mean((0, 1)), np.asarray(p1["var_cf"]).mean((0, 1))
        bo, bc = np.asarray(p1["bound_obs"]).mean((0, 1)), np.asarray(p1["bound_cf"]).mean((0, 1))
        out.append(
            f"**{name}: Proposition 1** (race, averaged over the 10 predictors × seeds): rare subgroup "
            f"(race 2, n_z = {p1['n_z'][2]:.0f} of {p1['n']}) Var obs {vo[2]:.2e} vs Var CF {vc[2]:.2e} "
            f"({'below' if vc[2] < vo[2] else 'NOT below'}; σ²/n_z = {bo[2]:.2e}, bound σ²/n = {bc[2]:.2e}, "
            f"CF {'within' if vc[2] <= bc[2] * 1.1 else 'above'} it); common subgroup (race 0, n_z = "
            f"{p1['n_z'][0]:.0f}) Var obs {vo[0]:.2e} vs Var CF {vc[0]:.2e}."
        )
        ag = r["ranking_agreement"]
        out.append(
            f"**{name}: label-free vs labelled ranking** of the 10 predictors (mean over seeds): "
            + "; ".join(
                f"{k}: τ = {_nanmean(v['kendall_tau']):.2f}, {np.mean(v['pairs_same_order']):.0%} of pairs "
                f"ordered alike"
                for k, v in ag.items()
            )
            + ". (τ is undefined for a seed whose label-free metric is constant over the predictors; such seeds "
            "are left out of the mean, and their pairs count as not ordered alike.)"
        )
    return out


def classifier_section(
    checks: Mapping[str, Mapping[str, Any]] | None, heading: bool = True
) -> list[str]:
    """The report's lines on the basic classifiers (:mod:`cfjax.study.diagnostics`): a warning
    per flagged setting, and every setting's test and validation AUC; under a heading
    (``## Warnings`` when a setting is flagged) or, with ``heading=False``, without one. Each
    block ends with an empty line."""
    if not checks:
        return []
    flagged = [c for c in checks.values() if c["warning"]]
    lines = [("## Warnings" if flagged else "## Basic classifiers"), ""] if heading else []
    lines += [f"- **Warning.** {c['warning']}" for c in flagged]
    if flagged:
        lines.append("")
    lines.append(
        "Basic classifier, test AUC [95% bootstrap interval] and validation AUC (seed means): "
        + "; ".join(
            f"{name} {c['auc']:.3f} [{_fmt(c['ci95'][0])}, {_fmt(c['ci95'][1])}], validation "
            f"{c['validation_auc']:.3f}"
            for name, c in checks.items()
        )
        + f". A setting is flagged when the interval reaches 0.5 (chance) or the test AUC is more than "
        f"max({FAR_BELOW:g}, the interval's width) below the validation AUC"
        + ("; none is." if not flagged else ".")
    )
    return lines + [""]


def write_report(results: Mapping[str, Any], out: str) -> None:
    """Write ``out/report.md`` from :func:`cfjax.study.run`'s results (figures already drawn)."""
    cfg, quick = results["config"], results["quick"]
    opt = cfg["predictor"]
    lines = [
        "# Paper 000's study on the synthetic chest SCM: counterfactual marginalisation of trained classifiers",
        "",
        f"Generated by `{results['command']}`"
        f"{' (a **quick** configuration: smaller images, N and steps)' if quick else ''}; "
        f"wall time {results['wall_time_s']:.0f} s"
        + (
            " (training restored from the checkpoints of an earlier run of the same configuration)."
            if any(t["resumed_from_checkpoint"] for t in results["training"].values())
            else "."
        ),
        "",
        f"- Images {cfg['size']}×{cfg['size']}, ChestSCM prevalence {cfg['prevalence']}, difficulty knob "
        f"effusion_size = {cfg['effusion_size']}; training pool {cfg['n_train']} units per site, validation "
        f"{cfg['n_val']}; CNN features {cfg['features']}, AdamW lr {opt['learning_rate']}, ≤ {opt['steps']} steps "
        f"(batch {opt['batch_size']}), early stopping on validation AUC every {opt['eval_every']} steps, "
        f"patience {opt['patience']}.",
        f"- Seven trained predictors × {len(results['seeds'])} seeds = "
        f"{7 * len(results['seeds'])} members trained as ONE vmapped ensemble per training site; the logit "
        "offsets wrap the basic members.",
        "- Sites: A = `Acquisition()` (gain 1, gamma 1, noise 0.04, offset 0); B = "
        f"`Acquisition(gain={SITE_B.gain}, gamma={SITE_B.gamma}, noise={SITE_B.noise}, offset={SITE_B.offset})`.",
        f"- Test sets: the balanced split ({cfg['test_per_cell']} units per sex × age-group cell, effusion "
        f"prevalence {cfg['test_prevalence']} in every cell) for A and B; {cfg['n_natural']} units sampled from "
        "site B's SCM (natural demographics) for A->B.",
        "- K = 16 exact counterfactual images per test unit (do(sex ∈ {M, F}, age ∈ 20, 30, …, 90)), q uniform. "
        "Parents under do(sex, age): sex and age set; race kept; lung size follows (abducted noise); effusion "
        + (
            "held at its observed value (paper 000's setting), so every counterfactual is scored against the "
            "factual label."
            if results["counterfactual_label"] == "fixed"
            else "follows the new age (abducted noise): the images carry counterfactual labels; the definitions §1 metrics "
            "score against the factual label, and `risk_ie_cf_labels` scores R_IE against the counterfactual ones."
        ),
        f"- Bootstrap: {cfg['bootstrap']} paired resamples of test units; intervals are 95% percentile intervals "
        "of the seed mean. Tables show seed means.",
        "",
    ]
    lines += classifier_section(results.get("classifier_checks"))
    lines += ["## Findings (measured)", ""]
    lines += [f"- {f}" for f in findings(results)]
    for name, train_site_name, desc in SETTINGS:
        r = results["settings"][name]
        slug = _slug(name)
        lines += [
            "",
            f"## Setting {name}: trained on site {train_site_name}, tested on the {desc} (n = {r['n']}, "
            f"{r['n_pos']} positive)",
            "",
        ]
        lines += [
            "### AUC and ΔAUC (seed means)",
            "",
            "| predictor | AUC [95% bootstrap interval] | ΔAUC sex | ΔAUC age group | ΔAUC race | CF sex effect | "
            "CF age effect |",
            "|---|---|---|---|---|---|---|",
        ]
        auc_ci = r.get("auc_ci95_seed_mean")
        for i, p in enumerate(r["names"]):
            interval = "" if auc_ci is None else f" [{_fmt(auc_ci[i][0])}, {_fmt(auc_ci[i][1])}]"
            lines.append(
                f"| {p} | {np.mean(r['auc'][i]):.3f}{interval} | "
                + " | ".join(f"{np.mean(r['delta_auc'][a][i]):.3f}" for a in ATTRIBUTES)
                + f" | {np.mean(r['cf_sex_effect'][i]):+.3f} | {np.mean(r['cf_age_effect'][i]):+.3f} |"
            )
        lines += [
            "",
            "CF sex effect: mean over units and ages of p(do(female)) − p(do(male)); CF age effect: "
            "mean over units and sexes of p(do(age 90)) − p(do(age 20)).",
            "",
        ]
        lines += ["### Risk (seed mean [95% bootstrap interval])", ""]
        lines += _metric_table(
            r, RISKS, ("R_orig", "R_CM", "R_IE", "CVaR 0.5", "CVaR 0.25", "CVaR 0.1", "R_WC"), True
        )
        pr = PAPER_RISK[name]
        lines += [
            "",
            f"Paper 000 ({'CheXpert' if name == 'A' else 'MIMIC' if name == 'B' else 'CheXpert → MIMIC'}), "
            "same columns:",
            "",
            "| predictor | R_orig | R_CM | R_IE | CVaR 0.5 | CVaR 0.25 | CVaR 0.1 | R_WC |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for i, p in enumerate(r["names"]):
            lines.append(f"| {p} | " + " | ".join(f"{v:.3f}" for v in pr[i]) + " |")
        lines.append("| **CTC** | " + " | ".join(f"**{v:.2f}**" for v in pr[-1]) + " |")
        if "risk_ie_cf_labels" in r["ctc"]:
            lines += [
                "",
                f"R_IE against the counterfactual labels: CTC {r['ctc']['risk_ie_cf_labels']:.2f}; "
                "per predictor "
                + ", ".join(
                    f"{p} {np.mean(r['per_seed']['risk_ie_cf_labels'][i]):.3f}"
                    for i, p in enumerate(r["names"])
                )
                + ".",
            ]
        lines += ["", "### Calibration (seed mean [95% bootstrap interval])", ""]
        lines += _metric_table(
            r,
            CALIBRATION,
            (
                "Brier",
                "ECE",
                "smECE",
                "MCE",
                "Brier (marg.)",
                "ECE (marg.)",
                "smECE (marg.)",
                "MCE (marg.)",
            ),
            True,
        )
        pc = PAPER_CALIBRATION[name]
        lines += [
            "",
            "Paper 000, original Brier / ECE / MCE then marginalised Brier / ECE / MCE: "
            + "; ".join(
                f"{p} {pc[i, 3]:.3f}/{pc[i, 4]:.3f}/{pc[i, 5]:.3f} → {pc[i, 0]:.3f}/{pc[i, 1]:.3f}/"
                f"{pc[i, 2]:.3f}"
                for i, p in enumerate(r["names"])
            )
            + ".",
            "",
            f"![reliability diagrams](reliability_{slug}.png)",
            "",
            RELIABILITY_CAPTION,
            "",
        ]
        lines += [
            "### Stability (seed mean [95% bootstrap interval]; CTC counts moves towards *less* stable)",
            "",
        ]
        lines += _metric_table(
            r,
            tuple(f for f, _ in STABILITY),
            ("s_var", "s_flip", "d_obs", "score_shift", "Spearman", "Kendall τ_b", "rank change"),
            True,
            digits=4,
        )
        if name == "A":
            ps = PAPER_STABILITY_A
            lines += [
                "",
                "Paper 000 Table 5 (CheXpert; its D_obs is our score_shift; rank change over n = 5180): "
                + "; ".join(
                    f"{p} s_var {ps[i, 0]:.4f}, s_flip {ps[i, 1]:.3f}, shift {ps[i, 2]:.3f}, "
                    f"ρ {ps[i, 3]:.3f}, τ_b {ps[i, 4]:.3f}"
                    for i, p in enumerate(r["names"])
                )
                + ".",
            ]
        lines += [
            "",
            "### ΔAUC against stability over the basic/sex/age predictor-seed pairs",
            "",
            "| attribute | " + " | ".join(f for f, _ in STABILITY) + " |",
            "|---|" + "---|" * len(STABILITY),
        ]
        for attr in ATTRIBUTES:
            c = r["correlations"][attr]
            lines.append(
                f"| {attr} | "
                + " | ".join(
                    f"{c[f]['pearson']:.2f}{_interval(c[f])} / {c[f]['spearman']:.2f}"
                    for f, _ in STABILITY
                )
                + " |"
            )
        lines += [
            "",
            "Cells: Pearson r [95% bootstrap interval over the predictors, each with its seeds] / "
            "Spearman ρ.",
            "",
            f"![ΔAUC vs stability](scatter_{slug}.png)",
            "",
            scatter_caption(r, f"scatter_{slug}_supplementary.png"),
            "",
        ]
        p1 = r["proposition1"]
        lines += [
            "### Proposition 1: subgroup-mean estimators over resampled test sets",
            "",
            f"Attribute race (do(race = z) alone); {p1['resamples']} bootstrap test sets of n = {p1['n']}; "
            f"n_z = {', '.join(f'{v:.0f}' for v in p1['n_z'])}. σ² = Var[g(X) | race = z] on the test set; "
            "σ²_gen = 0 (exact counterfactuals). Observational estimator: its expected variance σ²/n_z; "
            "counterfactual: bounded by σ²/n.",
            "",
            "| predictor | subgroup | Var obs | σ²/n_z | Var CF | bound σ²/n | Var CF / Var obs |",
            "|---|---|---|---|---|---|---|",
        ]
        for i, p in enumerate(r["names"]):
            for label, z in (("common (race 0)", 0), ("rare (race 2)", 2)):
                vo, vc = np.mean(p1["var_obs"][i][:, z]), np.mean(p1["var_cf"][i][:, z])
                lines.append(
                    f"| {p} | {label} | {vo:.2e} | {np.mean(p1['bound_obs'][i][:, z]):.2e} | {vc:.2e} | "
                    f"{np.mean(p1['bound_cf'][i][:, z]):.2e} | {vc / vo:.3f} |"
                )
        lines += [
            "",
            "### Label-free stability ranking vs labelled risk ranking of the 10 predictors",
            "",
            "| label-free ~ labelled | Kendall τ per seed | pairs ordered alike per seed |",
            "|---|---|---|",
        ]
        for k, v in r["ranking_agreement"].items():
            lines.append(
                f"| {k} | {', '.join(f'{t:.2f}' for t in v['kendall_tau'])} | "
                f"{', '.join(f'{s:.0%}' for s in v['pairs_same_order'])} |"
            )
    if "learned" in results:
        lines += learned_report(results)
    lines += [
        "",
        "## Files",
        "",
        "`results.json` (every number; per setting `auc`, `delta_auc`, `ctc`, `per_seed` reports, "
        "`ci95_seed_mean`, `stratified_auc`, `correlations`, `proposition1`, `ranking_agreement`), "
        "`predictions_<setting>.npz` (p_obs (10, S, N), p_cf (10, S, N, K), labels and attributes), "
        "`checkpoints/site_A|B` (orbax), figures as PNG and PDF (`scatter_<setting>_supplementary`: "
        "ΔAUC against the stability metrics the findings leave out).",
        "",
    ]
    if "learned" in results:
        lines[-1:] = [
            "",
            "With learned counterfactuals: `learned` in results.json (`generator`; `settings`, every "
            "number as above; `comparison`: per setting and metric, per predictor, `exact`, `learned`, "
            "`delta`, and the CTC likewise), `predictions_<setting>_learned.npz`, "
            "`checkpoints/generator_site_A|B` (orbax).",
            "",
        ]
    atomic_write_bytes(os.path.join(out, "report.md"), "\n".join(lines).encode())


# ------------------------------------------------------------------------- a short section
def summary_section(
    results: Mapping[str, Any],
    grid: Mapping[str, Any] | None = None,
    *,
    title: str = "Counterfactual marginalisation of trained classifiers (paper 000)",
    folder: str = "marginalisation",
) -> list[str]:
    """The study in a few tables, for a report that links to its full one (``cfjax demo``'s
    first section): setting A's metrics per predictor, the CTC of every setting beside paper
    000's, the basic classifiers, the exact → learned CTC moves, the counterfactual image grid
    with ``grid`` (:func:`~cfjax.study.report_figures.grid_caption`), setting A's figures; its
    lines, from the ``## title`` heading.

    Args:
      results: :func:`cfjax.study.run`'s results (arrays indexed by predictor).
      grid: the image grid's summary (``counterfactual_grid.png`` beside the report), or None.
      title: the section's heading.
      folder: the study's output folder, relative to the report.
    """
    cfg = results["config"]
    a = results["settings"]["A"]
    names = a["names"]
    lines = [
        f"## {title}",
        "",
        f"Synthetic chest radiographs ({cfg['size']}×{cfg['size']}), {cfg['n_train']} training units per site; "
        f"the ten predictors of paper 000 ({len(results['seeds'])} seeds of each trained one, all trained as one "
        "vmapped ensemble per site); K = 16 counterfactual images per test unit (do(sex) × 8 ages, effusion "
        "held at its observed value). Setting A (train and test on site A), seed means:",
        "",
        "| predictor | AUC | ΔAUC sex | R_orig | R_CM | R_IE | CVaR 0.1 | s_flip | CF sex effect |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, p in enumerate(names):
        ps = a["per_seed"]
        lines.append(
            f"| {p} | {np.mean(a['auc'][i]):.3f} | {np.mean(a['delta_auc']['sex'][i]):.3f} | "
            + " | ".join(
                f"{np.mean(ps[f][i]):.3f}"
                for f in ("risk_orig", "risk_cm", "risk_ie", "cvar_0.1", "s_flip")
            )
            + f" | {np.mean(a['cf_sex_effect'][i]):+.3f} |"
        )
    lines += [
        "",
        "Correct transition count (CTC, of 9 transitions of increasing bias; higher: the metric tracks the "
        "bias better), per setting, with paper 000's on CheXpert / MIMIC-CXR:",
        "",
        "| setting | R_orig | R_CM | R_IE | s_flip | paper R_orig | paper R_CM | paper R_IE |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results["settings"].items():
        c, pr = r["ctc"], PAPER_RISK[name][-1]
        lines.append(
            f"| {name} | {c['risk_orig']:.2f} | {c['risk_cm']:.2f} | {c['risk_ie']:.2f} | "
            f"{c['s_flip']:.2f} | {pr[0]:.2f} | {pr[1]:.2f} | {pr[2]:.2f} |"
        )
    lines += [""] + classifier_section(results.get("classifier_checks"), heading=False)[:-1]
    if "learned" in results:
        comp = results["learned"]["comparison"]
        lines += [
            "",
            "The same with learned counterfactual images (an HVAE image mechanism per site, "
            "`cfjax.generative`), exact → learned:",
            "",
            "| setting | CTC R_CM | CTC R_IE | CTC s_flip | pixel MAE vs exact |",
            "|---|---|---|---|---|",
        ]
        for name, cm_ in comp.items():
            g = results["learned"]["settings"][name]["generator"]
            lines.append(
                f"| {name} | "
                + " | ".join(
                    f"{cm_['ctc'][f]['exact']:.2f} → {cm_['ctc'][f]['learned']:.2f}"
                    for f in ("risk_cm", "risk_ie", "s_flip")
                )
                + f" | {g['pixel_mae']:.4f} |"
            )
    lines += [
        "",
        "![counterfactual images](counterfactual_grid.png)",
        "",
        grid_caption(grid),
        "",
        f"![reliability diagrams]({folder}/reliability_A.png)",
        "",
        f"![ΔAUC against stability]({folder}/scatter_A.png)",
        "",
        scatter_caption(a, f"{folder}/scatter_A_supplementary.png"),
        "",
        "Every table of the study, with bootstrap intervals, the three settings, Proposition 1 and the "
        f"exact-vs-learned comparison: [{folder}/report.md]({folder}/report.md).",
    ]
    return lines


def _by_name(res: dict[str, Any]) -> dict[str, Any]:
    """Arrays ``(10, S, ...)`` keyed by predictor name for results.json."""
    names = res["names"]

    def named(v):
        return {p: v[i] for i, p in enumerate(names)}

    out = dict(res)
    out["auc"] = named(res["auc"])
    if "auc_ci95_seed_mean" in res:
        out["auc_ci95_seed_mean"] = named(res["auc_ci95_seed_mean"])
    out["delta_auc"] = {a: named(v) for a, v in res["delta_auc"].items()}
    if "delta_auc_ci95_seed_mean" in res:
        out["delta_auc_ci95_seed_mean"] = {
            a: named(v) for a, v in res["delta_auc_ci95_seed_mean"].items()
        }
    out["stratified_auc"] = {a: named(v) for a, v in res["stratified_auc"].items()}
    out["per_seed"] = {f: named(v) for f, v in res["per_seed"].items()}
    out["ci95_seed_mean"] = {f: named(v) for f, v in res["ci95_seed_mean"].items()}
    out["cf_sex_effect"] = named(res["cf_sex_effect"])
    out["cf_age_effect"] = named(res["cf_age_effect"])
    p1 = dict(res["proposition1"])
    for f in ("var_obs", "var_cf", "bound_obs", "bound_cf", "sigma2"):
        p1[f] = named(p1[f])
    out["proposition1"] = p1
    return out
