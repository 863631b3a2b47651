"""Benchmarked confounding budgets (definitions §3.9): how strong an unmeasured confounder would
be were it "like" an observed variable, in the units of the budget ``p_max``.

As sensemakr (Cinelli & Hazlett 2020) benchmarks omitted-variable bias against observed
covariates, a yardstick Z (the sensitive attribute, or a feature that is a parent of other
features) gives a confounder U that explains k times as much of each of Z's children's variance
as Z does: from Z's penalised partial R² ``r_j`` in child j's equation, U's share of that
equation's error variance is ``ρ²_j = k r_j / (1 − r_j)``, and a U that acts on every child of Z
correlates their errors by the one-factor matrix ``P = diag(1 − ρ²) + s sᵀ``, ``s_j = ±ρ_j``
(signs unknown). Its budget reading is ``p_max = max_{j<k} |P_jk|``, and its CFU, the worst over
the sign patterns, is what such a confounder would do to the scored predictor. Pairs of features
that the graph leaves unconnected have their error correlation identified from Model A's
residuals: a second kind of benchmark.

Data flow: :func:`benchmark_correlations` (traceable: partial R², ρ², ``|P|``) →
:func:`benchmark_cfu` (traceable: Model B and CFU at each benchmark, worst sign pattern) →
:func:`benchmarks` (host side: validation, reasons, identified pairs, a :class:`Benchmarks`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cfjax import _checks, platform
from cfjax._results import headline
from cfjax._results import strict_plain as plain
from cfjax.sensitivity.cfu import cfu_at_zero_correlation, cfu_of
from cfjax.sensitivity.fitting import FairModel
from cfjax.sensitivity.linear import _exponents, _model_b, _unpenalised
from cfjax.sensitivity.problem import FairnessGraph

__all__ = [
    "yardsticks",
    "yardstick_children",
    "identified_pairs",
    "partial_r2",
    "benchmark_correlations",
    "benchmark_cfu",
    "residual_correlations",
    "Benchmarks",
    "benchmarks",
]


# ----------------------------------------------------------------------------- static structure
def yardsticks(graph: FairnessGraph) -> tuple[str, ...]:
    """The variables a confounder is benchmarked against: the sensitive attribute first, then
    every feature that is a parent of some feature, in the graph's order.

    Example:
      >>> yardsticks(FairnessGraph({"G": ["A"], "L": ["A", "G"]}))
      ('A', 'G')
    """
    parents = {p for ps in graph.parents for p in ps}
    return (graph.sensitive,) + tuple(v for v in graph.features if v in parents)


def yardstick_children(graph: FairnessGraph) -> tuple[tuple[int, ...], ...]:
    """For each yardstick (:func:`yardsticks`), the indices of the features it is a parent of."""
    return tuple(
        tuple(j for j, ps in enumerate(graph.parents) if z in ps) for z in yardsticks(graph)
    )


def _ancestors(graph: FairnessGraph) -> list[set[str]]:
    """Each feature's ancestors among the features (the sensitive attribute left out)."""
    out: dict[str, set[str]] = {}
    for v, ps in zip(graph.features, graph.parents):  # topological order
        out[v] = set()
        for p in ps:
            if p != graph.sensitive:
                out[v] |= {p} | out[p]
    return [out[v] for v in graph.features]


def identified_pairs(graph: FairnessGraph) -> tuple[tuple[int, int], ...]:
    """Pairs ``(j, k)``, ``j < k``, of features neither of which is an ancestor of the other:
    their error correlation is identified by Model A's residuals (definitions §3.9).

    Example:
      >>> identified_pairs(FairnessGraph({"X1": ["A"], "X2": ["A"], "X3": ["X1"]}))
      ((0, 1), (1, 2))
    """
    anc = _ancestors(graph)
    f = graph.features
    return tuple(
        (j, k)
        for j, k in itertools.combinations(range(graph.m), 2)
        if f[j] not in anc[k] and f[k] not in anc[j]
    )


def _kept_columns(
    graph: FairnessGraph, degrees: tuple[int, ...], q: int, j: int, z: str
) -> np.ndarray:
    """The columns of feature j's embedding whose monomial does not involve the yardstick ``z``
    (a zero exponent on each of its variables; A enters with its ``q`` code columns), in the
    embedding's order (:func:`~cfjax.sensitivity.polynomial_features`)."""
    slots: list[int] = []
    at = 0
    for p in graph.parents[j]:
        width = q if p == graph.sensitive else 1
        if p == z:
            slots.extend(range(at, at + width))
        at += width
    exps = _exponents(at, degrees[j])
    return np.flatnonzero(exps[:, np.asarray(slots, dtype=int)].sum(axis=1) == 0)


def _sign_patterns(m: int, children: tuple[int, ...]) -> np.ndarray:
    """The distinct sign patterns of a one-factor confounder on ``children``: ``(2^(c−1), m)``,
    the first child's sign fixed at +1 (``s`` and ``−s`` give the same ``s sᵀ``), +1 elsewhere;
    one all-ones row when there are fewer than two children."""
    rest = list(itertools.product((1.0, -1.0), repeat=max(len(children) - 1, 0)))
    out = np.ones((len(rest), m))
    for row, signs in zip(out, rest):
        row[list(children[1:])] = signs
    return out


# ----------------------------------------------------------------------------- traceable core
def _penalties(model: FairModel) -> tuple[float, ...]:
    """Each equation's ridge penalty (static: ``FairModel.lam`` is not traced)."""
    lam = model.lam
    return tuple(float(v) for v in lam) if isinstance(lam, tuple) else (float(lam),) * model.graph.m


def _ridge_sse(model: FairModel, j: int, cols: np.ndarray, lam: float) -> jax.Array:
    """Sum of squared residuals of feature j's ridge on the columns ``cols`` of the design's
    embeddings, with penalty ``lam`` on every coefficient (the intercept too, as Model A's
    first step); ``lam`` exactly 0: the minimum-norm least-squares fit (pseudo-inverse)."""
    d = model.design
    G = d.G[cols[:, None], cols[None, :]]
    c = d.C[cols, j]
    if lam == 0.0:
        w = jnp.linalg.pinv(G, hermitian=True) @ c
    else:
        w = jnp.linalg.solve(G + lam * jnp.eye(cols.size, dtype=G.dtype), c)
    e = d.X[:, j] - d.F[:, cols] @ w
    return e @ e if d.weight is None else e @ (d.weight * e)


def partial_r2(model: FairModel) -> jax.Array:
    """Each yardstick's penalised partial R² in each of its children's equations, ``(V, m)``
    (V yardsticks, :func:`yardsticks`; NaN where yardstick v is not a parent of feature j).

    ``r_vj = 1 − SSE_full / SSE_reduced``: feature j's ridge on its whole embedding (Model A's
    degree for j and its λ, every coefficient penalised: Model A's first step, definitions §3.2)
    against the same ridge without the columns whose monomial involves the yardstick (a non-zero
    exponent on it, or on any of A's code columns). A value below 0, possible under a large λ,
    is read as 0. Traceable: static structure from ``model.graph``, ``model.degrees`` and
    ``model.lam``; the Grams and data from ``model.design``."""
    g, d = model.graph, model.design
    q = model.data.codes.shape[-1]
    start = np.cumsum((0,) + tuple(d.sizes))
    lams = _penalties(model)
    nan = jnp.full((), jnp.nan, d.X.dtype)
    rows = []
    for z, children in zip(yardsticks(g), yardstick_children(g)):
        row = [nan] * g.m
        for j in children:
            cols = np.arange(start[j], start[j + 1])
            kept = cols[_kept_columns(g, model.degrees, q, j, z)]
            full, reduced = _ridge_sse(model, j, cols, lams[j]), _ridge_sse(model, j, kept, lams[j])
            row[j] = jnp.maximum(1.0 - full / reduced, 0.0)
        rows.append(jnp.stack(row))
    return jnp.stack(rows)


def _check_k(k: Any) -> None:
    """``k``: a non-empty 1-d sequence of positive finite numbers (checked when concrete)."""
    if not all(map(_checks.is_concrete, jax.tree.leaves(k))):
        return
    try:
        arr = np.asarray(k, dtype=np.float64)
    except (TypeError, ValueError):
        _checks.fail("k", "a sequence of positive finite numbers", repr(k))
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or not np.all(arr > 0):
        _checks.fail("k", "a non-empty sequence of positive finite numbers", repr(k))


def benchmark_correlations(
    model: FairModel, k: Sequence[float] | jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The error correlation a confounder "k times as strong as each yardstick" would induce
    (definitions §3.9): ``(r2 (V, m), rho2 (V, K, m), P_abs (V, K, m, m))``.

    ``r2``: :func:`partial_r2` (NaN where yardstick v is not a parent of feature j);
    ``rho2 = k r2 / (1 − r2)``: the confounder's share of child j's error variance (NaN where
    yardstick v is not a parent of j, and where it would be 1 or more: such a confounder cannot
    exist); ``P_abs``: the magnitudes of the one-factor correlation
    ``P = diag(1 − ρ²) + s sᵀ``, ``|P_jk| = ρ_j ρ_k`` for two children of v, 0 for any other
    pair, unit diagonal; all NaN for a (v, k) where some child's ρ² is 1 or more. The signs of
    ``s`` are unknown: :func:`benchmark_cfu` takes the worst.

    Pure and traceable in the model's arrays (``jit``, and ``vmap`` over models whose arrays
    carry a leading batch axis, e.g. bootstrap refits); ``k`` may be traced too. A concrete
    ``k`` must be positive finite numbers (:class:`ValueError` naming ``k``).
    """
    _check_k(k)
    g = model.graph
    dtype = model.design.X.dtype
    k = jnp.asarray(k, dtype)
    r2 = partial_r2(model)
    is_child = np.zeros((len(yardsticks(g)), g.m), bool)
    for v, children in enumerate(yardstick_children(g)):
        is_child[v, list(children)] = True
    child = jnp.asarray(is_child)[:, None, :]  # (V, 1, m)
    raw = k[None, :, None] * (r2 / (1.0 - r2))[:, None, :]  # (V, K, m); NaN off the children
    ok = child & (raw < 1.0)
    rho2 = jnp.where(ok, raw, jnp.nan)
    infeasible = jnp.any(child & ~ok, axis=-1)  # (V, K)
    rho = jnp.where(ok, jnp.sqrt(jnp.where(ok, raw, 0.0)), 0.0)
    P = rho[..., :, None] * rho[..., None, :]
    P = jnp.where(jnp.eye(g.m, dtype=bool), jnp.ones((), dtype), P)
    return r2, rho2, jnp.where(infeasible[..., None, None], jnp.nan, P)


_NEWTON_STEPS = 30  # Model B's σ solve, as cfu()


def benchmark_cfu(model: FairModel, P_abs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """CFU at each benchmark correlation, the worst over the unknown signs:
    ``(values (V, K), P_worst (V, K, m, m))``.

    For yardstick v with children c, every distinct sign pattern of its one-factor confounder
    (``2^(c−1)``: ``s`` and ``−s`` give the same P; one, P itself, when c < 2) gives
    ``P = P_abs ⊙ s sᵀ``; Model B is fitted at each (as :func:`~cfjax.sensitivity.cfu`: the
    same λ and σ solve) and the scored predictor's CFU taken (:func:`~cfjax.sensitivity.cfu.cfu_of`,
    so :meth:`~cfjax.sensitivity.FairModel.scoring` chooses the predictor). ``values`` is the
    largest, ``P_worst`` its P; NaN where ``P_abs`` is (an infeasible benchmark). Traceable as
    :func:`benchmark_correlations`; the patterns are enumerated statically and vmapped over.
    """
    g, d = model.graph, model.design
    dtype = d.X.dtype
    shape = tuple(np.shape(P_abs))
    if len(shape) != 4 or shape[0] != len(yardsticks(g)) or shape[2:] != (g.m, g.m):
        _checks.fail(
            "P_abs",
            f"shape (V={len(yardsticks(g))}, K, {g.m}, {g.m}) from benchmark_correlations",
            f"shape {shape}",
        )
    unpenalised = _unpenalised(model.lam)
    lam = None if unpenalised else jnp.asarray(model.lam, dtype)
    eye = jnp.eye(g.m, dtype=dtype)

    def value(P):
        ok = jnp.all(jnp.isfinite(P))
        fit = _model_b(d, jnp.where(ok, P, eye), lam, None, _NEWTON_STEPS, unpenalised)
        return jnp.where(ok, cfu_of(model, fit), jnp.nan)

    # Every yardstick's patterns padded to the same count by repeating its first (a repeat does not
    # change a maximum), so that one vmap over (V, K, patterns) traces Model B and CFU once.
    patterns = [_sign_patterns(g.m, children) for children in yardstick_children(g)]
    most = max(len(p) for p in patterns)
    signs = np.stack(
        [np.concatenate([p, np.repeat(p[:1], most - len(p), axis=0)]) for p in patterns]
    )
    outer = jnp.asarray(signs[..., :, None] * signs[..., None, :], dtype)  # (V, S, m, m)
    Ps = P_abs[:, :, None] * outer[:, None]  # (V, K, S, m, m)
    V, K, S = Ps.shape[:3]
    cf = platform.map_runs(value, Ps.reshape(V * K * S, g.m, g.m)).reshape(V, K, S)
    best = jnp.argmax(cf, axis=-1)  # a NaN (a failed fit) wins, as in jnp.max
    worst = jnp.take_along_axis(Ps, best[:, :, None, None, None], axis=2)[:, :, 0]
    return jnp.max(cf, axis=-1), worst


def residual_correlations(model: FairModel) -> jax.Array:
    """The correlation of Model A's residuals for each :func:`identified_pairs` pair,
    ``(pairs,)``: for two features neither of which is an ancestor of the other, their error
    correlation as the data identify it (definitions §3.9). Traceable."""
    pairs = identified_pairs(model.graph)
    e = model.model_a.residuals
    weight = model.design.weight  # None, or each row's count (a bootstrap resample's rows)
    w = jnp.ones(e.shape[:1], e.dtype) if weight is None else weight
    e = e - (w @ e / jnp.sum(w))[None, :]
    scale = jnp.sqrt(w @ (e * e))
    if not pairs:
        return jnp.zeros((0,), e.dtype)
    j, k = (np.asarray(v) for v in zip(*pairs))
    return (w @ (e[:, j] * e[:, k])) / (scale[j] * scale[k])


# ----------------------------------------------------------------------------- host side
@struct.dataclass
class Benchmarks:
    """Benchmarked confounding budgets of one fitted model (definitions §3.9).

    Shapes: V yardsticks, K multiples k, m features. ``r2 (V, m)``: each yardstick's
    penalised partial R² in its children's equations (NaN elsewhere); ``rho2 (V, K, m)``: the
    confounder's share of each child's error variance, ``k r2 / (1 − r2)`` (NaN off the children
    and where 1 or more); ``P (V, K, m, m)``: the benchmark correlation with the worst signs;
    ``p_max (V, K)``: its budget reading ``max_{j<k} |P_jk|`` (0 for a yardstick with fewer than
    two children); ``cfu (V, K)``: the scored predictor's CFU there (NaN where infeasible);
    ``feasible (V, K)``; ``reasons``: per (v, k), why a benchmark is infeasible or induces no
    correlation ('' otherwise); ``pairs`` and ``pair_correlation``: features the graph leaves
    unconnected and the correlation of their Model A residuals (identified, signed);
    ``cfu_at_zero_correlation``: the floor of every CFU (P = I, definitions §3.5).
    """

    yardsticks: tuple[str, ...] = struct.field(pytree_node=False)
    k: tuple[float, ...] = struct.field(pytree_node=False)
    features: tuple[str, ...] = struct.field(pytree_node=False)
    predictor: str = struct.field(pytree_node=False)
    r2: jax.Array
    rho2: jax.Array
    P: jax.Array
    p_max: jax.Array
    cfu: jax.Array
    feasible: jax.Array
    reasons: tuple[tuple[str, ...], ...] = struct.field(pytree_node=False)
    pairs: tuple[tuple[str, str], ...] = struct.field(pytree_node=False)
    pair_correlation: jax.Array
    cfu_at_zero_correlation: float = struct.field(pytree_node=False)

    def _marked(self) -> list[tuple[int, int]]:
        """The (yardstick, multiple) index of every benchmark a figure marks, in :meth:`marks`' order."""
        p, ok = np.asarray(self.p_max), np.asarray(self.feasible)
        return [
            (v, i)
            for v in range(len(self.yardsticks))
            for i in range(len(self.k))
            if ok[v, i] and 0 < p[v, i] < 1
        ]

    def marks(self) -> dict[str, tuple[float, float]]:
        """The benchmarks a figure marks (``benchmarks=`` of :func:`~cfjax.sensitivity.plot_curve`
        and :func:`~cfjax.sensitivity.curve_caption`): ``"Z ×k"`` → (its budget, the CFU there),
        for every feasible benchmark that induces a correlation."""
        p, c = np.asarray(self.p_max), np.asarray(self.cfu)
        return {
            f"{self.yardsticks[v]} ×{self.k[i]:g}": (float(p[v, i]), float(c[v, i]))
            for v, i in self._marked()
        }

    def marked_correlations(self) -> dict[str, np.ndarray]:
        """The correlation matrix of each of :meth:`marks`' benchmarks, ``(m, m)`` (``benchmarks=``
        of :func:`~cfjax.sensitivity.plot_contour`)."""
        P = np.asarray(self.P)
        return {label: P[v, i] for label, (v, i) in zip(self.marks(), self._marked())}

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-serialisable plain Python (non-finite numbers as None)."""
        return {
            "yardsticks": list(self.yardsticks),
            "k": list(self.k),
            "features": list(self.features),
            "predictor": self.predictor,
            "r2": plain(self.r2),
            "rho2": plain(self.rho2),
            "P": plain(self.P),
            "p_max": plain(self.p_max),
            "cfu": plain(self.cfu),
            "feasible": np.asarray(self.feasible).tolist(),
            "reasons": [list(r) for r in self.reasons],
            "pairs": [list(p) for p in self.pairs],
            "pair_correlation": plain(self.pair_correlation),
            "cfu_at_zero_correlation": plain(self.cfu_at_zero_correlation),
        }

    def __repr__(self) -> str:
        p = np.asarray(self.p_max)
        reads = ", ".join(
            f"{z}: [" + ", ".join(headline(v) for v in p[i]) + "]"
            for i, z in enumerate(self.yardsticks)
        )
        return (
            f"Benchmarks(predictor={self.predictor!r}, k={list(self.k)}, p_max={{{reads}}}, "
            f"infeasible={int((~np.asarray(self.feasible)).sum())}, identified_pairs={len(self.pairs)})"
        )

    def table(self) -> str:
        """A plain-text table: one row per yardstick and k (p_max, CFU, or the reason), then one
        per identified pair."""
        p, c, ok = np.asarray(self.p_max), np.asarray(self.cfu), np.asarray(self.feasible)
        lines = [f"{'yardstick':<12} {'k':>6} {'p_max':>10} {'cfu':>12}  note"]
        for v, z in enumerate(self.yardsticks):
            for i, kk in enumerate(self.k):
                vals = f"{p[v, i]:>10.4g} {c[v, i]:>12.4g}" if ok[v, i] else f"{'-':>10} {'-':>12}"
                lines.append(f"{z:<12} {kk:>6.3g} {vals}  {self.reasons[v][i]}".rstrip())
        for (a, b), r in zip(self.pairs, np.asarray(self.pair_correlation)):
            lines.append(f"identified pair ({a}, {b}): residual correlation {r:.4g}")
        lines.append(f"CFU at zero correlation (the floor): {self.cfu_at_zero_correlation:.4g}")
        return "\n".join(lines)


_correlations = jax.jit(benchmark_correlations)
_cfu = jax.jit(benchmark_cfu)
_pairs = jax.jit(residual_correlations)


def _reasons(graph: FairnessGraph, k: tuple[float, ...], r2: np.ndarray, rho2: np.ndarray) -> tuple:
    """Per (yardstick, k): why the benchmark is infeasible, or that it induces no correlation."""
    out = []
    for v, (z, children) in enumerate(zip(yardsticks(graph), yardstick_children(graph))):
        row = []
        for i, kk in enumerate(k):
            bad = [j for j in children if not np.isfinite(rho2[v, i, j])]
            if bad:
                row.append(
                    "; ".join(
                        f"a confounder {kk:g} times as strong as {z!r} would explain all the error variance of "
                        f"{graph.features[j]!r} (rho2 = k r2 / (1 - r2) = {kk * r2[v, j] / (1 - r2[v, j]):.4g} >= 1 at r2 = "
                        f"{r2[v, j]:.4g}): no such confounder exists"
                        for j in bad
                    )
                )
            elif len(children) < 2:
                what = (
                    f"one feature ({graph.features[children[0]]!r})" if children else "no feature"
                )
                row.append(
                    f"{z!r} causes {what}: a confounder like it correlates no pair of errors (P = I, "
                    "p_max = 0)"
                )
            else:
                row.append("")
        out.append(tuple(row))
    return tuple(out)


def benchmarks(model: FairModel, k: tuple[float, ...] = (1.0, 2.0, 3.0)) -> Benchmarks:
    """Benchmarked confounding budgets (definitions §3.9): for each yardstick (:func:`yardsticks`)
    and each multiple k, the error correlation of a confounder k times as strong as the
    yardstick (:func:`benchmark_correlations`), its budget reading ``p_max`` and the CFU it
    would cause, the worst over its unknown signs (:func:`benchmark_cfu`); and the identified
    correlation of every pair of features the graph leaves unconnected
    (:func:`residual_correlations`). CFU is the scored predictor's
    (:meth:`~cfjax.sensitivity.FairModel.scoring`).

    Args:
      model: a fitted :class:`~cfjax.sensitivity.FairModel`.
      k: the multiples, positive finite numbers.

    Returns:
      :class:`Benchmarks`. An infeasible benchmark (some child's ρ² ≥ 1) is NaN with its reason.

    Example::

        b = S.benchmarks(model, k=(1, 2))
        print(b.table())   # p_max and CFU per yardstick and k
    """
    if not isinstance(model, FairModel):
        _checks.fail("model", "a FairModel from fit", type(model).__name__)
    _check_k(k)
    k = tuple(float(v) for v in np.asarray(k, np.float64))
    dtype = model.design.X.dtype
    r2, rho2, P_abs = _correlations(model, jnp.asarray(k, dtype))
    values, P = _cfu(model, P_abs)
    g = model.graph
    feasible = np.all(np.isfinite(np.asarray(P_abs)), axis=(-2, -1))
    Pn = np.asarray(P)
    off = ~np.eye(g.m, dtype=bool)
    p_max = np.where(feasible, np.max(np.where(off, np.abs(Pn), 0.0), axis=(-2, -1)), np.nan)
    return Benchmarks(
        yardsticks(g),
        k,
        g.features,
        model.scored,
        r2,
        rho2,
        P,
        jnp.asarray(p_max, dtype),
        values,
        jnp.asarray(feasible),
        _reasons(g, k, np.asarray(r2), np.asarray(rho2)),
        tuple((g.features[a], g.features[b]) for a, b in identified_pairs(g)),
        _pairs(model),
        cfu_at_zero_correlation(model),
    )
