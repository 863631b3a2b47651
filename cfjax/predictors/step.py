"""One optimisation step of one ensemble member (:func:`member_step`): a minibatch drawn from
the member's weights, its loss (basic or a training objective), one AdamW update."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import cast

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from cfjax import _checks
from cfjax.predictors.config import EnsembleConfig
from cfjax.predictors.data import MemberData
from cfjax.predictors.objectives import Objective
from cfjax.typing import PyTree

__all__ = ["MemberUpdate", "member_step"]


def _sample(key: jax.Array, cdf: jax.Array, batch_size: int) -> jax.Array:
    """``batch_size`` indices drawn with replacement, ``P(i) ∝ cdf[i] − cdf[i−1]``: a unit of
    zero weight is never drawn."""
    total = cdf[-1]
    target = jax.random.uniform(key, (batch_size,), cdf.dtype) * total
    target = jnp.minimum(
        target, jnp.nextafter(total, jnp.zeros((), cdf.dtype))
    )  # strictly below the total
    return jnp.searchsorted(cdf, target, side="right", method="scan_unrolled")


def _loss(params: PyTree, model: nn.Module, images: jax.Array, labels: jax.Array) -> jax.Array:
    return optax.sigmoid_binary_cross_entropy(model.apply(params, images), labels).mean()


def _objective_loss(
    params: PyTree,
    model: nn.Module,
    objective: Objective,
    strength: jax.Array,
    x: jax.Array,
    y: jax.Array,
    x_cf: jax.Array | None,
    weights: jax.Array | None,
    groups: jax.Array | None,
    group_weights: jax.Array | None,
) -> tuple[jax.Array, jax.Array | None]:
    """``(loss, group weights)`` of one minibatch: factual images ``x (B, H, W)``, their
    counterfactual images ``x_cf (B, J, H, W)`` (None where not needed), all logits the
    objective reads from one call of the model, its :meth:`~Objective.train_loss`."""
    # model.apply without mutable state: the output alone
    o: jax.Array | None
    c: jax.Array | None
    if x_cf is None:
        o, c = cast(jax.Array, model.apply(params, x)), None
    else:
        b, j = x_cf.shape[:2]
        flat = x_cf.reshape((b * j,) + x_cf.shape[2:])
        if objective.needs_factual:
            logits = cast(jax.Array, model.apply(params, jnp.concatenate([x, flat])))
            o, c = logits[:b], logits[b:].reshape(b, j)
        else:  # counterfactual images only
            o, c = None, cast(jax.Array, model.apply(params, flat)).reshape(b, j)
    return objective.train_loss(
        o, c, y, strength=strength, weights=weights, groups=groups, group_weights=group_weights
    )


@struct.dataclass
class MemberUpdate:
    """:func:`member_step`'s result.

    Attributes:
      params: the member's parameters after the step.
      opt_state: its optimiser state after the step.
      loss: ``()`` the minibatch's loss before the update.
      group_weights: ``(G,)`` its group DRO weights after the step (updated by group DRO,
        unchanged by any other objective); None when the step was given none.
    """

    params: PyTree
    opt_state: PyTree
    loss: jax.Array
    group_weights: jax.Array | None = None

    def __iter__(self) -> Iterator[PyTree]:
        """The tuple of earlier releases, ``(params, opt_state, loss)`` and ``group_weights``
        when given (deprecated: read the fields)."""
        warnings.warn(
            "unpacking cfjax.predictors.step.member_step's result is deprecated and will be removed in the next "
            "release: use its fields .params, .opt_state, .loss, .group_weights",
            DeprecationWarning,
            stacklevel=2,
        )
        legacy = (self.params, self.opt_state, self.loss)
        return iter(legacy if self.group_weights is None else legacy + (self.group_weights,))


def member_step(
    model: nn.Module,
    config: EnsembleConfig,
    params: PyTree,
    opt_state: PyTree,
    data: MemberData,
    key: jax.Array,
    *,
    objective: Objective | None = None,
    source: PyTree = None,
    group_weights: jax.Array | None = None,
) -> MemberUpdate:
    """One optimisation step of one member: a minibatch of ``config.batch_size`` units drawn
    with ``key`` from the member's weights, the batch's loss, one AdamW update. Pure;
    :func:`cfjax.predictors.train` runs it for every member in every round of its loop. It
    runs under the caller's dtype promotion, strict or standard, with the same result.

    The loss is ``objective``'s (:class:`cfjax.predictors.Objective`; default the basic mean
    binary cross-entropy of the factual logits) at the member's ``data.strength``. An objective
    that reads counterfactuals gets the minibatch's counterfactual images from ``source``
    (:mod:`cfjax.predictors.sources`) inside the step, those of the objective's
    :meth:`~cfjax.predictors.Objective.interventions` (all K of each unit, or for
    ``"augment"`` one drawn from the source's weights with ``fold_in(key, 1)``, the factual
    image then unused); the loss is the objective's
    :meth:`~cfjax.predictors.Objective.train_loss`. All of a step's images go through the
    model in one call. Group DRO (``"group_dro"``) needs ``data.groups`` and the member's
    ``group_weights (G,)``.

    Returns a :class:`MemberUpdate`: the new ``params`` and ``opt_state``, the batch ``loss``
    before the update, and with ``group_weights`` given the weights updated by group DRO
    (unchanged by any other objective; None without).

    Example:
      >>> from cfjax.predictors import EffusionCNN, init_params
      >>> from cfjax.predictors.data import member_data
      >>> model, config = EffusionCNN(features=(4,)), EnsembleConfig(steps=10, batch_size=2, warmup=0)
      >>> p = jax.tree.map(lambda a: a[0], init_params(model, (16, 16), key=0, members=1))
      >>> d = member_data(jnp.zeros((4, 16, 16)), jnp.array([0, 1, 0, 1]), jnp.ones(4))
      >>> out = member_step(model, config, p, config.optimizer().init(p), d, jax.random.key(0))
      >>> bool(jnp.isfinite(out.loss))
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
                _checks.fail(
                    "source",
                    f"a counterfactual source for the objective {objective.name!r}",
                    "None",
                )
            weights = jnp.asarray(source.weights, data.images.dtype)
            which = objective.interventions(idx.shape[0], weights, key=jax.random.fold_in(key, 1))
            x_cf = source.images(idx, which).astype(data.images.dtype)
        groups = None if data.groups is None else data.groups[idx]
        if objective.needs_groups and (groups is None or group_weights is None):
            _checks.fail(
                "group_weights",
                f"the member's group weights and `data.groups` for {objective.name!r}",
                "None",
            )
        strength = jnp.asarray(
            objective.strength if data.strength is None else data.strength, data.images.dtype
        )
        (loss, q), grads = jax.value_and_grad(_objective_loss, has_aux=True)(
            params,
            model,
            objective.kind,
            strength,
            data.images[idx],
            data.labels[idx],
            x_cf,
            weights,
            groups,
            group_weights,
        )
    updates, opt_state = config.optimizer().update(grads, opt_state, params)
    return MemberUpdate(optax.apply_updates(params, updates), opt_state, loss, q)
