"""Benchmark: bootstrap intervals of the sensitivity analysis, B resamples of the whole analysis
(refit of Models A/B, the fair predictor and the baselines; the worst case at each budget by a
local search from the full data's maximisers; the benchmarks' CFU; an inverse budget by
bisection) as one vmapped program (:func:`cfjax.sensitivity.bootstrap`) against a Python loop of
B calls of the same per-resample function, jitted once and called per resample (the best a
skilled user would write without vmap).

Both are timed including compilation (the first call) and warm (the median of ``--repeats``
further calls); the ratio loop ÷ vmapped is printed for both. The problem: the built-in
synthetic SCM (``--n`` units), ``--budgets`` budgets in [0.3, 0.9], float64.

``--law`` (a path to lawschool.csv, default ``../shared/data/lawschool.csv`` when it exists;
``--law ''`` skips it): ``bootstrap`` on the law school data with paper 001's settings at the
demo's 16 budgets (``experiments/sensitivity.py``), ``--law-resamples`` resamples, timed once
(compilation included) and then the time per resample of a warm call.

``--nhs`` (a path to nhs.npz, default ``../shared/data/nhs.npz`` when it exists; ``--nhs ''``
skips it): the NHS survey's bootstrap at its benchmarks' budgets (the committed review's
settings), each resample's refit as counts over the survey's distinct rows (A, x), against the
same program reading every drawn unit (the bootstrap before the counts), ``--nhs-resamples``
resamples each, warm, and the time 200 resamples take.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import cfjax.sensitivity as S  # noqa: E402
from cfjax.sensitivity import resample  # noqa: E402
from cfjax.sensitivity.resample import resample_analysis  # noqa: E402
from experiments.benchmarks.timing import conditions, first_time, median_time  # noqa: E402

SETTINGS = S.FitConfig(degrees=(2,), lambdas=(1e-2, 1.0), predictor_degrees=(2,))
LAW_BUDGETS = np.linspace(0.0, 0.99, 16)  # the demo's (experiments/sensitivity.py)


def vmapped_against_loop(n: int, resamples: int, budgets: int, steps: int, bisect: int, repeats: int) -> None:
    prob = S.synthetic(n, key=0)
    model = S.fit(prob.graph, prob.data, SETTINGS)
    p = np.linspace(0.3, 0.9, budgets)
    wc = S.worst_case(model, p, key=0, config=S.SearchConfig(warn_ratio=None))
    level = float(np.sqrt(wc.cfu[0] * wc.cfu[-1]))
    opts = dict(key=1, resamples=resamples, worst=wc, levels={"mid": level}, steps=steps, bisect=bisect)

    def vmapped():
        return S.bootstrap(model, p, key=1, resamples=resamples, worst=wc, levels={"mid": level},
                           options=S.BootstrapConfig(steps=steps, bisect=bisect)).values["worst_case"]

    # The loop: the same per-resample program (one compilation, cached), called once per resample
    # with the same units bootstrap draws (its resample b: randint(split(key, B)[b], (n,), 0, n)).
    keys = jax.random.split(jax.random.key(1), resamples)
    draws = [jax.random.randint(keys[b], (n,), 0, n, jnp.int32) for b in range(resamples)]
    per = {k: v for k, v in opts.items() if k not in ("key", "resamples")}

    def loop():
        return jnp.stack([resample_analysis(model, p, idx, **per)["worst_case"] for idx in draws])

    t_vmap_first = first_time(vmapped)
    t_loop_first = first_time(loop)
    t_vmap = median_time(vmapped, repeats, warmup=0)
    t_loop = median_time(loop, repeats, warmup=0)
    same = np.allclose(np.asarray(vmapped()), np.asarray(loop()), rtol=1e-9, atol=0)
    print(f"synthetic SCM, n = {n}, {budgets} budgets, {resamples} resamples, {steps} local steps x 3 starts, "
          f"benchmarks k = 1, 2, 3, one inverse budget ({bisect} bisections); the two agree: {same}")
    print(f"  including compilation: vmapped {t_vmap_first:.1f} s, loop {t_loop_first:.1f} s, "
          f"ratio {t_loop_first / t_vmap_first:.2f}x")
    print(f"  warm (median of {repeats}):  vmapped {t_vmap:.1f} s, loop {t_loop:.1f} s, ratio {t_loop / t_vmap:.2f}x")


def law_school(path: str, resamples: int, steps: int, bisect: int) -> None:
    prob = S.load_law_school(path)
    t0 = time.perf_counter()
    model = S.fit(prob.graph, prob.data, S.FitConfig())
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    wc = S.worst_case(model, LAW_BUDGETS, key=0, config=S.SearchConfig(restarts=4, warn_ratio=None))
    t_wc = time.perf_counter() - t0
    opts = dict(key=1, worst=wc, levels={"blind": "blind"}, options=S.BootstrapConfig(steps=steps, bisect=bisect))
    t_first = first_time(lambda: S.bootstrap(model, LAW_BUDGETS, resamples=resamples, **opts).p_max)
    t0 = time.perf_counter()
    iv = S.bootstrap(model, LAW_BUDGETS, resamples=resamples, **opts)
    t_warm = time.perf_counter() - t0
    per = t_warm / (resamples + 1)
    print(f"law school, n = {prob.data.n}: fit {t_fit:.1f} s, worst_case (16 budgets x 4 restarts) {t_wc:.1f} s")
    print(f"  bootstrap, {resamples} resamples x 16 budgets ({steps} local steps x 3 starts), benchmarks, the blind "
          f"level's inverse budget: first call {t_first:.1f} s (compilation included), warm {t_warm:.1f} s "
          f"({per:.2f} s per resample)")
    print(f"  {iv!r}")


def _reading_units(data):
    """The refit's rows when every unit is read one by one (the bootstrap before resamples
    became counts over distinct rows): the data themselves."""
    return data, jnp.arange(data.n, dtype=jnp.int32)


def nhs(path: str, resamples: int) -> None:
    """The NHS survey's bootstrap at its benchmarks' budgets (the committed review's settings):
    resamples as counts over the distinct rows (A, x) against the same program reading every
    drawn unit, the same resamples (one key), timed warm after a first call each."""
    from experiments.sensitivity import NHS_SETTINGS

    prob = S.load_nhs(path)
    model = S.fit(prob.graph, prob.data, NHS_SETTINGS)
    bench = S.benchmarks(model, k=(1.0, 2.0, 3.0))
    grid = np.unique(np.asarray(bench.p_max)[np.asarray(bench.feasible) & (np.asarray(bench.p_max) > 0)])
    wc = S.worst_case(model, grid, key=0, config=S.SearchConfig(batch_size=4096, steps=200))
    rows = resample._rows(prob.data)[0].n

    def run():
        return S.bootstrap(model, grid, key=7, resamples=resamples, worst=wc, benchmarks=(1.0, 2.0, 3.0)).values

    t_first = first_time(lambda: run()["worst_case"])
    t0 = time.perf_counter()
    counts = run()
    t_counts = time.perf_counter() - t0
    kept = resample._rows
    resample._rows = _reading_units
    try:
        t_units_first = first_time(lambda: run()["worst_case"])
        t0 = time.perf_counter()
        units = run()
        t_units = time.perf_counter() - t0
    finally:
        resample._rows = kept
    gap = max(float(np.nanmax(np.abs(counts[k] - units[k]) / np.maximum(np.abs(units[k]), 1e-300)))
              for k in counts if np.isfinite(units[k]).any())
    per_counts, per_units = t_counts / (resamples + 1), t_units / (resamples + 1)
    print(f"NHS survey, n = {prob.data.n} units, {rows} distinct rows (A, x); {grid.size} budgets (its benchmarks'), "
          f"{resamples} resamples (+ the identity), benchmarks k = 1, 2, 3; the two agree to {gap:.1e} relative")
    print(f"  warm: counts over rows {per_counts:.2f} s per resample, reading units {per_units:.2f} s: "
          f"ratio {per_units / per_counts:.1f}x; first calls (compilation included) {t_first:.0f} s and "
          f"{t_units_first:.0f} s")
    print(f"  200 resamples: about {(t_first - t_counts + 201 * per_counts) / 60:.1f} min with counts "
          f"(one compilation plus 201 warm resamples), {(t_units_first - t_units + 201 * per_units) / 60:.0f} min "
          "reading units")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--resamples", type=int, default=200)
    ap.add_argument("--budgets", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--bisect", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1)
    default_law = os.path.join("..", "shared", "data", "lawschool.csv")
    ap.add_argument("--law", default=default_law if os.path.isfile(default_law) else "")
    ap.add_argument("--law-resamples", type=int, default=20)
    ap.add_argument("--law-steps", type=int, default=10)
    default_nhs = os.path.join("..", "shared", "data", "nhs.npz")
    ap.add_argument("--nhs", default=default_nhs if os.path.isfile(default_nhs) else "",
                    help="the NHS survey (nhs.npz; '' skips it)")
    ap.add_argument("--nhs-resamples", type=int, default=3)
    args = ap.parse_args(argv)
    print(conditions())
    vmapped_against_loop(args.n, args.resamples, args.budgets, args.steps, args.bisect, args.repeats)
    if args.law:
        law_school(args.law, args.law_resamples, args.law_steps, 6)
    if args.nhs:
        nhs(args.nhs, args.nhs_resamples)


if __name__ == "__main__":
    main()
