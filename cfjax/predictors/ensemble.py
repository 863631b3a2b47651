"""Training an ensemble of classifiers — members that differ in their training data (a mask or
per-unit weights over one shared training set) and their key — as one jitted program.

The step of one member is a pure function (:func:`member_step`); one evaluation round of the
ensemble (:class:`EnsembleRound`) runs ``eval_every`` of them for every member
(:func:`cfjax.predictors.map_members`, the members optionally spread over several devices by
:func:`cfjax.distributed.map_batch`, each device running its members' whole round), then
evaluates every member's validation AUC and keeps each member's best parameters. The loop, the
progress bar, the NaN guard and the checkpoints are :func:`cfjax._core.training.run`'s, its
step being the round.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from typing import Any, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from cfjax import _checks
from cfjax import _results
from cfjax import distributed as _dist
from cfjax._core import checkpoint as _ckpt
from cfjax._core import training as _training
from cfjax._errors import TrainingError
from cfjax.metrics import auc as _auc
from cfjax.predictors.inference import (_check_image_shape, _init, check_member_chunk, chunked_logits, map_members,
                                        member_keys, replicate)
from cfjax.predictors import objectives as _obj
from cfjax.predictors.objectives import Objective
from cfjax.predictors.sources import all_interventions, check_source

__all__ = ["EnsembleConfig", "EnsembleState", "MemberData", "TrainingError", "train", "member_step",
           "member_data", "init_state"]


@dataclasses.dataclass(frozen=True)
class EnsembleConfig:
    """Optimisation settings shared by every member (hashable: a static argument of the jitted
    training round).

    Attributes:
      steps: most optimisation steps per member.
      batch_size: units per step, drawn with replacement with probability proportional to the
        member's weight (mask).
      learning_rate: peak learning rate of AdamW, reached after ``warmup`` linear steps from 0,
        then cosine decay to ``learning_rate / 100`` at ``steps``.
      weight_decay: AdamW's decoupled weight decay.
      warmup: linear warm-up steps (``0 ≤ warmup < steps``).
      eval_every: steps between two evaluations of every member's validation AUC.
      patience: evaluations without a better validation AUC after which a member stops (its
        best parameters are kept); training ends when every member has stopped or run ``steps``.
      eval_chunk: validation images per compiled step of the validation pass (bounds memory).
      member_chunk: members stepped side by side (``vmap``) within the compiled step, the groups
        one after another (:func:`cfjax.predictors.map_members`); default: all members, one at
        a time on CPU (faster there, see :func:`cfjax.platform.default_member_chunk`);
        on each device when :func:`train` spreads the members over several.

    Example:
      >>> EnsembleConfig(steps=200, eval_every=50).rounds
      4
    """

    steps: int = 2000
    batch_size: int = 64
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    warmup: int = 100
    eval_every: int = 100
    patience: int = 5
    eval_chunk: int = 256
    member_chunk: int | None = None

    def __post_init__(self):
        check_member_chunk(self.member_chunk)
        for name in ("steps", "batch_size", "eval_every", "patience", "eval_chunk"):
            _checks.check_positive_int(name, getattr(self, name))
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, (int, np.integer)) \
                or not 0 <= self.warmup < self.steps:
            _checks.fail("warmup", f"an integer in [0, steps = {self.steps})", repr(self.warmup))
        for name in ("learning_rate", "weight_decay"):
            value = getattr(self, name)
            ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
            if not ok or not math.isfinite(value) or value < 0 or (name == "learning_rate" and value == 0):
                fail_what = "a finite learning rate > 0" if name == "learning_rate" else "a finite value >= 0"
                _checks.fail(name, fail_what, repr(value))

    @property
    def rounds(self) -> int:
        """Evaluation rounds of a full run, ``ceil(steps / eval_every)``."""
        return -(-self.steps // self.eval_every)

    def to_dict(self) -> dict[str, Any]:
        """Every setting as plain Python for ``json.dumps``; ``EnsembleConfig(**d)`` rebuilds it."""
        return dataclasses.asdict(self)

    def optimizer(self) -> optax.GradientTransformation:
        """AdamW with linear warm-up and cosine decay."""
        schedule = optax.warmup_cosine_decay_schedule(
            0.0, self.learning_rate, self.warmup, self.steps, self.learning_rate / 100)
        return optax.adamw(schedule, weight_decay=self.weight_decay)


class MemberData(NamedTuple):
    """One member's view of the shared training set.

    ``images (N, H, W)`` and ``labels (N,)`` are shared by every member; ``cdf (N,)`` is the
    cumulative sum of the member's weights (a mask as 0/1), from which its minibatches are drawn.
    For a training objective (:class:`cfjax.predictors.Objective`): ``strength ()`` the
    member's penalty strength (group DRO's step size), ``groups (N,)`` each unit's group for
    group DRO (shared); None where unused.
    """

    images: jax.Array
    labels: jax.Array
    cdf: jax.Array
    strength: jax.Array | None = None
    groups: jax.Array | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field as (nested) lists for ``json.dumps`` (the images in full: large)."""
        return {f: _results.plain(getattr(self, f)) for f in self._fields if getattr(self, f) is not None}

    def __repr__(self) -> str:
        return _results.fields_repr(type(self).__name__, ((f, _results.sized(getattr(self, f))) for f in self._fields
                                                          if getattr(self, f) is not None))


def member_data(images: Any, labels: Any, weights: Any, *, strengths: Any = None, groups: Any = None) -> MemberData:
    """:class:`MemberData` of the members whose weights (or boolean masks) are the rows of
    ``weights (M, N)`` (``cdf`` is then ``(M, N)``; one row ``(N,)`` gives ``(N,)``), with
    their objectives' ``strengths (M,)`` (or ``()``) and the units' ``groups (N,)`` when given.

    Example:
      >>> d = member_data(jnp.zeros((4, 16, 16)), jnp.array([0, 1, 0, 1]),
      ...                 jnp.array([[True, True, False, True]]))
      >>> d.cdf.tolist()
      [[1.0, 2.0, 2.0, 3.0]]
    """
    _check_training_set(images, labels, weights, "weights")
    x = jnp.asarray(images)
    w = jnp.asarray(weights).astype(x.dtype)
    strength = None if strengths is None else jnp.asarray(strengths, x.dtype)
    g = None if groups is None else jnp.asarray(groups, jnp.int32)
    return MemberData(x, jnp.asarray(labels).astype(x.dtype), jnp.cumsum(w, axis=-1), strength, g)


def _sample(key: jax.Array, cdf: jax.Array, batch_size: int) -> jax.Array:
    """``batch_size`` indices drawn with replacement, ``P(i) ∝ cdf[i] − cdf[i−1]``: a unit of
    zero weight is never drawn."""
    total = cdf[-1]
    target = jax.random.uniform(key, (batch_size,), cdf.dtype) * total
    target = jnp.minimum(target, jnp.nextafter(total, jnp.zeros((), cdf.dtype)))  # strictly below the total
    return jnp.searchsorted(cdf, target, side="right", method="scan_unrolled")


def _loss(params: Any, model: nn.Module, images: jax.Array, labels: jax.Array) -> jax.Array:
    return optax.sigmoid_binary_cross_entropy(model.apply(params, images), labels).mean()


def _objective_loss(params: Any, model: nn.Module, objective: Objective, strength: jax.Array, x: jax.Array,
                    y: jax.Array, x_cf: jax.Array | None, weights: jax.Array | None, groups: jax.Array | None,
                    group_weights: jax.Array | None) -> tuple[jax.Array, jax.Array | None]:
    """``(loss, group weights)`` of one minibatch: factual images ``x (B, H, W)``, their
    counterfactual images ``x_cf (B, J, H, W)`` (None where not needed), all logits from one
    call of the model."""
    name = objective.name
    if x_cf is None:
        o = model.apply(params, x)
        if name == "group_dro":
            return _obj.group_dro(o, y, groups, group_weights, strength)
        return objective.loss(o, None, y, strength=strength), group_weights
    b, j = x_cf.shape[:2]
    flat = x_cf.reshape((b * j,) + x_cf.shape[2:])
    if name in ("augment", "cf_risk", "cvar"):  # counterfactual images only
        c = model.apply(params, flat).reshape(b, j)
        if name == "augment":  # the drawn counterfactual of each unit (J = 1)
            return jnp.mean(optax.sigmoid_binary_cross_entropy(c[:, 0], y)), group_weights
        return objective.loss(None, c, y, strength=strength, weights=weights), group_weights
    logits = model.apply(params, jnp.concatenate([x, flat]))
    o, c = logits[:b], logits[b:].reshape(b, j)
    return objective.loss(o, c, y, strength=strength, weights=weights), group_weights


def member_step(model: nn.Module, config: EnsembleConfig, params: Any, opt_state: Any, data: MemberData,
                key: jax.Array, *, objective: Objective | None = None, source: Any = None,
                group_weights: jax.Array | None = None) -> tuple[Any, ...]:
    """One optimisation step of one member: a minibatch of ``config.batch_size`` units drawn
    with ``key`` from the member's weights, the batch's loss, one AdamW update. Pure;
    :func:`train` runs it for every member in every round of its loop.
    Like every optax update it needs JAX's standard dtype promotion (optax's bias correction
    raises a float to an int32 count), which :func:`cfjax._core.training.run` sets around the
    loop; called on its own, wrap it in ``jax.numpy_dtype_promotion("standard")``.

    The loss is ``objective``'s (:class:`cfjax.predictors.Objective`; default the basic mean
    binary cross-entropy of the factual logits) at the member's ``data.strength``. An objective
    that reads counterfactuals gets the minibatch's counterfactual images from ``source``
    (:mod:`cfjax.predictors.sources`) inside the step: all K of each unit, or for
    ``"augment"`` one drawn from the source's weights with ``fold_in(key, 1)``, the factual
    image then unused. All of a step's images go through the model in one call. Group DRO
    (``"group_dro"``) needs ``data.groups`` and the member's ``group_weights (G,)``.

    Returns ``(params, opt_state, loss)``, ``loss`` being the batch loss before the update, and
    with ``group_weights`` given ``(params, opt_state, loss, group_weights)``, the weights
    updated by group DRO (unchanged by any other objective).

    Example:
      >>> from cfjax.predictors import EffusionCNN, init_params
      >>> model, config = EffusionCNN(features=(4,)), EnsembleConfig(steps=10, batch_size=2, warmup=0)
      >>> p = jax.tree.map(lambda a: a[0], init_params(model, (16, 16), key=0, members=1))
      >>> d = member_data(jnp.zeros((4, 16, 16)), jnp.array([0, 1, 0, 1]), jnp.ones(4))
      >>> with jax.numpy_dtype_promotion("standard"):
      ...     p, o, loss = member_step(model, config, p, config.optimizer().init(p), d, jax.random.key(0))
      >>> bool(jnp.isfinite(loss))
      True
    """
    idx = _sample(key, data.cdf, config.batch_size)
    if objective is None or objective.kind == Objective():
        loss, grads = jax.value_and_grad(_loss)(params, model, data.images[idx], data.labels[idx])
        q = group_weights
    else:
        x_cf, weights = None, None
        if objective.needs_counterfactuals:
            if source is None:
                _checks.fail("source", f"a counterfactual source for the objective {objective.name!r}", "None")
            weights = jnp.asarray(source.weights, data.images.dtype)
            if objective.name == "augment":
                which = _obj.draw_interventions(idx.shape[0], weights, key=jax.random.fold_in(key, 1))[:, None]
            else:
                which = all_interventions(idx.shape[0], weights.shape[0])
            x_cf = source.images(idx, which).astype(data.images.dtype)
        groups = None if data.groups is None else data.groups[idx]
        if objective.name == "group_dro" and (groups is None or group_weights is None):
            _checks.fail("group_weights", "the member's group weights and `data.groups` for 'group_dro'", "None")
        strength = jnp.asarray(objective.strength if data.strength is None else data.strength, data.images.dtype)
        (loss, q), grads = jax.value_and_grad(_objective_loss, has_aux=True)(
            params, model, objective.kind, strength, data.images[idx], data.labels[idx], x_cf, weights, groups,
            group_weights)
    updates, opt_state = config.optimizer().update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return (params, opt_state, loss) if group_weights is None else (params, opt_state, loss, q)


@struct.dataclass
class EnsembleState:
    """Everything an ensemble's training needs to continue, stacked over members ``M``.

    Attributes:
      params: current parameters, leading axis ``(M, ...)``.
      opt_state: AdamW states ``(M, ...)``.
      best_params: each member's parameters at its best validation AUC so far ``(M, ...)``:
        the trained ensemble.
      best_auc: ``(M,)`` best validation AUC (−inf before the first evaluation).
      best_step: ``(M,)`` steps taken when the best parameters were reached.
      since_best: ``(M,)`` evaluations since the last improvement.
      active: ``(M,)`` members still training (patience and steps left).
      data_keys: ``(M, 2)`` uint32 key data of each member's minibatch stream (step ``t`` draws
        with ``fold_in(key, t)``).
      step: steps run so far (every active member runs each step; stopped members are frozen).
      round: evaluation rounds run so far.
      val_auc: ``(R, M)`` validation AUC per round (NaN for rounds not run), ``R = config.rounds``.
      loss: ``(R, M)`` mean training loss per round over the member's active steps (during a
        round, row ``round`` holds the running sum).
      group_weights: ``(M, G)`` each member's group DRO weights (uniform, unused by any other
        objective; ``G = 1`` without groups).
    """

    params: Any
    opt_state: Any
    best_params: Any
    best_auc: jax.Array
    best_step: jax.Array
    since_best: jax.Array
    active: jax.Array
    data_keys: jax.Array
    step: jax.Array
    round: jax.Array
    val_auc: jax.Array
    loss: jax.Array
    group_weights: jax.Array

    @property
    def finished(self) -> bool:
        """Whether every member has stopped (out of patience or steps)."""
        return not bool(jnp.any(self.active))

    def to_dict(self) -> dict[str, Any]:
        """The training record as plain Python for ``json.dumps``, without parameters or
        optimiser states: ``n_members``, ``step``, ``round``, ``finished``, per member
        ``best_auc``, ``best_step``, ``since_best``, ``active`` (lists of M),
        and per round ``val_auc`` and ``loss`` (R lists of M, NaN for rounds not run), and
        ``group_weights`` (M lists of G). Keep the parameters with
        :func:`cfjax.predictors.save_checkpoint`."""
        out = {"n_members": int(np.shape(self.best_auc)[0]), "step": int(self.step), "round": int(self.round),
               "finished": self.finished}
        for name in ("best_auc", "best_step", "since_best", "active", "val_auc", "loss", "group_weights"):
            out[name] = _results.plain(getattr(self, name))
        return out

    def __repr__(self) -> str:
        m = np.shape(self.best_auc)[0]
        n_params = sum(int(np.size(v)) for v in jax.tree.leaves(self.best_params))
        items = [("members", m), ("step", self.step), ("round", self.round)]
        if not any(isinstance(v, jax.core.Tracer) for v in (self.best_auc, self.active, self.step)):
            auc = np.asarray(self.best_auc, dtype=np.float64)
            items += [("active", _results.Raw(f"{int(np.sum(np.asarray(self.active)))}/{m}")),
                      ("best_auc_mean", float(np.mean(auc)) if m else float("nan")),
                      ("best_auc_min", float(np.min(auc)) if m else float("nan"))]
        items.append(("params_per_member", n_params // max(m, 1)))
        return _results.fields_repr(type(self).__name__, items)


def init_state(model: nn.Module, config: EnsembleConfig, image_shape: tuple[int, int], dtype: Any = jnp.float32,
               *, key: Any = None, members: int | None = None, seeds: Any = None,
               num_groups: int = 1) -> EnsembleState:
    """The state before the first step. Member ``m``'s key (:func:`cfjax.predictors.member_keys`:
    ``split(key, members)[m]``, or ``jax.random.key(seeds[m])``) is split in two: its
    parameters (as :func:`cfjax.predictors.init_params`) from the first half, its minibatch
    stream from the second.

    Example:
      >>> from cfjax.predictors import EffusionCNN
      >>> s = init_state(EffusionCNN(features=(4,)), EnsembleConfig(steps=10, warmup=0), (16, 16),
      ...                key=0, members=2)
      >>> s.best_auc.shape, int(s.step)
      ((2,), 0)
    """
    if not isinstance(config, EnsembleConfig):
        _checks.fail("config", "an EnsembleConfig", repr(config))
    keys = member_keys(key, members, seeds)
    num_groups = _checks.check_positive_int("num_groups", num_groups)
    return _init_state(model, config, keys, _check_image_shape(image_shape), jnp.dtype(dtype), num_groups)


@functools.partial(jax.jit, static_argnums=(0, 1, 3, 4, 5))
def _init_state(model: nn.Module, config: EnsembleConfig, keys: jax.Array, image_shape: tuple[int, int],
                dtype: Any, num_groups: int = 1) -> EnsembleState:
    params = _init(model, keys, image_shape, dtype)
    data_keys = jax.vmap(lambda k: jax.random.key_data(jax.random.split(k)[1]))(keys)
    m = keys.shape[0]
    opt_state = jax.vmap(config.optimizer().init)(params)
    return EnsembleState(
        params=params, opt_state=opt_state, best_params=params,
        best_auc=jnp.full((m,), -jnp.inf, dtype), best_step=jnp.zeros((m,), jnp.int32),
        since_best=jnp.zeros((m,), jnp.int32), active=jnp.ones((m,), bool), data_keys=data_keys,
        step=jnp.zeros((), jnp.int32), round=jnp.zeros((), jnp.int32),
        val_auc=jnp.full((config.rounds, m), jnp.nan, dtype),
        loss=jnp.full((config.rounds, m), jnp.nan, dtype),
        group_weights=jnp.full((m, num_groups), 1.0 / num_groups, dtype))


def _select(flag: jax.Array, new: Any, old: Any) -> Any:
    """Per member: ``new`` where ``flag (M,)`` is True, else ``old`` (leaves ``(M, ...)``)."""
    def pick(a, b):
        return jnp.where(flag.reshape(flag.shape + (1,) * (a.ndim - 1)), a, b)
    return jax.tree.map(pick, new, old)


@dataclasses.dataclass(frozen=True)
class _MemberRounds:
    """One evaluation round of each of a block of members: what
    :func:`cfjax.distributed.map_batch` runs on each device's members, so that a device's
    members meet the others once a round, not once a step.

    ``(params, opt_state, best_params, best_auc, best_step, since_best, active, cdf, data_keys,
    strength, group_weights, images, labels, groups, source, val_images, val_labels, step, live)``
    → the members' new ``params``, ``opt_state``, ``best_params``, ``best_auc``, ``best_step``,
    ``since_best``, ``active``, ``group_weights``, and their round's validation AUC, mean loss
    and first non-finite step (−1: none). An active member takes the round's steps
    (:func:`member_step` with :attr:`objective`, ``lax.fori_loop``), a stopped one none; then,
    when ``live`` (some member of the whole ensemble is active), every member is evaluated and
    its early stopping updated."""

    model: nn.Module
    config: EnsembleConfig
    objective: Objective = Objective()

    def __call__(self, params, opt_state, best_params, best_auc, best_step, since_best, active, cdf, data_keys,
                 strength, group_weights, images, labels, groups, source, val_images, val_labels, step, live):
        config = self.config
        left = jnp.clip(config.steps - step, 0, config.eval_every)  # an active member's steps this round
        objective = self.objective

        def one(args):
            p, o, c, key_data, act, lam, q = args
            key, member = jax.random.wrap_key_data(key_data), MemberData(images, labels, c, lam, groups)

            def body(i, carry):
                p, o, q, total, bad = carry
                p, o, loss, q = member_step(self.model, config, p, o, member, jax.random.fold_in(key, step + i),
                                            objective=objective, source=source, group_weights=q)
                return p, o, q, total + loss, jnp.where((bad < 0) & ~jnp.isfinite(loss), step + i, bad)

            total = jnp.zeros((), images.dtype)
            bad = jnp.full((), -1, jnp.int32)
            return jax.lax.fori_loop(0, jnp.where(act, left, 0), body, (p, o, q, total, bad))

        params, opt_state, group_weights, total, bad = map_members(
            one, (params, opt_state, cdf, data_keys, active, strength, group_weights), config.member_chunk)
        loss = jnp.where(active, total / jnp.maximum(left, 1).astype(total.dtype), 0)
        done = step + left

        def evaluate(_):
            logits = chunked_logits(self.model, params, val_images, min(config.eval_chunk, val_images.shape[0]),
                                    config.member_chunk)
            aucs = jax.vmap(_auc, in_axes=(0, None))(logits, val_labels).astype(best_auc.dtype)
            improved = active & (aucs > best_auc)
            since = jnp.where(improved, 0, since_best + active.astype(jnp.int32))
            return (_select(improved, params, best_params), jnp.where(improved, aucs, best_auc),
                    jnp.where(improved, done, best_step), since,
                    active & (since < config.patience) & (done < config.steps), aucs)

        def skip(_):
            return best_params, best_auc, best_step, since_best, active, jnp.full_like(best_auc, jnp.nan)

        best_params, best_auc, best_step, since_best, still, aucs = jax.lax.cond(live, evaluate, skip, None)
        return (params, opt_state, best_params, best_auc, best_step, since_best, still, group_weights, aucs, loss,
                bad)


@dataclasses.dataclass(frozen=True)
class EnsembleRound:
    """One evaluation round of the whole ensemble, the pure step of
    :func:`cfjax._core.training.run` (with ``stride = config.eval_every``):
    ``(state, (data, val_images, val_labels), key) -> (state, metrics)``.

    Every active member takes the round's steps (``config.eval_every``, fewer at the end of
    ``config.steps``), each a :func:`member_step` with its minibatch drawn with its own key
    ``fold_in(data_keys[m], step)`` (the loop's ``key`` is unused); then every member's
    validation AUC, the best parameters of the members that improved, and the stopping of those
    out of patience or steps. With ``mesh`` each device runs its members' whole round
    (:func:`cfjax.distributed.map_batch`): the devices meet once a round. Once no member is
    active a round changes nothing. Hashable: the loop compiles once per model, configuration
    and mesh.

    Metrics: ``loss (M,)`` (each member's mean batch loss over the round, 0 for a stopped
    member: the guarded metric), ``bad_step (M,)`` (the first step whose loss was not finite,
    −1: none), ``mean_loss`` over the active members and ``active`` (their number).

    ``groups`` is the members' training objectives as static groups: ``((objective kind,
    member indices), ...)`` (:attr:`cfjax.predictors.Objective.kind`; each member's strength is
    data, ``data[0].strength``), each group's round one program (a counterfactual objective
    renders its members' counterfactual images, a basic member none); empty: every member basic.
    """

    model: nn.Module
    config: EnsembleConfig
    mesh: Any = None
    groups: tuple[tuple[Objective, tuple[int, ...]], ...] = ()

    def __call__(self, state: EnsembleState, data: Any, key: jax.Array) -> tuple[EnsembleState, dict[str, jax.Array]]:
        del key  # each member's minibatch stream is its own (state.data_keys)
        config = self.config
        train_data, val_images, val_labels, source = data
        live = jnp.any(state.active)  # once every member has stopped, a round changes nothing
        s = state
        m = s.active.shape[0]
        strength = jnp.zeros((m,), train_data.images.dtype) if train_data.strength is None else train_data.strength
        members = (s.params, s.opt_state, s.best_params, s.best_auc, s.best_step, s.since_best, s.active,
                   train_data.cdf, s.data_keys, strength, s.group_weights)
        shared = (train_data.images, train_data.labels, train_data.groups, source, val_images, val_labels, s.step,
                  live)
        plan = self.groups or ((Objective(), tuple(range(m))),)
        if len(plan) == 1 and plan[0][1] == tuple(range(m)):
            out = _dist.map_batch(_MemberRounds(self.model, config, plan[0][0]), *members, shared=shared,
                                  mesh=self.mesh)
        else:  # each group its own program, on its members; the results put back in member order
            parts = []
            for objective, idx in plan:
                sel = np.asarray(idx)
                sub = jax.tree.map(lambda a, sel=sel: a[sel], members)
                parts.append((sel, _dist.map_batch(_MemberRounds(self.model, config, objective), *sub, shared=shared,
                                                   mesh=self.mesh)))
            out = jax.tree.map(lambda *a: jnp.zeros((m,) + a[0].shape[1:], a[0].dtype), *(p for _, p in parts))
            for sel, part in parts:
                out = jax.tree.map(lambda o, p, sel=sel: o.at[sel].set(p), out, part)
        (params, opt_state, best_params, best_auc, best_step, since_best, active, group_weights, aucs, loss,
         bad) = out
        loss = loss.astype(s.loss.dtype)
        r = jnp.minimum(s.round, config.rounds - 1)
        left = jnp.clip(config.steps - s.step, 0, config.eval_every)
        n_active = jnp.sum(s.active).astype(loss.dtype)
        metrics = {"loss": loss, "bad_step": bad, "mean_loss": jnp.sum(loss) / jnp.maximum(n_active, 1),
                   "active": n_active}
        new = s.replace(
            params=params, opt_state=opt_state, best_params=best_params, best_auc=best_auc, best_step=best_step,
            since_best=since_best, active=active, step=s.step + jnp.where(live, left, 0), round=s.round + live,
            val_auc=s.val_auc.at[r].set(jnp.where(live, aucs, s.val_auc[r])),
            loss=s.loss.at[r].set(jnp.where(live, jnp.where(s.active, loss, jnp.nan), s.loss[r])),
            group_weights=group_weights)
        return new, metrics


def train(model: nn.Module, images: Any, labels: Any, masks: Any, val_images: Any, val_labels: Any,
          config: EnsembleConfig = EnsembleConfig(), *, key: Any = None, seeds: Any = None,
          names: Sequence[str] | None = None, objectives: Any = None, counterfactuals: Any = None,
          groups: Any = None, checkpoint_dir: str | os.PathLike | None = None,
          max_rounds: int | None = None, progress: bool | None = None, mesh: Any = None) -> EnsembleState:
    """Train M members at once, each on its own weighting of one shared training set.

    Member ``m`` starts from its key (``jax.random.split(key, M)[m]``, or
    ``jax.random.key(seeds[m])``: see :func:`cfjax.predictors.member_keys`) and draws each
    minibatch (with replacement) with probability proportional to ``masks[m]``; every step of
    :func:`cfjax._core.training.run`'s loop is one evaluation round (:class:`EnsembleRound`):
    ``config.eval_every`` AdamW steps (warm-up and cosine decay) of every active member
    (:func:`~cfjax.predictors.map_members`), then every member's validation AUC
    (:func:`cfjax.metrics.auc` on the validation logits). A member keeps the parameters of its
    best validation AUC and stops (frozen) after ``config.patience`` evaluations without
    improvement; training ends when every member has stopped. A member trained alone with the
    same seed and mask ends with the same parameters (to float rounding: the batched and
    single-member programs may round differently).

    With ``mesh`` the members are spread over its devices
    (:func:`cfjax.distributed.map_batch` in every round: each device runs its share of the
    members through the whole round, the shared images and validation set passed whole to every
    device, and the devices meet once a round, to count the active members); each member
    runs the same computation as on one device and ends with the same parameters. On a CPU this
    is what makes the cores work together: one member's step on small images is a chain of
    small convolutions that XLA's intra-op threads do not keep every core busy with, whereas
    members on separate devices run side by side, each on its own core. JAX sees one CPU device
    unless asked before it starts (:func:`cfjax.distributed.host_devices`, or
    ``XLA_FLAGS=--xla_force_host_platform_device_count=N``); ``train`` never asks.

    Args:
      model: the network, e.g. :class:`~cfjax.predictors.EffusionCNN` (a linen module).
      images: shared training images ``(N, H, W)``, floating point in [0, 1].
      labels: ``(N,)`` effusion labels in {0, 1}.
      masks: ``(M, N)`` boolean masks or non-negative weights (each row with a positive sum),
        e.g. the rows of :func:`cfjax.study.paper_family`.
      val_images: validation images ``(V, H, W)``; ``val_labels``: ``(V,)`` with both classes.
      config: :class:`EnsembleConfig`.
      key: the ensemble's key (typed key, raw key data or int seed): member ``m`` gets
        ``split(key, M)[m]`` (initialisation and minibatch order).
      seeds: instead of ``key``, ``(M,)`` non-negative integer seeds, one per member (paper
        000's family pairs its predictors by seed: see :func:`cfjax.predictors.member_keys`).
      names: optional member names, used in messages.
      objectives: each member's training objective (:class:`cfjax.predictors.Objective` or its
        name): None (every member basic), one for every member, or a sequence of M. Members of
        one kind (:attr:`~cfjax.predictors.Objective.kind`: the name and CVaR level) train as
        one vmapped group, each with its own strength; each kind is one program per round,
        so a basic member never renders a counterfactual.
      counterfactuals: the counterfactual source of the training units
        (:mod:`cfjax.predictors.sources`, e.g. :meth:`cfjax.data.ChestSCM.counterfactual_source`),
        needed when an objective reads counterfactuals (unused otherwise): a step renders its
        minibatch's counterfactual images inside the compiled program.
      groups: ``(N,)`` each training unit's group in ``[0, G)`` (e.g. sex × label), needed by
        ``"group_dro"`` members (unused otherwise); each such member keeps its own group
        weights (``state.group_weights``).
      checkpoint_dir: where an orbax checkpoint is written after every evaluation round (the
        two latest kept). If it already holds a checkpoint of this run (same model, config,
        data shapes, masks, labels and keys), training resumes from its latest round; a
        resumed run ends with the same parameters as an uninterrupted one.
      max_rounds: run at most this many evaluation rounds in this call (then return; call again
        with the same ``checkpoint_dir`` to continue).
      progress: show a tqdm bar (mean loss, active members); default: when stderr is a terminal.
      mesh: the devices to spread the members over: None (one device), a device count, a
        sequence of devices or a one-axis ``jax.sharding.Mesh``. M need not be a multiple of
        the devices (the padding is :func:`cfjax.distributed.map_batch`'s and never appears in
        the state or the checkpoints, which are the same whatever the devices: a run may
        resume on other devices).

    Returns:
      The final :class:`EnsembleState` (with ``mesh``, gathered onto its first device);
      ``best_params`` is the trained ensemble (feed it to :func:`cfjax.predictors.predict`).

    Raises:
      TrainingError: a member's loss became NaN or infinite (names the member and the step).
      cfjax.ValidationError: bad arguments, or a checkpoint of a different run in
        ``checkpoint_dir``.

    Example:
      >>> from cfjax.predictors import EffusionCNN
      >>> rng = np.random.default_rng(0)
      >>> y = rng.integers(0, 2, 64)
      >>> x = (rng.uniform(size=(64, 16, 16)) * 0.5 + 0.5 * y[:, None, None]).astype(np.float32)
      >>> config = EnsembleConfig(steps=20, batch_size=8, warmup=2, eval_every=10)
      >>> state = train(EffusionCNN(features=(4,)), x, y, np.ones((2, 64), bool), x, y, config, key=0,
      ...               progress=False)
      >>> state.best_auc.shape, int(state.step)
      ((2,), 20)
      >>> one = train(EffusionCNN(features=(4,)), x, y, np.ones((2, 64), bool), x, y, config, key=0,
      ...             progress=False, mesh=1)
      >>> bool(jnp.all(one.best_auc == state.best_auc))
      True
    """
    if not isinstance(model, nn.Module):
        _checks.fail("model", "a flax linen Module", repr(model))
    if not isinstance(config, EnsembleConfig):
        _checks.fail("config", "an EnsembleConfig", repr(config))
    _check_training_set(images, labels, masks, "masks")
    m = _checks.shape_of(masks)[0]
    keys = member_keys(key, m if key is not None else None, seeds)
    if keys.shape[0] != m:
        _checks.fail("seeds", f"{m} seeds, one per row of `masks`", f"{keys.shape[0]}")
    image_shape = _checks.shape_of(images)[1:]
    _checks.check_ndim("val_images", val_images, 3, "of shape (V, H, W)")
    if _checks.shape_of(val_images)[1:] != image_shape:
        _checks.fail("val_images", f"images of size {image_shape} like `images`",
                     f"shape {_checks.shape_of(val_images)}")
    _checks.check_nonempty("val_images", val_images)
    _checks.check_finite("val_images", val_images)
    _checks.check_ndim("val_labels", val_labels, 1, "of shape (V,)")
    _checks.check_same_len("val_images", val_images, "val_labels", val_labels)
    _checks.check_binary_labels("val_labels", val_labels)
    n_pos = int(np.sum(np.asarray(val_labels) == 1))
    if n_pos in (0, len(np.asarray(val_labels))):
        _checks.fail("val_labels", "both classes for a validation AUC", f"only class {int(n_pos > 0)}")
    if names is not None:
        names = [str(n) for n in names]
        if len(names) != m:
            _checks.fail("names", f"{m} names, one per member", f"{len(names)}")
    if max_rounds is not None:
        max_rounds = _checks.check_positive_int("max_rounds", max_rounds)
    where = _dist.as_mesh(mesh)
    member_objectives = _member_objectives(objectives, m)
    plan = _plan(member_objectives)
    n = _checks.shape_of(images)[0]
    if any(o.needs_counterfactuals for o in member_objectives):
        if counterfactuals is None:
            needing = sorted({o.name for o in member_objectives if o.needs_counterfactuals})
            _checks.fail("counterfactuals", f"a counterfactual source for the objective(s) {needing}", "None")
        check_source(counterfactuals, n, tuple(image_shape))
    else:
        counterfactuals = None
    unit_groups, num_groups = None, 1
    if any(o.name == "group_dro" for o in member_objectives):
        unit_groups, num_groups = _check_groups(groups, n)

    strengths = np.array([o.strength for o in member_objectives]) if plan else None
    data = member_data(images, labels, masks, strengths=strengths, groups=unit_groups)
    dtype = data.images.dtype
    val = (jnp.asarray(val_images).astype(dtype), jnp.asarray(val_labels).astype(dtype))
    state = _init_state(model, config, keys, tuple(int(v) for v in image_shape), jnp.dtype(dtype), num_groups)
    meta = _run_metadata(model, config, data, keys, member_objectives, counterfactuals)
    extra = 0
    if where is not None:
        # M padded once to a multiple of the devices with stopped copies of the last member,
        # so that every step's members stay on their devices (unpadded, map_batch would pad,
        # split and gather the whole state at every step). Not with a checkpoint, which must
        # resume on any devices: there the members are padded at every step.
        extra = 0 if checkpoint_dir is not None else -m % where.size
        state, data = _pad_members(state, data, extra)
        if extra and plan:  # the padding (copies of the last member) steps in the last member's group
            plan = tuple((o, idx + tuple(range(m, m + extra)) if m - 1 in idx else idx) for o, idx in plan)
        state, data, val = _place(state, data, val, where)
        counterfactuals = replicate(counterfactuals, where) if counterfactuals is not None else None
    store = None if checkpoint_dir is None else _ckpt.CheckpointStore(checkpoint_dir)
    member_names = tuple(f"{i}" + ("" if names is None else f" ({names[i]!r})") for i in range(m))
    try:
        result = _training.run(
            EnsembleRound(model, config, where, plan), state, (data,) + val + (counterfactuals,), key=0,
            steps=config.steps,
            chunk_steps=config.eval_every, stride=config.eval_every, guard="loss", progress=progress,
            desc="training", locate=lambda metrics, m: f"at step {int(metrics['bad_step'][m])}",
            postfix=("mean_loss", "active"), store=store, meta=meta,
            max_chunks=max_rounds, member_names=member_names + tuple(f"{m + i} (padding)" for i in range(extra)),
            hint="lower `config.learning_rate` or check the images and labels for NaN")
    finally:
        if store is not None:
            store.close()
    if where is None:
        return result.state
    state = jax.device_put(result.state, where.devices.flat[0])
    return _take_members(state, m) if extra else state


# The member axis of each field of EnsembleState (None: one value for the whole ensemble).
_MEMBER_AXIS = {"params": 0, "opt_state": 0, "best_params": 0, "best_auc": 0, "best_step": 0, "since_best": 0,
                "active": 0, "data_keys": 0, "step": None, "round": None, "val_auc": 1, "loss": 1,
                "group_weights": 0}


def _member_objectives(objectives: Any, m: int) -> tuple[Objective, ...]:
    """Each member's :class:`Objective` from ``train``'s ``objectives``."""
    def one(o):
        if isinstance(o, Objective):
            return o
        if isinstance(o, str):
            return Objective(o)
        _checks.fail("objectives", "an Objective or an objective's name per member", repr(o))

    if objectives is None:
        return (Objective(),) * m
    if isinstance(objectives, (Objective, str)):
        return (one(objectives),) * m
    out = tuple(one(o) for o in objectives)
    if len(out) != m:
        _checks.fail("objectives", f"{m} objectives, one per member", f"{len(out)}")
    return out


def _plan(objectives: tuple[Objective, ...]) -> tuple[tuple[Objective, tuple[int, ...]], ...]:
    """The members grouped by objective kind, in order of first appearance; empty when every
    member is basic (the plain program)."""
    kinds: dict[Objective, list[int]] = {}
    for i, o in enumerate(objectives):
        kinds.setdefault(o.kind, []).append(i)
    if list(kinds) == [Objective()]:
        return ()
    return tuple((k, tuple(v)) for k, v in kinds.items())


def _check_groups(groups: Any, n: int) -> tuple[jax.Array, int]:
    """``(groups (N,) int32, G)`` checked for group DRO."""
    if groups is None:
        _checks.fail("groups", f"each training unit's group, shape ({n},), for 'group_dro' members", "None")
    g = np.asarray(groups)
    if g.shape != (n,):
        _checks.fail("groups", f"shape ({n},), one group per training unit", f"shape {g.shape}")
    if g.dtype == bool or not np.issubdtype(g.dtype, np.integer) or (g < 0).any():
        _checks.fail("groups", "non-negative integer groups", f"dtype {g.dtype}" if g.dtype == bool or not
                     np.issubdtype(g.dtype, np.integer) else f"minimum {g.min()}")
    return jnp.asarray(g, jnp.int32), int(g.max()) + 1


def _pad_members(state: EnsembleState, data: MemberData, extra: int) -> tuple[EnsembleState, MemberData]:
    """``extra`` more members: copies of the last one, stopped (``active`` False), so that
    they never step and never change a result; :func:`_take_members` drops them."""
    if not extra:
        return state, data

    def pad(v, axis):
        last = jax.lax.slice_in_dim(v, v.shape[axis] - 1, v.shape[axis], axis=axis)
        return jnp.concatenate([v] + [last] * extra, axis=axis)

    fields = {f: jax.tree.map(lambda v, a=a: pad(v, a), getattr(state, f))
              for f, a in _MEMBER_AXIS.items() if a is not None}
    fields["active"] = fields["active"].at[-extra:].set(False)
    return state.replace(**fields), data._replace(
        cdf=pad(data.cdf, 0) if data.cdf.ndim == 2 else data.cdf,
        strength=None if data.strength is None else pad(data.strength, 0))


def _take_members(state: EnsembleState, m: int) -> EnsembleState:
    """The first ``m`` members of ``state`` (the padding of :func:`_pad_members` dropped)."""
    return state.replace(**{f: jax.tree.map(lambda v, a=a: jax.lax.slice_in_dim(v, 0, m, axis=a), getattr(state, f))
                            for f, a in _MEMBER_AXIS.items() if a is not None})


def _place(state: EnsembleState, data: MemberData, val: Any, where: Any) -> tuple[EnsembleState, MemberData, Any]:
    """The shared images and validation set on every device of ``where``; with M a multiple
    of its devices, every member's state and weights on the device that steps it (so the
    loop's carry stays where ``map_batch`` computes it; otherwise ``map_batch`` pads and
    splits the members at every step)."""
    data, val = data._replace(images=replicate(data.images, where), labels=replicate(data.labels, where),
                              groups=None if data.groups is None else replicate(data.groups, where)), \
        replicate(val, where)
    if state.active.shape[0] % where.size:
        return state, data, val
    fields = {f: replicate(getattr(state, f), where) if a is None else _dist.shard(getattr(state, f), where, a)
              for f, a in _MEMBER_AXIS.items()}
    strength = None if data.strength is None else _dist.shard(data.strength, where)
    return state.replace(**fields), data._replace(cdf=_dist.shard(data.cdf, where), strength=strength), val


def _check_training_set(images: Any, labels: Any, weights: Any, weights_name: str) -> None:
    _checks.check_ndim("images", images, 3, "of shape (N, H, W)")
    _checks.check_nonempty("images", images)
    dtype = np.dtype(getattr(images, "dtype", None) or np.asarray(images).dtype)
    if not np.issubdtype(dtype, np.floating):
        _checks.fail("images", "floating-point images in [0, 1]", f"dtype {dtype}")
    _checks.check_finite("images", images)
    _checks.check_ndim("labels", labels, 1, "of shape (N,)")
    _checks.check_same_len("images", images, "labels", labels)
    _checks.check_binary_labels("labels", labels)
    w_shape = _checks.shape_of(weights)
    if len(w_shape) not in (1, 2) or w_shape[-1] != _checks.shape_of(images)[0]:
        _checks.fail(weights_name, f"shape (M, {_checks.shape_of(images)[0]}) (one row per member)",
                     f"shape {w_shape}")
    if w_shape[0] == 0:
        _checks.fail(weights_name, "at least one member", f"shape {w_shape}")
    if _checks.is_concrete(weights):
        w = np.asarray(weights)
        if w.dtype != bool:
            if not np.issubdtype(w.dtype, np.number):
                _checks.fail(weights_name, "a boolean mask or non-negative weights", f"dtype {w.dtype}")
            w = w.astype(np.float64)
            if not np.isfinite(w).all() or (w < 0).any():
                _checks.fail(weights_name, "finite non-negative weights", "negative, NaN or infinite values")
        sums = np.atleast_2d(w).sum(axis=-1)
        if (sums <= 0).any():
            _checks.fail(weights_name, "every member with at least one unit of positive weight",
                         f"member(s) {np.flatnonzero(sums <= 0).tolist()} with none")


def _run_metadata(model: nn.Module, config: EnsembleConfig, data: MemberData, keys: jax.Array,
                  objectives: tuple[Objective, ...] = (), source: Any = None) -> dict[str, Any]:
    """What identifies a run in its checkpoints (the images enter by shape and dtype only)."""
    run = {"model": repr(model), "config": dataclasses.asdict(config),
           "images": [list(data.images.shape), str(data.images.dtype)],
           "data": _ckpt.digest(data.labels, data.cdf), "keys": _ckpt.digest(jax.random.key_data(keys))}
    if any(o != Objective() for o in objectives):  # a basic run's metadata is as before
        run["objectives"] = [repr(o) for o in objectives]
        if data.groups is not None:
            run["groups"] = _ckpt.digest(data.groups)
        if source is not None:
            run["counterfactuals"] = [type(source).__name__, _ckpt.digest(*jax.tree.leaves(source))]
    return json.loads(json.dumps(run))
