"""Benchmark: the marginalisation report as N grows, streamed or in memory, and over devices.

The data: N units of the synthetic chest SCM's parents, their exact counterfactuals under
paper 000's K = 16 interventions do(sex, age) (effusion, the label, held at its observed
value), scored by the hand-written logistic risk score of ``experiments.multihost`` (float32).

1. Streaming vs in memory, N = 10^4, 10^5, 10^6 (``--quick``: 10^4, 10^5):
   - streaming: :func:`cfjax.metrics.evaluate_chunks` fed by a generator that makes the
     counterfactuals of ``--chunk`` units (``SCM.counterfactual_chunks``), scores them and
     yields ``(p_obs, p_cf, y)``; each ``(b, K)`` chunk is dropped once reduced;
   - in memory (the reference): ``SCM.counterfactual`` of all N units, scored into one
     ``(N, K)`` array, then :func:`cfjax.metrics.evaluate`.
   Each path at each N runs in a fresh child process: imports and a warm-up on a small N
   (compiling the chunk programs), then the RSS, then the first run at N (the N-shaped
   programs compiled) and the median of warm runs; the child reports its peak RSS
   (``getrusage(...).ru_maxrss``) at the end; then a second fresh child, its programs loaded
   from the persistent compilation cache the first filled, measures one run's peak alone.
   Printed: units/s first and warm; the RSS after the warm-up, after making the units and
   before the warm runs; the peaks; three growths (a warm run's, a lower bound; the whole
   child's, an upper bound; one run in the fresh child) in MB and bytes per unit, beside
   N × K × 4 bytes (one float32 ``p_cf``). The streaming
   path keeps four numbers per unit on the host, whatever K; the in-memory one holds every
   node's (N, K) counterfactuals and the (N, K) scores.
   Then the metric stage alone, in this process: ``evaluate_chunks`` over the in-memory
   ``(N, K)`` scores cut into ``--chunk`` host slices vs ``evaluate`` on the whole array
   (both from numpy), first call and warm; ratio = chunks ÷ whole (above 1: the chunked
   reduction costs more).
2. Devices: a child with ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (CPU) runs,
   at N = 10^6 (``--quick``: 10^5), for d = 1, 2, 4, 8 host devices,
   :func:`cfjax.distributed.map_batch` of the per-unit counterfactual scorer (one unit's
   abduction, K actions and predictions, scored: ``vmap``ped) with a chunk dividing N / 8 (no
   padding for any d) and with ``--chunk`` (N padded to a multiple of d × chunk), and
   ``evaluate(..., mesh=cfjax.distributed.mesh(d))``; times and the speed-up over d = 1. Host
   devices share the machine's cores: the speed-up is bounded by the cores (printed).
3. On an accelerator (``jax.default_backend() != "cpu"``): a large matmul and a copy kernel
   give the achieved FLOP/s and bandwidth ceilings, and the metric stage's bandwidth (bytes
   of ``p_cf`` read ÷ warm ``evaluate`` time at the largest N) is printed against them. On
   CPU this part is skipped (printed).

Every comparison checks that both sides agree (report fields). Peak RSS is host memory; on an
accelerator the device's memory is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD_DEVICES = 8
FIELDS = ("risk_ie", "risk_wc", "s_var", "s_flip", "ece_cm", "spearman", "kendall_tau_b")


# ---------------------------------------------------------------- memory
def rss_mb() -> float:
    """The current resident set size in MB (Linux ``/proc``; else the peak so far)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_mb()


def peak_mb() -> float:
    """This process's peak resident set size in MB (``ru_maxrss``: KB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


# ---------------------------------------------------------------- the data and the two paths
_CACHE: dict = {}


def _setup():
    """The chest SCM, its parameters, the K = 16 interventions and the jitted scorer (made
    once, so that warm runs reuse every compiled program)."""
    if not _CACHE:
        import jax
        import cfjax as cf
        from experiments import multihost as mh

        chest = cf.data.ChestSCM()
        grid, _ = cf.scm.intervention_grid({"sex": [0, 1], "age": mh.AGES})
        _CACHE.update(scm=chest.scm, params=chest.params(), grid=grid, k=int(grid["sex"].shape[0]),
                      score=jax.jit(jax.vmap(mh.risk_score)), score_obs=jax.jit(mh.risk_score))
    return _CACHE


def make_units(seed: int, n: int) -> dict[str, np.ndarray]:
    from experiments import multihost as mh
    return mh.units(seed, slice(0, n))


def _interventions(u: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    s = _setup()
    n = u["sex"].shape[0]
    return {**s["grid"], "effusion": np.broadcast_to(u["effusion"][:, None], (n, s["k"]))}


def stream_chunks(u: dict[str, np.ndarray], chunk: int, seed: int):
    """``(p_obs, p_cf, y)`` of the units, ``chunk`` at a time: counterfactuals made and scored
    chunk by chunk (``experiments.multihost.chunks`` with the compiled programs kept)."""
    import jax
    s = _setup()
    p_obs = np.asarray(s["score_obs"](u))
    for start, stop, out in s["scm"].counterfactual_chunks(s["params"], u, _interventions(u), chunk_size=chunk,
                                                          key=jax.random.key(seed + 1)):
        yield p_obs[start:stop], np.asarray(s["score"](out)), u["effusion"][start:stop].astype(np.int32)


def streaming(u, chunk: int, seed: int):
    import cfjax as cf
    return cf.metrics.evaluate_chunks(stream_chunks(u, chunk, seed))


def in_memory_scores(u, seed: int):
    """Every counterfactual at once ({node: (N, K)}), scored into one host (N, K) array."""
    import jax
    s = _setup()
    out = s["scm"].counterfactual(s["params"], u, _interventions(u), key=jax.random.key(seed + 1))
    p_cf = np.asarray(s["score"](out))
    del out
    return np.asarray(s["score_obs"](u)), p_cf, u["effusion"].astype(np.int32)


def in_memory(u, chunk: int, seed: int):
    import cfjax as cf
    return cf.metrics.evaluate(*in_memory_scores(u, seed))


PATHS = {"stream": streaming, "memory": in_memory}


def summary(report) -> dict[str, float]:
    d = report.to_dict()
    return {f: float(d[f]) for f in FIELDS}


def timed(fn) -> tuple[float, object]:
    """Wall time of ``fn()`` with its result (a pytree of arrays) waited for, and the result."""
    import jax
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    return time.perf_counter() - t0, out


def reset_peak() -> bool:
    """Reset this process's peak RSS to its current RSS (Linux ``/proc/self/clear_refs``),
    so that ``ru_maxrss`` then tells the peak of what follows; False where not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child_path(path: str, n: int, chunk: int, repeats: int, seed: int) -> dict:
    """One path at one N in this (fresh) process: a warm-up on a small N, the RSS, the first
    run at N (its programs compiled: the process's peak RSS then includes XLA's compilation),
    then the peak RSS is reset and the warm runs give the path's own peak."""
    _setup()
    fn = PATHS[path]
    fn(make_units(seed + 7, min(n, chunk)), chunk, seed)  # warm-up: the chunk programs compiled
    rss0 = rss_mb()
    u = make_units(seed, n)
    rss_data = rss_mb()
    first, report = timed(lambda: fn(u, chunk, seed))
    peak_first = peak_mb()
    reset = reset_peak()
    rss_before = rss_mb()
    warm = [timed(lambda: fn(u, chunk, seed))[0] for _ in range(repeats)]
    return dict(path=path, n=n, first=first, warm=statistics.median(warm), rss0=rss0, rss_data=rss_data,
                rss_before=rss_before, peak_first=peak_first, peak=peak_mb(), reset=reset, report=summary(report))


def child_memory(path: str, n: int, chunk: int, seed: int) -> dict:
    """The peak RSS of one run of a path at N in a fresh process whose programs come from the
    persistent compilation cache that the timing child filled: a warm-up on a small N, the N
    units made, the peak reset, one run."""
    _setup()
    fn = PATHS[path]
    fn(make_units(seed + 7, min(n, chunk)), chunk, seed)
    u = make_units(seed, n)
    rss_data = rss_mb()
    reset = reset_peak()
    seconds, _ = timed(lambda: fn(u, chunk, seed))
    return dict(rss_data=rss_data, peak=peak_mb(), reset=reset, seconds=seconds)


def run_child(args: list[str], env: dict | None = None) -> dict:
    """``python -m experiments.benchmarks.bench_scale <args>`` in a fresh process; its last
    stdout line is JSON."""
    out = subprocess.run([sys.executable, "-m", "experiments.benchmarks.bench_scale", *args], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise RuntimeError(f"child {args} failed with exit status {out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- 1. streaming vs in memory
def bench_paths(sizes: list[int], chunk: int, seed: int) -> None:
    k = 16
    print(f"1. streaming (evaluate_chunks over generated chunks of {chunk:,}) vs in memory (all "
          f"counterfactuals, one (N, K) array, evaluate); K = {k}, float32; each path and N in a fresh "
          f"child process (first run incl. compile at that N; warm: median)")
    print(f"  {'':26s} {'units/s':>13s}   {'RSS (MB)':>24s} {'peak RSS (MB)':>15s}   "
          f"{'warm peak − before':>18s}   {'one run (fresh)':>17s}")
    print(f"  {'N':>9s} {'path':>7s} {'first':>13s} {'warm':>12s}   {'base':>5s} {'data':>5s} {'before warm':>12s} "
          f"{'1st run':>8s} {'warm':>6s}   {'MB':>8s} {'B/unit':>9s}   {'MB':>7s} {'B/unit':>9s}   {'N×K×4 B':>8s}")
    one = lambda r: r["one"]["peak"] - r["one"]["rss_data"]  # noqa: E731
    rows = {}
    cache = tempfile.TemporaryDirectory(prefix="bench_scale_xla_")  # one folder per (N, path): no sharing
    for n in sizes:
        repeats = 3 if n <= 10**5 else 1
        for path in ("stream", "memory"):
            common = ["--n", str(n), "--chunk", str(chunk), "--seed", str(seed)]
            cache_env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=os.path.join(cache.name, f"{path}-{n}"),
                             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
            r = run_child(["--child", path, "--repeats", str(repeats), *common], env=cache_env)
            r["one"] = run_child(["--child", path + "-memory", *common], env=cache_env)
            rows[n, path] = r
            growth = r["peak"] - r["rss_before"]
            print(f"  {n:9,d} {path:>7s} {n / r['first']:13,.0f} {n / r['warm']:12,.0f}   {r['rss0']:5.0f} "
                  f"{r['rss_data']:5.0f} {r['rss_before']:12.0f} {r['peak_first']:8.0f} {r['peak']:6.0f}   "
                  f"{growth:8.0f} {growth * 2**20 / n:9.0f}   {one(r):7.0f} {one(r) * 2**20 / n:9.0f}   "
                  f"{n * k * 4 / 2**20:5.0f} MB", flush=True)
        s, m = rows[n, "stream"], rows[n, "memory"]
        diff = max(abs(s["report"][f] - m["report"][f]) for f in FIELDS)
        print(f"  {'':9s} ratio stream ÷ memory time: {s['first'] / m['first']:.2f} first, "
              f"{s['warm'] / m['warm']:.2f} warm (median of {repeats}); warm peak − before: "
              f"{s['peak'] - s['rss_before']:.0f} vs {m['peak'] - m['rss_before']:.0f} MB; whole child's peak − base: "
              f"{max(s['peak'], s['peak_first']) - s['rss0']:.0f} vs {max(m['peak'], m['peak_first']) - m['rss0']:.0f} MB; "
              f"one run (fresh): {one(s):.0f} vs {one(m):.0f} MB; "
              f"max |Δ| of the reports: {diff:.1e}", flush=True)
    print(f"  RSS columns: base, after imports and a warm-up on min(N, {chunk:,}) units (the chunk "
          f"programs compiled); data, once the N units are made (5 parents, 20 B/unit, plus what sampling "
          f"them left); before warm, after the first run at N. Peak RSS (ru_maxrss): 1st run, the process's "
          f"peak up to the end of the first run (XLA compiling the N-shaped programs included); warm, the "
          f"peak of the warm runs alone"
          + ("" if all(r["reset"] for r in rows.values()) else " (NOT reset on this OS: the whole process's)")
          + ". warm peak − before: the memory a warm run of the path needs on top of the units it is given "
          "(a lower bound: the allocator keeps some of what the first run freed, and the warm runs reuse it); "
          "whole child's peak − base: an upper bound (data, compilation at N and that retained memory included). "
          "one run (fresh): a second fresh child, its programs from the persistent compilation cache the first "
          "filled (no compiling at N), the N units made, then one run: its peak − the RSS before it (the cleanest)."
          f" Report fields compared: {', '.join(FIELDS)}.")


def bench_metric_stage(sizes: list[int], chunk: int, seed: int, repeats: int) -> tuple[float, int]:
    import jax
    import cfjax as cf
    from experiments.benchmarks.timing import first_time, median_time

    print(f"   the metric stage alone (scores made beforehand, numpy inputs): evaluate_chunks over "
          f"{chunk:,}-unit slices vs evaluate on the whole (N, K) array")
    print(f"  {'N':>9s} {'evaluate first':>15s} {'warm':>9s} {'chunks first':>13s} {'warm':>9s} "
          f"{'ratio first':>12s} {'ratio warm':>11s} {'max |Δ|':>8s}")
    t_whole = 0.0
    for n in sizes:
        p_obs, p_cf, y = in_memory_scores(make_units(seed, n), seed)
        whole = lambda: cf.metrics.evaluate(p_obs, p_cf, y)  # noqa: E731
        pieces = [(p_obs[i:i + chunk], p_cf[i:i + chunk], y[i:i + chunk]) for i in range(0, n, chunk)]
        chunked = lambda: cf.metrics.evaluate_chunks(pieces)  # noqa: E731
        f_whole, f_chunks = first_time(whole), first_time(chunked)
        reps = repeats if n <= 10**5 else max(1, repeats // 3)
        t_whole, t_chunks = median_time(whole, reps, warmup=1), median_time(chunked, reps, warmup=1)
        a, b = summary(whole()), summary(chunked())
        diff = max(abs(a[f] - b[f]) for f in FIELDS)
        print(f"  {n:9,d} {f_whole * 1e3:12.0f} ms {t_whole * 1e3:6.0f} ms {f_chunks * 1e3:10.0f} ms "
              f"{t_chunks * 1e3:6.0f} ms {f_chunks / f_whole:12.2f} {t_chunks / t_whole:11.2f} {diff:8.1e}",
              flush=True)
    print(f"  ({jax.default_backend()}; warm medians of {repeats} runs, {max(1, repeats // 3)} at 10^6)")
    return t_whole, max(sizes)


# ---------------------------------------------------------------- 2. devices
def score_unit(x: dict, key, params, do_sex, do_age):
    """One unit's K counterfactual risk scores: abduction once, then each intervention
    do(sex, age) with effusion held at its observed value (``vmap`` over K)."""
    import jax
    from experiments import multihost as mh
    scm = _setup()["scm"]
    noise = scm.abduct_unit(params, x, key)

    def one(sex, age):
        do = {"sex": sex, "age": age, "effusion": x["effusion"]}
        return mh.risk_score(scm.predict_unit(params, noise, do=do, observed=x))

    return jax.vmap(one)(do_sex, do_age)


def _score_batch(units, keys):
    import jax
    s = _setup()
    grid = s["grid"]
    return jax.vmap(lambda x, k: score_unit(x, k, s["params"], grid["sex"], grid["age"]))(units, keys)


def even_chunk(n: int, chunk: int, devices: int = CHILD_DEVICES) -> int:
    """The largest chunk ≤ ``chunk`` dividing ``n / devices`` (so that no device count up to
    ``devices`` that divides it pads the units), or ``chunk`` when ``devices`` does not divide n."""
    if n % devices:
        return chunk
    per = n // devices
    return max(c for c in range(1, min(chunk, per) + 1) if per % c == 0)


def child_devices(n: int, chunk: int, repeats: int, seed: int) -> dict:
    import jax
    import cfjax as cf

    s = _setup()
    u = make_units(seed, n)
    keys = jax.random.split(jax.random.key(seed + 1), n)
    y = u["effusion"].astype(np.int32)
    p_obs = np.asarray(s["score_obs"](u))
    out = {"devices": len(jax.devices()), "cores": os.cpu_count(), "n": n, "map": {}, "evaluate": {}}
    even = even_chunk(n, chunk)
    out["even_chunk"] = even
    p_ref = None
    for d in (1, 2, 4, 8):
        if d > len(jax.devices()):
            break
        m = cf.distributed.mesh(d)
        for size, key in ((even, "map"), (chunk, "map_padded")):
            run = lambda: cf.distributed.map_batch(_score_batch, u, keys, mesh=m, chunk_size=size)  # noqa: E731
            first, p = timed(run)
            warm = statistics.median(timed(run)[0] for _ in range(repeats))
            p = np.asarray(p)
            p_ref = p if p_ref is None else p_ref
            out.setdefault(key, {})[d] = dict(first=first, warm=warm, diff=float(np.max(np.abs(p - p_ref))))
    # the same scores as the streaming path's counterfactuals (scm.counterfactual_chunks)
    p_stream = np.concatenate([c[1] for c in stream_chunks(u, chunk, seed)])
    out["vs_scm"] = float(np.max(np.abs(p_ref - p_stream)))
    reports = {}
    for d in out["map"]:
        m = cf.distributed.mesh(int(d))
        run = lambda: cf.metrics.evaluate(p_obs, p_ref, y, mesh=m)  # noqa: E731
        first, report = timed(run)
        warm = statistics.median(timed(run)[0] for _ in range(repeats))
        reports[d] = summary(report)
        out["evaluate"][d] = dict(first=first, warm=warm,
                                  diff=max(abs(reports[d][f] - reports[1][f]) for f in FIELDS))
    return out


def bench_devices(n: int, chunk: int, repeats: int, seed: int) -> None:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={CHILD_DEVICES}").strip()
    r = run_child(["--child", "devices", "--n", str(n), "--chunk", str(chunk), "--repeats", str(repeats),
                   "--seed", str(seed)], env=env)
    print(f"2. over host devices (a child process with {r['devices']} XLA CPU devices on {r['cores']} cores: "
          f"the devices share the cores, so expect at most ~{r['cores']}x); N = {n:,}, K = 16; warm: median "
          f"of {repeats}")
    print(f"  {'':44s} {'d':>2s} {'first':>9s} {'warm':>9s} {'speed-up first':>15s} {'warm':>6s} {'max |Δ| vs d=1':>15s}")
    rows = ((f"map_batch(counterfactual scorer, chunk {r['even_chunk']:,})", "map"),
            (f"  the same, chunk {chunk:,} (units padded)", "map_padded"),
            ("evaluate(p_obs, p_cf, y, mesh=mesh(d))", "evaluate"))
    for name, key in rows:
        base = r[key]["1"]
        for d, t in r[key].items():
            print(f"  {name if d == '1' else '':44s} {d:>2s} {t['first']:7.3f} s {t['warm']:7.3f} s "
                  f"{base['first'] / t['first']:14.2f}x {base['warm'] / t['warm']:5.2f}x {t['diff']:15.1e}")
    print("  (map_batch pads each device's block of units to a multiple of the chunk inside the program and "
          "drops that padding there, so the result stays split over the devices; where chunk ≥ N / d the chunk "
          "is N / d. evaluate(mesh=) splits the reduction over the interventions; the ranks, calibration and "
          "smooth ECE of the (N,) scores run once, on one device, and dominate at this K)")
    print(f"  map_batch scores vs SCM.counterfactual_chunks + the scorer: max |Δ| {r['vs_scm']:.1e}")


# ---------------------------------------------------------------- 3. accelerator ceilings
def bench_roofline(t_metric: float, n: int, k: int = 16) -> None:
    import jax
    import jax.numpy as jnp
    from experiments.benchmarks.timing import median_time

    backend = jax.default_backend()
    if backend == "cpu":
        print("3. accelerator ceilings: skipped (jax's default backend is cpu)")
        return
    size = 8192
    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    matmul = jax.jit(lambda x: x @ x)
    t_mm = median_time(lambda: matmul(a), 10)
    x = jnp.ones((2**28,), jnp.float32)  # 1 GiB
    copy = jax.jit(lambda v: v + 1.0)
    t_copy = median_time(lambda: copy(x), 10)
    flops = 2 * size**3 / t_mm
    bandwidth = 2 * x.nbytes / t_copy
    achieved = n * k * 4 / t_metric
    print(f"3. {jax.devices()[0].device_kind} ({backend}): float32 matmul {size}² {flops / 1e12:.1f} TFLOP/s, "
          f"copy (read + write 1 GiB) {bandwidth / 1e9:.0f} GB/s; evaluate at N = {n:,}: {n * k * 4 / 2**20:.0f} MB "
          f"of p_cf in {t_metric * 1e3:.1f} ms = {achieved / 1e9:.2f} GB/s, {achieved / bandwidth:.1%} of the copy's "
          f"bandwidth (the report also sorts the (N,) vectors: several passes)")


# ---------------------------------------------------------------- main
def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="N = 10^4, 10^5 only (and 10^5 units over devices)")
    ap.add_argument("--chunk", type=int, default=16384, help="units per streamed chunk")
    ap.add_argument("--repeats", type=int, default=3, help="warm runs of the metric stage and the device runs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", choices=("stream", "memory", "stream-memory", "memory-memory", "devices"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        if args.child.endswith("-memory"):
            result = child_memory(args.child[:-len("-memory")], args.n, args.chunk, args.seed)
        elif args.child == "devices":
            result = child_devices(args.n, args.chunk, args.repeats, args.seed)
        else:
            result = child_path(args.child, args.n, args.chunk, args.repeats, args.seed)
        print(json.dumps(result))
        return

    from experiments.benchmarks.timing import conditions
    start = time.perf_counter()
    print(conditions() + (f"; load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}"
                          if hasattr(os, "getloadavg") else ""))
    sizes = [10**4, 10**5] if args.quick else [10**4, 10**5, 10**6]
    bench_paths(sizes, args.chunk, args.seed)
    t_metric, n_metric = bench_metric_stage(sizes, args.chunk, args.seed, args.repeats)
    bench_devices(10**5 if args.quick else 10**6, args.chunk, max(1, args.repeats - 1), args.seed)
    bench_roofline(t_metric, n_metric)
    print(f"run time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
