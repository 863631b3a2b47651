"""A conditional hierarchical VAE for images (VDVAE-style; Child 2021, Ribeiro et al. 2023): a
bottom-up encoder, a top-down decoder with a diagonal Gaussian latent at several resolutions,
the parents injected into every top-down block, and a Gaussian pixel likelihood with a learned
per-pixel scale.

Generative model, for one image ``x (H, W)`` with parents ``pa (P,)`` and latent levels
``l = 1..L`` from the coarsest resolution to the finest:

    z_l ~ p(z_l | z_<l, pa) = N(μ_p,l, σ_p,l²),   x ~ N(μ(z, pa), σ(z, pa)²)  (per pixel)

and the posterior ``q(z_l | z_<l, x, pa) = N(μ_q,l, σ_q,l²)`` reads the top-down state and the
encoder's features at the level's resolution. The KL of every level is analytic.

Latents enter and leave the network *standardised against the conditional prior*:
``ε_l = (z_l − μ_p,l) / σ_p,l``. Decoding from ``ε`` with parents ``pa`` maps each ``ε_l``
through the prior's location and scale given ``pa`` and the levels above, so standard normal
``ε`` give a draw from ``p(x | pa)``, and the ``ε`` of a posterior draw decoded with the same
parents give back that draw's latents exactly (to float rounding).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from cfjax import _checks
from cfjax._core.nn import HE, LECUN, Conv3x3, fan_in_normal, mean_pool2
from cfjax.typing import ArrayLike

__all__ = ["HVAEConfig", "HVAE", "HVAEOutput", "gaussian_kl", "gaussian_log_prob"]

#: bound on the latent log-scales, ``|log σ| ≤ 5`` (a soft clip: ``5·tanh(raw / 5)``)
_LATENT_LOG_SCALE_BOUND = 5.0


_HE = HE
_LECUN = LECUN


def _small(key: jax.Array, shape: tuple[int, ...], dtype: DTypeLike = jnp.float32) -> jax.Array:
    """Output layers start near zero (prior ≈ posterior ≈ N(0, 1), pixel mean ≈ 0.5)."""
    return fan_in_normal(0.01)(key, shape, dtype)


@dataclasses.dataclass(frozen=True)
class HVAEConfig:
    """Architecture of :class:`HVAE` (frozen and hashable: a static argument).

    Resolution ``i`` is ``image_size / 2**i`` pixels on a side, ``i = 0..R−1`` with
    ``R = len(channels)``; the encoder and the decoder have one residual block of
    ``channels[i]`` features at each, and the decoder a latent of ``latent_dims[i]`` channels
    at resolution ``i`` (0: none there). At least two resolutions must carry a latent.

    Attributes:
      image_size: height and width of the (square) images; divisible by ``2**(R − 1)``.
      channels: features per resolution, finest first.
      latent_dims: latent channels per resolution, finest first (0 = no latent).
      sigma_min: lower bound of the pixel scale, ``σ ∈ [sigma_min, 1]`` (``0 < sigma_min < 1``).
      conv: how 3×3 convolutions run (:class:`cfjax.predictors.cnn.Conv3x3`): ``"auto"``,
        ``"matmul"`` (im2col, fast on CPU) or ``"xla"``.

    Example:
      >>> c = HVAEConfig(image_size=16, channels=(8, 16, 16), latent_dims=(0, 4, 4))
      >>> c.latent_shapes
      ((4, 4, 4), (8, 8, 4))
      >>> HVAEConfig(image_size=10, channels=(8, 8, 8))
      Traceback (most recent call last):
      ...
      cfjax._errors.ValidationError: `image_size`: expected a positive multiple of 4 (2 halvings for 3 resolutions), got 10.
    """

    image_size: int = 16
    channels: tuple[int, ...] = (8, 16, 16)
    latent_dims: tuple[int, ...] = (0, 4, 4)
    sigma_min: float = 0.01
    conv: str = "auto"

    def __post_init__(self):
        for name in ("channels", "latent_dims"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(
                isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value
            ):
                _checks.fail(name, "a tuple of integers", repr(value))
        if len(self.channels) < 2 or any(c < 1 for c in self.channels):
            _checks.fail(
                "channels",
                "at least 2 positive feature counts (one per resolution)",
                repr(self.channels),
            )
        if len(self.latent_dims) != len(self.channels):
            _checks.fail(
                "latent_dims",
                f"{len(self.channels)} entries, one per resolution of `channels`",
                repr(self.latent_dims),
            )
        if any(d < 0 for d in self.latent_dims) or sum(d > 0 for d in self.latent_dims) < 2:
            _checks.fail(
                "latent_dims",
                "non-negative sizes with a latent at 2 or more resolutions",
                repr(self.latent_dims),
            )
        halvings = len(self.channels) - 1
        if (
            isinstance(self.image_size, bool)
            or not isinstance(self.image_size, (int, np.integer))
            or self.image_size < 1
            or self.image_size % 2**halvings
        ):
            _checks.fail(
                "image_size",
                f"a positive multiple of {2**halvings} ({halvings} halvings for "
                f"{len(self.channels)} resolutions)",
                repr(self.image_size),
            )
        ok = isinstance(self.sigma_min, (float, int, np.floating)) and not isinstance(
            self.sigma_min, bool
        )
        if not ok or not 0.0 < float(self.sigma_min) < 1.0:
            _checks.fail("sigma_min", "a pixel scale bound in (0, 1)", repr(self.sigma_min))
        if self.conv not in ("auto", "matmul", "xla"):
            _checks.fail("conv", "one of 'auto', 'matmul', 'xla'", repr(self.conv))

    @property
    def image_shape(self) -> tuple[int, int]:
        return (int(self.image_size), int(self.image_size))

    @property
    def levels(self) -> tuple[int, ...]:
        """Resolutions that carry a latent, coarsest first (the top-down order)."""
        return tuple(i for i in reversed(range(len(self.channels))) if self.latent_dims[i] > 0)

    @property
    def latent_shapes(self) -> tuple[tuple[int, int, int], ...]:
        """``(h, w, c)`` of each latent level, coarsest first (the order of the noise tuples)."""
        s = int(self.image_size)
        return tuple((s >> i, s >> i, int(self.latent_dims[i])) for i in self.levels)


def gaussian_kl(
    mu_q: jax.Array, log_s_q: jax.Array, mu_p: jax.Array, log_s_p: jax.Array
) -> jax.Array:
    """Elementwise ``KL(N(μ_q, σ_q²) ‖ N(μ_p, σ_p²))``:
    ``log σ_p − log σ_q + (σ_q² + (μ_q − μ_p)²) / (2σ_p²) − 1/2``
    (``distrax.LogStddevNormal``'s analytic KL).

    Example:
      >>> float(gaussian_kl(jnp.float32(1.0), jnp.float32(0.0), jnp.float32(0.0), jnp.float32(0.0)))
      0.5
    """
    return distrax.LogStddevNormal(mu_q, log_s_q).kl_divergence(
        distrax.LogStddevNormal(mu_p, log_s_p)
    )


def gaussian_log_prob(x: jax.Array, loc: jax.Array, log_scale: jax.Array) -> jax.Array:
    """Elementwise ``log N(x; loc, exp(log_scale)²)`` (``distrax.LogStddevNormal``'s).

    Example:
      >>> round(float(gaussian_log_prob(jnp.float32(0.0), jnp.float32(0.0), jnp.float32(0.0))), 4)
      -0.9189
    """
    return distrax.LogStddevNormal(loc, log_scale).log_prob(x)


class HVAEOutput(NamedTuple):
    """What one pass of :class:`HVAE` returns, for a batch of ``B`` images.

    Attributes:
      loc: pixel means ``μ(z, pa)``, ``(B, H, W)``.
      log_scale: pixel log-scales ``log σ(z, pa)`` in ``[log sigma_min, 0]``, ``(B, H, W)``.
      eps: the latents standardised against the conditional prior, one ``(B, h, w, c)`` per
        level, coarsest first.
      kl: ``KL(q ‖ p)`` of each level summed over its latent units, one ``(B,)`` per level
        (zeros when decoding from the prior).
    """

    loc: jax.Array
    log_scale: jax.Array
    eps: tuple[jax.Array, ...]
    kl: tuple[jax.Array, ...]


def _up2(h: jax.Array) -> jax.Array:
    return jnp.repeat(jnp.repeat(h, 2, axis=1), 2, axis=2)


def _broadcast_hw(v: jax.Array, like: jax.Array) -> jax.Array:
    """``v (B, C)`` as ``(B, 1, 1, C)`` broadcast to ``like (B, h, w, C)`` (explicit: no rank
    promotion)."""
    return jnp.broadcast_to(v[:, None, None, :], like.shape)


class _ResBlock(nn.Module):
    """``h + conv(gelu(conv(gelu(h))))``, 3×3 convolutions at the input width; the second
    convolution starts small so that every block begins near the identity."""

    conv: str

    @nn.compact
    def __call__(self, h: jax.Array) -> jax.Array:
        c = h.shape[-1]
        y = Conv3x3(c, conv=self.conv, name="conv0")(nn.gelu(h))
        y = Conv3x3(c, conv=self.conv, kernel_init=_small, name="conv1")(nn.gelu(y))
        return h + y


def _dense(features: int, name: str, dtype: DTypeLike, init: Any = _LECUN) -> nn.Dense:
    """A dense layer whose parameters take the dtype of its input (float64 under x64, as the
    convolutions do; flax's default would be float32)."""
    return nn.Dense(features, kernel_init=init, param_dtype=dtype, name=name)


class HVAE(nn.Module):
    """The conditional hierarchical VAE of ``config`` on a batch.

    ``__call__(pa, x=None, noise=(), temperature=1.0)``:

    - with ``x (B, H, W)`` (the posterior pass): level ``l``'s latent is
      ``z_l = μ_q + temperature·σ_q·noise[l]`` (``noise`` standard normal draws shaped as
      :attr:`HVAEConfig.latent_shapes`, batch first), its KL against the prior is analytic, and
      ``eps`` returns it standardised against the prior;
    - without ``x`` (the prior pass): ``z_l = μ_p + σ_p·noise[l]``, ``noise`` being such
      standardised latents (standard normal: a draw from the prior).

    Shapes: ``pa (B, P)``, images ``(B, H, W)`` with values in [0, 1], ``noise`` a tuple of
    ``(B, h, w, c)``. Returns :class:`HVAEOutput`. Initialise with ``x`` (the encoder's
    parameters are created by the posterior pass).

    Example:
      >>> cfg = HVAEConfig(image_size=16, channels=(4, 4, 4), latent_dims=(0, 2, 2))
      >>> model, pa = HVAE(cfg), jnp.zeros((1, 3))
      >>> noise = tuple(jnp.zeros((1,) + s) for s in cfg.latent_shapes)
      >>> params = model.init(jax.random.key(0), pa, jnp.zeros((1, 16, 16)), noise)
      >>> out = model.apply(params, pa, None, noise)
      >>> out.loc.shape, [e.shape for e in out.eps]
      ((1, 16, 16), [(1, 4, 4, 2), (1, 8, 8, 2)])
    """

    config: HVAEConfig

    def _encode(self, x: jax.Array) -> list[jax.Array]:
        cfg = self.config
        h = Conv3x3(cfg.channels[0], conv=cfg.conv, name="enc_in")((x - 0.5)[..., None])
        feats = []
        for i, _c in enumerate(cfg.channels):
            h = _ResBlock(cfg.conv, name=f"enc_block{i}")(h)
            feats.append(h)
            if i + 1 < len(cfg.channels):
                h = _dense(cfg.channels[i + 1], f"enc_down{i}", h.dtype)(mean_pool2(h))
        return feats

    @nn.compact
    def __call__(
        self,
        pa: jax.Array,
        x: jax.Array | None = None,
        noise: tuple[jax.Array, ...] = (),
        temperature: ArrayLike = 1.0,
    ) -> HVAEOutput:
        cfg = self.config
        noise = tuple(noise)
        if len(noise) != len(cfg.levels):
            raise ValueError(
                f"`noise`: expected {len(cfg.levels)} latent arrays, got {len(noise)}."
            )
        b = pa.shape[0]
        feats = self._encode(x) if x is not None else None
        top = len(cfg.channels) - 1
        side = cfg.image_size >> top
        h0 = self.param(
            "td_start", nn.initializers.zeros_init(), (side, side, cfg.channels[top]), pa.dtype
        )
        h = jnp.broadcast_to(h0[None], (b,) + h0.shape)
        eps_out, kls = [], []
        level = 0
        for i in reversed(range(len(cfg.channels))):
            c = cfg.channels[i]
            h = h + _broadcast_hw(_dense(c, f"td_pa{i}", pa.dtype)(pa), h)  # parents in every block
            d = cfg.latent_dims[i]
            if d > 0:
                prior = Conv3x3(2 * d + c, conv=cfg.conv, kernel_init=_small, name=f"prior{i}")(
                    nn.gelu(h)
                )
                mu_p, raw_p, h_p = prior[..., :d], prior[..., d : 2 * d], prior[..., 2 * d :]
                log_s_p = _LATENT_LOG_SCALE_BOUND * jnp.tanh(raw_p / _LATENT_LOG_SCALE_BOUND)
                n = noise[level]
                if feats is not None:
                    post = Conv3x3(2 * d, conv=cfg.conv, kernel_init=_small, name=f"posterior{i}")(
                        nn.gelu(jnp.concatenate([h, feats[i]], axis=-1))
                    )
                    mu_q = post[..., :d]
                    log_s_q = _LATENT_LOG_SCALE_BOUND * jnp.tanh(
                        post[..., d:] / _LATENT_LOG_SCALE_BOUND
                    )
                    z = mu_q + temperature * jnp.exp(log_s_q) * n
                    eps_out.append((z - mu_p) * jnp.exp(-log_s_p))
                    kls.append(gaussian_kl(mu_q, log_s_q, mu_p, log_s_p).sum(axis=(1, 2, 3)))
                else:
                    z = mu_p + jnp.exp(log_s_p) * n
                    eps_out.append(n)
                    kls.append(jnp.zeros((b,), h.dtype))
                h = h + h_p + _dense(c, f"z_proj{i}", z.dtype, _small)(z)
                level += 1
            h = _ResBlock(cfg.conv, name=f"dec_block{i}")(h)
            if i > 0:
                h = _dense(cfg.channels[i - 1], f"dec_up{i}", h.dtype)(_up2(h))
        out = Conv3x3(2, conv=cfg.conv, kernel_init=_small, name="dec_out")(nn.gelu(h))
        loc = out[..., 0] + 0.5
        log_min = float(np.log(cfg.sigma_min))
        log_scale = log_min - log_min * nn.sigmoid(out[..., 1] + 2.0)  # σ starts near σ_min^0.12
        return HVAEOutput(loc, log_scale, tuple(eps_out), tuple(kls))
