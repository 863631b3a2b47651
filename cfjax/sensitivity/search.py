"""The worst case within a confounding budget (paper 001, Algorithm 1; SPEC §3), and the
inverse question.

For each budget ``p_max`` and each random restart, gradient ascent on CFU over the unconstrained
``L`` of a correlation parameterisation, with optax: full batch or minibatches (uniform draws), early stopping on the (smoothed) objective, and Model B's σ warm-started from the
previous step. The whole ``p_max`` grid × restarts runs as one jitted, vmapped program (or, with
``warm_start``, a scan over the sorted budgets — the paper's curriculum — vmapped over restarts).

A step never leaves the usable set: a proposed ``L`` whose P has smallest eigenvalue below
``min_eig`` is backtracked (halving the step up to 8 times) and, if no fraction is usable, the
step is dropped. The answer for each budget is the full-data CFU at the best iterate of the best
restart, with that P and its eigenvalues.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from cfjax import _checks
from cfjax.sensitivity.correlation import (check_budget, clique_correlation, correlation_margin, pd_correlation,
                                           tanh_correlation)
from cfjax.sensitivity.cfu import cfu_of
from cfjax.sensitivity.linear import fit_model_b
from cfjax.sensitivity.problem import FairModel

__all__ = ["WorstCase", "worst_case", "InverseBudget", "inverse_budget", "sign_corners", "paper_optimizer"]

_RUN_GROUP = 4  # runs vmapped together per optimiser step on XLA:CPU (see _run_group)
_SCHEDULER_OFF = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def _run_group(runs: int) -> int | None:
    """How many runs one optimiser step vmaps at once (None: all of them).

    XLA:CPU (jax 0.10.2) stalls, idle and never finishing, when 8 or more steps are vmapped at
    once on large data (the 209,112-row NHS survey); its concurrency-optimised scheduler is the
    trigger. So on CPU the runs go in vmapped groups of 4, one group after another, unless that
    scheduler was switched off with ``XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false``
    before JAX started (then 64 runs vmapped at once finish; a per-program compiler option does
    not help). Other backends vmap every run.
    """
    if jax.default_backend() != "cpu" or _SCHEDULER_OFF in os.environ.get("XLA_FLAGS", ""):
        return None
    return _RUN_GROUP if runs > _RUN_GROUP else None
_BACKTRACK = 0.5 ** np.arange(9)  # 1, 1/2, ..., 1/256 of the proposed step


@struct.dataclass
class WorstCase:
    """Result of :func:`worst_case`, one row per budget.

    ``p_max (B,)``; ``cfu (B,)``: the worst case found (full data, best restart, and never
    below a smaller budget's, whose P is also feasible here); ``P (B, m, m)``
    and ``eigenvalues (B, m)`` (ascending) of that correlation; ``restart_cfu (B, R)``: every
    restart's answer; ``steps (B, R)``: steps taken before stopping; ``history (B, R, S)``: the
    objective tracked at each step (NaN after stopping); ``min_eig``: the margin used.
    """

    p_max: jax.Array
    cfu: jax.Array
    P: jax.Array
    eigenvalues: jax.Array
    restart_cfu: jax.Array
    steps: jax.Array
    history: jax.Array
    min_eig: float = struct.field(pytree_node=False)


def paper_optimizer() -> optax.GradientTransformation:
    """Paper 001's optimiser: SGD, learning rate 100, Nesterov momentum 0.9 (use with
    ``batch_size=4096``, one epoch and ``warm_start=True``)."""
    return optax.sgd(100.0, momentum=0.9, nesterov=True)


def _parameterisation(kind: str, cliques: Any, m: int) -> tuple[Callable, tuple[int, int], np.ndarray]:
    """``(P(L, p_max), shape of L, mask of L's free entries)``."""
    if cliques is not None:
        if kind != "tanh":
            _checks.fail("cliques", "the tanh parameterisation (cliques mask its L)", f"parameterisation={kind!r}")
        mask = np.asarray(cliques, bool)
        if mask.ndim != 2 or mask.shape[0] != m:
            _checks.fail("cliques", f"a boolean membership matrix of shape ({m}, c)", f"shape {mask.shape}")
        return _Cliques(tuple(map(tuple, mask.tolist()))), mask.shape, mask
    tri = np.tril(np.ones((m, m), bool))
    if kind == "tanh":
        return tanh_correlation, (m, m), tri
    if kind == "pd":
        return pd_correlation, (m, m), tri
    _checks.fail("parameterisation", "'tanh' (the paper's) or 'pd' (positive definite by construction)", repr(kind))


def _init_L(key: jax.Array, shape: tuple[int, int], mask: np.ndarray, scale: float, dtype) -> jax.Array:
    """The paper's initialisation: ones on the diagonal, small random entries below it."""
    eye = jnp.eye(*shape, dtype=dtype)
    return jnp.where(mask, eye + scale * (1 - eye) * jax.random.normal(key, shape, dtype), 0.0)


def worst_case(model: FairModel, p_max: Any, *, key: jax.Array, restarts: int = 4, steps: int = 500,
               optimizer: optax.GradientTransformation | None = None, batch_size: int | None = None,
               patience: int = 50, tol: float = 1e-4, min_eig: float = 1e-3, parameterisation: str = "tanh",
               cliques: Any = None, warm_start: bool = False, init_scale: float = 0.1,
               newton_steps: int = 8, log_objective: bool = True, snap: float | None = 0.99,
               screen_corners: bool = True) -> WorstCase:
    """Maximise CFU over correlations within each budget (paper 001, Algorithm 1).

    Args:
      model: the fitted working model (:func:`cfjax.sensitivity.fit`).
      p_max: one budget or a 1-d grid, each in [0, 1).
      key: randomness for the restarts' initial L and the minibatches.
      restarts: random restarts per budget.
      steps: maximum optimiser steps per run.
      optimizer: any optax transformation (default ``optax.adam(0.05)``; the paper's is
        :func:`paper_optimizer`). It minimises −CFU.
      batch_size: None for full-batch steps; otherwise minibatches of this many units drawn
        uniformly (with replacement) at each step.
      patience, tol: stop a run once its objective (an exponential average of minibatch values)
        has not improved by ``tol`` (relative to CFU) for ``patience`` steps.
      min_eig: the smallest eigenvalue any P used may have (a worst case is only defined with a
        margin from singular P).
      parameterisation: ``"tanh"`` (the paper's; may leave the PD cone: steps are backtracked)
        or ``"pd"`` (positive definite by construction). ``cliques``: a ``(m, c)`` membership
        matrix for the clique parameterisation (known zero correlations; tanh only).
      warm_start: the paper's curriculum: budgets in increasing order, each run starting from
        the previous budget's final L (a scan over budgets, vmapped over restarts).
      init_scale: spread of the random initial off-diagonal entries of L.
      newton_steps: at most this many Newton steps of Model B's σ solve per step (warm-started;
        they stop once a step moves log σ by less than 1e-10, 1e-5 in float32).
      log_objective: ascend ``log CFU`` (default): the same maximiser, but gradients of order
        one whatever the scale of CFU (often 1e-12 to 1e-4), so that Adam's step is not
        swamped by its epsilon; False ascends CFU itself (the paper's recipe, with its large
        learning rate).
      snap: the tanh parameterisation only approaches the budget's edge (|P_jk| < p_max), so
        at the end, off-diagonals within a factor ``snap`` of ±p_max are also tried at exactly
        ±p_max (the limit point), kept when usable and worse for fairness. None disables it.
      screen_corners: the objective has several local maxima (one per sign pattern, roughly),
        so before the ascent every sign corner (all off-diagonals ±p_max) that is usable is
        evaluated, and the restarts start from the best of them (the rest from the paper's
        random initialisation). Applies to the full parameterisation with at most 5 features
        (2^10 corners); with ``warm_start`` to the first budget only.

    Returns:
      :class:`WorstCase`, budgets in the order given (sorted when ``warm_start``).
    """
    if not isinstance(model, FairModel):
        _checks.fail("model", "a FairModel from cfjax.sensitivity.fit", type(model).__name__)
    budgets = np.atleast_1d(np.asarray(p_max, np.float64))
    if budgets.ndim != 1 or budgets.size == 0:
        _checks.fail("p_max", "a budget or a non-empty 1-d grid", f"shape {np.shape(p_max)}")
    for b in budgets:
        check_budget(b)
    if warm_start:
        budgets = np.sort(budgets)
    restarts = _checks.check_positive_int("restarts", restarts)
    steps = _checks.check_positive_int("steps", steps)
    patience = _checks.check_positive_int("patience", patience)
    n = model.data.n
    if batch_size is not None:
        batch_size = _checks.check_positive_int("batch_size", batch_size)
        if batch_size > n:
            _checks.fail("batch_size", f"at most the {n} units", repr(batch_size))
    if not (0 < float(min_eig) < 1):
        _checks.fail("min_eig", "a margin in (0, 1)", repr(min_eig))
    m = model.graph.m
    P_fn, shape, mask = _parameterisation(parameterisation, cliques, m)
    config = _Config(P_fn=P_fn, shape=shape, mask=tuple(map(tuple, mask.tolist())),
                     optimizer=optimizer or _ADAM, steps=steps, batch_size=batch_size,
                     patience=patience, tol=float(tol), min_eig=float(min_eig), init_scale=float(init_scale),
                     newton_steps=newton_steps, warm_start=bool(warm_start), restarts=restarts,
                     log_objective=bool(log_objective), snap=None if snap is None else float(snap),
                     corners=_corner_signs(m) if screen_corners and cliques is None and m <= 5 else None)
    dtype = model.data.X.dtype
    # optax mixes weak and integer types internally: scope the standard promotion rules.
    with jax.numpy_dtype_promotion("standard"):
        budgets = jnp.asarray(budgets, dtype)
        inits = _initial_L(config, model, budgets, key)
        out = _search(config, model, budgets, key, inits)
    return out


@dataclasses.dataclass(frozen=True)
class _Config:
    """Static settings of one search, hashable: the compiled program is cached on it (pass the
    same optimizer object to reuse it across calls)."""

    P_fn: Callable
    shape: tuple
    mask: tuple
    optimizer: Any
    steps: int
    batch_size: Any
    patience: int
    tol: float
    min_eig: float
    init_scale: float
    newton_steps: int
    warm_start: bool
    restarts: int
    log_objective: bool
    snap: Any
    corners: Any


@dataclasses.dataclass(frozen=True)
class _Cliques:
    """The clique parameterisation for a fixed membership mask, hashable by value."""

    mask: tuple

    def __call__(self, L, p_max):
        return clique_correlation(L, np.asarray(self.mask), p_max)


_ADAM = optax.adam(0.05)


def _runs(cfg: _Config, model: FairModel, p_max: jax.Array, L0: jax.Array, key: jax.Array):
    """R runs of the ascent, run r for budget ``p_max[r]`` from ``L0[r]``: ``(L (R, ...),
    steps (R,), history (R, S))``.

    The loop over steps is outermost and each step is vmapped over the runs, so that every
    run sees the same minibatch (common random numbers): the minibatch gather is done once per
    step, not once per run (gathering per run inside a vmapped loop stalled XLA:CPU on large
    data). A run that has stopped early is frozen while the others go on.
    """
    n = model.data.n
    opt = cfg.optimizer
    mask = jnp.asarray(np.asarray(cfg.mask))
    bs = cfg.batch_size
    R = L0.shape[0]
    dtype = L0.dtype

    def objective(L, p, log_sigma, units):
        mb = fit_model_b(model.design, cfg.P_fn(L, p), model.lam, log_sigma0=log_sigma,
                         newton_steps=cfg.newton_steps)
        value = cfu_of(model, mb, units)
        value = jnp.log(jnp.maximum(value, jnp.finfo(value.dtype).tiny)) if cfg.log_objective else value
        return -value, jnp.log(mb.sigma)

    def step_one(L, opt_state, log_sigma, p, units):
        (loss, log_sigma), g = jax.value_and_grad(objective, has_aux=True)(L, p, log_sigma, units)
        g = jnp.where(mask, jnp.nan_to_num(g), 0.0)
        updates, opt_state = opt.update(g, opt_state, L)
        candidates = L[None] + jnp.asarray(_BACKTRACK, L.dtype)[:, None, None] * updates[None]
        margins = jax.vmap(lambda c: correlation_margin(cfg.P_fn(c, p), cfg.min_eig))(candidates)
        usable = margins >= 0
        L_next = jnp.where(usable.any(), candidates[jnp.argmax(usable)], L)
        return L_next, opt_state, log_sigma, -loss

    def step_all(L, opt_state, log_sigma, p, units):
        # Every run in one vmap, or in vmapped groups one after another on XLA:CPU (_run_group).
        one = lambda args: step_one(*args, units)  # noqa: E731
        group = _run_group(R)
        if group is None:
            return jax.vmap(one)((L, opt_state, log_sigma, p))
        return jax.lax.map(one, (L, opt_state, log_sigma, p), batch_size=group)

    def freeze(active, new, old):
        return jax.tree.map(lambda a, b: jnp.where(active.reshape((R,) + (1,) * (a.ndim - 1)), a, b), new, old)

    def body(state):
        L, opt_state, log_sigma, track, best, best_L, since, t, history, active, steps = state
        # Uniform draws with replacement, shared by the runs.
        units = None if bs is None else jax.random.randint(jax.random.fold_in(key, t), (bs,), 0, n)
        L_new, opt_new, sigma_new, value = step_all(L, opt_state, log_sigma, p_max, units)
        track_new = value if bs is None else jnp.where(t == 0, value, 0.9 * track + 0.1 * value)
        # Log objective: an absolute gain in log CFU (a relative gain in CFU); raw: relative.
        threshold = cfg.tol if cfg.log_objective else cfg.tol * jnp.abs(best)
        improved = (best == -jnp.inf) | (track_new > best + threshold)
        best_L = freeze(active & (track_new > best), L, best_L)
        best = jnp.where(active, jnp.maximum(best, track_new), best)
        since = jnp.where(active, jnp.where(improved, 0, since + 1), since)
        shown = jnp.exp(track_new) if cfg.log_objective else track_new
        history = history.at[:, t].set(jnp.where(active, shown, jnp.nan))
        L, opt_state, log_sigma, track = freeze(active, (L_new, opt_new, sigma_new, track_new),
                                                (L, opt_state, log_sigma, track))
        steps = jnp.where(active, t + 1, steps)
        active = active & (since < cfg.patience)
        return L, opt_state, log_sigma, track, best, best_L, since, t + 1, history, active, steps

    def cond(state):
        return (state[7] < cfg.steps) & state[9].any()

    log_sigma = jnp.broadcast_to(jnp.log(model.model_a.sigma), (R, model.graph.m))
    minus_inf = jnp.full((R,), -jnp.inf, dtype)
    init = (L0, jax.vmap(opt.init)(L0), log_sigma, minus_inf, minus_inf, L0, jnp.zeros((R,), jnp.int32),
            jnp.asarray(0, jnp.int32), jnp.full((R, cfg.steps), jnp.nan, dtype), jnp.ones((R,), bool),
            jnp.zeros((R,), jnp.int32))
    state = jax.lax.while_loop(cond, body, init)
    L_last, best_L, history, steps = state[0], state[5], state[8], state[10]
    # Minibatch runs keep the last iterate (their tracked value is a noisy average).
    return (best_L if bs is None else L_last), steps, history


@functools.partial(jax.jit, static_argnums=0)
def _initial_L(cfg: _Config, model: FairModel, budgets: jax.Array, key: jax.Array) -> jax.Array:
    """Every budget's restarts' starting L, ``(B, R, ...)``: the best usable sign corners
    (when screening), then the paper's random initialisation."""
    dtype = budgets.dtype
    mask = np.asarray(cfg.mask)
    keys = jax.random.split(key, cfg.restarts)
    random_inits = jax.vmap(lambda k: _init_L(jax.random.fold_in(k, 0), cfg.shape, mask, cfg.init_scale, dtype))(keys)

    def full_cfu(P):
        return cfu_of(model, fit_model_b(model.design, P, model.lam, newton_steps=30))

    def inits_for(p):
        """The restarts' starting L for budget p: the best usable sign corners, then random."""
        if cfg.corners is None:
            return random_inits
        signs = jnp.asarray(cfg.corners, dtype)  # (k, m, m), zero diagonal
        eye = jnp.eye(signs.shape[1], dtype=dtype)
        usable = jax.vmap(lambda S: correlation_margin(eye + p * S, cfg.min_eig) >= 0)(signs)
        # Corners one after another: nested vmaps of full-data CFU stalled XLA:CPU on large data.
        values = jax.lax.map(lambda a: jnp.where(a[1], full_cfu(jnp.where(a[1], eye + p * a[0], eye)), -jnp.inf),
                             (signs, usable))
        order = jnp.argsort(-values)[: cfg.restarts]
        # L with tanh(L Lᵀ) = ±tanh(3) ≈ ±0.995 off the diagonal: just inside the corner.
        target = 3.0 * signs[order] + (3.0 * (signs.shape[1] - 1) + 1.0) * eye[None]
        L = jax.vmap(jnp.linalg.cholesky)(target)
        take = jnp.isfinite(values[order]) & jax.vmap(
            lambda L: correlation_margin(cfg.P_fn(L, p), cfg.min_eig) >= 0)(L)
        L = jnp.where(take[:, None, None], L, random_inits[: order.shape[0]])
        return random_inits.at[: order.shape[0]].set(L)

    if cfg.warm_start:  # only the first budget starts afresh
        return jnp.broadcast_to(inits_for(budgets[0]), (budgets.shape[0],) + random_inits.shape)
    return jax.lax.map(inits_for, budgets)


@functools.partial(jax.jit, static_argnums=0)
def _search(cfg: _Config, model: FairModel, budgets: jax.Array, key: jax.Array, inits: jax.Array) -> WorstCase:
    """``inits (B, R, ...)``: each budget's restarts' starting L."""
    R = cfg.restarts
    batch_key = jax.random.fold_in(key, 1)

    def full_cfu(P):
        return cfu_of(model, fit_model_b(model.design, P, model.lam, newton_steps=30))

    if cfg.warm_start:
        def one_budget(L_prev, inputs):
            p, i = inputs
            ok = jax.vmap(lambda L: correlation_margin(cfg.P_fn(L, p), cfg.min_eig) >= 0)(L_prev)
            L0 = jnp.where(ok[:, None, None], L_prev, inits[0])
            L, t, hist = _runs(cfg, model, jnp.full((R,), p), L0, jax.random.fold_in(batch_key, i))
            return L, (L, t, hist)

        _, (L, t, hist) = jax.lax.scan(one_budget, inits[0], (budgets, jnp.arange(budgets.shape[0])))
    else:  # every budget x restart is one run of a single vmapped loop
        B = budgets.shape[0]
        L, t, hist = _runs(cfg, model, jnp.repeat(budgets, R), inits.reshape((B * R,) + inits.shape[2:]), batch_key)
        L, t, hist = (x.reshape((B, R) + x.shape[1:]) for x in (L, t, hist))

    def evaluate(p, L):
        P = cfg.P_fn(L, p)
        value = full_cfu(P)
        if cfg.snap is None:
            return value, P
        # tanh saturates: its P never reaches the budget's edge, only approaches it. Entries
        # within `snap` of the edge are also tried at the edge (the limit point), kept if that
        # P is usable and its CFU higher.
        off = 1 - jnp.eye(P.shape[0], dtype=P.dtype)
        near = (off > 0) & (jnp.abs(P) >= cfg.snap * p)
        edge = jnp.where(near, jnp.sign(P) * p, P)
        usable = correlation_margin(edge, cfg.min_eig) >= 0
        edge_value = jnp.where(usable, full_cfu(jnp.where(usable, edge, P)), -jnp.inf)
        better = edge_value > value
        return jnp.where(better, edge_value, value), jnp.where(better, edge, P)

    # One run after another (each full-data CFU is itself vmapped over chunks of units): the
    # nested vmap of 8 or more full-data evaluations stalled XLA:CPU on the NHS data.
    B = budgets.shape[0]
    flat_p = jnp.repeat(budgets, R)
    flat_L = L.reshape((B * R,) + L.shape[2:])
    values, Ps = jax.lax.map(lambda args: evaluate(*args), (flat_p, flat_L))
    values, Ps = values.reshape(B, R), Ps.reshape((B, R) + Ps.shape[1:])
    values = jnp.where(jnp.isfinite(values), values, -jnp.inf)
    best = jnp.argmax(values, axis=1)
    P_best = jnp.take_along_axis(Ps, best[:, None, None, None], axis=1)[:, 0]
    cfu_best = jnp.take_along_axis(values, best[:, None], axis=1)[:, 0]
    # Budgets are nested (|P_jk| <= p also satisfies every larger budget, same eigenvalue margin),
    # so a budget's worst case is at least that of every smaller one: take it where the search
    # at the larger budget found less (its restarts explore only near its own corners).
    within = budgets[None, :] <= budgets[:, None]  # (B, B): budget j is inside budget i
    source = jnp.argmax(jnp.where(within, cfu_best[None, :], -jnp.inf), axis=1)
    cfu_best, P_best = cfu_best[source], P_best[source]
    return WorstCase(budgets, cfu_best, P_best, jnp.linalg.eigvalsh(P_best), values, t, hist, cfg.min_eig)


def _corner_signs(m: int) -> tuple:
    """Every sign pattern of the off-diagonals as symmetric ±1 matrices with zero diagonal."""
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    out = []
    for bits in np.ndindex(*(2,) * len(pairs)):
        S = np.zeros((m, m))
        for (i, j), b in zip(pairs, bits):
            S[i, j] = S[j, i] = 1 - 2 * b
        out.append(tuple(map(tuple, S.tolist())))
    return tuple(out)


def sign_corners(m: int, p_max: float, min_eig: float = 1e-3) -> np.ndarray:
    """Every correlation matrix with all off-diagonals ``±p_max`` that is positive definite
    with smallest eigenvalue ≥ ``min_eig``: ``(k, m, m)`` (a brute-force check of the
    multivariate optimiser)."""
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    out = []
    for signs in np.ndindex(*(2,) * len(pairs)):
        P = np.eye(m)
        for (i, j), s in zip(pairs, signs):
            P[i, j] = P[j, i] = p_max * (1 - 2 * s)
        if np.linalg.eigvalsh(P)[0] >= min_eig:
            out.append(P)
    return np.asarray(out).reshape(-1, m, m)


class InverseBudget(struct.PyTreeNode):
    """The smallest budget whose worst-case CFU reaches ``level``: ``p_max`` (NaN when even
    ``hi`` does not reach it), the bracket ``[lo, hi]`` it was narrowed to, and the worst-case
    CFU at every budget evaluated."""

    level: float = struct.field(pytree_node=False)
    p_max: float = struct.field(pytree_node=False)
    lo: float = struct.field(pytree_node=False)
    hi: float = struct.field(pytree_node=False)
    evaluated: tuple = struct.field(pytree_node=False)


def inverse_budget(model: FairModel, level: float, *, key: jax.Array, hi: float = 0.99, tol: float = 1e-3,
                   grid: int = 8, **search) -> InverseBudget:
    """The smallest ``p_max`` whose worst-case CFU reaches ``level`` (e.g. the blind baseline's
    unfairness).

    A coarse curve first (``grid`` budgets up to ``hi``, one :func:`worst_case` call, monotone
    over the nested budgets) brackets the answer between two grid points; bisection then narrows
    it, each probe solved together with the grid budgets below it, so that a probe inherits the
    worst cases found at smaller budgets (a single budget's search can stop at a worse local
    maximum than the curve reaches). Assumes the worst case grows with the budget, as the
    feasible set does.
    """
    level = float(level)
    if not np.isfinite(level) or level < 0:
        _checks.fail("level", "a non-negative CFU level", repr(level))
    hi = check_budget(hi)
    grid = _checks.check_positive_int("grid", grid)
    budgets = np.linspace(0.0, hi, grid + 1)[1:]
    curve = np.asarray(worst_case(model, budgets, key=key, **search).cfu)
    evaluated = list(zip(budgets.tolist(), curve.tolist()))
    reached = np.flatnonzero(curve >= level)
    if reached.size == 0:
        return InverseBudget(level, float("nan"), hi, hi, tuple(evaluated))
    j = int(reached[0])
    below = budgets[:j]
    lo, hi = (float(below[-1]) if j else 0.0), float(budgets[j])
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        value = float(worst_case(model, np.append(below, mid), key=key, **search).cfu[-1])
        evaluated.append((mid, value))
        if value >= level:
            hi = mid
        else:
            lo = mid
    return InverseBudget(level, hi, lo, hi, tuple(evaluated))
