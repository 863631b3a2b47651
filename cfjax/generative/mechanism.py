"""An image node of a structural causal model: the conditional hierarchical VAE of
:mod:`cfjax.generative.hvae` as a :class:`cfjax.scm.Mechanism` (definitions §2: the exogenous noise of
an image is its latent ``z ~ q(z | x, pa)`` plus the exact pixel noise
``(x − μ(z, pa)) / σ(z, pa)``)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax._checks import ValidationError
from cfjax.generative.hvae import HVAE, HVAEConfig, HVAEOutput, gaussian_log_prob
from cfjax.scm import Mechanism
from cfjax.typing import ArrayLike, PyTree

__all__ = ["ImageHVAE", "parent_dim_of"]


def parent_dim_of(params: PyTree) -> int:
    """The parent dimension ``P`` that HVAE parameters were initialised for."""
    return int(params["params"]["td_pa0"]["kernel"].shape[0])


@dataclasses.dataclass(frozen=True)
class ImageHVAE(Mechanism):
    """``x = μ(z, pa) + σ(z, pa)·eps``: an image node whose mechanism is a conditional
    hierarchical VAE (:class:`~cfjax.generative.hvae.HVAE`), for one unit.

    Noise convention. One unit's noise is the pytree ``u = {"z": (ε_1, …, ε_L), "eps": (H, W)}``:
    ``ε_l`` (shape ``config.latent_shapes[l]``, coarsest level first) is level ``l``'s latent
    *standardised against the conditional prior*, ``ε_l = (z_l − μ_p,l) / σ_p,l`` with
    ``μ_p,l, σ_p,l`` from ``p(z_l | z_<l, pa)``; ``eps`` is the pixel noise.

    - :meth:`sample_noise`: every ``ε_l`` and ``eps`` standard normal; :meth:`forward` maps
      them through the conditional prior given ``pa``, so that ``forward(sample_noise(k), pa)``
      is a draw from the model's ``p(x | pa)``.
    - :meth:`abduct`: ``z_l = μ_q,l + temperature·σ_q,l·ξ_l`` from the posterior
      ``q(z_l | z_<l, x, pa)`` (``ξ_l`` standard normal from ``key``; temperature 0 is the
      posterior mean, deterministic, and needs no key), stored as ``ε_l`` against the prior
      given the observed parents, then the exact pixel noise ``eps = (x − μ(z, pa)) / σ(z, pa)``.
    - :meth:`forward` decodes ``ε`` with the given (counterfactual) parents: the latents follow
      the new parents through the conditional prior, and ``μ + σ·eps`` carries the pixel detail
      over. With the observed parents, ``forward(abduct(x, pa), pa)`` gives back ``x`` (to float
      rounding): a null intervention is the identity.

    Values are not clipped to [0, 1] (clipping would lose invertibility).

    Args:
      config: the network (:class:`~cfjax.generative.hvae.HVAEConfig`).
      temperature: posterior temperature of abduction, ``≥ 0`` (0: posterior mean; 1: a
        posterior draw, the default).

    Shapes: ``x (H, W)`` (``event_shape``), ``pa (P,)``; parameters are a flax params pytree
    (``init``), vmappable over an ensemble axis.

    Example:
      >>> cfg = HVAEConfig(image_size=16, channels=(4, 4, 4), latent_dims=(0, 2, 2))
      >>> mech = ImageHVAE(cfg, temperature=0.0)
      >>> params = mech.init(jax.random.key(0), 2)
      >>> x, pa = jnp.full((16, 16), 0.3), jnp.array([1.0, 0.0])
      >>> u = mech.abduct(params, x, pa, None)
      >>> [e.shape for e in u["z"]], u["eps"].shape
      ([(4, 4, 2), (8, 8, 2)], (16, 16))
      >>> bool(jnp.allclose(mech.forward(params, u, pa), x, atol=1e-5))
      True
    """

    config: HVAEConfig = HVAEConfig()
    temperature: float = 1.0

    stochastic_abduction = True

    def __post_init__(self):
        if not isinstance(self.config, HVAEConfig):
            _checks.fail("config", "an HVAEConfig", repr(self.config))
        t = self.temperature
        if (
            isinstance(t, bool)
            or not isinstance(t, (int, float, np.integer, np.floating))
            or not math.isfinite(t)
            or t < 0
        ):
            _checks.fail("temperature", "a finite posterior temperature >= 0", repr(t))

    # ------------------------------------------------------------------ structure
    @property
    def event_shape(self) -> tuple[int, ...]:
        return self.config.image_shape

    @property
    def encoded_dim(self) -> int:
        h, w = self.config.image_shape
        return h * w

    def encode(self, x: jax.Array) -> jax.Array:
        """The image flattened, ``(H·W,)`` (an image is rarely a parent)."""
        return x.reshape(-1).astype(jnp.result_type(float))

    @property
    def model(self) -> HVAE:
        return HVAE(self.config)

    def check_values(self, name: str, values: Any, what: str) -> None:
        """Images ``(..., H, W)`` of finite numbers."""
        shape = _checks.shape_of(values)
        if tuple(shape[-2:]) != self.config.image_shape:
            raise ValidationError(
                f"`{what}`: expected images of shape (..., {self.config.image_size}, "
                f"{self.config.image_size}) for node {name!r}, got shape {shape}."
            )
        super().check_values(name, values, what)

    # ------------------------------------------------------------------ parameters and noise
    def init(self, key: jax.Array, parent_dim: int) -> PyTree:
        """Fresh flax parameters for ``parent_dim`` encoded parent inputs (``P ≥ 1``)."""
        parent_dim = _checks.check_positive_int("parent_dim", parent_dim)
        dtype = jnp.result_type(float)
        noise = tuple(jnp.zeros((1,) + s, dtype) for s in self.config.latent_shapes)
        return self.model.init(
            key,
            jnp.zeros((1, parent_dim), dtype),
            jnp.zeros((1,) + self.config.image_shape, dtype),
            noise,
        )

    def sample_noise(self, key: jax.Array) -> dict[str, Any]:
        """``{"z": standard normal ε_l per level, "eps": standard normal (H, W)}``."""
        dtype = jnp.result_type(float)
        keys = jax.random.split(key, len(self.config.latent_shapes) + 1)
        z = tuple(
            jax.random.normal(k, s, dtype) for k, s in zip(keys[1:], self.config.latent_shapes)
        )
        return {"z": z, "eps": jax.random.normal(keys[0], self.config.image_shape, dtype)}

    # ------------------------------------------------------------------ the structural equation
    def _check(self, params: PyTree, pa: jax.Array, x: jax.Array | None = None) -> None:
        p = parent_dim_of(params)
        if _checks.shape_of(pa) != (p,):
            _checks.fail(
                "pa",
                f"one unit's parents of shape ({p},) (as initialised)",
                f"shape {_checks.shape_of(pa)}",
            )
        if x is not None and _checks.shape_of(x) != self.config.image_shape:
            _checks.fail(
                "x", f"one image of shape {self.config.image_shape}", f"shape {_checks.shape_of(x)}"
            )

    def decode(
        self, params: PyTree, z: tuple[jax.Array, ...], pa: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """``(μ, log σ)`` of the pixels, ``(H, W)`` each, from prior-standardised latents ``z``."""
        self._check(params, pa)
        shapes = tuple(tuple(e.shape) for e in z)
        if shapes != self.config.latent_shapes:
            _checks.fail(
                "u['z']", f"latents of shapes {self.config.latent_shapes}", f"shapes {shapes}"
            )
        dtype = params["params"]["td_start"].dtype
        latents = tuple(e[None].astype(dtype) for e in z)
        out = cast(HVAEOutput, self.model.apply(params, pa[None].astype(dtype), None, latents))
        return out.loc[0], out.log_scale[0]

    def forward(self, params: PyTree, u: dict[str, Any], pa: jax.Array) -> jax.Array:
        """``x = μ(z, pa) + σ(z, pa)·eps``, the latents ``z`` decoded from ``u["z"]`` through the
        conditional prior given ``pa``; shape ``(H, W)``."""
        if _checks.shape_of(u["eps"]) != self.config.image_shape:
            _checks.fail(
                "u['eps']",
                f"pixel noise of shape {self.config.image_shape}",
                f"shape {_checks.shape_of(u['eps'])}",
            )
        loc, log_scale = self.decode(params, u["z"], pa)
        return loc + jnp.exp(log_scale) * u["eps"]

    def posterior(
        self,
        params: PyTree,
        x: jax.Array,
        pa: jax.Array,
        key: jax.Array | None,
        temperature: ArrayLike | None = None,
    ) -> HVAEOutput:
        """The posterior pass for one unit (batch axis of size 1): latents drawn at
        ``temperature`` (default: the mechanism's), their KL per level, the pixel ``(μ, log σ)``."""
        self._check(params, pa, x)
        t = self.temperature if temperature is None else temperature
        dtype = params["params"]["td_start"].dtype
        shapes = self.config.latent_shapes
        if key is None:
            if not (isinstance(t, (int, float)) and t == 0):
                raise ValidationError(
                    "`key`: expected a random key for abduction at temperature "
                    f"{t} (only temperature 0 is deterministic), got None."
                )
            xi = tuple(jnp.zeros((1,) + s, dtype) for s in shapes)
        else:
            keys = jax.random.split(key, len(shapes))
            xi = tuple(jax.random.normal(k, (1,) + s, dtype) for k, s in zip(keys, shapes))
        out = self.model.apply(params, pa[None].astype(dtype), x[None].astype(dtype), xi, t)
        return cast(HVAEOutput, out)  # no mutable state: the output alone

    def abduct(
        self, params: PyTree, x: jax.Array, pa: jax.Array, key: jax.Array | None
    ) -> dict[str, Any]:
        """``{"z": prior-standardised posterior latents, "eps": (x − μ(z, pa)) / σ(z, pa)}``."""
        out = self.posterior(params, x, pa, key)
        eps = (x.astype(out.loc.dtype) - out.loc[0]) * jnp.exp(-out.log_scale[0])
        return {"z": tuple(e[0] for e in out.eps), "eps": eps}

    def elbo(self, params: PyTree, x: jax.Array, pa: jax.Array, key: jax.Array) -> jax.Array:
        """A one-sample estimate of the evidence lower bound
        ``E_q[log p(x | z, pa)] − Σ_l KL(q(z_l | ·) ‖ p(z_l | ·))`` (in nats; its expectation is
        ``≤ log p(x | pa)``)."""
        out = self.posterior(params, x, pa, key, 1.0)
        rec = gaussian_log_prob(x.astype(out.loc.dtype), out.loc[0], out.log_scale[0]).sum()
        return rec - sum(kl[0] for kl in out.kl)

    def log_prob(self, params: PyTree, x: jax.Array, pa: jax.Array) -> jax.Array:
        """The ELBO (:meth:`elbo`) with a fixed posterior draw, a deterministic stand-in for
        ``log p(x | pa)`` that lies below it in expectation."""
        return self.elbo(params, x, pa, jax.random.key(0))
