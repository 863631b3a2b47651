"""Benchmark: training an ensemble of effusion classifiers as one vmapped program against a
sequential Python loop over the same members, and ensemble inference on N × K counterfactual
images.

Training. M members (random 70% masks over one shared training set, seeds 0..M−1) take the same
T steps of :func:`cfjax.predictors.step.member_step` (AdamW, minibatches drawn from each member's
mask) on both sides:

- ensemble: :func:`cfjax.predictors.train` with one evaluation round of T steps: one jitted
  ``lax.scan`` of the step mapped over members — all members ``vmap``ped, or (``member_chunk=1``,
  the CPU default) one after another inside the program — then the validation AUC; on one
  device (``mesh=[jax.devices()[0]]``), and with the members spread over every device
  (``mesh=len(jax.devices())``: :func:`cfjax.distributed.map_batch`, each device running its
  share of the members);
- sequential: for each member, T calls of the same step ``jax.jit``ted for one member (what
  one would write without the ensemble: the step's key folded in inside the program, the
  parameters and optimiser state donated), same data and keys, on one device
  (``jax.devices()[0]``; XLA's intra-op threads still use every core).

This script exposes every core it may run on as an XLA host device
(``--xla_force_host_platform_device_count``, set before JAX starts unless XLA_FLAGS already
sets it): on a CPU, members on separate devices run side by side, one per core, where one
member's small convolutions do not keep every core busy.

The same members are also trained by one process per core, each pinned to its core and
running :func:`cfjax.predictors.train` on its share of the members (members ``c, c + P, …``) on
its one device, all started together: members in parallel with no runtime, thread pool or
program shared, what member parallelism can give on these cores (the cores still share their
caches and memory). Its workers stay alive and run once per warm round, interleaved with the rest.

Where the time goes, per member-step: the sequential loop against the same step inside one
program (``train()`` on one device, members looped), their difference being the cost of a
Python call of a jitted step; the pinned processes' time per core; and the step's matrix
products alone (:func:`products`), on this process's threads and on each pinned core at once.
From these it prints the most member parallelism can gain over the loop on these cores (the loop's
step already runs on every core's threads), and the same were the step nothing but its matrix
products.

All end with the same parameters (checked). Printed: the first run (compilation included) and
the median of warm repeats, run interleaved (one run of every variant per round, so that a drift
in the machine's speed shifts them alike), and the ratios (sequential ÷ ensemble: above 1, the
ensemble is faster; warm, the median of the rounds' paired ratios).

Inference. :func:`cfjax.predictors.predict` of all M members on ``(N, K, H, W)`` counterfactual
images in one chunked call — on one device, and with the members spread over every device —
against a Python loop over members and interventions of a jitted single-member apply on the N
images of one intervention (on one device); images per second = M·K·N ÷ time.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

# Expose every core this process may run on as an XLA host device, so that train() and
# predict() can spread the members over them (a caller's choice made before JAX starts; cfjax
# itself never sets it). The sequential reference still runs on one device.
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={CORES}").strip()

import jax
import jax.numpy as jnp
import numpy as np
from cfjax import predictors as pr
from cfjax.platform import default_conv
from cfjax.platform import default_member_chunk
from experiments.benchmarks.timing import conditions, first_time, median_time


def load() -> str:
    """The 1, 5 and 15 minute load averages (other processes share the cores)."""
    return " ".join(f"{v:.1f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def last_level_cache_mb() -> float | None:
    """The size of the first core's largest cache in MB (Linux's sysfs), or None."""
    sizes = []
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        text = open(index).read().strip()
        scale = {"K": 1 / 1024, "M": 1.0, "G": 1024.0}.get(text[-1:])
        if scale is not None and text[:-1].isdigit():
            sizes.append(int(text[:-1]) * scale)
    return max(sizes) if sizes else None


def synthetic(rng: np.random.Generator, n: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Images in [0, 1] whose label is a faint blob of random strength and place."""
    y = rng.integers(0, 2, n)
    yy, xx = np.mgrid[:size, :size]
    cy, cx = rng.uniform(size / 4, 3 * size / 4, (2, n))
    blob = np.exp(-((yy - cy[:, None, None]) ** 2 + (xx - cx[:, None, None]) ** 2) / (size / 3))
    x = 0.3 + 0.15 * rng.uniform(size=(n, size, size)) + (rng.uniform(0, 0.4, n) * y)[:, None, None] * blob
    return np.clip(x, 0, 1).astype(np.float32), y.astype(np.int32)


def reference_step(model, config):
    """The sequential reference's step, as a skilled user would jit it for a Python loop: one
    member's :func:`cfjax.predictors.step.member_step` with step ``i``'s minibatch key folded in
    inside the program (no extra dispatch per step) and the parameters and optimiser state
    donated (updated in place, no new buffers per step)."""
    def step(params, opt_state, data, key, i):
        return pr.step.member_step(model, config, params, opt_state, data, jax.random.fold_in(key, i))
    return jax.jit(step, donate_argnums=(0, 1))


def products(model, config, size: int, steps: int):
    """A program of ``steps`` iterations of only the matrix products of one member-step of
    ``model`` (per convolution of :class:`cfjax.predictors.EffusionCNN`: the forward product
    ``kernel(9·C, F)ᵀ · cols(9·C, B·H·W)``, the kernel's gradient and, past the first, the input
    columns' gradient, at the step's shapes), each iteration depending on the last: the floor of
    a step if everything else in it (im2col, ReLU, pooling, the head, AdamW, sampling) were free.
    Returns ``run`` (a jitted callable of no arguments)."""
    b = config.batch_size
    shapes = [(9 * (model.features[i - 1] if i else 1), f, b * (size // 2 ** i) ** 2)
              for i, f in enumerate(model.features)]
    keys = jax.random.split(jax.random.key(0), len(shapes))
    operands = [(jax.random.normal(k, (kc, f)), jax.random.normal(k, (kc, n)), jax.random.normal(k, (f, n)))
                for k, (kc, f, n) in zip(keys, shapes)]

    def one(i, ops):
        out = []
        for layer, (w, cols, g) in enumerate(ops):
            y = jax.lax.dot_general(w, cols, (((0,), (0,)), ((), ())))  # forward (F, n)
            dw = jax.lax.dot_general(cols, g, (((1,), (1,)), ((), ())))  # kernel gradient (9·C, F)
            tie = y[0, 0] + dw[0, 0]
            if layer:  # the input columns' gradient (9·C, n); none for the image itself
                tie += jax.lax.dot_general(w, g, (((1,), (0,)), ((), ())))[0, 0]
            out.append((w, cols, g + 1e-30 * tie))
        return out

    run = jax.jit(lambda ops: jax.lax.fori_loop(0, steps, one, ops))
    return lambda: run(operands)


# a copy of one member's initial parameters and optimiser state, for a run that donates them
fresh = jax.jit(lambda params, opt_state: jax.tree.map(jnp.copy, (params, opt_state)))


def training_set(args, rng):
    """The training benchmark's data, drawn in one order (the parent and its workers agree)."""
    x, y = synthetic(rng, args.n, args.size)
    vx, vy = synthetic(rng, args.val, args.size)
    return x, y, vx, vy, rng.uniform(size=(args.members, args.n)) < 0.7, np.arange(args.members)


class PinnedWorkers:
    """One child process per core, each pinned to its core (the affinity set before JAX starts,
    one host device) and running ``train()`` on its share of the members when told: a call runs
    them all at once and returns when the last is done; ``params()`` collects every member's
    parameters in member order."""

    def __init__(self, args, cores: list[int]):
        self.parts = len(cores)
        flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "", os.environ.get("XLA_FLAGS", ""))
        env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count=1".strip()}
        self.procs = []
        for part, core in enumerate(cores):
            argv = [*sys.argv[1:], "--worker", str(part), str(self.parts)]
            child = (f"import os, sys, runpy; os.sched_setaffinity(0, {{{core}}}); "
                     f"sys.argv = ['bench_predictors', *{argv!r}]; "
                     "runpy.run_module('experiments.benchmarks.bench_predictors', run_name='__main__')")
            self.procs.append(subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, text=True, env=env))
        for proc in self.procs:
            self._expect(proc, "READY")

    @staticmethod
    def _expect(proc, word: str) -> str:
        for line in proc.stdout:
            if line.startswith(word):
                return line[len(word):].strip()
        raise RuntimeError(f"a benchmark worker exited (code {proc.wait()}) before answering {word}")

    def _all(self, command: str, word: str) -> list[str]:
        for proc in self.procs:
            proc.stdin.write(command + "\n")
            proc.stdin.flush()
        return [self._expect(proc, word) for proc in self.procs]

    def __call__(self) -> None:
        self._all("GO", "DONE")

    def params(self, m: int) -> list:
        with tempfile.TemporaryDirectory() as tmp:
            files = self._all(f"SAVE {tmp}", "SAVED")
            parts = [list(np.load(f).values()) for f in files]
        return [[leaf[j // self.parts] for leaf in parts[j % self.parts]] for j in range(m)]

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()
            proc.wait()


def worker(args, model, config, rng) -> None:
    """A pinned child of :class:`PinnedWorkers`: ``train()`` on members ``part, part + parts, …``,
    compiled, then run on each ``GO``; ``SAVE dir`` writes its members' parameters."""
    x, y, vx, vy, masks, seeds = training_set(args, rng)
    part, parts = args.worker
    mine = slice(part, args.members, parts)

    def run():
        return pr.train(model, x, y, masks[mine], vx, vy, config, seeds=seeds[mine],
                        options=pr.TrainOptions(progress=False)).params

    params = jax.block_until_ready(run())
    floor = products(model, config, args.size, args.steps)
    jax.block_until_ready(floor())
    print("READY", flush=True)
    for line in sys.stdin:
        command, *rest = line.split()
        if command == "GO":
            params = jax.block_until_ready(run())
            print("DONE", flush=True)
        elif command == "PRODUCTS":
            print(f"PRODUCTS {median_time(floor, int(rest[0]), warmup=0)}", flush=True)
        elif command == "SAVE":
            path = os.path.join(rest[0], f"part{part}.npz")
            np.savez(path, *[np.asarray(leaf) for leaf in jax.tree.leaves(params)])
            print(f"SAVED {path}", flush=True)


def bench_training(args, model, config, rng) -> None:
    x, y, vx, vy, masks, seeds = training_set(args, rng)
    m, t = args.members, args.steps
    # sequential: the same initial state, data and minibatch keys, one member after another
    one = jax.devices()[0]
    state = jax.device_put(pr.state.init_state(model, config, (args.size, args.size), seeds=seeds), one)
    data = jax.device_put(pr.data.member_data(x, y, masks), one)
    keys = jax.vmap(jax.random.wrap_key_data)(state.data_keys)
    members = [(jax.tree.map(lambda a, j=j: a[j], state.params), jax.tree.map(lambda a, j=j: a[j], state.opt_state),
                pr.data.MemberData(data.images, data.labels, data.cdf[j]), keys[j]) for j in range(m)]

    def sequential(one_step=reference_step(model, config)):
        out = []
        for p, o, d, k in members:
            p, o = fresh(p, o)  # the step donates its parameters and optimiser state
            for i in range(t):
                step = one_step(p, o, d, k, i)
                p, o = step.params, step.opt_state
            out.append(p)
        return out

    runs = {"sequential": sequential}
    if model.conv != "xla":  # the same loop with XLA's native convolutions (the same parameters)
        runs["xla"] = functools.partial(sequential, reference_step(model.clone(conv="xla"), config))
    n_dev = len(jax.devices())
    labels = {"sequential": "sequential Python loop of the jitted step, 1 device",
              "xla": "  the same with conv = xla",
              "vmapped": f"train(), all {m} members vmapped, 1 device",
              "looped": "train(), members looped in the program, 1 device",
              "devices": f"train(), members over {n_dev} devices (mesh={n_dev})",
              "processes": f"train() in {CORES} processes, one per core"}
    for name, member_chunk, mesh in [("vmapped", m, [one]), ("looped", 1, [one])] + (
            [("devices", None, n_dev)] if n_dev > 1 else []):
        cfg = dataclasses.replace(config, member_chunk=member_chunk)
        runs[name] = functools.partial(lambda cfg, mesh: pr.train(model, x, y, masks, vx, vy, cfg, seeds=seeds,
                                                                  options=pr.TrainOptions(progress=False),
                                                                  mesh=mesh).params,
                                       cfg, mesh)
    first = {name: first_time(fn) for name, fn in runs.items()}
    p_seq = sequential()
    diffs = {}
    for name in runs:
        if name not in ("sequential", "xla"):
            leaves = jax.tree.leaves(runs[name]())
            diffs[name] = max(float(jnp.max(jnp.abs(a[j] - b))) for j in range(m)
                              for a, b in zip(leaves, jax.tree.leaves(p_seq[j])))
    workers = None
    if (jax.default_backend() == "cpu" and CORES > 1 and not args.no_processes
            and hasattr(os, "sched_setaffinity")):  # pinning needs Linux
        # started after every compilation above, so that their compilations do not overlap those timings
        workers = runs["processes"] = PinnedWorkers(args, sorted(os.sched_getaffinity(0)))
        workers()
        diffs["processes"] = max(float(np.max(np.abs(a - np.asarray(b)))) for j, p in enumerate(workers.params(m))
                                 for a, b in zip(p, jax.tree.leaves(p_seq[j])))
    # warm runs interleaved, one of each per round: a drift of the machine's speed (other
    # processes, frequency) shifts every variant alike, and each round gives a paired ratio
    warm = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            warm[name].append(time.perf_counter() - t0)
    # the step's matrix products alone, one member-step's worth T times: in this process (one
    # device, XLA's threads on every core) and in each pinned process at once (one core each, the
    # other busy): per member-step seconds
    floor = products(model, config, args.size, t)
    first_time(floor)
    floor_here = median_time(floor, args.repeats) / t
    floor_pinned = None
    if workers is not None:
        floor_pinned = max(float(v) for v in workers._all(f"PRODUCTS {args.repeats}", "PRODUCTS")) / t
        workers.close()
    med = {name: statistics.median(v) for name, v in warm.items()}

    def ratio(ref: str, name: str) -> float:
        return statistics.median(a / b for a, b in zip(warm[ref], warm[name]))

    print(f"training: M = {m} members × T = {t} steps, batch {config.batch_size}, {args.size}×{args.size} "
          f"images, N = {args.n} training units, features {model.features}, convolutions conv = "
          f"{model.conv!r} ({default_conv() if model.conv == 'auto' else model.conv}); the ensemble is "
          f"cfjax.predictors.train (one evaluation round: T steps, then {args.val} validation images); warm "
          f"runs interleaved over {args.repeats} rounds, ratios the median of the rounds' ratios")
    print(f"  {'':50s}{'first run (incl. compile)':>21s}{'warm (median of ' + str(args.repeats) + ')':>22s}")
    for name in runs:
        first_run = f"{first[name]:20.2f}s" if name in first else f"{'—':>21s}"
        line = f"  {labels[name]:50s}{first_run}{med[name]:21.2f}s"
        if name in diffs:
            line += "   ratio (sequential ÷ this) " + (
                f"{first['sequential'] / first[name]:.2f}x first, " if name in first else "")
            line += f"{ratio('sequential', name):.2f}x warm; max |Δparams| {diffs[name]:.1e}"
            if "xla" in runs and name in first:
                line += f"; ÷ the xla loop: {first['xla'] / first[name]:.2f}x first, {ratio('xla', name):.2f}x warm"
        print(line)
    if "devices" in runs:
        print(f"    ratio (train() on 1 device, members looped ÷ this): "
              f"{first['looped'] / first['devices']:.2f}x first, {ratio('looped', 'devices'):.2f}x warm")
    if "processes" in runs and "devices" in runs:
        print(f"    the processes: members in parallel, one process per core with nothing shared but the "
              f"hardware, what member parallelism can give on these {CORES} cores; train() over devices "
              f"reaches {ratio('processes', 'devices'):.2f}x their speed warm")
    warm_seq = med["sequential"]
    if "processes" in runs:
        # per member-step: the loop = the step + a per-call cost (what a program with the loop
        # inside it saves); member parallelism on P cores at best runs P member-steps in the
        # time one core under load takes for one, and the loop's step already uses every core
        seq_ms, looped_ms = warm_seq / (m * t) * 1e3, med["looped"] / (m * t) * 1e3
        call_ms = seq_ms - looped_ms
        proc_ms = med["processes"] / (m * t) * 1e3 * CORES
        here_ms, pinned_ms = floor_here * 1e3, floor_pinned * 1e3
        print(f"  where the time goes, per member-step: the sequential loop {seq_ms:.2f} ms = the step inside "
              f"one program (train(), 1 device, looped) {looped_ms:.2f} ms + {call_ms:.2f} ms per Python call. "
              f"One core with the other busy (a pinned process) takes {proc_ms:.2f} ms, "
              f"{proc_ms / looped_ms:.2f}x the in-program step on this process's threads: members over "
              f"{CORES} cores run at most ({looped_ms:.2f} + {call_ms:.2f}) ÷ ({proc_ms:.2f} ÷ {CORES}) = "
              f"{(looped_ms + call_ms) / (proc_ms / CORES):.2f}x the loop, and {looped_ms / (proc_ms / CORES):.2f}x "
              f"a reference without the per-call cost (each member's steps in one program)")
        print(f"  the step's matrix products alone: {here_ms:.2f} ms on this process's threads, {pinned_ms:.2f} ms "
              f"on one core with the other busy ({pinned_ms / here_ms:.2f}x); were the step nothing but them, "
              f"the ceiling would be ({here_ms:.2f} + {call_ms:.2f}) ÷ ({pinned_ms:.2f} ÷ {CORES}) = "
              f"{(here_ms + call_ms) / (pinned_ms / CORES):.2f}x")
    p0, o0, d0, k0 = members[0]
    temp = reference_step(model, config).lower(p0, o0, d0, k0, 0).compile().memory_analysis()
    if temp is not None:  # XLA's buffer assignment: the step's intermediate buffers, one member
        temp_mb = temp.temp_size_in_bytes / 2 ** 20
        print(f"  one member-step's temporaries: {temp_mb:.1f} MB; {m} members' side by side (vmapped): "
              f"{m} × {temp_mb:.1f} = {m * temp_mb:.0f} MB"
              + (f" (last-level cache: {llc_mb:g} MB)" if (llc_mb := last_level_cache_mb()) else ""))
    print(f"  (train()'s default on {jax.default_backend()}: member_chunk = "
          f"{default_member_chunk(m)}, members on one device unless mesh= says otherwise; per member-step, sequential: "
          f"{warm_seq / (m * t) * 1e3:.2f} ms; load average after: {load()})")


def bench_inference(args, model, rng) -> None:
    m, k, n = args.members, args.k, args.units
    one = jax.devices()[0]
    params = jax.device_put(pr.init_params(model, (args.size, args.size), seeds=np.arange(m)), one)
    cf_images = jax.device_put(synthetic(rng, n * k, args.size)[0].reshape(n, k, args.size, args.size), one)
    by_intervention = [cf_images[:, i] for i in range(k)]  # the loop's N images of one intervention, contiguous
    apply_one = jax.jit(model.apply)

    def loop():
        return [[apply_one(jax.tree.map(lambda a, j=j: a[j], params), by_intervention[i]) for i in range(k)]
                for j in range(m)]

    def ours(member_chunk=None, mesh=(one,)):
        return pr.predict(model, params, cf_images, chunk=args.chunk, logits=True, member_chunk=member_chunk,
                          mesh=list(mesh) if isinstance(mesh, tuple) else mesh)

    first_ours, first_loop = first_time(ours), first_time(loop)
    ref = jnp.stack([jnp.stack(r, axis=1) for r in loop()])  # (M, N, K)
    diff = float(jnp.max(jnp.abs(ours() - ref)))
    t_ours = median_time(ours, args.repeats, warmup=1)
    t_loop = median_time(loop, args.repeats, warmup=1)
    total = m * k * n
    print(f"inference: M = {m} members on K = {k} × N = {n} counterfactual images ({total} member-images), "
          f"chunk {args.chunk}")
    print(f"  predict (one call, chunked), 1 device: {total / t_ours:,.0f} images/s warm ({t_ours:.2f} s; "
          f"first {first_ours:.2f} s)")
    print(f"  loop over members × K of a jitted apply on N images, 1 device: {total / t_loop:,.0f} images/s "
          f"({t_loop:.2f} s; first {first_loop:.2f} s)")
    print(f"  ratio {t_loop / t_ours:.2f}x warm, {first_loop / first_ours:.2f}x first run; max |Δlogit| {diff:.1e}")
    first_vm = first_time(lambda: ours(m))
    t_vm = median_time(lambda: ours(m), args.repeats, warmup=1)
    print(f"  predict with all members vmapped (member_chunk = {m}), 1 device: {total / t_vm:,.0f} images/s "
          f"({t_vm:.2f} s; first {first_vm:.2f} s), ratio {t_loop / t_vm:.2f}x warm")
    n_dev = len(jax.devices())
    if n_dev > 1:
        first_sh = first_time(lambda: ours(mesh=n_dev))
        diff_sh = float(jnp.max(jnp.abs(ours(mesh=n_dev) - ours())))
        t_sh = median_time(lambda: ours(mesh=n_dev), args.repeats, warmup=1)
        print(f"  predict with the members over {n_dev} devices (mesh={n_dev}): {total / t_sh:,.0f} images/s "
              f"({t_sh:.2f} s; first {first_sh:.2f} s), ratio {t_loop / t_sh:.2f}x warm, {first_loop / first_sh:.2f}x "
              f"first run; {t_ours / t_sh:.2f}x the one-device call; max |Δlogit| vs it {diff_sh:.1e}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, default=21, help="ensemble size M (paper 000: 7 predictors × 3 seeds)")
    ap.add_argument("--steps", type=int, default=100, help="training steps T per member")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=32, help="image side")
    ap.add_argument("--n", type=int, default=4096, help="training units")
    ap.add_argument("--features", default="8,16,32", help="channels of the convolution blocks")
    ap.add_argument("--val", type=int, default=64, help="validation images")
    ap.add_argument("--units", type=int, default=256, help="test units N for inference")
    ap.add_argument("--k", type=int, default=16, help="interventions K for inference")
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--conv", default="auto", choices=("auto", "matmul", "xla"),
                    help="EffusionCNN's convolutions (auto: matmul on CPU, XLA's elsewhere)")
    ap.add_argument("--only", default="both", choices=("both", "training", "inference"))
    ap.add_argument("--no-processes", action="store_true",
                    help="skip the members trained by one pinned process per core")
    ap.add_argument("--worker", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    print(f"{conditions()}; load average {load()}")
    model = pr.EffusionCNN(features=tuple(int(f) for f in args.features.split(",")), conv=args.conv)
    config = pr.EnsembleConfig(steps=max(args.steps, 2), batch_size=args.batch, learning_rate=1e-3, warmup=1,
                            eval_every=max(args.steps, 2), patience=1)
    rng = np.random.default_rng(0)
    if args.worker:
        return worker(args, model, config, rng)
    if args.only in ("both", "training"):
        bench_training(args, model, config, rng)
    if args.only in ("both", "inference"):
        bench_inference(args, model, rng)


if __name__ == "__main__":
    main()
