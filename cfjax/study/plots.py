"""The study's figures of ΔAUC against stability (paper 000's Figure 3), with their uncertainty.

Each panel puts one stability metric (x) against the ΔAUC over one attribute (y) for the seven
predictors of the correlation (basic, sex-biased, age-biased; :data:`~cfjax.study.paper.DELTA_NAMES`):
a marker per predictor at its seed means, bars for the 95% bootstrap intervals of both seed means
(over the test units, the resamples of the study's tables), small dots for the predictor-seed
pairs the correlation runs over, and Pearson r with its bootstrap interval over the predictors
(:func:`cfjax.study.correlations.correlation`) in the panel's title.

:data:`MAIN_PANELS` are the four instability measures the report's findings discuss against
ΔAUC over sex; :data:`SUPPLEMENTARY_PANELS` the other attribute × metric pairs. Functions take
one setting's results as :func:`cfjax.study.evaluate_setting` returns them (arrays indexed as
``res["names"]``) or as ``results.json`` holds them (keyed by predictor), and return the
matplotlib ``Figure``; save it with :func:`cfjax.figures.save_figure` (PNG and PDF).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import numpy.typing as npt

from cfjax import _checks, figures
from cfjax.study.families import BIAS_STRENGTHS
from cfjax.study.paper import ATTRIBUTES, DELTA_NAMES, STABILITY

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import Formatter

__all__ = ["MAIN_PANELS", "SUPPLEMENTARY_PANELS", "METRIC_LABELS", "delta_auc_figure"]

#: (attribute, metric) of the main figure: the instability measures the findings discuss, against ΔAUC over sex
MAIN_PANELS = (("sex", "s_flip"), ("sex", "s_var"), ("sex", "d_obs"), ("sex", "score_shift"))
#: every other (attribute, metric) pair, for the supplementary figure
SUPPLEMENTARY_PANELS = tuple(
    (a, f) for a in ATTRIBUTES for f, _ in STABILITY if (a, f) not in MAIN_PANELS
)
#: axis labels of the stability metrics
METRIC_LABELS = {
    "s_var": "S_var (spread over interventions)",
    "s_flip": "S_flip (share of flipped decisions)",
    "d_obs": "D_obs (observed ≠ marginalised decision)",
    "score_shift": "score shift |p_obs − p̄|",
    "spearman": "Spearman ρ(p_obs, p̄)",
    "kendall_tau_b": "Kendall τ_b(p_obs, p̄)",
    "rank_change": "mean rank change",
}
_ATTRIBUTE_LABELS = {"sex": "sex", "age_group": "age group", "race": "race"}
_FONT = 9  # ticks and legend; labels and titles one point larger


def _style(name: str) -> tuple[str, str | tuple[float, float, float, float], str]:
    """Marker, colour and legend label of a predictor: basic black circles, sex-biased red
    triangles, age-biased blue squares, darker with a stronger bias."""
    plt = figures.pyplot()
    if name == "basic":
        return "o", "black", "basic"
    level = BIAS_STRENGTHS.index(float(name[3:]))
    shade = 0.45 + 0.25 * level
    if name.startswith("sex"):
        return "^", plt.get_cmap("Reds")(shade), f"sex-biased {name[3:]}"
    return "s", plt.get_cmap("Blues")(shade), f"age-biased {name[3:]}"


def _rows(
    res: Mapping[str, Any], value: npt.ArrayLike | Mapping[str, npt.ArrayLike], what: str
) -> np.ndarray:
    """The DELTA_NAMES rows of ``value``: an array indexed as ``res["names"]`` or a mapping by name."""
    try:
        if isinstance(value, Mapping):
            return np.stack([np.asarray(value[p], np.float64) for p in DELTA_NAMES])
        names = list(res["names"])
        return np.asarray(value, np.float64)[[names.index(p) for p in DELTA_NAMES]]
    except (KeyError, ValueError, IndexError) as e:
        _checks.fail(
            "res", f"{what} with a row for each of {DELTA_NAMES}", f"{type(e).__name__}: {e}"
        )


def _check_res(res: object, panels: Sequence[tuple[str, str]]) -> None:
    if not isinstance(res, Mapping):
        _checks.fail(
            "res",
            "one setting's results (a mapping, as cfjax.study.evaluate_setting returns)",
            type(res).__name__,
        )
    need = (
        "names",
        "delta_auc",
        "delta_auc_ci95_seed_mean",
        "per_seed",
        "ci95_seed_mean",
        "correlations",
    )
    missing = [k for k in need if k not in res]
    if missing:
        _checks.fail("res", f"the fields {need}", f"a mapping without {missing}")
    for attr, metric in panels:
        for field, key in (
            ("delta_auc", attr),
            ("delta_auc_ci95_seed_mean", attr),
            ("per_seed", metric),
            ("ci95_seed_mean", metric),
        ):
            if key not in res[field]:
                _checks.fail("res", f"res[{field!r}][{key!r}]", "none")
        if metric not in res["correlations"].get(attr, {}):
            _checks.fail("res", f"res['correlations'][{attr!r}][{metric!r}]", "none")


def _check_panels(panels: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    metrics = tuple(f for f, _ in STABILITY)
    try:
        out = tuple((str(a), str(f)) for a, f in panels)
    except (TypeError, ValueError):
        _checks.fail("panels", "a sequence of (attribute, metric) pairs", repr(panels))
    if not out:
        _checks.fail("panels", "at least one (attribute, metric) pair", repr(panels))
    for a, f in out:
        if a not in ATTRIBUTES or f not in metrics:
            _checks.fail(
                "panels",
                f"pairs of an attribute in {ATTRIBUTES} and a metric in {metrics}",
                repr((a, f)),
            )
    return out


def _interval_text(c: Mapping[str, Any]) -> str:
    r, iv = c["pearson"], c.get("pearson_interval")
    if r is None or not math.isfinite(r):
        return "r undefined (a constant axis)"
    text = f"r = {r:.2f}"
    if iv is not None and all(v is not None and math.isfinite(v) for v in iv):
        text += f" [{iv[0]:.2f}, {iv[1]:.2f}]"
    rho = c.get("spearman")
    if rho is not None and math.isfinite(rho):
        text += f",  ρ = {rho:.2f}"
    return text


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _factor(formatter: Formatter) -> str:
    """A ScalarFormatter's factor as text: ``×10⁻⁴`` for a power of ten alone (its offset text
    ``1e-4``), the offset text itself when it also subtracts an offset (``1e-08+2.5e-03``),
    ``""`` for none."""
    text = formatter.get_offset()
    power = re.fullmatch(r"1e([−-]?)0*(\d+)", text)
    if power:
        return (
            "×10"
            + ("-" if power.group(1) else "").translate(_SUPERSCRIPT)
            + power.group(2).translate(_SUPERSCRIPT)
        )
    return text


def _panel(ax: Axes, res: Mapping[str, Any], attr: str, metric: str, pairs: bool) -> list[Line2D]:
    """Draw one panel; returns the predictors' marker artists (in DELTA_NAMES order)."""
    from matplotlib.ticker import MaxNLocator

    d_seed = _rows(res, res["delta_auc"][attr], f"res['delta_auc'][{attr!r}]")  # (7, S)
    v_seed = _rows(res, res["per_seed"][metric], f"res['per_seed'][{metric!r}]")
    d_ci = _rows(
        res, res["delta_auc_ci95_seed_mean"][attr], f"res['delta_auc_ci95_seed_mean'][{attr!r}]"
    )  # (7, 2)
    v_ci = _rows(res, res["ci95_seed_mean"][metric], f"res['ci95_seed_mean'][{metric!r}]")
    d, v = d_seed.mean(axis=1), v_seed.mean(axis=1)
    handles = []
    for i, name in enumerate(DELTA_NAMES):
        marker, colour, label = _style(name)
        if pairs:
            ax.scatter(
                v_seed[i],
                d_seed[i],
                s=14,
                marker=marker,
                color=colour,
                alpha=0.35,
                linewidths=0,
                zorder=2,
            )
        # percentile intervals need not centre on the seed mean (ΔAUC is biased upward under
        # resampling), so the bars run from lo to hi rather than mean ± error
        ax.hlines(d[i], v_ci[i, 0], v_ci[i, 1], colors=[colour], linewidth=1.3, zorder=3)
        ax.vlines(v[i], d_ci[i, 0], d_ci[i, 1], colors=[colour], linewidth=1.3, zorder=3)
        (h,) = ax.plot(
            [v[i]],
            [d[i]],
            linestyle="none",
            marker=marker,
            markersize=8,
            color=colour,
            markeredgecolor="white",
            markeredgewidth=0.6,
            label=label,
            zorder=4,
        )
        handles.append(h)
    ax.set_title(_interval_text(res["correlations"][attr][metric]), fontsize=_FONT + 1)
    # tiny values (S_var ~ 1e-4) get a ×10^k factor instead of long decimals that collide; the
    # factor goes into the axis label, where it cannot run into the label or the title. Plain
    # text, not mathtext: parsing every tick label as mathtext was a sixth of drawing a figure.
    ax.ticklabel_format(style="sci", scilimits=(-2, 3), useMathText=False)
    ax.tick_params(labelsize=_FONT)
    for axis, label in (
        (ax.xaxis, METRIC_LABELS[metric]),
        (ax.yaxis, f"ΔAUC over {_ATTRIBUTE_LABELS[attr]}"),
    ):
        axis.set_major_locator(MaxNLocator(nbins=4))
        formatter = axis.get_major_formatter()
        formatter.set_locs(axis.get_majorticklocs())  # type: ignore[arg-type]  # stub: a list only
        factor = _factor(formatter)  # for these limits: a caller who changes them relabels the axis
        axis.get_offset_text().set_visible(False)
        axis.set_label_text(f"{label} [{factor}]" if factor else label, fontsize=_FONT + 1)
    ax.grid(True, color="0.9", linewidth=0.6, zorder=0)
    return handles


@overload
def delta_auc_figure(
    res: Mapping[str, Any],
    panels: Sequence[tuple[str, str]] = ...,
    *,
    ncols: int | None = ...,
    axes: None = ...,
    title: str | None = ...,
    pairs: bool = ...,
) -> Figure: ...
@overload
def delta_auc_figure(
    res: Mapping[str, Any],
    panels: Sequence[tuple[str, str]] = ...,
    *,
    ncols: int | None = ...,
    axes: Axes | Sequence[Axes] | np.ndarray,
    title: str | None = ...,
    pairs: bool = ...,
) -> Figure | SubFigure: ...
def delta_auc_figure(
    res: Mapping[str, Any],
    panels: Sequence[tuple[str, str]] = MAIN_PANELS,
    *,
    ncols: int | None = None,
    axes: Axes | Sequence[Axes] | np.ndarray | None = None,
    title: str | None = None,
    pairs: bool = True,
) -> Figure | SubFigure:
    """ΔAUC against stability metrics, one panel per (attribute, metric), with the bootstrap
    interval of every point on both axes and Pearson r with its interval in each title.

    A marker per predictor (:data:`~cfjax.study.paper.DELTA_NAMES`) at its seed means; bars:
    95% percentile bootstrap intervals of the seed means over the test units (the tables'
    resamples; ``res["ci95_seed_mean"]`` and ``res["delta_auc_ci95_seed_mean"]``); small dots
    (``pairs``): the predictor-seed pairs r and ρ are computed on; title: r [95% percentile
    bootstrap interval over the predictors, each resampled with its seeds] and ρ
    (``res["correlations"]``). One legend for the figure, below the panels. Tiny values (S_var
    ~1e-4) are ticked as small numbers with their ×10^k factor in the axis label, computed for
    the drawn limits (a caller who changes the limits relabels the axis).

    Args:
      res: one setting's results (:func:`cfjax.study.evaluate_setting`, or a setting of
        ``results.json``).
      panels: the (attribute, metric) pairs to draw, in order (default :data:`MAIN_PANELS`;
        :data:`SUPPLEMENTARY_PANELS` for the rest).
      ncols: panels per row (default 2 for up to four panels, else 4).
      axes: draw into these matplotlib Axes (one per panel, any shape) instead of a new figure.
      title: the figure's title.
      pairs: draw the predictor-seed pairs as small dots.

    Returns:
      The matplotlib ``Figure``.

    Example:
      >>> from cfjax.study import plots
      >>> plots.MAIN_PANELS[0], len(plots.SUPPLEMENTARY_PANELS)
      (('sex', 's_flip'), 17)
    """
    panels = _check_panels(panels)
    _check_res(res, panels)
    plt = figures.pyplot()
    if axes is not None:
        flat = list(np.ravel(np.asarray(axes, dtype=object)))
        if len(flat) != len(panels) or not all(hasattr(a, "plot") for a in flat):
            _checks.fail(
                "axes", f"{len(panels)} matplotlib Axes (one per panel)", f"{len(flat)} objects"
            )
        fig = flat[0].figure
    else:
        if ncols is None:
            ncols = 2 if len(panels) <= 4 else 4
        ncols = min(_checks.check_positive_int("ncols", ncols), len(panels))
        nrows = -(-len(panels) // ncols)
        fig = plt.figure(figsize=(3.9 * ncols, 3.4 * nrows + 0.9), layout="constrained")
        grid = fig.subplots(nrows, ncols, squeeze=False).ravel()
        for ax in grid[len(panels) :]:
            ax.remove()
        flat = list(grid[: len(panels)])
    handles = []
    for ax, (attr, metric) in zip(flat, panels):
        handles = _panel(ax, res, attr, metric, pairs)
    labels = [h.get_label() for h in handles]
    if pairs:
        from matplotlib.lines import Line2D

        seed = Line2D([], [], linestyle="none", marker="o", markersize=4, color="0.5", alpha=0.5)
        handles, labels = handles + [seed], labels + ["one seed (r runs over these)"]
    fig.legend(
        handles,
        labels,
        loc="outside lower center" if axes is None else "lower center",
        ncol=4,
        fontsize=_FONT,
        frameon=False,
    )
    if title:
        fig.suptitle(title, fontsize=_FONT + 2)
    return fig
