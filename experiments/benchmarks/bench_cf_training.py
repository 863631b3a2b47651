"""Benchmark: the cost of a training step with K counterfactual images per unit rendered on the
fly inside the compiled step (exact and learned), against plain training, as a ratio per K.

The quick study's sizes: 32 × 32 images from ``ChestSCM(size=32, effusion_size=0.4)``, N
training units (default 3000, the quick study's per site), ``EffusionCNN(features=(8, 16,
32))``, batch 32, one member. Each configuration is one jitted program of T steps of
:func:`cfjax.predictors.step.member_step` (a ``lax.fori_loop``, step ``i`` drawing its minibatch with
``fold_in(key, i)``); the same initial parameters, data and keys everywhere:

- plain: ``objective=None`` (the mean binary cross-entropy of the factual images): the reference;
- variance: ``Objective("variance", 1.0)``, every unit's factual image and all K of its
  counterfactual images through the model in one call (B·(K + 1) images a step), for K = 1, 4,
  16 interventions taken from paper 000's grid do(sex ∈ {0, 1}, age ∈ 8 ages from 20 to 90)
  (K = 16: the grid; K = 4: both sexes × ages 20 and 90; K = 1: do(sex = 0, age = 20)), with
  - exact: :meth:`cfjax.data.ChestSCM.counterfactual_source`: the counterfactual parents (N, K)
    and each unit's image noise kept, the step re-rendering its B·K images;
  - learned: :func:`cfjax.generative.decoded_counterfactuals` of an (untrained: the cost does
    not depend on training) :class:`cfjax.generative.ImageHVAE` of the quick study's generator
    (``GENERATOR_QUICK.train_config(32).hvae``), each unit's noise abducted once beforehand, the
    step decoding its B·K images under the same counterfactual parents as the exact source;
- augment: ``Objective("augment")``, one counterfactual drawn per unit (B images a step, the
  factual ones unused), with both sources at K = 16 (its cost does not grow with K);
- stored, the second reference (what one would do without rendering in the step): the K = 16
  counterfactual images rendered once beforehand (:meth:`ChestSCM.counterfactuals`, the same
  images as the exact source: checked), held as ``(N, K, H, W)`` in a
  :class:`cfjax.predictors.sources.StoredCounterfactuals` and gathered in the step, for both
  objectives. Printed also: the memory those images take against the exact and learned
  sources' arrays, and how long rendering them took.

Printed per configuration: the images through the classifier per step, the warm time per step
(the median over ``--repeats`` rounds, ÷ T; a round runs every configuration once, each between
two runs of plain, so that a drift of the machine's speed shifts them alike), its ratio to plain
(the median over the rounds of its time ÷ the mean of the plain runs just before and just after
it: above 1, slower than plain training), and the first call (tracing and compilation included, then the T steps;
the process's one-time costs paid beforehand by a one-step program) with its ratio to plain's
first call. The exact and the stored K = 16 runs train on the same
images, so their final parameters agree up to float rounding (printed).

Run: ``python -m experiments.benchmarks.bench_cf_training [--steps 5 --repeats 4 --n 3000]``;
``--quick`` is a smoke run (N = 512, 2 steps, one round).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import cfjax as cf
from cfjax import predictors as pr
from cfjax.platform import default_conv
from cfjax.predictors.sources import StoredCounterfactuals, all_interventions
from cfjax.generative import ImageHVAE, decoded_counterfactuals
from cfjax.generative.parents import parent_inputs
from cfjax.study import GENERATOR_QUICK
from cfjax.study.learned import learned_scm
from experiments.benchmarks.timing import conditions, first_time

#: paper 000's grid: do(sex, age), sex slowest (index = 8·sex + age index)
AGES = np.linspace(20.0, 90.0, 8)


def load() -> str:
    """The 1, 5 and 15 minute load averages (other processes share the cores)."""
    return " ".join(f"{v:.1f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def grid_subset(k: int) -> np.ndarray:
    """Indices of K entries of the 16-entry grid: K = 1 do(sex = 0, age = 20); an even K ≤ 16
    both sexes × K/2 ages spread from 20 to 90 (K = 4: ages 20 and 90)."""
    if k == 1:
        return np.array([0])
    if k % 2 or not 2 <= k <= 2 * len(AGES):
        raise SystemExit(f"--ks: K must be 1 or an even number up to {2 * len(AGES)}, got {k}")
    ages = np.unique(np.round(np.linspace(0, len(AGES) - 1, k // 2)).astype(int))
    if len(ages) != k // 2:
        raise SystemExit(f"--ks: cannot spread {k // 2} distinct ages over the grid")
    return np.array([s * len(AGES) + a for s in (0, 1) for a in ages])


def nbytes(tree) -> int:
    return sum(int(np.prod(np.shape(a))) * np.dtype(a.dtype).itemsize for a in jax.tree.leaves(tree))


def runner(model, config, objective, steps: int):
    """A jitted program of ``steps`` member steps with ``objective``: ``(params, opt_state, data,
    key, source) -> (params, opt_state, summed loss)``."""
    def run(params, opt_state, data, key, source):
        def body(i, carry):
            p, o, total = carry
            out = pr.step.member_step(model, config, p, o, data, jax.random.fold_in(key, i),
                                 objective=objective, source=source)
            return out.params, out.opt_state, total + out.loss
        return jax.lax.fori_loop(0, steps, body, (params, opt_state, jnp.zeros((), data.images.dtype)))
    return jax.jit(run)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=None, help="training units N (default 3000; --quick 512)")
    ap.add_argument("--steps", type=int, default=None, help="steps T per timed program (default 5; --quick 2)")
    ap.add_argument("--repeats", type=int, default=None, help="interleaved warm rounds (default 4; --quick 1)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 4, 16], help="numbers of interventions K")
    ap.add_argument("--features", default="8,16,32", help="channels of EffusionCNN's convolution blocks")
    ap.add_argument("--quick", action="store_true", help="a smoke run (not the reported figures)")
    args = ap.parse_args(argv)
    quick = {"n": 512, "steps": 2, "repeats": 1} if args.quick else {"n": 3000, "steps": 5, "repeats": 4}
    for name, value in quick.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if min(args.n, args.steps, args.repeats, args.batch) < 1:
        raise SystemExit("--n, --steps, --repeats and --batch must be at least 1")
    ks = sorted(set(args.ks))
    k_max = max(ks)
    t_start = time.perf_counter()
    print(f"{conditions()}; load average {load()}")

    # ---------------------------------------------------------------- data and sources
    chest = cf.data.ChestSCM(size=32, effusion_size=0.4)
    n, size = args.n, chest.size
    rec = chest.sample(n, key=0)
    do, q = cf.scm.intervention_grid({"sex": [0, 1], "age": AGES})
    subsets = {k: grid_subset(k) for k in ks}

    def interventions(k):
        sel = subsets[k]
        return {v: np.asarray(x)[sel] for v, x in do.items()}, q[sel] / q[sel].sum()

    exact = {}
    for k in ks:
        do_k, q_k = interventions(k)
        exact[k] = chest.counterfactual_source(rec, do_k, key=2, weights=q_k)
    # the learned mechanism: abducted once for the largest K, the parents of the smaller Ks taken from it
    hvae = GENERATOR_QUICK.train_config(size)
    mechanism = ImageHVAE(hvae.hvae, hvae.temperature)
    scm = learned_scm(chest, mechanism)
    pa = parent_inputs(scm, "image", rec["parents"])  # (N, P)
    cf_parents = exact[k_max].parents  # {node: (N, K)}
    pa_cf = parent_inputs(scm, "image", {v: jnp.reshape(x, (n * k_max,)) for v, x in cf_parents.items()})
    params_g = mechanism.init(jax.random.key(1), pa.shape[1])
    t0 = time.perf_counter()
    learned_full = jax.block_until_ready(decoded_counterfactuals(
        mechanism, params_g, rec["image"], pa, pa_cf.reshape(n, k_max, -1), key=3, weights=exact[k_max].weights))
    t_abduct = time.perf_counter() - t0
    position = {int(i): j for j, i in enumerate(subsets[k_max])}
    learned = {}
    for k in ks:
        cols = np.array([position[int(i)] for i in subsets[k]]) if set(subsets[k]) <= set(position) else None
        if cols is None:
            raise SystemExit(f"--ks: K = {k}'s interventions must be among K = {k_max}'s")
        learned[k] = learned_full.replace(parents_cf=learned_full.parents_cf[:, cols], weights=exact[k].weights)
    # the stored reference: the largest K's images rendered once, (N, K, H, W)
    do_k, q_k = interventions(k_max)
    t0 = time.perf_counter()
    stored_images = jax.block_until_ready(chest.counterfactuals(rec, do_k, key=2)["image"])
    t_render = time.perf_counter() - t0
    stored = StoredCounterfactuals(stored_images, exact[k_max].weights)
    probe = jnp.arange(0, n, max(1, n // 64))
    which = all_interventions(probe.shape[0], k_max)
    d_images = float(jnp.max(jnp.abs(exact[k_max].images(probe, which) - stored.images(probe, which))))
    t_setup = time.perf_counter() - t_start

    # ---------------------------------------------------------------- the timed programs
    model = pr.EffusionCNN(features=tuple(int(f) for f in args.features.split(",")))
    config = pr.EnsembleConfig(steps=10 * args.steps, batch_size=args.batch, learning_rate=1e-3,
                               warmup=min(10, args.steps))
    data = pr.data.member_data(rec["image"], rec["parents"]["effusion"], np.ones(n, bool))
    params = jax.tree.map(lambda a: a[0], pr.init_params(model, (size, size), key=0, members=1))
    opt_state = config.optimizer().init(params)
    key = jax.random.key(4)
    variance, augment = pr.Objective("variance", 1.0), pr.Objective("augment")
    configs = {"plain": ("plain (objective=None)", "—", None, None)}
    for k in ks:
        configs[f"exact{k}"] = ("variance, exact", k, variance, exact[k])
    for k in ks:
        configs[f"learned{k}"] = ("variance, learned", k, variance, learned[k])
    configs[f"stored{k_max}"] = ("variance, stored (precomputed)", k_max, variance, stored)
    configs["aug_exact"] = ("augment, exact", k_max, augment, exact[k_max])
    configs["aug_learned"] = ("augment, learned", k_max, augment, learned[k_max])
    configs["aug_stored"] = ("augment, stored (precomputed)", k_max, augment, stored)
    runs = {name: (lambda f=runner(model, config, objective, args.steps), s=source:
                   f(params, opt_state, data, key, s))
            for name, (_, _, objective, source) in configs.items()}
    # the process's one-time costs (XLA's start, the first tracing of the step's code) paid by a
    # one-step plain program, so that plain's first call is not charged with them
    jax.block_until_ready(runner(model, config, None, 1)(params, opt_state, data, key, None))
    first = {name: first_time(fn) for name, fn in runs.items()}

    def timed(name):
        t0 = time.perf_counter()
        results[name] = jax.block_until_ready(runs[name]())
        return time.perf_counter() - t0

    warm, paired, results = {name: [] for name in runs}, {name: [] for name in runs}, {}
    for _ in range(args.repeats):  # one run of every configuration per round, each between two plain runs
        before = timed("plain")
        warm["plain"].append(before)
        for name in runs:
            if name != "plain":
                warm[name].append(timed(name))
                after = timed("plain")
                warm["plain"].append(after)
                paired[name].append(warm[name][-1] / ((before + after) / 2))
                before = after
    paired["plain"] = [1.0]
    d_params = max(float(jnp.max(jnp.abs(a - b))) for a, b in
                   zip(jax.tree.leaves(results[f"exact{k_max}"][0]), jax.tree.leaves(results[f"stored{k_max}"][0])))
    losses_finite = all(bool(jnp.isfinite(r[2])) for r in results.values())

    # ---------------------------------------------------------------- the table
    t = args.steps

    def ratio(name: str) -> float:
        return statistics.median(paired[name])

    print(f"training steps with counterfactuals rendered in the step: T = {t} steps of member_step per program "
          f"(one member, batch {args.batch}, {size}×{size} images, N = {n} units of ChestSCM(size={size}, "
          f"effusion_size=0.4), EffusionCNN(features={model.features}), conv = {model.conv!r} "
          f"({default_conv() if model.conv == 'auto' else model.conv})); warm: median of {args.repeats} interleaved "
          f"rounds (plain: of its runs in all rounds), ratios the median of the rounds' ratios to the plain runs just "
          f"before and after)")
    print(f"  {'configuration':32s}{'K':>3s}{'CNN images':>11s}{'warm ms/step':>14s}{'÷ plain':>9s}"
          f"{'first call s':>14s}{'÷ plain':>9s}")
    out = {}
    for name, (label, k, objective, _) in configs.items():
        images = args.batch * (1 if objective is None or objective.name == "augment" else k + 1)
        ms = statistics.median(warm[name]) / t * 1e3
        out[name] = {"k": k, "ms_per_step": ms, "ratio": ratio(name), "first_s": first[name],
                     "first_ratio": first[name] / first["plain"]}
        print(f"  {label:32s}{k:>3}{images:>11d}{ms:14.2f}{ratio(name):8.2f}x{first[name]:14.2f}"
              f"{first[name] / first['plain']:8.2f}x")
    mb = 2 ** 20
    exact_mb, learned_mb, stored_mb = nbytes(exact[k_max]) / mb, nbytes(learned[k_max]) / mb, nbytes(stored) / mb
    print(f"  memory at K = {k_max}: the stored images (N·K·H·W float32) {stored_mb:.1f} MB; the exact source's "
          f"arrays (counterfactual parents, image noise) {exact_mb:.2f} MB ({stored_mb / exact_mb:.0f}x less); the "
          f"learned source's (abducted noise, encoded counterfactual parents, HVAE parameters) {learned_mb:.1f} MB "
          f"({stored_mb / learned_mb:.1f}x less)")
    print(f"  precomputing: rendering the {n}×{k_max} stored images took {t_render:.2f} s (ChestSCM.counterfactuals, "
          f"first call: compile included); the learned source's abduction of {n} units {t_abduct:.2f} s (first "
          f"call); the exact source's images vs the stored ones: max |Δ| {d_images:.1e}; after T steps, variance "
          f"exact vs stored K = {k_max}: max |Δparams| {d_params:.1e}; every loss finite: {losses_finite}")
    print(f"  (data and sources {t_setup:.0f} s, total {time.perf_counter() - t_start:.0f} s; load average after: "
          f"{load()})")
    return out


if __name__ == "__main__":
    main()
