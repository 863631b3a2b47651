"""Benchmark: ``cfjax.metrics.evaluate`` against a numpy/scipy/scikit-learn report.

n = 28,189 units (paper 000's MIMIC-CXR test size), K = 16 interventions, float32. Both sides
are timed in this one process: cfjax's first call (compilation included), then the median of
many warm runs of each side:
  1. one predictor: ``evaluate`` vs ``reference_report``;
  2. 30 predictors: one vmapped ``evaluate`` vs 30 sequential reference calls.
Prints the ratios (cfjax time / reference time: below 1 means cfjax is faster) and checks that
both sides agree.
"""

from __future__ import annotations

import argparse
import os
import time

# Expose every core as an XLA host device so that the sweep can shard its predictor axis
# (a caller's choice made before JAX starts; cfjax itself never sets it).
os.environ.setdefault(
    "XLA_FLAGS", f"--xla_force_host_platform_device_count={os.cpu_count() or 1}")

import jax
import jax.numpy as jnp
import numpy as np

import cfjax as cf
from experiments.benchmarks.timing import conditions, first_time, median_time
from experiments.benchmarks.reference_metrics import reference_report


def make_predictors(rng, n_pred: int, n: int, k: int):
    """Scores of biased predictors: a shared signal, per-predictor bias and noise over K."""
    y = rng.integers(0, 2, n)
    signal = rng.normal(size=n) + 1.2 * y
    bias = rng.normal(size=(n_pred, 1, 1)) * 0.5
    shift = rng.normal(size=(n_pred, 1, k)) * 0.3
    logits = signal[None, :, None] + bias + shift + 0.2 * rng.normal(size=(n_pred, n, k))
    p_cf = 1 / (1 + np.exp(-logits))
    p_obs = p_cf[:, :, 0] * 0.9 + 0.05 * rng.uniform(size=(n_pred, n))
    return p_obs.astype(np.float32), p_cf.astype(np.float32), y.astype(np.int32)


def breakdown(p_obs, p_cf, y, repeats: int) -> None:
    """Where the time of one ``evaluate`` goes: its building blocks, each jitted and
    timed on its own (they overlap: several share the same sorts inside ``evaluate``)."""
    M = cf.metrics
    p_bar = M.marginalise(p_cf)
    parts = {  # name: (function, arguments); arguments are passed, never closed over
        "rankdata, x2": (lambda a, b: (M.ranking.rankdata(a), M.ranking.rankdata(b)), (p_obs, p_bar)),
        "kendall_tau_b": (M.kendall_tau_b, (p_obs, p_bar)),
        "spearman + rank_change": (lambda a, b: (M.spearman(a, b), M.rank_change(a, b)), (p_obs, p_bar)),
        "interventional + worst-case risk": (lambda p, y: (M.interventional_risk(p, y), M.worst_case_risk(p, y)), (p_cf, y)),
        "cvar_risk, 3 levels": (lambda p, y: M.cvar_risk(p, y, (0.5, 0.25, 0.1)), (p_cf, y)),
        "stability_variance + flip_rate": (lambda a, p: (M.stability_variance(p), M.flip_rate(a, p)), (p_obs, p_cf)),
        "calibration_bins, x2": (lambda a, b, y: (M.calibration.calibration_bins(a, y), M.calibration.calibration_bins(b, y)), (p_obs, p_bar, y)),
    }
    print("where the time of one evaluation goes (its building blocks, each jitted alone):")
    for name, (fn, fn_args) in parts.items():
        jitted = jax.jit(fn)
        seconds = median_time(lambda f=jitted, a=fn_args: f(*a), repeats)
        print(f"  {name:34s} {seconds * 1e3:7.2f} ms")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=28_189)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--predictors", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--breakdown", action="store_true",
                    help="also time the main kernels of one evaluation separately")
    args = ap.parse_args(argv)

    start = time.perf_counter()
    print(conditions() + f"; {len(jax.devices())} XLA host device(s)")
    rng = np.random.default_rng(0)
    P_obs, P_cf, y = make_predictors(rng, args.predictors, args.n, args.k)
    yf = y.astype(np.float32)
    po, pc, yj = jnp.asarray(P_obs[0]), jnp.asarray(P_cf[0]), jnp.asarray(y)
    first = first_time(lambda: cf.metrics.evaluate(po, pc, yj))  # compilation included

    # Agreement first.
    ours = cf.metrics.evaluate(P_obs[0], P_cf[0], y).to_dict()
    ref = reference_report(P_obs[0], P_cf[0], yf)
    worst, smooth = 0.0, 0.0
    for name, value in ref.items():
        mine = np.array(list(ours[name].values())) if name == "risk_cvar" else ours[name]
        if name.startswith("smece"):  # relplot discretises differently: absolute agreement
            smooth = max(smooth, float(np.max(np.abs(np.asarray(mine) - value))))
            continue
        rel = np.abs(np.asarray(mine) - value) / np.maximum(np.abs(value), 1e-3)
        worst = max(worst, float(np.max(rel)))
    print(f"max relative |cfjax - reference| over the report's fields but smooth ECE: {worst:.2e}; "
          f"smooth ECE vs relplot.smECE: max |difference| {smooth:.1e}")

    # 1. One predictor.
    t_cf = median_time(lambda: cf.metrics.evaluate(po, pc, yj), args.repeats)
    t_ref = median_time(lambda: reference_report(P_obs[0], P_cf[0], yf), args.repeats)
    t_ref0 = median_time(lambda: reference_report(P_obs[0], P_cf[0], yf, smooth=False), args.repeats)
    print(f"one predictor (n={args.n:,}, K={args.k}, float32; warm medians of {args.repeats} runs): "
          f"cfjax {t_cf * 1e3:7.2f} ms, reference {t_ref * 1e3:7.2f} ms (smooth ECE by relplot), "
          f"{t_ref0 * 1e3:7.2f} ms without the two smooth ECE fields")
    print(f"  ratio cfjax / reference {t_cf / t_ref:.3f} warm (speed-up {t_ref / t_cf:.1f}x); "
          f"cfjax's first call {first * 1e3:.0f} ms incl. compile: ratio {first / t_ref:.2f}")
    print(f"  against the reference without smooth ECE (cfjax still computing it): speed-up "
          f"{t_ref0 / t_cf:.1f}x warm, {t_ref0 / first:.2f}x against cfjax's first call")

    # 2. Many predictors at once: vmap on one device, then sharded over all host devices.
    reps = max(3, args.repeats // 5)
    t_ref_many = median_time(
        lambda: [reference_report(P_obs[j], P_cf[j], yf) for j in range(args.predictors)], reps)
    t_ref_many0 = median_time(
        lambda: [reference_report(P_obs[j], P_cf[j], yf, smooth=False) for j in range(args.predictors)], reps)
    Po, Pc = jnp.asarray(P_obs), jnp.asarray(P_cf)
    every = len(jax.devices())
    first_vmap = first_time(lambda: cf.metrics.evaluate_many(Po, Pc, yj))
    first_shard = first_time(lambda: cf.metrics.evaluate_many(Po, Pc, yj, mesh=every))
    t_vmap = median_time(lambda: cf.metrics.evaluate_many(Po, Pc, yj), reps)
    t_shard = median_time(lambda: cf.metrics.evaluate_many(Po, Pc, yj, mesh=every), reps)
    batched = cf.metrics.evaluate_many(Po, Pc, yj, mesh=every).to_dict()
    sweep_diff = max(abs(batched["kendall_tau_b"][j] - cf.metrics.evaluate(P_obs[j], P_cf[j], y)
                         .to_dict()["kendall_tau_b"]) for j in range(args.predictors))
    print(f"{args.predictors} predictors (warm medians of {reps} runs): reference loop {t_ref_many * 1e3:7.1f} ms")
    print(f"  evaluate_many, 1 device      {t_vmap * 1e3:7.1f} ms   ratio {t_vmap / t_ref_many:.3f}"
          f"   speed-up {t_ref_many / t_vmap:.2f}x   (first call {first_vmap * 1e3:.0f} ms incl. compile: "
          f"speed-up {t_ref_many / first_vmap:.2f}x)")
    print(f"  evaluate_many, {len(jax.devices())} devices    {t_shard * 1e3:7.1f} ms   ratio "
          f"{t_shard / t_ref_many:.3f}   speed-up {t_ref_many / t_shard:.2f}x   (first call "
          f"{first_shard * 1e3:.0f} ms incl. compile: speed-up {t_ref_many / first_shard:.2f}x)")
    print(f"  without smooth ECE in the reference ({t_ref_many0 * 1e3:.1f} ms): speed-up "
          f"{t_ref_many0 / t_vmap:.2f}x (1 device), {t_ref_many0 / t_shard:.2f}x ({len(jax.devices())} devices)")
    print(f"  max |batched - single| kendall: {sweep_diff:.1e}")
    if args.breakdown:
        breakdown(po, pc, yj, args.repeats)
    print(f"run time {time.perf_counter() - start:.0f} s")
    return dict(one=t_cf / t_ref, one_first=first / t_ref, vmap=t_vmap / t_ref_many,
                sharded=t_shard / t_ref_many, max_abs_diff=worst)


if __name__ == "__main__":
    main()
