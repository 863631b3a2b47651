"""The study report's figures and their captions: the reliability diagrams
(:func:`reliability_figure`, :data:`RELIABILITY_CAPTION`), ΔAUC against stability
(:func:`scatter_figure`, drawn by :mod:`cfjax.study.plots`; :func:`scatter_caption`) and the
caption of ``cfjax demo``'s counterfactual image grid (:func:`grid_caption`); with the number
format and the setting's file-name slug the report's modules share."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from cfjax import figures
from cfjax import metrics as cm
from cfjax.study import plots as study_plots
from cfjax.study.paper import DELTA_NAMES

__all__ = [
    "reliability_figure",
    "scatter_figure",
    "scatter_caption",
    "grid_caption",
]


def _slug(name: str) -> str:
    return name.replace("->", "_to_")


def _fmt(v: float, digits: int = 3) -> str:
    if v is None or not np.isfinite(v):
        return "nan"
    if abs(v) >= 100:
        return f"{v:.1f}"
    return f"{v:.{digits}f}"


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


# ------------------------------------------------------------------------- the image grid
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
