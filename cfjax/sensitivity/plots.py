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
their own on a linear scale zoomed on them.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from cfjax import _checks

__all__ = ["plot_curve", "curve_caption"]

_DECADES = 2.0  # the data above the floor span at least this many decades: a log scale
_APART_PT = 4.0  # baselines closer than this (points, 1/72 inch) on the curve's scale are merged
_PAD = 10 ** 0.25  # a log axis' margin around its data (a quarter decade)
_STYLES = (("--", "s"), ("-.", "D"), (":", "^"), ((0, (5, 1, 1, 1)), "P"))  # baselines' line and marker
_CURVE_MARKERS = ("o", "s", "D", "^", "P", "X")
_FLOOR_MARKER = dict(marker="v", mfc="white", ms=6, mew=1.2, ls="none")
_FONT = 8
_AT = 1 + 1e-6  # a value within this factor of the floor is at it (rounding of two routes to P = I)


def plot_curve(x: Any, cfu: Any = None, *, baselines: Mapping[str, Any] | None = None, lower: Any = None,
               upper: Any = None, baseline_bands: Mapping[str, tuple[Any, Any]] | None = None,
               floor: float | None = None, model: Any = None, true_value: tuple[float, float] | None = None,
               xlabel: str = "p_max", ylabel: str = "counterfactual unfairness", title: str | None = None,
               label: str | None = None, ax: Any = None):
    """Draw CFU curves and the baselines' unfairness on readable scales; returns the Figure.

    Args:
      x: a :class:`~cfjax.sensitivity.WorstCase` (its ``p_max``, ``cfu`` and, unless ``floor``
        is given, its ``cfu_at_zero_correlation`` are drawn), or the budgets ``p_max`` (or the
        grid's correlations p) ``(B,)``.
      cfu: with an array ``x``: the CFU at each, ``(B,)``, or name → ``(B,)`` for several
        curves of the fair predictor (e.g. two recipes); None with a WorstCase. NaN points
        (e.g. too close to singular P, or a budget without a finite worst case) are left out.
      baselines: name → unfairness of each baseline predictor: a float (it does not depend
        on P: a flat line, as ``FairModel.baseline_unfairness``) or ``(B,)``. Default: the
        model's, when ``model`` is given.
      lower, upper: an interval of the curve, ``(B,)`` each (name → ``(B,)`` for several
        curves, for any of their names), drawn as a band; both or neither.
      baseline_bands: name → ``(lower, upper)`` of a baseline, floats or ``(B,)`` each, drawn as
        bands.
      floor: the curve's numerical floor (default: the WorstCase's CFU at zero correlation, or
        none); raised to the model's rounding level
        (:func:`~cfjax.sensitivity.cfu.negligible_cfu`) when ``model`` is given. Values at or
        below it are drawn at it.
      model: the :class:`~cfjax.sensitivity.FairModel` behind the curve (optional): its rounding
        level and baselines.
      true_value: ``(p, cfu)`` of a known confounding (a benchmark), drawn as a star.
      xlabel, ylabel, title: the axes' labels and the figure's title.
      label: the legend's name of a single curve (default "worst-case CFU" over ``p_max``,
        "CFU" otherwise).
      ax: an axes to draw into (everything on it: no floor strip, no baselines' panel; values
        at a floor of 0 on a log scale are then left out); None: a new figure.

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

    xs, curves, floor, floor_why, baselines = _inputs(x, cfu, floor, model, baselines, label, xlabel)
    lows, highs = _bands(lower, upper, curves, xs.shape)
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
    data = [v for v in curves.values()] + list(lows.values()) + list(highs.values()) + list(bases.values())
    data += [b for pair in base_bands.values() for b in pair]
    if true_value is not None:
        data.append(np.asarray([true_value[1]], np.float64))
    values = np.concatenate([np.ravel(v) for v in data])
    values = values[np.isfinite(values) & (values > ref * _AT)]
    log = values.size > 0 and values.min() > 0 and np.log10(values.max() / values.min()) >= _DECADES
    at_floor = floor is not None and any((np.isfinite(v) & (v <= floor * _AT)).any() for v in curves.values())
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
        grid = fig.add_gridspec(2 if strip else 1, 2 if panel else 1, height_ratios=[6, 1] if strip else [1],
                                width_ratios=[3, 1.1] if panel else [1])
        ax = fig.add_subplot(grid[0, 0])
        low_ax = fig.add_subplot(grid[1, 0], sharex=ax) if strip else None
        side = fig.add_subplot(grid[:, 1]) if panel else None
    else:
        fig, low_ax, side = ax.figure, None, None
    handles, marked = [], False

    # The fair predictor's curves: above the floor on the main axes, at the floor as open triangles.
    for i, (name, y) in enumerate(curves.items()):
        color, marker = f"C{[0, 4, 5, 6, 7, 8][i % 6]}", _CURVE_MARKERS[i % len(_CURVE_MARKERS)]
        keep = np.isfinite(y)
        hit = np.zeros_like(keep) if floor is None else keep & (y <= floor * _AT)
        y_at = np.where(hit, 0.0 if floor is None else floor, y)
        y_main = np.where(keep & ~hit, y, np.nan) if strip else np.where(keep, y_at, np.nan)
        if log and not strip:
            y_main = np.where(y_main > 0, y_main, np.nan)
        (line,) = ax.plot(xs, y_main, "-", marker=marker, color=color, ms=3.5, lw=1.5, label=name)
        handles.append(line)
        if name in lows:
            lo_b, hi_b = _clip(lows[name], floor), _clip(highs[name], floor)
            if strip:  # above the break only: an interval at the floor is the strip's marker
                hi_b = np.where(hi_b > floor * _AT, hi_b, np.nan)
                lo_b = np.where(np.isnan(hi_b), np.nan, np.maximum(lo_b, lo))
            if log:
                lo_b, hi_b = np.where(lo_b > 0, lo_b, np.nan), np.where(hi_b > 0, hi_b, np.nan)
            handles.append(ax.fill_between(xs, lo_b, hi_b, color=color, alpha=0.22, lw=0,
                                           label=f"{name}: interval"))
        if floor is not None:
            target = low_ax if strip else ax
            if hit.any() and (strip or not log or floor > 0):
                (mk,) = target.plot(xs[hit], np.full(int(hit.sum()), floor), color=color, **_FLOOR_MARKER,
                                    label=f"_{name} at the floor" if marked else "at or below the floor (drawn at it)")
                if not marked:
                    handles.append(mk)
                marked = True

    # The floor: a dotted line where it is on the axes (the strip's, or the main's).
    if floor is not None and (strip or lo <= floor <= hi) and (floor > 0 or not log):
        target = low_ax if strip else ax
        handles.append(target.axhline(floor, ls=":", color="0.35", lw=1.0,
                                      label=f"numerical floor {_num(floor)} ({floor_why})"))

    # The baselines: flat lines over p (their unfairness does not depend on P), or one band.
    if merged:
        lo_all = np.min(np.stack(list(bases.values())), axis=0)
        hi_all = np.max(np.stack(list(bases.values())), axis=0)
        names = ", ".join(f"{k} {_num(float(np.nanmean(v)))}" for k, v in bases.items())
        where = " (own scale: right)" if panel else ""
        handles.append(ax.fill_between(xs, lo_all, hi_all, color="0.3", alpha=0.6, lw=1.5, edgecolor="0.3",
                                       label=f"baselines: {names}{where}"))
    else:
        handles += _draw_baselines(ax, xs, bases, base_bands)
    if true_value is not None:
        tv_y = true_value[1] if floor is None else max(float(true_value[1]), floor)  # at most at the floor
        (star,) = ax.plot([true_value[0]], [tv_y], "k*", ms=10, label="true confounding")
        handles.append(star)

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
        fig.legend(handles=handles, labels=labels, fontsize=_FONT, loc="outside lower center",
                   ncols=2 if len(handles) > 3 else len(handles), frameon=False)
    else:
        ax.legend(handles=handles, labels=labels, fontsize=_FONT, loc="best", framealpha=0.85)
    return fig


def curve_caption(x: Any, cfu: Any = None, *, baselines: Mapping[str, Any] | None = None, floor: float | None = None,
                  model: Any = None, xlabel: str = "p_max") -> str:
    """What to conclude from :func:`plot_curve`'s figure, in one sentence or three: how far the
    fair predictor's worst case stays below the lowest baseline and up to which budget (or from
    which budget it reaches it), and how many values sit at the floor. Arguments as
    :func:`plot_curve`'s (a single curve).

    Example:
      >>> text = curve_caption([0.0, 0.9], [1e-18, 4e-6], floor=1e-15, baselines={"blind": 2.0})
      >>> text.split(": ")[0][text.index("Up to"):]
      'Up to p_max = 0.9 it stays below the lowest baseline (blind, 2) by at least a factor 5e+05'
    """
    xs, curves, floor, floor_why, baselines = _inputs(x, cfu, floor, model, baselines, None, xlabel)
    bases, _ = _baselines(baselines, None, xs.shape)
    name, y = next(iter(curves.items()))
    ok = np.isfinite(y)
    if not ok.any():
        return f"No finite {name} at any {xlabel}."
    parts = []
    if floor is not None:
        n_floor = int((ok & (y <= floor * _AT)).sum())
        parts.append(f"The fair predictor's {name} rises from its numerical floor {_num(floor)} ({floor_why}; "
                     f"{n_floor} of {int(ok.sum())} values at or below it, drawn at it) to {_num(float(y[ok].max()))} "
                     f"at {xlabel} = {xs[ok][np.argmax(y[ok])]:.3g}.")
    else:
        parts.append(f"The fair predictor's {name} reaches {_num(float(y[ok].max()))} at {xlabel} = "
                     f"{xs[ok][np.argmax(y[ok])]:.3g}.")
    if bases:
        level = {k: float(np.nanmin(v)) for k, v in bases.items()}
        low = min(level, key=level.get)
        reached = ok & (y >= level[low])
        order = np.argsort(xs)
        first = next((i for i in order if reached[i]), None)
        below = ok & ((xs < xs[first]) if first is not None else True)
        top = float(y[below].max()) if below.any() else np.nan
        until = float(xs[below].max()) if below.any() else np.nan
        factor = level[low] / top if top > 0 else np.inf
        times = "an unbounded factor" if not np.isfinite(factor) else f"a factor {factor:.3g}"
        if first is None:
            parts.append(f"Up to {xlabel} = {until:.3g} it stays below the lowest baseline ({low}, {_num(level[low])}) "
                         f"by at least {times}: that much confounding does not make it as unfair as a baseline.")
        else:
            parts.append(f"It reaches the {low} baseline's unfairness ({_num(level[low])}) at {xlabel} = "
                         f"{xs[first]:.3g}" + (f"; below that (up to {until:.3g}) it stays under it by at least {times}."
                                              if below.any() else "."))
        if all(np.ptp(v) == 0 for v in bases.values()):
            parts.append("The baselines' unfairness does not depend on the error correlation P: flat lines.")
    return " ".join(parts)


# ----------------------------------------------------------------------------- inputs
def _inputs(x, cfu, floor, model, baselines, label, xlabel):
    """``(x (B,), name → curve (B,), floor or None, why, baselines)`` from plot_curve's arguments."""
    from cfjax.sensitivity.cfu import negligible_cfu
    from cfjax.sensitivity.problem import FairModel
    from cfjax.sensitivity.search import WorstCase

    name = label or ("worst-case CFU" if xlabel == "p_max" else "CFU")
    why = "CFU at P = I"
    if isinstance(x, WorstCase):
        if cfu is not None:
            _checks.fail("cfu", "None with a WorstCase (its cfu is drawn)", type(cfu).__name__)
        if floor is None:
            floor = x.cfu_at_zero_correlation
        cfu, x = {name: x.cfu}, x.p_max
    xs = np.asarray(x, np.float64)
    if xs.ndim != 1 or xs.size == 0 or not np.isfinite(xs).all():
        _checks.fail("x", "a WorstCase or a non-empty 1-d array of finite budgets", f"shape {xs.shape}")
    if cfu is None:
        _checks.fail("cfu", "the CFU at each x, (B,) or name -> (B,)", "None")
    raw = dict(cfu) if isinstance(cfu, Mapping) else {name: cfu}
    if not raw:
        _checks.fail("cfu", "at least one curve", "an empty mapping")
    curves = {}
    for k, v in raw.items():
        arr = np.asarray(v, np.float64)
        if arr.shape != xs.shape:
            _checks.fail("cfu" if len(raw) == 1 else f"cfu[{k!r}]", f"shape {xs.shape} like x", f"shape {arr.shape}")
        curves[str(k)] = arr
    if floor is not None:
        if isinstance(floor, bool) or not isinstance(floor, (int, float, np.floating, np.integer)) \
                or not np.isfinite(floor) or floor < 0:
            _checks.fail("floor", "None or a finite number >= 0", repr(floor))
        floor = float(floor)
    if model is not None:
        if not isinstance(model, FairModel):
            _checks.fail("model", "None or a FairModel from cfjax.sensitivity.fit", type(model).__name__)
        rounding = negligible_cfu(model)
        if floor is None or rounding > floor:
            floor, why = rounding, "rounding" if floor is None else f"rounding; CFU at P = I {_num(floor)}"
        if baselines is None:
            baselines = {k: float(v) for k, v in model.baseline_unfairness.items()}
    return xs, curves, floor, why, baselines


def _bands(lower, upper, curves, shape):
    """name → lower, name → upper of the curves' intervals (both or neither)."""
    if (lower is None) != (upper is None):
        _checks.fail("upper" if upper is None else "lower", "both lower and upper, or neither", "only one")
    if lower is None:
        return {}, {}
    single = next(iter(curves))
    lows = dict(lower) if isinstance(lower, Mapping) else {single: lower}
    highs = dict(upper) if isinstance(upper, Mapping) else {single: upper}
    if set(lows) != set(highs):
        _checks.fail("upper", f"the names of lower {sorted(lows)}", repr(sorted(highs)))
    out_lo, out_hi = {}, {}
    for k in lows:
        if k not in curves:
            _checks.fail("lower", f"names among the curves {sorted(curves)}", repr(k))
        lo, hi = np.asarray(lows[k], np.float64), np.asarray(highs[k], np.float64)
        for arg, arr in (("lower", lo), ("upper", hi)):
            if arr.shape != shape:
                _checks.fail(arg, f"shape {shape} like x", f"shape {arr.shape}")
        both = np.isfinite(lo) & np.isfinite(hi)
        if (lo[both] > hi[both]).any():
            i = int(np.flatnonzero(lo > hi)[0])
            _checks.fail("lower", "at most upper at every point", f"{lo[i]:.4g} > {hi[i]:.4g} at index {i}")
        out_lo[k], out_hi[k] = lo, hi
    return out_lo, out_hi


def _baselines(baselines, bands, shape):
    """name → ``(B,)`` baseline values (finite), name → ``(lower (B,), upper (B,))``."""
    if baselines is not None and not isinstance(baselines, Mapping):
        _checks.fail("baselines", "a mapping name -> unfairness (a float or (B,))", type(baselines).__name__)
    if bands is not None and not isinstance(bands, Mapping):
        _checks.fail("baseline_bands", "a mapping name -> (lower, upper)", type(bands).__name__)
    out = {}
    for k, v in (baselines or {}).items():
        arr = np.asarray(v, np.float64)
        if arr.shape not in ((), shape) or not np.isfinite(arr).all():
            _checks.fail("baselines", f"finite floats or arrays of shape {shape}", f"{k!r}: {v!r}")
        out[str(k)] = np.broadcast_to(arr, shape).copy()
    out_bands = {}
    for k, pair in (bands or {}).items():
        if str(k) not in out:
            _checks.fail("baseline_bands", f"names among the baselines {sorted(out)}", repr(k))
        try:
            lo, hi = (np.broadcast_to(np.asarray(b, np.float64), shape).copy() for b in pair)
        except (TypeError, ValueError):
            _checks.fail("baseline_bands", f"(lower, upper) floats or arrays of shape {shape}", f"{k!r}: {pair!r}")
        if (lo > hi).any():
            _checks.fail("baseline_bands", "lower at most upper", f"{k!r}: {pair!r}")
        out_bands[str(k)] = (lo, hi)
    return out, out_bands


# ----------------------------------------------------------------------------- drawing
def _num(v: float) -> str:
    return f"{v:.2g}" if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e4) else f"{v:.3g}"


def _clip(v, floor):
    return v if floor is None else np.where(np.isfinite(v), np.maximum(v, floor), v)


def _closest_pt(bases, log, lo, hi, ax) -> float:
    """The smallest vertical distance, in points, between two baselines on the curve's axes."""
    if hi <= lo:
        return 0.0
    t = (lambda v: np.log10(np.maximum(v, 1e-300))) if log else (lambda v: v)
    height = (ax.get_position().height * ax.figure.get_figheight() if ax is not None else 0.6 * 4.0) * 72
    scale = height / (t(hi) - t(lo))
    vals = [t(v) for v in bases.values()]
    return min(float(np.min(np.abs(a - b))) * scale for i, a in enumerate(vals) for b in vals[i + 1:])


def _draw_baselines(ax, xs, bases, bands) -> list:
    """Each baseline a line of its own style, its markers staggered so that lines at one level
    still show every marker; bands where given. Returns the legend's artists."""
    handles = []
    n = max(len(bases), 1)
    for i, (name, v) in enumerate(bases.items()):
        ls, mk = _STYLES[i % len(_STYLES)]
        color = f"C{1 + i}"
        (line,) = ax.plot(xs, v, ls=ls, marker=mk, markevery=(i, n), ms=4, lw=1.4, color=color,
                          label=f"{name} baseline")
        handles.append(line)
        if name in bands:
            handles.append(ax.fill_between(xs, *bands[name], color=color, alpha=0.18, lw=0,
                                           label=f"{name} baseline: interval"))
    return handles


def _baseline_panel(side, xs, bases, bands, xlabel) -> list:
    """The baselines on their own linear scale, zoomed on them; returns the legend's artists."""
    from matplotlib.ticker import MaxNLocator

    handles = _draw_baselines(side, xs, bases, bands)
    vals = np.concatenate([np.ravel(v) for v in bases.values()] + [np.ravel(b) for p in bands.values() for b in p])
    lo, hi = float(vals.min()), float(vals.max())
    pad = 0.25 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.02
    side.set_ylim(lo - pad, hi + pad)
    side.set_title("baselines (own scale)", fontsize=9)
    side.set_xlabel(xlabel, fontsize=9)
    side.set_ylabel("unfairness (independent of P)" if all(np.ptp(v) == 0 for v in bases.values())
                    else "unfairness", fontsize=9)
    side.tick_params(labelsize=_FONT)
    side.xaxis.set_major_locator(MaxNLocator(3))
    return handles


def _floor_strip(ax, low_ax, floor) -> None:
    """The thin axes under ``ax`` that hold the floor, with the broken axis' marks."""
    width = floor * 0.5 if floor > 0 else 1.0
    low_ax.set_ylim(floor - width, floor + width)
    low_ax.set_yticks([floor], [_num(floor)])
    low_ax.tick_params(labelsize=_FONT)
    low_ax.set_ylabel("floor", fontsize=_FONT, rotation=0, ha="right", va="center")
    ax.spines["bottom"].set_visible(False)
    low_ax.spines["top"].set_visible(False)
    ax.tick_params(axis="x", which="both", bottom=False, labelbottom=False)
    marks = dict(marker=[(-1, -0.5), (1, 0.5)], ms=10, ls="none", color="k", mec="k", mew=1, clip_on=False)
    ax.plot([0, 1], [0, 0], transform=ax.transAxes, label="_break", **marks)
    low_ax.plot([0, 1], [1, 1], transform=low_ax.transAxes, label="_break", **marks)
