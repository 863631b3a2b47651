"""Benchmark: fitting and generating counterfactual representations (CFRs) for 100,000 × 384
embeddings (binary concept, float32), cfjax against two numpy references, side by side in
one process.

- cfjax: :func:`cfjax.representations.fit_cfr` (orth subspace; per-value ridge regressions
  from per-class Gram matrices, normal equations; ridge 1e-3) and
  :func:`cfjax.representations.counterfactuals` for every value in one vmapped call. Its time
  includes its input checks.
- numpy, same algorithm: what a careful numpy user writes for the same computation — the data
  centred once, per class the rows' sum and Gram matrix (``Xv.T @ Xv``, which numpy hands to
  BLAS as a symmetric rank-k update), the cross-covariance from the class sums, the orth basis
  by SVD, each class's normal equations on x⊥ (the same ridge) solved, the residual
  covariances' Cholesky factors, and every unit's CFR for every value written into a
  preallocated (n, k, d) array (cfjax's layout, units first).
- paper 002's recipe: the cross-covariance with numpy, ``scipy.linalg.orth``, the orthogonal
  part, one ``sklearn.linear_model.LinearRegression`` (least squares by SVD) per concept
  value, then every unit's CFR for every value.

Each time is the median of warm repeats; cfjax's first call (compilation included) is
printed too, and the ratios (reference time ÷ cfjax time: above 1, cfjax is faster) against
both. The CFRs' agreement is printed with the ratios.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
import scipy.linalg
from sklearn.linear_model import LinearRegression

import cfjax.representations as R
from experiments.benchmarks.timing import conditions, first_time, median_time


def paper_recipe(X, z, k):
    """Paper 002's recipe: scipy's orth, one scikit-learn LinearRegression per concept value."""
    onehot = np.eye(k, dtype=X.dtype)[z]
    cross = (X - X.mean(0)).T @ (onehot - onehot.mean(0)) / len(z)
    E = scipy.linalg.orth(cross).T  # (r, d)
    c = X @ E.T
    x_perp = X - c @ E
    out = np.empty((X.shape[0], k, X.shape[1]), X.dtype)  # (n, k, d), as cfjax
    for v in range(k):
        reg = LinearRegression().fit(x_perp[z == v], c[z == v])
        out[:, v] = x_perp + reg.predict(x_perp) @ E
    return out


def _cholesky(a):
    """Cholesky factor, NaN where ``a`` is not positive definite (as ``jnp.linalg.cholesky``)."""
    try:
        return np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        return np.full_like(a, np.nan)


def numpy_same_algorithm(X, z, k, ridge, jitter=1e-6):
    """cfjax's algorithm in numpy: class moments, orth basis, ridge normal equations on x⊥
    (unpenalised intercept), residual covariances from a pass over the residuals and their
    Cholesky factors, CFRs into a preallocated array."""
    n, d = X.shape
    center = X.mean(0)
    Xc = X - center
    counts, means, grams = np.empty(k), np.empty((k, d), X.dtype), np.empty((k, d, d), X.dtype)
    for v in range(k):
        Xv = Xc[z == v]
        counts[v] = len(Xv)
        means[v] = Xv.sum(0) / len(Xv)
        grams[v] = Xv.T @ Xv - len(Xv) * np.outer(means[v], means[v])
    # Σ_XZ of centred X and one-hot z is the class sums over n.
    cross = (means * (counts / n)[:, None].astype(X.dtype)).T  # (d, k)
    U, s, _ = np.linalg.svd(cross, full_matrices=False)
    r = min(int(np.sum(s > max(cross.shape) * np.finfo(s.dtype).eps * s[0])), k - 1)
    E = np.ascontiguousarray(U[:, :r].T)  # (r, d): coord = E, basis = Eᵀ, centre 0
    T = np.eye(d, dtype=X.dtype) - E.T @ E
    coef = np.empty((k, d, r), X.dtype)
    intercept = np.empty((k, r), X.dtype)
    chol = np.empty((k, r, r), X.dtype)
    for v in range(k):
        G, mean = grams[v], means[v] + center
        GT = G @ T
        Gp, cross_v = T.T @ GT, T.T @ (G @ E.T)
        coef[v] = np.linalg.solve(Gp + ridge * np.eye(d, dtype=X.dtype), cross_v)
        mean_perp = mean - E.T @ (E @ mean)
        intercept[v] = E @ mean - mean_perp @ coef[v]
        # Residual covariance from the residuals (a second pass, as cfjax): the moment formula
        # cc - coefᵀcross - crossᵀcoef + coefᵀGp coef cancels catastrophically in float32.
        res = Xc[z == v] @ (E.T - T @ coef[v]) - (means[v] @ (E.T - T @ coef[v]))
        resid = res.T @ res / counts[v]
        chol[v] = _cholesky(resid + (jitter * np.trace(resid) / r) * np.eye(r, dtype=X.dtype))
    # CFRs: x + (ν_v(x⊥) - c) Eᵀ with x⊥ @ coef = x @ coef - c @ (E coef), never forming x⊥.
    c = X @ E.T
    out = np.empty((n, k, d), X.dtype)  # (n, k, d), as cfjax
    for v in range(k):
        shift = X @ coef[v] - c @ (E @ coef[v]) + (intercept[v] - c)
        np.matmul(shift, E, out=out[:, v])
        out[:, v] += X
    return out, chol


def ours(X, z, ridge):
    model = R.fit_cfr(X, z, ridge=ridge)
    return R.counterfactuals(model, X)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    n, d, k, ridge = args.n, args.d, 2, 1e-3
    z = rng.integers(0, k, n).astype(np.int32)
    X = (rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) / np.sqrt(d)).astype(np.float32)
    X += (np.eye(k)[z] @ rng.normal(size=(k, d))).astype(np.float32)
    Xj = jax.device_put(X)
    print(conditions())
    start = time.perf_counter()
    first = first_time(lambda: ours(Xj, z, ridge))
    cfr = np.asarray(ours(Xj, z, ridge))
    same, _ = numpy_same_algorithm(X, z, k, ridge)
    paper = paper_recipe(X, z, k)
    t_ours = median_time(lambda: ours(Xj, z, ridge), args.repeats, warmup=1)
    t_same = median_time(lambda: numpy_same_algorithm(X, z, k, ridge), args.repeats, warmup=1)
    t_paper = median_time(lambda: paper_recipe(X, z, k), args.repeats, warmup=1)
    scale = np.abs(paper).max()
    print(f"CFRs for {n:,} x {d} embeddings, {k} concept values (fit + generate every value), "
          f"float32, ridge {ridge:g}; warm median of {args.repeats} runs")
    print(f"  {'':44s} {'time':>10s}   {'÷ cfjax':>8s}  {'÷ cfjax 1st call':>16s}")
    print(f"  {'cfjax (warm)':44s} {t_ours * 1e3:8.1f}ms")
    print(f"  {'cfjax first call (incl. compile)':44s} {first * 1e3:8.1f}ms")
    for label, t in (("numpy, same algorithm (normal equations)", t_same),
                     ("paper's recipe: scipy orth + sklearn LinReg", t_paper)):
        print(f"  {label:44s} {t * 1e3:8.1f}ms   {t / t_ours:7.2f}x  {t / first:15.2f}x")
    print(f"  CFRs' agreement, max |difference| / max |CFR|: cfjax vs numpy same algorithm "
          f"{np.abs(cfr - same).max() / scale:.1e}, cfjax vs paper's recipe {np.abs(cfr - paper).max() / scale:.1e}")
    print(f"run time {time.perf_counter() - start:.0f} s")
    return {"cfjax_s": t_ours, "cfjax_first_s": first, "numpy_same_s": t_same, "paper_recipe_s": t_paper,
            "ratio_same": t_same / t_ours, "ratio_paper": t_paper / t_ours}


if __name__ == "__main__":
    main()
