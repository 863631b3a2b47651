"""Benchmark: counterfactual images of a learned deep SCM (the chest SCM's parents with a
conditional HVAE image mechanism, :class:`cfjax.generative.ImageHVAE`), K interventions × N
units, in one call against a Python loop of one jitted call per intervention.

- cfjax: one :meth:`cfjax.scm.SCM.counterfactual` call with ``chunk_size``: each chunk of
  units is one compiled program (abduction of every node once, the HVAE's posterior latents
  and exact pixel noise included, then all K predictions), its results moved to the host;
  with the loop's chunk (a program then decodes K × chunk images), and with ``chunk / K``
  units (a program decodes as many images as one call of the loop: on a CPU, large
  convolution batches leave the caches, so the images per program matter);
- loop (the way PyTorch deep-SCM code generates counterfactuals: for each intervention, for
  each batch, abduct and predict): for each of the K interventions and each chunk of units,
  one call of a jitted function (``vmap`` over the chunk of :meth:`SCM.abduct_unit` then
  :meth:`SCM.predict_unit` with that intervention), its results moved to the host.

Same model, parameters (a randomly initialised HVAE: the cost does not depend on training),
data, keys and chunks on both sides, and the same counterfactuals (checked). Printed: the first
run (compilation included) and the median of warm repeats, images per second (K·N ÷ time), and
the ratios (loop ÷ cfjax: above 1, the single call is faster).

Run: ``python -m experiments.benchmarks.bench_generative [--units 2048 --size 32]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import cfjax as cf
from cfjax.data.chest import PARENTS
from cfjax.generative.hvae import HVAEConfig
from cfjax.generative.mechanism import ImageHVAE
from experiments.benchmarks.timing import conditions, median_time

IMAGE_PARENTS = ["sex", "age", "race", "lung", "effusion"]


def load() -> str:
    """The 1, 5 and 15 minute load averages (other processes share the cores)."""
    return " ".join(f"{v:.1f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--units", type=int, default=2048, help="N units")
    ap.add_argument("--ages", type=int, default=8, help="ages of the do(sex, age) grid: K = 2 × ages")
    ap.add_argument("--size", type=int, default=32, help="image side (ChestSCM: 32 to 192)")
    ap.add_argument("--channels", type=int, nargs="+", default=[8, 16, 16], help="HVAE features per resolution")
    ap.add_argument("--chunk", type=int, default=256, help="units per compiled chunk (both sides)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    chest = cf.data.ChestSCM(size=args.size)
    latent = tuple([0] + [4] * (len(args.channels) - 1))
    mech = ImageHVAE(HVAEConfig(image_size=args.size, channels=tuple(args.channels), latent_dims=latent),
                     temperature=1.0)
    base = chest.scm
    scm = cf.scm.SCM({**PARENTS, "image": IMAGE_PARENTS},
                     {**{v: base.mechanism(v) for v in base.nodes}, "image": mech})
    p_dim = sum(base.mechanism(v).encoded_dim for v in IMAGE_PARENTS)
    params = {**chest.params(), "image": mech.init(jax.random.key(0), p_dim)}
    rec = chest.sample(args.units, key=1)
    data = {**{v: np.asarray(x) for v, x in rec["parents"].items()}, "image": np.asarray(rec["image"])}
    do, _ = cf.scm.intervention_grid({"sex": [0, 1], "age": np.linspace(20, 90, args.ages)})
    do = {v: np.asarray(x) for v, x in do.items()}
    k, n, b = len(do["sex"]), args.units, min(args.chunk, args.units)
    key = jax.random.key(2)

    def one_call(chunk=b):
        return scm.counterfactual(params, data, do, key=key, chunk_size=chunk)["image"]

    b_small = max(1, b // k)
    small_call = functools.partial(one_call, b_small)

    @jax.jit
    def one_intervention(params, chunk, keys, sex, age):
        def unit(x, kk):
            u = scm.abduct_unit(params, x, kk)
            return scm.predict_unit(params, u, {"sex": sex, "age": age}, observed=x)["image"]
        return jax.vmap(unit)(chunk, keys)

    unit_keys = jax.random.split(key, n)
    dev = {v: jnp.asarray(x) for v, x in data.items()}
    chunks = []
    for start in range(0, n, b):  # the last chunk padded (one compiled program), as cfjax does
        idx = np.minimum(np.arange(start, start + b), min(start + b, n) - 1)
        chunks.append((start, min(start + b, n), {v: x[idx] for v, x in dev.items()}, unit_keys[idx]))

    def loop():
        out = np.empty((n, k, args.size, args.size), np.float32)  # (N, K, H, W), as SCM.counterfactual
        for j in range(k):
            sex, age = jnp.asarray(do["sex"][j], jnp.int32), jnp.asarray(do["age"][j], jnp.float32)
            for start, stop, chunk, keys in chunks:
                out[start:stop, j] = np.asarray(one_intervention(params, chunk, keys, sex, age))[:stop - start]
        return out

    def timed_first(name, fn):  # the first call (compilation included); its result kept for the check
        t0 = time.perf_counter()
        out = np.asarray(jax.block_until_ready(fn()))
        t = time.perf_counter() - t0
        print(f"  [{name}: first run {t:.1f} s]", flush=True)
        return t, out

    def timed_warm(name, fn):
        t = median_time(fn, args.repeats, warmup=0)
        print(f"  [{name}: warm median {t:.1f} s]", flush=True)
        return t

    first_cf, a = timed_first("cfjax, chunks of " + str(b), one_call)
    first_small, a_small = timed_first("cfjax, chunks of " + str(b_small), small_call)
    first_loop, c = timed_first("loop", loop)
    diff = max(float(np.abs(a - c).max()), float(np.abs(a_small - c).max()))
    del a, a_small, c
    warm_cf = timed_warm("cfjax, chunks of " + str(b), one_call)
    warm_small = timed_warm("cfjax, chunks of " + str(b_small), small_call)
    warm_loop = timed_warm("loop", loop)
    images = k * n
    print(f"counterfactual images: K = {k} interventions (do(sex, age) grid) × N = {n} units, "
          f"{args.size}×{args.size}, HVAE channels {tuple(args.channels)}, latents {mech.config.latent_shapes}, "
          f"chunks of {b} units; {conditions()}; load {load()}")
    print(f"  {'':52s}{'first run (incl. compile)':>26s}{'warm (median of ' + str(args.repeats) + ')':>26s}")
    rows = ((f"cfjax: one SCM.counterfactual call, chunks of {b}", first_cf, warm_cf),
            (f"cfjax: one SCM.counterfactual call, chunks of {b_small}", first_small, warm_small),
            (f"loop: one jitted call per intervention, chunks of {b}", first_loop, warm_loop))
    for label, first, warm in rows:
        print(f"  {label:52s}{first:10.2f}s {images / first:9.0f} img/s{warm:10.2f}s {images / warm:9.0f} img/s")
    for label, first, warm in rows[:2]:
        print(f"  ratio loop ÷ {label[:label.index(',')]} ({label[label.index('chunks'):]}): "
              f"{first_loop / first:.2f}× with compilation, {warm_loop / warm:.2f}× warm")
    print(f"  largest pixel difference between cfjax and the loop: {diff:.2e}")
    return {"first": (first_cf, first_small, first_loop), "warm": (warm_cf, warm_small, warm_loop),
            "max_abs_diff": diff}


if __name__ == "__main__":
    main()
