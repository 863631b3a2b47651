"""Figures 2 and 4 of paper 001: the fair predictor's worst-case counterfactual unfairness (CFU)
over the confounding budget ``p_max`` (or its CFU over the bivariate grid), beside the baselines'
unfairness, on scales a reader can read. Needs matplotlib (the ``plots`` extra), imported only
when a figure is drawn (:mod:`cfjax.figures`).

Readable scales. A CFU curve starts at its floor: the CFU at zero correlation (P = I, within
every budget; :func:`~cfjax.sensitivity.cfu_at_zero_correlation`), and no CFU at or below
rounding (:func:`~cfjax.sensitivity.cfu.negligible_cfu`) is a number. Values at or below that
floor are drawn *at* it, with an open triangle, and the floor is named in the legend; the y
range is set by the data above the floor, on a log scale only where they span two decades or
more. When the floor lies far below that range, it gets a thin strip of its own under the
main axes (a broken axis), so that the curve's height is not spent on round-off.

The baselines (the unconstrained and blind predictors) are compared with the fair predictor on
the factual data (:class:`~cfjax.sensitivity.FairModel`): their unfairness does not depend on
the error correlation P, so they are flat lines over ``p_max``. Where they lie too close to tell
apart on the curve's scale, they are drawn there as one labelled band, and again in a panel of
their own on a linear scale zoomed on them. Given every predictor's worst case (a mapping of
:class:`~cfjax.sensitivity.WorstCase`, each of ``model.scoring(name)``), the baselines' own
worst-case CFU under the same Model B counterfactuals is drawn beside the fair predictor's: what
the fair predictor buys at each budget. Benchmarks (budgets that stand for an observed strength
of confounding) are labelled vertical lines.

:func:`~cfjax.sensitivity.plot_contour` (:mod:`cfjax.sensitivity.contour_plot`) draws a
:func:`~cfjax.sensitivity.cfu_surface`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from cfjax import _checks
from cfjax._core import training as _training
from cfjax.sensitivity._curve import (
    _FONT,
    _bands,
    _baseline_panel,
    _baselines,
    _benchmarks,
    _clip,
    _closest_pt,
    _curve_style,
    _draw_baselines,
    _draw_benchmarks,
    _floor_strip,
    _inputs,
    _num,
)
from cfjax.typing import ArrayLike

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from cfjax.sensitivity.fitting import FairModel

__all__ = ["CurveStyle", "plot_curve", "curve_caption"]

_DECADES = 2.0  # the data above the floor span at least this many decades: a log scale
_APART_PT = 4.0  # baselines closer than this (points, 1/72 inch) on the curve's scale are merged
_PAD = 10**0.25  # a log axis' margin around its data (a quarter decade)
_FLOOR_MARKER: dict[str, Any] = dict(marker="v", mfc="white", ms=6, mew=1.2, ls="none")
_AT = 1 + 1e-6  # a value within this factor of the floor is at it (rounding of two routes to P = I)


@dataclasses.dataclass(frozen=True)
class CurveStyle:
    """The labels of :func:`plot_curve`'s figure.

    Attributes:
      xlabel: the x axis' label.
      ylabel: the y axis' label.
      title: the figure's title (None: none).
      label: the legend's name of a single curve (default "worst-case CFU" over ``p_max``,
        "CFU" otherwise); with a mapping of WorstCases the curves are "<name> predictor".
    """

    xlabel: str = "p_max"
    ylabel: str = "counterfactual unfairness"
    title: str | None = None
    label: str | None = None


#: :func:`plot_curve`'s keywords of earlier releases: old name → (group argument, field).
_PLOT_CURVE_LEGACY = {
    "xlabel": ("style", "xlabel"),
    "ylabel": ("style", "ylabel"),
    "title": ("style", "title"),
    "label": ("style", "label"),
}


def _fold_plot_curve(old: dict[str, Any], kwargs: dict[str, Any]) -> str:
    """:func:`plot_curve`'s old keywords: ``lower``/``upper`` are ``low``/``high``, the labels
    a :class:`CurveStyle`."""
    spelled = []
    for before, after in (("lower", "low"), ("upper", "high")):
        if before in old:
            if kwargs.get(after) is not None:
                raise TypeError(f"plot_curve() got both {before}= and {after}=")
            kwargs[after] = old.pop(before)
            spelled.append(f"{after}=")
    if old:
        spelled.append(
            _training.regroup("plot_curve", old, kwargs, _PLOT_CURVE_LEGACY, {"style": CurveStyle})
        )
    return ", ".join(spelled)


@_training.legacy_keywords(_fold_plot_curve)
def plot_curve(
    x: Any,
    cfu: ArrayLike | Mapping[str, ArrayLike] | None = None,
    *,
    baselines: Mapping[str, Any] | None = None,
    low: Any = None,
    high: Any = None,
    baseline_bands: Mapping[str, tuple[Any, Any]] | None = None,
    floor: float | None = None,
    model: FairModel | None = None,
    true_value: tuple[float, float] | None = None,
    benchmarks: Mapping[str, Any] | None = None,
    ax: Axes | None = None,
    style: CurveStyle | None = None,
) -> Figure:
    """Draw CFU curves and the baselines' unfairness on readable scales; returns the Figure.

    Args:
      x: a :class:`~cfjax.sensitivity.WorstCase` (its ``p_max``, ``cfu`` and, unless ``floor``
        is given, its ``cfu_at_zero_correlation`` are drawn), or the budgets ``p_max`` (or the
        grid's correlations p) ``(B,)``; or predictor name → WorstCase over the same budgets,
        e.g. ``{"fair": worst_case(model, ...), "blind": worst_case(model.scoring("blind"), ...)}``:
        every predictor's worst-case CFU, one curve each (the fair predictor's first, in its
        colour; each baseline's in the colour of its flat line), so the figure shows what the
        budget buys. Their floor is the lowest of their CFUs at zero correlation (P = I is within
        every budget, so no curve's worst case is below its own); ``low``/``high`` and the
        bands are keyed by predictor name; the model's ``baseline_unfairness`` (a different
        quantity: the baselines' gap to the fair predictor) is not drawn unless ``baselines`` is
        passed.
      cfu: with an array ``x``: the CFU at each, ``(B,)``, or name → ``(B,)`` for several
        curves of the fair predictor (e.g. two recipes); None with a WorstCase. NaN points
        (e.g. too close to singular P, or a budget without a finite worst case) are left out.
      baselines: name → unfairness of each baseline predictor: a float (it does not depend
        on P: a flat line, as ``FairModel.baseline_unfairness``) or ``(B,)``. Default: the
        model's, when ``model`` is given.
      low, high: the ends of an interval of the curve, ``(B,)`` each (name → ``(B,)`` for
        several curves, for any of their names), drawn as a band; both or neither.
      baseline_bands: name → ``(low, high)`` of a baseline, floats or ``(B,)`` each, drawn as
        bands.
      floor: the curve's numerical floor (default: the WorstCase's CFU at zero correlation, or
        none); raised to the model's rounding level
        (:func:`~cfjax.sensitivity.cfu.negligible_cfu`) when ``model`` is given. Values at or
        below it are drawn at it.
      model: the :class:`~cfjax.sensitivity.FairModel` behind the curve (optional): its rounding
        level and baselines.
      true_value: ``(p, cfu)`` of a known confounding (a benchmark), drawn as a star.
      benchmarks: label → ``p_max`` (a float) or ``(p_max, cfu)``: budgets that stand for an
        observed level of confounding (e.g. ``{"A ×1": 0.2, "A ×2": 0.4}``, the correlations an
        observed covariate's strength implies, :meth:`~cfjax.sensitivity.Benchmarks.marks`),
        drawn as labelled vertical lines; a CFU given there is drawn as a marker on the line
        (at the floor when it is below).
      ax: an axes to draw into (everything on it: no floor strip, no baselines' panel; values
        at a floor of 0 on a log scale are then left out); None: a new figure.
      style: the axes' labels, the figure's title and a single curve's legend name
        (:class:`CurveStyle`; None: its defaults). The keywords ``xlabel``, ``ylabel``,
        ``title``, ``label``, ``lower`` and ``upper`` of earlier releases still work, with a
        DeprecationWarning.

    Returns:
      The matplotlib Figure; its first axes is the curves' axes, the fair predictor's curve its
      first line.

    Example:
      >>> fig = plot_curve([0.0, 0.5, 0.9], [1e-18, 2e-9, 4e-6], floor=1e-15,
      ...                  baselines={"unconstrained": 2.13, "blind": 2.16})
      >>> [ax.get_yscale() for ax in fig.axes]  # curve, floor strip, baselines' own scale
      ['log', 'linear', 'linear']
    """
    from cfjax import figures

    style = CurveStyle() if style is None else style
    if not isinstance(style, CurveStyle):
        _checks.fail("style", "a CurveStyle or None", type(style).__name__)
    xlabel, ylabel, title = style.xlabel, style.ylabel, style.title
    xs, curves, labels, floor, floor_why, baselines = _inputs(
        x, cfu, floor, model, baselines, style.label, xlabel
    )
    marks = _benchmarks(benchmarks)
    lows, highs = _bands(low, high, curves, xs.shape)
    bases, base_bands = _baselines(baselines, baseline_bands, xs.shape)
    if true_value is not None:
        tv = np.asarray(true_value, np.float64)
        if tv.shape != (2,) or not np.isfinite(tv).all():
            _checks.fail("true_value", "a pair (p, cfu) of finite numbers", repr(true_value))
    if ax is not None and not (hasattr(ax, "figure") and hasattr(ax, "plot")):
        _checks.fail("ax", "a matplotlib Axes or None", type(ax).__name__)
    plt = figures.pyplot()

    # The y range: every drawn value above the floor (curves, bands, benchmark, baselines).
    ref = -np.inf if floor is None else floor
    data = (
        [v for v in curves.values()]
        + list(lows.values())
        + list(highs.values())
        + list(bases.values())
    )
    data += [b for pair in base_bands.values() for b in pair]
    if true_value is not None:
        data.append(np.asarray([true_value[1]], np.float64))
    data.append(np.asarray([c for _, c in marks.values() if c is not None], np.float64))
    values = np.concatenate([np.ravel(v) for v in data])
    values = values[np.isfinite(values) & (values > ref * _AT)]
    log = values.size > 0 and values.min() > 0 and np.log10(values.max() / values.min()) >= _DECADES
    at_floor = floor is not None and any(
        (np.isfinite(v) & (v <= floor * _AT)).any() for v in curves.values()
    )
    if log:
        lo, hi = values.min() / _PAD, values.max() * _PAD
        near = floor is not None and floor > 0 and floor >= lo / 10
        strip = at_floor and not near and ax is None
        if at_floor and floor > 0 and not strip:
            lo = floor / _PAD
    else:
        span = np.ptp(values) if values.size else 0.0
        if values.size == 0:
            lo = hi = 0.0 if floor is None else floor
        else:
            lo, hi = values.min(), values.max()
        if floor is not None and (at_floor or floor >= lo - 0.5 * span):
            lo = min(lo, floor)
        pad = 0.06 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.05
        lo, hi = lo - pad, hi + pad
        strip = False

    merged = len(bases) > 1 and _closest_pt(bases, log, lo, hi, ax) < _APART_PT
    panel = merged and ax is None
    own = ax is None  # a figure of our own: its legend goes below the axes, off the curves
    if ax is None:
        fig = plt.figure(figsize=(7.0 if panel else 5.4, 4.8), layout="constrained")
        grid = fig.add_gridspec(
            2 if strip else 1,
            2 if panel else 1,
            height_ratios=[6, 1] if strip else [1],
            width_ratios=[3, 1.1] if panel else [1],
        )
        ax = fig.add_subplot(grid[0, 0])
        low_ax = fig.add_subplot(grid[1, 0], sharex=ax) if strip else None
        side = fig.add_subplot(grid[:, 1]) if panel else None
    else:
        fig, low_ax, side = ax.figure, None, None
    handles, marked = [], False

    # The fair predictor's curves: above the floor on the main axes, at the floor as open triangles.
    for i, (name, y) in enumerate(curves.items()):
        color, marker = _curve_style(i, name, labels)
        keep = np.isfinite(y)
        hit = np.zeros_like(keep) if floor is None else keep & (y <= floor * _AT)
        y_at = np.where(hit, 0.0 if floor is None else floor, y)
        y_main = np.where(keep & ~hit, y, np.nan) if strip else np.where(keep, y_at, np.nan)
        if log and not strip:
            y_main = np.where(y_main > 0, y_main, np.nan)
        (line,) = ax.plot(
            xs, y_main, "-", marker=marker, color=color, ms=3.5, lw=1.5, label=labels[name]
        )
        handles.append(line)
        if name in lows:
            lo_b, hi_b = _clip(lows[name], floor), _clip(highs[name], floor)
            if strip:  # above the break only: an interval at the floor is the strip's marker
                hi_b = np.where(hi_b > floor * _AT, hi_b, np.nan)
                lo_b = np.where(np.isnan(hi_b), np.nan, np.maximum(lo_b, lo))
            if log:
                lo_b, hi_b = np.where(lo_b > 0, lo_b, np.nan), np.where(hi_b > 0, hi_b, np.nan)
            handles.append(
                ax.fill_between(
                    xs, lo_b, hi_b, color=color, alpha=0.22, lw=0, label=f"{labels[name]}: interval"
                )
            )
        if floor is not None:
            target = cast("Axes", low_ax if strip else ax)
            if hit.any() and (strip or not log or floor > 0):
                (mk,) = target.plot(
                    xs[hit],
                    np.full(int(hit.sum()), floor),
                    color=color,
                    **_FLOOR_MARKER,
                    label=f"_{name} at the floor"
                    if marked
                    else "at or below the floor (drawn at it)",
                )
                if not marked:
                    handles.append(mk)
                marked = True

    # The floor: a dotted line where it is on the axes (the strip's, or the main's).
    if floor is not None and (strip or lo <= floor <= hi) and (floor > 0 or not log):
        target = cast("Axes", low_ax if strip else ax)
        handles.append(
            target.axhline(
                floor,
                ls=":",
                color="0.35",
                lw=1.0,
                label=f"numerical floor {_num(floor)} ({floor_why})",
            )
        )

    # The baselines: flat lines over p (their unfairness does not depend on P), or one band.
    if merged:
        lo_all = np.min(np.stack(list(bases.values())), axis=0)
        hi_all = np.max(np.stack(list(bases.values())), axis=0)
        names = ", ".join(f"{k} {_num(float(np.nanmean(v)))}" for k, v in bases.items())
        where = " (own scale: right)" if panel else ""
        handles.append(
            ax.fill_between(
                xs,
                lo_all,
                hi_all,
                color="0.3",
                alpha=0.6,
                lw=1.5,
                edgecolor="0.3",
                label=f"baselines: {names}{where}",
            )
        )
    else:
        handles += _draw_baselines(ax, xs, bases, base_bands)
    if true_value is not None:
        tv_y = (
            true_value[1] if floor is None else max(float(true_value[1]), floor)
        )  # at most at the floor
        (star,) = ax.plot([true_value[0]], [tv_y], "k*", ms=10, label="true confounding")
        handles.append(star)
    _draw_benchmarks(ax, marks, floor, log)

    if log:
        ax.set_yscale("log")
    if hi > lo:
        ax.set_ylim(lo, hi)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.tick_params(labelsize=_FONT)
    bottom = ax
    if strip:
        _floor_strip(ax, low_ax, floor)
        bottom = low_ax
    bottom.set_xlabel(xlabel, fontsize=9)
    if title:
        ax.set_title(title, fontsize=10)
    if side is not None:
        handles += _baseline_panel(side, xs, bases, base_bands, xlabel)
    labels = [h.get_label() for h in handles]
    if own:
        fig.legend(
            handles=handles,
            labels=labels,
            fontsize=_FONT,
            loc="outside lower center",
            ncols=2 if len(handles) > 3 else len(handles),
            frameon=False,
        )
    else:
        ax.legend(handles=handles, labels=labels, fontsize=_FONT, loc="best", framealpha=0.85)
    return fig


def curve_caption(
    x: Any,
    cfu: Any = None,
    *,
    baselines: Mapping[str, Any] | None = None,
    floor: float | None = None,
    model: Any = None,
    xlabel: str = "p_max",
    benchmarks: Mapping[str, Any] | None = None,
) -> str:
    """What to conclude from :func:`plot_curve`'s figure, in one sentence or a few: how far the
    fair predictor's worst case stays below the lowest baseline and up to which budget (or from
    which budget it reaches it), and how many values sit at the floor; with a mapping of
    WorstCases, how far each other predictor's worst-case CFU lies above (or below) the first's
    (the fair one's) over the same budgets; with ``benchmarks``, the curve's value at each (the
    CFU given, or the curve's, interpolated linearly). Arguments as :func:`plot_curve`'s (its
    first curve).

    Example:
      >>> text = curve_caption([0.0, 0.9], [1e-18, 4e-6], floor=1e-15, baselines={"blind": 2.0})
      >>> text.split(": ")[0][text.index("Up to"):]
      'Up to p_max = 0.9 it stays below the lowest baseline (blind, 2) by at least a factor 5e+05'
    """
    xs, curves, labels, floor, floor_why, baselines = _inputs(
        x, cfu, floor, model, baselines, None, xlabel
    )
    marks = _benchmarks(benchmarks)
    bases, _ = _baselines(baselines, None, xs.shape)
    name, y = next(iter(curves.items()))
    several = labels[name] != name  # a mapping of WorstCases: a predictor's worst-case CFU
    who = f"The {name} predictor's worst-case CFU" if several else f"The fair predictor's {name}"
    ok = np.isfinite(y)
    if not ok.any():
        return f"No finite {labels[name]} at any {xlabel}."
    parts = []
    if floor is not None:
        n_floor = int((ok & (y <= floor * _AT)).sum())
        parts.append(
            f"{who} rises from its numerical floor {_num(floor)} ({floor_why}; "
            f"{n_floor} of {int(ok.sum())} values at or below it, drawn at it) to {_num(float(y[ok].max()))} "
            f"at {xlabel} = {xs[ok][np.argmax(y[ok])]:.3g}."
        )
    else:
        parts.append(
            f"{who} reaches {_num(float(y[ok].max()))} at {xlabel} = "
            f"{xs[ok][np.argmax(y[ok])]:.3g}."
        )
    if bases:
        level = {k: float(np.nanmin(v)) for k, v in bases.items()}
        low = min(level, key=lambda k: level[k])
        reached = ok & (y >= level[low])
        order = np.argsort(xs)
        first = next((i for i in order if reached[i]), None)
        below = ok & ((xs < xs[first]) if first is not None else True)
        top = float(y[below].max()) if below.any() else np.nan
        until = float(xs[below].max()) if below.any() else np.nan
        factor = level[low] / top if top > 0 else np.inf
        times = "an unbounded factor" if not np.isfinite(factor) else f"a factor {factor:.3g}"
        if first is None:
            parts.append(
                f"Up to {xlabel} = {until:.3g} it stays below the lowest baseline ({low}, {_num(level[low])}) "
                f"by at least {times}: that much confounding does not make it as unfair as a baseline."
            )
        else:
            parts.append(
                f"It reaches the {low} baseline's unfairness ({_num(level[low])}) at {xlabel} = "
                f"{xs[first]:.3g}"
                + (
                    f"; below that (up to {until:.3g}) it stays under it by at least {times}."
                    if below.any()
                    else "."
                )
            )
        if all(np.ptp(v) == 0 for v in bases.values()):
            parts.append(
                "The baselines' unfairness does not depend on the error correlation P: flat lines."
            )
    ref = (
        y if floor is None else np.where(np.isfinite(y), np.maximum(y, floor), y)
    )  # at the floor: drawn at it
    for other, v in list(curves.items())[1:] if several else []:
        both = np.isfinite(v) & np.isfinite(ref) & (ref > 0)
        if not np.isfinite(v).any():
            parts.append(f"The {other} predictor has no finite worst-case CFU.")
            continue
        low, high = _num(float(np.nanmin(v))), _num(float(np.nanmax(v)))
        text = f"The {other} predictor's worst-case CFU is " + (
            f"about {low}" if low == high else f"{low} to {high}"
        )
        if both.any():
            r = v[both] / ref[both]
            low, high = _num(float(r.min())), _num(float(r.max()))
            clipped = floor is not None and (ok & (y <= floor * _AT)).any()
            text += (
                ", "
                + (f"about {low}" if low == high else f"{low} to {high}")
                + f" times the {name} "
                "predictor's at the same budgets"
                + (
                    f" (the {name} predictor's values at or below the floor taken at it)"
                    if clipped
                    else ""
                )
            )
        parts.append(text + ".")
    if marks:
        order = np.argsort(np.where(ok, xs, np.inf))[: int(ok.sum())]
        said = []
        for label, (p, c) in marks.items():
            if c is not None:
                said.append(f"{label} at {xlabel} = {p:.3g} (CFU {_num(c)})")
            elif xs[ok].min() <= p <= xs[ok].max():
                at = float(np.interp(p, xs[order], y[order]))
                said.append(
                    f"{label} at {xlabel} = {p:.3g} ({who[4:] if several else name} "
                    + (
                        "at or below the floor)"
                        if floor is not None and at <= floor * _AT
                        else f"about {_num(at)}, interpolated)"
                    )
                )
            else:
                said.append(f"{label} at {xlabel} = {p:.3g} (outside the budgets evaluated)")
        parts.append("Benchmarks: " + "; ".join(said) + ".")
    return " ".join(parts)
