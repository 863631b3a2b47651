"""The effusion classifier: a small convolutional network (flax linen) from a chest image to one
logit."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["EffusionCNN"]

# He / LeCun scaling with plain (not truncated) normals: the truncated sampler compiles to a
# much larger XLA CPU program, for no benefit at this size.
_HE = nn.initializers.variance_scaling(2.0, "fan_in", "normal")
_LECUN = nn.initializers.variance_scaling(1.0, "fan_in", "normal")


def _pool2(h: jax.Array) -> jax.Array:
    """2×2 mean pooling (an odd last row or column is dropped)."""
    b, height, width, c = h.shape
    h = h[:, :height - height % 2, :width - width % 2]
    return h.reshape(b, height // 2, 2, width // 2, 2, c).mean(axis=(2, 4))


class EffusionCNN(nn.Module):
    """Images ``(B, H, W)`` with values in [0, 1] to effusion logits ``(B,)``.

    ``len(features)`` blocks of a 3×3 convolution and ReLU, each but the last followed by 2×2
    mean pooling; then the global mean and max of the last feature map, and a dense layer to one
    logit. Any ``H, W ≥ 2^(len(features) − 1)`` works (16×16 to 64×64 in the study). Parameters
    follow the images' dtype. For an ensemble, ``jax.vmap`` ``init`` over keys and ``apply``
    over the parameters' leading member axis (:func:`cfjax.predictors.init_params`), or map
    over it (``lax.map``): XLA's CPU backend runs a convolution vmapped over its kernel (a
    grouped convolution) several times slower than the members one after another, which is why
    :func:`~cfjax.predictors.train` and :func:`~cfjax.predictors.predict` take a
    ``member_chunk``.

    Example:
      >>> model = EffusionCNN(features=(4, 8))
      >>> params = model.init(jax.random.key(0), jnp.zeros((1, 16, 16)))
      >>> model.apply(params, jnp.full((3, 16, 16), 0.5)).shape
      (3,)
    """

    features: tuple[int, ...] = (16, 32, 64)

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        if images.ndim != 3:
            raise ValueError(f"`images`: expected shape (B, H, W), got {images.shape}.")
        dtype = images.dtype
        h = (images - 0.5)[..., None]
        for i, width in enumerate(self.features):
            h = nn.relu(nn.Conv(width, (3, 3), padding="SAME", kernel_init=_HE, param_dtype=dtype,
                                name=f"conv{i}")(h))
            if i < len(self.features) - 1:
                h = _pool2(h)
        pooled = jnp.concatenate([h.mean(axis=(1, 2)), h.max(axis=(1, 2))], axis=-1)
        return nn.Dense(1, param_dtype=dtype, kernel_init=_LECUN, name="head")(pooled)[:, 0]
