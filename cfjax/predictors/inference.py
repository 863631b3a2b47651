"""Every ensemble member on factual and counterfactual images, in one jitted call with memory
bounded by a fixed chunk of images."""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from cfjax import _checks

__all__ = ["predict", "to_metrics_layout", "init_params", "ensemble_size", "map_members"]


def ensemble_size(params: Any) -> int:
    """M, the leading (member) axis shared by every leaf of ``params``."""
    leaves = jax.tree.leaves(params)
    if not leaves:
        _checks.fail("params", "a parameter pytree with a leading member axis", "an empty pytree")
    sizes = {np.shape(a)[0] if np.ndim(a) else None for a in leaves}
    if len(sizes) != 1 or None in sizes:
        _checks.fail("params", "every leaf with the same leading member axis M",
                     f"leading sizes {sorted(str(s) for s in sizes)}")
    return int(sizes.pop())


def init_params(model: nn.Module, seeds: Any, image_shape: tuple[int, int],
                dtype: Any = jnp.float32) -> Any:
    """Parameters of one member per seed, stacked on a leading axis ``(M, ...)``.

    Member ``m`` is ``model.init(jax.random.key(seeds[m]), zeros((1, H, W)))`` — the same as
    :func:`cfjax.predictors.train` initialises it.

    Example:
      >>> from cfjax.predictors import EffusionCNN
      >>> p = init_params(EffusionCNN(features=(4,)), [0, 1], (16, 16))
      >>> ensemble_size(p)
      2
    """
    seeds = _check_seeds(seeds)
    if (not isinstance(image_shape, tuple) or len(image_shape) != 2
            or not all(isinstance(s, (int, np.integer)) and s >= 1 for s in image_shape)):
        _checks.fail("image_shape", "a tuple (H, W) of positive integers", repr(image_shape))
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))
    return _init(model, keys, tuple(int(s) for s in image_shape), jnp.dtype(dtype))


def default_member_chunk(m: int) -> int:
    """Members run side by side (``vmap``) by default: all of them, except on CPU, where one
    at a time (still one compiled program) is faster. Measured with jax 0.10.2 on 2 CPU cores
    (M = 4, batch 32, 32×32 images): with :class:`~cfjax.predictors.EffusionCNN`'s default
    matrix-product convolutions the ``vmap``ped members take ~1.2–1.6× longer per member-step
    than one after another (XLA's CPU batched matrix products are slower than separate ones);
    with XLA's native convolutions, ``vmap`` makes them grouped convolutions, ~3× slower."""
    return 1 if jax.default_backend() == "cpu" else m


def check_member_chunk(member_chunk: Any) -> int | None:
    if member_chunk is None:
        return None
    return _checks.check_positive_int("member_chunk", member_chunk)


def map_members(fn: Any, xs: Any, member_chunk: int | None = None) -> Any:
    """``fn`` over the leading member axis of the pytree ``xs``: ``vmap`` over groups of
    ``member_chunk`` members, ``lax.map`` (a loop inside the compiled program) over the groups.
    ``member_chunk >= M`` is one ``vmap``; ``None`` is :func:`default_member_chunk`. A member's
    result does not depend on the grouping (up to float rounding).

    Example:
      >>> map_members(lambda x: x * 2, jnp.arange(5.0), member_chunk=2).tolist()
      [0.0, 2.0, 4.0, 6.0, 8.0]
    """
    m = ensemble_size(xs)
    chunk = default_member_chunk(m) if member_chunk is None else member_chunk
    if chunk >= m:
        return jax.vmap(fn)(xs)
    if chunk == 1:
        return lax.map(fn, xs)
    return lax.map(fn, xs, batch_size=chunk)


def _check_seeds(seeds: Any) -> np.ndarray:
    s = np.asarray(seeds)
    if s.ndim != 1 or s.size == 0 or not np.issubdtype(s.dtype, np.integer) or (s < 0).any():
        _checks.fail("seeds", "a non-empty 1-d sequence of non-negative integers", repr(seeds))
    return s


@functools.partial(jax.jit, static_argnums=(0, 2, 3))
def _init(model, keys, image_shape, dtype):
    def one(key):
        return model.init(jax.random.split(key)[0], jnp.zeros((1,) + image_shape, dtype))
    return jax.vmap(one)(keys)


def predict(model: nn.Module, params: Any, images: Any, *, chunk: int = 256,
            logits: bool = False, member_chunk: int | None = None) -> jax.Array:
    """Every member's effusion probability (or logit) for every image.

    Args:
      model: the network (e.g. :class:`~cfjax.predictors.EffusionCNN`).
      params: member parameters with a leading axis ``(M, ...)`` (``state.best_params`` of
        :func:`~cfjax.predictors.train`, or :func:`init_params`).
      images: factual images ``(N, H, W)`` or counterfactual images ``(K, N, H, W)`` (as
        ``ChestSCM.counterfactuals(...)["image"]``), values in [0, 1].
      chunk: images per compiled step. The images are cut into chunks of this many (the last
        padded) and every member runs on one chunk at a time (``lax.map``), so memory beyond
        the inputs and outputs is that of ``member_chunk × chunk`` images whatever N and K; a
        unit's output does not depend on the chunk size.
      logits: return logits instead of probabilities.
      member_chunk: members run side by side (see :func:`map_members`; default: all of them,
        one at a time on CPU).

    Returns:
      ``(M, N)`` for factual images, ``(M, K, N)`` for counterfactual ones: member first,
      intervention next, unit last. ``cfjax.metrics.evaluate`` takes one predictor's
      counterfactual predictions as ``(n, K)``: :func:`to_metrics_layout` gives ``(M, N, K)``.

    Example:
      >>> from cfjax.predictors import EffusionCNN
      >>> model = EffusionCNN(features=(4,))
      >>> p = init_params(model, [0, 1, 2], (16, 16))
      >>> predict(model, p, jnp.zeros((5, 16, 16)), chunk=4).shape
      (3, 5)
      >>> predict(model, p, jnp.zeros((2, 5, 16, 16))).shape
      (3, 2, 5)
    """
    ensemble_size(params)
    shape = _checks.shape_of(images)
    if len(shape) not in (3, 4):
        _checks.fail("images", "images (N, H, W) or counterfactual images (K, N, H, W)", f"shape {shape}")
    _checks.check_nonempty("images", images)
    chunk = _checks.check_positive_int("chunk", chunk)
    if not isinstance(logits, bool):
        _checks.fail("logits", "a bool", repr(logits))
    member_chunk = check_member_chunk(member_chunk)
    x = jnp.asarray(images)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        _checks.fail("images", "floating-point images in [0, 1]", f"dtype {x.dtype}")
    _checks.check_finite("images", x)
    lead = shape[:-2]
    flat = x.reshape((-1,) + shape[-2:])
    out = _predict(model, params, flat, min(chunk, flat.shape[0]), member_chunk)
    if not logits:
        out = jax.nn.sigmoid(out)
    return out.reshape((out.shape[0],) + lead)


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def _predict(model, params, images, chunk, member_chunk):
    return chunked_logits(model, params, images, chunk, member_chunk)


def chunked_logits(model: nn.Module, params: Any, images: jax.Array, chunk: int,
                   member_chunk: int | None = None) -> jax.Array:
    """Traced core of :func:`predict`: ``(M, N)`` logits of ``images (N, H, W)``: for each
    member (:func:`map_members`), ``lax.map`` over chunks of ``chunk`` images (the last padded
    with copies of the final image)."""
    n = images.shape[0]
    pad = (-n) % chunk
    if pad:
        images = jnp.concatenate([images, jnp.broadcast_to(images[-1:], (pad,) + images.shape[1:])])
    blocks = images.reshape((-1, chunk) + images.shape[1:])

    def one_member(p):
        return lax.map(lambda b: model.apply(p, b), blocks).reshape(-1)[:n]

    return map_members(one_member, params, member_chunk)


def to_metrics_layout(p_cf: Any) -> jax.Array:
    """Counterfactual predictions ``(M, K, N)`` of :func:`predict` as ``(M, N, K)``: row ``m``
    is predictor ``m``'s ``p_cf`` for :func:`cfjax.metrics.evaluate`.

    Example:
      >>> to_metrics_layout(jnp.zeros((3, 16, 10))).shape
      (3, 10, 16)
    """
    _checks.check_ndim("p_cf", p_cf, 3, "of counterfactual predictions (M, K, N)")
    return jnp.swapaxes(jnp.asarray(p_cf), 1, 2)
