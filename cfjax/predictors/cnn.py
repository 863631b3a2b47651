"""The effusion classifier: a small convolutional network (flax linen) from a chest image to one
logit."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from cfjax._core.nn import LECUN, Conv3x3, default_conv, mean_pool2, mean_pool2_cnhw

__all__ = ["EffusionCNN", "Conv3x3", "default_conv", "mean_pool2"]


class EffusionCNN(nn.Module):
    """Images ``(B, H, W)`` with values in [0, 1] to effusion logits ``(B,)``.

    ``len(features)`` blocks of a 3×3 convolution and ReLU, each but the last followed by 2×2
    mean pooling; then the global mean and max of the last feature map, and a dense layer to one
    logit. Any ``H, W ≥ 2^(len(features) − 1)`` works (16×16 to 64×64 in the study). Parameters
    follow the images' dtype and have ``nn.Conv``'s structure (``conv{i}: kernel (3, 3, C, F),
    bias (F,)``; ``head: kernel, bias``) whatever ``conv``.

    ``conv`` chooses how the convolutions are computed (:class:`Conv3x3`): ``"matmul"`` (im2col
    and one matrix product), ``"xla"`` (XLA's native convolution), or ``"auto"`` (the default:
    :func:`default_conv`, matmul on CPU, XLA elsewhere). On XLA's CPU backend the native
    convolution is slower inside the training loop (``lax.scan``) and ``vmap``-ped over an
    ensemble's members (a grouped convolution); the matrix product runs as fast inside
    a loop as outside, and ``vmap``-ped it is a batched matrix product. The feature maps are
    kept channels first, ``(C, B, H, W)`` (``Conv3x3(layout="CNHW")``): with few channels the
    matrix products, pooling and ReLU then run on long contiguous rows, and a training step on
    one CPU core is faster than channels last. For an ensemble, ``jax.vmap`` ``init`` over keys
    and ``apply`` over the parameters' leading member axis (:func:`cfjax.predictors.init_params`).

    Example:
      >>> model = EffusionCNN(features=(4, 8))
      >>> params = model.init(jax.random.key(0), jnp.zeros((1, 16, 16)))
      >>> model.apply(params, jnp.full((3, 16, 16), 0.5)).shape
      (3,)
      >>> x = jax.random.uniform(jax.random.key(1), (3, 16, 16))
      >>> a, b = (EffusionCNN(features=(4, 8), conv=c).apply(params, x) for c in ("matmul", "xla"))
      >>> bool(jnp.allclose(a, b, atol=1e-5))
      True
    """

    features: tuple[int, ...] = (16, 32, 64)
    conv: str = "auto"

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        if images.ndim != 3:
            raise ValueError(f"`images`: expected shape (B, H, W), got {images.shape}.")
        h = (images - 0.5)[None]  # channels first: (1, B, H, W)
        for i, width in enumerate(self.features):
            h = nn.relu(Conv3x3(width, conv=self.conv, layout="CNHW", name=f"conv{i}")(h))
            if i < len(self.features) - 1:
                h = mean_pool2_cnhw(h)
        pooled = jnp.concatenate([h.mean(axis=(2, 3)), h.max(axis=(2, 3))]).T  # (B, 2·F)
        return nn.Dense(1, param_dtype=images.dtype, kernel_init=LECUN, name="head")(pooled)[:, 0]
