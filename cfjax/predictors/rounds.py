"""One evaluation round of an ensemble (:class:`EnsembleRound`): every active member's steps,
then every member's validation AUC and early stopping; the pure step of
:func:`cfjax._core.training.run`."""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cfjax import distributed as _dist
from cfjax.metrics import auc as _auc
from cfjax.predictors.config import EnsembleConfig
from cfjax.predictors.data import MemberData
from cfjax.predictors.inference import chunked_logits, map_members
from cfjax.predictors.objectives import Objective
from cfjax.predictors.state import EnsembleState, MemberState
from cfjax.predictors.step import member_step
from cfjax.typing import MeshLike, PyTree

__all__ = ["EnsembleRound"]


def _select(flag: jax.Array, new: PyTree, old: PyTree) -> PyTree:
    """Per member: ``new`` where ``flag (M,)`` is True, else ``old`` (leaves ``(M, ...)``)."""

    def pick(a, b):
        return jnp.where(flag.reshape(flag.shape + (1,) * (a.ndim - 1)), a, b)

    return jax.tree.map(pick, new, old)


@struct.dataclass
class RoundInputs:
    """What every member of a round reads: the shared training set (``images (N, H, W)``,
    ``labels (N,)``, ``groups (N,)`` or None), the counterfactual ``source`` (or None), the
    validation set (``val_images (V, H, W)``, ``val_labels (V,)``), the steps run before the
    round (``step``) and whether any member of the ensemble is active (``live``)."""

    images: jax.Array
    labels: jax.Array
    groups: jax.Array | None
    source: PyTree
    val_images: jax.Array
    val_labels: jax.Array
    step: jax.Array
    live: jax.Array


@struct.dataclass
class MemberRound:
    """One round of a block of members: their new :class:`MemberState` (without
    ``data_keys``, None: a round leaves them as they are) and, per member
    ``(M',)``, the round's validation AUC (NaN when not ``live``), mean batch loss (0 for a
    stopped member) and first step whose loss was not finite (−1: none)."""

    members: MemberState
    val_auc: jax.Array
    loss: jax.Array
    bad_step: jax.Array


@dataclasses.dataclass(frozen=True)
class _MemberRounds:
    """One evaluation round of each of a block of members: what
    :func:`cfjax.distributed.map_batch` runs on each device's members, so that a device's
    members meet the others once a round, not once a step.

    ``(members, cdf (M', N), strength (M',), inputs)`` → :class:`MemberRound`. An active member
    takes the round's steps (:func:`member_step` with :attr:`objective`, ``lax.fori_loop``), a
    stopped one none; then, when ``inputs.live`` (some member of the whole ensemble is active),
    every member is evaluated and its early stopping updated."""

    model: nn.Module
    config: EnsembleConfig
    objective: Objective = Objective()

    def __call__(
        self, members: MemberState, cdf: jax.Array, strength: jax.Array, inputs: RoundInputs
    ) -> MemberRound:
        config, s, step = self.config, members, inputs.step
        left = jnp.clip(
            config.steps - step, 0, config.eval_every
        )  # an active member's steps this round
        objective = self.objective

        def one(args):
            p, o, c, key_data, act, lam, q = args
            key = jax.random.wrap_key_data(key_data)
            member = MemberData(inputs.images, inputs.labels, c, lam, inputs.groups)

            def body(i, carry):
                p, o, q, total, bad = carry
                u = member_step(
                    self.model,
                    config,
                    p,
                    o,
                    member,
                    jax.random.fold_in(key, step + i),
                    objective=objective,
                    source=inputs.source,
                    group_weights=q,
                )
                return (
                    u.params,
                    u.opt_state,
                    u.group_weights,
                    total + u.loss,
                    jnp.where((bad < 0) & ~jnp.isfinite(u.loss), step + i, bad),
                )

            total = jnp.zeros((), inputs.images.dtype)
            bad = jnp.full((), -1, jnp.int32)
            return jax.lax.fori_loop(0, jnp.where(act, left, 0), body, (p, o, q, total, bad))

        params, opt_state, group_weights, total, bad = map_members(
            one,
            (s.params, s.opt_state, cdf, s.data_keys, s.active, strength, s.group_weights),
            config.member_chunk,
        )
        loss = jnp.where(s.active, total / jnp.maximum(left, 1).astype(total.dtype), 0)
        done = step + left

        def evaluate(_):
            val_images = inputs.val_images
            logits = chunked_logits(
                self.model,
                params,
                val_images,
                min(config.eval_chunk, val_images.shape[0]),
                config.member_chunk,
            )
            aucs = jax.vmap(_auc, in_axes=(0, None))(logits, inputs.val_labels).astype(
                s.best_auc.dtype
            )
            improved = s.active & (aucs > s.best_auc)
            since = jnp.where(improved, 0, s.since_best + s.active.astype(jnp.int32))
            return (
                _select(improved, params, s.best_params),
                jnp.where(improved, aucs, s.best_auc),
                jnp.where(improved, done, s.best_step),
                since,
                s.active & (since < config.patience) & (done < config.steps),
                aucs,
            )

        def skip(_):
            return (
                s.best_params,
                s.best_auc,
                s.best_step,
                s.since_best,
                s.active,
                jnp.full_like(s.best_auc, jnp.nan),
            )

        best_params, best_auc, best_step, since_best, still, aucs = jax.lax.cond(
            inputs.live, evaluate, skip, None
        )
        # the keys are left out of the result (None): a round never changes them, and passing them
        # back through map_batch would cost a copy and, for grouped members, a scatter per group
        new = dataclasses.replace(
            s,
            params=params,
            opt_state=opt_state,
            best_params=best_params,
            best_auc=best_auc,
            best_step=best_step,
            since_best=since_best,
            active=still,
            group_weights=group_weights,
            data_keys=None,
        )
        return MemberRound(new, aucs, loss, bad)


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
    mesh: MeshLike = None
    groups: tuple[tuple[Objective, tuple[int, ...]], ...] = ()

    def __call__(
        self,
        state: EnsembleState,
        data: tuple[MemberData, jax.Array, jax.Array, PyTree],
        key: jax.Array,
    ) -> tuple[EnsembleState, dict[str, jax.Array]]:
        del key  # each member's minibatch stream is its own (state.data_keys)
        config = self.config
        train_data, val_images, val_labels, source = data
        live = jnp.any(state.active)  # once every member has stopped, a round changes nothing
        s = state
        m = s.active.shape[0]
        strength = (
            jnp.zeros((m,), train_data.images.dtype)
            if train_data.strength is None
            else train_data.strength
        )
        members = (s.members, train_data.cdf, strength)
        inputs = RoundInputs(
            train_data.images,
            train_data.labels,
            train_data.groups,
            source,
            val_images,
            val_labels,
            s.step,
            live,
        )
        plan = self.groups or ((Objective(), tuple(range(m))),)
        if len(plan) == 1 and plan[0][1] == tuple(range(m)):
            out = _dist.map_batch(
                _MemberRounds(self.model, config, plan[0][0]),
                *members,
                shared=(inputs,),
                mesh=self.mesh,
            )
        else:  # each group its own program, on its members; the results put back in member order
            parts = []
            for objective, idx in plan:
                sel = np.asarray(idx)
                sub = jax.tree.map(lambda a, sel=sel: a[sel], members)
                parts.append(
                    (
                        sel,
                        _dist.map_batch(
                            _MemberRounds(self.model, config, objective),
                            *sub,
                            shared=(inputs,),
                            mesh=self.mesh,
                        ),
                    )
                )
            out = jax.tree.map(
                lambda *a: jnp.zeros((m,) + a[0].shape[1:], a[0].dtype), *(p for _, p in parts)
            )
            for sel, part in parts:
                out = jax.tree.map(lambda o, p, sel=sel: o.at[sel].set(p), out, part)
        loss = out.loss.astype(s.loss.dtype)
        r = jnp.minimum(s.round, config.rounds - 1)
        left = jnp.clip(config.steps - s.step, 0, config.eval_every)
        n_active = jnp.sum(s.active).astype(loss.dtype)
        metrics = {
            "loss": loss,
            "bad_step": out.bad_step,
            "mean_loss": jnp.sum(loss) / jnp.maximum(n_active, 1),
            "active": n_active,
        }
        new = dataclasses.replace(
            s.with_members(dataclasses.replace(out.members, data_keys=s.data_keys)),
            step=s.step + jnp.where(live, left, 0),
            round=s.round + live.astype(s.round.dtype),
            val_auc=s.val_auc.at[r].set(jnp.where(live, out.val_auc, s.val_auc[r])),
            loss=s.loss.at[r].set(jnp.where(live, jnp.where(s.active, loss, jnp.nan), s.loss[r])),
        )
        return new, metrics
