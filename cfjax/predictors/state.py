"""An ensemble's training state (:class:`EnsembleState`, :func:`init_state`), stacked over
members, and its layout over devices: the padding of the members to a multiple of the devices
and their placement."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from flax import struct
from jax.typing import DTypeLike

from cfjax import _checks, _results
from cfjax import distributed as _dist
from cfjax.predictors.config import EnsembleConfig
from cfjax.predictors.data import MemberData
from cfjax.predictors.inference import _check_image_shape, _init, member_keys, replicate
from cfjax.typing import KeyLike, Mesh, PyTree

__all__ = ["EnsembleState", "MemberState", "init_state"]


@struct.dataclass
class MemberState:
    """The members' part of an :class:`EnsembleState`, every field stacked over members
    ``(M, ...)``: what a block of members carries through an evaluation round
    (:class:`cfjax.predictors.rounds.EnsembleRound`), on the device that steps them. The fields are
    :class:`EnsembleState`'s of the same names: ``params``, ``opt_state``, ``best_params``,
    ``best_auc``, ``best_step``, ``since_best``, ``active``, ``data_keys``, ``group_weights``.
    """

    params: PyTree
    opt_state: PyTree
    best_params: PyTree
    best_auc: jax.Array
    best_step: jax.Array
    since_best: jax.Array
    active: jax.Array
    data_keys: jax.Array | None  # None in a round's result: the round leaves them as they are
    group_weights: jax.Array


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

    params: PyTree
    opt_state: PyTree
    best_params: PyTree
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
    def members(self) -> MemberState:
        """The fields stacked over members (:class:`MemberState`)."""
        return MemberState(**{f: getattr(self, f) for f in _MEMBER_FIELDS})

    def with_members(self, members: MemberState) -> EnsembleState:
        """This state with the members' fields of ``members``."""
        return dataclasses.replace(self, **{f: getattr(members, f) for f in _MEMBER_FIELDS})

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
        :func:`cfjax.checkpoint.save_checkpoint`."""
        out = {
            "n_members": int(np.shape(self.best_auc)[0]),
            "step": int(self.step),
            "round": int(self.round),
            "finished": self.finished,
        }
        for name in (
            "best_auc",
            "best_step",
            "since_best",
            "active",
            "val_auc",
            "loss",
            "group_weights",
        ):
            out[name] = _results.plain(getattr(self, name))
        return out

    def __repr__(self) -> str:
        m = np.shape(self.best_auc)[0]
        n_params = sum(int(np.size(v)) for v in jax.tree.leaves(self.best_params))
        items = [("members", m), ("step", self.step), ("round", self.round)]
        if not any(isinstance(v, jax.core.Tracer) for v in (self.best_auc, self.active, self.step)):
            auc = np.asarray(self.best_auc, dtype=np.float64)
            items += [
                ("active", _results.Raw(f"{int(np.sum(np.asarray(self.active)))}/{m}")),
                ("best_auc_mean", float(np.mean(auc)) if m else float("nan")),
                ("best_auc_min", float(np.min(auc)) if m else float("nan")),
            ]
        items.append(("params_per_member", n_params // max(m, 1)))
        return _results.fields_repr(type(self).__name__, items)


def init_state(
    model: nn.Module,
    config: EnsembleConfig,
    image_shape: tuple[int, int],
    dtype: DTypeLike = jnp.float32,
    *,
    key: KeyLike | None = None,
    members: int | None = None,
    seeds: npt.ArrayLike | None = None,
    num_groups: int = 1,
) -> EnsembleState:
    """The state before the first step. Member ``m``'s key (:func:`cfjax.predictors.inference.member_keys`:
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
    keys = member_keys(members, key=key, seeds=seeds)
    num_groups = _checks.check_positive_int("num_groups", num_groups)
    return _init_state(
        model, config, keys, _check_image_shape(image_shape), jnp.dtype(dtype), num_groups
    )


@functools.partial(jax.jit, static_argnums=(0, 1, 3, 4, 5))
def _init_state(
    model: nn.Module,
    config: EnsembleConfig,
    keys: jax.Array,
    image_shape: tuple[int, int],
    dtype: DTypeLike,
    num_groups: int = 1,
) -> EnsembleState:
    params = _init(model, keys, image_shape, dtype)
    data_keys = jax.vmap(lambda k: jax.random.key_data(jax.random.split(k)[1]))(keys)
    m = keys.shape[0]
    opt_state = jax.vmap(config.optimizer().init)(params)
    return EnsembleState(
        params=params,
        opt_state=opt_state,
        best_params=params,
        best_auc=jnp.full((m,), -jnp.inf, dtype),
        best_step=jnp.zeros((m,), jnp.int32),
        since_best=jnp.zeros((m,), jnp.int32),
        active=jnp.ones((m,), bool),
        data_keys=data_keys,
        step=jnp.zeros((), jnp.int32),
        round=jnp.zeros((), jnp.int32),
        val_auc=jnp.full((config.rounds, m), jnp.nan, dtype),
        loss=jnp.full((config.rounds, m), jnp.nan, dtype),
        group_weights=jnp.full((m, num_groups), 1.0 / num_groups, dtype),
    )


# The member axis of each field of EnsembleState (None: one value for the whole ensemble).
_MEMBER_AXIS = {
    "params": 0,
    "opt_state": 0,
    "best_params": 0,
    "best_auc": 0,
    "best_step": 0,
    "since_best": 0,
    "active": 0,
    "data_keys": 0,
    "step": None,
    "round": None,
    "val_auc": 1,
    "loss": 1,
    "group_weights": 0,
}
#: MemberState's fields: EnsembleState's with the member axis first
_MEMBER_FIELDS = tuple(f for f, a in _MEMBER_AXIS.items() if a == 0)


def _pad_members(
    state: EnsembleState, data: MemberData, extra: int
) -> tuple[EnsembleState, MemberData]:
    """``extra`` more members: copies of the last one, stopped (``active`` False), so that
    they never step and never change a result; :func:`_take_members` drops them."""
    if not extra:
        return state, data

    def pad(v, axis):
        last = jax.lax.slice_in_dim(v, v.shape[axis] - 1, v.shape[axis], axis=axis)
        return jnp.concatenate([v] + [last] * extra, axis=axis)

    fields = {
        f: jax.tree.map(lambda v, a=a: pad(v, a), getattr(state, f))
        for f, a in _MEMBER_AXIS.items()
        if a is not None
    }
    fields["active"] = fields["active"].at[-extra:].set(False)
    return dataclasses.replace(state, **fields), data._replace(
        cdf=pad(data.cdf, 0) if data.cdf.ndim == 2 else data.cdf,
        strength=None if data.strength is None else pad(data.strength, 0),
    )


def _take_members(state: EnsembleState, m: int) -> EnsembleState:
    """The first ``m`` members of ``state`` (the padding of :func:`_pad_members` dropped)."""
    return dataclasses.replace(
        state,
        **{
            f: jax.tree.map(lambda v, a=a: jax.lax.slice_in_dim(v, 0, m, axis=a), getattr(state, f))
            for f, a in _MEMBER_AXIS.items()
            if a is not None
        },
    )


def _place(
    state: EnsembleState, data: MemberData, val: PyTree, where: Mesh
) -> tuple[EnsembleState, MemberData, PyTree]:
    """The shared images and validation set on every device of ``where``; with M a multiple
    of its devices, every member's state and weights on the device that steps it (so the
    loop's carry stays where ``map_batch`` computes it; otherwise ``map_batch`` pads and
    splits the members at every step)."""
    data, val = (
        data._replace(
            images=replicate(data.images, where),
            labels=replicate(data.labels, where),
            groups=None if data.groups is None else replicate(data.groups, where),
        ),
        replicate(val, where),
    )
    if state.active.shape[0] % where.size:
        return state, data, val
    fields = {
        f: replicate(getattr(state, f), where)
        if a is None
        else _dist.shard(getattr(state, f), where, a)
        for f, a in _MEMBER_AXIS.items()
    }
    strength = None if data.strength is None else _dist.shard(data.strength, where)
    return (
        dataclasses.replace(state, **fields),
        data._replace(cdf=_dist.shard(data.cdf, where), strength=strength),
        val,
    )
