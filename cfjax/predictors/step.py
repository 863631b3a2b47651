"""One optimisation step of one ensemble member (:func:`member_step`): a minibatch drawn from
the member's weights, its loss (basic or a training objective), one AdamW update."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from cfjax import _checks
from cfjax.predictors import objectives as _obj
from cfjax.predictors.config import EnsembleConfig
from cfjax.predictors.data import MemberData
from cfjax.predictors.objectives import Objective
from cfjax.predictors.sources import all_interventions

__all__ = ["member_step"]

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
    :func:`cfjax.predictors.train` runs it for every member in every round of its loop. It
    runs under the caller's dtype promotion, strict or standard, with the same result.

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
      >>> from cfjax.predictors import EffusionCNN, init_params, member_data
      >>> model, config = EffusionCNN(features=(4,)), EnsembleConfig(steps=10, batch_size=2, warmup=0)
      >>> p = jax.tree.map(lambda a: a[0], init_params(model, (16, 16), key=0, members=1))
      >>> d = member_data(jnp.zeros((4, 16, 16)), jnp.array([0, 1, 0, 1]), jnp.ones(4))
      >>> p, o, loss = member_step(model, config, p, config.optimizer().init(p), d, jax.random.key(0))
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
