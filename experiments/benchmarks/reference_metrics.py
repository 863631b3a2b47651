"""A plain numpy / scipy / scikit-learn implementation of the marginalisation report, written
the way a researcher would without cfjax. Used only as the benchmark's baseline."""

from __future__ import annotations

import numpy as np
import relplot
from scipy import stats
from sklearn.metrics import brier_score_loss

EPS = 1e-7


def _bce(p, y):
    p = np.clip(p, EPS, 1 - EPS)
    return -(y * np.log(p) + (1 - y) * np.log1p(-p))


def _calibration(p, y, n_bins):
    edges = np.arange(1, n_bins, dtype=p.dtype) / n_bins
    idx = np.searchsorted(edges, p, side="right")
    count = np.bincount(idx, minlength=n_bins)
    sum_p = np.bincount(idx, weights=p, minlength=n_bins)
    sum_y = np.bincount(idx, weights=y, minlength=n_bins)
    gap = np.abs(sum_y - sum_p)
    ece = gap.sum() / len(p)
    mce = np.max(np.where(count > 0, gap / np.maximum(count, 1), 0))
    return ece, mce


def _cvar(losses, q, alphas):
    order = np.argsort(-losses, axis=1)
    worst = np.take_along_axis(losses, order, axis=1)
    mass = q[order]
    before = np.cumsum(mass, axis=1) - mass
    out = []
    for a in alphas:
        take = np.clip(a - before, 0, mass)
        out.append(np.mean((worst * take).sum(axis=1) / a))
    return np.array(out)


def reference_report(p_obs, p_cf, y, q=None, tau=0.5, alphas=(0.5, 0.25, 0.1), n_bins=15, smooth=True):
    """The report in numpy/scipy/scikit-learn; ``smooth=False`` leaves out the smooth ECE fields."""
    n, k = p_cf.shape
    q = np.full(k, 1.0 / k, p_cf.dtype) if q is None else q
    p_bar = p_cf @ q
    losses = _bce(p_cf, y[:, None])
    ece_o, mce_o = _calibration(p_obs, y, n_bins)
    ece_c, mce_c = _calibration(p_bar, y, n_bins)
    r_obs, r_bar = stats.rankdata(p_obs), stats.rankdata(p_bar)
    # Smooth ECE as a user would compute it: relplot (Błasiok & Nakkiran's package). Its
    # discretisation differs from cfjax's by design (a 200-node grid, the kernel truncated at
    # distance 0.5, one reflection), so the two agree to about 1e-3 absolute, not to rounding.
    sm_o, sm_c = ((float(relplot.smECE(np.asarray(p, np.float64), np.asarray(y, np.float64))) if smooth else np.nan)
                  for p in (p_obs, p_bar))
    return dict(
        risk_orig=np.mean(_bce(p_obs, y)),
        risk_cm=np.mean(_bce(p_bar, y)),
        risk_ie=np.mean(losses @ q),
        risk_cvar=_cvar(losses, q, alphas),
        risk_wc=np.mean(losses.max(axis=1)),
        brier_orig=brier_score_loss(y, p_obs),
        ece_orig=ece_o,
        mce_orig=mce_o,
        brier_cm=brier_score_loss(y, p_bar),
        ece_cm=ece_c,
        mce_cm=mce_c,
        smece_orig=sm_o,
        smece_cm=sm_c,
        s_var=np.mean(((p_cf - p_bar[:, None]) ** 2) @ q),
        s_flip=np.mean(((p_cf >= tau) != (p_obs >= tau)[:, None]) @ q),
        d_obs=np.mean((p_obs >= tau) != (p_bar >= tau)),
        score_shift=np.mean(np.abs(p_obs - p_bar)),
        spearman=stats.spearmanr(p_obs, p_bar).statistic,
        kendall_tau_b=stats.kendalltau(p_obs, p_bar).statistic,
        rank_change=np.mean(np.abs(r_obs - r_bar)),
    )
