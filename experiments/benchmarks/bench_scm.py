"""Benchmark: counterfactuals of a 5-node linear-Gaussian SCM with cfjax, numpy closed forms,
ChiRho and DoWhy, side by side in one process.

Graph X0→X1→X2→X4, X0→X3→X4; K = 16 interventions per unit (8 values of do(X1), 8 shifts of
X3), every node returned, float32. cfjax abducts once and runs both groups of interventions in
one compiled program, timed through the eager public API (input validation included) and
inside a user's ``jax.jit`` (one dispatch, validation skipped on traced values); it returns
``{node: (N, K)}`` (units first, ``docs/contract.md``), freshly allocated on every call.

References:
- numpy closed form, fresh outputs: the structural equations written with ``out=`` ufuncs
  into one newly allocated (N, K) array per node (cfjax's layout and bytes, no temporaries) —
  the like-for-like floor for a function that returns new arrays; and the same into (K, N)
  arrays (intervention-major, the layout cfjax returned before its array contract, and
  numpy's easier one: each intervention a contiguous row);
- the same into reused outputs (allocated once, outside the timing): the arithmetic alone;
- numpy closed form, naive: broadcasting with (K, N) temporaries and an interleaved (K, N, 5)
  stack (the layout DoWhy and ChiRho return) — what a quick vectorised script does;
- ChiRho: one multi-world pass per intervened node with residual noise (torch, float32);
- DoWhy: one ``counterfactual_samples`` call per intervention (as its users do).

What bounds the fastest forms is also measured: allocating and first-touching the 5
float32 outputs alone (``np.empty`` + one write), XLA writing 5 fresh (N, K) and (K, N)
outputs from N-vectors, and cfjax under ``jax.jit`` returning only X4 (XLA drops the other nodes) — what
returning only the requested nodes would cost.

Every method is checked against the closed form first. Each time is the median of the warm
repeats; cfjax's first call (compilation included) is printed too, and each ratio
(method time / cfjax time; above 1: cfjax faster) both against warm cfjax and against cfjax's
first call. At 10^6 units the slow baselines run fewer times (printed).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

import cfjax as cf
from experiments.benchmarks import scm_references as refs
from experiments.benchmarks.timing import conditions, first_time, median_time

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
    """Abduction once and all 16 interventions (two groups) in one call: ``{node: (N, 16)}``."""
    shift = cf.scm.Shift(refs.X3_SHIFTS)  # do(X3 := X3 + delta), as DoWhy's and ChiRho's callables
    return scm.counterfactual(params, data, [{"X1": refs.DO_X1_VALUES}, {"X3": shift}])


def stacked(out):
    """``{node: (K, N)}`` as the baselines' ``(K, N, 5)`` layout (for checking only)."""
    return np.stack([np.asarray(out[v]) for v in refs.NODES], axis=-1)


def touch_outputs(n: int):
    """Allocate the 5 (N, K) float32 outputs and write each once: the floor of any method
    that returns fresh arrays."""
    out = refs.empty_outputs(n, "nk")
    for a in out.values():
        a.fill(1.0)
    return out


def run(n: int, repeats: int, slow_repeats: int, seed: int = 0) -> dict:
    data_np = refs.simulate(n, seed)
    data = {k: jnp.asarray(v) for k, v in data_np.items()}
    scm, params = cfjax_model()
    reference = refs.closed_form(data_np)
    reused, reused_kn = refs.empty_outputs(n, "nk"), refs.empty_outputs(n)

    # Timed functions: (label, function, repeats, compiled by JAX?).
    jitted = jax.jit(lambda p, d: cfjax_counterfactuals(scm, p, d))
    only_x4 = jax.jit(lambda p, d: cfjax_counterfactuals(scm, p, d)["X4"])
    xla_outputs = jax.jit(lambda x: {v: jnp.broadcast_to((x + i)[:, None], (n, refs.K))
                                     for i, v in enumerate(refs.NODES)})
    xla_outputs_kn = jax.jit(lambda x: {v: jnp.broadcast_to(x + i, (refs.K, n))
                                        for i, v in enumerate(refs.NODES)})
    dowhy_scm = refs.fit_dowhy(data_np)
    methods = [
        ("cfjax (eager API)", lambda: cfjax_counterfactuals(scm, params, data), repeats, True),
        ("cfjax under jax.jit", lambda: jitted(params, data), repeats, True),
        ("numpy in place, fresh outputs", lambda: refs.closed_form_into_units_first(data_np, refs.empty_outputs(n, "nk")),
         repeats, False),
        ("numpy in place, reused outputs", lambda: refs.closed_form_into_units_first(data_np, reused), repeats, False),
        ("numpy in place, fresh (K,N)", lambda: refs.closed_form_into(data_np, refs.empty_outputs(n)), repeats, False),
        ("numpy in place, reused (K,N)", lambda: refs.closed_form_into(data_np, reused_kn), repeats, False),
        ("numpy, naive (K,N,5)", lambda: refs.closed_form(data_np), repeats, False),
        ("ChiRho", lambda: refs.chirho_counterfactuals(data_np), slow_repeats, False),
        ("DoWhy", lambda: refs.dowhy_counterfactuals(dowhy_scm, data_np), slow_repeats, False),
    ]
    bounds = [
        ("numpy: allocate + first-touch 5 (N,K) outputs", lambda: touch_outputs(n), False),
        ("XLA: write 5 fresh (N,K) outputs", lambda: xla_outputs(data["X0"]), True),
        ("XLA: write 5 fresh (K,N) outputs", lambda: xla_outputs_kn(data["X0"]), True),
        ("cfjax under jit, only X4 returned", lambda: only_x4(params, data), True),
    ]

    # cfjax's first calls at these shapes (compilation included) before anything else runs them.
    firsts = {label: first_time(fn) for label, fn, _, compiled in methods if compiled}
    got = stacked({v: np.asarray(x).T for v, x in cfjax_counterfactuals(scm, params, data).items()})  # (N, K) -> (K, N)
    fast = stacked({v: x.T for v, x in refs.closed_form_into_units_first(data_np, refs.empty_outputs(n, "nk")).items()})
    errors = {
        "cfjax": np.max(np.abs(got - reference)),
        "numpy in place": np.max(np.abs(fast - reference)),
        "ChiRho": np.max(np.abs(refs.chirho_counterfactuals(data_np) - reference)),
        "DoWhy*": np.max(np.abs(refs.dowhy_counterfactuals(dowhy_scm, data_np)
                                - refs.closed_form(data_np, refs.estimate_coefs(data_np)))),
    }
    print(f"N = {n:,}, K = {refs.K}, 5 nodes, float32: warm median of {repeats} runs "
          f"({slow_repeats} for ChiRho and DoWhy)")
    print("  max |error| vs the closed form: " + ", ".join(f"{k} {float(v):.1e}" for k, v in errors.items())
          + "  (*DoWhy against the closed form at its own least-squares coefficients)")

    times = {}
    for label, fn, reps, _ in methods:
        times[label] = median_time(fn, reps, warmup=1)
        firsts.setdefault(label, times[label])  # nothing to compile: the first call is a warm one
    base, base_first = times["cfjax (eager API)"], firsts["cfjax (eager API)"]
    jit_base = times["cfjax under jax.jit"]
    print("  time ÷ cfjax's: above 1, cfjax is faster; '1st call' is cfjax's first call at this N "
          "(compilation included), set against the others' warm times")
    print(f"  {'method':30s} {'warm':>10s} {'1st call':>10s}   {'÷ cfjax':>8s} {'÷ cfjax jit':>11s} "
          f"{'÷ cfjax 1st call':>16s}")
    for label, *_ in methods:
        t = times[label]
        first = f"{firsts[label] * 1e3:8.1f}ms" if firsts[label] != t else f"{'':10s}"
        print(f"  {label:30s} {t * 1e3:8.2f}ms {first}   {t / base:8.3g} {t / jit_base:11.3g} "
              f"{t / base_first:16.3g}")
    print("  what bounds the fastest forms (warm medians):")
    for label, fn, compiled in bounds:
        t = median_time(fn, repeats)
        times[label] = t
        print(f"  {label:48s} {t * 1e3:8.2f}ms   {t / base:6.2f} x cfjax")
    floor = times["numpy in place, fresh outputs"]
    print(f"  summary: cfjax takes {base / floor:.2f}x (eager API) and {jit_base / floor:.2f}x (under "
          f"jit) the time of the numpy closed form into fresh outputs, {base / times['numpy in place, reused outputs']:.2f}x "
          f"and {jit_base / times['numpy in place, reused outputs']:.2f}x that into reused buffers.")
    print(f"  Allocating + first-touching the 5 (N, K) outputs alone takes "
          f"{times['numpy: allocate + first-touch 5 (N,K) outputs'] / floor:.0%} of the fresh-output "
          f"numpy time; XLA writing 5 fresh (N, K) outputs alone takes "
          f"{times['XLA: write 5 fresh (N,K) outputs'] / jit_base:.0%} of cfjax's time under jit "
          f"({times['XLA: write 5 fresh (K,N) outputs'] / jit_base:.0%} for (K, N)); "
          f"returning only X4 would cut cfjax under jit to {times['cfjax under jit, only X4 returned'] / jit_base:.0%}.")
    return times


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=50, help="warm runs of the fast methods (a third at N > 100,000)")
    ap.add_argument("--slow-repeats", type=int, nargs=2, default=[5, 2], metavar=("SMALL", "LARGE"),
                    help="warm runs of ChiRho and DoWhy at N <= 100,000 and above")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch threads for ChiRho (1 is its fastest and stablest setting here)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    refs.gcm.config.disable_progress_bars()
    print(conditions() + f"; torch {torch.__version__} with {args.torch_threads} thread(s)")
    start = time.perf_counter()
    out = {}
    for n in args.sizes:
        small = n <= 100_000
        out[n] = run(n, args.repeats if small else max(3, args.repeats // 3),
                     args.slow_repeats[0] if small else args.slow_repeats[1])
    print(f"run time {time.perf_counter() - start:.0f} s")
    return out


if __name__ == "__main__":
    main()
