"""The small conditioner networks of the mechanisms (flax linen)."""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["Conditioner"]

# Fan-ins up to this size are contracted by an unrolled multiply-add rather than a dot: vmapped over
# many units, a dot with a tiny contraction is a separate kernel that materialises its inputs
# (e.g. the concatenated parents of every unit under every intervention), while the
# elementwise form fuses with its producers and consumers.
_ELEMENTWISE_FAN_IN = 8


class _Affine(nn.Module):
    """``h @ kernel + bias`` for one unit; parameters named like ``nn.Dense``'s."""

    features: int
    kernel_init: nn.initializers.Initializer = nn.initializers.lecun_normal()

    @nn.compact
    def __call__(self, h: jax.Array) -> jax.Array:
        kernel = self.param("kernel", self.kernel_init, (h.shape[-1], self.features), h.dtype)
        bias = self.param("bias", nn.initializers.zeros, (self.features,), h.dtype)
        if h.shape[-1] <= _ELEMENTWISE_FAN_IN:
            return functools.reduce(jnp.add, [h[j] * kernel[j] for j in range(h.shape[-1])], bias)
        return h @ kernel + bias


class Conditioner(nn.Module):
    """Maps one unit's parent vector ``(P,)`` to ``features`` outputs.

    ``hidden=()`` is affine (the linear case); otherwise an MLP with GELU activations. The last
    layer starts at zero, so a fresh mechanism starts from its base (identity spline, standard
    normal, uniform categorical). With no parents (``P = 0``) the output is a free vector.
    """

    features: int
    hidden: tuple[int, ...] = ()

    @nn.compact
    def __call__(self, pa: jax.Array) -> jax.Array:
        dtype = pa.dtype  # parameters follow the inputs' precision
        if pa.shape[-1] == 0:
            return self.param("bias", nn.initializers.zeros, (self.features,), dtype)
        h = pa
        if pa.ndim != 1:
            raise ValueError(
                f"`pa`: expected one unit's parent vector of shape (P,), got {pa.shape}."
            )
        for i, width in enumerate(self.hidden):
            h = nn.gelu(_Affine(width, name=f"Dense_{i}")(h))
        return _Affine(
            self.features, kernel_init=nn.initializers.zeros, name=f"Dense_{len(self.hidden)}"
        )(h)
