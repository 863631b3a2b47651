"""Benchmark: CFU over the data's distinct rows (A, x), weighted by their counts, against the same
CFU over every unit, in one process.

Every term of CFU depends on a unit's A and x alone, so :func:`cfjax.sensitivity.cfu.cfu_of` takes
its mean over ``FairModel.distinct`` (definitions §3.5, "repeated rows"); the reference is the
same model with ``distinct=None``, the mean over all n units, which is what cfjax computed before
and what a user without the weighting computes. Both are the same jitted program apart from the
rows it reads. Timed on paper 001's data (float64, the recipes of ``experiments/sensitivity.py``):

- CFU and its gradient in P at 64 random correlations, jitted and mapped over them as the search
  maps its runs (``cfjax.platform.map_runs``: vmapped, in groups of 4 on XLA:CPU): one step of the
  search, whose runs (budgets x restarts) fill slots of 64 at least; first call (compilation
  included) and the median of ``--repeats`` warm calls;
- ``worst_case`` with its default settings over 16 budgets, first call and warm (law school; on
  the NHS survey with ``--nhs-search``: one call each way, minutes over all units on 2 cores).

The two paths' values are compared (relative difference printed), and the ratio reference ÷
distinct rows is printed warm and with compilation.

Run: ``python -m experiments.benchmarks.bench_distinct [--quick] [--nhs-search]``.
"""

from __future__ import annotations

import argparse
import os

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import cfjax.sensitivity as S  # noqa: E402
from cfjax import platform  # noqa: E402
from experiments.benchmarks.timing import conditions, first_time, median_time  # noqa: E402

LAW_SETTINGS = S.FitConfig()
NHS_SETTINGS = S.FitConfig(degrees=(1, 2, 3), lambdas=tuple(float(v) for v in np.logspace(-3, 3, 8)),
                          predictor_degrees=(1, 2, 3))
BUDGETS = np.linspace(0.0, 0.99, 16)
RUNS = 64  # the search's smallest slot of runs (budgets x restarts), one step of which is timed


def _correlations(count: int, m: int, seed: int = 0) -> np.ndarray:
    """``(count, m, m)`` random correlation matrices, every |off-diagonal| well inside (-1, 1)."""
    C = np.random.default_rng(seed).normal(size=(count, m, m))
    C = C @ np.swapaxes(C, 1, 2) + m * np.eye(m)
    d = 1 / np.sqrt(np.diagonal(C, axis1=1, axis2=2))
    return d[:, :, None] * C * d[:, None, :]


def _pair(label: str, distinct_fn, every_fn, repeats: int, warm: bool = True) -> tuple[float, float]:
    """First call and warm median of both paths, their values' largest relative difference, ratios."""
    t_first = {name: first_time(fn) for name, fn in (("distinct", distinct_fn), ("every", every_fn))}
    ours, ref = (np.concatenate([np.ravel(np.asarray(v)) for v in jax.tree.leaves(fn())])
                 for fn in (distinct_fn, every_fn))
    scale = np.maximum(np.abs(ref), np.finfo(np.float64).tiny)
    rel = float(np.max(np.abs(ours - ref) / scale))
    line = (f"  {label}: first call {t_first['every']:.2f} s (every unit) vs {t_first['distinct']:.2f} s "
            f"(distinct rows) = {t_first['every'] / t_first['distinct']:.2f}x")
    if warm:
        t_warm = {name: median_time(fn, repeats, warmup=0) for name, fn in (("distinct", distinct_fn),
                                                                            ("every", every_fn))}
        line += (f"; warm {t_warm['every']:.3f} s vs {t_warm['distinct']:.3f} s = "
                 f"{t_warm['every'] / t_warm['distinct']:.2f}x")
    print(line + f"; largest relative difference {rel:.1e}", flush=True)
    return t_first["every"] / t_first["distinct"], rel


def bench(name: str, model, repeats: int, search: bool, search_warm: bool) -> None:
    every = model.replace(distinct=None)
    u = model.data.n if model.distinct is None else int(model.distinct.index.shape[0])
    print(f"{name}: n = {model.data.n}, {u} distinct rows (A, x) ({model.data.n / u:.1f}x fewer), "
          f"m = {model.graph.m}, degrees {model.degrees}", flush=True)
    P = _correlations(RUNS, model.graph.m)
    # The runs as the search maps them (cfjax.platform.map_runs: vmapped, in groups of 4 on XLA:CPU,
    # whose concurrency-optimised scheduler stalls on 64 Model B fits vmapped over the NHS survey).
    step = jax.jit(lambda Ps, mod: platform.map_runs(jax.value_and_grad(lambda Q: S.cfu(mod, Q)), Ps))
    _pair(f"CFU and its gradient at {RUNS} correlations, mapped as the search's runs", lambda: step(P, model),
          lambda: step(P, every), repeats)
    if search:
        def curve(mod):
            return lambda: S.worst_case(mod, BUDGETS, key=jax.random.key(0)).cfu

        _pair(f"worst_case, defaults, {BUDGETS.size} budgets", curve(model), curve(every), max(1, repeats // 3),
              warm=search_warm)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.path.join("..", "shared", "data"))
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--quick", action="store_true", help="3 repeats; the NHS survey on a 20,000-unit subsample")
    ap.add_argument("--nhs-search", action="store_true", help="also the NHS worst case (one call each way)")
    ap.add_argument("--only", choices=["law_school", "nhs"], default=None, help="one data set")
    args = ap.parse_args(argv)
    repeats = 3 if args.quick else args.repeats
    print(conditions() + "; float64", flush=True)
    law = os.path.join(args.data_dir, "lawschool.csv")
    if args.only == "nhs":
        pass
    elif os.path.isfile(law):
        prob = S.load_law_school(law)
        bench("law school", S.fit(prob.graph, prob.data, LAW_SETTINGS), repeats, search=True, search_warm=True)
    else:
        print(f"law school data not found under {args.data_dir}: skipped")
    nhs = os.path.join(args.data_dir, "nhs.npz")
    if args.only == "law_school":
        pass
    elif os.path.isfile(nhs):
        prob = S.load_nhs(nhs)
        if args.quick:
            idx = np.sort(np.random.default_rng(0).choice(prob.data.n, 20_000, replace=False))
            d = prob.data
            prob = prob._replace(data=S.make_data(np.asarray(d.a)[idx, 0], np.asarray(d.X)[idx], np.asarray(d.y)[idx]))
        bench("NHS survey" + (" (20,000-unit subsample)" if args.quick else ""),
              S.fit(prob.graph, prob.data, NHS_SETTINGS), min(repeats, 3), search=args.nhs_search, search_warm=False)
    else:
        print(f"NHS data not found under {args.data_dir}: skipped")


if __name__ == "__main__":
    main()
