"""The documentation's benchmarks page, written from what ``make bench`` measured.

``python -m experiments.benchmarks.render [RESULTS]`` reads the results file that
:mod:`experiments.benchmarks.run_all` writes (default ``docs/bench_results.json``) and writes
``docs/benchmarks.md``: the machine and date of the run, then each benchmark's title, command,
run time and its printed output, as it printed it. Nothing on the page is typed by hand;
``--check`` exits 1 when the page is not what the results file renders.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "docs", "bench_results.json")
PAGE = os.path.join(ROOT, "docs", "benchmarks.md")


def render(doc: dict) -> str:
    m = doc["machine"]
    load = m.get("load_average")
    lines = [
        "# Benchmarks",
        "",
        "<!-- written by `python -m experiments.benchmarks.render` from docs/bench_results.json; "
        "run `make bench` to measure again -->",
        "",
        "Each benchmark runs cfjax beside a reference — the best a skilled user would write with "
        "numpy, scipy or scikit-learn (same algorithm, preallocated), or another library (DoWhy, "
        "ChiRho, a paper's own recipe) — in one process, and prints the ratio of their times, "
        "warm and with compilation. The benchmarks live in `experiments/benchmarks/`; "
        "`make bench` runs them all, each in its own process, without the compilation cache, and "
        "writes the results file this page is rendered from.",
        "",
        f"This run: {doc['date']}, {m['cpus']} CPU cores ({m['processor']}), Python {m['python']}"
        + (f", load average {load[0]:.1f} at its end" if load else "")
        + f"; {doc['seconds'] / 60:.0f} minutes in all"
        + (" — a `--quick` run (fewer repeats and sizes: smoke figures, not the reported ones)." if doc["quick"]
           else "."),
        "",
    ]
    for b in doc["benchmarks"]:
        command = " ".join(["python -m", b["module"], *map(str, b["arguments"])])
        status = "" if b["returncode"] == 0 else f" — **failed** (exit status {b['returncode']})"
        lines += [f"## {b['title']}", "", f"`{command}` ({b['seconds']:.0f} s){status}", "", "```text",
                  b["output"].rstrip("\n"), "```", ""]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default=RESULTS)
    ap.add_argument("--page", default=PAGE)
    ap.add_argument("--check", action="store_true", help="exit 1 when the page is stale; change nothing")
    args = ap.parse_args(argv)
    with open(args.results, encoding="utf-8") as f:
        text = render(json.load(f))
    if args.check:
        with open(args.page, encoding="utf-8") as f:
            sys.exit(0 if f.read() == text else f"{args.page} is stale: python -m experiments.benchmarks.render")
    tmp = args.page + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, args.page)
    print(f"wrote {args.page}")


if __name__ == "__main__":
    main()
