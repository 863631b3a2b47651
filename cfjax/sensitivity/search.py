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
:mod:`cfjax.sensitivity.projection`). The ascent, the evaluation of each run's answer, its
snapping and the polish are phases of one loop that calls CFU and its gradient once per
iteration (:mod:`cfjax.sensitivity.runs`), so CFU and Model B's fit are traced and compiled once. The answer for
each budget is the best restart's, with that P and its eigenvalues. Restarts from different
starts often end at different local maxima, so a budget's worst case counts as *confirmed* when
a second restart agrees with the best to a relative ``confirm`` (1e-3); where the first round
leaves a budget unconfirmed, adaptive rounds add restarts there (next-best screened starts, and
near the best answer), one call of the same compiled program per round with those budgets as
data, until it is confirmed or ``max_rounds`` are spent; only then does the search warn
(:func:`_rounds`). The parameterisations of P by L are in
:mod:`cfjax.sensitivity.parameterisation`, the inverse question in :mod:`cfjax.sensitivity.inverse`.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from cfjax import _checks, distributed
from cfjax._core.keys import as_key
from cfjax._results import headline
from cfjax._results import strict_plain as plain
from cfjax.sensitivity import starts
from cfjax.sensitivity.cfu import cfu_at_zero_correlation, negligible_cfu
from cfjax.sensitivity.correlation import check_budget
from cfjax.sensitivity.diagnostics import (
    FLOOR_SHARE,
    ConvergenceWarning,
    ShrinkageWarning,
    floor_dominates,
)
from cfjax.sensitivity.fitting import FairModel
from cfjax.sensitivity.parameterisation import _parameterisation
from cfjax.sensitivity.projection import _corner_signs, _margin_lines
from cfjax.sensitivity.runs import Bound, cold_runs, warm_runs
from cfjax.sensitivity.search_config import (
    SearchConfig,
    _options,
    _Program,
    optimizer_spec,
    slots,
    with_deprecated_options,
)
from cfjax.typing import ArrayLike, KeyLike, Mesh, MeshLike

__all__ = ["WorstCase", "worst_case", "ConvergenceWarning", "SearchConfig", "paper_optimizer"]


def _search_mesh(mesh: MeshLike) -> Mesh | None:
    """The ``mesh=`` argument resolved (:func:`cfjax.distributed.as_mesh`; None: one device),
    its devices this process's own (the search runs where its model is)."""
    where = distributed.as_mesh(mesh)
    if where is None:
        return None
    foreign = [d for d in where.devices.flat if d.process_index != jax.process_index()]
    if foreign:
        _checks.fail(
            "mesh",
            "devices of this process (the search runs where its model is)",
            f"{len(foreign)} device(s) of other processes, e.g. {foreign[0]}",
        )
    return where


@struct.dataclass
class WorstCase:
    """Result of :func:`worst_case`, one row per budget.

    ``p_max (B,)``; ``cfu (B,)``: the worst case found (full data, best restart, and never
    below a smaller budget's, whose P is also feasible here); ``P (B, m, m)``
    and ``eigenvalues (B, m)`` (ascending) of that correlation; ``restart_cfu (B, R)``: every
    restart's answer in the first round (−inf for a restart that found no usable P);
    ``round_cfu (B, E)``: the answers of the restarts the adaptive rounds added (4 a round
    at each budget not yet confirmed; NaN where a budget had no such round; E = 0 when no
    budget needed one); ``rounds (B,)``: the adaptive rounds spent at each budget (0: the
    first round confirmed it); ``confirmed (B,)``: whether two restarts (of either kind) agree
    on the worst case to the search's ``confirm`` (relative), or it is rounding;
    ``restart_ratio (B,)``: the convergence diagnostic, the best restart's answer over the
    second best's, over every restart run there, the rounds' included (at most ``1 + confirm``
    where confirmed; large when the worst case rests on one restart; +inf when no other restart
    found a positive CFU, NaN where a single restart ran); ``steps (B, R)``: steps taken
    before stopping, first round; ``history (B, R, S)``: the objective tracked at each step
    (NaN after stopping), first round; ``min_eig``: the margin used;
    ``cfu_at_zero_correlation``: the CFU at P = I, the floor of the curve (P = I is within
    every budget), 0 only without a ridge penalty: at λ > 0 the ridge's shrinkage artefact,
    not unfairness caused by confounding (:func:`~cfjax.sensitivity.cfu_at_zero_correlation`;
    None in a WorstCase built by hand, as are ``rounds``, ``round_cfu`` and ``confirmed``).

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
    rounds: jax.Array | None = None
    round_cfu: jax.Array | None = None
    confirmed: jax.Array | None = None

    def to_dict(self, history: bool = False) -> dict[str, Any]:
        """Every field as JSON-serialisable plain Python (floats, nested lists; steps and rounds
        as ints, confirmed as bools), non-finite numbers as None (a restart without a usable P or
        not run, a ratio with one restart).
        ``history (B, R, steps)`` only when asked: it is the bulk of the result."""
        out = {
            name: plain(getattr(self, name))
            for name in (
                "p_max",
                "cfu",
                "P",
                "eigenvalues",
                "restart_cfu",
                "restart_ratio",
                "steps",
            )
        }
        out["min_eig"] = float(self.min_eig)
        out["cfu_at_zero_correlation"] = plain(self.cfu_at_zero_correlation)
        for name in ("rounds", "round_cfu", "confirmed"):
            value = getattr(self, name)
            out[name] = (
                None
                if value is None
                else plain(np.asarray(value).tolist() if name == "confirmed" else value)
            )
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
            worst = (
                f"worst cfu={headline(cfu[i])} at p_max={headline(p[i])}, "
                f"p_max in [{headline(p.min())}, {headline(p.max())}], "
                f"max restart_ratio={headline(np.nanmax(ratio)) if np.isfinite(ratio).any() else 'nan'}"
            )
        except Exception:  # traced or batched: shapes only
            worst = f"cfu {tuple(np.shape(self.cfu))}"
        floor = (
            ""
            if self.cfu_at_zero_correlation is None
            else f", cfu at P=I={headline(self.cfu_at_zero_correlation)}"
        )
        return (
            f"WorstCase(budgets={shape[-2] if len(shape) >= 2 else '?'}, restarts={shape[-1] if shape else '?'}, "
            f"m={np.shape(self.P)[-1]}, {worst}{floor}, min_eig={self.min_eig:g})"
        )


def paper_optimizer() -> optax.GradientTransformation:
    """Paper 001's optimiser: SGD, learning rate 100, Nesterov momentum 0.9 (use with
    ``batch_size=4096``, one epoch and ``warm_start=True``). A search names it by its
    hyperparameters, ``SearchConfig(optimizer="sgd", learning_rate=100.0, momentum=0.9,
    nesterov=True)``, so that equal configurations compile once (this object, passed as
    ``SearchConfig(optimizer=paper_optimizer())``, is compared by identity)."""
    return optax.sgd(100.0, momentum=0.9, nesterov=True)


def _program(config: SearchConfig, m: int) -> _Program:
    """The static settings of the search's programs for ``config`` and a model of ``m``
    features: the parameterisation of P by L, what is screened, the slots of restarts."""
    P_fn, shape, mask = _parameterisation(
        config.parameterisation, config.cliques, m, config.min_eig
    )
    screen = config.screen_corners and P_fn.seed is not None
    return _Program(
        P_fn=P_fn,
        shape=shape,
        mask=tuple(map(tuple, mask.tolist())),
        optimizer=optimizer_spec(config),
        steps=config.steps,
        batch_size=config.batch_size,
        patience=config.patience,
        tol=config.tol,
        min_eig=config.min_eig,
        init_scale=config.init_scale,
        newton_steps=config.newton_steps,
        warm_start=config.warm_start,
        restart_slots=slots(config.restarts, _RESTART_SLOTS),
        log_objective=config.log_objective,
        snap=config.snap,
        corners=_corner_signs(m) if screen and m <= 5 else (),
        boundary_starts=config.boundary_starts if screen else 0,
        polish_steps=config.polish if config.cliques is None and m > 1 else 0,
        margin_corners=_margin_lines(m) if screen and m <= 3 else (),
    )


def worst_case(
    model: FairModel,
    p_max: ArrayLike,
    *,
    key: KeyLike,
    config: SearchConfig = SearchConfig(),
    mesh: MeshLike = None,
    **deprecated: Any,
) -> WorstCase:
    """Maximise CFU over correlations within each budget (paper 001, Algorithm 1).

    Example::

        wc = S.worst_case(model, [0.1, 0.5, 0.9], key=0, config=S.SearchConfig(restarts=8))

    Args:
      model: the fitted working model (:func:`cfjax.sensitivity.fit`).
      p_max: one budget or a 1-d grid, each in [0, 1).
      key: randomness for the restarts' initial L, the random boundary starts and the
        minibatches: a typed key (``jax.random.key``), raw key data or an int seed.
      config: the search's options (:class:`~cfjax.sensitivity.SearchConfig`: restarts, steps,
        optimizer, minibatches, early stopping, parameterisation, warm start, screening,
        snapping, polish, adaptive rounds, the warning's factor). Equal configurations reuse
        the compiled programs. In short: each restart ascends CFU by optax steps (backtracked
        so that P stays usable), from a screened start on the boundary of the usable set,
        then is snapped onto the boundary and polished along it; a budget's worst case is
        *confirmed* when a second restart's CFU is within a relative ``config.confirm`` of
        the best one's (or the best is rounding); where the first round leaves a budget
        unconfirmed the search spends more work there, a round at a time: 4 more restarts at
        each such budget (half from its next-best distinct screened boundary points, half near
        its best answer so far: that P with noise of 0.05·p_max, so that they climb back to
        it, or past it), every budget of the round in one call of the same compiled program
        (the budgets as data), until every budget is confirmed or ``config.max_rounds`` rounds
        are spent. ``rounds``, ``round_cfu`` and ``confirmed`` in the result say what was done.
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
    config = with_deprecated_options("worst_case", config, deprecated)
    if not isinstance(model, FairModel):
        _checks.fail("model", "a FairModel from cfjax.sensitivity.fit", type(model).__name__)
    budgets = np.atleast_1d(np.asarray(p_max, np.float64))
    if budgets.ndim != 1 or budgets.size == 0:
        _checks.fail("p_max", "a budget or a non-empty 1-d grid", f"shape {np.shape(p_max)}")
    for b in budgets:
        check_budget(b)
    if config.warm_start:
        budgets = np.sort(budgets)
    n = model.data.n
    if config.batch_size is not None and config.batch_size > n:
        _checks.fail("config.batch_size", f"at most the {n} units", repr(config.batch_size))
    key = as_key(key)
    where = _search_mesh(mesh)
    program = _program(config, model.graph.m)
    restarts, max_rounds = config.restarts, config.max_rounds
    dtype = model.data.X.dtype
    count = budgets.size  # the budgets in slots, padded with the last one: a count is data
    batch_key = jax.random.fold_in(key, 1)
    inits, fallback, zero, spares = starts.initial_L(
        program,
        budgets,
        restarts,
        key,
        dtype,
        _screening(program, where, model, batch_key, dtype),
        spare=_ROUND_RESTARTS // 2 * max_rounds,
    )
    slotted = slots(count, _BUDGET_SLOTS)
    grid = np.pad(budgets, (0, slotted - count), mode="edge").astype(dtype)
    inits = np.pad(inits, ((0, slotted - count),) + ((0, 0),) * (inits.ndim - 1), mode="edge")
    values, Ps, t, hist = _search(
        program, where, model, grid, count, restarts, batch_key, inits, fallback
    )
    budgets = grid[:count]
    more, more_P, rounds = _rounds(
        program,
        where,
        model,
        budgets,
        values,
        Ps,
        spares,
        batch_key,
        key,
        fallback,
        max_rounds,
        config.confirm,
        negligible_cfu(model),
    )
    every = np.concatenate([values, more], axis=1)
    cfu, P = _answer(budgets, every, np.concatenate([Ps, more_P], axis=1))
    fields = dict(
        p_max=budgets,
        cfu=cfu,
        P=P,
        eigenvalues=np.linalg.eigvalsh(P),
        restart_cfu=values,
        restart_ratio=_restart_ratio(every),
        steps=t,
        history=hist,
    )
    extra = dict(
        rounds=rounds,
        round_cfu=more,
        confirmed=_confirmed(every, cfu, config.confirm, negligible_cfu(model)),
    )
    place = None if where is None else where.devices.flat[0]
    out = WorstCase(
        **jax.device_put(fields, place),
        min_eig=config.min_eig,
        # The floor comes with the screened starts; without screening it is computed on its own.
        cfu_at_zero_correlation=zero if np.isfinite(zero) else cfu_at_zero_correlation(model),
        **jax.device_put(extra, place),
    )
    _warn_if_none_finite(out)
    if config.warn_ratio is not None:
        _warn_if_apart(out, config.warn_ratio, max_rounds)
    _warn_if_floor(out, model)
    return out


_ROUND_RESTARTS = 4  # restarts an adaptive round adds at each budget not yet confirmed


def _rounds(
    cfg: _Program,
    where: Mesh | None,
    model: FairModel,
    budgets: np.ndarray,
    values: np.ndarray,
    Ps: np.ndarray,
    spares: np.ndarray,
    batch_key: jax.Array,
    key: jax.Array,
    fallback: np.ndarray,
    max_rounds: int,
    confirm: float,
    negligible: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The adaptive rounds after the first (``values (B, R)``, ``Ps (B, R, m, m)``): while some
    budget's worst case is not confirmed (:func:`_confirmed`) and rounds are left, 4 more
    restarts at each such budget (:func:`cfjax.sensitivity.starts.round_starts`: from its
    ``spares``, next-best screened starts, and near its best answer so far), all of the round's
    in one call of the cold runs' program, the budgets and their count as data (the program of
    the first round, or of its screening, for up to 16 budgets: nothing is compiled again).
    Returns the rounds' answers ``(B, 4 × rounds run)`` (NaN where a budget had no such round)
    with their P, and the rounds spent at each budget ``(B,)``."""
    B, m = values.shape[0], Ps.shape[-1]
    dtype = budgets.dtype
    cold = dataclasses.replace(cfg, warm_start=False)
    more, more_P = np.zeros((B, 0), values.dtype), np.zeros((B, 0, m, m), Ps.dtype)
    rounds = np.zeros(B, np.int32)
    for i in range(max_rounds):
        every = np.concatenate([values, more], axis=1)
        cfu, P = _answer(budgets, every, np.concatenate([Ps, more_P], axis=1))
        todo = np.flatnonzero(~_confirmed(every, cfu, confirm, negligible))
        if not todo.size:
            break
        L = starts.round_starts(
            cold, budgets[todo], P[todo], spares[todo], _ROUND_RESTARTS, key, i, dtype
        )
        slotted = slots(todo.size, _BUDGET_SLOTS)
        inits = np.zeros((slotted, cold.restart_slots) + L.shape[2:], dtype)
        inits[: todo.size, :_ROUND_RESTARTS] = L
        grid = np.pad(budgets[todo], (0, slotted - todo.size), mode="edge")
        v, Q, _, _ = _search(
            cold,
            where,
            model,
            grid,
            todo.size,
            _ROUND_RESTARTS,
            jax.random.fold_in(batch_key, 2 + i),
            inits,
            fallback,
        )
        new, new_P = (
            np.full((B, _ROUND_RESTARTS), np.nan, values.dtype),
            np.broadcast_to(np.eye(m, dtype=Ps.dtype), (B, _ROUND_RESTARTS, m, m)).copy(),
        )
        new[todo], new_P[todo] = v, Q
        more, more_P = np.concatenate([more, new], axis=1), np.concatenate([more_P, new_P], axis=1)
        rounds[todo] += 1
    return more, more_P, rounds


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
            f" and {bad.size - 8} more" if bad.size > 8 else ""
        )
        dtype = np.asarray(out.cfu).dtype
        why = (
            " In float32, Model B's normal equations lose their precision near the boundary of the "
            'usable correlations, and CFU comes out NaN: call jax.config.update("jax_enable_x64", True) '
            "at the start of the program."
            if dtype == np.float32
            else " CFU was NaN or infinite at every restart's end: check the model's data for extreme values."
        )
        warnings.warn(
            f"worst_case: no restart ended with a finite CFU at p_max = {shown}; its cfu is -inf "
            f"(nothing found, restart_cfu shows each restart).{why}",
            ConvergenceWarning,
            stacklevel=3,
        )


def _warn_if_floor(out: WorstCase, model: FairModel) -> None:
    """:class:`ShrinkageWarning` when the CFU at zero correlation is more than a tenth of the
    curve's range: the ridge's floor, not confounding, then carries the curve. Only for the fair
    predictor: a baseline's CFU at P = I is its real counterfactual unfairness (it sees A, or the
    features A causes), not a shrinkage artefact."""
    if model.scored != "fair":
        return
    floor = out.cfu_at_zero_correlation
    curve = np.asarray(out.cfu, np.float64)
    if floor_dominates(floor, curve, negligible_cfu(model)):
        values = np.append(curve[np.isfinite(curve)], cast(float, floor))
        lam = model.lam if not isinstance(model.lam, tuple) else list(model.lam)
        warnings.warn(
            f"worst_case: the CFU at zero error correlation (P = I) is {floor:.4g}, more than "
            f"{FLOOR_SHARE:g} x the curve's range ({values.min():.4g} to {values.max():.4g}): at the ridge "
            f"penalty lambda = {lam} that floor is the penalty's shrinkage artefact (CFU at P = I is 0 only at "
            "lambda = 0), not unfairness caused by confounding; read the curve as its rise above the floor "
            '(cfu_at_zero_correlation), or refit with a smaller lambda or FitConfig(model_a="ml"), whose '
            "Model A is Model B at P = I",
            ShrinkageWarning,
            stacklevel=3,
        )


def _warn_if_apart(out: WorstCase, factor: float, max_rounds: int = 0) -> None:
    """:class:`ConvergenceWarning` naming the budgets still not confirmed after the adaptive
    rounds (all of them where ``confirmed`` is None) whose best two restarts are more than
    ``factor`` apart, with what was done there."""
    ratio = np.asarray(out.restart_ratio)
    confirmed = np.zeros(ratio.shape, bool) if out.confirmed is None else np.asarray(out.confirmed)
    apart = np.flatnonzero((ratio > factor) & ~confirmed)  # NaN (one restart) is never apart
    if apart.size:
        shown = ", ".join(f"p_max = {float(out.p_max[i]):.4g} ({ratio[i]:.4g}x)" for i in apart[:8])
        more = f" and {apart.size - 8} more" if apart.size > 8 else ""
        done = (
            f"after {max_rounds} adaptive round(s) there of {_ROUND_RESTARTS} more restarts each (from the "
            "next-best screened boundary points and near the best answer; max_rounds caps them)"
            if max_rounds
            else "with no adaptive rounds (max_rounds=0)"
        )
        warnings.warn(
            f"worst_case: no second restart confirms the best restart's CFU (within the relative `confirm`) "
            f"at {shown}{more} (the best restart's CFU over the second best's), {done}: that worst case "
            "rests on one restart, and more steps, restarts or rounds may find a larger one (restart_cfu "
            "and round_cfu hold every restart's value; warn_ratio=None silences this)",
            ConvergenceWarning,
            stacklevel=3,
        )


def _search(
    cfg: _Program,
    where: Mesh | None,
    model: FairModel,
    budgets: np.ndarray,
    count: int,
    restarts: int,
    batch_key: jax.Array,
    inits: np.ndarray,
    fallback: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """``budgets (B',)``: the budgets in their slots, the first ``count`` in use; ``inits (B',
    R', ...)``: each budget's restarts' starting L, the first ``restarts`` in use;
    ``fallback (R', ...)``: each restart's random start, where its own is not usable. The runs are
    split over the devices of ``where`` (None: one device) by
    :func:`cfjax.distributed.map_batch`, the model shared: every budget x restart is a run (in
    slots of :func:`~cfjax.sensitivity.search_config.slots`, the padding skipped), or, with
    ``warm_start``, every restart (each scanning the budgets). The counts are data: the
    programs are the same for every count within the slots. Returns every run's answer on the
    host, ``(values (count, restarts), P (count, restarts, m, m), steps, history)``
    (:func:`_gather`)."""
    R = cfg.restart_slots
    dtype = budgets.dtype
    if cfg.warm_start:
        used = jnp.asarray(np.arange(R) < restarts)
        out = distributed.map_batch(
            Bound(warm_runs, cfg),
            jnp.asarray(inits[0], dtype),
            jnp.asarray(fallback, dtype),
            used,
            shared=(model, jnp.asarray(budgets), jnp.asarray(count, jnp.int32), batch_key),
            mesh=where,
            compiler_options=_options(where),
        )
        slot = None
    else:
        runs = (
            count * restarts
        )  # packed, budget by budget, then padding: no group of padding is run
        n = slots(runs, _RUN_SLOTS)
        k = np.arange(n)
        b, r = np.where(k < runs, k // restarts, 0), np.where(k < runs, k % restarts, 0)
        slot = np.stack(
            [np.where(k < runs, b, budgets.shape[0]), r]
        )  # padding: past the grid, dropped
        flat = inits.reshape((-1,) + inits.shape[2:])
        out = distributed.map_batch(
            Bound(cold_runs, cfg),
            jnp.asarray(budgets[b]),
            jnp.asarray(flat[b * R + r], dtype),
            jnp.asarray(fallback[r], dtype),
            jnp.asarray(k < runs),
            shared=(model, batch_key, jnp.asarray(False)),
            mesh=where,
            compiler_options=_options(where),
        )
    return _gather(cfg.warm_start, R, budgets, count, restarts, slot, *out)


def _screening(
    cfg: _Program, where: Mesh | None, model: FairModel, batch_key: jax.Array, dtype
) -> Any:
    """``evaluate(P (K, m, m)) -> (K,)`` for :func:`cfjax.sensitivity.starts.initial_L`: the
    full-data CFU at each point, by the cold runs' program screening (:func:`cfjax.sensitivity.runs.cold_runs`),
    ``_RUN_SLOTS`` points per call (the cold search's program for its first counts, so the
    screening compiles nothing of its own), the calls dispatched before any result is read."""
    m = cfg.shape[0]
    n = _RUN_SLOTS

    def evaluate(points: np.ndarray) -> np.ndarray:
        K = points.shape[0]
        pad = -K % n
        points = np.concatenate([points, np.broadcast_to(np.eye(m), (pad, m, m))]).astype(dtype)
        used = np.arange(K + pad) < K
        zeros = jnp.asarray(np.zeros(n, dtype))
        out = [
            distributed.map_batch(
                Bound(cold_runs, cfg),
                zeros,
                jnp.asarray(points[i : i + n]),
                jnp.asarray(points[i : i + n]),
                jnp.asarray(used[i : i + n]),
                shared=(model, batch_key, jnp.asarray(True)),
                mesh=where,
                compiler_options=_options(where),
            )[0]
            for i in range(0, K + pad, n)
        ]  # every call dispatched before one is read
        return np.concatenate([np.asarray(v) for v in out])[:K]

    return evaluate


_RUN_SLOTS = 64  # the fewest run slots the search compiles for (16 budgets x 4 restarts)
_BUDGET_SLOTS, _RESTART_SLOTS = 16, 4


def _gather(
    warm_start: bool,
    R: int,
    budgets: Any,
    count: int,
    restarts: int,
    slot: np.ndarray | None,
    values: Any,
    Ps: Any,
    t: Any,
    hist: Any,
) -> tuple[np.ndarray, ...]:
    """Every run's answer as a grid over the slots ``(B', R)`` in use, on the host:
    ``(values (count, restarts), P (count, restarts, m, m), steps, history)``, a non-finite value
    as −inf. The runs come as ``(R, B', ...)`` with ``warm_start`` (restarts scanning budgets),
    else packed, run k at ``slot[:, k]`` (its budget and restart; padding past the grid,
    dropped)."""
    values, Ps, t, hist = (np.asarray(x) for x in (values, Ps, t, hist))
    B = np.shape(budgets)[0]
    if warm_start:
        values, Ps, t, hist = (np.swapaxes(x, 0, 1) for x in (values, Ps, t, hist))
    else:

        def grid(x, fill):
            out = np.full((B + 1, R) + x.shape[1:], fill, x.dtype)  # row B: the padding's, dropped
            out[slot[0], slot[1]] = x
            return out[:B]

        values, Ps, t, hist = grid(values, -np.inf), grid(Ps, 0), grid(t, 0), grid(hist, np.nan)
    values = values[:count, :restarts]
    return (
        np.where(np.isfinite(values), values, -np.inf),
        Ps[:count, :restarts],
        t[:count, :restarts],
        hist[:count, :restarts],
    )


def _answer(
    budgets: np.ndarray, values: np.ndarray, Ps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each budget's worst case ``(cfu (B,), P (B, m, m))`` from every restart's answer
    ``values (B, E)`` (NaN: a restart not run) and ``Ps (B, E, m, m)``: its best restart's,
    never below a smaller budget's. On the host, in numpy: a few small arrays."""
    values = np.where(np.isfinite(values), values, -np.inf)
    best = np.argmax(values, axis=1)
    P_best = np.take_along_axis(Ps, best[:, None, None, None], axis=1)[:, 0]
    cfu_best = np.take_along_axis(values, best[:, None], axis=1)[:, 0]
    # Budgets are nested (|P_jk| <= p also satisfies every larger budget, same eigenvalue margin),
    # so a budget's worst case is at least that of every smaller one: take it where the search
    # at the larger budget found less (its restarts explore only near its own corners).
    within = budgets[None, :] <= budgets[:, None]  # budget j inside i
    source = np.argmax(np.where(within, cfu_best[None, :], -np.inf), axis=1)
    return cfu_best[source], P_best[source]


def _confirmed(
    values: np.ndarray, cfu: np.ndarray, confirm: float, negligible: float
) -> np.ndarray:
    """``(B,)``: whether each budget's worst case ``cfu`` is confirmed, matched within a
    relative ``confirm`` by at least two of its restarts ``values (B, E)`` (NaN: not run), or
    at most ``negligible`` (rounding: every restart's value is then the same nothing)."""
    values = np.where(np.isfinite(values), values, -np.inf)
    agree = np.sum(values >= cfu[:, None] / (1 + confirm), axis=1) >= 2
    return np.isfinite(cfu) & ((cfu <= negligible) | agree)


def _restart_ratio(values: Any) -> np.ndarray:
    """Each budget's best restart's value over the second best's, ``(B,)`` from ``(B, E)``
    (NaN: a restart not run; the ratio is NaN where fewer than two restarts ran)."""
    values = np.asarray(values)
    ran = np.sum(~np.isnan(values), axis=1)
    top = -np.sort(-np.where(np.isnan(values), -np.inf, values), axis=1)
    if values.shape[1] < 2:
        return np.full(values.shape[:1], np.nan, values.dtype)
    best, second = top[:, 0], top[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(
            second > 0, best / np.where(second > 0, second, 1), np.where(best > 0, np.inf, 1.0)
        )
    return np.where(ran >= 2, ratio, np.nan)
