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


def _conv3x3(h: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    """'SAME' 3×3 convolution of ``h (B, H, W, C)`` as one matmul over the nine shifted copies.

    The same numbers as ``lax.conv_general_dilated`` with a ``(3, 3, C, F)`` kernel, written as
    shifts and a dot so that an ensemble (the kernel ``vmap``ped over members, each member with
    its own batch) is a batched matmul: XLA's batching of a convolution over its kernel is a
    grouped convolution, several times slower on CPU.
    """
    height, width = h.shape[1], h.shape[2]
    padded = jnp.pad(h, ((0, 0), (1, 1), (1, 1), (0, 0)))
    patches = jnp.concatenate([padded[:, i:i + height, j:j + width] for i in range(3) for j in range(3)],
                              axis=-1)  # (B, H, W, 9·C), tap-major like the reshaped kernel
    return patches @ kernel.reshape(-1, kernel.shape[-1]) + bias.reshape(1, 1, 1, -1)


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
    over the parameters' leading member axis (:func:`cfjax.predictors.init_params`).

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
            kernel = self.param(f"conv{i}_kernel", _HE, (3, 3, h.shape[-1], width), dtype)
            bias = self.param(f"conv{i}_bias", nn.initializers.zeros, (width,), dtype)
            h = nn.relu(_conv3x3(h, kernel, bias))
            if i < len(self.features) - 1:
                h = _pool2(h)
        pooled = jnp.concatenate([h.mean(axis=(1, 2)), h.max(axis=(1, 2))], axis=-1)
        return nn.Dense(1, param_dtype=dtype, kernel_init=_LECUN, name="head")(pooled)[:, 0]
