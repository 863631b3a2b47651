"""ΔAUC against stability, with its uncertainty: the bootstrap interval of each predictor's
ΔAUC (over test units, paired with the reports' resamples) and the correlation of ΔAUC with a
stability metric, with a bootstrap interval over the predictors.

The study correlates ΔAUC with each stability metric over the predictor-seed pairs (paper 000's
Figure 3: 7 predictors × S seeds). The pairs of one predictor are not independent (its seeds
share its training mask), so :func:`correlation`'s interval resamples *predictors*, each with all
its seeds (a cluster bootstrap), not the pairs one by one.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from scipy import stats

from cfjax import _checks
from cfjax import metrics as cm
from cfjax.typing import ArrayLike, KeyLike

__all__ = ["correlation", "pearson_rows", "delta_auc_interval"]


def pearson_rows(x: npt.ArrayLike, y: npt.ArrayLike) -> np.ndarray:
    """Pearson r of each row of ``x`` with the same row of ``y``.

    Args:
      x, y: ``(B, n)`` arrays (B samples of n pairs).

    Returns:
      ``(B,)`` float64; NaN for a row where ``x`` or ``y`` is constant (as ``scipy.stats.pearsonr``).

    Example:
      >>> import numpy as np
      >>> pearson_rows(np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]]), np.array([[2.0, 4.0, 7.0], [1.0, 2.0, 3.0]]))
      array([0.99339927,        nan])
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    # a constant row: exactly zero after centring only if it was exactly constant; guard round-off
    sx, sy = np.sqrt((xc * xc).sum(-1)), np.sqrt((yc * yc).sum(-1))
    flat = (np.ptp(x, axis=-1) == 0) | (np.ptp(y, axis=-1) == 0)
    den = np.where(flat, 1.0, sx * sy)
    return np.where(flat, np.nan, np.clip((xc * yc).sum(-1) / den, -1.0, 1.0))


def _percentiles(values: np.ndarray, level: float) -> list[float]:
    ok = values[np.isfinite(values)]
    if ok.size == 0:
        return [float("nan"), float("nan")]
    q = 100 * (1 - level) / 2
    return [float(np.percentile(ok, q)), float(np.percentile(ok, 100 - q))]


def correlation(
    x: npt.ArrayLike, y: npt.ArrayLike, *, key: KeyLike, resamples: int = 1000, level: float = 0.95
) -> dict[str, Any]:
    """Pearson r and Spearman ρ of ``x`` and ``y`` over the predictor-seed pairs, each with a
    percentile bootstrap interval over the predictors.

    Resample ``b`` draws P predictors with replacement (row ``b`` of
    :func:`cfjax.metrics.bootstrap_indices` ``(P, resamples, key=key)``), keeps every seed of
    each, and recomputes r and ρ on its P·S pairs; all resamples at once (``(B, P·S)`` arrays, no
    loop over resamples). A resample whose pairs are constant in ``x`` or ``y`` has no
    correlation and is left out of the percentiles (``defined_resamples`` counts the others). A
    NaN among the values (a ΔAUC undefined because a stratum holds one class) leaves r, ρ and
    their intervals undefined: all NaN, as ``scipy.stats.pearsonr`` would give.

    Args:
      x, y: ``(P, S)`` values of P predictors × S seeds (e.g. ΔAUC over sex and ``s_flip``).
      key: the resamples' PRNG key (a JAX key, raw key data or an int seed).
      resamples: number of bootstrap resamples B.
      level: the intervals' coverage, in (0, 1).

    Returns:
      ``{"pearson", "spearman"}`` (on all pairs; NaN when ``x`` or ``y`` is constant),
      ``{"pearson_interval", "spearman_interval"}`` (``[lo, hi]``, the ``100(1 − level)/2`` and
      ``100(1 + level)/2`` percentiles over the resamples), ``"resamples"``,
      ``"defined_resamples"``, ``"level"`` and ``"interval_over": "predictors"``.

    Example:
      >>> import numpy as np
      >>> x = np.arange(6.0).reshape(3, 2); y = x ** 2
      >>> c = correlation(x, y, key=0, resamples=200)
      >>> round(c["pearson"], 3), c["pearson_interval"][0] <= c["pearson"] <= c["pearson_interval"][1]
      (0.96, True)
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    _checks.check_ndim("x", x, 2, "of shape (P, S): predictors × seeds")
    if y.shape != x.shape:
        _checks.fail("y", f"shape {x.shape} (as `x`)", f"shape {y.shape}")
    if x.shape[0] < 2:
        _checks.fail("x", "at least 2 predictors (rows)", f"shape {x.shape}")
    resamples = _checks.check_positive_int("resamples", resamples)
    if not 0 < float(level) < 1:
        _checks.fail("level", "a coverage in (0, 1)", repr(level))
    n_pred, n_seeds = x.shape
    if not (
        np.isfinite(x).all() and np.isfinite(y).all()
    ):  # an undefined ΔAUC (a stratum with one class)
        nan = float("nan")
        return {
            "pearson": nan,
            "spearman": nan,
            "pearson_interval": [nan, nan],
            "spearman_interval": [nan, nan],
            "resamples": resamples,
            "defined_resamples": 0,
            "level": float(level),
            "interval_over": "predictors",
        }
    idx = np.asarray(cm.bootstrap_indices(n_pred, resamples, key=key))  # (B, P)
    xs = x[idx].reshape(resamples, n_pred * n_seeds)
    ys = y[idx].reshape(resamples, n_pred * n_seeds)
    r_b = pearson_rows(xs, ys)
    rho_b = pearson_rows(stats.rankdata(xs, axis=-1), stats.rankdata(ys, axis=-1))
    flat = np.ptp(x) == 0 or np.ptp(y) == 0
    r = float("nan") if flat else float(pearson_rows(x.ravel()[None], y.ravel()[None])[0])
    rho = float("nan") if flat else float(stats.spearmanr(x.ravel(), y.ravel())[0])
    return {
        "pearson": r,
        "spearman": rho,
        "pearson_interval": _percentiles(r_b, level),
        "spearman_interval": _percentiles(rho_b, level),
        "resamples": resamples,
        "defined_resamples": int(np.isfinite(r_b).sum()),
        "level": float(level),
        "interval_over": "predictors",
    }


def delta_auc_interval(
    p_obs: ArrayLike,
    y: ArrayLike,
    groups: Mapping[str, tuple[ArrayLike, int]],
    *,
    key: KeyLike,
    resamples: int,
    level: float = 0.95,
) -> dict[str, np.ndarray]:
    """Percentile bootstrap interval of the seed-mean ΔAUC of each predictor, per attribute.

    Resample ``b`` draws the test units of :func:`cfjax.metrics.bootstrap_indices` ``(N,
    resamples, key=key)``, the resamples :func:`cfjax.metrics.evaluate_bootstrap` and
    :func:`cfjax.study.evaluation.auc_interval` draw with the same key, so the intervals are paired with the
    reports' (a predictor's ΔAUC and its stability come from the same resampled test sets).
    ΔAUC, a max − min over strata, is biased upward under resampling: the interval need not
    centre on the estimate, and may even exclude a small one.

    Args:
      p_obs: ``(P, S, N)`` scores of P predictors × S seeds on the same N units.
      y: ``(N,)`` labels in {0, 1}.
      groups: ``{attribute: (codes (N,) in 0..G−1, G)}``.
      key: the resamples' PRNG key (a JAX key, raw key data or an int seed).
      resamples: number of resamples B.
      level: the intervals' coverage, in (0, 1).

    Returns:
      ``{attribute: (P, 2)}``, the ``100(1 − level)/2`` and ``100(1 + level)/2`` percentiles of
      the seed-mean ΔAUC over the resamples (a resample where a stratum lacks a class is left
      out; NaN when every one does).
    """
    p = jnp.asarray(p_obs)
    _checks.check_ndim("p_obs", p, 3, "of shape (P, S, N)")
    n_pred, n_seeds, n = p.shape
    resamples = _checks.check_positive_int("resamples", resamples)
    if not 0 < float(level) < 1:
        _checks.fail("level", "a coverage in (0, 1)", repr(level))
    flat = p.reshape(n_pred * n_seeds, n)
    yj = jnp.asarray(y).astype(flat.dtype)
    idx = cm.bootstrap_indices(n, resamples, key=key)  # (B, N)
    q = 100 * (1 - level) / 2
    out = {}
    for attr, (codes, g) in groups.items():
        c = jnp.asarray(np.asarray(codes).astype(np.int32))

        def one(i, c=c, g=int(g)):
            s = jax.vmap(lambda pp: cm.stratified_auc(pp[i], yj[i], c[i], num_groups=g))(
                flat
            )  # (P·S, G)
            return s.max(axis=-1) - s.min(axis=-1)

        reps = jax.lax.map(one, idx, batch_size=50)  # (B, P·S)
        means = (
            np.asarray(reps, np.float64).reshape(resamples, n_pred, n_seeds).mean(axis=-1)
        )  # (B, P)
        with (
            warnings.catch_warnings()
        ):  # a predictor without a defined resample: NaN, said in the docstring
            warnings.simplefilter("ignore", RuntimeWarning)
            out[attr] = np.stack(
                [np.nanpercentile(means, q, axis=0), np.nanpercentile(means, 100 - q, axis=0)],
                axis=-1,
            )
    return out
