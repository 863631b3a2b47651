"""One compiled program of the worst-case search (:mod:`cfjax.sensitivity.search`): the runs.

A run is one budget and one start: gradient ascent on CFU over the unconstrained ``L`` of a
correlation parameterisation (optax; full batch or minibatches; early stopping; steps that
would leave the usable set backtracked), the evaluation of its answer on the full data, the
answer snapped onto the boundary where it crawled short of it, and the polish along the
boundary. These are phases of one ``while_loop`` (:func:`_runs`) that calls CFU and its
gradient once per iteration (:func:`_probe`), over every run of a call at once (vmapped, or in
vmapped groups on XLA:CPU: :func:`_over_runs`), so CFU and Model B's fit are traced and
compiled once. The same program also only *screens* (the CFU at given points), and, with
``warm_start``, scans the sorted budgets (:func:`_warm_runs`). :mod:`cfjax.sensitivity.search`
chooses the starts, calls this program (split over devices) and reads the answers.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import distributed, platform
from cfjax.sensitivity.cfu import cfu_of
from cfjax.sensitivity.correlation import boundary_scale, correlation_margin
from cfjax.sensitivity.linear import _model_b, _start_log_sigma, _unpenalised
from cfjax.sensitivity.problem import FairModel
from cfjax.sensitivity.projection import _along_boundary, _project_usable
from cfjax.sensitivity.search_config import _Config

def _over_runs(fn: Callable, args: Any, active: jax.Array, skip: Callable) -> Any:
    """``fn`` over the leading (run) axis of ``args``: every run in one vmap, or, on CPU, in
    vmapped groups of :data:`cfjax.platform.RUN_GROUP` one after another (with several devices,
    within each device's share), a group with no ``active`` run skipped: its outputs
    ``skip(args)`` (placeholders of fn's output structure; the caller keeps what it had for
    those runs).

    Groups on CPU whatever XLA:CPU's scheduler: with its concurrency-optimised scheduler they
    avoid the stall :func:`cfjax.platform.run_group` documents, and with either they skip the
    runs with nothing to do, which one vmap would compute in every iteration: the search
    compiles for at least ``_RUN_SLOTS`` = 64 runs (padding beyond a call's own), and runs stop
    at different iterations. With the plain scheduler on 2 cores, the ten small searches of
    tests/test_sensitivity_cfu.py's inverse-budget test took 2 s grouped, 54 s in one vmap."""
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



_BACKTRACK = 0.5 ** np.arange(9)  # 1, 1/2, ..., 1/256 of the proposed step
_POLISH_START, _POLISH_STOP = 1e-2, 1e-5  # the polish's first and smallest step, in units of p_max
_ASCENT, _ANSWER, _SNAPPED, _POLISH, _SCREEN, _DONE = range(6)  # the phases of a search's one loop
_EVAL_NEWTON = 30  # Newton steps of a full-data evaluation from scratch (as cfu() takes)


def _probe(model: FairModel, P: jax.Array, log_sigma0: jax.Array, newton_steps: jax.Array,
           units: jax.Array | None = None, gradient: Any = True):
    """CFU at ``P`` (on the ``units``, default all), its gradient in P and Model B's log σ:
    ``(value, grad (m, m), log_sigma (m,))``, Model B's σ solve started at ``log_sigma0``
    with at most ``newton_steps`` (traced) Newton steps. Where ``gradient`` (a bool, or a
    traced one: the reverse pass is then a branch, run or skipped) is false the gradient is
    zeros, not computed. The one place the search calls CFU: every phase of its loop
    (:func:`_runs`) goes through this, so CFU, Model B's fit and their derivatives are traced
    and compiled once (twice with minibatches: on the batch, and on all units)."""
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


def _runs(cfg: _Config, model: FairModel, p_max: jax.Array, L0: jax.Array, key: jax.Array, used: jax.Array,
          fallback: jax.Array, screen: jax.Array):
    """R runs, run r for budget ``p_max[r]`` from ``L0[r]`` (or from ``fallback[r]`` where
    ``L0[r]`` is not usable; the runs not ``used``, padding, skipped): ``(values (R,), P (R, m,
    m), L (R, ...), steps (R,), history (R, S))``, the value −inf for a run not used; L is the
    ascent's answer (a warm start's next start).

    With ``screen`` (a traced bool) the program only screens: ``L0`` holds correlations P
    ``(R, m, m)``, and the values are their full-data CFU (Model B from scratch, as :func:`cfu`
    fits it), the *screen* phase alone. The restarts' starts are chosen from those values on
    the host (:mod:`cfjax.sensitivity.starts`), so screening and search are one compiled program
    called twice.

    One loop in phases, each iteration one call of CFU and its gradient (:func:`_probe`) for
    every run at once (in vmapped groups, :func:`_over_runs`, a group with nothing to do
    skipped):

    1. *ascent*: gradient steps in L while any run is active (its objective still improving,
       the steps not spent), every run stepping together so that all see the same minibatch
       (common random numbers; the gather is done once per step). A run that has stopped is
       frozen while the others go on; Model B's σ is warm-started from the run's previous step.
    2. *answer*: each run's final P evaluated on the full data, Model B solved from scratch.
    3. *snapped* (with ``snap``): that P tried on the boundary (:func:`_snapped`), kept when
       usable and worse for fairness.
    4. *polish* (with ``polish``): projected gradient ascent in P along the boundary
       (:mod:`~cfjax.sensitivity.projection`): each step follows the gradient less what would
       leave the usable set and projects back; a step that does not raise CFU is refused and
       its size quartered, an accepted one doubles it. Near the margin CFU's gradient points
       mostly out of the usable set, so the ascent in L (its steps backtracked at the margin)
       crawls; this slides along the margin and the budget's edges and settles where they meet.
    """
    n = model.data.n
    opt = cfg.optimizer
    mask = jnp.asarray(np.asarray(cfg.mask))
    bs = cfg.batch_size
    R = L0.shape[0]
    dtype = L0.dtype
    m = model.graph.m
    eye = jnp.eye(m, dtype=dtype)
    # A full-data evaluation starts Model B's σ solve where cfu() does (the ridge residuals').
    fresh = jnp.broadcast_to(_start_log_sigma(model.design, 0.0 if _unpenalised(model.lam) else model.lam, dtype),
                             (R, m))
    tiny = jnp.finfo(dtype).tiny
    P_of = jax.vmap(cfg.P_fn)
    # A start whose P is not usable (or not finite) is replaced by the run's random start.
    start_ok = screen | (jax.vmap(lambda L, p: correlation_margin(cfg.P_fn(L, p), cfg.min_eig) >= 0)(L0, p_max)
                         & jnp.all(jnp.isfinite(L0), axis=tuple(range(1, L0.ndim))))
    L0 = jnp.where(start_ok.reshape((R,) + (1,) * (L0.ndim - 1)), L0, fallback)

    def probe_all(Q, log_sigma0, newton_steps, units, active, gradient=True):
        return _over_runs(lambda a: _probe(model, a[0], a[1], newton_steps, units, gradient),
                          (Q, log_sigma0), active,
                          lambda a: (jnp.zeros(a[0].shape[:1], dtype), jnp.zeros_like(a[0]), a[1]))

    def answer_L(s):  # minibatch runs keep the last iterate (their tracked value is a noisy average)
        return s["best_L"] if bs is None else s["L"]

    def polish_step(s):
        """Each run's next polish point: a step of ``eta · p_max`` from its best point along the
        boundary, following its gradient, projected back onto the usable set."""
        return jax.vmap(lambda P, g, p, eta: _project_usable(_along_boundary(P, g, p, cfg.min_eig, eta * p),
                                                             p, cfg.min_eig))(s["P_best"], s["g_best"], p_max, s["eta"])

    # What each phase evaluates: (P (R, m, m), Model B's σ start (R, m), runs with work).
    queries = [lambda s: (P_of(s["L"], p_max), s["log_sigma"], s["active"]),
               lambda s: (P_of(answer_L(s), p_max), fresh, used),
               lambda s: (jnp.where(s["snap_ok"][:, None, None], s["snap_out"], s["P_eval"]), fresh, used),
               lambda s: (polish_step(s), fresh, s["polishing"]),
               # screening: L0 holds the points (an L of another shape, cliques', is never screened)
               lambda s: (s["L"] if L0.shape[1:] == (m, m) else P_of(s["L"], p_max), fresh, used)]

    def ascend(L, opt_state, p, value, grad):
        """One ascent step of one run from CFU's value and gradient in P at ``P(L, p)``."""
        if cfg.log_objective:  # log CFU (floored at the smallest normal float)
            objective, cotangent = jnp.log(jnp.maximum(value, tiny)), jnp.where(value > tiny, grad / value, 0.0)
        else:
            objective, cotangent = value, grad
        g = -jax.vjp(lambda L: cfg.P_fn(L, p), L)[1](cotangent.astype(dtype))[0]
        g = jnp.where(mask, jnp.nan_to_num(g), 0.0)
        updates, opt_state = opt.update(g, opt_state, L)
        candidates = L[None] + jnp.asarray(_BACKTRACK, L.dtype)[:, None, None] * updates[None]
        margins = jax.vmap(lambda c: correlation_margin(cfg.P_fn(c, p), cfg.min_eig))(candidates)
        usable = margins >= 0
        return jnp.where(usable.any(), candidates[jnp.argmax(usable)], L), opt_state, objective

    def freeze(active, new, old):
        return jax.tree.map(lambda a, b: jnp.where(active.reshape((R,) + (1,) * (a.ndim - 1)), a, b), new, old)

    def after_ascent(s, Q, value, grad, log_sigma):
        t, active = s["t"], s["active"]
        L_new, opt_new, track_new = jax.vmap(ascend)(s["L"], s["opt_state"], p_max, value, grad)
        if bs is not None:  # an exponential average of the minibatch values
            track_new = jnp.where(t == 0, track_new, 0.9 * s["track"] + 0.1 * track_new)
        best = s["best"]
        # Log objective: an absolute gain in log CFU (a relative gain in CFU); raw: relative.
        threshold = cfg.tol if cfg.log_objective else cfg.tol * jnp.abs(best)
        improved = (best == -jnp.inf) | (track_new > best + threshold)
        shown = jnp.exp(track_new) if cfg.log_objective else track_new
        s = dict(s, best_L=freeze(active & (track_new > best), s["L"], s["best_L"]),
                 best=jnp.where(active, jnp.maximum(best, track_new), best),
                 since=jnp.where(active, jnp.where(improved, 0, s["since"] + 1), s["since"]),
                 history=s["history"].at[:, t].set(jnp.where(active, shown, jnp.nan)),
                 steps=jnp.where(active, t + 1, s["steps"]), t=t + 1)
        s["L"], s["opt_state"], s["log_sigma"], s["track"] = freeze(
            active, (L_new, opt_new, log_sigma, track_new), (s["L"], s["opt_state"], s["log_sigma"], s["track"]))
        s["active"] = active & (s["since"] < cfg.patience)
        s["phase"] = jnp.where((s["t"] < cfg.steps) & s["active"].any(), _ASCENT, _ANSWER)
        return s

    def polish_from(s, P, value, grad):
        """The answer so far (``P``, its value and gradient): the polish's first point."""
        s = dict(s, P_eval=P, v_eval=value, P_best=P, v_best=value, g_best=grad,
                 eta=jnp.full((R,), _POLISH_START, dtype), polish_t=jnp.ones((R,), jnp.int32))
        if not cfg.polish_steps:
            return dict(s, phase=jnp.asarray(_DONE))
        s["polishing"] = used
        return dict(s, phase=jnp.where(used.any(), _POLISH, _DONE))

    def after_answer(s, Q, value, grad, log_sigma):
        if cfg.snap is None:
            return polish_from(s, Q, value, grad)
        out, ok = jax.vmap(lambda P, p: _snapped(cfg, P, p))(Q, p_max)
        return dict(s, P_eval=Q, v_eval=value, g_best=grad, snap_out=out, snap_ok=ok, phase=jnp.asarray(_SNAPPED))

    def after_snapped(s, Q, value, grad, log_sigma):
        snapped = jnp.where(s["snap_ok"], value, -jnp.inf)
        better = snapped > s["v_eval"]
        return polish_from(s, jnp.where(better[:, None, None], s["snap_out"], s["P_eval"]),
                           jnp.where(better, snapped, s["v_eval"]),
                           jnp.where(better[:, None, None], grad, s["g_best"]))

    def after_polish(s, Q, value, grad, log_sigma):
        on = s["polishing"]
        ok = on & (value > s["v_best"]) & jnp.isfinite(value) & (
            jax.vmap(lambda P: correlation_margin(P, cfg.min_eig))(Q) >= 0)
        P, v, g = (jnp.where(ok.reshape((R,) + (1,) * (a.ndim - 1)), a, b)
                   for a, b in ((Q, s["P_best"]), (value, s["v_best"]), (grad, s["g_best"])))
        eta = jnp.where(on, jnp.where(ok, 2 * s["eta"], s["eta"] / 4), s["eta"])
        t = s["polish_t"] + on.astype(s["polish_t"].dtype)
        on = on & (t <= cfg.polish_steps) & (eta >= _POLISH_STOP)
        return dict(s, P_best=P, v_best=v, g_best=g, eta=eta, polish_t=t, polishing=on,
                    phase=jnp.where(on.any(), _POLISH, _DONE))

    def after_screen(s, Q, value, grad, log_sigma):
        return dict(s, P_eval=Q, v_eval=jnp.where(used, value, -jnp.inf), phase=jnp.asarray(_DONE))

    updates = [after_ascent, after_answer, after_snapped, after_polish, after_screen]

    def body(s):
        phase = s["phase"]
        Q, log_sigma0, active = jax.lax.switch(phase, queries, s)
        newton = jnp.where(phase == _ASCENT, cfg.newton_steps, _EVAL_NEWTON)
        # The gradient is computed where it is used: the ascent's (on uniform draws with
        # replacement, shared by the runs, with minibatches) and what the polish follows (the
        # answer's, the snapped point's and its own), not the screening's nor, without a polish,
        # the answer's: on the full data it costs about three of CFU's values, and the screening
        # evaluates hundreds of points.
        values_only = (phase == _SCREEN) | ((phase != _ASCENT) & (not cfg.polish_steps))
        if bs is None:
            value, grad, log_sigma = probe_all(Q, log_sigma0, newton, None, active, ~values_only)
        else:
            units = jax.random.randint(jax.random.fold_in(key, s["t"]), (bs,), 0, n)
            value, grad, log_sigma = jax.lax.cond(
                phase == _ASCENT, lambda: probe_all(Q, log_sigma0, newton, units, active),
                lambda: probe_all(Q, log_sigma0, newton, None, active, ~values_only))
        return jax.lax.switch(phase, updates, s, Q, value.astype(dtype), grad.astype(dtype), log_sigma)

    minus_inf = jnp.full((R,), -jnp.inf, dtype)
    Ps = jnp.broadcast_to(eye, (R, m, m))
    init = dict(L=L0, opt_state=jax.vmap(opt.init)(L0),
                log_sigma=jnp.broadcast_to(jnp.log(model.model_a.sigma), (R, m)).astype(dtype),
                track=minus_inf, best=minus_inf, best_L=L0, since=jnp.zeros((R,), jnp.int32),
                t=jnp.asarray(0, jnp.int32), history=jnp.full((R, cfg.steps), jnp.nan, dtype), active=used,
                steps=jnp.zeros((R,), jnp.int32), phase=jnp.where(used.any(), jnp.where(screen, _SCREEN, _ASCENT), _DONE),
                P_eval=Ps, v_eval=minus_inf, snap_out=Ps, snap_ok=jnp.zeros((R,), bool),
                P_best=Ps, v_best=minus_inf, g_best=jnp.zeros_like(Ps), eta=jnp.full((R,), _POLISH_START, dtype),
                polish_t=jnp.zeros((R,), jnp.int32), polishing=jnp.zeros((R,), bool))
    s = jax.lax.while_loop(lambda s: s["phase"] != _DONE, body, init)
    better = s["v_best"] > s["v_eval"]
    values = jnp.where(used, jnp.where(better, s["v_best"], s["v_eval"]), -jnp.inf)
    P = jnp.where(better[:, None, None], s["P_best"], s["P_eval"])
    return values, P, answer_L(s), s["steps"], s["history"]


def _snapped(cfg: _Config, P: jax.Array, p: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A run's answer ``P`` tried on the boundary: ``(P', usable)``. tanh saturates: its P
    never reaches the budget's edge, only approaches it, and backtracking stops short of the
    margin. Entries within ``snap`` of the edge go to the edge (the limit point), then the
    whole P, when it is within ``snap`` of the boundary along its ray from I, onto the
    boundary."""
    eye = jnp.eye(P.shape[0], dtype=P.dtype)
    near = (eye == 0) & (jnp.abs(P) >= cfg.snap * p)
    edge = jnp.where(near, jnp.sign(P) * p, P)
    edge = jnp.where(correlation_margin(edge, cfg.min_eig) >= 0, edge, P)
    s = boundary_scale(edge - eye, p, cfg.min_eig)
    out = eye + jnp.clip(jnp.where(s * cfg.snap <= 1, s, 1) * (edge - eye), -p, p)
    return out, correlation_margin(out, cfg.min_eig) >= 0


def _cold_runs(cfg: _Config, model: FairModel, batch_key: jax.Array, p: jax.Array, L0: jax.Array,
               used: jax.Array, fallback: jax.Array, screen: jax.Array):
    """Runs ``(N,)`` each from its own budget ``p`` and start ``L0`` (``fallback`` where not
    usable): ``(values (N,), P (N, m, m), steps (N,), history (N, S))``, every run in one loop
    (those not ``used``, padding, skipped: value −inf); with ``screen``, the CFU at the
    points ``L0`` instead (:func:`_runs`)."""
    values, Ps, _, t, hist = _runs(cfg, model, p, L0, batch_key, used, fallback, screen)
    return values, Ps, t, hist


def _warm_runs(cfg: _Config, model: FairModel, budgets: jax.Array, count: jax.Array, batch_key: jax.Array,
               L0: jax.Array, used: jax.Array, fallback: jax.Array):
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
            return (jnp.full((r,), -jnp.inf, L0.dtype), jnp.broadcast_to(jnp.eye(m, dtype=L0.dtype), (r, m, m)),
                    start, jnp.zeros((r,), jnp.int32), jnp.full((r, cfg.steps), jnp.nan, L0.dtype))

        out = jax.lax.cond(i < count, lambda s: _runs(cfg, model, jnp.full((r,), p), s, jax.random.fold_in(batch_key, i),
                                                      used, fallback, jnp.asarray(False)), skip, start)
        return out[2], (out[0], out[1], out[3], out[4])

    _, out = jax.lax.scan(one_budget, L0, (budgets, jnp.arange(budgets.shape[0], dtype=jnp.int32)))  # (B, r, ...)
    return tuple(jnp.swapaxes(x, 0, 1) for x in out)


@dataclasses.dataclass(frozen=True)
class _ColdRuns:
    """:func:`_cold_runs` as :func:`cfjax.distributed.map_batch` calls it (split runs first,
    then the shared model and minibatch key), hashable by its settings."""

    cfg: _Config

    def __call__(self, p: jax.Array, L0: jax.Array, fallback: jax.Array, used: jax.Array, model: FairModel,
                 batch_key: jax.Array, screen: jax.Array):
        return _cold_runs(self.cfg, model, batch_key, p, L0, used, fallback, screen)


@dataclasses.dataclass(frozen=True)
class _WarmRuns:
    """:func:`_warm_runs` as :func:`cfjax.distributed.map_batch` calls it (split restarts first,
    then the shared model, budgets and minibatch key), hashable by its settings."""

    cfg: _Config

    def __call__(self, L0: jax.Array, fallback: jax.Array, used: jax.Array, model: FairModel, budgets: jax.Array,
                 count: jax.Array, batch_key: jax.Array):
        return _warm_runs(self.cfg, model, budgets, count, batch_key, L0, used, fallback)
