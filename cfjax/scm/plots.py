"""Figures of counterfactual images (matplotlib, behind the ``plots`` extra): each unit's factual
image beside its K counterfactuals, one row group per source of counterfactuals (exact,
learned), and below them what each intervention changed (counterfactual − factual) on a
diverging colour map with one shared colour bar."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from cfjax import _checks, figures
from cfjax.scm.interventions import InterventionAxis

__all__ = ["counterfactual_grid", "column_header"]

_DO = re.compile(r"do\(([^()]*)\)")
#: layout in inches: left margin (row labels), gap factual | counterfactuals, gap between row
#: groups, panel title band, colour bar gap and width, right margin (colour bar labels)
_LEFT, _FACTUAL_GAP, _GROUP_GAP, _TITLE, _BAR_GAP, _BAR, _RIGHT = (
    1.25,
    0.18,
    0.16,
    0.34,
    0.14,
    0.14,
    0.9,
)
_FONT = 8  # points: tick labels, headers, colour bar
_FRAME = "0.78"  # the grey of the difference panel's gaps and frames


def column_header(label: str, short: bool = False) -> str:
    """The column header of an intervention label: ``"do(sex=1, age=40)"`` as
    ``"do(sex=1,\\nage=40)"`` (``"\\n"`` → ``" "`` gives the label back) or, with ``short``, as
    ``"sex=1\\nage=40"`` (the ``do(…)`` said once, in the panel title)."""
    m = _DO.fullmatch(label)
    if short and m:
        return m.group(1).replace(", ", "\n")
    return label.replace(", ", ",\n").replace(") ", ")\n")


def _images(name: str, x: Any, ndim: int, what: str) -> np.ndarray:
    try:
        v = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        _checks.fail(name, f"a numeric {ndim}-d array {what}", f"{type(x).__name__}")
    _checks.check_ndim(name, v, ndim, what)
    _checks.check_nonempty(name, v)
    bad = ~np.isfinite(v)
    if bad.any():
        _checks.fail(name, "finite pixel values", f"{int(bad.sum())} NaN or infinite value(s)")
    return v


def _strip(images: np.ndarray, sep: int) -> np.ndarray:
    """``(n, H, W)`` stacked vertically, ``sep`` rows of NaN (drawn as a gap) between them."""
    n, h, w = images.shape
    padded = np.concatenate([images, np.full((n, sep, w), np.nan)], axis=1)
    return padded.reshape(n * (h + sep), w)[: n * (h + sep) - sep]


def _limits(name: str, value: Any, default: tuple[float, float]) -> tuple[float, float]:
    if value is None:
        return default
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        lo, hi = np.nan, np.nan
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        _checks.fail(name, "None or (low, high) finite numbers with low < high", repr(value))
    return lo, hi


def counterfactual_grid(
    factual: Any,
    counterfactuals: Mapping[str, Any],
    axis: InterventionAxis,
    *,
    unit_labels: Sequence[str] | None = None,
    tile_inches: float = 0.5,
    image_limits: tuple[float, float] | None = None,
    limit: float | None = None,
    cmap: str = "gray",
    diff_cmap: str = "RdBu_r",
    title: str | None = None,
) -> Any:
    """The counterfactual image grid: what each intervention does to each unit's image.

    Top panel: one row per unit and row group (the groups stacked, each labelled at the left,
    e.g. exact above learned): the unit's factual image, then its K counterfactuals, one
    column per intervention headed by its label from ``axis``. Bottom panel, aligned column by
    column: the differences counterfactual − factual of every group on ``diff_cmap`` centred at
    0, with limits ``±limit`` shared by every image and one colour bar. All images are drawn
    with nearest-neighbour pixels, ``tile_inches`` a side (at a save resolution of ``dpi``,
    ``tile_inches · dpi`` pixels: 75 at 150 dpi, the default of
    :func:`cfjax.figures.save_figure`).

    The column headers are the labels broken into lines (``column_header``); when every label
    is one ``do(…)``, the ``do`` is said once in the panel title and the headers hold the
    values (``"sex=1\\nage=40"``). Each column of each row group is one axes (its n units
    stacked): ``ax.get_label()`` is the column's full intervention label, e.g.
    ``"do(sex=1, age=40)"`` (``"factual"`` for the factual column), and ``ax.get_gid()`` says
    its panel and row group, ``"image:<group>"`` or ``"difference:<group>"``; the colour bar's
    axes has the gid ``"colour bar"``.

    Args:
      factual: ``(n, H, W)`` factual images of n units.
      counterfactuals: row-group name → ``(n, K, H, W)`` counterfactual images of the same
        units (units first, then the intervention axis, as :meth:`cfjax.data.ChestSCM.counterfactuals`
        returns them), e.g. ``{"exact": ..., "learned": ...}``; drawn in the mapping's order.
      axis: the :class:`cfjax.scm.interventions.InterventionAxis` of the K interventions (its labels head
        the columns).
      unit_labels: ``n`` row labels (default ``"unit 1"``, …).
      tile_inches: the side of one image in inches.
      image_limits: the grey levels' ``(low, high)``; default: the range of every image shown.
      limit: the difference colour map's half-range; default: the largest absolute
        difference (1 if there is none).
      cmap, diff_cmap: matplotlib colour maps of the images and of the differences.
      title: the top panel's title (default: says what the columns are).

    Returns:
      the matplotlib ``Figure``: save it with :func:`cfjax.figures.save_figure`.

    Example:
      >>> import cfjax as cf, jax
      >>> chest = cf.data.ChestSCM(size=32)
      >>> rec = chest.sample(2, key=0)
      >>> do, _, axis = cf.scm.intervention_grid({"sex": [0, 1], "age": [30.0, 70.0]}, describe=True)
      >>> cfs = chest.counterfactuals(rec, do, key=jax.random.key(1))["image"]  # (2, 4, 32, 32)
      >>> fig = cf.scm.counterfactual_grid(rec["image"], {"exact": cfs}, axis)
      >>> [ax.get_label() for ax in fig.axes if ax.get_gid() == "image:exact"][1:]
      ['do(sex=0, age=30)', 'do(sex=0, age=70)', 'do(sex=1, age=30)', 'do(sex=1, age=70)']
    """
    if not isinstance(axis, InterventionAxis):
        _checks.fail(
            "axis",
            "a cfjax.scm.InterventionAxis (intervention_axis / intervention_grid(describe=True))",
            type(axis).__name__,
        )
    f = _images("factual", factual, 3, "(n, H, W) of factual images")
    n, h, w = f.shape
    k = len(axis.labels)
    if not isinstance(counterfactuals, Mapping) or not counterfactuals:
        _checks.fail(
            "counterfactuals",
            "a non-empty mapping row-group name -> (n, K, H, W) images",
            type(counterfactuals).__name__
            if not isinstance(counterfactuals, Mapping)
            else "an empty mapping",
        )
    groups = {}
    for name, x in counterfactuals.items():
        arg = f"counterfactuals[{name!r}]"
        if not isinstance(name, str) or not name:
            _checks.fail("counterfactuals", "non-empty string row-group names", repr(name))
        v = _images(arg, x, 4, "(n, K, H, W) of counterfactual images")
        if v.shape != (n, k, h, w):
            _checks.fail(
                arg,
                f"shape (n, K, H, W) = {(n, k, h, w)} (n, H, W from `factual`, K = len(axis.labels))",
                f"shape {v.shape}",
            )
        groups[name] = v
    if unit_labels is None:
        unit_labels = [f"unit {i + 1}" for i in range(n)]
    elif (
        isinstance(unit_labels, str)
        or len(unit_labels) != n
        or not all(isinstance(s, str) for s in unit_labels)
    ):
        _checks.fail("unit_labels", f"None or {n} strings (one per unit)", repr(unit_labels))
    tile = _checks.check_positive_float("tile_inches", tile_inches)
    diffs = {name: v - f[:, None] for name, v in groups.items()}
    everything = np.concatenate([f.ravel()] + [v.ravel() for v in groups.values()])
    lo, hi = float(everything.min()), float(everything.max())
    lo, hi = _limits("image_limits", image_limits, (lo, hi if hi > lo else lo + 1.0))
    if limit is None:
        m = max(float(np.abs(d).max()) for d in diffs.values())
        limit = m if m > 0 else 1.0
    else:
        limit = _checks.check_positive_float("limit", limit)

    plt = figures.pyplot()
    from matplotlib import colors

    short = all(_DO.fullmatch(label) for label in axis.labels)
    headers = [column_header(label, short) for label in axis.labels]
    if title is None:
        nodes = list(dict.fromkeys(v for e in axis.entries for v in e))
        title = "Factual image and counterfactuals under " + (
            f"do({', '.join(nodes)}) (values above each column)"
            if short
            else "the interventions above each column"
        )
    # geometry in inches: a pixel is tile/W wide; gaps between images are `sep` pixels
    sep = max(1, round(w / 16))
    px = tile / w
    col_w, gap = w * px, sep * px
    block_h = (n * h + (n - 1) * sep) * px
    head_h = 0.14 * max(s.count("\n") + 1 for s in headers) + 0.12
    g = len(groups)
    panel_h = g * block_h + (g - 1) * _GROUP_GAP
    x_cf = _LEFT + col_w + _FACTUAL_GAP
    cf_w = k * col_w + (k - 1) * gap
    fig_w = x_cf + cf_w + _BAR_GAP + _BAR + _RIGHT
    fig_h = _TITLE + head_h + panel_h + 0.2 + _TITLE + panel_h + 0.15
    fig = plt.figure(figsize=(fig_w, fig_h))

    def box(
        x: float, top: float, width: float, height: float
    ) -> list[float]:  # inches from the top left
        return [x / fig_w, 1 - (top + height) / fig_h, width / fig_w, height / fig_h]

    grey = plt.get_cmap(cmap).with_extremes(bad="white")
    diverging = plt.get_cmap(diff_cmap).with_extremes(bad=_FRAME)  # gaps framed: 0 is near white
    norm = colors.Normalize(-limit, limit)
    rows = [i * (h + sep) + (h - 1) / 2 for i in range(n)]

    def tile_axes(
        x: float, top: float, images: np.ndarray, panel: str, group: str, label: str, **imshow: Any
    ) -> Any:
        ax = fig.add_axes(box(x, top, col_w, block_h), label=label)
        ax.imshow(_strip(images, sep), interpolation="nearest", aspect="auto", **imshow)
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():  # the differences framed, the images not
            spine.set(visible=panel == "difference", color=_FRAME, linewidth=0.6)
        ax.set_gid(f"{panel}:{group}")
        return ax

    def row_labels(ax: Any, group: str) -> None:
        ax.set_yticks(rows, list(unit_labels), fontsize=_FONT)
        ax.tick_params(axis="y", length=0, pad=3)
        ax.set_ylabel(group, fontsize=9, fontweight="bold", labelpad=6)

    top_a = _TITLE + head_h
    fig.text(_LEFT / fig_w, 1 - 0.08 / fig_h, "a   " + title, fontsize=10, va="top", ha="left")
    top_b = top_a + panel_h + 0.2 + _TITLE
    fig.text(
        _LEFT / fig_w,
        1 - (top_b - _TITLE + 0.08) / fig_h,
        "b   Change from the factual image: counterfactual − factual (same columns and rows as a)",
        fontsize=10,
        va="top",
        ha="left",
    )
    diff_images = []
    for gi, (name, v) in enumerate(groups.items()):
        top = top_a + gi * (block_h + _GROUP_GAP)
        ax = tile_axes(_LEFT, top, f, "image", name, "factual", cmap=grey, vmin=lo, vmax=hi)
        row_labels(ax, name)
        if gi == 0:
            ax.set_title("factual", fontsize=_FONT, pad=3)
        for j in range(k):
            ax = tile_axes(
                x_cf + j * (col_w + gap),
                top,
                v[:, j],
                "image",
                name,
                axis.labels[j],
                cmap=grey,
                vmin=lo,
                vmax=hi,
            )
            if gi == 0:
                ax.set_title(headers[j], fontsize=_FONT, pad=3)
        top = top_b + gi * (block_h + _GROUP_GAP)
        for j in range(k):
            ax = tile_axes(
                x_cf + j * (col_w + gap),
                top,
                diffs[name][:, j],
                "difference",
                name,
                axis.labels[j],
                cmap=diverging,
                norm=norm,
            )
            diff_images.append(ax.images[0])
            if j == 0:
                row_labels(ax, name)
    cax = fig.add_axes(box(x_cf + cf_w + _BAR_GAP, top_b, _BAR, panel_h), label="colour bar")
    cax.set_gid("colour bar")
    bar = fig.colorbar(diff_images[0], cax=cax)
    bar.set_label("counterfactual − factual", fontsize=_FONT)
    bar.ax.tick_params(labelsize=_FONT)
    return fig
