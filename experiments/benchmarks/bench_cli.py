"""Benchmark: what a user of the command waits for — ``cfjax sensitivity`` with its defaults on a
small table (``experiments/sensitivity_table.py``: 800 rows, three features), each run a fresh
process as a user starts it:

- cold: ``cfjax --no-cache sensitivity …`` (every program compiled);
- warm: the same command twice with a fresh compilation cache (``CFJAX_CACHE_DIR``), the second
  run timed (programs read from the cache);
- ``--quick`` from the warm cache.

Prints each wall time, the load average before and after, and the stages' times the command
reports.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from experiments.benchmarks.timing import conditions
from experiments.sensitivity_table import COMMAND, write


def _run(args: list[str], env: dict, out: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cfjax.cli", *args, "--out", out, "--force"], env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"cfjax {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return wall, proc.stdout


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=800)
    ap.add_argument("--skip-cold", action="store_true", help="only the warm-cache runs")
    args = ap.parse_args(argv)
    print(conditions())
    with tempfile.TemporaryDirectory() as tmp:
        csv, graph = write(tmp, args.n)
        base = ["sensitivity", csv, "--graph", graph, *COMMAND]
        env = dict(os.environ)
        out = os.path.join(tmp, "report")
        print(f"table: {args.n} rows, features gpa, lsat, sat; the command's defaults (200 bootstrap resamples)")
        if not args.skip_cold:
            load = os.getloadavg()[0]
            wall, _ = _run(["--no-cache", *base], env, out)
            print(f"  cold (--no-cache): {wall:.1f} s (load average {load:.1f} -> {os.getloadavg()[0]:.1f})")
        env["CFJAX_CACHE_DIR"] = os.path.join(tmp, "cache")
        first, _ = _run(base, env, out)
        load = os.getloadavg()[0]
        wall, text = _run(base, env, out)
        print(f"  warm cache: {wall:.1f} s (the run that filled it: {first:.1f} s; load average {load:.1f} -> "
              f"{os.getloadavg()[0]:.1f})")
        quick, _ = _run([*base, "--quick"], env, out)
        quick, _ = _run([*base, "--quick"], env, out)
        print(f"  --quick, warm cache: {quick:.1f} s")
        stages = [line.strip() for line in text.splitlines() if line.strip().endswith(" s") or " s)" in line]
        if stages:
            print("  the warm run's own report of its stages:")
            for line in stages[-12:]:
                print(f"    {line}")


if __name__ == "__main__":
    main()
