"""The optimisation settings of the image mechanism's training (:class:`GeneratorConfig`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from cfjax import _checks
from cfjax._core.optim import standard_promotion
from cfjax.generative.hvae import HVAEConfig

__all__ = ["GeneratorConfig"]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclasses.dataclass(frozen=True)
class GeneratorConfig:
    """Optimisation settings of :func:`~cfjax.generative.fit_generator` (frozen and hashable: a static argument).

    Attributes:
      hvae: the network (:class:`~cfjax.generative.hvae.HVAEConfig`).
      steps: optimisation steps.
      batch_size: units per step, drawn uniformly with replacement.
      learning_rate: peak learning rate of AdamW, reached after ``warmup`` linear steps from 0,
        then cosine decay to ``learning_rate / 100`` at ``steps``.
      weight_decay: AdamW's decoupled weight decay.
      warmup: linear warm-up steps of the learning rate (``0 ≤ warmup < steps``).
      clip_norm: gradients are clipped to this global norm before AdamW (``> 0``; ``inf``: no
        clipping).
      ema_decay: the largest decay ``d ∈ [0, 1)`` of the parameters' exponential moving
        average, ``ema_{t+1} = d_t·ema_t + (1 − d_t)·θ_{t+1}`` from ``ema_0 = θ_0``, with the
        decay warmed up as ``d_t = min(d, (1 + t) / (10 + t))`` (:meth:`ema_decay_at`): a
        constant 0.999 would keep 74% of the random initial parameters after 300 steps and 22%
        after 1,500, and the fitted (EMA) generator would reconstruct badly however well
        training went.
      kl_warmup: the KL weight is ``min(1, t / kl_warmup)`` at step ``t`` (0: always 1).
      free_bits: nats per latent channel: level ``l`` (``c_l`` channels) is penalised only for
        its batch-mean KL above ``free_bits·c_l`` nats per image (0: plain ELBO).
      chunk_steps: steps per compiled chunk (one progress update and one checkpoint each).
      temperature: posterior temperature of the trained mechanism's abduction (``≥ 0``).
      cf_weight: weight of the counterfactual regulariser (:func:`counterfactual_loss`, in nats
        per unit, added to the per-pixel objective); ``0`` (the default): off, training is
        exactly the plain ELBO's. ``> 0`` needs ``fit_generator(..., regulariser=...)``.
      cf_warmup: the regulariser's weight is ``cf_weight·min(1, t / cf_warmup)`` at step ``t``
        (0: always ``cf_weight``).

    Example:
      >>> c = GeneratorConfig(steps=100, warmup=10, chunk_steps=40)
      >>> c.chunks, float(c.kl_weight(jnp.int32(250)))
      (3, 0.5)
      >>> GeneratorConfig(ema_decay=1.0)
      Traceback (most recent call last):
      ...
      cfjax._errors.ValidationError: `ema_decay`: expected a decay in [0, 1), got 1.0.
    """

    hvae: HVAEConfig = HVAEConfig()
    steps: int = 2000
    batch_size: int = 32
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    warmup: int = 100
    clip_norm: float = 1.0
    ema_decay: float = 0.999
    kl_warmup: int = 500
    free_bits: float = 0.0
    chunk_steps: int = 50
    temperature: float = 1.0
    cf_weight: float = 0.0
    cf_warmup: int = 0

    def __post_init__(self):
        if not isinstance(self.hvae, HVAEConfig):
            _checks.fail("hvae", "an HVAEConfig", repr(self.hvae))
        for name in ("steps", "batch_size", "chunk_steps"):
            _checks.check_positive_int(name, getattr(self, name))
        if not _is_int(self.warmup) or not 0 <= self.warmup < self.steps:
            _checks.fail("warmup", f"an integer in [0, steps = {self.steps})", repr(self.warmup))
        for name in ("kl_warmup", "cf_warmup"):
            if not _is_int(getattr(self, name)) or getattr(self, name) < 0:
                _checks.fail(name, "an integer >= 0", repr(getattr(self, name)))
        lr = self.learning_rate
        if not _is_number(lr) or not math.isfinite(lr) or lr <= 0:
            _checks.fail("learning_rate", "a finite learning rate > 0", repr(lr))
        for name in ("weight_decay", "free_bits", "temperature", "cf_weight"):
            v = getattr(self, name)
            if not _is_number(v) or not math.isfinite(v) or v < 0:
                _checks.fail(name, "a finite value >= 0", repr(v))
        if not _is_number(self.clip_norm) or math.isnan(self.clip_norm) or self.clip_norm <= 0:
            _checks.fail(
                "clip_norm", "a gradient norm > 0 (inf: no clipping)", repr(self.clip_norm)
            )
        if not _is_number(self.ema_decay) or not 0 <= self.ema_decay < 1:
            _checks.fail("ema_decay", "a decay in [0, 1)", repr(self.ema_decay))

    @property
    def chunk_length(self) -> int:
        """Steps per compiled chunk, ``min(chunk_steps, steps)``."""
        return min(self.chunk_steps, self.steps)

    @property
    def chunks(self) -> int:
        """Chunks of a full run (the last padded with steps that change nothing)."""
        return -(-self.steps // self.chunk_length)

    def optimizer(self) -> optax.GradientTransformation:
        """Global-norm clipping, then AdamW with linear warm-up and cosine decay (under either dtype
        promotion: :func:`cfjax._core.optim.standard_promotion`)."""
        schedule = optax.warmup_cosine_decay_schedule(
            0.0, self.learning_rate, self.warmup, self.steps, self.learning_rate / 100
        )
        clip = (
            optax.identity()
            if math.isinf(self.clip_norm)
            else optax.clip_by_global_norm(self.clip_norm)
        )
        return standard_promotion(
            optax.chain(clip, optax.adamw(schedule, weight_decay=self.weight_decay))
        )

    def ema_decay_at(self, step: jax.Array) -> jax.Array:
        """The EMA decay of the update after ``step`` steps (traceable),
        ``min(ema_decay, (1 + step) / (10 + step))``."""
        t = jnp.asarray(step).astype(jnp.result_type(float))
        return jnp.minimum(jnp.asarray(self.ema_decay, t.dtype), (1 + t) / (10 + t))

    def kl_weight(self, step: jax.Array) -> jax.Array:
        """The KL weight at ``step`` (traceable), ``min(1, step / kl_warmup)``."""
        t = jnp.asarray(step).astype(jnp.result_type(float))
        if self.kl_warmup == 0:
            return jnp.ones_like(t)
        return jnp.minimum(t / self.kl_warmup, 1.0)

    def cf_weight_at(self, step: jax.Array) -> jax.Array:
        """The counterfactual regulariser's weight at ``step`` (traceable),
        ``cf_weight·min(1, step / cf_warmup)``."""
        t = jnp.asarray(step).astype(jnp.result_type(float))
        if self.cf_warmup == 0:
            return jnp.full_like(t, self.cf_weight)
        return self.cf_weight * jnp.minimum(t / self.cf_warmup, 1.0)
