"""The image node's parents in training: the encoded parent vector the SCM feeds it, missing labels imputed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax.generative import anticausal as _ac
from cfjax.generative.anticausal import _check_images
from cfjax.scm import SCM

__all__ = ["impute_parents", "parent_inputs"]


def parent_inputs(scm: SCM, node: str, data: Mapping[str, Any]) -> jax.Array:
    """Each unit's encoded parents of ``node``, exactly the vector :class:`cfjax.scm.SCM` feeds
    the node's mechanism (its parents in graph order, each through its mechanism's
    ``encode``: a binary class as 0/1, a larger one one-hot, a scalar as itself).

    Args:
      scm: the model. node: a node with at least one parent.
      data: ``{name: (N, *E)}`` holding (at least) every parent of ``node``, validated as
        :meth:`cfjax.scm.SCM.abduct` validates data.

    Returns:
      ``(N, P)`` floating point.

    Example:
      >>> import cfjax as cf
      >>> scm = cf.scm.SCM({"s": [], "a": [], "y": ["s", "a"]},
      ...                  {"s": cf.scm.GumbelMax(2), "a": cf.scm.LocationScale(), "y": cf.scm.LocationScale()})
      >>> parent_inputs(scm, "y", {"s": np.array([0, 1]), "a": np.array([2.5, 3.0], np.float32)}).tolist()
      [[0.0, 2.5], [1.0, 3.0]]
    """
    i = _check_node(scm, node)
    cast = scm.check_data(data, nodes=scm.graph.parents[i], name="data")
    return jax.vmap(lambda values: scm.parent_vector(node, values))(cast)


def _check_node(scm: Any, node: Any) -> int:
    if not isinstance(scm, SCM):
        _checks.fail("scm", "a cfjax.scm.SCM", type(scm).__name__)
    if not isinstance(node, str) or node not in scm.nodes:
        _checks.fail("node", f"a node of the SCM ({list(scm.nodes)})", repr(node))
    i = scm.graph.index(node)
    if not scm.graph.parents[i]:
        _checks.fail(
            "node",
            "a node with at least one parent (the HVAE is conditional)",
            f"root node {node!r}",
        )
    return i


def impute_parents(
    scm: SCM,
    node: str,
    data: Mapping[str, Any],
    mask: Mapping[str, Any] | None = None,
    anticausal: Any = None,
) -> tuple[dict[str, Any], jax.Array]:
    """The data with the missing parent labels of ``node`` imputed, and each unit's weight.

    A parent ``p`` in ``mask`` keeps its observed label where ``mask[p]`` is True and takes
    :func:`cfjax.generative.anticausal.impute`'s value elsewhere (the most probable class of a
    categorical head, the mean of a Gaussian one, clipped into the parent's support when its
    mechanism is bounded, e.g. a bounded spline: a predicted age of 16 becomes 20). A unit's weight is the product over the
    masked parents of the imputed weights: ``1 − H(q(p | x))/log C`` for an imputed discrete
    parent, 1 for an observed label or an imputed continuous one (paper 000, appendix).

    Args:
      scm, node: the model and the image node.
      data: ``{name: (N, *E)}``; ``data[node]`` the images ``(N, H, W)``; a masked parent's
        column may hold anything (NaN, −1) where it is not observed.
      mask: ``{parent: (N,) bool}`` (True: observed), or None (every label observed: weights 1).
      anticausal: :class:`~cfjax.generative.anticausal.AntiCausal` with a head for every
        masked parent (required with ``mask``).

    Returns:
      ``(data, weights)``: the data with imputed columns, and ``(N,)`` weights.
    """
    i = _check_node(scm, node)
    if not isinstance(data, Mapping):
        _checks.fail("data", "a mapping node -> array", type(data).__name__)
    if node not in data:
        _checks.fail("data", f"a column {node!r} of images (N, H, W)", f"columns {sorted(data)}")
    n = _checks.shape_of(data[node])[0] if _checks.shape_of(data[node]) else 0
    dtype = jnp.result_type(float)
    if mask is None:
        if anticausal is not None:
            _checks.fail("mask", "a mask {parent: (N,) bool} when `anticausal` is given", "None")
        return dict(data), jnp.ones((n,), dtype)
    if anticausal is None:
        _checks.fail(
            "anticausal",
            "anti-causal predictors (AntiCausal) to impute the labels `mask` hides",
            "None",
        )
    if not isinstance(anticausal, _ac.AntiCausal):
        _checks.fail(
            "anticausal", "an AntiCausal (train_anticausal's result)", type(anticausal).__name__
        )
    if not isinstance(mask, Mapping):
        _checks.fail("mask", "a mapping {parent: (N,) bool}", type(mask).__name__)
    parents = scm.graph.parents[i]
    unknown = [p for p in mask if p not in parents]
    if unknown:
        _checks.fail(
            "mask", f"keys among the parents of {node!r} ({list(parents)})", f"unknown {unknown}"
        )
    heads = {h.name: h for h in anticausal.spec}
    missing = [p for p in mask if p not in heads]
    if missing:
        _checks.fail(
            "anticausal", f"a head for every masked parent {sorted(mask)}", f"none for {missing}"
        )
    for p in mask:
        if heads[p].kind == "categorical" and (
            not scm.mechanism(p).discrete
            or heads[p].classes != getattr(scm.mechanism(p), "num_classes", None)
        ):
            _checks.fail(
                "anticausal",
                f"a head for {p!r} matching its mechanism",
                f"categorical head {heads[p]}",
            )
        if heads[p].kind == "gaussian" and scm.mechanism(p).discrete:
            _checks.fail(
                "anticausal", f"a categorical head for discrete parent {p!r}", "a Gaussian head"
            )
    masks = {}
    for p, m in mask.items():
        if p not in data:
            _checks.fail(
                "data",
                f"a column {p!r} (masked labels may hold anything)",
                f"columns {sorted(data)}",
            )
        m = np.asarray(m)
        if m.shape != (n,) or not (m.dtype == bool or np.all((m == 0) | (m == 1))):
            _checks.fail(
                f"mask[{p!r}]",
                f"a boolean array of shape ({n},)",
                f"shape {m.shape}, dtype {m.dtype}",
            )
        masks[p] = m.astype(bool)
    images = data[node]
    if len(_check_images("data", images)) != 3:
        _checks.fail(
            "data", f"a column {node!r} of images (N, H, W)", f"shape {_checks.shape_of(images)}"
        )
    labels, head_mask = {}, {}
    for (
        name
    ) in heads:  # heads that are not masked parents: observed when given, else imputed and unused
        if name in masks:
            labels[name], head_mask[name] = np.asarray(data[name]), masks[name]
        elif name in data:
            labels[name], head_mask[name] = np.asarray(data[name]), np.ones((n,), bool)
        else:
            labels[name], head_mask[name] = np.zeros((n,)), np.zeros((n,), bool)
    out = _ac.impute(anticausal, images, labels, head_mask)
    imputed = dict(out.parents)
    for p in masks:  # a predicted mean may leave a bounded parent's support: clip it into it
        mech = scm.mechanism(p)
        if heads[p].kind == "gaussian" and getattr(mech, "bounded", False):
            low, high = getattr(mech, "low", None), getattr(mech, "high", None)  # bounded: both set
            imputed[p] = jnp.clip(imputed[p], low, high).astype(jnp.asarray(imputed[p]).dtype)
    weights = jnp.ones((n,), dtype)
    for p in masks:
        weights = weights * out.weights[p].astype(dtype)
    completed = dict(data)
    completed.update({p: imputed[p] for p in masks})
    return completed, weights
