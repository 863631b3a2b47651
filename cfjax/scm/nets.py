"""The small conditioner networks of the mechanisms (flax linen)."""

from __future__ import annotations

import flax.linen as nn
import jax

__all__ = ["Conditioner"]


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
        for width in self.hidden:
            h = nn.gelu(nn.Dense(width, param_dtype=dtype)(h))
        return nn.Dense(self.features, kernel_init=nn.initializers.zeros, param_dtype=dtype)(h)
