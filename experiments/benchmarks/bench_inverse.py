"""Benchmark: the inverse question's bisection (``cfjax.sensitivity.inverse_budget``), its probes
as local searches from the bracket's worst cases (now) against a whole ``worst_case`` search at
each probe over the grid budgets below it (the previous code, written out here), in one process.

On the built-in synthetic problem (``--n`` units, true error correlation 0.5, float64) with the
demo's fit: the worst-case curve at 7 budgets up to 0.99 is computed once and given to both as
the coarse curve (``worst=``); then each answers the demo's two questions at tolerance ``--tol``
— the budget whose worst case reaches the true correlation's CFU, and a level between two grid
budgets higher up. Printed per question: both brackets and whether they agree, the first call of
each (compilation included) and the median of ``--repeats`` warm calls, and the ratio (search per
probe ÷ local probes) against both.
"""

from __future__ import annotations

import argparse

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import cfjax.sensitivity as S  # noqa: E402
from experiments.benchmarks.timing import conditions, first_time, median_time  # noqa: E402


def search_per_probe(model, wc, level: float, tol: float, key) -> tuple[float, float]:
    """The previous bisection: the curve's bracket, then at each probe a whole search over the
    grid budgets below it and the probe. Returns the bracket ``(lo, hi)``."""
    budgets, curve = np.asarray(wc.p_max, np.float64), np.asarray(wc.cfu, np.float64)
    j = int(np.flatnonzero(curve >= level)[0])
    below = budgets[:j]
    lo, hi = (float(below[-1]) if j else 0.0), float(budgets[j])
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        value = float(S.worst_case(model, np.append(below, mid), key=key).cfu[-1])
        lo, hi = (lo, mid) if value >= level else (mid, hi)
    return lo, hi


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    print(conditions())
    prob = S.synthetic(args.n, correlation=0.5, key=0)
    model = S.fit(prob.graph, prob.data,
                  S.FitConfig(degrees=(2,), lambdas=(1e-2, 1.0, 1e2), predictor_degrees=(2,)))
    key = jax.random.key(0)
    wc = S.worst_case(model, np.unique(np.append(np.linspace(0.0, 0.99, 6), 0.5)), key=key)
    curve = np.asarray(wc.cfu, np.float64)
    levels = {"the true correlation's CFU": float(S.cfu(model, prob.true_correlation)),
              "between the two largest budgets": float(np.sqrt(curve[-2] * curve[-1]))}
    print(f"synthetic problem, n = {args.n}, 3 confounded features; curve at p_max = "
          f"{np.round(np.asarray(wc.p_max, np.float64), 3).tolist()}; tolerance {args.tol}")
    for name, level in levels.items():
        def local():
            inv = S.inverse_budget(model, level, key=key, worst=wc, tol=args.tol)
            return inv.lo, inv.hi

        def searches():
            return search_per_probe(model, wc, level, args.tol, key)

        t_local, t_search = first_time(local), first_time(searches)
        w_local, w_search = median_time(local, args.repeats, 0), median_time(searches, args.repeats, 0)
        a, b = local(), searches()
        agree = bool(np.allclose(a, b, rtol=0, atol=1e-12))
        print(f"  level {level:.4g} ({name}): local probes bracket ({a[0]:.5f}, {a[1]:.5f}], a search per "
              f"probe ({b[0]:.5f}, {b[1]:.5f}]; agree: {agree}")
        print(f"    first call: local probes {t_local:.2f} s, a search per probe {t_search:.2f} s "
              f"(ratio {t_search / t_local:.1f}x); warm: {w_local * 1e3:.1f} ms vs {w_search * 1e3:.0f} ms "
              f"(ratio {w_search / w_local:.0f}x)")


if __name__ == "__main__":
    main()
