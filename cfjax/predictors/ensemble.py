"""Training an ensemble of classifiers — members that differ in their training data (a mask or
per-unit weights over one shared training set) and their seed — as one jitted program.

The step of one member is a pure function (:func:`member_step`); a member's steps between two
validations are a loop of it (``lax.fori_loop``, none for a member that has stopped), mapped
over the member axis, the members optionally spread over several devices (``jax.shard_map``);
a thin Python loop over evaluation rounds logs to a progress bar and writes checkpoints.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import sys
from typing import Any, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from cfjax import _checks
from cfjax import _results
from cfjax.metrics import auc as _auc
from cfjax._core import checkpoint as _ckpt
from cfjax._errors import TrainingError
from cfjax.predictors.inference import (_check_seeds, _init, check_member_chunk, chunked_logits, gather,
                                        map_members, member_devices, pad_members)

__all__ = ["TrainConfig", "EnsembleState", "MemberData", "TrainingError", "train", "member_step",
           "member_data", "init_state"]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
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
        a time on CPU (faster there, see ``cfjax.predictors.inference.default_member_chunk``);
        on each device when :func:`train` spreads the members over several.

    Example:
      >>> TrainConfig(steps=200, eval_every=50).rounds
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
        """Every setting as plain Python for ``json.dumps``; ``TrainConfig(**d)`` rebuilds it."""
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
    """

    images: jax.Array
    labels: jax.Array
    cdf: jax.Array

    def to_dict(self) -> dict[str, Any]:
        """Every field as (nested) lists for ``json.dumps`` (the images in full: large)."""
        return {f: _results.plain(getattr(self, f)) for f in self._fields}

    def __repr__(self) -> str:
        return _results.fields_repr(type(self).__name__, ((f, _results.sized(getattr(self, f))) for f in self._fields))


def member_data(images: Any, labels: Any, weights: Any) -> MemberData:
    """:class:`MemberData` of the members whose weights (or boolean masks) are the rows of
    ``weights (M, N)`` (``cdf`` is then ``(M, N)``; one row ``(N,)`` gives ``(N,)``).

    Example:
      >>> d = member_data(jnp.zeros((4, 16, 16)), jnp.array([0, 1, 0, 1]),
      ...                 jnp.array([[True, True, False, True]]))
      >>> d.cdf.tolist()
      [[1.0, 2.0, 2.0, 3.0]]
    """
    _check_training_set(images, labels, weights, "weights")
    x = jnp.asarray(images)
    w = jnp.asarray(weights).astype(x.dtype)
    return MemberData(x, jnp.asarray(labels).astype(x.dtype), jnp.cumsum(w, axis=-1))


def _sample(key: jax.Array, cdf: jax.Array, batch_size: int) -> jax.Array:
    """``batch_size`` indices drawn with replacement, ``P(i) ∝ cdf[i] − cdf[i−1]``: a unit of
    zero weight is never drawn."""
    total = cdf[-1]
    target = jax.random.uniform(key, (batch_size,), cdf.dtype) * total
    target = jnp.minimum(target, jnp.nextafter(total, jnp.zeros((), cdf.dtype)))  # strictly below the total
    return jnp.searchsorted(cdf, target, side="right", method="scan_unrolled")


def _loss(params: Any, model: nn.Module, images: jax.Array, labels: jax.Array) -> jax.Array:
    return optax.sigmoid_binary_cross_entropy(model.apply(params, images), labels).mean()


def member_step(model: nn.Module, config: TrainConfig, params: Any, opt_state: Any, data: MemberData,
                key: jax.Array) -> tuple[Any, Any, jax.Array]:
    """One optimisation step of one member: a minibatch of ``config.batch_size`` units drawn
    with ``key`` from the member's weights, the mean binary cross-entropy of its logits, one
    AdamW update. Pure; :func:`train` runs it in a loop per member, mapped over the members.

    Returns ``(params, opt_state, loss)``, ``loss`` being the batch loss before the update.

    Example:
      >>> from cfjax.predictors import EffusionCNN, init_params
      >>> model, config = EffusionCNN(features=(4,)), TrainConfig(steps=10, batch_size=2, warmup=0)
      >>> p = jax.tree.map(lambda a: a[0], init_params(model, [0], (16, 16)))
      >>> d = member_data(jnp.zeros((4, 16, 16)), jnp.array([0, 1, 0, 1]), jnp.ones(4))
      >>> p, o, loss = member_step(model, config, p, config.optimizer().init(p), d, jax.random.key(0))
      >>> bool(jnp.isfinite(loss))
      True
    """
    idx = _sample(key, data.cdf, config.batch_size)
    loss, grads = jax.value_and_grad(_loss)(params, model, data.images[idx], data.labels[idx])
    with jax.numpy_dtype_promotion("standard"):  # optax's bias correction: float ** int32 count
        updates, opt_state = config.optimizer().update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


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
      nonfinite_step: ``(M,)`` first step with a NaN or infinite loss, −1 if none.
      data_keys: ``(M, 2)`` uint32 key data of each member's minibatch stream (step ``t`` draws
        with ``fold_in(key, t)``).
      step: steps run so far (every active member runs each step; stopped members are frozen).
      round: evaluation rounds run so far.
      val_auc: ``(R, M)`` validation AUC per round (NaN for rounds not run), ``R = config.rounds``.
      loss: ``(R, M)`` mean training loss per round over the member's active steps.
    """

    params: Any
    opt_state: Any
    best_params: Any
    best_auc: jax.Array
    best_step: jax.Array
    since_best: jax.Array
    active: jax.Array
    nonfinite_step: jax.Array
    data_keys: jax.Array
    step: jax.Array
    round: jax.Array
    val_auc: jax.Array
    loss: jax.Array

    @property
    def finished(self) -> bool:
        """Whether every member has stopped (out of patience or steps)."""
        return not bool(jnp.any(self.active))

    def to_dict(self) -> dict[str, Any]:
        """The training record as plain Python for ``json.dumps``, without parameters or
        optimiser states: ``n_members``, ``step``, ``round``, ``finished``, per member
        ``best_auc``, ``best_step``, ``since_best``, ``active``, ``nonfinite_step`` (lists of M),
        and per round ``val_auc`` and ``loss`` (R lists of M, NaN for rounds not run). Keep
        the parameters with :func:`cfjax.predictors.save_checkpoint`."""
        out = {"n_members": int(np.shape(self.best_auc)[0]), "step": int(self.step), "round": int(self.round),
               "finished": self.finished}
        for name in ("best_auc", "best_step", "since_best", "active", "nonfinite_step", "val_auc", "loss"):
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


def init_state(model: nn.Module, config: TrainConfig, seeds: Any, image_shape: tuple[int, int],
               dtype: Any = jnp.float32) -> EnsembleState:
    """The state before the first step: member ``m`` initialised from ``seeds[m]`` (parameters
    as :func:`cfjax.predictors.init_params`, minibatch stream from the other half of the split
    key).

    Example:
      >>> from cfjax.predictors import EffusionCNN
      >>> s = init_state(EffusionCNN(features=(4,)), TrainConfig(steps=10, warmup=0), [3, 4], (16, 16))
      >>> s.best_auc.shape, int(s.step)
      ((2,), 0)
    """
    seeds = _check_seeds(seeds)
    if not isinstance(config, TrainConfig):
        _checks.fail("config", "a TrainConfig", repr(config))
    if (not isinstance(image_shape, tuple) or len(image_shape) != 2
            or not all(isinstance(v, (int, np.integer)) and v >= 1 for v in image_shape)):
        _checks.fail("image_shape", "a tuple (H, W) of positive integers", repr(image_shape))
    return _init_state(model, config, jnp.asarray(seeds, jnp.uint32), tuple(int(v) for v in image_shape),
                       jnp.dtype(dtype))


@functools.partial(jax.jit, static_argnums=(0, 1, 3, 4))
def _init_state(model: nn.Module, config: TrainConfig, seeds: jax.Array, image_shape: tuple[int, int],
                dtype: Any) -> EnsembleState:
    keys = jax.vmap(jax.random.key)(seeds)
    params = _init(model, keys, image_shape, dtype)
    data_keys = jax.vmap(lambda k: jax.random.key_data(jax.random.split(k)[1]))(keys)
    m = seeds.shape[0]
    opt_state = jax.vmap(config.optimizer().init)(params)
    return EnsembleState(
        params=params, opt_state=opt_state, best_params=params,
        best_auc=jnp.full((m,), -jnp.inf, dtype), best_step=jnp.zeros((m,), jnp.int32),
        since_best=jnp.zeros((m,), jnp.int32), active=jnp.ones((m,), bool),
        nonfinite_step=jnp.full((m,), -1, jnp.int32), data_keys=data_keys,
        step=jnp.zeros((), jnp.int32), round=jnp.zeros((), jnp.int32),
        val_auc=jnp.full((config.rounds, m), jnp.nan, dtype),
        loss=jnp.full((config.rounds, m), jnp.nan, dtype))


def _select(flag: jax.Array, new: Any, old: Any) -> Any:
    """Per member: ``new`` where ``flag (M,)`` is True, else ``old`` (leaves ``(M, ...)``)."""
    def pick(a, b):
        return jnp.where(flag.reshape(flag.shape + (1,) * (a.ndim - 1)), a, b)
    return jax.tree.map(pick, new, old)


def _round(model: nn.Module, config: TrainConfig, state: EnsembleState, data: MemberData,
           val_images: jax.Array, val_labels: jax.Array) -> EnsembleState:
    """One evaluation round: each active member's next ``config.eval_every`` steps (fewer at
    the end of ``config.steps``) as a loop of :func:`member_step` (``lax.fori_loop``; a stopped
    member runs none), mapped over the members (:func:`map_members`); then every member's
    validation AUC and the early-stopping bookkeeping. Traced; every member's work is its own,
    so a shard of the members runs it alone."""
    step0 = state.step
    left = jnp.clip(config.steps - step0, 0, config.eval_every)  # steps this round for an active member

    def member_round(args):
        params, opt_state, cdf, key_data, active, nonfinite = args
        key = jax.random.wrap_key_data(key_data)
        member = MemberData(data.images, data.labels, cdf)

        def body(t, carry):
            p, o, total, bad = carry
            step = step0 + t
            p, o, loss = member_step(model, config, p, o, member, jax.random.fold_in(key, step))
            return p, o, total + loss, jnp.where((bad < 0) & ~jnp.isfinite(loss), step, bad)

        n = jnp.where(active, left, 0)
        total = jnp.zeros_like(cdf[-1], state.loss.dtype)  # (member-varying under shard_map, as cdf)
        params, opt_state, total, nonfinite = lax.fori_loop(0, n, body, (params, opt_state, total, nonfinite))
        return params, opt_state, total, n, nonfinite

    params, opt_state, total, n_live, nonfinite = map_members(
        member_round, (state.params, state.opt_state, data.cdf, state.data_keys, state.active, state.nonfinite_step),
        config.member_chunk)
    mean_loss = jnp.where(n_live > 0, total / jnp.maximum(n_live, 1).astype(total.dtype), jnp.nan)
    s = state.replace(params=params, opt_state=opt_state, nonfinite_step=nonfinite, step=step0 + config.eval_every)
    logits = chunked_logits(model, s.params, val_images, min(config.eval_chunk, val_images.shape[0]),
                            config.member_chunk)
    aucs = jax.vmap(_auc, in_axes=(0, None))(logits, val_labels).astype(s.best_auc.dtype)
    improved = s.active & (aucs > s.best_auc)
    since_best = jnp.where(improved, 0, s.since_best + s.active.astype(jnp.int32))
    return s.replace(
        best_params=_select(improved, s.params, s.best_params),
        best_auc=jnp.where(improved, aucs, s.best_auc),
        best_step=jnp.where(improved, s.step, s.best_step),
        since_best=since_best,
        active=s.active & (since_best < config.patience) & (s.step < config.steps),
        round=s.round + 1,
        val_auc=s.val_auc.at[s.round].set(aucs),
        loss=s.loss.at[s.round].set(mean_loss.astype(s.loss.dtype)))


_train_round = jax.jit(_round, static_argnums=(0, 1))

# The member axis of each field of EnsembleState (None: shared by every member).
_MEMBER_AXIS = {"params": 0, "opt_state": 0, "best_params": 0, "best_auc": 0, "best_step": 0, "since_best": 0,
                "active": 0, "nonfinite_step": 0, "data_keys": 0, "step": None, "round": None, "val_auc": 1,
                "loss": 1}


def _spec(mesh_axis: str, member_axis: int | None) -> PartitionSpec:
    return PartitionSpec() if member_axis is None else PartitionSpec(*[None] * member_axis, mesh_axis)


def _state_specs(mesh_axis: str) -> EnsembleState:
    return EnsembleState(**{f: _spec(mesh_axis, a) for f, a in _MEMBER_AXIS.items()})


def _data_specs(mesh_axis: str) -> MemberData:
    return MemberData(PartitionSpec(), PartitionSpec(), PartitionSpec(mesh_axis))


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _train_round_sharded(model: nn.Module, config: TrainConfig, mesh: Mesh, state: EnsembleState,
                         data: MemberData, val_images: jax.Array, val_labels: jax.Array) -> EnsembleState:
    """:func:`_round` with the members sharded over ``mesh``'s one axis (each device runs its
    share of the members); the training images and labels and the validation set replicated."""
    axis = mesh.axis_names[0]
    specs = _state_specs(axis)
    run = jax.shard_map(functools.partial(_round, model, config), mesh=mesh,
                        in_specs=(specs, _data_specs(axis), PartitionSpec(), PartitionSpec()), out_specs=specs)
    return run(state, data, val_images, val_labels)


def _pad_state(state: EnsembleState, pad: int) -> EnsembleState:
    """``state`` with ``pad`` more members that never train: copies of the last member,
    inactive from the start, with no divergence and no history."""
    fills = {"active": False, "nonfinite_step": -1, "val_auc": jnp.nan, "loss": jnp.nan}
    return state.replace(**{f: pad_members(getattr(state, f), pad, a, fills.get(f))
                            for f, a in _MEMBER_AXIS.items() if a is not None})


def _gather_state(state: EnsembleState, mesh: Mesh, m: int) -> EnsembleState:
    """A sharded, padded state gathered onto the mesh's first device, its first ``m`` members."""
    return state.replace(**{f: jax.device_put(getattr(state, f), mesh.devices.flat[0]) if a is None
                            else gather(getattr(state, f), mesh, m, a) for f, a in _MEMBER_AXIS.items()})


def train(model: nn.Module, images: Any, labels: Any, masks: Any, seeds: Any, val_images: Any,
          val_labels: Any, config: TrainConfig = TrainConfig(), *, names: Sequence[str] | None = None,
          checkpoint_dir: str | os.PathLike | None = None, max_rounds: int | None = None,
          progress: bool | None = None, devices: Sequence[jax.Device] | Mesh | None = None) -> EnsembleState:
    """Train M members at once, each on its own weighting of one shared training set.

    Member ``m`` starts from ``seeds[m]`` and draws each minibatch (with replacement) with
    probability proportional to ``masks[m]``; its steps, AdamW with warm-up and cosine decay,
    run ``config.eval_every`` at a time as a loop in the compiled program, mapped over the
    members (:func:`~cfjax.predictors.map_members`), each round followed by the validation AUC
    (:func:`cfjax.metrics.auc` on the validation logits). A member keeps the parameters of its
    best validation AUC and stops (frozen) after ``config.patience`` evaluations without
    improvement; training ends when every member has stopped. A member trained alone with the
    same seed and mask ends with the same parameters (to float rounding: the batched and
    single-member programs may round differently).

    With several devices the members are spread over them (``jax.shard_map`` over a one-axis
    mesh: each device runs its share of the members one after another, the shared images and
    validation set replicated); each member runs the same computation as on one device and
    ends with the same parameters (bit for bit in the tests, on CPU). On a CPU this is what
    makes the cores work together: one member's step on small images is a chain of small
    convolutions that XLA's intra-op threads do not keep every core busy with, whereas members
    on separate devices run side by side, each on its own core. JAX sees one CPU device unless
    asked before it starts: set ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (N the
    number of cores) in the environment before importing jax; ``train`` never sets it.

    Args:
      model: the network, e.g. :class:`~cfjax.predictors.EffusionCNN` (a linen module).
      images: shared training images ``(N, H, W)``, floating point in [0, 1].
      labels: ``(N,)`` effusion labels in {0, 1}.
      masks: ``(M, N)`` boolean masks or non-negative weights (each row with a positive sum),
        e.g. the rows of :func:`cfjax.predictors.paper_family`.
      seeds: ``(M,)`` non-negative integer seeds (initialisation and minibatch order).
      val_images: validation images ``(V, H, W)``; ``val_labels``: ``(V,)`` with both classes.
      config: :class:`TrainConfig`.
      names: optional member names, used in messages.
      checkpoint_dir: where an orbax checkpoint is written after every evaluation round (the
        two latest kept). If it already holds a checkpoint of this run (same model, config,
        data shapes, masks, labels and seeds), training resumes from its latest round; a
        resumed run ends with the same parameters as an uninterrupted one.
      max_rounds: run at most this many evaluation rounds in this call (then return; call again
        with the same ``checkpoint_dir`` to continue).
      progress: show a tqdm bar (loss, validation AUC); default: when stdout is a terminal.
      devices: the devices to spread the members over. ``None``: every device of
        ``jax.local_devices()`` (default backend) when there are several, otherwise the default
        device as before; or a sequence of devices, or a ``jax.sharding.Mesh`` with one axis.
        M is padded to a multiple of the device count with members that never train (their
        compute is wasted); the padding never appears in the result or the checkpoints, which
        are the same whatever the devices (a run may resume on other devices).

    Returns:
      The final :class:`EnsembleState`, gathered onto one device (the first of ``devices``);
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
      >>> state = train(EffusionCNN(features=(4,)), x, y, np.ones((2, 64), bool), [0, 1], x, y,
      ...               TrainConfig(steps=20, batch_size=8, warmup=2, eval_every=10), progress=False)
      >>> state.best_auc.shape, int(state.step)
      ((2,), 20)
      >>> one = train(EffusionCNN(features=(4,)), x, y, np.ones((2, 64), bool), [0, 1], x, y,
      ...             TrainConfig(steps=20, batch_size=8, warmup=2, eval_every=10), progress=False,
      ...             devices=jax.devices()[:1])
      >>> bool(jnp.all(one.best_auc == state.best_auc))
      True
    """
    if not isinstance(model, nn.Module):
        _checks.fail("model", "a flax linen Module", repr(model))
    if not isinstance(config, TrainConfig):
        _checks.fail("config", "a TrainConfig", repr(config))
    _check_training_set(images, labels, masks, "masks")
    seeds = _check_seeds(seeds)
    m = _checks.shape_of(masks)[0]
    if len(seeds) != m:
        _checks.fail("seeds", f"{m} seeds, one per row of `masks`", f"{len(seeds)}")
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
    where = member_devices(devices)

    data = member_data(images, labels, masks)
    dtype = data.images.dtype
    v_images = jnp.asarray(val_images).astype(dtype)
    v_labels = jnp.asarray(val_labels).astype(dtype)
    meta = _run_metadata(model, config, data, seeds, names)

    state = init_state(model, config, seeds, tuple(image_shape), dtype)
    manager = None
    if checkpoint_dir is not None:
        manager = _ckpt.CheckpointStore(checkpoint_dir)
        if manager.latest_step() is not None:
            state, saved = manager.restore(state)
            if saved.get("run") != meta["run"]:
                _checks.fail("checkpoint_dir", "a checkpoint of this run (same model, config, data and "
                             "seeds) or an empty folder", f"one of another run ({saved.get('run')})")

    if isinstance(where, Mesh):  # members padded to a multiple of the devices, sharded over them
        pad = (-m) % where.size
        axis = where.axis_names[0]
        state, data, v_images, v_labels = jax.device_put(
            (_pad_state(state, pad), data._replace(cdf=pad_members(data.cdf, pad)), v_images, v_labels),
            jax.tree.map(lambda spec: NamedSharding(where, spec),
                         (_state_specs(axis), _data_specs(axis), PartitionSpec(), PartitionSpec())))
        run_round = functools.partial(_train_round_sharded, model, config, where)

        def unpadded(s: EnsembleState) -> EnsembleState:
            return _gather_state(s, where, m)
    else:
        if where is not None:
            state, data, v_images, v_labels = jax.device_put((state, data, v_images, v_labels), where)
        run_round = functools.partial(_train_round, model, config)

        def unpadded(s: EnsembleState) -> EnsembleState:
            return s

    if progress is None:
        progress = sys.stdout.isatty()
    bar = tqdm(total=config.rounds, initial=int(state.round), disable=not progress, desc="training",
               unit="eval", dynamic_ncols=True)
    rounds_run = 0
    try:
        while not state.finished and (max_rounds is None or rounds_run < max_rounds):
            state = run_round(state, data, v_images, v_labels)
            rounds_run += 1
            _raise_if_diverged(np.asarray(state.nonfinite_step)[:m], names)
            r = int(state.round) - 1
            active = np.asarray(state.active)[:m]
            bar.set_postfix(step=int(state.step), active=f"{int(active.sum())}/{m}",
                            loss=f"{np.nanmean(np.asarray(state.loss[r])[:m]):.4f}",
                            val_auc=f"{np.nanmean(np.asarray(state.val_auc[r])[:m]):.4f}",
                            best=f"{float(np.mean(np.asarray(state.best_auc)[:m])):.4f}")
            bar.update(1)
            if manager is not None:
                manager.save(int(state.step), unpadded(state), meta)
    finally:
        bar.close()
        if manager is not None:
            manager.close()
    return unpadded(state)


def _raise_if_diverged(nonfinite_step: np.ndarray, names: Sequence[str] | None) -> None:
    """Raise :class:`TrainingError` naming the first member with a non-finite loss, if any
    (``nonfinite_step (M,)``, −1 where none)."""
    bad = nonfinite_step
    if (bad < 0).all():
        return
    m = int(np.argmin(np.where(bad >= 0, bad, np.iinfo(bad.dtype).max)))
    label = f"member {m}" + (f" ({names[m]!r})" if names is not None else "")
    others = int((bad >= 0).sum()) - 1
    raise TrainingError(
        f"training diverged: {label} had a NaN or infinite loss at step {int(bad[m])}"
        + (f" ({others} other member(s) diverged too)" if others else "")
        + "; lower `config.learning_rate` or check the images and labels for NaN.")


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


def _digest(*arrays: Any) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _run_metadata(model: nn.Module, config: TrainConfig, data: MemberData, seeds: np.ndarray,
                  names: Sequence[str] | None) -> dict[str, Any]:
    """What identifies a run in its checkpoints (the images enter by shape and dtype only)."""
    run = {"model": repr(model), "config": dataclasses.asdict(config),
           "images": [list(data.images.shape), str(data.images.dtype)],
           "data": _digest(data.labels, data.cdf), "seeds": [int(s) for s in seeds]}
    return {"run": json.loads(json.dumps(run)), "names": None if names is None else list(names)}
