"""One resample of the bootstrap (:func:`~cfjax.sensitivity.bootstrap`; paper 001, definitions
§3): the analysis refitted on a resample of the units, and the program that computes its
numbers, traceable so that :mod:`cfjax.sensitivity.bootstrap` vmaps it over resamples.

Each resample refits the whole analysis on its units with every choice fixed at the full
data's (:func:`refit`: Model A's degrees and λ, the fair predictor's and the baselines' degree
and λ; no cross-validation). Its units are counted over the data's distinct rows ``(A, x)``
(as :func:`~cfjax.sensitivity.problem.distinct_units` finds them): each row weighted by how
many of its units the resample drew, its target their mean, so that the Gram matrices, the
ridge fits and every CFU are weighted sums over the rows — the same numbers as reading the
drawn units one by one, at the cost of the rows (the NHS survey's 209,112 units hold 39,373
rows, the law school's 21,791 hold 1,820). Then, in the same compiled program:

- the worst-case CFU at each budget, by a *local search* from the full data's maximisers: the
  polish's geometry of :func:`~cfjax.sensitivity.worst_case` (projected gradient ascent in P
  along the boundary of the usable set, a step accepted only when it raises CFU, its size
  doubled when accepted and quartered when refused), at most ``steps`` steps from each of three
  starts: the full data's worst P at that budget and the neighbouring budgets' worst P projected
  into it; the best start wins, and a budget's value is never below a smaller budget's (the
  budgets are nested). It is not a global search per resample: a resample whose worst case moved
  to another local maximum is under-estimated (the interval is then that of the full data's
  maxima, followed locally);
- the CFU at the benchmark correlations (:mod:`cfjax.sensitivity.benchmarks`: each yardstick
  variable's observed partial correlations, times each multiple) and the budgets they imply;
- the inverse budget for each level: the smallest budget whose worst case reaches it, by
  bisection between the two grid budgets that bracket it (each probe a local search from the
  bracket's answers), so to within ``resolution``; a level not reached within the largest
  budget is +inf (counted, not dropped).

:func:`resample_analysis` runs that program on one resample.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks, platform
from cfjax.sensitivity import ridge
from cfjax.sensitivity.cfu import cfu_of
from cfjax.sensitivity.correlation import check_budget, correlation_margin
from cfjax.sensitivity.fitting import PREDICTORS, FairModel, embeddings, predictor_inputs
from cfjax.sensitivity.linear import (
    ModelA,
    _model_b,
    _start_log_sigma,
    _unpenalised,
    design,
    fit_model_a,
)
from cfjax.sensitivity.problem import FairnessData, _distinct_rows
from cfjax.sensitivity.projection import _along_boundary, _project_usable
from cfjax.sensitivity.search_config import SearchConfig

__all__ = ["refit", "resample_analysis"]


_STEP_START, _STEP_STOP = (
    1e-2,
    1e-5,
)  # the local search's first and smallest step, in units of p_max (the polish's)
_NEWTON = (
    30  # Model B's Newton steps from scratch at every evaluation (as cfu() and the polish take)
)
_BASELINE_LEVELS = ("unconstrained", "blind")


# ----------------------------------------------------------------------------------------- refit
def _penalties(model: FairModel) -> dict:
    """The full data's ridge penalties of the fair predictor and the baselines (from
    ``model.selection``): ``{"fair": λ, name: λ, ...}``."""
    sel = model.selection
    try:
        out = {"fair": sel["predictor"]["lam"]}
        out.update({name: sel["baselines"][name]["lam"] for name, _ in model.baseline_degrees})
    except (KeyError, TypeError):
        _checks.fail(
            "model",
            "a FairModel from fit (its selection holds the predictors' penalties)",
            f"selection with keys {sorted(sel) if isinstance(sel, dict) else type(sel).__name__}",
        )
    return out


def _ridge(F: jax.Array, y: jax.Array, lam: Any, weight: jax.Array | None) -> jax.Array:
    """``solve(FᵀWF + λI, FᵀWy)`` (W: the rows' weights, or none): :func:`~cfjax.sensitivity.ridge.ridge_cv`'s refit."""
    Fw = F if weight is None else F * weight[:, None]
    return jnp.linalg.solve(Fw.T @ F + lam * jnp.eye(F.shape[1], dtype=F.dtype), Fw.T @ y)


def _refit_on(
    model: FairModel, sub: FairnessData, weight: jax.Array | None, lams: dict, model_a: str
) -> FairModel:
    """The analysis refitted on the rows ``sub``, each standing for ``weight`` units (None: one
    each; a weighted row's ``y`` is the mean target of its units); ``lams``: :func:`_penalties`."""
    g = model.graph
    d = design(embeddings(g, model.degrees, sub.a, sub.X), sub.X, weight)
    unpenalised = _unpenalised(model.lam)
    if unpenalised and d.range_basis is None:
        # Traced: the full data's basis of the embeddings' span. A resample's rows keep every
        # linear dependency of the full data's columns (A² = 1 when A = ±1), so the span is the
        # same unless the resample has a new one (then its solves are singular: NaN, counted).
        d = d.replace(range_basis=model.design.range_basis)
    lam = model.lam if not isinstance(model.lam, tuple) else jnp.asarray(model.lam, sub.X.dtype)
    fit_a = fit_model_a(d, lam)
    if model_a == "ml":
        eye = jnp.eye(g.m, dtype=d.G.dtype)
        b = _model_b(d, eye, None if unpenalised else lam, None, 50, unpenalised)
        fit_a = ModelA(fit_a.w_ridge, b.sigma, b.w, b.residuals)
    Z = predictor_inputs(g, fit_a.residuals, sub.X)
    F = ridge.embed(Z, model.predictor_degree)
    theta = _ridge(F, sub.y, jnp.asarray(lams["fair"], F.dtype), weight)
    fair_pred = F @ theta
    preds, thetas, unfairness = {}, {}, {}
    for name, degree in model.baseline_degrees:
        inputs = jnp.concatenate([sub.a, sub.X], axis=1) if name == "unconstrained" else sub.X
        Fb = ridge.embed(inputs, degree)
        thetas[name] = _ridge(Fb, sub.y, jnp.asarray(lams[name], Fb.dtype), weight)
        preds[name] = Fb @ thetas[name]
        gap = (fair_pred - preds[name]) ** 2
        unfairness[name] = jnp.mean(gap) if weight is None else weight @ gap / jnp.sum(weight)
    return FairModel(
        g,
        model.degrees,
        model.predictor_degree,
        sub,
        d,
        model.lam,
        fit_a,
        theta,
        fair_pred,
        preds,
        unfairness,
        {},
        thetas,
        model.baseline_degrees,
        model.predictor_index,
    )


def _refit(model: FairModel, idx: jax.Array, lams: dict, model_a: str) -> FairModel:
    """:func:`refit`'s traceable body: the units ``idx`` read one by one."""
    data = model.data
    sub = FairnessData(data.group[idx], data.codes, data.X[idx], data.y[idx], data.names)
    return _refit_on(model, sub, None, lams, model_a)


def _refit_counts(
    model: FairModel, rows: FairnessData, row: jax.Array, idx: jax.Array, lams: dict, model_a: str
) -> FairModel:
    """The refit on the units ``idx (n',)`` as counts over the data's distinct rows ``(A, x)``
    (``rows``, ``(u,)``; ``row (n,)``: each unit's): each row weighted by how many of its units
    the resample drew, its target their mean. The same fit as :func:`_refit` on ``idx``, to
    rounding, at the cost of u rows instead of n' units."""
    dtype = rows.X.dtype
    r = row[idx]
    weight = jnp.zeros(rows.n, dtype).at[r].add(1.0)
    total = jnp.zeros(rows.n, dtype).at[r].add(model.data.y[idx])
    drawn = weight > 0
    y = jnp.where(drawn, total / jnp.where(drawn, weight, 1.0), 0.0)
    sub = FairnessData(rows.group, rows.codes, rows.X, y, rows.names)
    return _refit_on(model, sub, weight, lams, model_a)


_refit_jit = jax.jit(_refit, static_argnums=(3,))


def refit(model: FairModel, idx: Any, *, model_a: str = "paper") -> FairModel:
    """The whole analysis refitted on the units ``idx (n',)`` (a resample, with replacement),
    every choice fixed at ``model``'s: the equations' degrees and λ (Models A and B), the fair
    predictor's and the baselines' degree and λ (from ``model.selection``); no
    cross-validation. Equal, to rounding, to :func:`~cfjax.sensitivity.fit` on ``data[idx]``
    with those choices fixed in its :class:`~cfjax.sensitivity.FitConfig`.

    Pure and traceable: ``jax.jit`` and ``jax.vmap`` over ``idx`` (the result has ``model``'s
    static structure, the scored predictor kept). Its ``selection`` is an empty dict: the
    choices are ``model``'s, kept on the host, and a traced copy of its CV tables would be
    dead weight in a vmapped program. Its ``baseline_unfairness`` holds arrays, not floats.
    With λ = 0 inside a traced program the unpenalised solves use ``model``'s basis of the
    embeddings' span (a resample keeps the full data's collinearities).

    Args:
      model: the full data's fit (:func:`~cfjax.sensitivity.fit`).
      idx: ``(n',)`` integer indices of the units, in ``[0, n)``.
      model_a: how ``model``'s Model A was fitted (``FitConfig.model_a``: ``"paper"`` or
        ``"ml"``; the model does not record it).

    Returns:
      :class:`~cfjax.sensitivity.FairModel` on the ``n'`` resampled units.
    """
    if not isinstance(model, FairModel):
        _checks.fail("model", "a FairModel from cfjax.sensitivity.fit", type(model).__name__)
    if model_a not in ("paper", "ml"):
        _checks.fail("model_a", "'paper' or 'ml'", repr(model_a))
    lams = _penalties(model)
    if _checks.is_concrete(idx):
        idx = _check_indices(idx, model.data.n)
    return _refit_jit(model.replace(selection={}), jnp.asarray(idx), lams, model_a)


def _check_indices(idx: Any, n: int) -> jax.Array:
    arr = np.asarray(idx)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        _checks.fail(
            "idx",
            "a non-empty 1-d integer array of unit indices",
            f"shape {arr.shape}, dtype {arr.dtype}",
        )
    if arr.min() < 0 or arr.max() >= n:
        _checks.fail("idx", f"indices in [0, {n})", f"values in [{arr.min()}, {arr.max()}]")
    return jnp.asarray(arr, jnp.int32)


# ---------------------------------------------------------------------------------- local search
def _probe(model: FairModel, P: jax.Array, log_sigma0: jax.Array) -> tuple[jax.Array, jax.Array]:
    """CFU at ``P`` on all units and its gradient in P, Model B solved from ``log_sigma0``
    (the ridge residuals', as :func:`~cfjax.sensitivity.cfu` starts)."""
    unpenalised = _unpenalised(model.lam)
    lam = None if unpenalised else model.lam

    def value(P):
        return cfu_of(model, _model_b(model.design, P, lam, log_sigma0, _NEWTON, unpenalised))

    return jax.value_and_grad(value)(P)


def _local(
    model: FairModel, fresh: jax.Array, P0: jax.Array, p: jax.Array, min_eig: float, steps: int
) -> tuple[jax.Array, jax.Array]:
    """The worst case near a usable ``P0`` within budget ``p``: at most ``steps`` steps of the
    polish (a step of ``eta · p`` along the boundary following the gradient, projected back
    onto the usable set; kept when it raises CFU, eta doubled, else eta quartered), stopping
    once eta < 1e-5 (five refusals in a row from the start: a start at its maximum costs half
    the steps). Returns ``(value, P)``, value −inf when no finite CFU was found.

    The start's own probe is the loop's first iteration (kept when finite and usable), so the
    probe, CFU and its gradient through Model B's solve, is traced once, not twice: the program
    compiles in about half the time."""
    state = (
        jnp.asarray(0, jnp.int32),
        P0,
        jnp.asarray(-jnp.inf, P0.dtype),
        jnp.zeros_like(P0),
        jnp.asarray(_STEP_START, P0.dtype),
    )

    def going(s):
        return (s[0] <= steps) & (s[4] >= _STEP_STOP)

    def step(s):
        i, P, v, g, eta = s
        first = i == 0
        Q = jnp.where(
            first, P, _project_usable(_along_boundary(P, g, p, min_eig, eta * p), p, min_eig)
        )
        vq, gq = _probe(model, Q, fresh)
        ok = (first | (vq > v)) & jnp.isfinite(vq) & (correlation_margin(Q, min_eig) >= 0)
        return (
            i + 1,
            jnp.where(ok, Q, P),
            jnp.where(ok, vq, v),
            jnp.where(ok, gq, g),
            jnp.where(first, eta, jnp.where(ok, 2 * eta, eta / 4)),
        )

    _, P, v, _, _ = jax.lax.while_loop(going, step, state)
    return v, P


@functools.partial(jax.jit, static_argnames=("scored", "min_eig", "steps"))
def _climb(
    model: FairModel,
    starts: jax.Array,
    p: jax.Array,
    *,
    scored: str,
    min_eig: float,
    steps: int,
) -> tuple[jax.Array, jax.Array]:
    """The largest CFU found within budget ``p`` by a local search (:func:`_local`, at most
    ``steps`` steps) from each usable start ``(S, m, m)``, with its P; −inf when none found a
    finite CFU. The inverse question's probes (:func:`cfjax.sensitivity.inverse_budget`), as
    the bootstrap's are; ``scored``: the model's scored predictor, fixed in the program)."""
    model = model.replace(predictor_index=np.int32(PREDICTORS.index(scored)))
    dtype = model.data.X.dtype
    fresh = _start_log_sigma(model.design, 0.0 if _unpenalised(model.lam) else model.lam, dtype)
    values, Ps = jax.vmap(lambda P0: _local(model, fresh, P0, p, min_eig, steps))(starts)
    values = jnp.where(jnp.isfinite(values), values, -jnp.inf)
    best = jnp.argmax(values)
    return values[best], Ps[best]


# ----------------------------------------------------------------------------- one resample
@dataclasses.dataclass(frozen=True)
class _Config:
    """The static settings of a bootstrap program (hashable: the compiled program is cached on it)."""

    model_a: str
    min_eig: float
    steps: int  # local search steps per start
    bisect: int  # bisection steps per level
    level_kinds: (
        tuple  # per level: "blind" / "unconstrained" (the resample's own) or "" (a fixed number)
    )
    benchmarks: tuple  # the benchmark multiples (empty: none)
    scored: str = "fair"  # the scored predictor: static here, so no branch on it is compiled


def _analysis(
    cfg: _Config, fitted: FairModel, p: jax.Array, starts: jax.Array, levels: jax.Array
) -> dict:
    """One resample's numbers from its refit ``fitted``: the worst case at each sorted budget
    ``p (K,)`` from ``starts (K, S, m, m)``, the benchmarks' budgets and CFU, and each level's
    inverse budget (``levels (L,)``: the fixed levels; where the level is a baseline's, its
    entry is ignored)."""
    # A bootstrap scores one predictor: fixed in the program (a lax.switch over the predictors
    # inside its loops ran it ~1.6x slower), where the search keeps it as data.
    fitted = fitted.replace(predictor_index=np.int32(PREDICTORS.index(cfg.scored)))
    dtype = fitted.data.X.dtype
    m = fitted.graph.m
    eye = jnp.eye(m, dtype=dtype)
    fresh = _start_log_sigma(fitted.design, 0.0 if _unpenalised(fitted.lam) else fitted.lam, dtype)
    local = functools.partial(_local, fitted, fresh, min_eig=cfg.min_eig, steps=cfg.steps)

    # Every (budget, start) pair is a run. The runs of one kind of start go together (lax.map
    # over the kinds, the budgets vmapped): a vmapped loop runs until its last run stops, and
    # runs from the budget's own maximiser stop after about half the steps of those from a
    # neighbour's, which climb.
    values, Ps = jax.lax.map(
        lambda kind: platform.map_runs(lambda r: local(*r), (kind, p)), jnp.swapaxes(starts, 0, 1)
    )
    values, Ps = jnp.swapaxes(values, 0, 1), jnp.swapaxes(Ps, 0, 1)  # (K, S), (K, S, m, m)
    values = jnp.where(jnp.isfinite(values), values, -jnp.inf)
    best = jnp.argmax(values, axis=1)
    curve = jnp.take_along_axis(values, best[:, None], axis=1)[:, 0]
    P_best = jnp.take_along_axis(Ps, best[:, None, None, None], axis=1)[:, 0]
    # Nested budgets: a smaller budget's worst P is usable here too.
    within = p[None, :] <= p[:, None]
    source = jnp.argmax(jnp.where(within, curve[None, :], -jnp.inf), axis=1)
    curve, P_best = curve[source], P_best[source]
    out = {"worst_case": curve}
    for name, value in fitted.baseline_unfairness.items():
        out[f"baseline_unfairness/{name}"] = value

    if cfg.benchmarks:
        # Here, not at the top: the benchmarks module imports what this one does, and a program
        # without benchmarks needs none of it.
        from cfjax.sensitivity.benchmarks import benchmark_cfu, benchmark_correlations

        _, _, P_abs = benchmark_correlations(fitted, cfg.benchmarks)
        out["benchmark_budget"] = jnp.max(
            jnp.abs(P_abs) * (1 - eye)[None, None], axis=(-2, -1)
        )  # NaN: infeasible
        out["benchmark_cfu"] = benchmark_cfu(fitted, P_abs)[0]

    if cfg.level_kinds:
        # Every level's bisection in one vmapped loop: one copy of the local search in the
        # program whatever the number of levels (each copy costs seconds of compilation).
        targets = jnp.stack(
            [
                fitted.baseline_unfairness[kind] if kind else levels[i]
                for i, kind in enumerate(cfg.level_kinds)
            ]
        )
        answers = jax.vmap(lambda t: _inverse(local, p, curve, P_best, t, cfg, eye))(targets)
        for i in range(len(cfg.level_kinds)):
            out[f"level/{i}"] = targets[i]
            out[f"inverse/{i}"] = answers[i]
    return out


def _inverse(local, p, curve, P_best, target, cfg: _Config, eye) -> jax.Array:
    """The smallest budget whose worst case reaches ``target``: the grid's bracket, then
    ``cfg.bisect`` bisection steps, each probe a local search from the bracket's two answers
    (the lower one usable as it is, the upper one projected); the answer is the bracket's upper
    end; +inf where no budget reaches it, NaN for a level that is not finite."""
    reached = curve >= target
    k = jnp.argmax(reached)
    below = k > 0
    lo = jnp.where(below, p[k - 1], 0.0)
    v_lo = jnp.where(below, curve[k - 1], -jnp.inf)
    P_lo = jnp.where(below, P_best[k - 1], eye)
    hi, P_hi = p[k], P_best[k]

    def step(s):
        i, lo, hi, v_lo, P_lo, P_hi = s
        mid = 0.5 * (lo + hi)
        starts = jnp.stack([P_lo, _project_usable(P_hi, mid, cfg.min_eig)])
        v, P = jax.vmap(local, (0, None))(starts, mid)
        v = jnp.where(jnp.isfinite(v), v, -jnp.inf)
        j = jnp.argmax(v)
        up_to = jnp.maximum(v[j], v_lo)
        P_mid = jnp.where(v[j] >= v_lo, P[j], P_lo)
        up = up_to >= target
        return (
            i + 1,
            jnp.where(up, lo, mid),
            jnp.where(up, mid, hi),
            jnp.where(up, v_lo, up_to),
            jnp.where(up, P_lo, P_mid),
            jnp.where(up, P_mid, P_hi),
        )

    # No bisection where no budget reaches the level (the answer is +inf): vmapped over
    # resamples, the loop runs while one of them needs it.
    start = (jnp.asarray(0, jnp.int32), lo, hi, v_lo, P_lo, P_hi)
    needed = reached.any() & jnp.isfinite(target)
    _, _, hi, _, _, _ = jax.lax.while_loop(lambda s: needed & (s[0] < cfg.bisect), step, start)
    return jnp.where(jnp.isfinite(target), jnp.where(reached.any(), hi, jnp.inf), jnp.nan)


@dataclasses.dataclass(frozen=True)
class _Resamples:
    """A block of resamples as :func:`cfjax.distributed.map_batch` calls it: each entry's key
    (its units drawn with replacement) or, where ``identity``, all units in order."""

    cfg: _Config

    def __call__(self, keys, identity, model, lams, rows, row, p, starts, levels):
        return jax.vmap(_one, (None, 0, 0) + (None,) * 7)(
            self.cfg, keys, identity, model, lams, rows, row, p, starts, levels
        )


def _one(
    cfg: _Config,
    key: jax.Array,
    identity: jax.Array,
    model: FairModel,
    lams: dict,
    rows: FairnessData,
    row: jax.Array,
    p,
    starts,
    levels,
):
    """One resample from its key (the identity resample where ``identity``): its units drawn
    (``randint(key, (n,), 0, n)``), counted over the distinct rows, refitted and analysed."""
    n = row.shape[0]
    idx = jnp.where(
        identity, jnp.arange(n, dtype=jnp.int32), jax.random.randint(key, (n,), 0, n, jnp.int32)
    )
    return _resample(cfg, model, lams, rows, row, idx, p, starts, levels)


def _resample(cfg: _Config, model, lams, rows, row, idx, p, starts, levels) -> dict:
    """The units ``idx``' numbers: :func:`_refit_counts`, then :func:`_analysis`."""
    fitted = _refit_counts(model, rows, row, idx, lams, cfg.model_a)
    return _analysis(cfg, fitted, p, starts, levels)


# ------------------------------------------------------------------------ one resample's settings
def _prepare(
    model: FairModel,
    p_max: Any,
    worst: Any,
    benchmarks: Any,
    levels: Any,
    steps: int,
    bisect: int,
    model_a: str,
    search_key: Any,
    config: SearchConfig | None,
):
    """The validated static settings and shared arrays of a bootstrap program: ``(cfg, level
    names, sorted budgets, (model, penalties, budgets, starts, fixed levels))``."""
    if not isinstance(model, FairModel):
        _checks.fail("model", "a FairModel from cfjax.sensitivity.fit", type(model).__name__)
    budgets = np.atleast_1d(np.asarray(p_max, np.float64))
    if budgets.ndim != 1 or budgets.size == 0:
        _checks.fail("p_max", "a budget or a non-empty 1-d grid", f"shape {np.shape(p_max)}")
    for b in budgets:
        check_budget(b)
    budgets = np.unique(budgets)
    steps = _checks.check_positive_int("steps", steps)
    bisect = _checks.check_positive_int("bisect", bisect)
    if model_a not in ("paper", "ml"):
        _checks.fail("model_a", "'paper' or 'ml'", repr(model_a))
    if isinstance(benchmarks, (str, bytes)) or not hasattr(benchmarks, "__iter__"):
        _checks.fail(
            "benchmarks", "a sequence of positive multiples (or () for none)", repr(benchmarks)
        )
    benchmarks = tuple(float(k) for k in benchmarks)
    if any(not (np.isfinite(k) and k > 0) for k in benchmarks):
        _checks.fail("benchmarks", "positive multiples", repr(benchmarks))
    names, kinds, fixed = _levels(levels, model)
    lams = _penalties(model)
    dtype = model.data.X.dtype
    if worst is None:
        from cfjax.sensitivity.search import worst_case

        worst = worst_case(
            model, budgets, key=search_key, config=SearchConfig() if config is None else config
        )
    starts, min_eig = _starts(worst, budgets, dtype)
    cfg = _Config(model_a, min_eig, steps, bisect, kinds, benchmarks, model.scored)
    rows, row = _rows(model.data)
    shared = (
        model.replace(selection={}),
        lams,
        rows,
        row,
        jnp.asarray(budgets, dtype),
        jnp.asarray(starts, dtype),
        jnp.asarray(fixed, dtype),
    )
    return cfg, names, budgets, shared


def _rows(data: FairnessData) -> tuple[FairnessData, jax.Array]:
    """The distinct rows ``(A, x)`` of ``data`` (their ``y`` a placeholder: each resample sets
    its own) and each unit's row, ``(n,)``; every unit its own row when none repeats."""
    index, row, _ = _distinct_rows(data)
    if index.size == data.n:
        return data, jnp.arange(data.n, dtype=jnp.int32)
    take = jnp.asarray(index, jnp.int32)
    rows = FairnessData(data.group[take], data.codes, data.X[take], data.y[take], data.names)
    return rows, jnp.asarray(row, jnp.int32)


def resample_analysis(
    model: FairModel,
    p_max: Any,
    idx: Any,
    *,
    worst: Any,
    benchmarks: Any = (1, 2, 3),
    levels: Mapping[str, Any] | None = None,
    steps: int = 10,
    bisect: int = 6,
    model_a: str = "paper",
) -> dict:
    """One resample's numbers, as :func:`~cfjax.sensitivity.bootstrap` computes them for each: the
    analysis refitted on the units ``idx (n,)`` (:func:`refit`), its worst case at each budget of
    ``p_max`` by the local search from ``worst``'s maximisers, the benchmarks' budgets and CFU,
    and each level's inverse budget; keys as :class:`~cfjax.sensitivity.Intervals`'. One compiled
    program per settings (cached): a loop of these over resamples is what
    :func:`~cfjax.sensitivity.bootstrap` vmaps.

    Example::

        one = S.resample_analysis(model, budgets, np.arange(model.data.n), worst=wc)
        one["worst_case"]  # the full data's worst case again (the identity resample)
    """
    cfg, names, _, shared = _prepare(
        model, p_max, worst, benchmarks, levels, steps, bisect, model_a, None, None
    )
    idx = _check_indices(idx, model.data.n)
    out = _resample_jit(cfg, *shared[:4], idx, *shared[4:])
    rename = {f"inverse/{i}": f"inverse/{name}" for i, name in enumerate(names)}
    rename.update({f"level/{i}": f"level/{name}" for i, name in enumerate(names)})
    return {rename.get(k, k): v for k, v in out.items()}


_resample_jit = jax.jit(_resample, static_argnums=0)
_analysis_jit = jax.jit(_analysis, static_argnums=0)


def _levels(levels: Any, model: FairModel) -> tuple[tuple, tuple, np.ndarray]:
    """``(names, kinds, fixed)``: each level's name, its baseline's name (or ``""`` for a fixed
    number) and the fixed numbers (NaN for a baseline's)."""
    if levels is None:
        return (), (), np.zeros(0)
    if not isinstance(levels, Mapping):
        _checks.fail(
            "levels",
            "None or a mapping name -> CFU level (a number, 'blind' or 'unconstrained')",
            type(levels).__name__,
        )
    names, kinds, fixed = [], [], []
    have = dict(model.baseline_degrees)
    for name, value in levels.items():
        if not isinstance(name, str) or "/" in name:
            _checks.fail("levels", "names without '/'", repr(name))
        if isinstance(value, str):
            if value not in _BASELINE_LEVELS or value not in have:
                _checks.fail(
                    f"levels[{name!r}]",
                    f"a number or one of the model's baselines {sorted(have)}",
                    repr(value),
                )
            kinds.append(value)
            fixed.append(np.nan)
        else:
            try:
                v = float(value)
            except (TypeError, ValueError):
                _checks.fail(
                    f"levels[{name!r}]",
                    "a non-negative CFU level or a baseline's name",
                    repr(value),
                )
            if not (np.isfinite(v) and v >= 0):
                _checks.fail(
                    f"levels[{name!r}]",
                    "a non-negative CFU level or a baseline's name",
                    repr(value),
                )
            kinds.append("")
            fixed.append(v)
        names.append(name)
    return tuple(names), tuple(kinds), np.asarray(fixed, np.float64)


def _starts(worst: Any, budgets: np.ndarray, dtype) -> tuple[np.ndarray, float]:
    """Each budget's local-search starts ``(K, 3, m, m)`` from the full data's worst case: its
    own worst P and its neighbours' projected into it; and the margin ``min_eig``."""
    from cfjax.sensitivity.search import WorstCase

    if not isinstance(worst, WorstCase):
        _checks.fail("worst", "None or the full data's WorstCase", type(worst).__name__)
    wp = np.asarray(worst.p_max, np.float64)
    order = np.argsort(wp)
    if wp.shape != budgets.shape or not np.allclose(wp[order], budgets, rtol=0, atol=1e-12):
        _checks.fail(
            "worst",
            f"a WorstCase at the budgets p_max = {budgets.tolist()}",
            f"budgets {wp.tolist()}",
        )
    P = np.asarray(worst.P, np.float64)[order]
    if not np.isfinite(np.asarray(worst.cfu)[order]).all():
        _checks.fail(
            "worst",
            "a finite worst case at every budget (its P start the local searches)",
            f"cfu {np.asarray(worst.cfu).tolist()}",
        )
    min_eig = float(worst.min_eig)
    K = budgets.size
    below, above = P[np.maximum(np.arange(K) - 1, 0)], P[np.minimum(np.arange(K) + 1, K - 1)]
    p = jnp.asarray(budgets, dtype)
    starts = np.stack(
        [
            P,
            np.asarray(_project_all(jnp.asarray(below, dtype), p, min_eig)),
            np.asarray(_project_all(jnp.asarray(above, dtype), p, min_eig)),
        ],
        axis=1,
    )
    return starts, min_eig


@functools.partial(jax.jit, static_argnums=2)
def _project_all(P: jax.Array, p: jax.Array, min_eig: float) -> jax.Array:
    """:func:`~cfjax.sensitivity.projection._project_usable` of each ``P (K, m, m)`` into its budget ``p (K,)``."""
    return jax.vmap(lambda P, p: _project_usable(P, p, min_eig))(P, p)
