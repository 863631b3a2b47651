"""Conditional location–scale mechanisms ``x = μ(pa) + σ(pa)·u``, u ~ N(0, 1)."""

from __future__ import annotations

import dataclasses
from typing import cast

import distrax
import jax
import jax.numpy as jnp
import numpy as np

from cfjax.scm.mechanism import Mechanism
from cfjax.scm.nets import Conditioner
from cfjax.typing import ArrayLike, PyTree

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

    Its :meth:`bijector` is ``distrax.ScalarAffine(shift=μ(pa), log_scale=log σ(pa))`` on
    :attr:`base_distribution` ``distrax.Normal(0, 1)``; :meth:`forward`, :meth:`inverse` and
    :meth:`log_prob` run through it (XLA compiles them to the same programs as the
    hand-written formulas).

    Example:
      >>> mech = LocationScale()
      >>> params = linear_gaussian_params([2.0], 1.0, 0.5)
      >>> bij = mech.bijector(params, jnp.array([3.0]))
      >>> x, log_det = bij.forward_and_log_det(jnp.float32(1.0))
      >>> float(x), round(float(log_det), 6)
      (7.5, -0.693147)
      >>> dist = distrax.Transformed(mech.base_distribution, bij)
      >>> bool(jnp.isclose(dist.log_prob(x), mech.log_prob(params, x, jnp.array([3.0]))))
      True
    """

    hidden: tuple[int, ...] = ()
    heteroscedastic: bool = False

    def _net(self) -> Conditioner:
        return Conditioner(2 if self.heteroscedastic else 1, self.hidden)

    def init(self, key: jax.Array, parent_dim: int) -> PyTree:
        params: dict[str, PyTree] = {"net": self._net().init(key, jnp.zeros((parent_dim,)))}
        if not self.heteroscedastic:
            params["log_scale"] = jnp.zeros(())
        return params

    def _loc_log_scale(self, params: PyTree, pa: jax.Array) -> tuple[jax.Array, jax.Array]:
        out = cast(jax.Array, self._net().apply(params["net"], pa))  # no mutable state: the output
        if self.heteroscedastic:
            return out[0], out[1]
        return out[0], params["log_scale"]

    def sample_noise(self, key: jax.Array) -> jax.Array:
        return jax.random.normal(key, ())

    @property
    def base_distribution(self) -> distrax.Normal:
        """The noise prior ``distrax.Normal(0, 1)``."""
        return distrax.Normal(0.0, 1.0)

    def bijector(self, params: PyTree, pa: jax.Array) -> distrax.ScalarAffine:
        """``u -> μ(pa) + σ(pa)·u`` as ``distrax.ScalarAffine``, ``log |dx/du| = log σ(pa)``."""
        loc, log_scale = self._loc_log_scale(params, pa)
        return distrax.ScalarAffine(shift=loc, log_scale=log_scale)

    def forward(self, params: PyTree, u: jax.Array, pa: jax.Array) -> jax.Array:
        return self.bijector(params, pa).forward(jnp.asarray(u))

    def inverse(self, params: PyTree, x: jax.Array, pa: jax.Array) -> jax.Array:
        return self.bijector(params, pa).inverse(jnp.asarray(x))

    def log_prob(self, params: PyTree, x: jax.Array, pa: jax.Array) -> jax.Array:
        # log N(z; 0, 1) − log σ, the standard normal's density written out (distrax.Normal
        # sums its terms in another order: equal, but not to the last bit).
        bij = self.bijector(params, pa)
        z = bij.inverse(jnp.asarray(x))
        return -0.5 * (z * z + _LOG_2PI) - bij.log_scale


def linear_gaussian_params(weights: ArrayLike, bias: float, scale: float) -> PyTree:
    """Parameters of the linear-Gaussian ``LocationScale()`` with given ``weights (P,)``, ``bias``, ``scale``.

    Example:
      >>> p = linear_gaussian_params([2.0], 1.0, 0.5)
      >>> float(LocationScale().forward(p, jnp.float32(1.0), jnp.array([3.0])))
      7.5
    """
    w = jnp.asarray(weights, jnp.result_type(float)).reshape(-1)
    if w.shape[0] == 0:
        net: dict[str, dict[str, PyTree]] = {"params": {"bias": jnp.full((1,), bias, w.dtype)}}
    else:
        net = {"params": {"Dense_0": {"kernel": w[:, None], "bias": jnp.full((1,), bias, w.dtype)}}}
    return {"net": net, "log_scale": jnp.log(jnp.asarray(scale, w.dtype))}
