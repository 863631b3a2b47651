"""Benchmark: the persistent compilation cache (:func:`cfjax.platform.use_compilation_cache`) in
the ``cfjax`` command, which turns it on by default.

Two commands: ``cfjax demo --quick`` (the three pillars on built-in synthetic data) and
``cfjax sensitivity`` on the law school data (paper 001's working model: race White against
every other group, UGPA and LSAT, first-year grade ZFYA; 21,791 rows; the command's defaults,
16 budgets × 4 restarts, or ``--quick``). Each runs as three fresh processes, one after another:
the first with an empty cache folder (what a first run pays: every program compiled and
written), the second with the folder the first filled (every program loaded), and one with the
cache off (``CFJAX_CACHE_DIR=off``: compiled, nothing written). The wall times of the whole
processes (start-up, imports and computation included) and their CPU times (user + system, all
threads: steadier than wall time on a shared machine) are printed side by side with their
ratios; ``--repeats R`` runs the three R times (each time with a new empty folder) and prints
the median of each. The second run computes the same numbers as the first (results.json
compared, byte for byte).

No other benchmark uses the cache: each prints a first call that includes a cold compilation.

Data: ``--data-dir`` (default ``../shared/data``); without ``lawschool.csv`` there, the
sensitivity part is skipped with a message.
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from cfjax.platform import CACHE_ENV

#: the law school data's graph (paper 001): A -> G, A -> L, G -> L
LAW_GRAPH = "nodes:\n  UGPA: [race]\n  LSAT: [race, UGPA]\n"


def law_school_csv(source: str, path: str) -> None:
    """Write the law school data for the command: race as ``white``/``other`` (paper 001's
    A = +1 for White, −1 otherwise), UGPA, LSAT and ZFYA as recorded."""
    with open(source, newline="") as f, open(path, "w", newline="") as g:
        out = csv.writer(g)
        out.writerow(["race", "UGPA", "LSAT", "ZFYA"])
        for row in csv.DictReader(f):
            out.writerow(["white" if row["race"] == "White" else "other", row["UGPA"], row["LSAT"], row["ZFYA"]])


def run_command(args: list[str], cache: str) -> tuple[float, float]:
    """Wall time and CPU time (user + system, all threads) in seconds of ``cfjax ARGS`` in a
    fresh process with ``CFJAX_CACHE_DIR=cache``."""
    env = {**os.environ, CACHE_ENV: cache}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cfjax.cli", *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"cfjax {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _folder_size(folder: str) -> tuple[int, int]:
    """(files, bytes) under ``folder``."""
    files = [os.path.join(d, f) for d, _, names in os.walk(folder) for f in names]
    return len(files), sum(os.path.getsize(f) for f in files)


def measure(name: str, args: list[str], work: str, repeats: int) -> dict[str, tuple[float, float]]:
    """The three runs of one command, ``repeats`` times; the median wall and CPU times of each."""
    times: dict[str, list[tuple[float, float]]] = {"first": [], "second": [], "off": []}
    for r in range(repeats):
        cache = os.path.join(work, f"{name}-cache-{r}")
        outs = {v: os.path.join(work, f"{name}-{v}-{r}") for v in times}
        for variant, folder in (("first", cache), ("second", cache), ("off", "off")):
            seconds, cpu = run_command([*args, "--out", outs[variant]], folder)
            times[variant].append((seconds, cpu))
            if variant == "first":
                files, size = _folder_size(cache)
            print(f"  {name} run {r + 1}: {variant:6s} wall {seconds:7.1f} s, CPU {cpu:7.1f} s "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)
        print(f"  {name}: the first run wrote {files} cache entries, {size / 2**20:.1f} MiB", flush=True)
        results = {}
        for variant, out in outs.items():
            with open(os.path.join(out, "results.json"), "rb") as f:
                results[variant] = f.read()
        same = {v: "identical" if results[v] == results["first"] else "DIFFERENT" for v in ("second", "off")}
        print(f"  {name}: results.json of the second run {same['second']}, of the run without cache "
              f"{same['off']} (against the first's)")
        shutil.rmtree(cache, ignore_errors=True)
    return {v: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for v, t in times.items()}


def main(argv=None) -> dict[str, dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.path.join("..", "shared", "data"))
    ap.add_argument("--repeats", type=int, default=1, help="runs of each variant (median)")
    ap.add_argument("--quick", action="store_true", help="cfjax sensitivity with --quick")
    ap.add_argument("--only", choices=["demo", "sensitivity"], nargs="*")
    args = ap.parse_args(argv)
    from experiments.benchmarks.timing import conditions

    print(conditions())
    law = os.path.join(args.data_dir, "lawschool.csv")
    results = {}
    with tempfile.TemporaryDirectory(prefix="cfjax-bench-cache-") as work:
        commands = []
        if args.only is None or "demo" in args.only:
            commands.append(("demo", ["demo", "--quick"]))
        if args.only is None or "sensitivity" in args.only:
            if os.path.isfile(law):
                data, graph = os.path.join(work, "law.csv"), os.path.join(work, "graph.yaml")
                law_school_csv(law, data)
                with open(graph, "w") as f:
                    f.write(LAW_GRAPH)
                commands.append(("sensitivity", ["sensitivity", data, "--graph", graph, "--sensitive", "race",
                                                 "--target", "ZFYA", "--categories", "race=other,white"]
                                 + (["--quick"] if args.quick else [])))
            else:
                print(f"lawschool.csv not found in {args.data_dir}; cfjax sensitivity skipped")
        for name, cmd in commands:
            print("cfjax " + " ".join(os.path.basename(c) if c.startswith(work) else c for c in cmd), flush=True)
            results[name] = measure(name, cmd, work, args.repeats)
    if results:
        print(f"\na whole process each (median of {args.repeats}); first: an empty cache, second: the cache the "
              "first filled, off: CFJAX_CACHE_DIR=off; CPU: user + system seconds of all its threads")
        print(f"{'command':20s} {'first':>8s} {'second':>8s} {'off':>8s}   {'off/second':>10s} "
              f"{'first/second':>12s} {'first/off':>9s}")
        for name, t in results.items():
            for i, what in enumerate(("wall", "CPU")):
                first, second, off = (t[v][i] for v in ("first", "second", "off"))
                print(f"{name + ' ' + what:20s} {first:7.1f}s {second:7.1f}s {off:7.1f}s   "
                      f"{off / second:9.2f}x {first / second:11.2f}x {first / off:8.2f}x")
    return results


if __name__ == "__main__":
    main()
