"""Reference counterfactual generators for one fixed linear-Gaussian SCM.

The graph is X0 -> X1 -> X2 -> X4 and X0 -> X3 -> X4 with additive Gaussian noise.
Sixteen interventions are applied to every unit: do(X1 = v) for eight constant values
and do(X3 = X3 + s) for eight shifts. Counterfactuals follow abduction-action-prediction
and are returned by the checking closed form, DoWhy and ChiRho as a float32 array of shape
(16, N, 5), with the columns X0..X4. Provided: a closed form in broadcast numpy (for checking),
the same closed form written in place into preallocated ``{node: (16, N)}`` arrays (the fast
numpy reference), DoWhy's ``gcm`` module, and ChiRho's multi-world counterfactual handler on
pyro.

Run ``python -m experiments.benchmarks.scm_references`` for a self-check that
compares the baselines against the closed form and prints their wall times.
"""

from __future__ import annotations

import argparse
import statistics
import time

import networkx as nx
import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import torch
from chirho.counterfactual.handlers import MultiWorldCounterfactual
from chirho.indexed.ops import IndexSet, gather
from chirho.interventional.handlers import do
from dowhy import gcm

NODES = ("X0", "X1", "X2", "X3", "X4")
EDGES = (("X0", "X1"), ("X1", "X2"), ("X2", "X4"), ("X0", "X3"), ("X3", "X4"))
# Linear coefficients of the mechanisms and the noise scales s = (s0, ..., s4).
COEFS = {"a1": 0.8, "b2": -1.2, "c3": 0.5, "d2": 0.7, "d3": 1.3, "s": (1.0, 0.5, 0.7, 0.9, 0.3)}
# do(X1 = v) for k = 0..7, then do(X3 = X3 + s) for k = 8..15.
DO_X1_VALUES = np.linspace(-2, 2, 8, dtype=np.float32)
X3_SHIFTS = np.linspace(-1, 1, 8, dtype=np.float32)
K = len(DO_X1_VALUES) + len(X3_SHIFTS)


def simulate(n: int, seed: int) -> dict[str, np.ndarray]:
    """Draw ``n`` units from the SCM; returns float32 arrays of shape (n,) keyed X0..X4."""
    rng = np.random.default_rng(seed)
    c = COEFS
    u = rng.standard_normal((5, n), dtype=np.float32) * np.asarray(c["s"], np.float32)[:, None]
    x0 = u[0]
    x1 = c["a1"] * x0 + u[1]
    x2 = c["b2"] * x1 + u[2]
    x3 = c["c3"] * x0 + u[3]
    x4 = c["d2"] * x2 + c["d3"] * x3 + u[4]
    return dict(zip(NODES, (x0, x1, x2, x3, x4)))


def residuals(data: dict[str, np.ndarray], coefs: dict = COEFS) -> dict[str, np.ndarray]:
    """Abduction: the noise of each node, its value minus the linear mean given its parents."""
    c = coefs
    return {
        "U0": data["X0"],
        "U1": data["X1"] - c["a1"] * data["X0"],
        "U2": data["X2"] - c["b2"] * data["X1"],
        "U3": data["X3"] - c["c3"] * data["X0"],
        "U4": data["X4"] - c["d2"] * data["X2"] - c["d3"] * data["X3"],
    }


def estimate_coefs(data: dict[str, np.ndarray]) -> dict:
    """Re-estimate the linear coefficients by least squares with an intercept, as a regressor would.

    The intercepts are dropped: with residuals kept fixed they cancel in every counterfactual.
    """

    def slopes(target: str, parents: tuple[str, ...]) -> np.ndarray:
        design = np.column_stack([np.ones_like(data[target], np.float64)] + [data[p] for p in parents])
        solution, *_ = np.linalg.lstsq(design, data[target].astype(np.float64), rcond=None)
        return solution[1:].tolist()

    (a1,), (b2,), (c3,) = slopes("X1", ("X0",)), slopes("X2", ("X1",)), slopes("X3", ("X0",))
    d2, d3 = slopes("X4", ("X2", "X3"))
    return {**COEFS, "a1": a1, "b2": b2, "c3": c3, "d2": d2, "d3": d3}


def closed_form(data: dict[str, np.ndarray], coefs: dict = COEFS) -> np.ndarray:
    """All 16 counterfactuals in closed form, broadcasting over the intervention axis; (16, N, 5) float32.

    Written for checking, not speed: it builds (K, N) temporaries for every expression and
    stacks the nodes into the interleaved (K, N, 5) layout that DoWhy and ChiRho return. The
    fast numpy form is :func:`closed_form_into`.
    """
    c = coefs
    u = residuals(data, coefs)
    n_do = len(DO_X1_VALUES)
    # Per-intervention actions, shape (K, 1): which rows set X1 and to what, which shift X3 and by how much.
    do_x1 = (np.arange(K) < n_do)[:, None]
    x1_value = np.concatenate([DO_X1_VALUES, np.zeros(len(X3_SHIFTS), np.float32)])[:, None]
    do_x3 = ~do_x1
    x3_shift = np.concatenate([np.zeros(n_do, np.float32), X3_SHIFTS])[:, None]

    x0 = np.broadcast_to(u["U0"], (K, len(u["U0"])))
    x1 = np.where(do_x1, x1_value, c["a1"] * x0 + u["U1"])
    x2 = c["b2"] * x1 + u["U2"]
    x3 = np.where(do_x3, data["X3"] + x3_shift, c["c3"] * x0 + u["U3"])
    x4 = c["d2"] * x2 + c["d3"] * x3 + u["U4"]
    return np.stack([x0, x1, x2, x3, x4], axis=-1).astype(np.float32, copy=False)


def closed_form_into(data: dict[str, np.ndarray], out: dict[str, np.ndarray],
                     coefs: dict = COEFS) -> dict[str, np.ndarray]:
    """All 16 counterfactuals written in place into ``out``: ``{node: (16, N)}`` float32.

    The numpy form a careful user would write for speed: the structural equations evaluated
    with ``out=`` ufuncs straight into one preallocated (K, N) array per node (cfjax's own
    layout), rows 0..7 for do(X1 = v) and 8..15 for do(X3 := X3 + s); only N-vector
    temporaries (the abducted noise), no (K, N) temporaries, no interleaved stack. Nodes that
    are not descendants of the intervened node are copies of their observed values, as in
    cfjax. Returns ``out``.
    """
    c = coefs
    x0, x1, x2, x3, x4 = (out[v] for v in NODES)
    obs = [data[v] for v in NODES]
    u = residuals(data, coefs)
    a, b = slice(0, len(DO_X1_VALUES)), slice(len(DO_X1_VALUES), K)
    np.copyto(x0, obs[0])
    # do(X1 = v): X1 set, X2 and X4 re-predicted, X3 observed.
    np.copyto(x1[a], DO_X1_VALUES[:, None])
    np.multiply(x1[a], c["b2"], out=x2[a])
    np.add(x2[a], u["U2"], out=x2[a])
    np.copyto(x3[a], obs[3])
    np.multiply(x2[a], c["d2"], out=x4[a])
    np.add(x4[a], c["d3"] * obs[3] + u["U4"], out=x4[a])
    # do(X3 := X3 + s): X3 shifted, X4 re-predicted, X1 and X2 observed.
    np.copyto(x1[b], obs[1])
    np.copyto(x2[b], obs[2])
    np.add(obs[3], X3_SHIFTS[:, None], out=x3[b])
    np.multiply(x3[b], c["d3"], out=x4[b])
    np.add(x4[b], c["d2"] * obs[2] + u["U4"], out=x4[b])
    return out


def empty_outputs(n: int, layout: str = "kn") -> dict[str, np.ndarray]:
    """One uninitialised float32 array per node: ``(16, n)`` (``layout="kn"``) or ``(n, 16)``
    (``"nk"``, units first: cfjax's array contract)."""
    shape = (K, n) if layout == "kn" else (n, K)
    return {v: np.empty(shape, np.float32) for v in NODES}


def closed_form_into_units_first(data: dict[str, np.ndarray], out: dict[str, np.ndarray],
                                 coefs: dict = COEFS) -> dict[str, np.ndarray]:
    """:func:`closed_form_into` writing ``out = {node: (N, 16)}`` (units first, the layout
    cfjax returns): the same ufuncs into the transposed views, each intervention a column."""
    closed_form_into(data, {v: o.T for v, o in out.items()}, coefs)
    return out


def fit_dowhy(data: dict[str, np.ndarray]) -> gcm.InvertibleStructuralCausalModel:
    """Build the invertible SCM on the known graph and fit linear additive-noise mechanisms."""
    scm = gcm.InvertibleStructuralCausalModel(nx.DiGraph(list(EDGES)))
    scm.set_causal_mechanism("X0", gcm.EmpiricalDistribution())
    for node in NODES[1:]:
        scm.set_causal_mechanism(node, gcm.AdditiveNoiseModel(gcm.ml.create_linear_regressor()))
    gcm.fit(scm, pd.DataFrame(data))
    return scm


def dowhy_counterfactuals(scm: gcm.InvertibleStructuralCausalModel, data: dict[str, np.ndarray]) -> np.ndarray:
    """One ``gcm.counterfactual_samples`` call per intervention on a fitted SCM; (16, N, 5) float32."""
    observed = pd.DataFrame(data)
    interventions = [{"X1": lambda x, v=v: v} for v in DO_X1_VALUES]
    interventions += [{"X3": lambda x, s=s: x + s} for s in X3_SHIFTS]
    worlds = [
        gcm.counterfactual_samples(scm, intervention, observed_data=observed)[list(NODES)].to_numpy(np.float32)
        for intervention in interventions
    ]
    return np.stack(worlds)


def _pyro_scm(coefs: dict, n: int) -> dict[str, torch.Tensor]:
    """The SCM as a pyro program: Gaussian noise sites U0..U4 and deterministic nodes X0..X4."""
    c = coefs
    with pyro.plate("units", n, dim=-1):
        u = [pyro.sample(f"U{j}", dist.Normal(0.0, float(s))) for j, s in enumerate(c["s"])]
        x0 = pyro.deterministic("X0", u[0], event_dim=0)
        x1 = pyro.deterministic("X1", c["a1"] * x0 + u[1], event_dim=0)
        x2 = pyro.deterministic("X2", c["b2"] * x1 + u[2], event_dim=0)
        x3 = pyro.deterministic("X3", c["c3"] * x0 + u[3], event_dim=0)
        x4 = pyro.deterministic("X4", c["d2"] * x2 + c["d3"] * x3 + u[4], event_dim=0)
    return dict(zip(NODES, (x0, x1, x2, x3, x4)))


def _chirho_pass(noise: dict[str, torch.Tensor], node: str, acts: tuple, n: int) -> torch.Tensor:
    """Run the SCM once with all of ``acts`` on ``node`` as parallel worlds; (len(acts), N, 5)."""
    # The unit plate sits at dim -1, so the world index of ``node`` is placed at dim -2.
    with MultiWorldCounterfactual(first_available_dim=-2), do(actions={node: acts}):
        values = pyro.condition(_pyro_scm, data=noise)(COEFS, n)
        worlds = IndexSet(**{node: set(range(1, len(acts) + 1))})
        columns = [gather(values[name], worlds).expand(len(acts), n) for name in NODES]
    return torch.stack(columns, dim=-1)


def chirho_counterfactuals(data: dict[str, np.ndarray]) -> np.ndarray:
    """ChiRho counterfactuals with noise abducted as residuals, one batched pass per intervened node.

    Returns a (16, N, 5) float32 array; the computation runs in float32 torch on CPU.
    """
    noise = {name: torch.from_numpy(np.ascontiguousarray(u)) for name, u in residuals(data).items()}
    n = len(data["X0"])
    do_x1 = tuple(torch.tensor(v) for v in DO_X1_VALUES)
    shift_x3 = tuple(lambda x, s=float(s): x + s for s in X3_SHIFTS)
    with torch.no_grad():
        out = torch.cat([_chirho_pass(noise, "X1", do_x1, n), _chirho_pass(noise, "X3", shift_x3, n)])
    return out.numpy()


def _median_time(fn, repeats: int) -> float:
    """Median wall time in seconds of ``repeats`` calls of ``fn`` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(n: int = 10_000, repeats: int = 5, seed: int = 0) -> None:
    """Check every baseline against the closed form at ``n`` units and print wall times."""
    gcm.config.disable_progress_bars()
    data = simulate(n, seed)
    reference = closed_form(data)
    n_do = len(DO_X1_VALUES)
    assert reference.shape == (K, n, 5) and reference.dtype == np.float32
    assert np.array_equal(reference[:, :, 0], np.broadcast_to(data["X0"], (K, n)))
    assert np.array_equal(reference[:n_do, :, 1], np.broadcast_to(DO_X1_VALUES[:, None], (n_do, n)))
    assert np.array_equal(reference[n_do:, :, 3], data["X3"] + X3_SHIFTS[:, None])

    scm = fit_dowhy(data)
    # DoWhy regresses the coefficients, so it is compared with the closed form at the
    # least-squares estimates rather than at the true COEFS.
    baselines = {
        "dowhy": (closed_form(data, estimate_coefs(data)), lambda: dowhy_counterfactuals(scm, data), 1e-4),
        "chirho": (reference, lambda: chirho_counterfactuals(data), 1e-4),
    }
    print(f"N = {n}, K = {K}; wall time is the median of {repeats} runs after one warm-up run")
    print(f"{'closed_form':12s} {'(the reference)':32s} wall {_median_time(lambda: closed_form(data), repeats):.4f} s")
    for name, (expected, run, tol) in baselines.items():
        got = run()
        assert got.shape == (K, n, 5) and got.dtype == np.float32, (name, got.shape, got.dtype)
        err = float(np.max(np.abs(got - expected)))
        assert err <= tol, f"{name}: max abs error {err:.3g} exceeds {tol:g}"
        print(f"{name:12s} max abs err {err:.2e} (tol {tol:g})  wall {_median_time(run, repeats):.4f} s")
    dowhy_vs_true = float(np.max(np.abs(dowhy_counterfactuals(scm, data) - reference)))
    print(f"dowhy vs closed form at the true COEFS: max abs err {dowhy_vs_true:.2e} (coefficient estimation error)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="number of units")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per baseline")
    args = parser.parse_args()
    main(args.n, args.repeats)
