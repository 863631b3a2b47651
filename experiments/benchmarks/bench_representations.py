"""Benchmark: fitting and generating counterfactual representations for 100,000 × 384
embeddings (binary concept), cfjax against the same computation with numpy / scipy /
scikit-learn as paper 002's code does it, in one process.

Reference: the cross-covariance with numpy, ``scipy.linalg.orth`` for the concept basis, the
orthogonal part, one ``sklearn.linear_model.LinearRegression`` per concept value, then every
unit's CFR for every value. cfjax: :func:`cfjax.representations.fit_cfr` (per-value ridge from
per-class Gram matrices in one program; ridge 1e-3, negligible at this n) and
:func:`cfjax.representations.counterfactuals` for all values in one vmapped call. Both in
float32 on the same data; the CFRs' agreement is printed with the ratio.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np
import scipy.linalg
from sklearn.linear_model import LinearRegression

import cfjax.representations as R


def reference(X, z, k):
    onehot = np.eye(k, dtype=X.dtype)[z]
    cross = (X - X.mean(0)).T @ (onehot - onehot.mean(0)) / len(z)
    E = scipy.linalg.orth(cross).T  # (r, d)
    c = X @ E.T
    x_perp = X - c @ E
    out = np.empty((k,) + X.shape, X.dtype)
    for v in range(k):
        reg = LinearRegression().fit(x_perp[z == v], c[z == v])
        out[v] = x_perp + reg.predict(x_perp) @ E
    return out


def ours(X, z):
    model = R.fit_cfr(X, z, ridge=1e-3)
    return R.counterfactuals(model, X).block_until_ready()


def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    n, d, k = args.n, args.d, 2
    z = rng.integers(0, k, n).astype(np.int32)
    X = (rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) / np.sqrt(d)).astype(np.float32)
    X += (np.eye(k)[z] @ rng.normal(size=(k, d))).astype(np.float32)
    Xj = jax.device_put(X)
    t0 = time.perf_counter()
    ours(Xj, z)
    first = time.perf_counter() - t0
    t_ours, cfr = best_of(lambda: ours(Xj, z), args.repeats)
    t_ref, ref = best_of(lambda: reference(X, z, k), args.repeats)
    scale = np.abs(ref).max()
    diff = np.abs(np.asarray(cfr) - ref).max() / scale
    print(f"CFRs for {n:,} x {d} embeddings, {k} concept values (fit + generate every value), float32")
    print(f"  cfjax                             {t_ours * 1e3:9.1f} ms   (first call incl. compile {first * 1e3:.0f} ms)")
    print(f"  numpy + scipy.orth + sklearn      {t_ref * 1e3:9.1f} ms")
    print(f"  ratio                             {t_ref / t_ours:9.1f}x")
    print(f"  CFRs' agreement: max |difference| / max |CFR| = {diff:.1e}")
    return {"cfjax_s": t_ours, "reference_s": t_ref, "ratio": t_ref / t_ours, "max_rel_diff": float(diff)}


if __name__ == "__main__":
    main()
