"""What :func:`~cfjax.sensitivity.plot_curve` and :func:`~cfjax.sensitivity.curve_caption`
(:mod:`cfjax.sensitivity.plots`) stand on: their arguments checked and brought to one form (the
budgets, the curves, the floor, the intervals' bands, the baselines and the benchmarks), and the
drawing helpers beneath the figure (each curve's and baseline's style, the benchmarks' lines, the
baselines' panel on their own scale, the floor's strip). Its number format and font size are
:mod:`cfjax.sensitivity.contour_plot`'s too. Needs matplotlib only where a helper draws.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cfjax import _checks

__all__: list[str] = []  # private: the parts beneath plots and contour_plot

_STYLES = (
    ("--", "s"),
    ("-.", "D"),
    (":", "^"),
    ((0, (5, 1, 1, 1)), "P"),
)  # baselines' line and marker
_CURVE_MARKERS = ("o", "s", "D", "^", "P", "X")
_FONT = 8


# ----------------------------------------------------------------------------- inputs
def _inputs(x, cfu, floor, model, baselines, label, xlabel):
    """``(x (B,), name → curve (B,), floor or None, why, baselines)`` from plot_curve's arguments."""
    from cfjax.sensitivity.cfu import negligible_cfu
    from cfjax.sensitivity.fitting import FairModel
    from cfjax.sensitivity.search import WorstCase

    name = label or ("worst-case CFU" if xlabel == "p_max" else "CFU")
    why = "CFU at P = I"
    labels = None
    if isinstance(x, Mapping):  # predictor name -> WorstCase: every predictor's curve
        if cfu is not None:
            _checks.fail(
                "cfu", "None with a mapping of WorstCases (their cfu are drawn)", type(cfu).__name__
            )
        if label is not None:
            _checks.fail(
                "label",
                "None with a mapping of WorstCases (each curve is named by its key)",
                repr(label),
            )
        if not x or not all(isinstance(v, WorstCase) for v in x.values()):
            _checks.fail(
                "x",
                "a non-empty mapping predictor name -> WorstCase",
                repr({str(k): type(v).__name__ for k, v in x.items()}),
            )
        order = sorted(
            x, key=lambda k: (k != "fair", [str(j) for j in x].index(str(k)))
        )  # the fair one first
        cases = {str(k): x[k] for k in order}
        p = np.asarray(next(iter(cases.values())).p_max, np.float64)
        for k, wc in cases.items():
            q = np.asarray(wc.p_max, np.float64)
            if q.shape != p.shape or not np.allclose(q, p, rtol=0, atol=1e-9):
                _checks.fail(
                    f"x[{k!r}]",
                    f"the same budgets as the others {p.tolist()}",
                    f"p_max {q.tolist()}",
                )
        zero = {
            k: float(wc.cfu_at_zero_correlation)
            for k, wc in cases.items()
            if wc.cfu_at_zero_correlation is not None and np.isfinite(wc.cfu_at_zero_correlation)
        }
        if floor is None and zero:
            low = min(zero, key=zero.get)
            floor, why = zero[low], f"{low}: CFU at P = I" if len(cases) > 1 else why
        x, cfu = p, {k: wc.cfu for k, wc in cases.items()}
        labels = {k: f"{k} predictor" for k in cases}
        baselines = {} if baselines is None else baselines  # not the model's: a different quantity
    elif isinstance(x, WorstCase):
        if cfu is not None:
            _checks.fail("cfu", "None with a WorstCase (its cfu is drawn)", type(cfu).__name__)
        if floor is None:
            floor = x.cfu_at_zero_correlation
        cfu, x = {name: x.cfu}, x.p_max
    xs = np.asarray(x, np.float64)
    if xs.ndim != 1 or xs.size == 0 or not np.isfinite(xs).all():
        _checks.fail(
            "x", "a WorstCase or a non-empty 1-d array of finite budgets", f"shape {xs.shape}"
        )
    if cfu is None:
        _checks.fail("cfu", "the CFU at each x, (B,) or name -> (B,)", "None")
    raw = dict(cfu) if isinstance(cfu, Mapping) else {name: cfu}
    if not raw:
        _checks.fail("cfu", "at least one curve", "an empty mapping")
    curves = {}
    for k, v in raw.items():
        arr = np.asarray(v, np.float64)
        if arr.shape != xs.shape:
            _checks.fail(
                "cfu" if len(raw) == 1 else f"cfu[{k!r}]",
                f"shape {xs.shape} like x",
                f"shape {arr.shape}",
            )
        curves[str(k)] = arr
    labels = labels or {k: k for k in curves}
    if floor is not None:
        if (
            isinstance(floor, bool)
            or not isinstance(floor, (int, float, np.floating, np.integer))
            or not np.isfinite(floor)
            or floor < 0
        ):
            _checks.fail("floor", "None or a finite number >= 0", repr(floor))
        floor = float(floor)
    if model is not None:
        if not isinstance(model, FairModel):
            _checks.fail(
                "model", "None or a FairModel from cfjax.sensitivity.fit", type(model).__name__
            )
        rounding = negligible_cfu(model)
        if floor is None or rounding > floor:
            floor, why = (
                rounding,
                "rounding" if floor is None else f"rounding; CFU at P = I {_num(floor)}",
            )
        if baselines is None:
            baselines = {k: float(v) for k, v in model.baseline_unfairness.items()}
    return xs, curves, labels, floor, why, baselines


def _benchmarks(benchmarks) -> dict:
    """label → ``(p_max, cfu or None)`` of plot_curve's ``benchmarks``."""
    if benchmarks is None:
        return {}
    if not isinstance(benchmarks, Mapping):
        _checks.fail(
            "benchmarks", "a mapping label -> p_max or (p_max, cfu)", type(benchmarks).__name__
        )
    out = {}
    for k, v in benchmarks.items():
        arr = np.asarray(v, np.float64) if not isinstance(v, (str, bool)) else np.asarray([np.nan])
        if arr.shape not in ((), (2,)) or not np.isfinite(arr).all():
            _checks.fail(
                "benchmarks",
                "label -> a finite p_max or a pair (p_max, cfu) of finite numbers",
                f"{k!r}: {v!r}",
            )
        out[str(k)] = (float(arr), None) if arr.shape == () else (float(arr[0]), float(arr[1]))
    return out


def _bands(
    low: Any, high: Any, curves: Mapping[str, np.ndarray], shape: tuple[int, ...]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """name → low, name → high of the curves' intervals (both or neither)."""
    if (low is None) != (high is None):
        _checks.fail("high" if high is None else "low", "both low and high, or neither", "only one")
    if low is None:
        return {}, {}
    single = next(iter(curves))
    lows = dict(low) if isinstance(low, Mapping) else {single: low}
    highs = dict(high) if isinstance(high, Mapping) else {single: high}
    if set(lows) != set(highs):
        _checks.fail("high", f"the names of low {sorted(lows)}", repr(sorted(highs)))
    out_lo, out_hi = {}, {}
    for k in lows:
        if k not in curves:
            _checks.fail("low", f"names among the curves {sorted(curves)}", repr(k))
        lo, hi = np.asarray(lows[k], np.float64), np.asarray(highs[k], np.float64)
        for arg, arr in (("low", lo), ("high", hi)):
            if arr.shape != shape:
                _checks.fail(arg, f"shape {shape} like x", f"shape {arr.shape}")
        both = np.isfinite(lo) & np.isfinite(hi)
        if (lo[both] > hi[both]).any():
            i = int(np.flatnonzero(lo > hi)[0])
            _checks.fail(
                "low", "at most high at every point", f"{lo[i]:.4g} > {hi[i]:.4g} at index {i}"
            )
        out_lo[k], out_hi[k] = lo, hi
    return out_lo, out_hi


def _baselines(baselines, bands, shape):
    """name → ``(B,)`` baseline values (finite), name → ``(low (B,), high (B,))``."""
    if baselines is not None and not isinstance(baselines, Mapping):
        _checks.fail(
            "baselines", "a mapping name -> unfairness (a float or (B,))", type(baselines).__name__
        )
    if bands is not None and not isinstance(bands, Mapping):
        _checks.fail("baseline_bands", "a mapping name -> (low, high)", type(bands).__name__)
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
            _checks.fail(
                "baseline_bands",
                f"(low, high) floats or arrays of shape {shape}",
                f"{k!r}: {pair!r}",
            )
        if (lo > hi).any():
            _checks.fail("baseline_bands", "low at most high", f"{k!r}: {pair!r}")
        out_bands[str(k)] = (lo, hi)
    return out, out_bands


# ----------------------------------------------------------------------------- drawing
def _num(v: float) -> str:
    return f"{v:.2g}" if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e4) else f"{v:.3g}"


def _curve_style(i, name, labels) -> tuple[str, str]:
    """A curve's colour and marker: a predictor's curve (a mapping of WorstCases) in its own
    colour (the fair predictor's C0, a baseline's that of its flat line), others in turn."""
    from cfjax.sensitivity.fitting import PREDICTORS

    if labels[name] == f"{name} predictor" and name in PREDICTORS:
        j = PREDICTORS.index(
            name
        )  # fair: C0 and circles; baselines: C1, C2 and their flat lines' markers
        return f"C{j}", "o" if j == 0 else _STYLES[(j - 1) % len(_STYLES)][1]
    return f"C{[0, 4, 5, 6, 7, 8][i % 6]}", _CURVE_MARKERS[i % len(_CURVE_MARKERS)]


def _draw_benchmarks(ax, marks, floor, log) -> None:
    """Each benchmark a labelled vertical line across the axes, and its CFU (if given) as a
    marker on it, at the floor when below (none on a log scale without a positive value)."""
    for label, (p, c) in marks.items():
        ax.axvline(p, color="0.35", ls=(0, (1, 2)), lw=1.0, label=f"_benchmark {label}")
        ax.annotate(
            label,
            xy=(p, 1.0),
            xycoords=ax.get_xaxis_transform(),
            xytext=(2, -3),
            textcoords="offset points",
            rotation=90,
            ha="left",
            va="top",
            fontsize=_FONT,
            color="0.2",
        )
        if c is not None:
            y = c if floor is None else max(c, floor)
            if y > 0 or not log:
                ax.plot(
                    [p],
                    [y],
                    marker="o",
                    ms=5,
                    mfc="white",
                    mec="0.2",
                    mew=1.2,
                    ls="none",
                    label=f"_benchmark {label}: CFU",
                )


def _clip(v, floor):
    return v if floor is None else np.where(np.isfinite(v), np.maximum(v, floor), v)


def _closest_pt(bases, log, lo, hi, ax) -> float:
    """The smallest vertical distance, in points, between two baselines on the curve's axes."""
    if hi <= lo:
        return 0.0
    t = (lambda v: np.log10(np.maximum(v, 1e-300))) if log else (lambda v: v)
    height = (
        ax.get_position().height * ax.figure.get_figheight() if ax is not None else 0.6 * 4.0
    ) * 72
    scale = height / (t(hi) - t(lo))
    vals = [t(v) for v in bases.values()]
    return min(
        float(np.min(np.abs(a - b))) * scale for i, a in enumerate(vals) for b in vals[i + 1 :]
    )


def _draw_baselines(ax, xs, bases, bands) -> list:
    """Each baseline a line of its own style, its markers staggered so that lines at one level
    still show every marker; bands where given. Returns the legend's artists."""
    handles = []
    n = max(len(bases), 1)
    for i, (name, v) in enumerate(bases.items()):
        ls, mk = _STYLES[i % len(_STYLES)]
        color = f"C{1 + i}"
        (line,) = ax.plot(
            xs,
            v,
            ls=ls,
            marker=mk,
            markevery=(i, n),
            ms=4,
            lw=1.4,
            color=color,
            label=f"{name} baseline",
        )
        handles.append(line)
        if name in bands:
            handles.append(
                ax.fill_between(
                    xs,
                    *bands[name],
                    color=color,
                    alpha=0.18,
                    lw=0,
                    label=f"{name} baseline: interval",
                )
            )
    return handles


def _baseline_panel(side, xs, bases, bands, xlabel) -> list:
    """The baselines on their own linear scale, zoomed on them; returns the legend's artists."""
    from matplotlib.ticker import MaxNLocator

    handles = _draw_baselines(side, xs, bases, bands)
    vals = np.concatenate(
        [np.ravel(v) for v in bases.values()] + [np.ravel(b) for p in bands.values() for b in p]
    )
    lo, hi = float(vals.min()), float(vals.max())
    pad = 0.25 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.02
    side.set_ylim(lo - pad, hi + pad)
    side.set_title("baselines (own scale)", fontsize=9)
    side.set_xlabel(xlabel, fontsize=9)
    side.set_ylabel(
        "unfairness (independent of P)"
        if all(np.ptp(v) == 0 for v in bases.values())
        else "unfairness",
        fontsize=9,
    )
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
    marks = dict(
        marker=[(-1, -0.5), (1, 0.5)], ms=10, ls="none", color="k", mec="k", mew=1, clip_on=False
    )
    ax.plot([0, 1], [0, 0], transform=ax.transAxes, label="_break", **marks)
    low_ax.plot([0, 1], [1, 1], transform=low_ax.transAxes, label="_break", **marks)
