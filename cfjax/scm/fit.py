"""Maximum-likelihood fitting of an SCM on the one training loop
(:func:`cfjax._core.training.run`): a hashable step that takes the data as an argument, one run
per phase of ``batch_size="auto"``."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from cfjax import _checks
from cfjax._checks import ValidationError
from cfjax._core import training
from cfjax._core.keys import as_key
from cfjax._core.optim import standard_promotion
from cfjax.scm import _validate as V
from cfjax.typing import KeyLike, PyTree

__all__ = [
    "AUTO_BATCH",
    "AUTO_FULL_BATCH",
    "AUTO_FULL_TAIL",
    "AUTO_MAX_ROUNDS",
    "AUTO_STEPS",
    "AUTO_TOL",
    "Fit",
    "FitInfo",
    "default_optimizer",
]

#: ``SCM.fit(steps="auto")``: rounds of ``AUTO_STEPS`` steps (each a fresh decay of the step
#: size), another round only while the last raised the training log-likelihood by at least
#: ``AUTO_TOL`` nats per unit, at most ``AUTO_MAX_ROUNDS``. Measured on a spline SCM (two nodes,
#: 20,000 units): round gains 1.1e-3, 2.5e-4, 1.0e-4, then below; ends within 1e-5 nats per
#: unit of an 8,000-step fit.
AUTO_STEPS, AUTO_TOL, AUTO_MAX_ROUNDS = 2000, 1e-4, 8

#: ``SCM.fit(batch_size="auto")``: full-batch steps up to ``AUTO_FULL_BATCH`` units; beyond,
#: minibatches of ``AUTO_BATCH`` units for all but the last ``1 / AUTO_FULL_TAIL`` of the steps,
#: which are full-batch (they carry the fit from the minibatches' noise floor to the maximum of
#: the likelihood). Measured by ``experiments/benchmarks/bench_scm_fit.py``.
AUTO_FULL_BATCH, AUTO_BATCH, AUTO_FULL_TAIL = 65_536, 1024, 8


class FitInfo(NamedTuple):
    """What :meth:`cfjax.scm.SCM.fit` did.

    Attributes:
      steps: optimiser steps run (fewer than asked when stopped early).
      validation_steps: ``(C,)`` step counts at which the held-out likelihood was evaluated
        (the end of every chunk); empty without a held-out split.
      validation_nll: ``(C,)`` held-out mean negative log-likelihood at those steps.
      best_step: the step whose parameters were returned (None without a held-out split).
      best_nll: their held-out mean negative log-likelihood (NaN without a split).
      stopped_early: whether ``patience`` ended the fit before ``steps``.
      train_index, validation_index: the units trained on and held out (None without a split).
      rounds: rounds run (``steps="auto"``: until a round gains less than ``AUTO_TOL``; 1 for
        a fixed number of steps).
    """

    steps: int
    validation_steps: np.ndarray
    validation_nll: np.ndarray
    best_step: int | None
    best_nll: float
    stopped_early: bool
    train_index: np.ndarray | None
    validation_index: np.ndarray | None
    rounds: int = 1


class Fit(NamedTuple):
    """:meth:`cfjax.scm.SCM.fit`'s result (unpacks as ``params, losses, info``).

    Attributes:
      params: the fitted parameters, every node's.
      losses: ``(steps,)`` the mean negative log-likelihood (of the fitted nodes, on the
        training units) at every step run (fewer than asked when stopped early).
      info: :class:`FitInfo` (held-out curve, best step, split).
    """

    params: dict[str, Any]
    losses: np.ndarray
    info: FitInfo


@functools.lru_cache(maxsize=64)
def default_optimizer(learning_rate: float, steps: int) -> optax.GradientTransformation:
    """``optax.adam`` with its step size decaying from ``learning_rate`` to zero over ``steps``
    (cosine). Cached: equal settings give the same object, so a fit's step compiles once."""
    return optax.adam(optax.cosine_decay_schedule(learning_rate, steps))


def _nll(scm, fitted: tuple[str, ...] | None, params: PyTree, batch: Any, fixed: Any) -> jax.Array:
    """Mean negative log-likelihood of ``batch`` (of the ``fitted`` nodes, the others'
    parameters ``fixed``)."""
    log_prob = jax.vmap(scm.log_prob_unit, in_axes=(None, 0, None))
    return -jnp.mean(log_prob({**fixed, **params}, batch, fitted))


@dataclasses.dataclass(frozen=True)
class _Step:
    """One optimiser step ``(state, data, key) -> (state, {"loss"})`` of the SCM's maximum
    likelihood; hashable (the loop compiles it once per model, optimizer and batch size).

    ``state = (params, opt_state, t)``; ``data = {"train", "fixed", "keys"}``: the training
    columns, the parameters of the nodes not fitted, and the phase's minibatch keys (step t
    draws ``batch_size`` units with replacement using ``keys[t]``; None for full batch).
    """

    scm: Any
    fitted: tuple[str, ...] | None
    optimizer: optax.GradientTransformation
    batch_size: int | None

    def __call__(self, state, data, key):
        params, opt_state, t = state
        batch = data["train"]
        if self.batch_size is not None:
            n = jax.tree.leaves(batch)[0].shape[0]
            idx = jax.random.randint(data["keys"][t], (self.batch_size,), 0, n)
            batch = jax.tree.map(lambda a: a[idx], batch)
        value, grads = jax.value_and_grad(functools.partial(_nll, self.scm, self.fitted))(
            params, batch, data["fixed"]
        )
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, t + 1), {"loss": value}


def fit(
    scm,
    data: Mapping[str, Any],
    *,
    key: KeyLike,
    steps: int | str = "auto",
    learning_rate: float = 3e-2,
    batch_size: int | str | None = "auto",
    optimizer: optax.GradientTransformation | None = None,
    params: PyTree | None = None,
    nodes: Sequence[str] | None = None,
    progress: bool | None = None,
    chunk_steps: int = 100,
    validation: float = 0.0,
    patience: int | None = 5,
) -> Fit:
    """The implementation of :meth:`cfjax.scm.SCM.fit` (call the method)."""
    key = as_key(key)
    fitted = None if nodes is None else V.node_subset(scm, nodes)
    needed = None
    if fitted is not None:
        needed = tuple(
            v for v in scm.nodes if v in fitted or any(v in scm.graph.parents_of(c) for c in fitted)
        )
    data = V.data(scm, data, "data", nodes=needed)
    rounds = 1
    if isinstance(steps, str):
        if steps != "auto":
            raise ValidationError(f"`steps`: expected 'auto' or a positive int, got {steps!r}.")
        steps, rounds = AUTO_STEPS, AUTO_MAX_ROUNDS
    steps = _checks.check_positive_int("steps", steps)
    chunk_steps = _checks.check_positive_int("chunk_steps", chunk_steps)
    if patience is not None:
        patience = _checks.check_positive_int("patience", patience)
    if (
        isinstance(validation, bool)
        or not isinstance(validation, (int, float, np.floating, np.integer))
        or not 0.0 <= float(validation) < 1.0
    ):
        raise ValidationError(f"`validation`: expected a fraction in [0, 1), got {validation!r}.")
    n = V.n_units(data)
    full_tail = 0  # the last steps, run on every unit after the minibatches
    auto = isinstance(batch_size, str)
    if auto:
        if batch_size != "auto":
            raise ValidationError(
                f"`batch_size`: expected 'auto', None or a positive int, got {batch_size!r}."
            )
        batch_size = None
    if batch_size is not None:
        batch_size = _checks.check_positive_int("batch_size", batch_size)
    if optimizer is None:
        learning_rate = _checks.check_positive_float("learning_rate", learning_rate)
    init_key, step_key = jax.random.split(key)
    train_index = held_index = held_data = None
    if validation > 0:
        n_held = int(round(float(validation) * n))
        if n_held < 1 or n_held > n - 1:
            raise ValidationError(
                f"`validation`: expected a fraction leaving at least one unit on each side of "
                f"the split of {n} units, got {validation!r} ({n_held} held out)."
            )
        perm = np.asarray(jax.random.permutation(jax.random.fold_in(key, 1), n))
        held_index, train_index = np.sort(perm[:n_held]), np.sort(perm[n_held:])
        held_data = {v: x[held_index] for v, x in data.items()}
        data = {v: x[train_index] for v, x in data.items()}
    if auto and V.n_units(data) > AUTO_FULL_BATCH:
        batch_size, full_tail = AUTO_BATCH, max(1, steps // AUTO_FULL_TAIL)
    params = scm.init(key=init_key) if params is None else params
    fixed: dict[str, Any] = {}
    if fitted is not None:
        if not isinstance(params, Mapping) or any(v not in params for v in scm.nodes):
            missing = [v for v in scm.nodes if not isinstance(params, Mapping) or v not in params]
            raise ValidationError(
                f"`params`: expected parameters of every node, missing {missing}."
            )
        fixed = {v: params[v] for v in scm.nodes if v not in fitted}
        params = {v: params[v] for v in fitted}
    # The phases of one round: (steps, minibatch size or None), each a run from a fresh
    # optimizer state. The default Adam's step size decays to zero over each phase (a constant
    # step leaves Adam at its noise floor, short of the maximum-likelihood fit).
    phases: tuple[tuple[int, int | None], ...]
    if batch_size is None:
        phases = ((steps, None),)
    elif full_tail:
        phases = ((steps - full_tail, batch_size), (full_tail, None))
    else:
        phases = ((steps, batch_size),)

    def held_out(state):
        return _nll(scm, fitted, state[0], held_data, fixed)

    losses, curve, curve_steps = [], [], []
    best = best_step = None
    best_nll, since, done, stopped = float("inf"), 0, 0, False
    objective = previous = None
    for r in range(rounds):
        # step t's minibatch (round 0 draws them as every release has)
        keys = jax.random.split(step_key if r == 0 else jax.random.fold_in(step_key, r), steps)
        start = done
        for size, batch in phases:
            opt = standard_promotion(
                default_optimizer(float(learning_rate), size) if optimizer is None else optimizer
            )
            state = (params, opt.init(params), jnp.zeros((), jnp.int32))
            offset = done - start
            run_data = {
                "train": data,
                "fixed": fixed,
                "keys": None if batch is None else keys[offset : offset + size],
            }
            result = training.run(
                _Step(scm, fitted, opt, batch),
                state,
                run_data,
                key=step_key,
                steps=size,
                chunk_steps=size if progress is False and held_data is None else chunk_steps,
                guard=None if held_data is not None else "loss",
                reporter=training.Reporter(
                    progress=progress,
                    desc="fit" if batch is None or len(phases) == 1 else "fit (minibatches)",
                    hint="lower the learning rate, or hold out a validation split to keep the best parameters",
                ),
                validation=None
                if held_data is None
                else training.Validation(
                    held_out, patience=patience, best_value=best_nll, since=since
                ),
            )
            params = result.state[0]
            losses.append(result.history["loss"])
            if held_data is not None:
                curve += result.validation.tolist()
                curve_steps += (done + result.validation_steps).tolist()
                if result.best_value < best_nll:
                    best, best_nll, best_step = (
                        result.best[0],
                        result.best_value,
                        done + result.best_step,
                    )
                since = result.since
            done += result.steps
            if result.steps < size:
                stopped = True
                break
        if stopped or r + 1 == rounds:
            break
        # steps="auto": another round only while the last one still raised the training
        # likelihood by AUTO_TOL nats per unit (a round that lowered it is undone)
        if objective is None:
            objective = _objective(scm, fitted)
        value = float(objective(params, data, fixed))
        if previous is not None and value > previous[0]:
            params = previous[1]
            break
        if previous is not None and previous[0] - value < AUTO_TOL:
            break
        previous = (value, params)
    if best is not None:
        params = best
    if fitted is not None:
        params = {v: params[v] if v in fitted else fixed[v] for v in scm.nodes}
    info = FitInfo(
        steps=done,
        validation_steps=np.asarray(curve_steps, np.int64),
        validation_nll=np.asarray(curve, np.float64),
        best_step=best_step,
        best_nll=best_nll if best_step is not None else float("nan"),
        stopped_early=stopped,
        train_index=train_index,
        validation_index=held_index,
        rounds=r + 1,
    )
    return Fit(params, np.concatenate(losses), info)


@functools.lru_cache(maxsize=16)
def _objective(scm, fitted):
    """The jitted full-batch training objective ``(params, data, fixed) -> mean NLL``, summed
    in blocks of ``AUTO_BATCH`` units (bounded memory for image nodes)."""

    def objective(params, data, fixed):
        every = {**fixed, **params}
        per_unit = jax.lax.map(
            lambda unit: scm.log_prob_unit(every, unit, fitted), data, batch_size=AUTO_BATCH
        )
        return -jnp.mean(per_unit)

    return jax.jit(objective)
