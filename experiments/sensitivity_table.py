"""A small table for timing ``cfjax sensitivity``: ``--n`` rows (800 by default) of a
three-feature additive-noise SCM with a binary sensitive attribute, as a CSV and its graph.

The graph is the law school's shape with one feature more: ``race → gpa → lsat → sat``, race a
parent of every feature, the target ``fya`` of all three; the errors of gpa, lsat and sat are
correlated (0.3, the confounding the analysis looks for), the equations mildly nonlinear. The
rows are drawn with a fixed seed, so the table — and the command's timings on it — are the same
on every machine.

Run: ``python -m experiments.sensitivity_table OUT [--n 800] [--seed 0]``; then
``cfjax sensitivity OUT/table.csv --graph OUT/graph.yaml --sensitive race --target fya
--categories race=white,black --out OUT/report`` (``experiments.benchmarks.bench_cli`` times it
cold and from a warm compilation cache).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from cfjax.io import atomic_write_bytes

GRAPH = "nodes:\n  gpa: [race]\n  lsat: [race, gpa]\n  sat: [race, lsat]\n"
COMMAND = ["--sensitive", "race", "--target", "fya", "--categories", "race=white,black"]


def table(n: int = 800, seed: int = 0) -> str:
    """The CSV text: a header ``race,gpa,lsat,sat,fya`` and ``n`` rows."""
    rng = np.random.default_rng(seed)
    black = rng.random(n) < 0.3
    a = np.where(black, 1.0, -1.0)
    corr = np.full((3, 3), 0.3) + 0.7 * np.eye(3)
    e = rng.standard_normal((n, 3)) @ np.linalg.cholesky(corr).T
    gpa = -0.4 * a + 0.8 * e[:, 0]
    lsat = -0.5 * a + 0.6 * gpa + 0.1 * gpa**2 + 0.7 * e[:, 1]
    sat = -0.3 * a + 0.7 * lsat - 0.1 * lsat * gpa + 0.6 * e[:, 2]
    fya = 0.4 * gpa + 0.5 * lsat + 0.2 * sat - 0.2 * a + 0.8 * rng.standard_normal(n)
    lines = ["race,gpa,lsat,sat,fya"]
    lines += [
        f"{'black' if b else 'white'},{g:.10g},{lt:.10g},{s:.10g},{f:.10g}"
        for b, g, lt, s, f in zip(black, gpa, lsat, sat, fya)
    ]
    return "\n".join(lines) + "\n"


def write(out: str, n: int = 800, seed: int = 0) -> tuple[str, str]:
    """Write ``table.csv`` and ``graph.yaml`` into ``out``; returns their paths."""
    os.makedirs(out, exist_ok=True)
    csv, graph = os.path.join(out, "table.csv"), os.path.join(out, "graph.yaml")
    atomic_write_bytes(csv, table(n, seed).encode())
    atomic_write_bytes(graph, GRAPH.encode())
    return csv, graph


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=800)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.n < 10:
        raise SystemExit(f"--n {args.n}: expected at least 10 rows")
    csv, graph = write(args.out, args.n, args.seed)
    print(f"wrote {csv} ({args.n} rows) and {graph}")


if __name__ == "__main__":
    main()
