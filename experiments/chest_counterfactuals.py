"""Counterfactual chest radiographs: test images and their 16 counterfactuals (sex × 8 ages),
with and without effusion, written as one PNG grid; and the rendering throughput.

Each row is one test unit: its factual image, then its counterfactuals under do(sex, age) for
sex ∈ {male, female} × age ∈ 8 values from 20 to 90. The first rows have no effusion, the
last rows have effusion (their factual status).

By default the label is held (``--label fixed``, paper 000's study): effusion keeps each
unit's observed value in every counterfactual, so a row's effusion status is that of all its
images; the effusion's severity and laterality are the unit's own image noise, the same in
every image of the row. With ``--label follows`` effusion follows the new age (re-generated
from its abducted noise), and the script prints how many counterfactuals changed status.

Run: ``python -m experiments.chest_counterfactuals --out results/chest_grid.png``.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

import cfjax as cf
from cfjax.data.chest import LABEL_MODES
from cfjax.io import write_png


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="results/chest_grid.png")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--rows", type=int, default=3, help="units per effusion status")
    ap.add_argument("--throughput-units", type=int, default=1024)
    ap.add_argument("--label", choices=LABEL_MODES, default="fixed",
                    help="effusion held at its observed value (fixed) or following age (follows)")
    args = ap.parse_args(argv)
    cf.platform.use_compilation_cache()  # load what an earlier run compiled (CFJAX_CACHE_DIR=off: compile afresh)

    chest = cf.data.ChestSCM(size=args.size)
    rec = chest.sample(200, key=jax.random.key(0))
    do, _ = cf.scm.intervention_grid({"sex": [0, 1], "age": np.linspace(20, 90, 8)})
    out = chest.counterfactuals(rec, do, key=jax.random.key(1), label=args.label)
    effusion = np.asarray(rec["parents"]["effusion"])
    rows = list(np.flatnonzero(effusion == 0)[: args.rows]) + list(np.flatnonzero(effusion == 1)[: args.rows])
    images, cfs = np.asarray(rec["image"]), np.asarray(out["image"])
    pad = np.ones((args.size, 2))
    lines = [np.concatenate([images[i], pad, pad] + [np.concatenate([cfs[i, k], pad], axis=1)
                                                     for k in range(16)], axis=1) for i in rows]
    write_png(args.out, np.concatenate(lines, axis=0))
    changed = float(np.mean(np.asarray(out["parents"]["effusion"]) != effusion[:, None]))
    print(f"wrote {args.out}: {len(rows)} units (first {args.rows} without effusion, by factual status), "
          f"factual + 16 counterfactuals; label {args.label}: effusion changed in {changed:.1%} of counterfactuals")

    # Throughput: N units × K = 16 counterfactual images, parents and rendering included.
    rec = chest.sample(args.throughput_units, key=jax.random.key(2))

    def run():
        return chest.counterfactuals(rec, do, key=jax.random.key(3), label=args.label)["image"].block_until_ready()

    run()
    start = time.perf_counter()
    repeats = 5
    for _ in range(repeats):
        run()
    per_second = args.throughput_units * 16 * repeats / (time.perf_counter() - start)
    print(f"{per_second:,.0f} counterfactual images per second at {args.size}x{args.size} "
          f"(N = {args.throughput_units}, K = 16)")
    return {"images_per_second": per_second, "effusion_changed": changed}


if __name__ == "__main__":
    main()
