"""Figures of the metrics pillar (matplotlib, behind the ``plots`` extra).

:func:`reliability_diagram` draws what :func:`cfjax.metrics.reliability_curve` and
:func:`cfjax.metrics.reliability_band` return: the original and the counterfactually
marginalised prediction's smoothed reliability on one axis, their bootstrap bands, their
smooth ECE with its interval in the legend and the density of the predictions beneath. It
returns the ``Figure`` (drawing into given axes if asked), so a user can restyle it; saving is
:func:`cfjax.figures.save_figure` (PNG and PDF).

Example:
  >>> import numpy as np
  >>> from cfjax import metrics
  >>> from cfjax.metrics.plots import reliability_diagram
  >>> rng = np.random.default_rng(0)
  >>> p = rng.uniform(size=300).astype(np.float32)
  >>> y = (rng.uniform(size=300) < p).astype(np.int32)
  >>> band = metrics.reliability_band(p, y, key=0, resamples=50)
  >>> fig = reliability_diagram(band, metrics.reliability_curve(np.sqrt(p), y))
  >>> [t.get_text().split(",")[0] for t in fig.axes[0].get_legend().get_texts()]
  ['perfect calibration', 'original', 'marginalised']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from cfjax import _checks, figures
from cfjax.metrics.reliability import ReliabilityBand, ReliabilityCurve

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure

__all__ = ["reliability_diagram"]

#: font sizes (points) of the figures: tick labels and legends, axis labels, titles
TICK_PT, LABEL_PT, TITLE_PT = 8, 9, 10
_RESULT = (
    "a ReliabilityCurve or ReliabilityBand (cfjax.metrics.reliability_curve / reliability_band)"
)


def _check_result(name: str, r: ReliabilityCurve | ReliabilityBand) -> None:
    if not isinstance(r, (ReliabilityCurve, ReliabilityBand)):
        _checks.fail(name, _RESULT, type(r).__name__)
    t = r.curve.t if isinstance(r, ReliabilityBand) else r.t
    if np.ndim(t) != 1:
        _checks.fail(
            name,
            "one curve (points t of shape (T,)); index a vmapped result first",
            f"points of shape {np.shape(t)}",
        )


def _check_strings(name: str, value: Sequence[str], count: int) -> tuple[str, ...]:
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or len(value) < count
        or not all(isinstance(v, str) for v in value)
    ):
        _checks.fail(name, f"a sequence of at least {count} strings", repr(value))
    return tuple(value[:count])


def _axes(ax: Axes | Sequence[Axes] | None) -> tuple[Axes, Axes]:
    """The main axes and the density strip beneath it: new ones, a strip appended below a
    given ``Axes``, or a given pair."""
    plt = figures.pyplot()
    from matplotlib.axes import Axes

    if ax is None:
        fig = plt.figure(figsize=(4.8, 5.4))
        grid = fig.add_gridspec(2, 1, height_ratios=(4, 1), hspace=0.06)
        main = fig.add_subplot(grid[0])
        return main, fig.add_subplot(grid[1], sharex=main)
    if isinstance(ax, Axes):
        from mpl_toolkits.axes_grid1 import make_axes_locatable

        return ax, make_axes_locatable(ax).append_axes("bottom", size="22%", pad=0.08, sharex=ax)
    if (
        isinstance(ax, Sequence)
        and len(ax) == 2
        and all(isinstance(a, Axes) for a in ax)
        and ax[0] is not ax[1]
    ):
        return ax[0], ax[1]
    _checks.fail("ax", "None, a matplotlib Axes, or a pair (main axes, density axes)", repr(ax))
    raise AssertionError  # unreachable: fail raises


def _legend_label(label: str, r: ReliabilityCurve | ReliabilityBand) -> str:
    c = r.curve if isinstance(r, ReliabilityBand) else r
    text = f"{label}, smECE {float(c.smooth_ece):.3f}"
    if isinstance(r, ReliabilityBand):
        text += f" [{float(r.smooth_ece_low):.3f}, {float(r.smooth_ece_high):.3f}]"
    return text


def reliability_diagram(
    original: ReliabilityCurve | ReliabilityBand,
    marginalised: ReliabilityCurve | ReliabilityBand | None = None,
    *,
    labels: Sequence[str] = ("original", "marginalised"),
    colors: Sequence[str] = ("C0", "C3"),
    title: str | None = None,
    min_count: float = 1.0,
    ax: Axes | Sequence[Axes] | None = None,
) -> Figure | SubFigure:
    """The smoothed reliability diagram of the original and (optionally) the counterfactually
    marginalised prediction, on one axis.

    Each curve is the kernel-smoothed mean label against the predicted probability
    (:func:`cfjax.metrics.reliability_curve`, in [0, 1]) beside the dashed diagonal of perfect
    calibration; a :class:`~cfjax.metrics.reliability.ReliabilityBand` adds its percentile bootstrap band
    (shaded) and the smooth ECE's interval to the legend (``"original, smECE 0.031 [0.025,
    0.038]"``). Beneath, on a strip sharing the x axis, the kernel density of each curve's
    predictions.

    Args:
      original: the original prediction's :class:`~cfjax.metrics.reliability.ReliabilityCurve` or
        :class:`~cfjax.metrics.reliability.ReliabilityBand`.
      marginalised: the marginalised prediction's, or None for one curve.
      labels: the curves' names in the legend.
      colors: their matplotlib colours.
      title: the axes' title, or None.
      min_count: curves and bands are drawn where the kernel counts at least this many
        units (``ReliabilityCurve.count``; beyond the predictions the curve only repeats
        the nearest label); 0 draws them everywhere. The density strip shows every point.
      ax: None (a new figure), a matplotlib ``Axes`` (the density strip is appended beneath
        it), or a pair ``(axes, density_axes)`` to draw into.

    Returns:
      The matplotlib ``Figure``; its first two axes (for ``ax=None``) are the diagram and the
      density strip.

    Raises:
      ValidationError: a result of another kind or a batch of curves, labels or colours that
        are not strings, or ``ax`` of another kind, naming the argument.
    """
    _check_result("original", original)
    results = [original]
    if marginalised is not None:
        _check_result("marginalised", marginalised)
        results.append(marginalised)
    labels = _check_strings("labels", labels, len(results))
    colors = _check_strings("colors", colors, len(results))
    if title is not None and not isinstance(title, str):
        _checks.fail("title", "a string or None", repr(title))
    if (
        isinstance(min_count, bool)
        or not isinstance(min_count, (int, float, np.integer, np.floating))
        or not 0 <= float(min_count) < float("inf")
    ):
        _checks.fail("min_count", "a number >= 0", repr(min_count))
    main, strip = _axes(ax)

    main.plot([0, 1], [0, 1], color="0.55", lw=1, ls="--", label="perfect calibration")
    banded = None
    for r, label, colour in zip(results, labels, colors):
        c = r.curve if isinstance(r, ReliabilityBand) else r
        t = np.asarray(c.t, np.float64)
        shown = np.asarray(c.count, np.float64) >= float(min_count)
        if isinstance(r, ReliabilityBand):
            main.fill_between(
                t,
                np.asarray(r.low, np.float64),
                np.asarray(r.high, np.float64),
                where=shown,
                color=colour,
                alpha=0.2,
                lw=0,
            )
            banded = r if banded is None else banded
        main.plot(
            t,
            np.where(shown, np.asarray(c.mean_label, np.float64), np.nan),
            color=colour,
            lw=2,
            label=_legend_label(label, r),
        )
        density = np.asarray(c.density, np.float64)
        strip.fill_between(t, 0, density, color=colour, alpha=0.2, lw=0)
        strip.plot(t, density, color=colour, lw=1)
    main.legend(
        loc="upper left",
        fontsize=TICK_PT,
        title_fontsize=TICK_PT,
        title=(f"shaded: {100 * banded.level:g}% bootstrap band" if banded is not None else None),
        handlelength=1.6,
        borderaxespad=0.3,
        frameon=True,
        framealpha=0.85,
        edgecolor="none",
    )
    main.set_xlim(0, 1)
    main.set_ylim(0, 1)
    main.set_ylabel("mean label (kernel-smoothed)", fontsize=LABEL_PT)
    main.tick_params(labelsize=TICK_PT, labelbottom=False)
    if title is not None:
        main.set_title(title, fontsize=TITLE_PT)
    strip.set_xlim(0, 1)
    strip.set_ylim(0, None)
    strip.set_yticks([])
    strip.set_ylabel("density", fontsize=LABEL_PT)
    strip.set_xlabel("predicted probability", fontsize=LABEL_PT)
    strip.tick_params(labelsize=TICK_PT)
    return main.figure
