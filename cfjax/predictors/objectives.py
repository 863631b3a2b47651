"""Counterfactual training objectives: cfjax's counterfactual metrics as losses.

Paper 000 *evaluates* a classifier with its predictions on each unit's K counterfactuals (an
intervention on nuisance parents: sex × age). The same reductions over the intervention axis
are differentiable, so they can train a shortcut away with the counterfactuals that measure
it. Each objective is a pure function of one batch's logits, factual ``logits_obs (N,)`` and
counterfactual ``logits_cf (N, K)`` (the library's unit, intervention order), and the labels
``y (N,)``: an intervention on a nuisance parent leaves the label as it is. Every loss is a mean
over units of a reduction over K with intervention weights ``q (K,)`` (uniform by default).

- :func:`cf_risk`: the counterfactual-marginalised risk, ``mean_i Σ_k q_k ℓ(c_ik, y_i)``;
- :func:`cf_cvar`: its CVaR over K at level α, ``mean_i CVaR_α(ℓ(c_i·, y_i))`` (the worst α
  of each unit's counterfactual losses; α = 1 is :func:`cf_risk`);
- :func:`logit_variance`: ``mean_i Σ_k q_k (c_ik − c̄_i)²``, c̄ the q-weighted mean logit;
- :func:`flip_probability`: the expected flip probability, ``mean_i Σ_k q_k [σ(c_ik)(1 − σ(o_i))
  + (1 − σ(c_ik)) σ(o_i)]``: the chance that a decision drawn from the counterfactual
  prediction differs from one drawn from the factual prediction (a smooth s_flip);
- :func:`cf_augmented`: counterfactual data augmentation, each unit's loss at one of its K
  counterfactuals drawn from q (its expectation over the draw is :func:`cf_risk`).

ℓ is the binary cross-entropy of a logit (``optax.sigmoid_binary_cross_entropy``). An
:class:`Objective` (hashable: a static argument of a compiled training step) names one of them,
with its strength and level, and gives the loss of a batch.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from cfjax import _checks
from cfjax._core.keys import as_key
from cfjax.metrics import cvar as _cvar

__all__ = ["Objective", "OBJECTIVES", "cf_risk", "cf_cvar", "logit_variance", "flip_probability", "cf_augmented",
           "draw_interventions"]

#: The objectives an :class:`Objective` can name.
OBJECTIVES = ("basic", "augment", "cf_risk", "cvar", "variance", "flip")


def _prepare(logits_cf: Any, y: Any = None, weights: Any = None) -> tuple[jax.Array, jax.Array | None, jax.Array]:
    """``(logits_cf (N, K), y (N,) or None, q (K,))`` checked; q uniform when None."""
    c = jnp.asarray(logits_cf)
    if c.ndim != 2:
        _checks.fail("logits_cf", "counterfactual logits of shape (N, K)", f"shape {c.shape}")
    if not jnp.issubdtype(c.dtype, jnp.floating):
        c = c.astype(jnp.result_type(float))
    n, k = c.shape
    if y is not None:
        y = jnp.asarray(y)
        if y.shape != (n,):
            _checks.fail("y", f"labels of shape ({n},), one per unit of logits_cf", f"shape {y.shape}")
        y = y.astype(c.dtype)
    if weights is None:
        q = jnp.full((k,), 1.0 / k, c.dtype)
    else:
        _checks.check_weights("weights", weights, k)
        q = jnp.asarray(weights, c.dtype)
    return c, y, q


def _losses(c: jax.Array, y: jax.Array) -> jax.Array:
    """``ℓ(c_ik, y_i)``, ``(N, K)``."""
    return optax.sigmoid_binary_cross_entropy(c, jnp.broadcast_to(y[:, None], c.shape))


def cf_risk(logits_cf: Any, y: Any, weights: Any = None) -> jax.Array:
    """The counterfactual-marginalised training risk ``mean_i Σ_k q_k ℓ(c_ik, y_i)``.

    Example:
      >>> round(float(cf_risk(jnp.zeros((3, 4)), jnp.array([0, 1, 1]))), 4)  # log 2
      0.6931
    """
    c, y, q = _prepare(logits_cf, y, weights)
    return jnp.mean(_losses(c, y) @ q)


def cf_cvar(logits_cf: Any, y: Any, alpha: float, weights: Any = None) -> jax.Array:
    """``mean_i CVaR_α(ℓ(c_i·, y_i))``: each unit's worst α (by the weights q) of its
    counterfactual losses, exactly (:func:`cfjax.metrics.cvar`), averaged over units; α in
    (0, 1], α = 1 is :func:`cf_risk`.

    Example:
      >>> c = jnp.array([[0.0, 10.0]])  # label 0: losses log 2 and about 10
      >>> round(float(cf_cvar(c, jnp.array([0]), 0.5)), 3)
      10.0
    """
    alpha = _check_alpha(alpha)
    c, y, q = _prepare(logits_cf, y, weights)
    return jnp.mean(jax.vmap(lambda losses: _cvar(losses, q, alpha))(_losses(c, y)))


def logit_variance(logits_cf: Any, weights: Any = None) -> jax.Array:
    """The stability penalty ``mean_i Σ_k q_k (c_ik − c̄_i)²``, ``c̄_i = Σ_k q_k c_ik``: how much
    a unit's logit moves under the interventions (0 for a predictor blind to them)."""
    c, _, q = _prepare(logits_cf, None, weights)
    centred = c - (c @ q)[:, None]
    return jnp.mean(centred**2 @ q)


def flip_probability(logits_obs: Any, logits_cf: Any, weights: Any = None) -> jax.Array:
    """The expected flip probability ``mean_i Σ_k q_k [p_ik (1 − p_i) + (1 − p_ik) p_i]``,
    ``p_i = σ(o_i)``, ``p_ik = σ(c_ik)``: the chance that decisions drawn from the factual and a
    counterfactual prediction differ (a smooth version of s_flip)."""
    c, _, q = _prepare(logits_cf, None, weights)
    o = jnp.asarray(logits_obs, c.dtype)
    if o.shape != c.shape[:1]:
        _checks.fail("logits_obs", f"factual logits of shape ({c.shape[0]},), one per unit of logits_cf",
                     f"shape {o.shape}")
    p, p_cf = jax.nn.sigmoid(o)[:, None], jax.nn.sigmoid(c)
    return jnp.mean((p_cf * (1 - p) + (1 - p_cf) * p) @ q)


def cf_augmented(logits_cf: Any, y: Any, *, key: Any, weights: Any = None) -> jax.Array:
    """Counterfactual data augmentation: ``mean_i ℓ(c_{i k_i}, y_i)`` with each ``k_i`` drawn
    from q (with ``key``). Its expectation over the draws is :func:`cf_risk`. A training step
    that renders only the drawn counterfactual calls :func:`draw_interventions` and gathers."""
    c, y, q = _prepare(logits_cf, y, weights)
    k = draw_interventions(c.shape[0], q, key=key)
    chosen = jnp.take_along_axis(c, k[:, None], axis=1)[:, 0]
    return jnp.mean(optax.sigmoid_binary_cross_entropy(chosen, y))


def draw_interventions(n: int, weights: Any, *, key: Any) -> jax.Array:
    """One intervention index per unit, ``(n,)`` drawn from the weights ``q (K,)``."""
    q = jnp.asarray(weights)
    return jax.random.choice(as_key(key), q.shape[0], (n,), p=q)


def _check_alpha(alpha: Any) -> float:
    ok = isinstance(alpha, (int, float, np.floating, np.integer)) and not isinstance(alpha, bool)
    if not ok or not (0.0 < float(alpha) <= 1.0):  # also rejects NaN
        _checks.fail("alpha", "a CVaR level in (0, 1]", repr(alpha))
    return float(alpha)


@dataclasses.dataclass(frozen=True)
class Objective:
    """One training objective: its ``name`` (one of :data:`OBJECTIVES`), the ``strength`` λ ≥ 0
    of a stability penalty and the CVaR level ``alpha`` ∈ (0, 1]. Hashable (a static argument of
    a compiled training step); called on a batch it gives the loss.

    - ``"basic"``: the factual risk ``mean_i ℓ(o_i, y_i)``;
    - ``"augment"``: :func:`cf_augmented` (needs ``key``);
    - ``"cf_risk"``: :func:`cf_risk`;
    - ``"cvar"``: :func:`cf_cvar` at ``alpha``;
    - ``"variance"``: the factual risk + λ :func:`logit_variance`;
    - ``"flip"``: the factual risk + λ :func:`flip_probability`.

    A penalty of strength 0 is the basic objective itself (its program, bit for bit).

    Example:
      >>> obj = Objective("variance", strength=0.5)
      >>> c = jnp.array([[1.0, -1.0]]); o = jnp.array([0.0]); y = jnp.array([1.0])
      >>> round(float(obj(o, c, y)), 4)  # log 2 + 0.5 * 1
      1.1931
    """

    name: str = "basic"
    strength: float = 0.0
    alpha: float = 1.0

    def __post_init__(self):
        if self.name not in OBJECTIVES:
            _checks.fail("objective", f"one of {', '.join(map(repr, OBJECTIVES))}", repr(self.name))
        s = self.strength
        if isinstance(s, bool) or not isinstance(s, (int, float, np.floating, np.integer)) \
                or not math.isfinite(s) or s < 0:
            _checks.fail("strength", "a finite penalty strength >= 0", repr(s))
        object.__setattr__(self, "strength", float(s))
        object.__setattr__(self, "alpha", _check_alpha(self.alpha))

    @property
    def needs_counterfactuals(self) -> bool:
        """Whether the loss reads the counterfactual logits (not for basic, nor a penalty of
        strength 0)."""
        return not (self.name == "basic" or (self.name in ("variance", "flip") and self.strength == 0))

    def __call__(self, logits_obs: Any, logits_cf: Any, y: Any, *, key: Any = None, weights: Any = None) -> jax.Array:
        """The batch's loss from its factual logits ``(N,)``, counterfactual logits ``(N, K)``
        (None where not :attr:`needs_counterfactuals`) and labels ``(N,)``."""
        o = jnp.asarray(logits_obs)
        basic = jnp.mean(optax.sigmoid_binary_cross_entropy(o, jnp.asarray(y, o.dtype)))
        if not self.needs_counterfactuals:
            return basic
        if logits_cf is None:
            _checks.fail("logits_cf", f"counterfactual logits (N, K) for the objective {self.name!r}", "None")
        if self.name == "augment":
            if key is None:
                _checks.fail("key", "a key for the augmentation's draws", "None")
            return cf_augmented(logits_cf, y, key=key, weights=weights)
        if self.name == "cf_risk":
            return cf_risk(logits_cf, y, weights)
        if self.name == "cvar":
            return cf_cvar(logits_cf, y, self.alpha, weights)
        if self.name == "variance":
            return basic + self.strength * logit_variance(logits_cf, weights)
        return basic + self.strength * flip_probability(o, logits_cf, weights)
