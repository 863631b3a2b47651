"""Reproducer: does XLA:CPU stall when the sensitivity search vmaps 8 or more runs at once on
large data, with its concurrency-optimised scheduler on?

Each case runs in a child process (JAX reads ``XLA_FLAGS`` once, at start-up) under a
timeout: :func:`cfjax.sensitivity.worst_case` over ``--runs`` runs (budgets × 2 restarts) of
``--steps`` optimiser steps on minibatches of 4096, every run vmapped together (the search's
grouping switched off), on data of the NHS staff survey's size (209,112 rows), with
``--xla_cpu_enable_concurrency_optimized_scheduler`` left on (XLA's default) and switched
off, and, as a control, the runs in vmapped groups of 4 (the search's default on CPU) with
the scheduler on. ``--search`` picks the parts: ``full`` (corner screening, snapping and the
polish), ``polish`` (the steps and the polish), ``steps`` (the optimiser steps only) or,
instead of a search, ``benchmarks``: one program that computes the benchmark correlations
(:func:`cfjax.sensitivity.benchmarks.benchmark_correlations`) and fits Model B at each of them, every
sign pattern (:func:`cfjax.sensitivity.benchmarks.benchmark_cfu`), as the bootstrap does per resample. It
prints for each case whether it finished and in how long (compilation included), and for a
case that timed out how much CPU time the child used in its last 30 s (none: a stall, idle;
some: merely slow).

Data: the NHS survey when ``--data-dir`` holds ``nhs.npz`` (default ``../shared/data``; see
:func:`cfjax.sensitivity.load_nhs`), else (or with ``--synthetic``) the built-in synthetic
SCM (:func:`cfjax.sensitivity.synthetic`, two features) with ``--rows`` rows. A fixed model
(polynomial degree ``--degree``, λ = 1, no cross-validation) keeps the fit short.

Run: ``python -m experiments.benchmarks.xla_cpu_stall`` (about 4 minutes: the stalled case
waits out its ``--timeout``, 120 s).

Measured with jax 0.10.2 and jaxlib 0.10.2 (XLA:CPU, 2 cores shared with other jobs; the NHS
survey, degree 3, minibatches of 4096; times include the child's start, the fit and the
compilation)::

    search   runs  case                              outcome
    full     8     all runs vmapped, scheduler on    no end in 120 s (nor in 150 s on another
                                                     run): 0.0 s of CPU time in its last 30 s
    full     64    all runs vmapped, scheduler on    no end in 240 s (50 steps): 0.0 s of CPU time
    full     8     all runs vmapped, scheduler off   finished in 73 s (44 s on a quieter run)
    full     8     groups of 4, scheduler on         finished in 69 s (50 s on a quieter run)
    polish   8     all runs vmapped, scheduler on    no end in 120 s: 0.0 s of CPU time
    steps    64    all runs vmapped, scheduler on    finished in 33 s (10 steps)
    steps    64    all runs vmapped, scheduler off   finished in 22 s (10 steps)
    steps    8     every case (degree 2, full batch) finished in 51-55 s (20 steps)

The benchmarks (``--search benchmarks --degree 0 --x64``: the NHS experiment's cross-validated
model, in float64 as the review runs it; 9 benchmarks × 4 sign patterns = 36 Model B fits)::

    benchmarks  36   all fits vmapped, scheduler on    no end in 120 s: 0.0 s of CPU time in
                                                       its last 30 s
    benchmarks  36   all fits vmapped, scheduler off   finished in 18 s (fits 5.0 s)
    benchmarks  36   groups of 4, scheduler on         finished in 17 s (fits 4.3 s)

The same fits with a fixed degree-3 model, or in float32, finished in every case: like the
polish's, this stall depends on the program's shapes. It is what stalled the bootstrap
(:func:`cfjax.sensitivity.bootstrap`) on the NHS survey, whose every resample runs this
program; :func:`cfjax.platform.map_runs` now puts both the benchmarks' fits and the
bootstrap's local searches in vmapped groups of 4 where the search's runs are grouped.

On the synthetic SCM (``--synthetic``, 209,112 rows, two features) the full search's 8 runs
vmapped with the scheduler on finished (31 s): the stall depends on the program's shapes (the
NHS model has three features); with 64 runs it was still working at 150 s (12 s of CPU time
in its last 30 s), too slow to tell on a busy machine.

So the stall still reproduces with jax 0.10.2, and its trigger is the polish (the full-data
CFU and its gradient, in a while loop vmapped over the runs): the optimiser steps alone, 64
runs vmapped at once, finish with the scheduler on. :func:`cfjax.sensitivity.worst_case`
therefore keeps its groups of 4 on XLA:CPU with the scheduler on (for the steps and the
polish; every run at once with the scheduler off and on other backends), within each
device's share of the runs when they are split over devices.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from cfjax.platform import CPU_SCHEDULER_OFF as SCHEDULER_OFF

NHS_ROWS = 209_112

# The child: fit a fixed model, then time one worst-case search whose runs are vmapped in
# groups of `group` (0: every run at once). Prints one JSON line.
CHILD = r'''
import json, os, sys, time
t0 = time.perf_counter()
import jax, numpy as np
import cfjax.sensitivity as S
from cfjax import platform
from cfjax.sensitivity.benchmarks import benchmark_cfu, benchmark_correlations, yardstick_children

data, runs, steps, group, batch, degree, parts = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                                                  sys.argv[5], int(sys.argv[6]), sys.argv[7])
prob = S.load_nhs(data) if data.endswith(".npz") else S.synthetic(int(data), key=0)
if degree:
    settings = S.FitConfig(degrees=(degree,), lambdas=(1.0,), predictor_degrees=(degree,), predictor_lambdas=(1.0,))
else:  # the NHS experiment's cross-validated choices
    from experiments.sensitivity import NHS_SETTINGS as settings
model = S.fit(prob.graph, prob.data, settings)
platform.run_group = (lambda n: None) if group == 0 else (lambda n: group if n > group else None)
restarts = 2
budgets = np.linspace(0.1, 0.9, max(runs // restarts, 1))
t1 = time.perf_counter()
if parts == "benchmarks":  # one program, as inside the bootstrap: benchmark correlations, then CFU there
    cfu, P = jax.jit(lambda m: benchmark_cfu(m, benchmark_correlations(m, (1.0, 2.0, 3.0))[2]))(model)
    jax.block_until_ready(cfu)
    patterns = max(2 ** max(len(c) - 1, 0) for c in yardstick_children(model.graph))  # Model B fits each
    print(json.dumps({"n": prob.data.n, "m": prob.graph.m, "runs": int(np.size(P) // prob.graph.m ** 2) * patterns,
                      "fit_s": t1 - t0, "search_s": time.perf_counter() - t1, "jax": jax.__version__,
                      "max_cfu": float(np.nanmax(np.asarray(cfu)))}))
    sys.exit(0)
wc = S.worst_case(model, budgets, key=jax.random.key(0), config=S.SearchConfig(
    restarts=restarts, steps=steps, patience=steps, batch_size=None if batch == "full" else int(batch),
    warn_ratio=None, **{"full": {}, "polish": dict(screen_corners=False, snap=None),
                        "steps": dict(screen_corners=False, snap=None, polish=0)}[parts]))
jax.block_until_ready(wc.cfu)
print(json.dumps({"n": prob.data.n, "m": prob.graph.m, "runs": int(np.size(wc.restart_cfu)),
                  "fit_s": t1 - t0, "search_s": time.perf_counter() - t1, "jax": jax.__version__,
                  "max_cfu": float(np.max(wc.cfu))}))
'''


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_case(data: str, runs: int, steps: int, group: int, scheduler: bool, timeout: float,
             batch: str, degree: int = 3, parts: str = "full", x64: bool = False) -> dict:
    """One child process: ``{"finished": bool, "seconds": wall time, ...child's report}``."""
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "concurrency_optimized_scheduler" not in f]
    if not scheduler:
        flags.append(SCHEDULER_OFF)
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_ENABLE_X64"] = "1" if x64 else "0"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CHILD, data, str(runs), str(steps), str(group), batch,
                              str(degree), parts], env=env, cwd=root, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    samples = []  # (wall seconds, the child's CPU seconds): a stall shows as CPU time standing still
    while child.poll() is None and time.perf_counter() - t0 < timeout:
        samples.append((time.perf_counter() - t0, _cpu_seconds(child.pid)))
        time.sleep(1.0)
    if child.poll() is None:
        child.kill()
        child.communicate()
        seconds = time.perf_counter() - t0
        last = [c for w, c in samples if w >= seconds - 30 and c is not None]
        idle = f"; CPU time over its last 30 s: {last[-1] - last[0]:.1f} s" if len(last) > 1 else ""
        return {"finished": False, "seconds": seconds, "why": f"timed out after {timeout:g} s{idle}",
                "cpu_last_30s": (last[-1] - last[0]) if len(last) > 1 else None}
    stdout, stderr = child.communicate()
    seconds = time.perf_counter() - t0
    if child.returncode != 0:
        return {"finished": False, "seconds": seconds, "why": f"exit {child.returncode}: {stderr[-600:]}"}
    return {"finished": True, "seconds": seconds, **json.loads(stdout.strip().splitlines()[-1])}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.path.join("..", "shared", "data"))
    ap.add_argument("--synthetic", action="store_true", help="the synthetic SCM even where nhs.npz exists")
    ap.add_argument("--rows", type=int, default=NHS_ROWS, help="rows of the synthetic data")
    ap.add_argument("--runs", type=int, default=8, help="runs vmapped together (budgets × 2 restarts)")
    ap.add_argument("--steps", type=int, default=5, help="optimiser steps per run")
    ap.add_argument("--batch", default="4096", help="'full' or a minibatch size")
    ap.add_argument("--degree", type=int, default=3, help="polynomial degree of the models (0: cross-validated as the NHS experiment does)")
    ap.add_argument("--search", choices=["full", "polish", "steps", "benchmarks"], default="full",
                    help="the whole search (corner screening, snapping, polish), the optimiser steps and "
                         "the polish, the optimiser steps only, or instead of a search the benchmarks "
                         "(cfjax.sensitivity.benchmarks: Model B fitted at every benchmark correlation)")
    ap.add_argument("--x64", action="store_true", help="in float64 (JAX_ENABLE_X64=1)")
    ap.add_argument("--cases", default="on,off,groups", help="which of on, off, groups to run")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    args = ap.parse_args(argv)
    nhs = os.path.join(args.data_dir, "nhs.npz")
    data = nhs if os.path.isfile(nhs) and not args.synthetic else str(args.rows)
    label = "NHS survey" if data == nhs else f"synthetic SCM, {args.rows} rows"
    print(f"data: {label}; search: {args.search}; {args.runs} runs, {args.steps} steps, batch {args.batch}, "
          f"degree {args.degree}, {'float64' if args.x64 else 'float32'}, timeout {args.timeout:g} s")
    every = {"on": ("all runs vmapped, scheduler on", 0, True), "off": ("all runs vmapped, scheduler off", 0, False),
             "groups": ("groups of 4, scheduler on", 4, True)}
    cases = [every[c] for c in args.cases.split(",")]
    out = []
    for name, group, scheduler in cases:
        res = run_case(data, args.runs, args.steps, group, scheduler, args.timeout, args.batch, args.degree,
                       args.search, args.x64)
        res["case"] = name
        out.append(res)
        if res["finished"]:
            print(f"{name:34s} finished in {res['seconds']:6.1f} s (fit {res['fit_s']:.1f} s, search "
                  f"{res['search_s']:.1f} s; {res['runs']} runs, n = {res['n']}, jax {res['jax']})", flush=True)
        else:
            print(f"{name:34s} did not finish: {res['why']}", flush=True)
    return out


if __name__ == "__main__":
    main()
