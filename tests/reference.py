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
