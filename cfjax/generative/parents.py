"""The image node's parents: predicted from images by the anti-causal predictors of
:mod:`cfjax.generative.anticausal` (:func:`predict_parents`), missing labels imputed
(:func:`impute`, an imputed class weighted by :func:`entropy_weight`; an SCM's data:
:func:`impute_parents`), and in training the encoded parent vector the SCM feeds the node
(:func:`parent_inputs`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from cfjax import _checks
from cfjax.generative import anticausal as _ac
from cfjax.generative.anticausal import (
    _LOG_SCALE_BOUND,
    SCALE_SUFFIX,
    AntiCausal,
    AntiCausalConfig,  # noqa: F401 (the examples use it)
    Head,  # noqa: F401 (the examples use it)
    ParentPredictor,
    _check_images,
    _check_parents,
    _mask_array,
    train_anticausal,  # noqa: F401 (the examples use it)
)
from cfjax.scm import SCM
from cfjax.typing import Array, ArrayLike, PyTree

__all__ = [
    "predict_parents",
    "entropy_weight",
    "Imputed",
    "impute",
    "impute_parents",
    "parent_inputs",
]


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


def _check_result(result: AntiCausal) -> AntiCausal:
    if not isinstance(result, AntiCausal):
        _checks.fail("result", "an AntiCausal (train_anticausal's result)", type(result).__name__)
    return result


# ----------------------------------------------------------------------- prediction
@functools.partial(jax.jit, static_argnums=(0, 1))
def _predict_flat(
    model: ParentPredictor,
    chunk: int,
    params: PyTree,
    loc: Mapping[str, Array],
    scale: Mapping[str, Array],
    images: jax.Array,
) -> dict[str, jax.Array]:
    """``images (M, H, W)`` in blocks of ``chunk`` (``lax.map``, the last padded with copies of
    the final image) to probabilities / means and scales ``(M, ...)``."""
    n = images.shape[0]
    pad = (-n) % chunk
    if pad:
        images = jnp.concatenate([images, jnp.broadcast_to(images[-1:], (pad,) + images.shape[1:])])
    blocks = images.reshape((-1, chunk) + images.shape[1:])

    def one_block(b):
        out = model.apply(params, b)
        res = {}
        for h in model.spec:
            o = out[h.name]
            if h.kind == "categorical":
                res[h.name] = jax.nn.softmax(o, axis=-1)
            else:
                res[h.name] = loc[h.name] + scale[h.name] * o[:, 0]
                res[h.name + SCALE_SUFFIX] = scale[h.name] * jnp.exp(
                    jnp.clip(o[:, 1], -_LOG_SCALE_BOUND, _LOG_SCALE_BOUND)
                )
        return res

    out = lax.map(one_block, blocks)
    return {k: v.reshape((-1,) + v.shape[2:])[:n] for k, v in out.items()}


def predict_parents(
    result: AntiCausal, images: ArrayLike, *, chunk: int = 256
) -> dict[str, jax.Array]:
    """``q(pa | x)`` of images with any leading batch shape, e.g. counterfactuals ``(N, K, H, W)``.

    The images are flattened to one batch and run through the network in compiled chunks of
    ``chunk`` images (``lax.map``), so memory beyond the output is bounded by one chunk; an
    image's prediction does not depend on the others (to float rounding).

    Args:
      result: :func:`~cfjax.generative.anticausal.train_anticausal`'s
        :class:`~cfjax.generative.anticausal.AntiCausal`.
      images: ``(..., H, W)`` floating point in [0, 1], at least one leading axis.
      chunk: images per compiled network call.

    Returns:
      ``{name: probs (..., C)}`` for a categorical head; ``{name: mean (...)}`` and
      ``{name + "_scale": standard deviation (...)}`` for a Gaussian head, in the parent's own
      units (e.g. years).

    Example:
      >>> spec = (Head("s", "categorical", 2), Head("a", "gaussian"))
      >>> x = jnp.linspace(0, 1, 16 * 64).reshape(16, 8, 8)
      >>> config = AntiCausalConfig(steps=2, batch_size=4, features=(4,), hidden=4)
      >>> fit = train_anticausal(x, {"s": jnp.arange(16) % 2, "a": jnp.arange(16.0)}, spec, config, key=0,
      ...                        progress=False)
      >>> {k: v.shape for k, v in predict_parents(fit, jnp.zeros((3, 5, 8, 8))).items()}
      {'a': (3, 5), 'a_scale': (3, 5), 's': (3, 5, 2)}
    """
    result = _check_result(result)
    chunk = _checks.check_positive_int("chunk", chunk)
    shape = _check_images("images", images, min_ndim=3)
    lead, hw = shape[:-2], shape[-2:]
    flat = jnp.asarray(images).reshape((math.prod(lead),) + hw)
    out = _predict_flat(
        result.model, min(chunk, flat.shape[0]), result.params, result.loc, result.scale, flat
    )
    return {k: v.reshape(lead + v.shape[1:]) for k, v in sorted(out.items())}


def entropy_weight(probs: ArrayLike) -> jax.Array:
    """``1 − H(q)/log C`` over the last axis of probabilities ``(..., C)``: 1 for a certain
    prediction, 0 for a uniform one (paper 000, appendix: an imputed label's weight), with
    ``0·log 0 = 0``.

    Example:
      >>> entropy_weight(jnp.array([[1.0, 0.0], [0.5, 0.5]])).tolist()
      [1.0, 0.0]
    """
    p = jnp.asarray(probs)
    _checks.check_probabilities("probs", p)
    c = p.shape[-1]
    if c < 2:
        _checks.fail("probs", "at least 2 classes on the last axis", f"shape {p.shape}")
    plogp = jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1)), 0)
    return 1 + jnp.sum(plogp, axis=-1) / jnp.log(jnp.asarray(c, p.dtype))


class Imputed(NamedTuple):
    """:func:`impute`'s labels and their weights, ``{name: (N,)}`` each."""

    parents: dict[str, jax.Array]
    weights: dict[str, jax.Array]


def impute(
    result: AntiCausal,
    images: ArrayLike,
    parents: Mapping[str, ArrayLike],
    mask: ArrayLike | Mapping[str, ArrayLike],
    *,
    chunk: int = 256,
) -> Imputed:
    """Observed labels where ``mask`` says so, ``q(pa | x)``'s prediction elsewhere.

    A categorical head imputes its most probable class with weight ``1 − H(q)/log C``
    (:func:`entropy_weight`; paper 000's appendix), a Gaussian head its predicted mean with
    weight 1 (the paper weights discrete labels only); observed labels have weight 1.

    Args:
      result: :class:`~cfjax.generative.anticausal.AntiCausal`. images: ``(N, H, W)``.
      parents: ``{name: (N,)}`` for every head (anything where masked).
      mask: ``(N, n_heads)`` boolean or ``{name: (N,)}``, as in
        :func:`~cfjax.generative.anticausal.train_anticausal`.
      chunk: images per compiled network call.

    Returns:
      :class:`Imputed` with ``parents`` (categorical as int32, Gaussian in the images' dtype)
      and ``weights``, ``{name: (N,)}`` each.

    Example:
      >>> spec = (Head("s", "categorical", 2),)
      >>> x = jnp.linspace(0, 1, 4 * 64).reshape(4, 8, 8)
      >>> config = AntiCausalConfig(steps=2, batch_size=2, features=(4,), hidden=4)
      >>> fit = train_anticausal(x, {"s": jnp.array([0, 1, 0, 1])}, spec, config, key=0, progress=False)
      >>> out = impute(fit, x, {"s": jnp.array([1, 0, -1, -1])}, jnp.array([[1], [1], [0], [0]]))
      >>> out.parents["s"][:2].tolist(), out.weights["s"][:2].tolist()
      ([1, 0], [1.0, 1.0])
    """
    result = _check_result(result)
    spec = result.spec
    shape = _check_images("images", images)
    if len(shape) != 3:
        _checks.fail("images", "images (N, H, W)", f"shape {shape}")
    n = shape[0]
    m = _mask_array(mask, spec, n)
    labels = _check_parents(parents, spec, n, m)
    pred = predict_parents(result, images, chunk=chunk)
    dtype = jnp.asarray(images).dtype
    values, weights = {}, {}
    for j, h in enumerate(spec):
        seen = jnp.asarray(m[:, j])
        if h.kind == "categorical":
            observed = jnp.asarray(np.where(m[:, j], labels[h.name], 0)).astype(jnp.int32)
            values[h.name] = jnp.where(
                seen, observed, jnp.argmax(pred[h.name], axis=-1).astype(jnp.int32)
            )
            weights[h.name] = jnp.where(
                seen, jnp.ones((), dtype), entropy_weight(pred[h.name]).astype(dtype)
            )
        else:
            observed = jnp.asarray(np.where(m[:, j], labels[h.name], 0)).astype(dtype)
            values[h.name] = jnp.where(seen, observed, pred[h.name].astype(dtype))
            weights[h.name] = jnp.ones((n,), dtype)
    return Imputed(values, weights)


# ----------------------------------------------------------------------- an SCM's data
def impute_parents(
    scm: SCM,
    node: str,
    data: Mapping[str, Any],
    mask: Mapping[str, Any] | None = None,
    anticausal: Any = None,
) -> tuple[dict[str, Any], jax.Array]:
    """The data with the missing parent labels of ``node`` imputed, and each unit's weight.

    A parent ``p`` in ``mask`` keeps its observed label where ``mask[p]`` is True and takes
    :func:`impute`'s value elsewhere (the most probable class of a
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
    out = impute(anticausal, images, labels, head_mask)
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
