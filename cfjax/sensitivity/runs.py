"""The compiled programs of the worst-case search (:mod:`cfjax.sensitivity.search`): the runs,
and the screening of candidate starts.

A *run* is one budget and one start. Its search goes through four phases (:class:`Phase`), in
one ``while_loop`` (:func:`run_phases`) over every run of a call at once:

1. :attr:`Phase.ASCENT`: gradient ascent on CFU over the unconstrained ``L`` of a correlation
   parameterisation (optax; full batch or minibatches; early stopping; steps that would leave
   the usable set backtracked);
2. :attr:`Phase.ANSWER`: each run's answer evaluated on the full data;
3. :attr:`Phase.SNAPPED`: that answer tried on the boundary of the usable set, where it crawled
   short of it (with ``snap``);
4. :attr:`Phase.POLISH`: projected gradient ascent in P along the boundary (with ``polish``).

Each iteration of the loop asks the current phase which correlations to evaluate (its query:
:func:`ascent_query`, :func:`answer_query`, ...), evaluates CFU and its gradient there once for
every run (:func:`evaluate`, vmapped or in vmapped groups: :func:`_over_runs`), and hands the
values to the phase (its update: :func:`after_ascent`, :func:`after_answer`, ...), which returns
the next state and phase. So CFU and Model B's fit are traced and compiled once, whatever the
phase. The loop's state is a :class:`SearchState`; what every phase reads and none changes is a
:class:`Runs`.

*Screening* is a phase of its own, :attr:`Phase.SCREEN` (:func:`screen_query`,
:func:`after_screen`): the full-data CFU at given correlations, the values the restarts' starts
are chosen from (:mod:`cfjax.sensitivity.starts`); no ascent, no gradient. A loop started in it
(``screen``) does nothing else. It runs in the same loop, and so in the same compiled program as
the cold runs (:func:`cfjax.sensitivity.search` calls :func:`cold_runs` twice, to screen and to
search), so that it compiles nothing of its own and shares the search's one instance of CFU.
With ``warm_start`` the runs scan the sorted budgets (:func:`warm_runs`).
:mod:`cfjax.sensitivity.search` chooses the starts, calls these programs (split over devices)
and reads the answers.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cfjax import distributed, platform
from cfjax.sensitivity.cfu import cfu_of
from cfjax.sensitivity.correlation import boundary_scale, correlation_margin
from cfjax.sensitivity.fitting import FairModel
from cfjax.sensitivity.linear import _model_b, _start_log_sigma, _unpenalised
from cfjax.sensitivity.projection import _along_boundary, _project_usable
from cfjax.sensitivity.search_config import _Program
from cfjax.typing import Array, PyTree

_BACKTRACK = 0.5 ** np.arange(9)  # 1, 1/2, ..., 1/256 of the proposed step
_POLISH_START, _POLISH_STOP = 1e-2, 1e-5  # the polish's first and smallest step, in units of p_max
_EVAL_NEWTON = 30  # Newton steps of a full-data evaluation from scratch (as cfu() takes)


class Phase(enum.IntEnum):
    """The phases of a search's loop, in the order a run goes through them."""

    ASCENT = 0  # gradient steps in L
    ANSWER = 1  # the ascent's answer on the full data
    SNAPPED = 2  # that answer snapped onto the boundary
    POLISH = 3  # projected ascent in P along the boundary
    SCREEN = 4  # not a search: the CFU at given correlations (:func:`screen_query`)
    DONE = 5


# ------------------------------------------------------------------------------ evaluating CFU
def _over_runs(fn: Callable, args: Any, active: Array, skip: Callable) -> Any:
    """``fn`` over the leading (run) axis of ``args``: every run in one vmap, or, on CPU, in
    vmapped groups of :data:`cfjax.platform.RUN_GROUP` one after another (with several devices,
    within each device's share), a group with no ``active`` run skipped: its outputs
    ``skip(args)`` (placeholders of fn's output structure; the caller keeps what it had for
    those runs).

    Groups on CPU whatever XLA:CPU's scheduler: with its concurrency-optimised scheduler they
    avoid the stall :func:`cfjax.platform.run_group` documents, and with either they skip the
    runs with nothing to do, which one vmap would compute in every iteration: the search
    compiles for at least ``_RUN_SLOTS`` = 64 runs (padding beyond a call's own), and runs stop
    at different iterations (with the plain scheduler, the ten small searches of an
    inverse-budget call ran about 25 times faster grouped than in one vmap)."""
    n = jax.tree.leaves(args)[0].shape[0]
    group = platform.run_group(n)
    if group is None and platform.on_cpu() and n > platform.RUN_GROUP:
        group = platform.RUN_GROUP
    if group is None:
        return jax.vmap(fn)(args)
    args, active = distributed.pad_axis((args, active), group)
    blocks = jax.tree.map(lambda a: a.reshape((-1, group) + a.shape[1:]), (args, active))
    out = jax.lax.map(lambda b: jax.lax.cond(b[1].any(), jax.vmap(fn), skip, b[0]), blocks)
    return jax.tree.map(lambda a: a.reshape((-1,) + a.shape[2:])[:n], out)


class Probe(NamedTuple):
    """CFU evaluated at one correlation per run: ``value (R,)``, its gradient in P ``grad (R, m,
    m)`` (zeros where not asked for), and Model B's fitted ``log_sigma (R, m)``."""

    value: Array
    grad: Array
    log_sigma: Array


def _probe(
    model: FairModel,
    P: Array,
    log_sigma0: Array,
    newton_steps: Array,
    units: Array | None = None,
    gradient: bool | Array = True,
) -> tuple[Array, Array, Array]:
    """CFU at ``P`` (on the ``units``, default all), its gradient in P and Model B's log σ:
    ``(value, grad (m, m), log_sigma (m,))``, Model B's σ solve started at ``log_sigma0``
    with at most ``newton_steps`` (traced) Newton steps. Where ``gradient`` (a bool, or a
    traced one: the reverse pass is then a branch, run or skipped) is false the gradient is
    zeros, not computed. The one place the search calls CFU (through :func:`evaluate`)."""
    unpenalised = _unpenalised(model.lam)
    lam = None if unpenalised else model.lam

    def value(P):
        model_b = _model_b(model.design, P, lam, log_sigma0, newton_steps, unpenalised)
        return cfu_of(model, model_b, units), jnp.log(model_b.sigma)

    v, pullback, log_sigma = jax.vjp(value, P, has_aux=True)
    if gradient is True:
        return v, pullback(jnp.ones_like(v))[0], log_sigma
    grad = jax.lax.cond(gradient, lambda: pullback(jnp.ones_like(v))[0], lambda: jnp.zeros_like(P))
    return v, grad, log_sigma


def _probe_runs(
    model: FairModel,
    P: Array,
    log_sigma0: Array,
    newton_steps: Array,
    units: Array | None,
    active: Array,
    gradient: bool | Array = True,
) -> Probe:
    """:func:`_probe` for every run, ``P (R, m, m)`` from ``log_sigma0 (R, m)``, the groups
    without an ``active (R,)`` run skipped (:func:`_over_runs`; their values zero)."""

    def skip(block):
        return jnp.zeros(block[0].shape[:1], P.dtype), jnp.zeros_like(block[0]), block[1]

    return Probe(
        *_over_runs(
            lambda a: _probe(model, a[0], a[1], newton_steps, units, gradient),
            (P, log_sigma0),
            active,
            skip,
        )
    )


def _fresh_log_sigma(model: FairModel, R: int, dtype: Any) -> Array:
    """``(R, m)``: where a full-data evaluation starts Model B's σ solve (the ridge residuals',
    as :func:`~cfjax.sensitivity.cfu` does)."""
    lam = 0.0 if _unpenalised(model.lam) else model.lam
    return jnp.broadcast_to(_start_log_sigma(model.design, lam, dtype), (R, model.graph.m))


# ------------------------------------------------------------------------------- the search loop
@struct.dataclass
class Runs:
    """What every phase of a search reads and none changes, for ``R`` runs.

    ``model``: the working model; ``p_max (R,)``: each run's budget; ``used (R,)``: the runs
    in use (the others, padding, are skipped); ``fresh (R, m)``: where a full-data evaluation
    starts Model B's σ solve; ``batch_key``: the minibatches' key (step t draws with
    ``fold_in(batch_key, t)``, the same units for every run); ``cfg``: the static settings."""

    model: FairModel
    p_max: Array
    used: Array
    fresh: Array
    batch_key: Array
    cfg: _Program = struct.field(pytree_node=False)

    def P(self, L: Array) -> Array:
        """Each run's correlation ``(R, m, m)`` from its ``L (R, ...)``."""
        return jax.vmap(self.cfg.P_fn)(L, self.p_max)


@struct.dataclass
class SearchState:
    """The state of a search's loop over ``R`` runs (L of shape ``(R, *Ls)``, ``m`` features,
    ``S`` = the most ascent steps). The fields are in alphabetical order (the order of the
    loop's carry, as the compiled program has it); by what uses them:

    Loop: ``phase ()``, the :class:`Phase` every run is in; ``t ()``, the ascent steps taken.

    Ascent: ``L (R, *Ls)`` each run's iterate; ``opt_state`` its optimiser's state;
    ``log_sigma (R, m)`` Model B's log σ at the last step (the next step's warm start);
    ``track (R,)`` the objective tracked (log CFU, or with minibatches an exponential average of
    its minibatch values); ``best (R,)``, ``best_L (R, *Ls)`` the best tracked objective and its
    L; ``since (R,)`` steps since it last improved by ``tol``; ``active (R,)`` the runs still
    stepping; ``steps (R,)`` the steps each took; ``history (R, S)`` the objective at each step
    (NaN after stopping).

    Answer and snap: ``P_eval (R, m, m)``, ``v_eval (R,)`` the answer on the full data;
    ``snap_out (R, m, m)``, ``snap_ok (R,)`` that answer on the boundary and whether it is usable.

    Polish: ``P_best (R, m, m)``, ``v_best (R,)``, ``g_best (R, m, m)`` the best point so far,
    its CFU and gradient; ``eta (R,)`` the step, in units of p_max; ``polish_t (R,)`` the steps
    taken; ``polishing (R,)`` the runs still polishing."""

    L: Array
    P_best: Array
    P_eval: Array
    active: Array
    best: Array
    best_L: Array
    eta: Array
    g_best: Array
    history: Array
    log_sigma: Array
    opt_state: PyTree
    phase: Array
    polish_t: Array
    polishing: Array
    since: Array
    snap_ok: Array
    snap_out: Array
    steps: Array
    t: Array
    track: Array
    v_best: Array
    v_eval: Array

    if TYPE_CHECKING:  # flax.struct adds it

        def replace(self, **changes: Any) -> SearchState: ...


class Query(NamedTuple):
    """What a phase evaluates: a correlation per run ``P (R, m, m)``, where Model B's σ solve
    starts ``log_sigma0 (R, m)``, and the runs with work ``active (R,)`` (groups without any
    are skipped)."""

    P: Array
    log_sigma0: Array
    active: Array


def _per_run(mask: Array, new: Any, old: Any) -> Any:
    """``new`` where ``mask (R,)``, else ``old``, leaf by leaf (each leaf's leading axis R)."""
    return jax.tree.map(
        lambda a, b: jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b), new, old
    )


def _answer_L(runs: Runs, s: SearchState) -> Array:
    """Each run's answer in L: its best iterate; with minibatches its last (the tracked value is
    a noisy average)."""
    return s.best_L if runs.cfg.batch_size is None else s.L


def _ascent_step(
    cfg: _Program, L: Array, opt_state: PyTree, p: Array, value: Array, grad: Array
) -> tuple[Array, PyTree, Array]:
    """One ascent step of one run from CFU's ``value`` and ``grad`` in P at ``P(L, p)``:
    ``(L', optimiser state, objective)``. The optimiser's step is backtracked (halved, up to 8
    times) until P stays usable, and dropped when no fraction does."""
    if cfg.log_objective:  # log CFU (floored at the smallest normal float)
        tiny = jnp.finfo(L.dtype).tiny
        objective, cotangent = (
            jnp.log(jnp.maximum(value, tiny)),
            jnp.where(value > tiny, grad / value, 0.0),
        )
    else:
        objective, cotangent = value, grad
    g = -jax.vjp(lambda L: cfg.P_fn(L, p), L)[1](cotangent.astype(L.dtype))[0]
    g = jnp.where(jnp.asarray(np.asarray(cfg.mask)), jnp.nan_to_num(g), 0.0)
    updates, opt_state = cfg.make_optimizer().update(g, opt_state, L)
    candidates = L[None] + jnp.asarray(_BACKTRACK, L.dtype)[:, None, None] * updates[None]
    margins = jax.vmap(lambda c: correlation_margin(cfg.P_fn(c, p), cfg.min_eig))(candidates)
    usable = margins >= 0
    return jnp.where(usable.any(), candidates[jnp.argmax(usable)], L), opt_state, objective


def ascent_query(runs: Runs, s: SearchState) -> Query:
    """The ascent evaluates each active run's current P, Model B warm-started from its last step."""
    return Query(runs.P(s.L), s.log_sigma, s.active)


def after_ascent(runs: Runs, s: SearchState, P: Array, r: Probe) -> SearchState:
    """A step of every active run (the others frozen), its early stopping, and the answer
    phase once no run is active or the steps are spent."""
    cfg, t, active = runs.cfg, s.t, s.active
    L_new, opt_new, track_new = jax.vmap(functools.partial(_ascent_step, cfg))(
        s.L, s.opt_state, runs.p_max, r.value, r.grad
    )
    if cfg.batch_size is not None:  # an exponential average of the minibatch values
        track_new = jnp.where(t == 0, track_new, 0.9 * s.track + 0.1 * track_new)
    best = s.best
    # Log objective: an absolute gain in log CFU (a relative gain in CFU); raw: relative.
    threshold = cfg.tol if cfg.log_objective else cfg.tol * jnp.abs(best)
    improved = (best == -jnp.inf) | (track_new > best + threshold)
    shown = jnp.exp(track_new) if cfg.log_objective else track_new
    since = jnp.where(active, jnp.where(improved, 0, s.since + 1), s.since)
    L, opt_state, log_sigma, track = _per_run(
        active, (L_new, opt_new, r.log_sigma, track_new), (s.L, s.opt_state, s.log_sigma, s.track)
    )
    still = active & (since < cfg.patience)
    return s.replace(
        best_L=_per_run(active & (track_new > best), s.L, s.best_L),
        best=jnp.where(active, jnp.maximum(best, track_new), best),
        since=since,
        history=s.history.at[:, t].set(jnp.where(active, shown, jnp.nan)),
        steps=jnp.where(active, t + 1, s.steps),
        t=t + 1,
        L=L,
        opt_state=opt_state,
        log_sigma=log_sigma,
        track=track,
        active=still,
        phase=jnp.where((t + 1 < cfg.steps) & still.any(), Phase.ASCENT, Phase.ANSWER),
    )


def answer_query(runs: Runs, s: SearchState) -> Query:
    """Each run's answer on the full data, Model B solved from scratch."""
    return Query(runs.P(_answer_L(runs, s)), runs.fresh, runs.used)


def _polish_from(runs: Runs, s: SearchState, P: Array, value: Array, grad: Array) -> SearchState:
    """The answer so far (``P``, its value and gradient): the polish's first point (done
    without a polish)."""
    R = P.shape[0]
    s = s.replace(
        P_eval=P,
        v_eval=value,
        P_best=P,
        v_best=value,
        g_best=grad,
        eta=jnp.full((R,), _POLISH_START, P.dtype),
        polish_t=jnp.ones((R,), jnp.int32),
    )
    if not runs.cfg.polish_steps:
        return s.replace(phase=jnp.asarray(Phase.DONE))
    return s.replace(
        polishing=runs.used, phase=jnp.where(runs.used.any(), Phase.POLISH, Phase.DONE)
    )


def after_answer(runs: Runs, s: SearchState, P: Array, r: Probe) -> SearchState:
    """The answer's value; then its snapped point (with ``snap``), or the polish."""
    if runs.cfg.snap is None:
        return _polish_from(runs, s, P, r.value, r.grad)
    out, ok = jax.vmap(functools.partial(_snapped, runs.cfg))(P, runs.p_max)
    return s.replace(
        P_eval=P,
        v_eval=r.value,
        g_best=r.grad,
        snap_out=out,
        snap_ok=ok,
        phase=jnp.asarray(Phase.SNAPPED),
    )


def snapped_query(runs: Runs, s: SearchState) -> Query:
    """The snapped points, where usable (else the answer again), on the full data."""
    return Query(jnp.where(s.snap_ok[:, None, None], s.snap_out, s.P_eval), runs.fresh, runs.used)


def after_snapped(runs: Runs, s: SearchState, P: Array, r: Probe) -> SearchState:
    """The snapped point kept where usable and worse for fairness; then the polish."""
    snapped = jnp.where(s.snap_ok, r.value, -jnp.inf)
    better = snapped > s.v_eval
    return _polish_from(
        runs,
        s,
        jnp.where(better[:, None, None], s.snap_out, s.P_eval),
        jnp.where(better, snapped, s.v_eval),
        jnp.where(better[:, None, None], r.grad, s.g_best),
    )


def polish_query(runs: Runs, s: SearchState) -> Query:
    """Each run's next polish point: a step of ``eta · p_max`` from its best point along the
    boundary, following its gradient, projected back onto the usable set."""
    cfg = runs.cfg

    def step(P, g, p, eta):
        return _project_usable(_along_boundary(P, g, p, cfg.min_eig, eta * p), p, cfg.min_eig)

    return Query(jax.vmap(step)(s.P_best, s.g_best, runs.p_max, s.eta), runs.fresh, s.polishing)


def after_polish(runs: Runs, s: SearchState, P: Array, r: Probe) -> SearchState:
    """A polish step kept when it raises CFU and is usable (the step then doubled), else refused
    (the step quartered); a run stops after ``polish`` steps or below the smallest step.

    Near the margin CFU's gradient points mostly out of the usable set, so the ascent in L (its
    steps backtracked at the margin) crawls; the polish slides along the margin and the
    budget's edges and settles where they meet."""
    on = s.polishing
    ok = (
        on
        & (r.value > s.v_best)
        & jnp.isfinite(r.value)
        & (jax.vmap(lambda P: correlation_margin(P, runs.cfg.min_eig))(P) >= 0)
    )
    P, v, g = _per_run(ok, (P, r.value, r.grad), (s.P_best, s.v_best, s.g_best))
    eta = jnp.where(on, jnp.where(ok, 2 * s.eta, s.eta / 4), s.eta)
    t = s.polish_t + on.astype(s.polish_t.dtype)
    on = on & (t <= runs.cfg.polish_steps) & (eta >= _POLISH_STOP)
    return s.replace(
        P_best=P,
        v_best=v,
        g_best=g,
        eta=eta,
        polish_t=t,
        polishing=on,
        phase=jnp.where(on.any(), Phase.POLISH, Phase.DONE),
    )


def screen_query(runs: Runs, s: SearchState) -> Query:
    """Screening: the correlations given (the runs' "starts" hold them, ``(R, m, m)``), on the
    full data, Model B from scratch (as :func:`~cfjax.sensitivity.cfu` fits it). An L of
    another shape (cliques') is never screened: its query is a placeholder."""
    points = s.L if s.L.shape[1:] == (runs.model.graph.m,) * 2 else runs.P(s.L)
    return Query(points, runs.fresh, runs.used)


def after_screen(runs: Runs, s: SearchState, P: Array, r: Probe) -> SearchState:
    """The screened values, −inf for the runs not used; done."""
    return s.replace(
        P_eval=P, v_eval=jnp.where(runs.used, r.value, -jnp.inf), phase=jnp.asarray(Phase.DONE)
    )


#: Each phase's query and update, in :class:`Phase` order.
_PHASES = (
    (ascent_query, after_ascent),
    (answer_query, after_answer),
    (snapped_query, after_snapped),
    (polish_query, after_polish),
    (screen_query, after_screen),
)


def evaluate(runs: Runs, s: SearchState, q: Query) -> Probe:
    """CFU, its gradient and Model B's log σ at the phase's query, for every run: the ascent's
    with at most ``newton_steps`` warm-started Newton steps (on the step's minibatch, uniform
    draws with replacement shared by the runs, with ``batch_size``), the others' on the full
    data from scratch.

    The gradient is computed where it is used: the ascent's, and what the polish follows (the
    answer's, the snapped point's and its own); not the screening's, nor, without a polish, the
    answer's: on the full data it costs about three of CFU's values, and the screening
    evaluates hundreds of points."""
    cfg, model = runs.cfg, runs.model
    newton = jnp.where(s.phase == Phase.ASCENT, cfg.newton_steps, _EVAL_NEWTON)
    values_only = (s.phase == Phase.SCREEN) | ((s.phase != Phase.ASCENT) & (not cfg.polish_steps))
    if cfg.batch_size is None:
        return _probe_runs(model, q.P, q.log_sigma0, newton, None, q.active, ~values_only)
    units = jax.random.randint(
        jax.random.fold_in(runs.batch_key, s.t), (cfg.batch_size,), 0, model.data.n
    )
    return jax.lax.cond(
        s.phase == Phase.ASCENT,
        lambda: _probe_runs(model, q.P, q.log_sigma0, newton, units, q.active),
        lambda: _probe_runs(model, q.P, q.log_sigma0, newton, None, q.active, ~values_only),
    )


def _iteration(runs: Runs, s: SearchState) -> SearchState:
    """One iteration of the loop: the phase's query, CFU there, the phase's update."""
    q = jax.lax.switch(s.phase, [functools.partial(query, runs) for query, _ in _PHASES], s)
    r = evaluate(runs, s, q)
    r = r._replace(value=r.value.astype(q.P.dtype), grad=r.grad.astype(q.P.dtype))
    return jax.lax.switch(
        s.phase, [functools.partial(update, runs) for _, update in _PHASES], s, q.P, r
    )


def _initial_state(runs: Runs, L0: Array, first: Array) -> SearchState:
    """Every run at the start of phase ``first`` (no run in use: done)."""
    R, dtype, m = L0.shape[0], L0.dtype, runs.model.graph.m
    minus_inf = jnp.full((R,), -jnp.inf, dtype)
    Ps = jnp.broadcast_to(jnp.eye(m, dtype=dtype), (R, m, m))
    return SearchState(
        phase=jnp.where(runs.used.any(), first, Phase.DONE),
        t=jnp.asarray(0, jnp.int32),
        L=L0,
        opt_state=jax.vmap(runs.cfg.make_optimizer().init)(L0),
        log_sigma=jnp.broadcast_to(jnp.log(runs.model.model_a.sigma), (R, m)).astype(dtype),
        track=minus_inf,
        best=minus_inf,
        best_L=L0,
        since=jnp.zeros((R,), jnp.int32),
        active=runs.used,
        steps=jnp.zeros((R,), jnp.int32),
        history=jnp.full((R, runs.cfg.steps), jnp.nan, dtype),
        P_eval=Ps,
        v_eval=minus_inf,
        snap_out=Ps,
        snap_ok=jnp.zeros((R,), bool),
        P_best=Ps,
        v_best=minus_inf,
        g_best=jnp.zeros_like(Ps),
        eta=jnp.full((R,), _POLISH_START, dtype),
        polish_t=jnp.zeros((R,), jnp.int32),
        polishing=jnp.zeros((R,), bool),
    )


def run_phases(
    cfg: _Program,
    model: FairModel,
    p_max: Array,
    L0: Array,
    batch_key: Array,
    used: Array,
    fallback: Array,
    screen: bool | Array = False,
) -> tuple[Array, Array, Array, Array, Array]:
    """R runs, run r for budget ``p_max[r]`` from ``L0[r]`` (or from ``fallback[r]`` where
    ``L0[r]`` is not usable or not finite; the runs not ``used``, padding, skipped), every phase
    in one ``while_loop``: ``(values (R,), P (R, m, m), L (R, ...), steps (R,), history (R,
    S))``, the value −inf for a run not used; L is the ascent's answer (a warm start's next
    start).

    Where ``screen`` (a bool, or a traced one), the loop starts in :attr:`Phase.SCREEN`
    instead of the ascent: ``L0`` holds correlations ``(R, m, m)`` and the values are their
    full-data CFU (:func:`screen_query`), P the points, no steps taken."""
    R = L0.shape[0]
    start_ok = screen | (
        jax.vmap(lambda L, p: correlation_margin(cfg.P_fn(L, p), cfg.min_eig) >= 0)(L0, p_max)
        & jnp.all(jnp.isfinite(L0), axis=tuple(range(1, L0.ndim)))
    )
    L0 = jnp.where(start_ok.reshape((R,) + (1,) * (L0.ndim - 1)), L0, fallback)
    runs = Runs(model, p_max, used, _fresh_log_sigma(model, R, L0.dtype), batch_key, cfg)
    first = jnp.where(screen, Phase.SCREEN, Phase.ASCENT)
    s = jax.lax.while_loop(
        lambda s: s.phase != Phase.DONE,
        functools.partial(_iteration, runs),
        _initial_state(runs, L0, first),
    )
    better = s.v_best > s.v_eval
    values = jnp.where(used, jnp.where(better, s.v_best, s.v_eval), -jnp.inf)
    P = jnp.where(better[:, None, None], s.P_best, s.P_eval)
    return values, P, _answer_L(runs, s), s.steps, s.history


def _snapped(cfg: _Program, P: Array, p: Array) -> tuple[Array, Array]:
    """A run's answer ``P`` tried on the boundary: ``(P', usable)``. tanh saturates: its P
    never reaches the budget's edge, only approaches it, and backtracking stops short of the
    margin. Entries within ``snap`` of the edge go to the edge (the limit point), then the
    whole P, when it is within ``snap`` of the boundary along its ray from I, onto the
    boundary."""
    snap = cast(float, cfg.snap)  # called only with a snap
    eye = jnp.eye(P.shape[0], dtype=P.dtype)
    near = (eye == 0) & (jnp.abs(P) >= snap * p)
    edge = jnp.where(near, jnp.sign(P) * p, P)
    edge = jnp.where(correlation_margin(edge, cfg.min_eig) >= 0, edge, P)
    s = boundary_scale(edge - eye, p, cfg.min_eig)
    out = eye + jnp.clip(jnp.where(s * snap <= 1, s, 1) * (edge - eye), -p, p)
    return out, correlation_margin(out, cfg.min_eig) >= 0


# ----------------------------------------------------------------------- the programs' entries
# Each takes the arrays split over devices first, then the shared ones: the order in which
# :func:`cfjax.distributed.map_batch` passes them (:class:`Bound` binds the settings).
def cold_runs(
    cfg: _Program,
    p: Array,
    L0: Array,
    fallback: Array,
    used: Array,
    model: FairModel,
    batch_key: Array,
    screen: Array,
) -> tuple[Array, Array, Array, Array]:
    """Runs ``(N,)`` each from its own budget ``p`` and start ``L0`` (``fallback`` where not
    usable): ``(values (N,), P (N, m, m), steps (N,), history (N, S))``, every run in one loop
    (:func:`run_phases`; those not ``used``, padding, skipped: value −inf). Where ``screen``
    (traced), the screening instead: ``L0`` holds correlations ``(N, m, m)``, the values are
    their full-data CFU. Screening and search are one compiled program, called twice (the
    screening compiles nothing of its own, and shares the search's one instance of CFU)."""
    values, P, _, steps, history = run_phases(cfg, model, p, L0, batch_key, used, fallback, screen)
    return values, P, steps, history


def warm_runs(
    cfg: _Program,
    L0: Array,
    fallback: Array,
    used: Array,
    model: FairModel,
    budgets: Array,
    count: Array,
    batch_key: Array,
) -> tuple[Array, Array, Array, Array]:
    """The curriculum for restarts ``(r,)`` from ``L0 (r, ...)`` (those not ``used``, padding,
    skipped): a scan over the sorted budgets (the first ``count`` of their slots), each run
    starting from its previous budget's final L (where usable); ``(values (r, B), P (r, B, m,
    m), steps (r, B), history (r, B, S))``."""
    r, m = L0.shape[0], model.graph.m

    def one_budget(L_prev, inputs):
        p, i = inputs
        ok = jax.vmap(lambda L: correlation_margin(cfg.P_fn(L, p), cfg.min_eig) >= 0)(L_prev)
        start = jnp.where(ok[:, None, None], L_prev, L0)

        def skip(_):
            return (
                jnp.full((r,), -jnp.inf, L0.dtype),
                jnp.broadcast_to(jnp.eye(m, dtype=L0.dtype), (r, m, m)),
                start,
                jnp.zeros((r,), jnp.int32),
                jnp.full((r, cfg.steps), jnp.nan, L0.dtype),
            )

        def run(start):
            return run_phases(
                cfg,
                model,
                jnp.full((r,), p),
                start,
                jax.random.fold_in(batch_key, i),
                used,
                fallback,
                jnp.asarray(False),
            )

        out = jax.lax.cond(i < count, run, skip, start)
        return out[2], (out[0], out[1], out[3], out[4])

    _, out = jax.lax.scan(
        one_budget, L0, (budgets, jnp.arange(budgets.shape[0], dtype=jnp.int32))
    )  # (B, r, ...)
    first, second, third, fourth = (jnp.swapaxes(x, 0, 1) for x in out)
    return first, second, third, fourth


@dataclasses.dataclass(frozen=True)
class Bound:
    """``fn`` with the search's static settings bound as its first argument, the rest passed as
    they come: hashable by ``(fn, cfg)``, so a jit cache keyed on it compiles once per settings
    (:func:`functools.partial` hashes by identity)."""

    fn: Callable
    cfg: _Program

    def __call__(self, *args: Any) -> Any:
        return self.fn(self.cfg, *args)
