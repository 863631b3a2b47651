"""Paper 000's study end to end on the synthetic chest-radiograph SCM (:mod:`cfjax.study`):
trained CNN effusion classifiers, the ten predictors, exact (and with ``--learned`` learned)
counterfactual images, and every table of the paper, written to ``report.md`` and
``results.json`` under ``--out``.

Run: ``python -m experiments.marginalisation [--quick] [--out experiments/reports/marginalisation] [--seeds 3]
[--counterfactual-label fixed|follows] [--learned]``. The quick configuration (32 × 32 images, 3000 training units per
site, ≤ 500 steps) took 128 s wall on a 2-core CPU, run as a script (which exposes every core as an XLA
host device, so that the ensemble's members train side by side); the full one (64 × 64, 10000 units, ≤ 2000
steps, N = 1800) took 973 s wall on the same machine; ``--quick --learned`` 269 s (2026-12-03). The full generators (64 × 64,
3000 steps each) cost about 0.6 s a step on 2 busy CPU cores, i.e. about an hour more for the full run.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

if __name__ == "__main__" and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    # Run as a script: every core an XLA host device before JAX starts, so that training and
    # inference spread the ensemble's members over the cores (cfjax.predictors.train's devices).
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if "--devices" in sys.argv[:-1]:  # --devices N: N host devices instead of one per core
        _cores = int(sys.argv[sys.argv.index("--devices") + 1])
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={_cores}".strip()

import cfjax as cf
from cfjax import study
from cfjax.data.chest import LABEL_MODES


def main(argv: list[str] | None = None, *, config: study.Config | None = None,
         generator: study.SiteGeneratorConfig | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the quick configuration (≤ 10 minutes on 2 CPU cores)")
    ap.add_argument("--out", default=os.path.join("experiments", "reports", "marginalisation"))
    ap.add_argument("--seeds", type=int, default=3, help="seeds per trained predictor")
    ap.add_argument("--counterfactual-label", choices=LABEL_MODES, default="fixed",
                    help="effusion held at its observed value (fixed) or following age (follows)")
    ap.add_argument("--learned", action="store_true",
                    help="also train an HVAE image generator per site and compute every table with its learned "
                         "counterfactuals beside the exact ones")
    ap.add_argument("--devices", type=int, default=None, metavar="N",
                    help="host devices to spread the ensembles' members over (run as a script: default one "
                         "per core)")
    args = ap.parse_args(argv)
    cf.platform.use_compilation_cache()  # load what an earlier run compiled (CFJAX_CACHE_DIR=off: compile afresh)
    if args.devices is not None:
        cf.distributed.host_devices(args.devices)
    if args.seeds < 2:
        ap.error("--seeds: at least 2 (correlations over predictor-seed pairs)")
    if config is None:
        config = study.QUICK if args.quick else study.FULL
    if args.learned and generator is None:
        generator = study.GENERATOR_QUICK if args.quick else study.GENERATOR_FULL
    command = "python -m experiments.marginalisation " + " ".join(sys.argv[1:] if argv is None else argv)
    return study.run(config, args.out, tuple(range(args.seeds)), args.counterfactual_label, quick=args.quick,
                     generator=generator if args.learned else None, command=command.strip())


if __name__ == "__main__":
    main()
