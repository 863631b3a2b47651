"""Benchmark: counterfactuals of a 5-node linear-Gaussian SCM with cfjax, DoWhy, ChiRho and a
vectorised numpy closed form, in one process.

Graph X0→X1→X2→X4, X0→X3→X4; 16 interventions per unit (8 values of do(X1), 8 shifts of
X3), all 5 nodes returned, float32. Every method is warmed up and timed as the median of
several runs; DoWhy makes one ``counterfactual_samples`` call per intervention (as its users
do), ChiRho runs one multi-world pass per intervened node with residual noise, cfjax abducts
once and runs both groups of interventions in one vmapped program, timed both through the
eager public API (input validation included) and inside a user's ``jax.jit`` (one dispatch,
validation skipped on traced values). cfjax returns its native ``{node: (K, N)}``; the others
their ``(K, N, 5)`` array. All are checked against the closed form first. Ratios are (other
method time) / (cfjax time): above 1 means cfjax is faster.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import torch

import cfjax as cf
from experiments.benchmarks.timing import median_time
from experiments.benchmarks import scm_references as refs

PARENTS = {"X0": [], "X1": ["X0"], "X2": ["X1"], "X3": ["X0"], "X4": ["X2", "X3"]}


def cfjax_model():
    c = refs.COEFS
    s = c["s"]
    coefs = {"X0": ([], s[0]), "X1": ([c["a1"]], s[1]), "X2": ([c["b2"]], s[2]),
             "X3": ([c["c3"]], s[3]), "X4": ([c["d2"], c["d3"]], s[4])}
    scm = cf.scm.SCM(PARENTS, {v: cf.scm.LocationScale() for v in PARENTS})
    params = {v: cf.scm.linear_gaussian_params(w, 0.0, sd) for v, (w, sd) in coefs.items()}
    return scm, params


def cfjax_counterfactuals(scm, params, data):
    """Abduction once and all 16 interventions (two groups) in one call: ``{node: (16, N)}``."""
    shift = cf.scm.Shift(refs.X3_SHIFTS)  # do(X3 := X3 + delta), as DoWhy's and ChiRho's callables
    return scm.counterfactual(params, data, [{"X1": refs.DO_X1_VALUES}, {"X3": shift}])


def stacked(out):
    """cfjax's ``{node: (K, N)}`` as the baselines' ``(K, N, 5)`` layout (for checking only)."""
    return np.stack([np.asarray(out[v]) for v in refs.NODES], axis=-1)


def run(n: int, repeats: int, dowhy_runs: int, seed: int = 0) -> dict:
    data_np = refs.simulate(n, seed)
    data = {k: jnp.asarray(v) for k, v in data_np.items()}
    scm, params = cfjax_model()
    reference = refs.closed_form(data_np)
    got = stacked(cfjax_counterfactuals(scm, params, data))
    jitted = jax.jit(lambda p, d: cfjax_counterfactuals(scm, p, d))
    err = float(np.max(np.abs(got - reference)))
    chirho_err = float(np.max(np.abs(refs.chirho_counterfactuals(data_np) - reference)))
    dowhy_scm = refs.fit_dowhy(data_np)
    dowhy_err = float(np.max(np.abs(refs.dowhy_counterfactuals(dowhy_scm, data_np)
                                    - refs.closed_form(data_np, refs.estimate_coefs(data_np)))))
    print(f"N = {n}: max |error| vs closed form: cfjax {err:.1e}, ChiRho {chirho_err:.1e}, "
          f"DoWhy {dowhy_err:.1e} (DoWhy against its own least-squares coefficients)")
    times = {
        "cfjax": median_time(lambda: cfjax_counterfactuals(scm, params, data), repeats),
        "cfjax under jit": median_time(lambda: jitted(params, data), repeats),
        "numpy closed form": median_time(lambda: refs.closed_form(data_np), repeats),
        "ChiRho": median_time(lambda: refs.chirho_counterfactuals(data_np), repeats),
        "DoWhy": median_time(lambda: refs.dowhy_counterfactuals(dowhy_scm, data_np), dowhy_runs),
    }
    for name, t in times.items():
        ratio = "" if name.startswith("cfjax") else (
            f"   {t / times['cfjax']:7.2f}x cfjax (eager API), "
            f"{t / times['cfjax under jit']:7.2f}x cfjax under jit")
        print(f"  {name:18s} {t * 1e3:9.2f} ms{ratio}")
    return times


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch threads for ChiRho (1 is its fastest and stablest setting here)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    refs.gcm.config.disable_progress_bars()
    out = {}
    for n in args.sizes:
        small = n <= 100_000
        out[n] = run(n, args.repeats if small else 3, 5 if small else 2)
    return out


if __name__ == "__main__":
    main()
