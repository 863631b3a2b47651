"""Benchmark: how ``SCM.fit`` reaches the maximum-likelihood fit, full batch against minibatches,
as N grows, for the mechanisms cfjax has (linear location–scale, MLP location–scale, spline).

The data: a 5-node SCM X0→X1→X2→X4, X0→X3→X4 with non-linear, heteroscedastic equations
(linear ones for the linear mechanism, whose maximum-likelihood fit is then the per-node OLS
closed form). For every mechanism and N the benchmark fits with three batch rules, each under
an increasing number of steps (Adam with the default cosine decay of the step size to zero over
the run), until the fit is within the tolerance of the maximum-likelihood fit:

- ``full``: every step on all N units (``batch_size=None``);
- ``mini+full``: minibatches of 1,024 for all but the last eighth of the steps, which are
  full-batch (``batch_size="auto"`` beyond its threshold);
- ``mini``: minibatches of 1,024 throughout (``batch_size=1024``).

For the linear mechanism the benchmark tries each rule under an increasing number of steps
until its coefficients are within 1e-3 of OLS and its noise scales within 1e-2 (relative), and
prints the fewest steps and the fit's time; a rule that does not get there within the largest
number of steps tried prints its remaining gap. The last line per size gives the ratio of the
two times, and the summary the smallest N from which ``mini+full`` gets there sooner than
``full``: where ``batch_size="auto"`` should switch.

For the non-linear mechanisms (whose maximum of the likelihood has no closed form) each rule
runs 2,000 steps (one round of ``steps="auto"``) and prints its time and its gap to a long
full-batch fit (8,000 steps) in mean negative log-likelihood per unit, on the training units
and on 5,000 held-out units (negative: better than the long fit); then the fit with every
default (``steps="auto"``: rounds until one gains less than 1e-4 nats per unit), with its
rounds.

Times are one call of ``fit`` each (what a user pays: tracing, compilation and the steps),
median of ``--repeats``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

import cfjax as cf
import cfjax.scm.fit as scm_fit
from experiments.benchmarks.timing import conditions

PARENTS = {"X0": [], "X1": ["X0"], "X2": ["X1"], "X3": ["X0"], "X4": ["X2", "X3"]}
MECHANISMS = {
    "linear": lambda: cf.scm.LocationScale(),
    "mlp": lambda: cf.scm.LocationScale(hidden=(16, 16), heteroscedastic=True),
    "spline": lambda: cf.scm.Spline(num_bins=8, hidden=(16,)),
}
RULES = {"full": None, "mini+full": "auto", "mini": 1024}
TOL_COEF, TOL_SCALE = 1e-3, 1e-2


def simulate(n: int, linear: bool, seed: int = 0) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    e = r.standard_normal((5, n))
    x0 = e[0]
    x1 = 0.8 * x0 + 0.5 * e[1]
    if linear:
        x2 = -1.2 * x1 + 0.7 * e[2]
        x3 = 0.5 * x0 + 1.1 * e[3]
        x4 = 0.6 * x2 - 0.9 * x3 + 0.3 * e[4]
    else:
        x2 = np.sin(1.5 * x1) + 0.3 * x1 ** 2 + (0.3 + 0.2 * np.abs(x1)) * e[2]
        x3 = np.tanh(x0) + 0.5 * np.exp(0.3 * e[3]) * e[3]
        x4 = 0.6 * x2 - 0.4 * x3 * x2 + 0.3 * e[4]
    return {v: x.astype(np.float32) for v, x in zip(PARENTS, (x0, x1, x2, x3, x4))}


def ols(data: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, float]]:
    """Per-node OLS coefficients (parents, then intercept) and the ML noise scale."""
    out = {}
    for v, ps in PARENTS.items():
        a = np.column_stack([data[p].astype(np.float64) for p in ps] + [np.ones(len(data[v]))])
        coef, *_ = np.linalg.lstsq(a, data[v].astype(np.float64), rcond=None)
        out[v] = coef, float(np.sqrt(np.mean((data[v] - a @ coef) ** 2)))
    return out


def linear_gap(params, ref) -> tuple[float, float]:
    coef_err = scale_err = 0.0
    for v, (coef, sd) in ref.items():
        net = params[v]["net"]["params"]
        got = (np.concatenate([np.asarray(net["Dense_0"]["kernel"])[:, 0], np.asarray(net["Dense_0"]["bias"])])
               if "Dense_0" in net else np.asarray(net["bias"]))
        coef_err = max(coef_err, float(np.max(np.abs(got - coef))))
        scale_err = max(scale_err, abs(float(np.exp(params[v]["log_scale"])) / sd - 1))
    return coef_err, scale_err


def timed_fit(scm, data, steps, batch_size, repeats):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = scm.fit(data, key=jax.random.key(0), steps=steps, batch_size=batch_size, progress=False)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192, 16384, 65536, 262144])
    ap.add_argument("--steps", type=int, nargs="+", default=[250, 500, 1000, 2000, 4000])
    ap.add_argument("--nonlinear-sizes", type=int, nargs="+", default=[16384],
                    help="N for the non-linear mechanisms (each runs an 8,000-step full-batch fit)")
    ap.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS), choices=list(MECHANISMS))
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args(argv)
    print(conditions())
    print(f"tolerance (linear): coefficients within {TOL_COEF:g} of OLS, noise scales within {TOL_SCALE:g} relative")
    print("auto rule today: full batch up to %d units, then minibatches of %d with the last 1/%d of "
          "the steps full-batch" % (scm_fit.AUTO_FULL_BATCH, scm_fit.AUTO_BATCH,
                                    scm_fit.AUTO_FULL_TAIL))
    for name in args.mechanisms:
        linear = name == "linear"
        scm = cf.scm.SCM(PARENTS, {v: MECHANISMS[name]() for v in PARENTS})
        print(f"\n{name}: N, then per rule " + ("the fewest steps reaching the tolerance and the fit's time "
              "(or the gap left at the most steps)" if linear else "at 2,000 steps: time, mean NLL minus "
              "the long fit's (training units, held-out units)"))
        faster_from = None
        for n in (args.sizes if linear else args.nonlinear_sizes):
            if linear:
                faster_from = linear_row(scm, n, args, faster_from)
            else:
                nonlinear_row(scm, n, args)
        if linear:
            print(f"  {name}: mini+full reaches the tolerance sooner than full from N = "
                  + (f"{faster_from:,}" if faster_from else "(never in these sizes)"))


def fit_rule(scm, data, steps, rule, repeats):
    """``fit`` under one batch rule (``mini+full`` forced below the auto threshold too)."""
    batch = RULES[rule]
    if rule == "mini+full" and len(next(iter(data.values()))) <= scm_fit.AUTO_FULL_BATCH:
        saved = scm_fit.AUTO_FULL_BATCH
        scm_fit.AUTO_FULL_BATCH = 0
        try:
            return timed_fit(scm, data, steps, batch, repeats)
        finally:
            scm_fit.AUTO_FULL_BATCH = saved
    return timed_fit(scm, data, steps, batch, repeats)


def linear_row(scm, n, args, faster_from):
    data = simulate(n, True)
    ref = ols(data)
    reached, cells = {}, []
    for rule in RULES:
        for steps in args.steps:
            (params, *_), t = fit_rule(scm, data, steps, rule, args.repeats)
            coef_err, scale_err = linear_gap(params, ref)
            if coef_err <= TOL_COEF and scale_err <= TOL_SCALE:
                reached[rule] = t
                cells.append(f"{rule} {steps} steps {t:6.2f} s")
                break
        else:
            cells.append(f"{rule} not reached at {args.steps[-1]} steps (coef {coef_err:.1e}, scale {scale_err:.1e})")
    ratio = ""
    if "full" in reached and "mini+full" in reached:
        ratio = f"  full / mini+full {reached['full'] / reached['mini+full']:.2f}x"
        if reached["mini+full"] < reached["full"] and faster_from is None:
            faster_from = n
    print(f"  N = {n:>7,}: " + " | ".join(cells) + ratio, flush=True)
    return faster_from


def nonlinear_row(scm, n, args):
    data = simulate(n + 5000, False)
    train = {v: x[:n] for v, x in data.items()}
    held = {v: x[n:] for v, x in data.items()}
    nll = lambda p, d: float(-scm.log_prob(p, d).mean())
    (long, *_), t_long = timed_fit(scm, train, 8000, None, 1)
    cells = [f"long fit {t_long:.0f} s"]
    for rule in RULES:
        (params, *_), t = fit_rule(scm, train, 2000, rule, args.repeats)
        cells.append(f"{rule} {t:6.2f} s, NLL {nll(params, train) - nll(long, train):+.1e} "
                     f"(held out {nll(params, held) - nll(long, held):+.1e})")
    t0 = time.perf_counter()
    auto = scm.fit(train, key=jax.random.key(0), progress=False)  # every default: steps="auto"
    t = time.perf_counter() - t0
    cells.append(f"defaults (steps='auto', {auto.info.rounds} rounds, {auto.info.steps} steps) {t:6.2f} s, "
                 f"NLL {nll(auto.params, train) - nll(long, train):+.1e} "
                 f"(held out {nll(auto.params, held) - nll(long, held):+.1e})")
    print(f"  N = {n:>7,}: " + " | ".join(cells), flush=True)

if __name__ == "__main__":
    main()
