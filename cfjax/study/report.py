"""The study's report: figures, exact-vs-learned comparison, findings, ``report.md`` and
``results.json`` payloads."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from cfjax import figures
from cfjax import metrics as cm
from cfjax.io import atomic_write_bytes
from cfjax.study import plots as study_plots
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
    SOURCE_DEPENDENT,
    SOURCE_FREE,
    STABILITY,
)

__all__ = [
    "reliability_figure",
    "scatter_figure",
    "scatter_caption",
    "compare_settings",
    "mean_relative_move",
    "learned_summary",
    "learned_report",
    "findings",
    "classifier_section",
    "write_report",
    "grid_caption",
    "summary_section",
]


def _nanmean(v) -> float:
    v = np.asarray(v, np.float64)
    return float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")


def _slug(name: str) -> str:
    return name.replace("->", "_to_")


# ------------------------------------------------------------------------- figures
#: the reliability figure's panels: the basic predictor and the most sex- and age-biased ones
RELIABILITY_PANELS = (
    ("basic", "basic"),
    ("sex0.95", "sex0.95 (strongest sex bias)"),
    ("age0.95", "age0.95 (strongest age bias)"),
)
#: the caption line of :func:`reliability_figure` in the report: what it shows, what to conclude
RELIABILITY_CAPTION = (
    "*Smoothed reliability of the basic predictor and the most sex- and age-biased ones (first "
    "seed): the mean label (Gaussian kernel reflected at 0 and 1, width σ\\* of the smooth ECE) "
    "against the prediction, original (blue) and counterfactually marginalised (red); shaded: 95% "
    "bootstrap bands over the test units (drawn where the kernel holds at least one unit); beneath: "
    "the predictions' density; legend: smECE [95% "
    "interval]. Where a curve leaves the diagonal by more than its band, the predictions are "
    "miscalibrated there; where the two bands overlap, marginalising over the counterfactuals "
    "leaves calibration unchanged within sampling error.*"
)


def reliability_figure(
    res: Mapping[str, Any], path: str, title: str, *, resamples: int = 200
) -> list[str]:
    """Smoothed reliability (:func:`cfjax.metrics.plots.reliability_diagram`) of the predictors of
    :data:`RELIABILITY_PANELS` present in ``res`` (the first three otherwise), original and
    marginalised on one axis per predictor, with percentile bootstrap bands over the test units
    (``resamples``, one key: paired) and the predictions' density beneath; PNG and PDF at
    ``path``. Returns the paths written."""
    from cfjax import figures
    from cfjax.metrics.plots import reliability_diagram

    names, pl = list(res["names"]), res["_plots"]
    shown = [(n, t) for n, t in RELIABILITY_PANELS if n in names] or [(n, n) for n in names[:3]]
    fig = figures.pyplot().figure(figsize=(4.8 * len(shown), 5.6))
    grid = fig.add_gridspec(2, len(shown), height_ratios=(4, 1), hspace=0.06, wspace=0.12)
    for j, (name, panel_title) in enumerate(shown):
        i = names.index(name)
        main = fig.add_subplot(grid[0, j])
        bands = [
            cm.reliability_band(pl[key][i], pl["y"], key=0, resamples=resamples)
            for key in ("p_obs", "p_bar")
        ]
        reliability_diagram(
            *bands, ax=(main, fig.add_subplot(grid[1, j], sharex=main)), title=panel_title
        )
        if j:
            main.set_ylabel("")  # the first panel's label serves the row
    fig.suptitle(title, fontsize=11)
    return figures.save_figure(fig, path)


def scatter_figure(res: Mapping[str, Any], path: str, title: str) -> list[str]:
    """ΔAUC against stability (:func:`cfjax.study.plots.delta_auc_figure`): the main figure
    (:data:`~cfjax.study.plots.MAIN_PANELS`, the measures the findings discuss) at ``path`` and
    the supplementary one (every other attribute × metric) beside it as ``<stem>_supplementary``,
    each as PNG and PDF. Returns the paths written."""
    stem = os.path.splitext(path)[0]
    written = figures.save_figure(
        study_plots.delta_auc_figure(res, study_plots.MAIN_PANELS, title=title), path
    )
    supplementary = study_plots.delta_auc_figure(
        res, study_plots.SUPPLEMENTARY_PANELS, title=f"{title}: the other attributes and metrics"
    )
    return written + figures.save_figure(supplementary, f"{stem}_supplementary.png")


def _interval(c: Mapping[str, Any]) -> str:
    """`` [lo, hi]`` of a correlation's Pearson r, or nothing when it has no interval."""
    iv = c.get("pearson_interval")
    return "" if iv is None else f" [{_fmt(iv[0], 2)}, {_fmt(iv[1], 2)}]"


def scatter_caption(res: Mapping[str, Any], supplementary: str | None = None) -> str:
    """The caption line of :func:`scatter_figure`'s main figure: what it shows and what to
    conclude, from r's bootstrap interval for each measure (``supplementary``: a link to the
    supplementary figure)."""
    cs = res["correlations"]["sex"]
    groups: dict[str, list[str]] = {"above": [], "below": [], "spans": [], "none": []}
    for _, f in study_plots.MAIN_PANELS:
        iv = cs[f].get("pearson_interval")
        if iv is None or not all(v is not None and np.isfinite(v) for v in iv):
            groups["none"].append(f)
        else:
            groups["above" if iv[0] > 0 else "below" if iv[1] < 0 else "spans"].append(f)
    n = len(DELTA_NAMES)
    parts = []
    if groups["above"]:
        parts.append(
            f"lies above 0 for {', '.join(groups['above'])}: ΔAUC over sex grows with "
            f"{'this instability measure' if len(groups['above']) == 1 else 'these instability measures'} "
            "(paper 000's finding)"
        )
    if groups["below"]:
        parts.append(
            f"lies below 0 for {', '.join(groups['below'])}: ΔAUC over sex falls as "
            f"{'it grows' if len(groups['below']) == 1 else 'they grow'} (against paper 000)"
        )
    if groups["spans"]:
        parts.append(
            f"includes 0 for {', '.join(groups['spans'])}: no association distinguishable from none "
            f"with {n} predictors"
        )
    if groups["none"]:
        parts.append(f"is undefined for {', '.join(groups['none'])}")
    return (
        "*ΔAUC over sex against the four instability measures of the findings. Markers: the "
        f"{n} predictors' seed means (black: basic, red: sex-biased, blue: age-biased; darker: stronger bias); "
        "bars: their 95% bootstrap intervals over the test units (the tables' resamples; ΔAUC, a max − min over "
        "strata, grows under resampling, so its bar can sit above the point); small dots: the predictor-seed "
        f"pairs r and ρ run over; titles: r [95% percentile bootstrap interval over the {n} predictors, each "
        "resampled with its seeds]. To conclude: r's interval "
        + "; it ".join(parts)
        + "."
        + (
            f" The other attributes and metrics: [supplementary figure]({supplementary})."
            if supplementary
            else ""
        )
        + "*"
    )


def _triple(exact: float, learned: float) -> dict[str, float]:
    return {
        "exact": float(exact),
        "learned": float(learned),
        "delta": float(learned) - float(exact),
    }


def compare_settings(exact: Mapping[str, Any], learned: Mapping[str, Any]) -> dict[str, Any]:
    """One setting's tables computed with exact and with learned counterfactuals, side by side:
    per metric and predictor the seed means ``{"exact", "learned", "delta"}`` (delta = learned −
    exact), the CTC per metric, the counterfactual shortcut effects, Proposition 1's
    counterfactual variance, the ΔAUC(sex)–stability correlations and the ranking agreement;
    ``unchanged_max_abs_delta``: the largest change of a metric of the factual predictions
    alone (0: both runs scored the same factual predictions)."""
    names = list(exact["names"])
    fields = [f for f in exact["per_seed"] if f in learned["per_seed"]]
    metrics = {}
    for f in fields:
        e = np.asarray(exact["per_seed"][f], np.float64).mean(axis=1)
        v = np.asarray(learned["per_seed"][f], np.float64).mean(axis=1)
        metrics[f] = {p: _triple(e[i], v[i]) for i, p in enumerate(names)}
    ctc = {
        f: _triple(exact["ctc"][f], learned["ctc"][f]) for f in exact["ctc"] if f in learned["ctc"]
    }
    effects = {}
    for eff in ("cf_sex_effect", "cf_age_effect"):
        e, v = np.asarray(exact[eff]).mean(axis=1), np.asarray(learned[eff]).mean(axis=1)
        effects[eff] = {p: _triple(e[i], v[i]) for i, p in enumerate(names)}
    ve = np.asarray(exact["proposition1"]["var_cf"]).mean(axis=(0, 1))
    vl = np.asarray(learned["proposition1"]["var_cf"]).mean(axis=(0, 1))
    prop1 = {"common": _triple(ve[0], vl[0]), "rare": _triple(ve[2], vl[2])}
    corr = {
        f: _triple(
            exact["correlations"]["sex"][f]["pearson"], learned["correlations"]["sex"][f]["pearson"]
        )
        for f, _ in STABILITY
    }
    agree = {
        k: _triple(
            _nanmean(exact["ranking_agreement"][k]["kendall_tau"]),
            _nanmean(learned["ranking_agreement"][k]["kendall_tau"]),
        )
        for k in exact["ranking_agreement"]
    }
    unchanged = [
        np.abs(np.asarray(learned["per_seed"][f]) - np.asarray(exact["per_seed"][f])).max()
        for f in SOURCE_FREE
        if f in fields
    ]
    unchanged.append(np.abs(np.asarray(learned["auc"]) - np.asarray(exact["auc"])).max())
    return {
        "metrics": metrics,
        "ctc": ctc,
        "cf_effects": effects,
        "proposition1_var_cf": prop1,
        "correlations_sex_pearson": corr,
        "ranking_agreement_tau": agree,
        "label_changed": _triple(exact["label_changed"], learned["label_changed"]),
        "unchanged_max_abs_delta": float(np.max(unchanged)),
    }


def mean_relative_move(comparison: Mapping[str, Any], field: str) -> float:
    """Mean over the predictors of |learned − exact| / |exact| of one metric's seed means
    (predictors whose exact value is 0 left out)."""
    rel = [
        abs(t["delta"]) / abs(t["exact"])
        for t in comparison["metrics"][field].values()
        if np.isfinite(t["delta"]) and t["exact"] != 0
    ]
    return float(np.mean(rel)) if rel else float("nan")


def learned_summary(comparisons: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Sentences on the largest moves from exact to learned counterfactuals (measured)."""
    fields = [f for f in SOURCE_DEPENDENT if all(f in c["ctc"] for c in comparisons.values())]
    cells = [(name, f, c["ctc"][f]) for name, c in comparisons.items() for f in fields]
    moved = sorted((x for x in cells if x[2]["delta"] != 0), key=lambda x: -abs(x[2]["delta"]))
    out = []
    if moved:
        out.append(
            f"The CTC moves in {len(moved)} of {len(cells)} (setting, metric) cells "
            f"(mean |ΔCTC| {np.mean([abs(x[2]['delta']) for x in cells]):.2f} of 9); the largest moves: "
            + "; ".join(
                f"{f} in {name} {t['exact']:.2f} → {t['learned']:.2f} ({t['delta']:+.2f})"
                for name, f, t in moved[:4]
            )
            + "."
        )
    else:
        out.append(
            f"No CTC moves: all {len(cells)} (setting, metric) cells are equal with learned counterfactuals."
        )
    for f in ("risk_cm", "risk_ie"):
        ch = [(name, comparisons[name]["ctc"][f]) for name in comparisons]
        wins = [
            name
            for name, t in ch
            if (t["exact"] > comparisons[name]["ctc"]["risk_orig"]["exact"])
            != (t["learned"] > comparisons[name]["ctc"]["risk_orig"]["learned"])
        ]
        lab = "R_CM" if f == "risk_cm" else "R_IE"
        out.append(
            f"Whether {lab}'s CTC beats R_orig's (paper 000's claim) "
            + (
                "gets the same verdict under both sources in every setting."
                if not wins
                else f"gets a different verdict with learned counterfactuals in {', '.join(wins)}."
            )
        )
    sex_rows = [f"sex{a:.2f}" for a in BIAS_STRENGTHS]
    age_rows = [f"age{a:.2f}" for a in BIAS_STRENGTHS]

    def kept(c, eff, rows):
        e = np.mean([c["cf_effects"][eff][p]["exact"] for p in rows])
        v = np.mean([c["cf_effects"][eff][p]["learned"] for p in rows])
        return f"{e:+.3f} → {v:+.3f}"

    out.append(
        "The shortcut read off the counterfactuals (mean over the three biased predictors): CF sex effect of "
        "the sex-biased "
        + "; ".join(
            f"{name} {kept(c, 'cf_sex_effect', sex_rows)}" for name, c in comparisons.items()
        )
        + "; CF age effect of the age-biased "
        + "; ".join(
            f"{name} {kept(c, 'cf_age_effect', age_rows)}" for name, c in comparisons.items()
        )
        + " (exact → learned)."
    )
    rel = sorted(
        ((name, f, mean_relative_move(c, f)) for name, c in comparisons.items() for f in fields),
        key=lambda x: -np.nan_to_num(x[2], nan=-1.0),
    )
    out.append(
        "Metric values, mean relative move over the 10 predictors: largest "
        + "; ".join(f"{f} in {name} {v:.0%}" for name, f, v in rel[:4])
        + "; smallest "
        + "; ".join(f"{f} in {name} {v:.1%}" for name, f, v in rel[::-1][:3] if np.isfinite(v))
        + "."
    )
    return out


def _fmt_delta(v: float, digits: int = 3) -> str:
    if v is None or not np.isfinite(v):
        return "nan"
    if abs(v) >= 100:
        return f"{v:+.1f}"
    return f"{v:+.{digits}f}"


def _compare_table(
    comp: Mapping[str, Any],
    names: list[str],
    fields: tuple[str, ...],
    headers: tuple[str, ...],
    digits: int = 3,
) -> list[str]:
    lines = [
        "| predictor | " + " | ".join(f"{h} exact | {h} learned | Δ" for h in headers) + " |",
        "|---|" + "---|---|---|" * len(fields),
    ]
    for p in names:
        lines.append(
            f"| {p} | "
            + " | ".join(
                f"{_fmt(comp['metrics'][f][p]['exact'], digits)} | {_fmt(comp['metrics'][f][p]['learned'], digits)} | "
                f"{_fmt_delta(comp['metrics'][f][p]['delta'], digits)}"
                for f in fields
            )
            + " |"
        )
    lines.append(
        "| **CTC** | "
        + " | ".join(
            f"**{comp['ctc'][f]['exact']:.2f}** | **{comp['ctc'][f]['learned']:.2f}** | **{comp['ctc'][f]['delta']:+.2f}**"
            for f in fields
        )
        + " |"
    )
    return lines


def learned_report(results: Mapping[str, Any]) -> list[str]:
    """The report's section on learned counterfactuals: every table with exact | learned | Δ."""
    lr = results["learned"]
    gen, comps = lr["generator"], lr["comparison"]
    g = gen["settings"]["generator"]
    lines = [
        "",
        "## Exact vs learned counterfactuals",
        "",
        f"Every table above recomputed with **learned** counterfactual images: per site a conditional HVAE "
        f"image mechanism (`cfjax.generative`, channels {tuple(g['hvae']['channels'])}, latent dims "
        f"{tuple(g['hvae']['latent_dims'])}, {g['steps']} steps of batch {g['batch_size']}, EMA {g['ema_decay']}) trained on "
        "that site's training split (factual images and parents)"
        + (
            f" on the ELBO plus the counterfactual regulariser (weight {g['cf_weight']:g}; its anti-causal "
            "predictors of sex and age trained on the same split)"
            if g.get("cf_weight")
            else " on the ELBO"
        )
        + "; the parent mechanisms are the true ones, so "
        "the counterfactual parents are exactly the exact source's (effusion "
        + (
            "held at its observed value"
            if results["counterfactual_label"] == "fixed"
            else "following age"
        )
        + "), and each test unit's image noise is abducted once (one posterior draw) and decoded under "
        "every counterfactual parent vector. Same classifiers, same keys and bootstrap resamples; "
        "Δ = learned − exact, of seed means.",
        "",
    ]
    lines += [
        "| site | training units | generator time | final loss (per pixel) | resumed |",
        "|---|---|---|---|---|",
    ]
    for s, info in gen["sites"].items():
        lines.append(
            f"| {s} | {info['n_train']} | {info['seconds']:.0f} s | {info['final_loss']:.4f} | "
            f"{'yes' if info['resumed_from_checkpoint'] else 'no'} |"
        )
    gs = {name: lr["settings"][name]["generator"] for name in comps}
    lines += [
        "",
        "Pixel MAE of the learned against the exact counterfactual images (images in [0, 1]): "
        + "; ".join(
            f"{name} {g['pixel_mae']:.4f} (do(sex, age)), {g['pixel_mae_race']:.4f} (do(race))"
            for name, g in gs.items()
        )
        + ". Mean absolute change from the factual image under do(sex, age), learned vs exact: "
        + "; ".join(
            f"{name} {g['change_learned']:.4f} vs {g['change_exact']:.4f}"
            for name, g in gs.items()
            if "change_learned" in g
        )
        + ". Largest change of a metric of the factual predictions alone "
        f"(R_orig, Brier, ECE, smECE, MCE, AUC): {max(c['unchanged_max_abs_delta'] for c in comps.values()):.1e} "
        "(they cannot move).",
        "",
        "### How much each metric and each CTC moves",
        "",
    ]
    lines += [f"- {x}" for x in learned_summary(comps)]
    lines += [
        "",
        "| metric | "
        + " | ".join(f"{n}: CTC exact | CTC learned | ΔCTC | mean rel. move" for n in comps)
        + " |",
        "|---|" + "---|---|---|---|" * len(comps),
    ]
    for f in SOURCE_DEPENDENT + (
        ("risk_ie_cf_labels",)
        if all("risk_ie_cf_labels" in c["ctc"] for c in comps.values())
        else ()
    ):
        lines.append(
            f"| {f} | "
            + " | ".join(
                f"{c['ctc'][f]['exact']:.2f} | {c['ctc'][f]['learned']:.2f} | {c['ctc'][f]['delta']:+.2f} | "
                f"{mean_relative_move(c, f):.1%}"
                for c in comps.values()
            )
            + " |"
        )
    lines += [
        "",
        "Mean rel. move: mean over the 10 predictors of |learned − exact| / |exact| (seed means).",
    ]
    for name, comp in comps.items():
        names = list(results["settings"][name]["names"])
        lines += ["", f"### Setting {name}: exact | learned | Δ (seed means)", "", "Risk:", ""]
        lines += _compare_table(
            comp,
            names,
            ("risk_cm", "risk_ie", "cvar_0.5", "cvar_0.25", "cvar_0.1", "risk_wc"),
            ("R_CM", "R_IE", "CVaR 0.5", "CVaR 0.25", "CVaR 0.1", "R_WC"),
        )
        lines += ["", "Calibration of the marginalised predictions:", ""]
        lines += _compare_table(
            comp,
            names,
            ("brier_cm", "ece_cm", "smece_cm", "mce_cm"),
            ("Brier", "ECE", "smECE", "MCE"),
        )
        lines += ["", "Stability (CTC counts moves towards *less* stable):", ""]
        lines += _compare_table(
            comp,
            names,
            tuple(f for f, _ in STABILITY),
            ("s_var", "s_flip", "d_obs", "score_shift", "Spearman", "Kendall τ_b", "rank change"),
            digits=4,
        )
        lines += [
            "",
            "Counterfactual shortcut effects:",
            "",
            "| predictor | CF sex effect exact | learned | Δ | CF age effect exact | learned | Δ |",
            "|---|---|---|---|---|---|---|",
        ]
        ef = comp["cf_effects"]
        for p in names:
            lines.append(
                f"| {p} | "
                + " | ".join(
                    f"{ef[e][p]['exact']:+.3f} | {ef[e][p]['learned']:+.3f} | {ef[e][p]['delta']:+.3f}"
                    for e in ("cf_sex_effect", "cf_age_effect")
                )
                + " |"
            )
        p1, co, ag = (
            comp["proposition1_var_cf"],
            comp["correlations_sex_pearson"],
            comp["ranking_agreement_tau"],
        )
        lines += [
            "",
            "Proposition 1, Var CF (mean over predictors × seeds): "
            + "; ".join(
                f"{z} {p1[z]['exact']:.2e} → {p1[z]['learned']:.2e}" for z in ("common", "rare")
            )
            + ". ΔAUC(sex)–stability Pearson r: "
            + ", ".join(f"{f} {co[f]['exact']:.2f} → {co[f]['learned']:.2f}" for f, _ in STABILITY)
            + ". Label-free vs labelled ranking, mean Kendall τ: "
            + ", ".join(f"{k} {t['exact']:.2f} → {t['learned']:.2f}" for k, t in ag.items())
            + ".",
            "",
            f"![reliability diagrams, learned counterfactuals](reliability_learned_{_slug(name)}.png)",
            "",
            RELIABILITY_CAPTION,
            "",
            f"![ΔAUC vs stability, learned counterfactuals](scatter_learned_{_slug(name)}.png)",
            "",
            scatter_caption(
                lr["settings"][name], f"scatter_learned_{_slug(name)}_supplementary.png"
            ),
        ]
    return lines


# ------------------------------------------------------------------------- report
def _fmt(v: float, digits: int = 3) -> str:
    if v is None or not np.isfinite(v):
        return "nan"
    if abs(v) >= 100:
        return f"{v:.1f}"
    return f"{v:.{digits}f}"


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
def _f2(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.2f}"


def grid_caption(grid: Mapping[str, Any] | None) -> str:
    """What to read in the counterfactual image grid (:func:`cfjax.study.demo.image_grid`'s
    summary): which interventions change the image most, and how far the learned
    counterfactuals are from the exact ones."""
    text = (
        "(a) Each row: a test unit's factual image, then its counterfactuals under do(sex, age) (sex 0 then 1, "
        "ages 20 to 90); the exact rows re-render the unit's own image noise with the new parents"
    )
    if grid is None or "mean_abs_change" not in grid:
        return text + "."
    if grid["learned"]:
        text += ", the learned rows decode the noise the HVAE abducted under each intervention"
    labels, exact = grid["interventions"], np.asarray(grid["mean_abs_change"]["exact"])
    order = np.argsort(-exact, kind="stable")
    text += (
        ". (b) Counterfactual − factual (red: brighter, blue: darker), one colour scale for all. "
        "The exact images change most under "
        + ", ".join(f"{labels[j]} ({exact[j]:.3f})" for j in order[:3])
        + f" and least under {labels[order[-1]]} ({exact[order[-1]]:.3f}), as mean absolute pixel change "
        "over these units"
    )
    if grid["learned"]:
        learned = np.asarray(grid["mean_abs_change"]["learned"])
        r = (
            np.corrcoef(exact, learned)[0, 1]
            if exact.std() > 0 and learned.std() > 0
            else float("nan")
        )
        text += (
            f"; the learned images change by {learned.mean():.3f} on average (exact {exact.mean():.3f}), "
            f"correlation over the {len(labels)} interventions {_f2(float(r))}, and differ from the exact "
            f"ones by a pixel MAE of {grid['learned_vs_exact_mae']:.3f}: where a learned row differs from its "
            "exact row, the difference is the generator's error, not an effect of the intervention"
        )
    return (
        text
        + f". The {grid['size']}×{grid['size']} images are drawn enlarged (nearest pixels), not re-rendered."
    )


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
    with ``grid`` (:func:`grid_caption`), setting A's figures; its lines, from the ``## title``
    heading.

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
