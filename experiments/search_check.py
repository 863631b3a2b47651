"""Does the default worst-case search agree with a much larger one?

For each dataset and each budget of the demo's curve (``np.unique(np.append(np.linspace(0, 0.99,
6), 0.5))``), :func:`cfjax.sensitivity.worst_case` with its default settings against a search
with 10x the restarts, steps, patience, polish and screened boundary rays (the adaptive rounds
as by default): the relative difference ``(large - default) / large`` and whether it is within
1e-3. Also the search before the adaptive rounds (``max_rounds=0``, the earlier defaults
otherwise) for its cost and answer. Datasets: the demo's synthetic problem (seeds 0-4, n = 1000 as
the demo fits it and n = 600 as ``--quick`` does), law school (all 21,791 units) and NHS (a
random subsample of ``--nhs-n`` units, 5,000 by default), with the settings of
``experiments/sensitivity.py``. Prints the tables and writes
``experiments/reports/sensitivity/search_check.md`` (rewritten after each dataset).

Run: ``python -m experiments.search_check [--quick]`` (``--quick``: seed 0 only, law school and
NHS on small subsamples). The whole NHS survey: ``--only nhs --nhs-n 209112 --out
experiments/reports/sensitivity/search_check_nhs.md`` (the large search took 84 minutes on 2
shared CPU cores, CFU taken over the survey's 39,373 distinct rows).
"""

from __future__ import annotations

import argparse
import os
import platform as host
import sys
import time
import warnings

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import cfjax.sensitivity as S  # noqa: E402
from cfjax.io import atomic_write_bytes  # noqa: E402
from cfjax.sensitivity.cfu import negligible_cfu  # noqa: E402

BUDGETS = np.unique(np.append(np.linspace(0.0, 0.99, 6), 0.5))
RTOL = 1e-3
#: the defaults before the adaptive rounds (restarts 4, steps 500, patience 50, polish 30, 16 rays)
BEFORE = dict(restarts=4, steps=500, patience=50, polish=30, boundary_starts=16, max_rounds=0)
#: 10x the default search's restarts, steps, patience, polish and screened rays
LARGE = dict(restarts=40, steps=5000, patience=500, polish=300, boundary_starts=160)
DEMO_SETTINGS = S.FitConfig(degrees=(2,), lambdas=(1e-2, 1.0, 1e2), predictor_degrees=(2,))
LAW_SETTINGS = S.FitConfig()  # experiments/sensitivity.py's
NHS_SETTINGS = S.FitConfig(degrees=(1, 2, 3), lambdas=tuple(float(v) for v in np.logspace(-3, 3, 8)),
                          predictor_degrees=(1, 2, 3))


def _subsample(prob: S.Problem, n: int | None, seed: int = 0) -> S.Problem:
    """``n`` units drawn at random without replacement (all of them when None or more)."""
    d = prob.data
    if n is None or n >= d.n:
        return prob
    idx = np.sort(np.random.default_rng(seed).choice(d.n, n, replace=False))
    return prob._replace(data=S.make_data(np.asarray(d.a)[idx, 0], np.asarray(d.X)[idx], np.asarray(d.y)[idx]))


def _timed(model, **opts):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", S.ConvergenceWarning)
        warnings.simplefilter("ignore", S.ShrinkageWarning)
        t0 = time.perf_counter()
        wc = S.worst_case(model, BUDGETS, key=jax.random.key(0), config=S.SearchConfig(**opts))
        np.asarray(wc.cfu)
        seconds = time.perf_counter() - t0
    notes = [str(w.message) for w in caught if issubclass(w.category, S.ConvergenceWarning)]
    return wc, seconds, notes


def check(name: str, model, log=print) -> dict:
    """The default, earlier and large searches on one model: rows per budget and the times."""
    distinct = model.data.n if model.distinct is None else int(model.distinct.index.shape[0])
    log(f"{name}: n = {model.data.n} ({distinct} distinct rows), m = {model.graph.m}")
    default, first_s, notes = _timed(model)  # the first call compiles
    default, default_s, _ = _timed(model)
    before, before_s, _ = _timed(model, **BEFORE)
    log(f"  default {default_s:.1f} s (first call {first_s:.1f} s), before {before_s:.1f} s; large search ...")
    large, large_s, _ = _timed(model, **LARGE)
    negligible = negligible_cfu(model)
    rows = []
    for i, p in enumerate(BUDGETS):
        d, b, g = (float(np.asarray(w.cfu)[i]) for w in (default, before, large))
        rel = 0.0 if max(abs(d), abs(g)) <= negligible else (g - d) / g
        rows.append(dict(p_max=float(p), default=d, rounds=int(np.asarray(default.rounds)[i]), large=g, rel=rel,
                         agrees=abs(rel) <= RTOL, before=b,
                         before_rel=0.0 if max(abs(b), abs(g)) <= negligible else (g - b) / g))
        log(f"  p_max {p:.4g}: default {d:.8g} (rounds {rows[-1]['rounds']}), large {g:.8g}, rel {rel:+.2e} "
            f"{'ok' if rows[-1]['agrees'] else 'DIFFERS'}")
    log(f"  large search {large_s:.1f} s; default warnings: {len(notes)}")
    return dict(name=name, n=int(model.data.n), distinct=distinct, m=int(model.graph.m), rows=rows, default_s=default_s,
                first_s=first_s, before_s=before_s, large_s=large_s, warnings=notes)


def report(results: list[dict], command: str) -> str:
    agree = all(r["agrees"] for res in results for r in res["rows"])
    worst = max((abs(r["rel"]) for res in results for r in res["rows"]), default=0.0)
    lines = ["# Does the default worst-case search agree with a 10x larger one?", "",
             f"Generated by `{command}`" +
             f" on {host.machine()} ({os.cpu_count()} CPUs, shared; times are wall seconds and vary with the load).",
             "", f"Budgets: the demo's curve, {', '.join(f'{p:.4g}' for p in BUDGETS)}. *Default*: "
             "`worst_case(model, budgets, key=0)` with its default settings (4 restarts, 500 steps, patience 50, "
             "polish 30, 16 screened rays, up to 3 adaptive rounds of 4 restarts where two restarts do not agree "
             "to 1e-3). *Large*: 10x the restarts, steps, patience, polish and rays "
             f"(`{LARGE}`). *Before*: the search before the adaptive rounds (`{BEFORE}`). "
             "rel = (large - default) / large; it agrees when |rel| <= 1e-3 (or both are rounding). "
             "float64 throughout.", "",
             f"**Every budget agrees: {'yes' if agree else 'NO'}** (largest |rel| {worst:.2e}).", "",
             "## Run times (seconds)", "",
             "| dataset | n | distinct rows (A, x) | default (first call, compiling) | default | before | large |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for res in results:
        lines.append(f"| {res['name']} | {res['n']} | {res.get('distinct', res['n'])} | {res['first_s']:.1f} | "
                     f"{res['default_s']:.1f} | {res['before_s']:.1f} | {res['large_s']:.1f} |")
    for res in results:
        lines += ["", f"## {res['name']} (n = {res['n']}, m = {res['m']})", "",
                  "| p_max | default CFU | rounds | large CFU | rel | agrees | before CFU | before rel |",
                  "|---:|---:|---:|---:|---:|:---:|---:|---:|"]
        for r in res["rows"]:
            lines.append(f"| {r['p_max']:.4g} | {r['default']:.8g} | {r['rounds']} | {r['large']:.8g} | "
                         f"{r['rel']:+.2e} | {'yes' if r['agrees'] else '**no**'} | {r['before']:.8g} | "
                         f"{r['before_rel']:+.2e} |")
        if res["warnings"]:
            lines += ["", "Default search warnings:", ""] + [f"- {w}" for w in res["warnings"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="seed 0 only; law school and NHS on small subsamples")
    ap.add_argument("--data-dir", default=os.path.join("..", "shared", "data"))
    ap.add_argument("--nhs-n", type=int, default=5000, help="NHS units drawn at random (seed 0)")
    ap.add_argument("--law-n", type=int, default=None, help="law school units drawn at random (default: all)")
    ap.add_argument("--only", nargs="*", choices=["synthetic", "law_school", "nhs"])
    ap.add_argument("--out", default=os.path.join("experiments", "reports", "sensitivity", "search_check.md"))
    args = ap.parse_args(argv)
    only = set(args.only or ["synthetic", "law_school", "nhs"])
    results: list[dict] = []
    command = " ".join(["python -m experiments.search_check"] + list(sys.argv[1:] if argv is None else argv))

    def done(res):
        results.append(res)
        atomic_write_bytes(args.out, report(results, command).encode())

    nhs = os.path.join(args.data_dir, "nhs.npz")
    if "nhs" in only and os.path.isfile(nhs):
        prob = _subsample(S.load_nhs(nhs), 2000 if args.quick else args.nhs_n)
        label = "NHS" + (" (all units)" if prob.data.n == 209112 else " (random subsample)")
        done(check(label, S.fit(prob.graph, prob.data, NHS_SETTINGS)))
    law = os.path.join(args.data_dir, "lawschool.csv")
    if "law_school" in only and os.path.isfile(law):
        prob = _subsample(S.load_law_school(law), 3000 if args.quick else args.law_n)
        label = "law school" + ("" if prob.data.n == 21791 else " (random subsample)")
        done(check(label, S.fit(prob.graph, prob.data, LAW_SETTINGS)))
    if "synthetic" in only:
        for n in (1000, 600):
            for seed in ((0,) if args.quick else range(5)):
                prob = S.synthetic(n, correlation=0.5, key=seed)
                done(check(f"synthetic n={n} seed {seed}", S.fit(prob.graph, prob.data, DEMO_SETTINGS)))
    print(report(results, command))
    return results


if __name__ == "__main__":
    main()
