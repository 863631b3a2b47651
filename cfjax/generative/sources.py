"""A learned image mechanism's counterfactuals as a training source
(:mod:`cfjax.predictors.sources`): each unit's noise abducted once, decoded under its K
counterfactual parent vectors inside the training step."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cfjax import _checks
from cfjax._core.keys import as_key
from cfjax.generative.mechanism import ImageHVAE
from cfjax.typing import KeyLike, PyTree

__all__ = ["DecodedCounterfactuals", "decoded_counterfactuals"]


@struct.dataclass
class DecodedCounterfactuals:
    """Counterfactual images decoded on demand by an image mechanism
    (:class:`~cfjax.generative.ImageHVAE`): :meth:`images` decodes unit ``idx[b]``'s abducted
    noise under its counterfactual parents ``parents_cf[idx[b], which[b, j]]``, as
    :func:`cfjax.study.learned.learned_images` does for evaluation (the same images up to the float
    rounding of another batch shape, with the same key). Built by
    :func:`decoded_counterfactuals`.

    Attributes:
      params: the mechanism's parameters.
      noise: each unit's abducted noise ``{"z": (ε_l (N, ...)), "eps": (N, H, W)}``.
      parents_cf: ``(N, K, P)`` the encoded counterfactual parent inputs
        (:func:`cfjax.generative.parents.parent_inputs`).
      weights: ``(K,)`` intervention weights q.
      mechanism: the image mechanism (static).
    """

    params: Any
    noise: Any
    parents_cf: jax.Array
    weights: jax.Array
    mechanism: ImageHVAE = struct.field(pytree_node=False, default=None)

    @property
    def num_units(self) -> int:
        return int(np.shape(self.parents_cf)[0])

    def images(self, idx: jax.Array, which: jax.Array) -> jax.Array:
        """``(B, J, H, W)``: unit ``idx[b]`` decoded under intervention ``which[b, j]``."""
        noise = jax.tree.map(lambda a: a[idx], self.noise)
        pa = self.parents_cf[idx[:, None], which]  # (B, J, P)

        def one(u, pa_unit):
            return jax.vmap(lambda p: self.mechanism.forward(self.params, u, p))(pa_unit)

        return jax.vmap(one)(noise, pa)


def decoded_counterfactuals(
    mechanism: ImageHVAE,
    params: PyTree,
    images: Any,
    parents: Any,
    parents_cf: Any,
    *,
    key: KeyLike,
    weights: Any = None,
    chunk: int = 256,
) -> DecodedCounterfactuals:
    """Abduct every unit's noise once and keep it with the counterfactual parents.

    Unit ``n``'s noise is ``mechanism.abduct(params, images[n], parents[n], split(key, N)[n])``
    (the units in batches of ``chunk``), so with the same key its images are those of
    :func:`cfjax.study.learned.learned_images`.

    Args:
      mechanism: the trained image mechanism; ``params`` its parameters.
      images: ``(N, H, W)`` factual images; ``parents``: ``(N, P)`` their encoded parents.
      parents_cf: ``(N, K, P)`` encoded counterfactual parents.
      key: the abduction's key (a PRNG key or an int seed).
      weights: ``(K,)`` intervention weights; default uniform.
      chunk: units abducted per compiled batch (bounds memory).

    Example:
      >>> from cfjax.generative import HVAEConfig, ImageHVAE
      >>> mech = ImageHVAE(HVAEConfig(image_size=16, channels=(4, 4, 4), latent_dims=(0, 2, 2)))
      >>> params = mech.init(jax.random.key(0), 2)
      >>> src = decoded_counterfactuals(mech, params, jnp.full((3, 16, 16), 0.5), jnp.zeros((3, 2)),
      ...                               jnp.zeros((3, 4, 2)), key=0)
      >>> src.images(jnp.array([0, 2]), jnp.array([[0, 3], [1, 2]])).shape
      (2, 2, 16, 16)
    """
    if not isinstance(mechanism, ImageHVAE):
        _checks.fail("mechanism", "an ImageHVAE", repr(mechanism))
    chunk = _checks.check_positive_int("chunk", chunk)
    x = jnp.asarray(images)
    _checks.check_ndim("images", x, 3, "of shape (N, H, W)")
    n = x.shape[0]
    pa = jnp.asarray(parents)
    if pa.ndim != 2 or pa.shape[0] != n:
        _checks.fail("parents", f"encoded parents of shape ({n}, P)", f"shape {pa.shape}")
    pa_cf = jnp.asarray(parents_cf)
    if pa_cf.ndim != 3 or pa_cf.shape[0] != n or pa_cf.shape[2] != pa.shape[1]:
        _checks.fail(
            "parents_cf",
            f"counterfactual parents of shape ({n}, K, {pa.shape[1]})",
            f"shape {pa_cf.shape}",
        )
    k = pa_cf.shape[1]
    if weights is None:
        q = jnp.full((k,), 1.0 / k, x.dtype)
    else:
        _checks.check_weights("weights", weights, k)
        q = jnp.asarray(weights, x.dtype)
    noise = _abduct(mechanism, params, x, pa, jax.random.split(as_key(key), n), min(chunk, n))
    return DecodedCounterfactuals(params, noise, pa_cf, q, mechanism)


@functools.partial(jax.jit, static_argnums=(0, 5))
def _abduct(mechanism, params, images, pa, keys, chunk):
    return jax.lax.map(lambda a: mechanism.abduct(params, *a), (images, pa, keys), batch_size=chunk)
