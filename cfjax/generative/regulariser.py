"""The counterfactual regulariser's interventions: its data and each unit's random intervention on one parent."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax

from cfjax import _checks
from cfjax.generative import anticausal as _ac
from cfjax.generative.parents import _check_node
from cfjax.scm import SCM

__all__ = ["Regulariser", "counterfactual_targets", "make_regulariser"]


@struct.dataclass
class Regulariser:
    """The counterfactual regulariser's data (a pytree; its structure is static).

    Attributes:
      predictor: the frozen anti-causal predictors
        (:class:`~cfjax.generative.anticausal.AntiCausal`), one head per regularised parent.
      labels: ``(N, n_heads)`` each training unit's value of each head's parent (class index or
        value), column ``j`` for ``predictor.spec[j]``; the pool new Gaussian values are drawn
        from.
      slots: per head, ``(offset, width)`` of its parent's encoding in the parent vector (static).
      mechanisms: per head, its parent's mechanism, whose ``encode`` builds the counterfactual
        parent vector (static).
    """

    predictor: Any
    labels: jax.Array
    slots: tuple[tuple[int, int], ...] = struct.field(pytree_node=False)
    mechanisms: tuple[Any, ...] = struct.field(pytree_node=False)

    @property
    def spec(self) -> _ac.ParentSpec:
        return self.predictor.spec


def make_regulariser(scm: SCM, node: str, regulariser: Any, data: Mapping[str, Any]) -> Regulariser:
    """:class:`Regulariser` of trained anti-causal predictors for the image ``node``: every
    head must name a parent of ``node`` (a categorical head a discrete parent with as many
    classes, a Gaussian head a continuous scalar one) and ``data`` must hold each head's parent.

    Example:
      >>> import cfjax as cf
      >>> scm = cf.scm.SCM({"s": [], "a": [], "y": ["s", "a"]},
      ...                  {"s": cf.scm.GumbelMax(3), "a": cf.scm.LocationScale(), "y": cf.scm.LocationScale()})
      >>> spec = (_ac.Head("a", "gaussian"),)
      >>> net = _ac.ParentPredictor(spec, features=(2,), hidden=2)
      >>> q = _ac.AntiCausal(net.init(jax.random.key(0), jnp.zeros((1, 4, 4))), {"a": 0.0}, {"a": 1.0},
      ...                    jnp.zeros(1), net)
      >>> make_regulariser(scm, "y", q, {"s": np.array([0, 2]), "a": np.array([1.0, 2.0])}).slots
      ((3, 1),)
    """
    i = _check_node(scm, node)
    if not isinstance(regulariser, _ac.AntiCausal):
        _checks.fail(
            "regulariser", "an AntiCausal (train_anticausal's result)", type(regulariser).__name__
        )
    parents = scm.graph.parents[i]
    offsets, off = {}, 0
    for p in parents:
        mech = scm.mechanism(p)
        offsets[p] = (off, int(mech.encoded_dim))
        off += int(mech.encoded_dim)
    if scm.mechanisms[i].raw_parents:
        _checks.fail("scm", f"a mechanism of {node!r} fed encoded parents", "one with raw_parents")
    slots, mechs, cols = [], [], []
    for h in regulariser.spec:
        if h.name not in offsets:
            _checks.fail(
                "regulariser",
                f"heads named after parents of {node!r} ({list(parents)})",
                f"head {h.name!r}",
            )
        mech = scm.mechanism(h.name)
        if h.kind == "categorical" and (
            not mech.discrete or h.classes != getattr(mech, "num_classes", None)
        ):
            _checks.fail(
                "regulariser",
                f"a head for {h.name!r} matching its mechanism",
                f"categorical head {h}",
            )
        if h.kind == "gaussian" and (mech.discrete or scm.event(h.name) != ()):
            _checks.fail(
                "regulariser",
                f"a categorical head for {h.name!r} (Gaussian heads: continuous scalars)",
                "a Gaussian head",
            )
        if h.name not in data:
            _checks.fail(
                "data",
                f"a column {h.name!r} (a parent the regulariser intervenes on)",
                f"columns {sorted(data)}",
            )
        slots.append(offsets[h.name])
        mechs.append(mech)
        cols.append(np.asarray(data[h.name], dtype=np.float64).reshape(-1))
    labels = jnp.asarray(np.stack(cols, axis=1)).astype(jnp.result_type(float))
    return Regulariser(regulariser, labels, tuple(slots), tuple(mechs))


def _intervene_unit(
    reg: Regulariser, key: jax.Array, labels: jax.Array, pa: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One unit: one intervention on a head drawn uniformly; ``(pa*, targets, head)``."""
    spec = reg.spec
    k_head, k_val = jax.random.split(key)
    head = jax.random.randint(k_head, (), 0, len(spec))
    per_head = []
    for j, h in enumerate(spec):
        k = jax.random.fold_in(k_val, j)
        if h.kind == "categorical":  # a different class, uniformly
            assert h.classes is not None  # a categorical head's class count
            shift = jax.random.randint(k, (), 1, h.classes).astype(labels.dtype)
            new = jnp.mod(labels[j] + shift, h.classes)
        else:  # a value of the training data's empirical distribution
            new = reg.labels[jax.random.randint(k, (), 0, reg.labels.shape[0]), j]
        per_head.append(jnp.where(head == j, new, labels[j]))
    targets = jnp.stack(per_head)
    pa_star = pa
    for j, (h, (off, _width), mech) in enumerate(zip(spec, reg.slots, reg.mechanisms)):
        v = targets[j].astype(jnp.int32) if h.kind == "categorical" else targets[j]
        enc = mech.encode(v).astype(pa.dtype)
        pa_star = jnp.where(head == j, lax.dynamic_update_slice(pa, enc, (off,)), pa_star)
    return pa_star, targets, head


def counterfactual_targets(
    reg: Regulariser, key: jax.Array, labels: jax.Array, parents: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Each unit's intervention (its own key, ``split(key, B)``): a head ``j`` drawn uniformly,
    its parent set to a new value (categorical: a different class, uniformly; Gaussian: the
    value of a unit drawn uniformly from ``reg.labels``), the other parents held.

    Args:
      reg: :class:`Regulariser`. key: PRNG key.
      labels: ``(B, n_heads)`` the units' head values. parents: ``(B, P)`` encoded parents.

    Returns:
      ``(pa_star (B, P), targets (B, n_heads), head (B,))``: the counterfactual parent vectors,
      every head's counterfactual value (the intervened head's new value, the others' factual
      one) and the intervened head.
    """
    keys = jax.random.split(key, labels.shape[0])
    return jax.vmap(functools.partial(_intervene_unit, reg))(keys, labels, parents)
