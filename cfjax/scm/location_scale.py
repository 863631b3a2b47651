"""Conditional location–scale mechanisms ``x = μ(pa) + σ(pa)·u``, u ~ N(0, 1)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from cfjax.scm.mechanism import Mechanism
from cfjax.scm.nets import Conditioner

__all__ = ["LocationScale", "linear_gaussian_params"]

_LOG_2PI = float(np.log(2 * np.pi))


@dataclasses.dataclass(frozen=True)
class LocationScale(Mechanism):
    """``x = μ(pa) + σ(pa)·u`` with standard normal u.

    Args:
      hidden: conditioner widths; ``()`` makes μ (and log σ) affine in the parents.
      heteroscedastic: σ depends on the parents; otherwise it is one free parameter.

    The defaults (``hidden=()``, homoscedastic) are the linear-Gaussian additive-noise
    mechanism ``x = wᵀpa + b + σ·u``.

    Parameters: ``{"net": conditioner params, "log_scale": ()}`` (``log_scale`` only when
    homoscedastic).
    """

    hidden: tuple[int, ...] = ()
    heteroscedastic: bool = False

    def _net(self) -> Conditioner:
        return Conditioner(2 if self.heteroscedastic else 1, self.hidden)

    def init(self, key: jax.Array, parent_dim: int) -> Any:
        params = {"net": self._net().init(key, jnp.zeros((parent_dim,)))}
        if not self.heteroscedastic:
            params["log_scale"] = jnp.zeros(())
        return params

    def _loc_log_scale(self, params: Any, pa: jax.Array) -> tuple[jax.Array, jax.Array]:
        out = self._net().apply(params["net"], pa)
        if self.heteroscedastic:
            return out[0], out[1]
        return out[0], params["log_scale"]

    def sample_noise(self, key: jax.Array) -> jax.Array:
        return jax.random.normal(key, ())

    def forward(self, params: Any, u: jax.Array, pa: jax.Array) -> jax.Array:
        loc, log_scale = self._loc_log_scale(params, pa)
        return loc + jnp.exp(log_scale) * u

    def inverse(self, params: Any, x: jax.Array, pa: jax.Array) -> jax.Array:
        loc, log_scale = self._loc_log_scale(params, pa)
        return (x - loc) * jnp.exp(-log_scale)

    def log_prob(self, params: Any, x: jax.Array, pa: jax.Array) -> jax.Array:
        loc, log_scale = self._loc_log_scale(params, pa)
        z = (x - loc) * jnp.exp(-log_scale)
        return -0.5 * (z * z + _LOG_2PI) - log_scale


def linear_gaussian_params(weights: Any, bias: float, scale: float) -> Any:
    """Parameters of the linear-Gaussian ``LocationScale()`` with given ``weights (P,)``, ``bias``, ``scale``.

    Example:
      >>> p = linear_gaussian_params([2.0], 1.0, 0.5)
      >>> float(LocationScale().forward(p, jnp.float32(1.0), jnp.array([3.0])))
      7.5
    """
    w = jnp.asarray(weights, jnp.result_type(float)).reshape(-1)
    if w.shape[0] == 0:
        net = {"params": {"bias": jnp.full((1,), bias, w.dtype)}}
    else:
        net = {"params": {"Dense_0": {"kernel": w[:, None], "bias": jnp.full((1,), bias, w.dtype)}}}
    return {"net": net, "log_scale": jnp.log(jnp.asarray(scale, w.dtype))}
