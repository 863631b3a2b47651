"""Neural-network building blocks shared by the pillars (flax linen): initialisers, a 3×3
convolution with a fast CPU form, 2×2 mean pooling."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import DTypeLike

from cfjax.platform import default_conv

__all__ = [
    "Conv3x3",
    "mean_pool2",
    "mean_pool2_cnhw",
    "fan_in_normal",
    "HE",
    "LECUN",
    "default_conv",
]


def fan_in_normal(scale: float) -> nn.initializers.Initializer:
    """``nn.initializers.variance_scaling(scale, "fan_in", "normal")`` (the same values for the
    same key), drawn as a flat vector and reshaped: XLA's CPU compiler takes seconds per
    multi-dimensional threefry draw (its counters are built per dimension) and well under one
    for a flat one. Plain, not truncated, normals: the truncated sampler compiles to a much
    larger program, for no benefit at this size."""

    def init(key: jax.Array, shape: tuple[int, ...], dtype: DTypeLike = jnp.float32) -> jax.Array:
        fan_in = math.prod(shape[:-1])
        flat = jax.random.normal(key, (math.prod(shape),), dtype).reshape(shape)
        return flat * jnp.sqrt(jnp.array(scale / fan_in, dtype))

    return init


# He / LeCun scaling
HE = fan_in_normal(2.0)
LECUN = fan_in_normal(1.0)
_CONVS = ("auto", "matmul", "xla")


def _conv3x3_matmul(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """'SAME' 3×3 cross-correlation of ``x (B, H, W, C)`` with ``kernel (3, 3, C, F)`` as one
    matrix product: the 9 shifted, zero-padded views of ``x`` side by side on the channel axis
    (im2col, ``(B, H, W, 9·C)``) times the kernel as ``(9·C, F)``."""
    _, height, width, c = x.shape
    xp = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    cols = jnp.concatenate(
        [xp[:, dy : dy + height, dx : dx + width] for dy in range(3) for dx in range(3)], axis=-1
    )
    b, f = x.shape[0], kernel.shape[-1]
    out = jnp.dot(cols.reshape(b * height * width, 9 * c), kernel.reshape(9 * c, f))
    return out.reshape(b, height, width, f)


def _conv3x3_matmul_cnhw(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """:func:`_conv3x3_matmul` for channels-first ``x (C, B, H, W)``, giving ``(F, B, H, W)``:
    the 9 shifted views stacked on a leading axis (``(9, C, B, H, W)``: each a block copy)
    and the product ``kernel(9·C, F)ᵀ · cols(9·C, B·H·W)``; its gradients are products over
    the long ``B·H·W`` axis, contiguous in both operands."""
    c, b, height, width = x.shape
    xp = jnp.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = jnp.stack(
        [xp[:, :, dy : dy + height, dx : dx + width] for dy in range(3) for dx in range(3)]
    )
    f = kernel.shape[-1]
    out = lax.dot_general(
        kernel.reshape(9 * c, f), cols.reshape(9 * c, b * height * width), (((0,), (0,)), ((), ()))
    )
    return out.reshape(f, b, height, width)


_LAYOUTS = ("NHWC", "CNHW")


class Conv3x3(nn.Module):
    """A 'SAME' 3×3 convolution with bias, parameters as ``nn.Conv(features, (3, 3))``'s
    (``kernel (3, 3, C, F)``, ``bias (F,)``, the same values for the same key), computed by
    XLA's convolution (``conv="xla"``) or as one matrix product over the 9 shifted views of the
    input (``conv="matmul"``, im2col); ``"auto"`` is :func:`default_conv`. Both give the same
    outputs (to float rounding). ``layout`` is the input's and output's: ``"NHWC"``
    (``(B, H, W, C)``, the default) or channels first, ``"CNHW"`` (``(C, B, H, W)``, what
    :class:`EffusionCNN` runs: on a CPU its matrix products, pooling and ReLU are several times
    faster for few channels).

    Example:
      >>> x = jax.random.normal(jax.random.key(1), (2, 5, 6, 3))
      >>> p = Conv3x3(4).init(jax.random.key(0), x)
      >>> a, b = (Conv3x3(4, conv=c).apply(p, x) for c in ("matmul", "xla"))
      >>> a.shape, bool(jnp.allclose(a, b, atol=1e-5))
      ((2, 5, 6, 4), True)
      >>> c = Conv3x3(4, layout="CNHW").apply(p, x.transpose(3, 0, 1, 2))
      >>> bool(jnp.allclose(c.transpose(1, 2, 3, 0), a, atol=1e-5))
      True
    """

    features: int
    conv: str = "auto"
    kernel_init: nn.initializers.Initializer = HE
    layout: str = "NHWC"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.conv not in _CONVS:
            raise ValueError(f"`conv`: expected one of {_CONVS}, got {self.conv!r}.")
        if self.layout not in _LAYOUTS:
            raise ValueError(f"`layout`: expected one of {_LAYOUTS}, got {self.layout!r}.")
        channels = self.layout.index("C")
        kernel = self.param(
            "kernel", self.kernel_init, (3, 3, x.shape[channels], self.features), x.dtype
        )
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,), x.dtype)
        conv = default_conv() if self.conv == "auto" else self.conv
        if conv == "matmul":
            y = (_conv3x3_matmul if self.layout == "NHWC" else _conv3x3_matmul_cnhw)(x, kernel)
        else:
            y = lax.conv_general_dilated(
                x, kernel, (1, 1), "SAME", dimension_numbers=(self.layout, "HWIO", self.layout)
            )
        shape = [1] * y.ndim
        shape[channels] = -1
        return y + bias.reshape(shape)


def mean_pool2(h: jax.Array) -> jax.Array:
    """2×2 mean pooling of ``h (B, H, W, C)`` with stride 2 (an odd last row or column is
    dropped), as one ``lax.reduce_window``: XLA's CPU backend runs it several times faster than
    the same mean over a reshaped ``(B, H/2, 2, W/2, 2, C)`` array, once fused with the ReLU
    before it, and a step of :class:`EffusionCNN`'s training about 10% faster.

    Example:
      >>> h = jnp.arange(2 * 5 * 4 * 3, dtype=jnp.float32).reshape(2, 5, 4, 3)
      >>> ref = h[:, :4].reshape(2, 2, 2, 2, 2, 3).mean(axis=(2, 4))
      >>> bool(jnp.array_equal(mean_pool2(h), ref))
      True
    """
    window = (1, 2, 2, 1)
    summed = lax.reduce_window(
        h, np.zeros((), h.dtype), lax.add, window, window, "VALID"
    )  # a concrete 0: the sum monoid
    return summed * np.asarray(0.25, h.dtype)


def mean_pool2_cnhw(h: jax.Array) -> jax.Array:
    """:func:`mean_pool2` of channels-first ``h (C, B, H, W)``: the two rows of each pair
    added, then the two columns. XLA's CPU backend runs this one in a plain loop, several times
    faster than as a mean over a reshaped array or a ``reduce_window`` (which it hands, fused with
    the ReLU before it, to a slow library reduction)."""
    c, b, height, width = h.shape
    h = h[:, :, : height - height % 2, : width - width % 2].reshape(
        c, b, height // 2, 2, width // 2, 2
    )
    rows = h[:, :, :, 0] + h[:, :, :, 1]
    return (rows[..., 0] + rows[..., 1]) * np.asarray(0.25, h.dtype)
