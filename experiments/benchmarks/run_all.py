"""Run every cfjax benchmark in turn (``make bench``), each in its own process so that one
benchmark's XLA settings (the metrics sweep exposes every core as a host device; the
sensitivity benchmark runs in float64) cannot change another's timings.

None of them uses JAX's persistent compilation cache (this entry point does not turn it on and
takes ``JAX_COMPILATION_CACHE_DIR`` out of their environment): each prints a first call that
includes a cold compilation, which a warm cache would turn into a load from disk. The cache's
own benchmark, bench_cache, gives every command it times a cache folder of its own (or none).

``python -m experiments.benchmarks.run_all --quick`` is a shorter smoke run (fewer repeats,
the sensitivity reference on one restart scaled to four); ``make bench`` runs the full set.

Every benchmark's output is printed as it runs and kept: the run writes ``--results``
(default ``docs/bench_results.json``: the machine, the date, each benchmark's title, command,
run time, exit status and output) atomically, and :mod:`experiments.benchmarks.render` writes
the documentation's benchmarks page from it (``make bench`` runs both).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "docs", "bench_results.json")

# (title, module, extra arguments of the full run, extra arguments of --quick)
BENCHMARKS = [
    ("cfjax.metrics.evaluate vs numpy/scipy/scikit-learn",
     "experiments.benchmarks.bench_metrics", ["--breakdown"], ["--repeats", "5", "--predictors", "8"]),
    ("cfjax.scm counterfactuals vs numpy closed forms, ChiRho and DoWhy",
     "experiments.benchmarks.bench_scm", [], ["--repeats", "10", "--slow-repeats", "1", "1"]),
    ("cfjax.scm fit: full batch vs minibatches, time to the maximum-likelihood fit as N grows",
     "experiments.benchmarks.bench_scm_fit", ["--sizes", "4096", "16384", "65536", "131072", "262144",
                                               "--steps", "250", "500", "1000", "2000",
                                               "--nonlinear-sizes", "16384"],
     ["--sizes", "4096", "65536", "--steps", "500", "1000", "--mechanisms", "linear"]),
    ("cfjax.data.ChestSCM counterfactual images vs numpy",
     "experiments.benchmarks.bench_chest", [], ["--units", "256", "--repeats", "2"]),
    ("cfjax.representations CFRs vs numpy (same algorithm) and paper 002's recipe",
     "experiments.benchmarks.bench_representations", [], ["--repeats", "2"]),
    ("cfjax.sensitivity NHS worst-case curve vs paper 001's sequential recipe",
     "experiments.benchmarks.bench_sensitivity", [], ["--reference-restarts", "1", "--repeats", "1"]),
    ("cfjax.sensitivity CFU over the distinct rows (A, x), weighted, vs over every unit: law school and NHS",
     "experiments.benchmarks.bench_distinct", [], ["--quick"]),
    ("cfjax.sensitivity.bootstrap: 200 resamples of the whole analysis as one vmapped program vs a loop of jitted "
     "per-resample calls; law school timing; NHS: resamples as counts over distinct rows vs reading units",
     "experiments.benchmarks.bench_bootstrap", [], ["--resamples", "20", "--law-resamples", "4", "--nhs-resamples", "3"]),
    ("cfjax.sensitivity.inverse_budget: bisection probes as local searches vs a whole search per probe",
     "experiments.benchmarks.bench_inverse", [], ["--repeats", "1"]),
    ("cfjax sensitivity on an 800-row, three-feature table with its defaults: cold, from a warm compilation cache, "
     "--quick", "experiments.benchmarks.bench_cli", [], ["--skip-cold"]),
    ("cfjax.predictors ensemble training (vmap) vs a sequential loop, inference on N × K", "experiments.benchmarks.bench_predictors", [], ["--members", "4", "--steps", "20", "--units", "64", "--repeats", "1"]),
    ("shape buckets: cfjax.predictors.predict over 20 N, compilations and time with buckets vs without",
     "experiments.benchmarks.bench_buckets", [], ["--sizes", "6", "--repeats", "3"]),
    ("cfjax.generative learned counterfactual images (HVAE): one call vs one call per intervention",
     "experiments.benchmarks.bench_generative", [], ["--units", "256", "--repeats", "1"]),
    ("cfjax.predictors training steps with K counterfactuals rendered in the step (exact, learned) vs plain "
     "training and vs precomputed images, per K", "experiments.benchmarks.bench_cf_training", [], ["--quick"]),
    ("cfjax.metrics.evaluate_chunks (streamed) vs evaluate (in memory) as N grows; over 1-8 devices",
     "experiments.benchmarks.bench_scale", [], ["--quick"]),
    ("the persistent compilation cache: cfjax demo --quick and cfjax sensitivity, a second process against the "
     "first (an empty cache) and against the cache off", "experiments.benchmarks.bench_cache", [], ["--quick"]),
]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run, not the reported figures)")
    ap.add_argument("--results", default=RESULTS, help="where to write the results file (default: %(default)s)")
    ap.add_argument("--only", nargs="*", default=None, help="run only these benchmark modules (e.g. bench_metrics)")
    args = ap.parse_args(argv)
    failed, times, records = [], {}, []
    start = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}  # cold compilations
    env["PYTHONUNBUFFERED"] = "1"
    for title, module, full, quick in BENCHMARKS:
        name = module.rsplit(".", 1)[1]
        if args.only is not None and name not in args.only:
            continue
        print(f"== {title} ==", flush=True)
        extra = quick if args.quick else full
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", module, *extra], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line)
        code = proc.wait()
        if code != 0:
            failed.append(module)
        times[name] = time.perf_counter() - t0
        records.append({"title": title, "module": module, "arguments": extra, "seconds": round(times[name], 1),
                        "returncode": code, "output": "".join(lines)})
        print(flush=True)
    total = time.perf_counter() - start
    print("run times: " + ", ".join(f"{name} {t:.0f} s" for name, t in times.items())
          + f"; total {total:.0f} s" + (" (--quick)" if args.quick else ""))
    doc = {"quick": args.quick, "date": datetime.date.today().isoformat(), "seconds": round(total, 1),
           "machine": {"cpus": os.cpu_count(), "processor": platform.machine(), "python": platform.python_version(),
                       "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
           "benchmarks": records}
    tmp = args.results + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, args.results)
    print(f"wrote {args.results}")
    if failed:
        sys.exit(f"benchmarks failed: {failed}")


if __name__ == "__main__":
    main()
