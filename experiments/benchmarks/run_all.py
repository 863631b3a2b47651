"""Run every cfjax benchmark in turn (``make bench``), each in its own process so that one
benchmark's XLA settings (the metrics sweep exposes every core as a host device) cannot
change another's timings."""

import subprocess
import sys

BENCHMARKS = [
    ("cfjax.metrics.evaluate vs numpy/scipy/scikit-learn",
     ["experiments.benchmarks.bench_metrics", "--breakdown"]),
    ("cfjax.scm counterfactuals vs DoWhy, ChiRho and a numpy closed form",
     ["experiments.benchmarks.bench_scm"]),
    ("cfjax.sensitivity NHS worst-case curve vs paper 001's sequential recipe",
     ["experiments.benchmarks.bench_sensitivity"]),
    ("cfjax.representations CFRs vs numpy/scipy/scikit-learn (paper 002's recipe)",
     ["experiments.benchmarks.bench_representations"]),
]


def main() -> None:
    failed = []
    for title, args in BENCHMARKS:
        print(f"== {title} ==", flush=True)
        if subprocess.run([sys.executable, "-m", *args]).returncode != 0:
            failed.append(args[0])
        print(flush=True)
    if failed:
        sys.exit(f"benchmarks failed: {failed}")


if __name__ == "__main__":
    main()
