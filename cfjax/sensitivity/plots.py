"""Figures 2 and 4 of paper 001: CFU against the correlation (grid) or the budget (optimiser),
on a log scale, with the baselines' unfairness as horizontal lines. Needs matplotlib (the
``plots`` extra); imported only when called."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from cfjax import _checks

__all__ = ["plot_curve"]


def plot_curve(x: Any, cfu: Any, *, baselines: Mapping[str, float] | None = None, xlabel: str = "p_max",
               title: str | None = None, true_value: tuple[float, float] | None = None, floor: float | None = None,
               ax: Any = None):
    """Plot a CFU curve on a log y-axis; returns the matplotlib figure.

    Args:
      x: correlations p (grid) or budgets p_max (optimiser), ``(B,)``.
      cfu: the CFU at each, ``(B,)`` (NaN points, e.g. too close to singular P, are skipped).
      baselines: name → unfairness, drawn as horizontal dashed lines.
      true_value: ``(p, cfu)`` of a known true confounding, drawn as a marker.
      floor: the CFU at zero correlation (P = I; :func:`~cfjax.sensitivity.cfu_at_zero_correlation`,
        ``WorstCase.cfu_at_zero_correlation``), drawn as a dotted line: the curve's floor, the
        ridge penalty's shrinkage artefact (not drawn when None or not positive).
      ax: an existing matplotlib axes to draw into.
    """
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("plot_curve needs matplotlib: pip install 'cfjax[plots]'") from e
    x = np.asarray(x, np.float64)
    y = np.asarray(cfu, np.float64)
    if x.ndim != 1 or y.shape != x.shape:
        _checks.fail("cfu", f"shape {x.shape} like x", f"shape {y.shape}")
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.0, 3.6), constrained_layout=True)
    else:
        fig = ax.figure
    keep = np.isfinite(y) & (y > 0)
    ax.plot(x[keep], y[keep], "o-", color="C0", ms=3, label="worst-case CFU" if xlabel == "p_max" else "CFU")
    for i, (name, value) in enumerate((baselines or {}).items()):
        ax.axhline(float(value), ls="--", color=f"C{i + 1}", label=f"{name} baseline")
    if floor is not None and np.isfinite(floor) and floor > 0:
        ax.axhline(float(floor), ls=":", color="0.4", label="CFU at zero correlation (floor)")
    if true_value is not None:
        ax.plot([true_value[0]], [true_value[1]], "k*", ms=10, label="true confounding")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("counterfactual unfairness")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return fig
