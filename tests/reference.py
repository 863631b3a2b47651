"""Brute-force references for the metrics: explicit loops over units, atoms and pairs,
written independently of cfjax's vectorised kernels."""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-7


def bce(p: float, y: float) -> float:
    p = min(max(p, EPS), 1 - EPS)
    return -(y * math.log(p) + (1 - y) * math.log(1 - p))


def cvar_sorted(losses, weights, alpha: float) -> float:
    """Walk the atoms from the worst, taking mass until alpha is used up."""
    order = sorted(range(len(losses)), key=lambda k: -losses[k])
    left, total = alpha, 0.0
    for k in order:
        take = min(weights[k], left)
        total += take * losses[k]
        left -= take
        if left <= 0:
            break
    return total / alpha


def risks(p_obs, p_cf, y, q, alphas):
    n, k = p_cf.shape
    r_orig = r_cm = r_ie = r_wc = 0.0
    cvars = np.zeros(len(alphas))
    for i in range(n):
        losses = [bce(p_cf[i, j], y[i]) for j in range(k)]
        p_bar = sum(q[j] * p_cf[i, j] for j in range(k))
        r_orig += bce(p_obs[i], y[i])
        r_cm += bce(p_bar, y[i])
        r_ie += sum(q[j] * losses[j] for j in range(k))
        r_wc += max(losses)
        for a, alpha in enumerate(alphas):
            cvars[a] += cvar_sorted(losses, q, alpha)
    return r_orig / n, r_cm / n, r_ie / n, cvars / n, r_wc / n


def calibration(p, y, n_bins: int, dtype=np.float32):
    """ECE and MCE by looping over bins [b/B, (b+1)/B), the last one closed."""
    edges = [dtype(b) / dtype(n_bins) for b in range(n_bins + 1)]
    n = len(p)
    ece, mce = 0.0, 0.0
    for b in range(n_bins):
        lo, hi = edges[b], edges[b + 1]
        if b == n_bins - 1:
            members = [i for i in range(n) if lo <= p[i]]
        else:
            members = [i for i in range(n) if lo <= p[i] < hi]
        if not members:
            continue
        gap = abs(np.mean([y[i] for i in members]) - np.mean([p[i] for i in members]))
        ece += len(members) / n * gap
        mce = max(mce, gap)
    return ece, mce


def stability(p_obs, p_cf, q, tau):
    n, k = p_cf.shape
    s_var = s_flip = d_obs = shift = 0.0
    for i in range(n):
        p_bar = sum(q[j] * p_cf[i, j] for j in range(k))
        s_var += sum(q[j] * (p_cf[i, j] - p_bar) ** 2 for j in range(k))
        s_flip += sum(q[j] * ((p_cf[i, j] >= tau) != (p_obs[i] >= tau)) for j in range(k))
        d_obs += (p_obs[i] >= tau) != (p_bar >= tau)
        shift += abs(p_obs[i] - p_bar)
    return s_var / n, s_flip / n, d_obs / n, shift / n


def average_ranks(x):
    n = len(x)
    return np.array([sum(x[j] < x[i] for j in range(n)) + (sum(x[j] == x[i] for j in range(n)) + 1) / 2
                     for i in range(n)])


def kendall_tau_b(a, b):
    """O(n²) pair loop."""
    n = len(a)
    con = dis = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif da == db:
                con += 1
            else:
                dis += 1
    den = math.sqrt((con + dis + ties_a) * (con + dis + ties_b))
    return (con - dis) / den if den else math.nan


def correct_transitions(values, chains, increasing=True):
    values = np.atleast_2d(values)
    per_seed = []
    for row in values:
        count = 0
        for chain in chains:
            for a, b in zip(chain[:-1], chain[1:]):
                count += (row[b] > row[a]) if increasing else (row[b] < row[a])
        per_seed.append(count)
    return float(np.mean(per_seed))


def reflected_kernel(t, f, sigma: float):
    """K_σ(t_a, f_b) as a ``(len(t), len(f))`` matrix: the Gaussian's images at ±f + 2k,
    |k| <= 3 (the density of the normal noise folded onto [0, 1] by reflection)."""
    t, f = np.asarray(t, np.float64), np.asarray(f, np.float64)
    out = np.zeros((len(t), len(f)))
    for k in range(-3, 4):
        for image in (f + 2 * k, -f + 2 * k):
            d = (t[:, None] - image[None, :]) / sigma
            out += np.exp(-0.5 * d * d) / (sigma * math.sqrt(2 * math.pi))
    return out


def smoothed_reliability(f, y, sigma: float, t):
    """(t + Σ K (y − f) / Σ K, (1/n) Σ K) at the points t: the centred kernel regression of
    the labels on the scores and the kernel density of the scores."""
    kern = reflected_kernel(t, f, sigma)
    resid = kern @ (np.asarray(y, np.float64) - np.asarray(f, np.float64))
    return np.asarray(t) + resid / kern.sum(axis=1), kern.mean(axis=1)


def smooth_ece_at(f, y, sigma: float, points: int = 4000) -> float:
    """smECE_σ = ∫_0^1 |r̂_σ(t)| dt by the midpoint rule on ``points`` cells, with r̂_σ summed
    directly over the units and the kernel's mirror images ±f + 2k, |k| <= 3."""
    f, y = np.asarray(f, np.float64), np.asarray(y, np.float64)
    t = (np.arange(points) + 0.5) / points
    r = np.zeros(points)
    for k in range(-3, 4):
        for image in (f + 2 * k, -f + 2 * k):
            d = (t[:, None] - image[None, :]) / sigma
            r += np.exp(-0.5 * d * d) @ (y - f) / (sigma * math.sqrt(2 * math.pi))
    return float(np.mean(np.abs(r / len(f))))


def smooth_ece(f, y, sigma_min: float = 1e-3, points: int = 4000) -> tuple[float, float]:
    """(smECE, σ*) with σ* the root of smECE_σ − σ found by Brent's method."""
    from scipy import optimize

    g = lambda s: smooth_ece_at(f, y, s, points) - s  # noqa: E731
    if g(sigma_min) <= 0:
        return smooth_ece_at(f, y, sigma_min, points), sigma_min
    sigma = optimize.brentq(g, sigma_min, 1.0, xtol=1e-12)
    return smooth_ece_at(f, y, sigma, points), sigma


def brier(p, y) -> float:
    return float(sum((p[i] - y[i]) ** 2 for i in range(len(p))) / len(p))


def report(p_obs, p_cf, y, q, tau=0.5, alphas=(0.5, 0.25, 0.1), n_bins=15, smece=None):
    """Every field of ``cfjax.metrics.evaluate``'s report from the loops above (labels may be
    None: the label fields are then NaN), as ``{field: float or array}``. ``smece(f, y)``
    replaces the (slow) reference smooth ECE where a test checks it separately."""
    from scipy import stats

    p_bar = np.array([sum(q[j] * p_cf[i, j] for j in range(p_cf.shape[1]))
                      for i in range(p_cf.shape[0])])
    s_var, s_flip, d_obs, shift = stability(p_obs, p_cf, q, tau)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rho = stats.spearmanr(p_obs, p_bar).statistic
    ranks_obs, ranks_bar = average_ranks(p_obs), average_ranks(p_bar)
    out = dict(s_var=s_var, s_flip=s_flip, d_obs=d_obs, score_shift=shift, spearman=rho,
               kendall_tau_b=kendall_tau_b(p_obs, p_bar),
               rank_change=float(np.mean(np.abs(ranks_obs - ranks_bar))))
    if smece is None:
        smece = lambda f, t: smooth_ece(f, t)[0]  # noqa: E731
    if y is None:
        nan = math.nan
        out.update(risk_orig=nan, risk_cm=nan, risk_ie=nan, risk_cvar=np.full(len(alphas), nan),
                   risk_wc=nan, brier_orig=nan, ece_orig=nan, mce_orig=nan, smece_orig=nan,
                   brier_cm=nan, ece_cm=nan, mce_cm=nan, smece_cm=nan)
        return out
    r_orig, r_cm, r_ie, cvars, r_wc = risks(p_obs, p_cf, y, q, alphas)
    ece_o, mce_o = calibration(p_obs, y, n_bins, dtype=np.asarray(p_obs).dtype.type)
    ece_c, mce_c = calibration(p_bar, y, n_bins, dtype=np.asarray(p_obs).dtype.type)
    out.update(risk_orig=r_orig, risk_cm=r_cm, risk_ie=r_ie, risk_cvar=cvars, risk_wc=r_wc,
               brier_orig=brier(p_obs, y), ece_orig=ece_o, mce_orig=mce_o,
               brier_cm=brier(p_bar, y), ece_cm=ece_c, mce_cm=mce_c,
               smece_orig=smece(p_obs, y), smece_cm=smece(p_bar, y))
    return out
