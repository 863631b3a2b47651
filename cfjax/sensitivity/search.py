"""The worst case within a confounding budget (paper 001, Algorithm 1; definitions §3), and the
inverse question.

For each budget ``p_max`` and each restart, gradient ascent on CFU over the unconstrained ``L``
of a correlation parameterisation, with optax: full batch or minibatches (uniform draws), early
stopping on the (smoothed) objective, and Model B's σ warm-started from the previous step. The
whole ``p_max`` grid × restarts runs as one jitted, vmapped program (or, with ``warm_start``, a
scan over the sorted budgets — the paper's curriculum — vmapped over restarts); with several
devices the runs are split over them (``mesh``, :func:`cfjax.distributed.map_batch`), each
device running its share. The numbers of budgets and restarts are data, not shapes: the budgets,
restarts and runs are padded to slots of a power of two
(:func:`cfjax.sensitivity.search_config.slots`), the padding masked and its groups of runs
skipped, so a new count reuses the compiled programs.

Worst cases sit on the boundary of the usable set — a budget's edge ``|P_jk| = p_max`` or the
eigenvalue margin ``λ_min(P) = min_eig`` — often at one of several local maxima, and often at a
corner where the edges and the margin meet. So the restarts start where the maxima are: points
on that boundary (the sign corners, scaled back along their ray from I onto the margin where
they are not usable; the margin's corners, where all entries but one sit at ±p_max; random rays
from I and along the budget's edges; :mod:`cfjax.sensitivity.starts`) are screened by their CFU,
and the restarts start from the best distinct ones.

A step never leaves the usable set: a proposed ``L`` whose P has smallest eigenvalue below
``min_eig`` is backtracked (halving the step up to 8 times) and, if no fraction is usable, the
step is dropped. Backtracked steps crawl along the margin, so each restart ends with a polish in
P itself: projected gradient ascent along the boundary on the full-data CFU (the geometry in
:mod:`cfjax.sensitivity.projection`). The answer for
each budget is the best restart's, with that P and its eigenvalues; how far the best two
restarts' answers are apart is reported (and warned about beyond a factor), as a check on the
search's convergence. The parameterisations of P by L are in
:mod:`cfjax.sensitivity.parameterisation`, the inverse question in :mod:`cfjax.sensitivity.inverse`.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax.sharding import Mesh

from cfjax import _checks, distributed
from cfjax import platform
from cfjax._core.keys import as_key
from cfjax._results import headline, strict_plain as plain
from cfjax.sensitivity.cfu import cfu_at_zero_correlation, cfu_of, negligible_cfu
from cfjax.sensitivity.correlation import boundary_scale, check_budget, correlation_margin
from cfjax.sensitivity.diagnostics import FLOOR_SHARE, ConvergenceWarning, ShrinkageWarning, floor_dominates
from cfjax.sensitivity.linear import fit_model_b
from cfjax.sensitivity.parameterisation import _parameterisation
from cfjax.sensitivity.problem import FairModel
from cfjax.sensitivity.projection import _along_boundary, _corner_signs, _margin_lines, _project_usable
from cfjax.sensitivity.search_config import _Config, slots
from cfjax.sensitivity.starts import _initial_L

__all__ = ["WorstCase", "worst_case", "ConvergenceWarning", "paper_optimizer"]


def _over_runs(fn: Callable, args: Any, active: jax.Array, skip: Callable) -> Any:
    """``fn`` over the leading (run) axis of ``args``: every run in one vmap, or in vmapped
    groups one after another on XLA:CPU (:func:`cfjax.platform.run_group`, which explains
    why; with several devices the groups apply within each device's share), a group with no
    ``active`` run skipped: its outputs ``skip(args)`` (placeholders of fn's output structure;
    the caller keeps what it had for those runs)."""
    n = jax.tree.leaves(args)[0].shape[0]
    group = platform.run_group(n)
    if group is None:
        return jax.vmap(fn)(args)
    args, active = distributed.pad_axis((args, active), group)
    blocks = jax.tree.map(lambda a: a.reshape((-1, group) + a.shape[1:]), (args, active))
    out = jax.lax.map(lambda b: jax.lax.cond(b[1].any(), jax.vmap(fn), skip, b[0]), blocks)
    return jax.tree.map(lambda a: a.reshape((-1,) + a.shape[2:])[:n], out)


def _search_mesh(mesh: Any) -> Mesh | None:
    """The ``mesh=`` argument resolved (:func:`cfjax.distributed.as_mesh`; None: one device),
    its devices this process's own (the search runs where its model is)."""
    where = distributed.as_mesh(mesh)
    if where is None:
        return None
    foreign = [d for d in where.devices.flat if d.process_index != jax.process_index()]
    if foreign:
        _checks.fail("mesh", "devices of this process (the search runs where its model is)",
                     f"{len(foreign)} device(s) of other processes, e.g. {foreign[0]}")
    return where


_BACKTRACK = 0.5 ** np.arange(9)  # 1, 1/2, ..., 1/256 of the proposed step
_POLISH_START, _POLISH_STOP = 1e-2, 1e-5  # the polish's first and smallest step, in units of p_max


@struct.dataclass
class WorstCase:
    """Result of :func:`worst_case`, one row per budget.

    ``p_max (B,)``; ``cfu (B,)``: the worst case found (full data, best restart, and never
    below a smaller budget's, whose P is also feasible here); ``P (B, m, m)``
    and ``eigenvalues (B, m)`` (ascending) of that correlation; ``restart_cfu (B, R)``: every
    restart's answer (−inf for a restart that found no usable P); ``restart_ratio (B,)``: the
    convergence diagnostic, the best restart's answer over the second best's (1 when two
    restarts agree on the worst case, large when it was found by one restart only; +inf when
    no other restart found a positive CFU, NaN with a single restart); ``steps (B, R)``: steps
    taken before stopping; ``history (B, R, S)``: the objective tracked at each step (NaN after
    stopping); ``min_eig``: the margin used; ``cfu_at_zero_correlation``: the CFU at P = I,
    the floor of the curve (P = I is within every budget), 0 only without a ridge penalty: at
    λ > 0 the ridge's shrinkage artefact, not unfairness caused by confounding
    (:func:`~cfjax.sensitivity.cfu_at_zero_correlation`; None in a WorstCase built by hand).

    A pytree (``jit``/``vmap`` carry it); :meth:`to_dict` gives plain Python for keeping, and the
    ``repr`` is one short line with the largest worst case and its budget.
    """

    p_max: jax.Array
    cfu: jax.Array
    P: jax.Array
    eigenvalues: jax.Array
    restart_cfu: jax.Array
    restart_ratio: jax.Array
    steps: jax.Array
    history: jax.Array
    min_eig: float = struct.field(pytree_node=False)
    cfu_at_zero_correlation: float | None = struct.field(pytree_node=False, default=None)

    def to_dict(self, history: bool = False) -> dict[str, Any]:
        """Every field as JSON-serialisable plain Python (floats, nested lists; steps as ints),
        non-finite numbers as None (a restart without a usable P, a ratio with one restart).
        ``history (B, R, steps)`` only when asked: it is the bulk of the result."""
        out = {name: plain(getattr(self, name)) for name in
               ("p_max", "cfu", "P", "eigenvalues", "restart_cfu", "restart_ratio", "steps")}
        out["min_eig"] = float(self.min_eig)
        out["cfu_at_zero_correlation"] = plain(self.cfu_at_zero_correlation)
        if history:
            out["history"] = plain(self.history)
        return out

    def __repr__(self) -> str:
        shape = tuple(np.shape(self.restart_cfu))
        try:
            cfu, p = np.asarray(self.cfu, np.float64), np.asarray(self.p_max, np.float64)
            if cfu.ndim != 1:
                raise TypeError  # batched (vmapped) results: shapes only
            i = int(np.nanargmax(np.where(np.isfinite(cfu), cfu, -np.inf)))
            ratio = np.asarray(self.restart_ratio, np.float64)
            worst = (f"worst cfu={headline(cfu[i])} at p_max={headline(p[i])}, "
                     f"p_max in [{headline(p.min())}, {headline(p.max())}], "
                     f"max restart_ratio={headline(np.nanmax(ratio)) if np.isfinite(ratio).any() else 'nan'}")
        except Exception:  # traced or batched: shapes only
            worst = f"cfu {tuple(np.shape(self.cfu))}"
        floor = "" if self.cfu_at_zero_correlation is None else \
            f", cfu at P=I={headline(self.cfu_at_zero_correlation)}"
        return (f"WorstCase(budgets={shape[-2] if len(shape) >= 2 else '?'}, restarts={shape[-1] if shape else '?'}, "
                f"m={np.shape(self.P)[-1]}, {worst}{floor}, min_eig={self.min_eig:g})")


def paper_optimizer() -> optax.GradientTransformation:
    """Paper 001's optimiser: SGD, learning rate 100, Nesterov momentum 0.9 (use with
    ``batch_size=4096``, one epoch and ``warm_start=True``)."""
    return optax.sgd(100.0, momentum=0.9, nesterov=True)



def worst_case(model: FairModel, p_max: Any, *, key: Any, restarts: int = 4, steps: int = 500,
               optimizer: optax.GradientTransformation | None = None, batch_size: int | None = None,
               patience: int = 50, tol: float = 1e-4, min_eig: float = 1e-3, parameterisation: str = "tanh",
               cliques: Any = None, warm_start: bool = False, init_scale: float = 0.1,
               newton_steps: int = 8, log_objective: bool = True, snap: float | None = 0.99,
               screen_corners: bool = True, boundary_starts: int = 16, polish: int = 30,
               warn_ratio: float | None = 10.0, mesh: Any = None) -> WorstCase:
    """Maximise CFU over correlations within each budget (paper 001, Algorithm 1).

    Args:
      model: the fitted working model (:func:`cfjax.sensitivity.fit`).
      p_max: one budget or a 1-d grid, each in [0, 1).
      key: randomness for the restarts' initial L, the random boundary starts and the
        minibatches: a typed key (``jax.random.key``), raw key data or an int seed.
      restarts: restarts per budget.
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
        or ``"pd"`` (:func:`~cfjax.sensitivity.pd_correlation`: every P within the budget with
        smallest eigenvalue ≥ ``min_eig``, and only those). ``cliques``: a ``(m, c)`` membership
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
      snap: the tanh parameterisation only approaches the boundary, and backtracked steps stop
        short of the margin, so at the end each restart's P is also tried on the boundary: its
        off-diagonals within a factor ``snap`` of ±p_max at exactly ±p_max (the limit point),
        then, when it lies within a factor ``snap`` of the boundary along its ray from I, on
        the boundary along that ray (the budget's edge or the eigenvalue margin); kept when
        usable and worse for fairness. None disables it.
      screen_corners: the objective has several local maxima, on the boundary of the usable
        set, so before the ascent candidate starts on that boundary are screened by their CFU
        and the restarts start from the best ones that differ by more than 0.1·p_max in some
        entry (the rest from the paper's random initialisation): every sign corner (all
        off-diagonals ±p_max; with at most 5 features), scaled back toward I onto the
        eigenvalue margin where it is not usable; with at most 3 features the margin's corners
        (all off-diagonals but one at ±p_max, that one where the margin cuts its line, found
        by bisection on eigenvalues); and ``boundary_starts`` random rays from I (off-diagonal
        directions uniform in [−1, 1]) stopped at the budget's edge or the margin, and as many
        along the edge faces (one entry held at ±p_max, the faces in turn). Not with cliques;
        with ``warm_start`` for the first budget only. The restarts beyond the distinct
        candidates start near the best ones again (the paper's random spread added to their
        L). False: every restart from the random initialisation.
      boundary_starts: how many random rays are screened from I (and as many along the edges).
      polish: at most this many steps of projected gradient ascent on the full-data CFU that
        finish every restart, in P itself: each step follows the gradient along the boundary
        (entries at the budget's edge held, the margin's normal removed), is projected back
        onto the usable set and kept only if it raises CFU, so that it slides along the margin
        and the edges and settles where they meet (where the ascent in L, its steps
        backtracked at the margin, crawls). 0 disables it; not with cliques (it would move the
        pairs they hold at zero).
      warn_ratio: warn (:class:`ConvergenceWarning`) when at some budget the best restart's
        CFU exceeds the second best's by more than this factor (the worst case then rests on
        one restart; ``restart_ratio`` in the result is that ratio). None never warns. A
        budget where no restart ended with a finite CFU (its ``cfu`` is −inf) always warns.
      mesh: where the runs go: None (one device, the default placement), a device count (the
        first ones), a sequence of this process's devices, or a one-axis
        ``jax.sharding.Mesh`` (:func:`cfjax.distributed.as_mesh`). The runs (budgets × restarts;
        with ``warm_start`` the restarts, each scanning the budgets), and the screening of the
        budgets' starts, are split over the devices by :func:`cfjax.distributed.map_batch`
        (padded to a multiple of the device count), each device running its share (all its
        runs in one vmap; on XLA:CPU with its concurrency-optimised scheduler on, in vmapped
        groups: :func:`cfjax.platform.run_group`); the answer is the one-device answer
        (to rounding).

    Returns:
      :class:`WorstCase`, budgets in the order given (sorted when ``warm_start``), on one device
      (the first of ``mesh``), with the CFU at zero correlation (``cfu_at_zero_correlation``,
      the curve's floor). When that floor is more than a tenth of the curve's range (the floor
      included) it warns (:class:`~cfjax.sensitivity.ShrinkageWarning`): the ridge penalty, not
      confounding, then carries the curve (definitions §3.5).
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
    boundary_starts, polish = _count("boundary_starts", boundary_starts), _count("polish", polish)
    if warn_ratio is not None and not (isinstance(warn_ratio, (int, float)) and warn_ratio >= 1):
        _checks.fail("warn_ratio", "None or a factor >= 1", repr(warn_ratio))
    key = as_key(key)
    where = _search_mesh(mesh)
    m = model.graph.m
    P_fn, shape, mask = _parameterisation(parameterisation, cliques, m, float(min_eig))
    screen = bool(screen_corners) and P_fn.seed is not None
    config = _Config(P_fn=P_fn, shape=shape, mask=tuple(map(tuple, mask.tolist())),
                     optimizer=optimizer or _ADAM, steps=steps, batch_size=batch_size,
                     patience=patience, tol=float(tol), min_eig=float(min_eig), init_scale=float(init_scale),
                     newton_steps=newton_steps, warm_start=bool(warm_start),
                     restart_slots=slots(restarts, _RESTART_SLOTS),
                     log_objective=bool(log_objective), snap=None if snap is None else float(snap),
                     corners=_corner_signs(m) if screen and m <= 5 else (),
                     boundary_starts=boundary_starts if screen else 0,
                     polish_steps=polish if cliques is None and m > 1 else 0,
                     margin_corners=_margin_lines(m) if screen and m <= 3 else ())
    dtype = model.data.X.dtype
    # optax mixes weak and integer types internally: scope the standard promotion rules.
    with jax.numpy_dtype_promotion("standard"):
        count = budgets.size  # the budgets in slots, padded with the last one: a count is data
        budgets = jnp.asarray(np.pad(budgets, (0, slots(count, _BUDGET_SLOTS) - count), mode="edge"), dtype)
        inits = _initial_L(config, model, budgets, count, restarts, key, where)
        out = _search(config, where, model, budgets, count, restarts, key, inits)
    out = out.replace(cfu_at_zero_correlation=cfu_at_zero_correlation(model))
    _warn_if_none_finite(out)
    if warn_ratio is not None:
        _warn_if_apart(out, float(warn_ratio))
    _warn_if_floor(out, model)
    return out


def _count(name: str, value: Any) -> int:
    """A non-negative integer argument, or ValidationError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        _checks.fail(name, "a non-negative integer", repr(value))
    return int(value)


def _warn_if_none_finite(out: WorstCase) -> None:
    """:class:`ConvergenceWarning` naming the budgets where no restart ended with a finite CFU
    (their worst case is −inf: the search found nothing there, not a CFU of −inf), with the
    likely cause in float32."""
    bad = np.flatnonzero(~np.isfinite(np.asarray(out.cfu)))
    if bad.size:
        shown = ", ".join(f"{float(out.p_max[i]):.4g}" for i in bad[:8]) + (
            f" and {bad.size - 8} more" if bad.size > 8 else "")
        dtype = np.asarray(out.cfu).dtype
        why = (" In float32, Model B's normal equations lose their precision near the boundary of the "
               "usable correlations, and CFU comes out NaN: call jax.config.update(\"jax_enable_x64\", True) "
               "at the start of the program." if dtype == np.float32 else
               " CFU was NaN or infinite at every restart's end: check the model's data for extreme values.")
        warnings.warn(f"worst_case: no restart ended with a finite CFU at p_max = {shown}; its cfu is -inf "
                      f"(nothing found, restart_cfu shows each restart).{why}", ConvergenceWarning, stacklevel=3)


def _warn_if_floor(out: WorstCase, model: FairModel) -> None:
    """:class:`ShrinkageWarning` when the CFU at zero correlation is more than a tenth of the
    curve's range: the ridge's floor, not confounding, then carries the curve."""
    floor = out.cfu_at_zero_correlation
    curve = np.asarray(out.cfu, np.float64)
    if floor_dominates(floor, curve, negligible_cfu(model)):
        values = np.append(curve[np.isfinite(curve)], floor)
        lam = model.lam if not isinstance(model.lam, tuple) else list(model.lam)
        warnings.warn(f"worst_case: the CFU at zero error correlation (P = I) is {floor:.4g}, more than "
                      f"{FLOOR_SHARE:g} x the curve's range ({values.min():.4g} to {values.max():.4g}): at the ridge "
                      f"penalty lambda = {lam} that floor is the penalty's shrinkage artefact (CFU at P = I is 0 only at "
                      "lambda = 0), not unfairness caused by confounding; read the curve as its rise above the floor "
                      "(cfu_at_zero_correlation), or refit with a smaller lambda or Settings(model_a=\"ml\"), whose "
                      "Model A is Model B at P = I", ShrinkageWarning, stacklevel=3)


def _warn_if_apart(out: WorstCase, factor: float) -> None:
    """:class:`ConvergenceWarning` naming the budgets whose best two restarts are more than
    ``factor`` apart."""
    ratio = np.asarray(out.restart_ratio)
    apart = np.flatnonzero(ratio > factor)  # NaN (one restart) is never apart
    if apart.size:
        shown = ", ".join(f"p_max = {float(out.p_max[i]):.4g} ({ratio[i]:.3g}x)" for i in apart[:8])
        more = f" and {apart.size - 8} more" if apart.size > 8 else ""
        warnings.warn(f"worst_case: the best restart's CFU exceeds the second best's by more than {factor:g}x at "
                      f"{shown}{more}: that worst case rests on one restart, and more restarts or steps may find "
                      "a larger one (restart_cfu holds every restart's value; warn_ratio=None silences this)",
                      ConvergenceWarning, stacklevel=3)


_ADAM = optax.adam(0.05)


def _runs(cfg: _Config, model: FairModel, p_max: jax.Array, L0: jax.Array, key: jax.Array, used: jax.Array):
    """R runs of the ascent, run r for budget ``p_max[r]`` from ``L0[r]`` (the runs not
    ``used``, padding, never step): ``(L (R, ...), steps (R,), history (R, S))``.

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

    def step_all(L, opt_state, log_sigma, p, units, active):
        return _over_runs(lambda args: step_one(*args, units), (L, opt_state, log_sigma, p), active,
                          lambda args: (*args[:3], jnp.zeros_like(args[3])))  # value: a budget's dtype

    def freeze(active, new, old):
        return jax.tree.map(lambda a, b: jnp.where(active.reshape((R,) + (1,) * (a.ndim - 1)), a, b), new, old)

    def body(state):
        L, opt_state, log_sigma, track, best, best_L, since, t, history, active, steps = state
        # Uniform draws with replacement, shared by the runs.
        units = None if bs is None else jax.random.randint(jax.random.fold_in(key, t), (bs,), 0, n)
        L_new, opt_new, sigma_new, value = step_all(L, opt_state, log_sigma, p_max, units, active)
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
            jnp.asarray(0, jnp.int32), jnp.full((R, cfg.steps), jnp.nan, dtype), used,
            jnp.zeros((R,), jnp.int32))
    state = jax.lax.while_loop(cond, body, init)
    L_last, best_L, history, steps = state[0], state[5], state[8], state[10]
    # Minibatch runs keep the last iterate (their tracked value is a noisy average).
    return (best_L if bs is None else L_last), steps, history



def _cold_runs(cfg: _Config, model: FairModel, batch_key: jax.Array, p: jax.Array, L0: jax.Array,
               used: jax.Array):
    """Runs ``(N,)`` each from its own budget ``p`` and start ``L0``: ``(values (N,), P (N, m,
    m), steps (N,), history (N, S))``, every run in one vmapped loop (those not ``used``,
    padding, skipped: value −inf)."""
    L, t, hist = _runs(cfg, model, p, L0, batch_key, used)
    values, Ps = _finish(cfg, model, p, L, used)
    return values, Ps, t, hist


def _warm_runs(cfg: _Config, model: FairModel, budgets: jax.Array, count: jax.Array, batch_key: jax.Array,
               L0: jax.Array, used: jax.Array):
    """The curriculum for restarts ``(r,)`` from ``L0 (r, ...)`` (those not ``used``, padding,
    skipped): a scan over the sorted budgets (the first ``count`` of their slots), each run
    starting from its previous budget's final L (where usable); ``(values (r, B), P (r, B, m,
    m), steps (r, B), history (r, B, S))``."""
    r = L0.shape[0]

    def one_budget(L_prev, inputs):
        p, i = inputs
        ok = jax.vmap(lambda L: correlation_margin(cfg.P_fn(L, p), cfg.min_eig) >= 0)(L_prev)
        start = jnp.where(ok[:, None, None], L_prev, L0)

        def skip(_):
            return start, jnp.zeros((r,), jnp.int32), jnp.full((r, cfg.steps), jnp.nan, L0.dtype)

        out = jax.lax.cond(i < count, lambda s: _runs(cfg, model, jnp.full((r,), p), s,
                                                      jax.random.fold_in(batch_key, i), used), skip, start)
        return out[0], out

    _, (L, t, hist) = jax.lax.scan(one_budget, L0, (budgets, jnp.arange(budgets.shape[0])))  # (B, r, ...)
    B = budgets.shape[0]
    in_use = ((jnp.arange(B) < count)[:, None] & used[None, :]).reshape(-1)
    values, Ps = _finish(cfg, model, jnp.repeat(budgets, r), L.reshape((B * r,) + L.shape[2:]), in_use)
    values, Ps = values.reshape(B, r), Ps.reshape((B, r) + Ps.shape[1:])
    return tuple(jnp.swapaxes(x, 0, 1) for x in (values, Ps, t, hist))


def _finish(cfg: _Config, model: FairModel, p: jax.Array, L: jax.Array, used: jax.Array):
    """Each run's full-data CFU and P ``((N,), (N, m, m))`` from its final ``L``: snapped to the
    boundary (:func:`_evaluate`) and polished (:func:`_polish`); −inf for a run not ``used``."""
    full_cfu = functools.partial(_full_cfu, model)

    def evaluate(args):
        p, L, on = args
        skip = (jnp.asarray(-jnp.inf, L.dtype), jnp.eye(cfg.shape[0], dtype=L.dtype))
        return jax.lax.cond(on, lambda: _evaluate(cfg, full_cfu, p, L), lambda: skip)

    # One run after another (each full-data CFU is itself vmapped over chunks of units): the
    # nested vmap of 8 or more full-data evaluations stalled XLA:CPU on the NHS data.
    values, Ps = jax.lax.map(evaluate, (p, L, used))
    if cfg.polish_steps:
        values, Ps = _over_runs(lambda args: _polish(cfg, full_cfu, *args), (p, Ps, values), used,
                                lambda args: (args[2], args[1]))
    return jnp.where(used, values, -jnp.inf), Ps


def _evaluate(cfg: _Config, full_cfu: Callable, p: jax.Array, L: jax.Array):
    """A run's full-data CFU and P from its final ``L`` (with ``snap``: also tried on the
    boundary, kept when usable and worse)."""
    P = cfg.P_fn(L, p)
    if cfg.snap is None:
        return full_cfu(P), P
    # tanh saturates: its P never reaches the budget's edge, only approaches it, and
    # backtracking stops short of the margin. Entries within `snap` of the edge are also
    # tried at the edge (the limit point), then the whole P, when it is within `snap` of
    # the boundary along its ray from I, on the boundary; kept if usable and worse.
    eye = jnp.eye(P.shape[0], dtype=P.dtype)
    near = (eye == 0) & (jnp.abs(P) >= cfg.snap * p)
    edge = jnp.where(near, jnp.sign(P) * p, P)
    edge = jnp.where(correlation_margin(edge, cfg.min_eig) >= 0, edge, P)
    s = boundary_scale(edge - eye, p, cfg.min_eig)
    out = eye + jnp.clip(jnp.where(s * cfg.snap <= 1, s, 1) * (edge - eye), -p, p)
    usable = correlation_margin(out, cfg.min_eig) >= 0
    # Both CFUs by one loop over the two matrices: CFU is traced (and compiled) once.
    value, out_value = jax.lax.map(full_cfu, jnp.stack([P, jnp.where(usable, out, P)]))
    out_value = jnp.where(usable, out_value, -jnp.inf)
    better = out_value > value
    return jnp.where(better, out_value, value), jnp.where(better, out, P)


def _full_cfu(model: FairModel, P: jax.Array) -> jax.Array:
    """CFU of correlation ``P`` on all the data (Model B solved from scratch)."""
    return cfu_of(model, fit_model_b(model.design, P, model.lam, newton_steps=30))


@dataclasses.dataclass(frozen=True)
class _ColdRuns:
    """:func:`_cold_runs` as :func:`cfjax.distributed.map_batch` calls it (split runs first,
    then the shared model and minibatch key), hashable by its settings."""

    cfg: _Config

    def __call__(self, p: jax.Array, L0: jax.Array, used: jax.Array, model: FairModel, batch_key: jax.Array):
        return _cold_runs(self.cfg, model, batch_key, p, L0, used)


@dataclasses.dataclass(frozen=True)
class _WarmRuns:
    """:func:`_warm_runs` as :func:`cfjax.distributed.map_batch` calls it (split restarts first,
    then the shared model, budgets and minibatch key), hashable by its settings."""

    cfg: _Config

    def __call__(self, L0: jax.Array, used: jax.Array, model: FairModel, budgets: jax.Array, count: jax.Array,
                 batch_key: jax.Array):
        return _warm_runs(self.cfg, model, budgets, count, batch_key, L0, used)


def _search(cfg: _Config, where: Mesh | None, model: FairModel, budgets: jax.Array, count: int, restarts: int,
            key: jax.Array, inits: jax.Array) -> WorstCase:
    """``budgets (B',)``: the budgets in their slots, the first ``count`` in use; ``inits (B',
    R', ...)``: each budget's restarts' starting L, the first ``restarts`` in use. The runs are
    split over the devices of ``where`` (None: one device) by
    :func:`cfjax.distributed.map_batch`, the model shared: every budget x restart is a run (in
    slots of :func:`~cfjax.sensitivity.search_config.slots`, the padding skipped), or, with
    ``warm_start``, every restart (each scanning the budgets). The counts are data: the
    programs are the same for every count within the slots. The answer is gathered on
    ``where``'s first device."""
    R = cfg.restart_slots
    batch_key = jax.random.fold_in(key, 1)
    if cfg.warm_start:
        used = jnp.arange(R) < restarts
        out = distributed.map_batch(_WarmRuns(cfg), inits[0], used,
                                    shared=(model, budgets, jnp.asarray(count, jnp.int32), batch_key), mesh=where)
        slot = None
    else:
        runs = count * restarts  # packed, budget by budget, then padding: no group of padding is run
        n = slots(runs, _RUN_SLOTS)
        k = np.arange(n)
        b, r = np.where(k < runs, k // restarts, 0), np.where(k < runs, k % restarts, 0)
        slot = np.stack([np.where(k < runs, b, budgets.shape[0]), r])  # padding: past the grid, dropped
        flat = inits.reshape((-1,) + inits.shape[2:])
        out = distributed.map_batch(_ColdRuns(cfg), budgets[b], flat[b * R + r], jnp.asarray(k < runs),
                                    shared=(model, batch_key), mesh=where)
    if where is not None:
        out, budgets = jax.device_put((out, budgets), where.devices.flat[0])
    fields = _best(cfg.warm_start, R, budgets, jnp.asarray(count, jnp.int32), jnp.asarray(restarts, jnp.int32),
                   None if slot is None else jnp.asarray(slot, jnp.int32), *out)
    # The slots in use, on the host: slicing there compiles nothing.
    B = count
    fields = [np.asarray(f)[:B] for f in fields]
    for i in (4, 6, 7):  # restart_cfu, steps, history: (B, R, ...)
        fields[i] = fields[i][:, :restarts]
    return WorstCase(*jax.device_put(fields, None if where is None else where.devices.flat[0]), cfg.min_eig)


_RUN_SLOTS = 64  # the fewest run slots the search compiles for (16 budgets x 4 restarts)
_BUDGET_SLOTS, _RESTART_SLOTS = 16, 4


@functools.partial(jax.jit, static_argnums=(0, 1))
def _best(warm_start: bool, R: int, budgets: jax.Array, count: jax.Array, restarts: jax.Array,
          slot: jax.Array | None, values: jax.Array, Ps: jax.Array, t: jax.Array, hist: jax.Array) -> tuple:
    """The fields of :class:`WorstCase` (all but ``min_eig``) from every run's answer, for the
    slots ``(B', R)`` (the first ``count`` budgets and ``restarts`` restarts in use): each
    budget's best restart, never below a smaller budget's. The runs come as ``(R, B', ...)``
    with ``warm_start`` (restarts scanning budgets), else packed, run k at ``slot[:, k]`` (its
    budget and restart; padding past the grid, dropped)."""
    B = budgets.shape[0]
    if warm_start:
        values, Ps, t, hist = (jnp.swapaxes(x, 0, 1) for x in (values, Ps, t, hist))
    else:
        def grid(x, fill):
            empty = jnp.full((B, R) + x.shape[1:], fill, x.dtype)
            return empty.at[slot[0], slot[1]].set(x, mode="drop")

        values, Ps, t, hist = grid(values, -jnp.inf), grid(Ps, 0), grid(t, 0), grid(hist, jnp.nan)
    in_use = (jnp.arange(B) < count)[:, None] & (jnp.arange(R) < restarts)[None, :]
    values = jnp.where(jnp.isfinite(values) & in_use, values, -jnp.inf)
    best = jnp.argmax(values, axis=1)
    P_best = jnp.take_along_axis(Ps, best[:, None, None, None], axis=1)[:, 0]
    cfu_best = jnp.take_along_axis(values, best[:, None], axis=1)[:, 0]
    # Budgets are nested (|P_jk| <= p also satisfies every larger budget, same eigenvalue margin),
    # so a budget's worst case is at least that of every smaller one: take it where the search
    # at the larger budget found less (its restarts explore only near its own corners).
    within = (budgets[None, :] <= budgets[:, None]) & (jnp.arange(B) < count)[None, :]  # budget j inside i
    source = jnp.argmax(jnp.where(within, cfu_best[None, :], -jnp.inf), axis=1)
    cfu_best, P_best = cfu_best[source], P_best[source]
    return (budgets, cfu_best, P_best, jnp.linalg.eigvalsh(P_best), values, _restart_ratio(values, restarts),
            t, hist)


def _polish(cfg: _Config, full_cfu: Callable, p: jax.Array, P0: jax.Array, value: jax.Array):
    """Projected gradient ascent along the boundary on the full-data CFU from a usable ``P0``:
    ``(value, P)``.

    Each step moves P by ``η p_max`` along the boundary (:func:`_along_boundary`: the gradient
    less what would leave the usable set) and projects back (:func:`_project_usable`); a step
    that does not raise CFU is refused and η quartered, an accepted one doubles η. Near the
    margin CFU's gradient points mostly out of the usable set, so an ascent that follows it
    (the search in L, backtracked at the margin) crawls; this one slides along the margin and
    the budget's edges and settles where they meet.
    """
    value_and_grad = jax.value_and_grad(full_cfu)

    # One evaluation per iteration, of the candidate the previous one proposed (the first: P0
    # itself, taken as it is), so that CFU and its gradient are traced, and compiled, once.
    def body(state):
        P, v, g, eta, t, cand = state
        vc, gc = value_and_grad(cand)
        first = t == 0
        ok = first | ((vc > v) & jnp.isfinite(vc) & (correlation_margin(cand, cfg.min_eig) >= 0))
        P, v, g = jnp.where(ok, cand, P), jnp.where(ok, vc, v), jnp.where(ok, gc, g)
        eta = jnp.where(first, eta, jnp.where(ok, 2 * eta, eta / 4))
        cand = _project_usable(_along_boundary(P, g, p, cfg.min_eig, eta * p), p, cfg.min_eig)
        return P, v, g, eta, t + 1, cand

    def cond(state):  # until the steps are spent or refused down to nothing (t = 0: P0's evaluation)
        return (state[4] <= cfg.polish_steps) & (state[3] >= _POLISH_STOP)

    init = (P0, jnp.asarray(-jnp.inf, P0.dtype), jnp.zeros_like(P0), jnp.asarray(_POLISH_START, P0.dtype), 0, P0)
    P, v, _, _, _, _ = jax.lax.while_loop(cond, body, init)
    better = v > value
    return jnp.where(better, v, value), jnp.where(better, P, P0)


def _restart_ratio(values: jax.Array, restarts: Any = None) -> jax.Array:
    """Each budget's best restart's value over the second best's, ``(B,)`` from ``(B, R)`` (of
    which the first ``restarts`` are in use, the rest −inf; default: all)."""
    if values.shape[1] < 2:
        return jnp.full(values.shape[:1], jnp.nan, values.dtype)
    top = -jnp.sort(-values, axis=1)
    best, second = top[:, 0], top[:, 1]
    ratio = jnp.where(second > 0, best / jnp.where(second > 0, second, 1), jnp.where(best > 0, jnp.inf, 1.0))
    return ratio if restarts is None else jnp.where(restarts < 2, jnp.nan, ratio)
