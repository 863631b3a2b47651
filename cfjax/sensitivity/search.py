"""The worst case within a confounding budget (paper 001, Algorithm 1; definitions §3), and the
inverse question.

For each budget ``p_max`` and each restart, gradient ascent on CFU over the unconstrained ``L``
of a correlation parameterisation, with optax: full batch or minibatches (uniform draws), early
stopping on the (smoothed) objective, and Model B's σ warm-started from the previous step. The
whole ``p_max`` grid × restarts runs as one jitted, vmapped program (or, with ``warm_start``, a
scan over the sorted budgets — the paper's curriculum — vmapped over restarts); with several
devices the runs are split over them (``devices``), each device running its share.

Worst cases sit on the boundary of the usable set — a budget's edge ``|P_jk| = p_max`` or the
eigenvalue margin ``λ_min(P) = min_eig`` — often at one of several local maxima, and often at a
corner where the edges and the margin meet. So the restarts start where the maxima are: points
on that boundary (the sign corners, scaled back along their ray from I onto the margin where
they are not usable; the margin's corners, where all entries but one sit at ±p_max; random rays
from I and along the budget's edges) are screened by their CFU, and the restarts start from the
best distinct ones.

A step never leaves the usable set: a proposed ``L`` whose P has smallest eigenvalue below
``min_eig`` is backtracked (halving the step up to 8 times) and, if no fraction is usable, the
step is dropped. Backtracked steps crawl along the margin, so each restart ends with a polish in
P itself: projected gradient ascent along the boundary on the full-data CFU. The answer for
each budget is the best restart's, with that P and its eigenvalues; how far the best two
restarts' answers are apart is reported (and warned about beyond a factor), as a check on the
search's convergence.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jax.sharding import Mesh, NamedSharding, PartitionSpec

from cfjax import _checks, distributed
from cfjax.sensitivity.correlation import _slack as _margin_slack
from cfjax.sensitivity.correlation import (boundary_scale, check_budget, clique_correlation, correlation_margin,
                                           pd_correlation, tanh_correlation)
from cfjax.sensitivity.cfu import cfu_at_zero_correlation, cfu_of, negligible_cfu
from cfjax.sensitivity.diagnostics import FLOOR_SHARE, ConvergenceWarning, ShrinkageWarning, floor_dominates
from cfjax.sensitivity.linear import fit_model_b
from cfjax._results import headline, strict_plain as plain
from cfjax.sensitivity.problem import FairModel

__all__ = ["WorstCase", "worst_case", "ConvergenceWarning", "InverseBudget", "inverse_budget", "sign_corners",
           "paper_optimizer"]

_RUN_GROUP = 4  # runs vmapped together per optimiser step on XLA:CPU (see _run_group)
_SCHEDULER_OFF = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def _run_group(runs: int) -> int | None:
    """How many runs one optimiser step (and the polish) vmaps at once (None: all of them).

    XLA:CPU stalls, idle and never finishing, when the whole search vmaps 8 or more runs at
    once on large data, unless its concurrency-optimised scheduler is switched off with
    ``XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false`` before JAX starts (a
    per-program compiler option does not help). Still so with jax 0.10.2: the reproducer
    ``python -m experiments.benchmarks.xla_cpu_stall`` (its docstring has the numbers) runs 8
    runs of the search on the 209,112-row NHS survey in a child process, and with the
    scheduler on it sat idle until its timeout, while with the scheduler off, or in groups of
    4 with it on, it finished in under a minute. The polish (full-data CFU and its gradient in
    a while loop, vmapped over the runs) is what stalls there; the optimiser steps alone, on
    minibatches, finished with 64 runs at once, but steps on the full data are the same kind
    of program. So on CPU with that scheduler on the runs go in vmapped groups of 4, one group
    after another, in the steps and the polish; otherwise (the scheduler off, other backends)
    every run is vmapped at once. With several devices the runs are split over them
    first (``worst_case(devices=...)``) and the groups apply within each device's share.
    """
    if jax.default_backend() != "cpu" or _SCHEDULER_OFF in os.environ.get("XLA_FLAGS", ""):
        return None
    return _RUN_GROUP if runs > _RUN_GROUP else None


def _over_runs(fn: Callable, args: Any) -> Any:
    """``fn`` over the leading (run) axis of ``args``: every run in one vmap, or in vmapped
    groups one after another on XLA:CPU (:func:`_run_group`)."""
    group = _run_group(jax.tree.leaves(args)[0].shape[0])
    if group is None:
        return jax.vmap(fn)(args)
    return jax.lax.map(fn, args, batch_size=group)


def _search_mesh(devices: Any) -> Mesh | None:
    """The one-axis mesh the runs are split over (:func:`cfjax.distributed.mesh`), or None for
    one device: ``devices=None`` spreads over this process's devices when it has several."""
    if devices is None:
        local = jax.local_devices()
        if len(local) == 1:
            return None
        devices = local
    where = distributed.mesh(devices, _RUNS)
    foreign = [d for d in where.devices.flat if d.process_index != jax.process_index()]
    if foreign:
        _checks.fail("devices", "devices of this process (the search runs where its model is)",
                     f"{len(foreign)} device(s) of other processes, e.g. {foreign[0]}")
    return where


def _over_devices(fn: Callable, where: Mesh | None, shared: Any, runs: Any) -> Any:
    """``fn(shared, runs)`` with ``runs`` (a pytree with a leading run axis, as is ``fn``'s
    output) split over the devices of ``where`` (``shared`` is copied to each device): the run
    axis is padded to a multiple of the device count (repeating the last run), each device runs
    ``fn`` on its share, and the padding is dropped. ``where=None``: ``fn(shared, runs)``."""
    if where is None:
        return fn(shared, runs)
    n = jax.tree.leaves(runs)[0].shape[0]
    split = PartitionSpec(where.axis_names[0])
    out = jax.shard_map(fn, mesh=where, in_specs=(PartitionSpec(), split), out_specs=split,
                        check_vma=False)(shared, distributed.pad_axis(runs, where.size))
    return jax.tree.map(lambda a: a[:n], out)


_BACKTRACK = 0.5 ** np.arange(9)  # 1, 1/2, ..., 1/256 of the proposed step
_TANH_SEED = 0.995  # tanh reaches the boundary only in the limit: its starts sit this far along the ray
_POLISH_START, _POLISH_STOP = 1e-2, 1e-5  # the polish's first and smallest step, in units of p_max
_DISTINCT = 0.1  # restarts' starts differ by more than this fraction of p_max in some entry


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


@dataclasses.dataclass(frozen=True)
class _Tanh:
    """The paper's parameterisation; ``seed`` inverts it (a little inside the target P)."""

    def __call__(self, L, p_max):
        return tanh_correlation(L, p_max)

    def seed(self, P, p_max):
        """A lower-triangular L whose P is ``I + 0.995 (P − I)``: ``L Lᵀ`` has ``artanh`` of the
        target's entries over ``p_max`` off the diagonal, a dominant diagonal."""
        eye = jnp.eye(P.shape[0], dtype=P.dtype)
        p = jnp.where(p_max > 0, p_max, 1)
        G = (1 - eye) * jnp.arctanh(jnp.clip(_TANH_SEED * (P - eye) / p, -_TANH_SEED, _TANH_SEED))
        return jnp.linalg.cholesky(G + jnp.diag(jnp.sum(jnp.abs(G), axis=1) + 1.0))


@dataclasses.dataclass(frozen=True)
class _PD:
    """:func:`pd_correlation` with the search's margin; ``seed``: its exact inverse."""

    min_eig: float

    def __call__(self, L, p_max):
        return pd_correlation(L, p_max, self.min_eig)

    def seed(self, P, p_max):
        return jnp.linalg.cholesky(P)


@dataclasses.dataclass(frozen=True)
class _Cliques:
    """The clique parameterisation for a fixed membership mask, hashable by value (no seeds:
    its restarts start from the random initialisation)."""

    mask: tuple
    seed = None

    def __call__(self, L, p_max):
        return clique_correlation(L, np.asarray(self.mask), p_max)


def _project_usable(P: jax.Array, p_max: jax.Array, min_eig: float, iterations: int = 60) -> jax.Array:
    """The usable P nearest to a symmetric ``P`` (Frobenius): Dykstra's alternating projections
    between the budget's box (unit diagonal, off-diagonals clipped) and the eigenvalue margin
    (eigenvalues raised to ``min_eig``), then a last pull along the ray from I, so that the
    answer is usable whatever the iterations left."""
    eye = jnp.eye(P.shape[0], dtype=P.dtype)

    def box(X):
        return eye + jnp.clip((1 - eye) * X, -p_max, p_max)

    def cone(X):
        w, V = jnp.linalg.eigh(X)
        return (V * jnp.maximum(w, min_eig)[None, :]) @ V.T

    def body(_, state):
        x, a, b = state
        y = box(x + a)
        a = x + a - y
        x = cone(y + b)
        b = y + b - x
        return x, a, b

    zero = jnp.zeros_like(P)
    x, _, _ = jax.lax.fori_loop(0, iterations, body, (P, zero, zero))
    Z = box(x) - eye
    return eye + jnp.clip(jnp.minimum(1.0, boundary_scale(Z, p_max, min_eig)) * Z, -p_max, p_max)


def _parameterisation(kind: str, cliques: Any, m: int, min_eig: float) -> tuple[Callable, tuple[int, int], np.ndarray]:
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
        return _Tanh(), (m, m), tri
    if kind == "pd":
        return _PD(min_eig), (m, m), tri
    _checks.fail("parameterisation", "'tanh' (the paper's) or 'pd' (every usable P, by construction)", repr(kind))


def _init_L(key: jax.Array, shape: tuple[int, int], mask: np.ndarray, scale: float, dtype) -> jax.Array:
    """The paper's initialisation: ones on the diagonal, small random entries below it."""
    eye = jnp.eye(*shape, dtype=dtype)
    return jnp.where(mask, eye + scale * (1 - eye) * jax.random.normal(key, shape, dtype), 0.0)


def worst_case(model: FairModel, p_max: Any, *, key: jax.Array, restarts: int = 4, steps: int = 500,
               optimizer: optax.GradientTransformation | None = None, batch_size: int | None = None,
               patience: int = 50, tol: float = 1e-4, min_eig: float = 1e-3, parameterisation: str = "tanh",
               cliques: Any = None, warm_start: bool = False, init_scale: float = 0.1,
               newton_steps: int = 8, log_objective: bool = True, snap: float | None = 0.99,
               screen_corners: bool = True, boundary_starts: int = 16, polish: int = 30,
               warn_ratio: float | None = 10.0, devices: Any = None) -> WorstCase:
    """Maximise CFU over correlations within each budget (paper 001, Algorithm 1).

    Args:
      model: the fitted working model (:func:`cfjax.sensitivity.fit`).
      p_max: one budget or a 1-d grid, each in [0, 1).
      key: randomness for the restarts' initial L, the random boundary starts and the minibatches.
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
      devices: where the runs go: None for this process's devices (one device: as it is; several:
        spread over them), a device count (the first ones), a sequence of devices, or a one-axis
        ``jax.sharding.Mesh`` (:func:`cfjax.distributed.mesh`). The runs (budgets × restarts;
        with ``warm_start`` the restarts, each scanning the budgets), and the screening of the
        budgets' starts, are padded to a multiple of the device count and split over the
        devices, each running its share (all its runs in one vmap; on XLA:CPU with its
        concurrency-optimised scheduler on, in vmapped groups of 4, as wider vmaps of the
        search stall there); the answer is the one-device answer (to rounding).

    Returns:
      :class:`WorstCase`, budgets in the order given (sorted when ``warm_start``), on one device
      (the first of ``devices``), with the CFU at zero correlation (``cfu_at_zero_correlation``,
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
    where = _search_mesh(devices)
    m = model.graph.m
    P_fn, shape, mask = _parameterisation(parameterisation, cliques, m, float(min_eig))
    screen = bool(screen_corners) and P_fn.seed is not None
    config = _Config(P_fn=P_fn, shape=shape, mask=tuple(map(tuple, mask.tolist())),
                     optimizer=optimizer or _ADAM, steps=steps, batch_size=batch_size,
                     patience=patience, tol=float(tol), min_eig=float(min_eig), init_scale=float(init_scale),
                     newton_steps=newton_steps, warm_start=bool(warm_start), restarts=restarts,
                     log_objective=bool(log_objective), snap=None if snap is None else float(snap),
                     corners=_corner_signs(m) if screen and m <= 5 else (),
                     boundary_starts=boundary_starts if screen else 0,
                     polish_steps=polish if cliques is None and m > 1 else 0,
                     margin_corners=_margin_lines(m) if screen and m <= 3 else ())
    dtype = model.data.X.dtype
    # optax mixes weak and integer types internally: scope the standard promotion rules.
    with jax.numpy_dtype_promotion("standard"):
        budgets = jnp.asarray(budgets, dtype)
        args = (model, budgets, key)
        if where is not None:  # a copy of the model on every device
            args = jax.device_put(args, NamedSharding(where, PartitionSpec()))
        inits = _initial_L(config, where, *args)
        out = _search(config, where, *args, inits)
    if where is not None:
        out = jax.device_put(out, where.devices.flat[0])
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
    corners: tuple  # sign patterns screened (empty: none)
    boundary_starts: int  # random rays screened
    polish_steps: int
    margin_corners: tuple  # (S0, E) of each line whose usable ends are screened (empty: none)


_ADAM = optax.adam(0.05)
_RUNS = "runs"  # the mesh axis the runs are split over


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
        return _over_runs(lambda args: step_one(*args, units), (L, opt_state, log_sigma, p))

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


def _on_boundary(D: jax.Array, p_max: jax.Array, min_eig: float) -> jax.Array:
    """Where the ray from I along direction ``D`` leaves the usable set: ``I + s D``,
    ``s = boundary_scale(D)`` (off-diagonals clipped to the budget against rounding)."""
    eye = jnp.eye(D.shape[0], dtype=D.dtype)
    s = boundary_scale(D, p_max, min_eig)
    return eye + jnp.clip(jnp.where(jnp.isfinite(s), s, 0) * D, -p_max, p_max)


def _last_usable(P0: jax.Array, D: jax.Array, hi: jax.Array, target: jax.Array) -> jax.Array:
    """The largest ``t ∈ [0, hi]`` with ``λ_min(P0 + t D) ≥ target``, given that ``t = 0``
    qualifies: ``λ_min`` is concave in t, so the qualifying t form an interval, whose end is
    found by bisection (kept on the qualifying side)."""
    def lam(t):
        return jnp.linalg.eigvalsh(P0 + t * D)[0]

    def halve(_, io):
        inside, out = io
        mid = 0.5 * (inside + out)
        ok = lam(mid) >= target
        return jnp.where(ok, mid, inside), jnp.where(ok, out, mid)

    inside, _ = jax.lax.fori_loop(0, 60, halve, (jnp.zeros_like(hi), hi))
    return jnp.where(lam(hi) >= target, hi, inside)


def _margin_vertices(S0: jax.Array, E: jax.Array, p_max: jax.Array, min_eig: float):
    """The two ends of the usable stretch of the line ``I + p_max S0 + x E``, ``|x| ≤ p_max``
    (S0: signs on every pair but one, E: that pair): ``(lower end, upper end, usable)``.

    ``λ_min`` is concave in x, so the usable x form an interval: its peak by golden-section
    search, then each end by :func:`_last_usable`. Where an end is inside the box it lies on the
    eigenvalue margin — a corner where the budget's edges meet the margin, the way sign corners
    are corners of the box.
    """
    eye = jnp.eye(S0.shape[0], dtype=S0.dtype)
    target = min_eig + _margin_slack(S0.dtype, S0.shape[0])
    P0 = eye + p_max * S0

    def golden(_, ab):
        a, b = ab
        c, d = b - 0.618 * (b - a), a + 0.618 * (b - a)
        up = jnp.linalg.eigvalsh(P0 + c * E)[0] < jnp.linalg.eigvalsh(P0 + d * E)[0]
        return jnp.where(up, c, a), jnp.where(up, b, d)

    a, b = jax.lax.fori_loop(0, 60, golden, (-p_max, p_max))
    peak = P0 + 0.5 * (a + b) * E
    x = 0.5 * (a + b)
    usable = jnp.linalg.eigvalsh(peak)[0] >= target
    return (peak - _last_usable(peak, -E, p_max + x, target) * E,
            peak + _last_usable(peak, E, p_max - x, target) * E, usable)


def _face_ray(D: jax.Array, E: jax.Array, sign: jax.Array, p_max: jax.Array, min_eig: float):
    """Along the budget's edge ``P_f = sign · p_max`` (E: pair f's indicator): from the face's
    centre ``I + sign p_max E`` along D (its entry on f dropped) to where the ray leaves the
    usable set (the box, or the margin by :func:`_last_usable`): ``(P, usable)``. Worst cases
    often lie on such a face where it meets the margin."""
    eye = jnp.eye(D.shape[0], dtype=D.dtype)
    target = min_eig + _margin_slack(D.dtype, D.shape[0])
    C = eye + sign * p_max * E
    D = jnp.where(E > 0, 0, D)
    size = jnp.max(jnp.abs(D))
    hi = jnp.where(size > 0, p_max / jnp.where(size > 0, size, 1), 0)
    P = C + _last_usable(C, D, hi, target) * D
    return jnp.clip(P - eye, -p_max, p_max) + eye, jnp.linalg.eigvalsh(C)[0] >= target


def _faces(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Every edge face of the budget's box: its pair's indicator ``(2k, m, m)`` and sign ``(2k,)``."""
    Es, signs = [], []
    for i in range(m):
        for j in range(i + 1, m):
            for sign in (1.0, -1.0):
                E = np.zeros((m, m))
                E[i, j] = E[j, i] = 1.0
                Es.append(E)
                signs.append(sign)
    return np.asarray(Es).reshape(-1, m, m), np.asarray(signs)


def _directions(cfg: _Config, key: jax.Array, dtype) -> tuple[jax.Array | None, jax.Array | None]:
    """The screened candidates' directions ``(k, m, m)``: the sign patterns, and random symmetric
    directions with zero diagonal and off-diagonals uniform in [−1, 1] (None where none)."""
    m = cfg.shape[0]
    signs = jnp.asarray(np.asarray(cfg.corners).reshape(-1, m, m), dtype) if cfg.corners else None
    if not cfg.boundary_starts:
        return signs, None
    U = jnp.triu(jax.random.uniform(key, (cfg.boundary_starts, m, m), dtype, -1.0, 1.0), 1)
    return signs, U + jnp.swapaxes(U, 1, 2)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _initial_L(cfg: _Config, where: Mesh | None, model: FairModel, budgets: jax.Array, key: jax.Array) -> jax.Array:
    """Every budget's restarts' starting L, ``(B, R, ...)``: the best distinct screened
    boundary points (when screening), then the paper's random initialisation; the budgets
    split over the devices of ``where`` (with ``warm_start`` only the first budget's)."""
    if cfg.warm_start:  # only the first budget starts afresh
        first = _starts(cfg, model, key, budgets[:1])[0]
        return jnp.broadcast_to(first, (budgets.shape[0],) + first.shape)
    return _over_devices(lambda shared, b: _starts(cfg, *shared, b), where, (model, key), budgets)


def _starts(cfg: _Config, model: FairModel, key: jax.Array, budgets: jax.Array) -> jax.Array:
    """:func:`_initial_L` for ``budgets``, one budget after another."""
    dtype = budgets.dtype
    mask = np.asarray(cfg.mask)
    keys = jax.random.split(key, cfg.restarts)
    random_inits = jax.vmap(lambda k: _init_L(jax.random.fold_in(k, 0), cfg.shape, mask, cfg.init_scale, dtype))(keys)
    signs, rays = _directions(cfg, jax.random.fold_in(key, 2), dtype)

    def full_cfu(P):
        return cfu_of(model, fit_model_b(model.design, P, model.lam, newton_steps=30))

    def usable(P):
        return correlation_margin(P, cfg.min_eig) >= 0

    def candidates(p):
        """Points on the boundary ``(k, m, m)`` and whether each is usable ``(k,)``: the sign
        corners (pulled onto the margin), the margin's corners, random rays from I and along
        the budget's edge faces (the faces in turn)."""
        Ps, oks = [], []
        for D in (signs, rays):
            if D is not None:
                Ps.append(jax.vmap(lambda D: _on_boundary(D, p, cfg.min_eig))(D))
                oks.append(jax.vmap(usable)(Ps[-1]))
        if rays is not None and cfg.shape[0] > 1:
            E, sign = (np.take(a, np.arange(rays.shape[0]) % a.shape[0], axis=0) for a in _faces(cfg.shape[0]))
            P, ok = jax.vmap(lambda D, E, s: _face_ray(D, E, s, p, cfg.min_eig))(
                rays, jnp.asarray(E, dtype), jnp.asarray(sign, dtype))
            Ps.append(P)
            oks.append(ok & jax.vmap(usable)(P))
        if cfg.margin_corners:
            S0, E = (jnp.asarray(np.asarray(a), dtype) for a in zip(*cfg.margin_corners))
            lower, upper, ok = jax.vmap(lambda S, E: _margin_vertices(S, E, p, cfg.min_eig))(S0, E)
            Ps, oks = Ps + [lower, upper], oks + [ok & jax.vmap(usable)(lower), ok & jax.vmap(usable)(upper)]
        return jnp.concatenate(Ps), jnp.concatenate(oks)

    def inits_for(p):
        """The restarts' starting L for budget p: the best distinct boundary points, then random."""
        if signs is None and rays is None and not cfg.margin_corners:
            return random_inits
        Ps, ok = candidates(p)  # (k, m, m), (k,)
        eye = jnp.eye(Ps.shape[1], dtype=dtype)
        # Candidates one after another: nested vmaps of full-data CFU stalled XLA:CPU on large data.
        values = jax.lax.map(lambda a: jnp.where(a[1], full_cfu(jnp.where(a[1], a[0], eye)), -jnp.inf), (Ps, ok))
        values = jnp.where(jnp.isfinite(values), values, -jnp.inf)
        def pick(left, _):
            # The best candidate left; then drop every candidate within 0.1 p_max of it.
            i = jnp.argmax(left)
            found = jnp.isfinite(left[i])
            near = jnp.max(jnp.abs(Ps - Ps[i][None]), axis=(1, 2)) <= _DISTINCT * p
            return jnp.where(near, -jnp.inf, left), (i, found)

        _, (chosen, found) = jax.lax.scan(pick, values, None, length=cfg.restarts)
        # Fewer distinct candidates than restarts: the rest start near the best ones again (the
        # paper's random spread added to their L), so that the best two restarts can agree.
        n = jnp.maximum(jnp.sum(found), 1)  # found is a prefix: picks go best first
        again = chosen[jnp.arange(cfg.restarts) % n]
        spread = random_inits - jnp.where(mask, jnp.eye(*cfg.shape, dtype=dtype), 0)[None]
        L = jax.vmap(lambda P: cfg.P_fn.seed(P, p))(Ps[again]) + jnp.where(found[:, None, None], 0.0, spread)
        take = jnp.isfinite(values[again]) & jax.vmap(lambda L: usable(cfg.P_fn(L, p)))(L) & jnp.all(
            jnp.isfinite(L), axis=(1, 2))
        return jnp.where(take[:, None, None], L, random_inits)

    return jax.lax.map(inits_for, budgets)


def _cold_runs(cfg: _Config, model: FairModel, batch_key: jax.Array, p: jax.Array, L0: jax.Array):
    """Runs ``(N,)`` each from its own budget ``p`` and start ``L0``: ``(values (N,), P (N, m,
    m), steps (N,), history (N, S))``, every run in one vmapped loop."""
    L, t, hist = _runs(cfg, model, p, L0, batch_key)
    values, Ps = _finish(cfg, model, p, L)
    return values, Ps, t, hist


def _warm_runs(cfg: _Config, model: FairModel, budgets: jax.Array, batch_key: jax.Array, L0: jax.Array):
    """The curriculum for restarts ``(r,)`` from ``L0 (r, ...)``: a scan over the sorted
    budgets, each run starting from its previous budget's final L (where usable); ``(values
    (r, B), P (r, B, m, m), steps (r, B), history (r, B, S))``."""
    r = L0.shape[0]

    def one_budget(L_prev, inputs):
        p, i = inputs
        ok = jax.vmap(lambda L: correlation_margin(cfg.P_fn(L, p), cfg.min_eig) >= 0)(L_prev)
        start = jnp.where(ok[:, None, None], L_prev, L0)
        L, t, hist = _runs(cfg, model, jnp.full((r,), p), start, jax.random.fold_in(batch_key, i))
        return L, (L, t, hist)

    _, (L, t, hist) = jax.lax.scan(one_budget, L0, (budgets, jnp.arange(budgets.shape[0])))  # (B, r, ...)
    B = budgets.shape[0]
    values, Ps = _finish(cfg, model, jnp.repeat(budgets, r), L.reshape((B * r,) + L.shape[2:]))
    values, Ps = values.reshape(B, r), Ps.reshape((B, r) + Ps.shape[1:])
    return tuple(jnp.swapaxes(x, 0, 1) for x in (values, Ps, t, hist))


def _finish(cfg: _Config, model: FairModel, p: jax.Array, L: jax.Array):
    """Each run's full-data CFU and P ``((N,), (N, m, m))`` from its final ``L``: snapped to the
    boundary (:func:`_evaluate`) and polished (:func:`_polish`)."""
    full_cfu = functools.partial(_full_cfu, model)
    # One run after another (each full-data CFU is itself vmapped over chunks of units): the
    # nested vmap of 8 or more full-data evaluations stalled XLA:CPU on the NHS data.
    values, Ps = jax.lax.map(lambda args: _evaluate(cfg, full_cfu, *args), (p, L))
    if cfg.polish_steps:
        values, Ps = _over_runs(lambda args: _polish(cfg, full_cfu, *args), (p, Ps, values))
    return values, Ps


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


@functools.partial(jax.jit, static_argnums=(0, 1))
def _search(cfg: _Config, where: Mesh | None, model: FairModel, budgets: jax.Array, key: jax.Array,
            inits: jax.Array) -> WorstCase:
    """``inits (B, R, ...)``: each budget's restarts' starting L. The runs are split over the
    devices of ``where`` (None: one device): every budget x restart is a run, or, with
    ``warm_start``, every restart (each scanning the budgets)."""
    R = cfg.restarts
    B = budgets.shape[0]
    batch_key = jax.random.fold_in(key, 1)
    if cfg.warm_start:
        out = _over_devices(lambda shared, L0: _warm_runs(cfg, *shared, L0), where, (model, budgets, batch_key),
                            inits[0])
        values, Ps, t, hist = (jnp.swapaxes(x, 0, 1) for x in out)
    else:
        runs = (jnp.repeat(budgets, R), inits.reshape((B * R,) + inits.shape[2:]))
        out = _over_devices(lambda shared, r: _cold_runs(cfg, *shared, *r), where, (model, batch_key), runs)
        values, Ps, t, hist = (x.reshape((B, R) + x.shape[1:]) for x in out)
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
    return WorstCase(budgets, cfu_best, P_best, jnp.linalg.eigvalsh(P_best), values, _restart_ratio(values), t, hist,
                     cfg.min_eig)


def _along_boundary(P: jax.Array, g: jax.Array, p_max: jax.Array, min_eig: float, reach: jax.Array):
    """A step of length ``reach`` from a usable ``P`` that follows the gradient ``g`` along the
    boundary of the usable set (what is left to correct is second order in ``reach``).

    In the off-diagonals x: the constraints within reach — ``|x_jk| ≤ p_max`` (outward normal
    ``sign(x_jk)``) and the margin ``λ_min ≥ min_eig`` (outward normal ``−∂λ_min/∂x = −2 u_j
    u_k``, u the smallest eigenvector) — form a cone of directions that stay usable, and g is
    projected onto it (``g − Aᵀμ``, μ ≥ 0 by coordinate descent: a small non-negative least
    squares). Entries whose edge stays binding are set on it; the rest move by ``reach`` times
    the projected gradient scaled to a largest entry of 1.
    """
    m = P.shape[0]
    iu = np.triu_indices(m, 1)
    x, gx = P[iu], (g + g.T)[iu]
    w, V = jnp.linalg.eigh(P)
    normal = 2 * (V[:, 0][:, None] * V[:, 0][None, :])[iu]  # ∂λ_min/∂x
    near_edge = jnp.abs(x) >= p_max - reach
    on_margin = w[0] <= min_eig + max(1e-6, 4 * _margin_slack(P.dtype, m))
    A = jnp.concatenate([jnp.diag(jnp.sign(x)), -normal[None]])  # outward normals, (k + 1, k)
    active = jnp.concatenate([near_edge, on_margin[None]]) & (jnp.sum(A * A, axis=1) > 0)
    norms = jnp.where(active, jnp.sum(A * A, axis=1), 1)

    def sweep(_, mu):
        for i in range(A.shape[0]):  # one coordinate at a time: μ_i = max(0, μ_i + a_i·r / |a_i|²)
            r = gx - A.T @ mu
            mu = mu.at[i].set(jnp.where(active[i], jnp.maximum(0, mu[i] + A[i] @ r / norms[i]), 0))
        return mu

    mu = jax.lax.fori_loop(0, 20, sweep, jnp.zeros(A.shape[0], P.dtype))
    d = gx - A.T @ mu
    size = jnp.max(jnp.abs(d))
    d = jnp.where(size > 0, d / jnp.where(size > 0, size, 1), 0)
    held = near_edge & (mu[:-1] > 0)
    x = jnp.where(held, jnp.sign(x) * p_max, x) + reach * d
    T = jnp.zeros_like(P).at[iu].set(x)
    return jnp.eye(m, dtype=P.dtype) + T + T.T


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


def _restart_ratio(values: jax.Array) -> jax.Array:
    """Each budget's best restart's value over the second best's, ``(B,)`` from ``(B, R)``."""
    if values.shape[1] < 2:
        return jnp.full(values.shape[:1], jnp.nan, values.dtype)
    top = -jnp.sort(-values, axis=1)
    best, second = top[:, 0], top[:, 1]
    return jnp.where(second > 0, best / jnp.where(second > 0, second, 1), jnp.where(best > 0, jnp.inf, 1.0))


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


def _margin_lines(m: int) -> tuple:
    """Every line with all off-diagonals but one at a sign corner: ``((S0, E), ...)``, S0 the
    signs (zero on the free pair and the diagonal), E the free pair's indicator."""
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    out = []
    for free in pairs:
        E = np.zeros((m, m))
        E[free] = E[free[::-1]] = 1.0
        others = [q for q in pairs if q != free]
        for bits in np.ndindex(*(2,) * len(others)):
            S = np.zeros((m, m))
            for (i, j), b in zip(others, bits):
                S[i, j] = S[j, i] = 1 - 2 * b
            out.append((tuple(map(tuple, S.tolist())), tuple(map(tuple, E.tolist()))))
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
    """The answer to the inverse question of :func:`inverse_budget`.

    ``reached``: whether some budget up to the largest searched reached ``level``.
    ``p_max``: the smallest budget whose worst-case CFU reaches ``level`` (to within the
    bracket), or None when not ``reached`` (then ``max_cfu`` says how close the search came). ``lo``, ``hi``: the bracket ``lo < p_max <= hi``
    (``lo`` a budget whose worst case stays below the level, 0 when the first grid budget
    reaches it); when not reached, ``lo`` is the largest budget searched and ``hi`` = 1 (the
    answer, if any, lies beyond the budgets searched). ``max_cfu``: the largest worst-case CFU
    found at any budget evaluated, ``max_cfu_p_max`` the budget where it was found (when not
    reached: how close the search came). ``evaluated``: ``((p_max, worst-case CFU), ...)``, the
    coarse curve then the bisection's probes. ``cfu_at_zero_correlation``: the CFU at P = I,
    the floor under every worst case (see :class:`WorstCase`).

    Every field is static (a pytree without leaves); :meth:`to_dict` gives plain Python.
    """

    level: float = struct.field(pytree_node=False)
    p_max: float | None = struct.field(pytree_node=False)
    lo: float = struct.field(pytree_node=False)
    hi: float = struct.field(pytree_node=False)
    evaluated: tuple = struct.field(pytree_node=False)
    reached: bool = struct.field(pytree_node=False, default=False)
    max_cfu: float = struct.field(pytree_node=False, default=float("nan"))
    max_cfu_p_max: float = struct.field(pytree_node=False, default=float("nan"))
    cfu_at_zero_correlation: float | None = struct.field(pytree_node=False, default=None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable plain Python: ``level``, ``reached``, ``p_max`` (None when not
        reached), ``lo``, ``hi``, ``max_cfu``, ``max_cfu_p_max``, ``evaluated`` as
        ``[[p_max, cfu], ...]`` and ``cfu_at_zero_correlation`` (non-finite numbers as None)."""
        return {"level": plain(self.level), "reached": bool(self.reached), "p_max": plain(self.p_max),
                "lo": plain(self.lo), "hi": plain(self.hi), "max_cfu": plain(self.max_cfu),
                "max_cfu_p_max": plain(self.max_cfu_p_max), "evaluated": [plain(list(e)) for e in self.evaluated],
                "cfu_at_zero_correlation": plain(self.cfu_at_zero_correlation)}

    def __repr__(self) -> str:
        if self.reached:
            answer = f"reached=True, p_max={headline(self.p_max)}, bracket=({headline(self.lo)}, {headline(self.hi)}]"
        else:
            answer = f"reached=False, not within p_max <= {headline(self.lo)}"
        return (f"InverseBudget(level={headline(self.level)}, {answer}, max_cfu={headline(self.max_cfu)} "
                f"at p_max={headline(self.max_cfu_p_max)}, evaluated={len(self.evaluated)})")


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

    A level above every worst case found is a result, not an error: ``reached=False``, ``p_max``
    NaN, the bracket ``(hi, 1)`` and the largest CFU found with its budget (``max_cfu``,
    ``max_cfu_p_max``). A baseline's unfairness is often such a level: it is a squared gap
    between two predictors, usually far above the fair predictor's CFU (see
    :class:`~cfjax.sensitivity.FairModel`).

    Args:
      model: the fitted working model.
      level: the CFU to reach (non-negative).
      key: randomness of every :func:`worst_case` call (the same key each time).
      hi: the largest budget searched, in [0, 1).
      tol: bisection stops once the bracket is at most this wide.
      grid: budgets of the coarse curve, evenly spaced in ``(0, hi]``.
      **search: options of :func:`worst_case` (restarts, steps, ``devices`` to split every
        search's runs over several devices, ...).

    Returns:
      :class:`InverseBudget`.

    Example:
      A level the search can reach (half the worst case at budget 0.5), on a tiny problem (a
      literal block, not a doctest, to spare the suite a compilation of the search; the test
      suite runs the same calls)::

        import jax, cfjax.sensitivity as S
        prob = S.synthetic(200, seed=0)
        model = S.fit(prob.graph, prob.data, S.Settings(degrees=(2,), lambdas=(1.0,),
                                                        predictor_degrees=(2,), predictor_lambdas=(1.0,)))
        opts = dict(restarts=1, steps=5, screen_corners=False, snap=None, polish=0, warn_ratio=None)
        level = 0.5 * float(S.worst_case(model, 0.5, key=jax.random.key(0), **opts).cfu[0])
        inv = S.inverse_budget(model, level, key=jax.random.key(0), hi=0.5, grid=1, tol=0.05, **opts)
        inv.reached                  # True
        inv.p_max, (inv.lo, inv.hi)  # the smallest budget, in a bracket (lo, hi] at most 0.05 wide
        far = S.inverse_budget(model, 1e6, key=jax.random.key(0), hi=0.5, grid=1, **opts)
        far.reached, far.p_max       # False, None: not reached within p_max <= 0.5
        far.max_cfu, far.max_cfu_p_max  # how close the search came: 2 * level, at p_max = 0.5
    """
    level = float(level)
    if not np.isfinite(level) or level < 0:
        _checks.fail("level", "a non-negative CFU level", repr(level))
    hi = check_budget(hi)
    grid = _checks.check_positive_int("grid", grid)
    tol = float(tol)
    if not (np.isfinite(tol) and tol > 0):
        _checks.fail("tol", "a positive bracket width", repr(tol))
    budgets = np.linspace(0.0, hi, grid + 1)[1:]
    first = worst_case(model, budgets, key=key, **search)
    curve, floor = np.asarray(first.cfu, np.float64), first.cfu_at_zero_correlation
    evaluated = list(zip(budgets.tolist(), curve.tolist()))
    reached = np.flatnonzero(curve >= level)
    if reached.size == 0:
        best_p, best = _largest(evaluated)
        return InverseBudget(level, None, float(budgets[-1]), 1.0, tuple(evaluated), False, best, best_p, floor)
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
    best_p, best = _largest(evaluated)
    return InverseBudget(level, hi, lo, hi, tuple(evaluated), True, best, best_p, floor)


def _largest(evaluated: list) -> tuple[float, float]:
    """``(p_max, cfu)`` of the largest finite worst case evaluated (the smallest such budget on
    ties); NaN, NaN when none is finite."""
    finite = [(c, -p) for p, c in evaluated if np.isfinite(c)]
    if not finite:
        return float("nan"), float("nan")
    c, p = max(finite)
    return float(-p), float(c)
