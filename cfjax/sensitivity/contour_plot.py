"""Paper 001's contour figure: CFU over two error correlations (a
:func:`~cfjax.sensitivity.cfu_surface`) as filled contours, the region where P is not usable
hatched, benchmarks and worst cases marked. Needs matplotlib (the ``plots`` extra), imported
only when a figure is drawn (:mod:`cfjax.figures`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from cfjax import _checks
from cfjax.sensitivity._curve import _FONT, _num
from cfjax.sensitivity.plots import _DECADES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_contour"]


def plot_contour(
    surface: Any,
    *,
    benchmarks: Mapping[str, Any] | None = None,
    worst: Any = None,
    budgets: Any = None,
    ax: Any = None,
    title: str | None = None,
) -> Figure:
    """Filled contours of CFU over two error correlations (a :func:`~cfjax.sensitivity.cfu_surface`);
    returns the Figure.

    The colour scale is logarithmic (levels at whole decades, or at thirds of a decade when
    the data span fewer than six) where the finite CFU values above the surface's rounding
    level span two decades or more, linear otherwise; on a log scale the values at or below
    that level (rounding, not numbers; e.g. at P = I without a ridge penalty) are drawn in the
    lowest level, which starts at it. The region
    where P is not positive definite with smallest eigenvalue ≥ the surface's ``min_eig`` (not
    evaluated) is hatched in grey and named in the legend; its edge is the contour of P's
    smallest eigenvalue at ``min_eig``, interpolated between grid points; the cells between an
    evaluated and a not evaluated grid point are left blank (nothing is extrapolated). A surface
    whose values are all rounding is one level, and its colour bar says so.

    Args:
      surface: a :class:`~cfjax.sensitivity.Surface`.
      benchmarks: label → ``(x, y)``, the two correlations of a benchmark (e.g. the
        correlations an observed covariate's strength implies), or an ``(m, m)`` correlation
        matrix over ``surface.features`` whose entries at the surface's two pairs are read;
        each drawn as a marker with its label beside it.
      worst: a :class:`~cfjax.sensitivity.WorstCase` (or a correlation matrix ``(m, m)``, or a
        stack ``(B, m, m)``): its worst-case P's entries at the two pairs, one marker per budget
        labelled with its ``p_max``, joined in order of budget. Its other entries need not be
        the surface's ``base``: a marker says where the worst case lies along these two
        correlations, not that the surface's value there is its CFU.
      budgets: with a WorstCase, the budget(s) to mark (each one of its ``p_max``); default all.
      ax: an axes to draw into; None: a new figure (with a colour bar).
      title: the axes' title (default: the scored predictor's CFU).

    Returns:
      The matplotlib Figure; ``fig.axes[0]`` holds the contours.
    """
    from cfjax import figures
    from cfjax.sensitivity.contour import Surface, _benchmark_points, _worst_points

    if not isinstance(surface, Surface):
        _checks.fail("surface", "a Surface from cfu_surface", type(surface).__name__)
    if ax is not None and not (hasattr(ax, "figure") and hasattr(ax, "contourf")):
        _checks.fail("ax", "a matplotlib Axes or None", type(ax).__name__)
    xs, ys = np.asarray(surface.x, np.float64), np.asarray(surface.y, np.float64)
    z = np.asarray(surface.cfu, np.float64)
    points, path = _benchmark_points(surface, benchmarks), _worst_points(surface, worst, budgets)
    plt = figures.pyplot()
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Patch

    if ax is None:
        fig, ax = plt.subplots(figsize=(5.6, 4.8), layout="constrained")
        own = True
    else:
        fig, own = ax.figure, False
    (a, b), (c, d) = surface.pairs
    handles = []
    finite = z[np.isfinite(z)]
    if finite.size:
        rounding = max(float(surface.rounding), 0.0)
        positive = finite[finite > rounding]
        log = positive.size > 0 and np.log10(positive.max() / positive.min()) >= _DECADES
        noise = positive.size == 0 and rounding > 0  # every value is rounding: one level, said so
        if noise:
            levels: Any = [min(float(finite.min()), 0.0), rounding]
            cs = ax.contourf(xs, ys, np.clip(z, levels[0], rounding), levels=levels, cmap="viridis")
        elif log:
            lo, hi = np.log10(positive.min()), np.ceil(np.log10(positive.max()))
            step = 1.0 if hi - lo >= 6 else 1.0 / 3.0
            lo = np.floor(lo / step) * step
            levels = 10.0 ** np.arange(lo, hi + step / 2, step)
            shown = np.where(np.isfinite(z), np.maximum(z, levels[0]), np.nan)
            cs = ax.contourf(
                xs, ys, shown, levels=levels, norm=LogNorm(levels[0], levels[-1]), cmap="viridis"
            )
        else:
            width = np.ptp(finite) if np.ptp(finite) > 0 else max(abs(finite[0]), 1.0) * 1e-3
            levels = np.linspace(finite.min(), finite.min() + width, 11)
            cs = ax.contourf(xs, ys, z, levels=levels, cmap="viridis")
        ax.contour(cs, colors="k", linewidths=0.4, alpha=0.5)
        if own:
            bar = fig.colorbar(cs, ax=ax)
            bar.set_label(
                f"CFU ({surface.predictor} predictor)"
                + (", log scale" if log else "")
                + (f": all rounding (<= {_num(rounding)})" if noise else ""),
                fontsize=9,
            )
            bar.ax.tick_params(labelsize=_FONT)
    # Not positive definite (with the margin): below min_eig, the contour of the smallest eigenvalue.
    eig = np.array(
        [
            [np.linalg.eigvalsh(surface.correlation(i, j))[0] for j in range(len(xs))]
            for i in range(len(ys))
        ]
    )
    infeasible = ~np.asarray(surface.feasible, bool)
    if infeasible.any():
        ax.contourf(
            xs,
            ys,
            eig,
            levels=[min(eig.min(), surface.min_eig) - 1.0, surface.min_eig],
            colors=["0.82"],
            hatches=["///"],
        )
        handles.append(
            Patch(
                facecolor="0.82",
                hatch="///",
                edgecolor="0.3",
                label=f"not positive definite (smallest eigenvalue < {surface.min_eig:g}): not evaluated",
            )
        )
    for label, (px, py) in points.items():
        ax.plot(
            [px],
            [py],
            marker="D",
            ms=6,
            color="C3",
            mec="k",
            ls="none",
            label=f"_benchmark {label}",
        )
        ax.annotate(
            label, xy=(px, py), xytext=(4, 4), textcoords="offset points", fontsize=_FONT, color="k"
        )
    if points:
        handles.append(
            ax.plot([], [], marker="D", ms=6, color="C3", mec="k", ls="none", label="benchmarks")[0]
        )
    if path:
        path_x, path_y = np.array([p[1] for p in path]), np.array([p[2] for p in path])
        (line,) = ax.plot(
            path_x,
            path_y,
            "-",
            marker="*",
            ms=10,
            color="C1",
            mec="k",
            lw=1.0,
            label="worst case" + (" (by budget)" if len(path) > 1 else ""),
        )
        handles.append(line)
        for i, (label, qx, qy) in enumerate(path):
            if label:  # above and below in turn: neighbouring budgets' labels do not overlap
                ax.annotate(
                    label,
                    xy=(qx, qy),
                    xytext=(5, -9 if i % 2 == 0 else 5),
                    textcoords="offset points",
                    fontsize=_FONT,
                )
    ax.set_xlim(xs.min(), xs.max())
    ax.set_ylim(ys.min(), ys.max())
    ax.set_xlabel(f"error correlation P[{a}, {b}]", fontsize=9)
    ax.set_ylabel(f"error correlation P[{c}, {d}]", fontsize=9)
    ax.tick_params(labelsize=_FONT)
    ax.set_title(title or f"CFU of the {surface.predictor} predictor", fontsize=10)
    if handles:
        if own:
            fig.legend(
                handles=handles, fontsize=_FONT, loc="outside lower center", frameon=False, ncols=1
            )
        else:
            ax.legend(handles=handles, fontsize=_FONT, loc="best", framealpha=0.85)
    return fig
