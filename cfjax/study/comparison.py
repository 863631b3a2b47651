"""The study with exact against learned counterfactuals: one setting's tables side by side
(:func:`compare_settings`: exact, learned, Δ per metric, predictor and CTC), the largest moves
(:func:`learned_summary`, :func:`mean_relative_move`) and the report's section on them
(:func:`learned_report`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cfjax.study.families import BIAS_STRENGTHS
from cfjax.study.paper import SOURCE_DEPENDENT, SOURCE_FREE, STABILITY
from cfjax.study.report_figures import RELIABILITY_CAPTION, _fmt, _slug, scatter_caption

__all__ = [
    "compare_settings",
    "mean_relative_move",
    "learned_summary",
    "learned_report",
]


def _nanmean(v) -> float:
    v = np.asarray(v, np.float64)
    return float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")


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
    """Mean over the predictors of ``|learned − exact| / |exact|`` of one metric's seed means
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
