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

Beside them, :func:`group_dro` (online group DRO) is the baseline a practitioner tries first:
it needs no counterfactuals, only a group label per unit (e.g. sex × label).

ℓ is the binary cross-entropy of a logit (``optax.sigmoid_binary_cross_entropy``). An
:class:`Objective` (hashable: a static argument of a compiled training step) names one of them,
with its strength and level, and gives the loss of a batch.

Every function here and :class:`Objective` check a batch the same way: the shapes of the factual
logits, the counterfactual logits and the labels against each other always (even traced), and
when the values are concrete, finite logits, labels in {0, 1}, weights summing to 1 and a
strength >= 0. A traced value (inside a compiled training step) is not inspected.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from cfjax import _checks
from cfjax._core.keys import as_key
from cfjax.metrics.risk import cvar as _cvar
from cfjax.predictors.sources import all_interventions
from cfjax.typing import Array, ArrayLike, KeyLike

__all__ = [
    "Objective",
    "OBJECTIVES",
    "cf_risk",
    "cf_cvar",
    "logit_variance",
    "flip_probability",
    "cf_augmented",
    "draw_interventions",
    "group_dro",
]

#: The objectives an :class:`Objective` can name.
OBJECTIVES = ("basic", "augment", "cf_risk", "cvar", "variance", "flip", "group_dro")
#: the objectives whose ``strength`` weighs a penalty added to the factual risk
PENALTIES = ("variance", "flip")


def _batch(
    logits_obs: ArrayLike | None = None,
    logits_cf: ArrayLike | None = None,
    y: ArrayLike | None = None,
    weights: ArrayLike | None = None,
) -> tuple[Array | None, Array | None, Array | None, Array | None]:
    """One batch's arrays checked against each other, the one check every objective shares:
    factual logits ``o (N,)``, counterfactual logits ``c (N, K)``, labels ``y (N,)`` and the
    intervention weights ``q (K,)`` (uniform when None). Shapes are checked always (they are
    static, even under ``jit``), values when concrete: finite logits, labels in {0, 1}, weights
    summing to 1. N is the unit count most of the given arrays agree on (``logits_cf``'s on a
    tie), so the error names the odd one out. Returns ``(o, c, y, q)``, each None where not
    given (``q`` where ``logits_cf`` is not)."""
    c = None if logits_cf is None else _logits("logits_cf", logits_cf)
    o = None if logits_obs is None else _logits("logits_obs", logits_obs)
    y = None if y is None else jnp.asarray(y)
    given = [
        (name, x)
        for name, x, rank in (("logits_cf", c, 2), ("logits_obs", o, 1), ("y", y, 1))
        if x is not None and x.ndim == rank
    ]
    sizes = [x.shape[0] for _, x in given]
    n = max(sizes, key=lambda s: (sizes.count(s), -sizes.index(s))) if sizes else None
    ref = next((name for name, x in given if x.shape[0] == n), None)
    if c is not None:
        if c.ndim != 2:
            _checks.fail("logits_cf", "counterfactual logits of shape (N, K)", f"shape {c.shape}")
        if c.shape[0] != n:
            _checks.fail(
                "logits_cf",
                f"counterfactual logits of shape ({n}, K), one row per unit of {ref}",
                f"shape {c.shape}",
            )
        _checks.check_nonempty("logits_cf", c)
    for name, x, what in (("logits_obs", o, "factual logits"), ("y", y, "labels")):
        if x is None:
            continue
        if n is None or (x.ndim == 1 and ref == name):
            _checks.check_ndim(name, x, 1, f"of {what}, shape (N,)")
            _checks.check_nonempty(name, x)
        else:
            _checks.check_shape(name, x, (n,), what, f"one per unit of {ref}")
    if y is not None:
        _checks.check_binary_labels("y", y)
    q = None
    if c is not None:
        k = c.shape[1]
        if weights is None:
            q = jnp.full((k,), 1.0 / k, c.dtype)
        else:
            _checks.check_weights("weights", weights, k)
            q = jnp.asarray(weights, c.dtype)
    return o, c, y, q


def _logits(name: str, logits: ArrayLike) -> jax.Array:
    """``logits`` as a floating array, checked finite when concrete (an infinite logit's loss is NaN)."""
    _checks.check_finite(name, logits)
    x = jnp.asarray(logits)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.result_type(float))


def _check_strength(name: str, strength: ArrayLike) -> None:
    """A scalar ``strength`` (always); finite and >= 0 when concrete (a traced strength, data of
    a compiled training step, is left alone)."""
    shape = _checks.shape_of(strength)
    if shape != ():
        _checks.fail(name, "a scalar penalty strength >= 0", f"shape {shape}")
    if not _checks.is_concrete(strength):
        return
    v = np.asarray(strength)
    if v.dtype.kind not in "iuf" or not np.isfinite(v) or v < 0:
        _checks.fail(name, "a finite penalty strength >= 0", repr(strength))


def _losses(c: jax.Array, y: jax.Array) -> jax.Array:
    """``ℓ(c_ik, y_i)``, ``(N, K)``."""
    return optax.sigmoid_binary_cross_entropy(
        c, jnp.broadcast_to(y.astype(c.dtype)[:, None], c.shape)
    )


def _risk(o: jax.Array, y: jax.Array) -> jax.Array:
    """The factual risk ``mean_i ℓ(o_i, y_i)``."""
    return jnp.mean(optax.sigmoid_binary_cross_entropy(o, y.astype(o.dtype)))


def _cf_risk(c: jax.Array, y: jax.Array, q: jax.Array) -> jax.Array:
    return jnp.mean(_losses(c, y) @ q)


def _cf_cvar(c: jax.Array, y: jax.Array, q: jax.Array, alpha: float) -> jax.Array:
    return jnp.mean(jax.vmap(lambda losses: _cvar(losses, q, alpha))(_losses(c, y)))


def _logit_variance(c: jax.Array, q: jax.Array) -> jax.Array:
    centred = c - (c @ q)[:, None]
    return jnp.mean(centred**2 @ q)


def _flip_probability(o: jax.Array, c: jax.Array, q: jax.Array) -> jax.Array:
    p, p_cf = jax.nn.sigmoid(o.astype(c.dtype))[:, None], jax.nn.sigmoid(c)
    return jnp.mean((p_cf * (1 - p) + (1 - p_cf) * p) @ q)


def _cf_augmented(c: jax.Array, y: jax.Array, q: jax.Array, key: KeyLike) -> jax.Array:
    k = _draw(c.shape[0], q, key)
    chosen = jnp.take_along_axis(c, k[:, None], axis=1)[:, 0]
    return jnp.mean(optax.sigmoid_binary_cross_entropy(chosen, y.astype(c.dtype)))


def _draw(n: int, q: jax.Array, key: KeyLike) -> jax.Array:
    return jax.random.choice(as_key(key), q.shape[0], (n,), p=q)


def cf_risk(logits_cf: ArrayLike, y: ArrayLike, weights: ArrayLike | None = None) -> jax.Array:
    """The counterfactual-marginalised training risk ``mean_i Σ_k q_k ℓ(c_ik, y_i)``.

    Example:
      >>> round(float(cf_risk(jnp.zeros((3, 4)), jnp.array([0, 1, 1]))), 4)  # log 2
      0.6931
    """
    _, c, y_, q = _batch(None, logits_cf, y, weights)
    assert c is not None and y_ is not None and q is not None  # all given
    return _cf_risk(c, y_, q)


def cf_cvar(
    logits_cf: ArrayLike, y: ArrayLike, alpha: float, weights: ArrayLike | None = None
) -> jax.Array:
    """``mean_i CVaR_α(ℓ(c_i·, y_i))``: each unit's worst α (by the weights q) of its
    counterfactual losses, exactly (:func:`cfjax.metrics.risk.cvar`), averaged over units; α in
    (0, 1], α = 1 is :func:`cf_risk`.

    Example:
      >>> c = jnp.array([[0.0, 10.0]])  # label 0: losses log 2 and about 10
      >>> round(float(cf_cvar(c, jnp.array([0]), 0.5)), 3)
      10.0
    """
    alpha = _check_alpha(alpha)
    _, c, y_, q = _batch(None, logits_cf, y, weights)
    assert c is not None and y_ is not None and q is not None  # all given
    return _cf_cvar(c, y_, q, alpha)


def logit_variance(logits_cf: ArrayLike, weights: ArrayLike | None = None) -> jax.Array:
    """The stability penalty ``mean_i Σ_k q_k (c_ik − c̄_i)²``, ``c̄_i = Σ_k q_k c_ik``: how much
    a unit's logit moves under the interventions (0 for a predictor blind to them)."""
    _, c, _, q = _batch(None, logits_cf, None, weights)
    assert c is not None and q is not None  # given
    return _logit_variance(c, q)


def flip_probability(
    logits_obs: ArrayLike, logits_cf: ArrayLike, weights: ArrayLike | None = None
) -> jax.Array:
    """The expected flip probability ``mean_i Σ_k q_k [p_ik (1 − p_i) + (1 − p_ik) p_i]``,
    ``p_i = σ(o_i)``, ``p_ik = σ(c_ik)``: the chance that decisions drawn from the factual and a
    counterfactual prediction differ (a smooth version of s_flip)."""
    o, c, _, q = _batch(logits_obs, logits_cf, None, weights)
    assert o is not None and c is not None and q is not None  # all given
    return _flip_probability(o, c, q)


def cf_augmented(
    logits_cf: ArrayLike, y: ArrayLike, *, key: KeyLike, weights: ArrayLike | None = None
) -> jax.Array:
    """Counterfactual data augmentation: ``mean_i ℓ(c_{i k_i}, y_i)`` with each ``k_i`` drawn
    from q (with ``key``). Its expectation over the draws is :func:`cf_risk`. A training step
    that renders only the drawn counterfactual calls :func:`draw_interventions` and gathers."""
    _, c, y_, q = _batch(None, logits_cf, y, weights)
    assert c is not None and y_ is not None and q is not None  # all given
    return _cf_augmented(c, y_, q, key)


def draw_interventions(n: int, weights: ArrayLike, *, key: KeyLike) -> jax.Array:
    """One intervention index per unit, ``(n,)`` drawn from the weights ``q (K,)``
    (non-negative, summing to 1).

    Example:
      >>> draw_interventions(4, jnp.array([0.0, 1.0, 0.0]), key=0).tolist()
      [1, 1, 1, 1]
    """
    n = _checks.check_positive_int("n", n)
    shape = _checks.shape_of(weights)
    if len(shape) != 1 or shape[0] == 0:
        _checks.fail("weights", "intervention weights of shape (K,), K >= 1", f"shape {shape}")
    _checks.check_weights("weights", weights, shape[0])
    q = jnp.asarray(weights)
    return _draw(
        n, q if jnp.issubdtype(q.dtype, jnp.floating) else q.astype(jnp.result_type(float)), key
    )


def group_dro(
    logits_obs: ArrayLike,
    y: ArrayLike,
    groups: ArrayLike,
    group_weights: ArrayLike,
    step_size: ArrayLike,
) -> tuple[jax.Array, jax.Array]:
    """One step of online group DRO (Sagawa et al., 2020, algorithm 1) on a batch.

    The batch's mean loss of each group, ``L_g = mean_{i: g_i = g} ℓ(o_i, y_i)`` (0 for a group
    absent from the batch), moves the adversary's group weights ``q ← q·exp(η L_g)``,
    normalised; the loss is ``Σ_g q_g L_g`` with the new ``q`` held constant in the gradient.

    Args:
      logits_obs: ``(N,)`` factual logits; ``y``: ``(N,)`` labels in {0, 1}.
      groups: ``(N,)`` integer group of each unit in ``[0, G)``.
      group_weights: ``(G,)`` the adversary's current weights, non-negative and summing to 1
        (start uniform).
      step_size: η ≥ 0 (0: the weights stay where they are).

    Returns:
      ``(loss, new group weights (G,))``.

    Example:
      >>> o, y = jnp.zeros(4), jnp.array([0.0, 1.0, 0.0, 1.0])
      >>> loss, q = group_dro(o, y, jnp.array([0, 0, 1, 1]), jnp.array([0.5, 0.5]), 0.1)
      >>> round(float(loss), 4), q.tolist()
      (0.6931, [0.5, 0.5])
    """
    for name, value in (("logits_obs", logits_obs), ("y", y)):
        if value is None:
            _checks.fail(
                name,
                f"{'factual logits' if name == 'logits_obs' else 'labels'} of shape (N,)",
                "None",
            )
    o, _, y_, _ = _batch(logits_obs, None, y)
    assert o is not None and y_ is not None  # given (checked above)
    shape = _checks.shape_of(group_weights)
    if len(shape) != 1 or shape[0] == 0:
        _checks.fail("group_weights", "weights of shape (G,), G >= 1", f"shape {shape}")
    _checks.check_weights("group_weights", group_weights, shape[0])
    q = jnp.asarray(group_weights, o.dtype)
    g = jnp.asarray(groups)
    _checks.check_shape("groups", g, o.shape, "integer groups", "one per unit of logits_obs")
    if not jnp.issubdtype(g.dtype, jnp.integer):
        _checks.fail("groups", "integer groups", f"dtype {g.dtype}")
    if _checks.is_concrete(groups) and g.size:
        lo, hi = int(g.min()), int(g.max())
        if lo < 0 or hi >= q.shape[0]:
            _checks.fail(
                "groups",
                f"groups in [0, {q.shape[0]}), one weight each in group_weights",
                f"values in [{lo}, {hi}]",
            )
    _check_strength("step_size", step_size)
    losses = optax.sigmoid_binary_cross_entropy(o, y_.astype(o.dtype))
    member = jax.nn.one_hot(g, q.shape[0], dtype=o.dtype)  # (N, G)
    group_loss = (losses @ member) / jnp.maximum(member.sum(axis=0), 1)
    q = q * jnp.exp(jnp.asarray(step_size, o.dtype) * jax.lax.stop_gradient(group_loss))
    q = jax.lax.stop_gradient(q / q.sum())
    return q @ group_loss, q


def _check_alpha(alpha: float) -> float:
    ok = isinstance(alpha, (int, float, np.floating, np.integer)) and not isinstance(alpha, bool)
    if not ok or not (0.0 < float(alpha) <= 1.0):  # also rejects NaN
        _checks.fail("alpha", "a CVaR level in (0, 1]", repr(alpha))
    return float(alpha)


# ----------------------------------------------------------------------- the trainer's view
# What a training step needs of each objective: which logits its loss reads, and the loss of a
# minibatch from them (traced; the checks of ``Objective.loss`` on shapes only). A new objective
# is a row here and its name in OBJECTIVES: the trainer asks the Objective, never its name.


def _train_loss(
    obj: Objective,
    logits_obs: jax.Array | None,
    logits_cf: jax.Array | None,
    y: jax.Array,
    strength: jax.Array,
    weights: jax.Array | None,
    groups: jax.Array | None,
    group_weights: jax.Array | None,
) -> tuple[jax.Array, jax.Array | None]:
    """:meth:`Objective.loss` (the group weights unchanged)."""
    return obj.loss(logits_obs, logits_cf, y, strength=strength, weights=weights), group_weights


def _augment_train_loss(
    obj: Objective,
    logits_obs: jax.Array | None,
    logits_cf: jax.Array | None,
    y: jax.Array,
    strength: jax.Array,
    weights: jax.Array | None,
    groups: jax.Array | None,
    group_weights: jax.Array | None,
) -> tuple[jax.Array, jax.Array | None]:
    """The loss at each unit's one drawn counterfactual, ``logits_cf (B, 1)``."""
    assert logits_cf is not None  # needs_counterfactuals: the step renders the drawn ones
    return jnp.mean(optax.sigmoid_binary_cross_entropy(logits_cf[:, 0], y)), group_weights


def _group_dro_train_loss(
    obj: Objective,
    logits_obs: jax.Array | None,
    logits_cf: jax.Array | None,
    y: jax.Array,
    strength: jax.Array,
    weights: jax.Array | None,
    groups: jax.Array | None,
    group_weights: jax.Array | None,
) -> tuple[jax.Array, jax.Array | None]:
    """:func:`group_dro`'s step: the loss and the adversary's new group weights."""
    # needs_factual and needs_groups: member_step gives all three
    assert logits_obs is not None and groups is not None and group_weights is not None
    return group_dro(logits_obs, y, groups, group_weights, strength)


class _Rule(NamedTuple):
    """How a training step computes one objective's loss.

    Attributes:
      factual: the loss reads the factual logits.
      counterfactuals: the counterfactual logits it reads: ``"none"``, ``"all"`` K of each unit,
        or ``"drawn"``: one per unit drawn from the intervention weights.
      groups: it needs each unit's group and the member's group weights.
      train_loss: ``(objective, logits_obs, logits_cf, y, strength, weights, groups,
        group_weights) -> (loss, group_weights)``.
    """

    factual: bool
    counterfactuals: str
    groups: bool
    train_loss: Callable[..., tuple[jax.Array, jax.Array | None]]


_RULES = {
    "basic": _Rule(True, "none", False, _train_loss),
    "augment": _Rule(False, "drawn", False, _augment_train_loss),
    "cf_risk": _Rule(False, "all", False, _train_loss),
    "cvar": _Rule(False, "all", False, _train_loss),
    "variance": _Rule(True, "all", False, _train_loss),
    "flip": _Rule(True, "all", False, _train_loss),
    "group_dro": _Rule(True, "none", True, _group_dro_train_loss),
}


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
    - ``"flip"``: the factual risk + λ :func:`flip_probability`;
    - ``"group_dro"``: :func:`group_dro`, ``strength`` being its step size η (needs ``groups``
      and ``group_weights``; the trainer keeps each member's weights in its state).

    A penalty of strength 0 is the basic objective itself (its program, bit for bit).
    :meth:`loss` takes the strength as an array (traced): members of one objective with
    different strengths train as one vmapped group (:func:`cfjax.predictors.train`).

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
        if (
            isinstance(s, bool)
            or not isinstance(s, (int, float, np.floating, np.integer))
            or not math.isfinite(s)
            or s < 0
        ):
            _checks.fail("strength", "a finite penalty strength >= 0", repr(s))
        object.__setattr__(self, "strength", float(s))
        object.__setattr__(self, "alpha", _check_alpha(self.alpha))

    @property
    def needs_counterfactuals(self) -> bool:
        """Whether the loss reads the counterfactual logits (not for basic or group DRO, nor a
        penalty of strength 0)."""
        return _RULES[self.name].counterfactuals != "none" and not (
            self.name in PENALTIES and self.strength == 0
        )

    @property
    def needs_factual(self) -> bool:
        """Whether the loss reads the factual logits (not for ``"augment"``, ``"cf_risk"`` and
        ``"cvar"``, which read counterfactual images only)."""
        return _RULES[self.name].factual

    @property
    def needs_groups(self) -> bool:
        """Whether the loss needs each unit's group and the member's group weights
        (``"group_dro"``)."""
        return _RULES[self.name].groups

    def interventions(self, n: int, weights: Array, *, key: KeyLike) -> Array:
        """``which (n, J)``: the interventions of each of ``n`` units whose counterfactual
        logits the loss reads (:mod:`cfjax.predictors.sources`): all K of ``weights (K,)``
        (``J = K``), or for ``"augment"`` one drawn from them with ``key`` (``J = 1``).

        Example:
          >>> Objective("augment").interventions(2, jnp.array([0.0, 1.0]), key=0).tolist()
          [[1], [1]]
          >>> Objective("cf_risk").interventions(2, jnp.array([0.5, 0.5]), key=0).tolist()
          [[0, 1], [0, 1]]
        """
        if _RULES[self.name].counterfactuals == "drawn":
            return draw_interventions(n, weights, key=key)[:, None]
        return all_interventions(n, _checks.shape_of(weights)[0])

    def train_loss(
        self,
        logits_obs: Array | None,
        logits_cf: Array | None,
        y: Array,
        *,
        strength: ArrayLike,
        weights: Array | None = None,
        groups: Array | None = None,
        group_weights: Array | None = None,
    ) -> tuple[Array, Array | None]:
        """A training step's loss of one minibatch, and the member's group weights after it:
        ``logits_obs (B,)`` (None where not :attr:`needs_factual`), ``logits_cf (B, J)`` those
        of :meth:`interventions` (None where not :attr:`needs_counterfactuals`), labels
        ``y (B,)``, the member's ``strength`` (traced); ``groups (B,)`` and ``group_weights
        (G,)`` where :attr:`needs_groups` (updated by group DRO, unchanged otherwise).
        :func:`cfjax.predictors.step.member_step` differentiates it."""
        return _RULES[self.name].train_loss(
            self, logits_obs, logits_cf, y, strength, weights, groups, group_weights
        )

    @property
    def kind(self) -> Objective:
        """This objective with its strength set aside: a penalty's kind has unit strength (a
        penalty of strength 0 is ``Objective("basic")``), group DRO's step 0, any other
        objective is its own kind. Members of one kind train as one vmapped group, each with its
        own strength as data (:meth:`loss`)."""
        if self.name in PENALTIES:
            return (
                Objective("basic") if self.strength == 0 else Objective(self.name, 1.0, self.alpha)
            )
        return Objective(self.name, 0.0, self.alpha)

    def __call__(
        self,
        logits_obs: ArrayLike | None,
        logits_cf: ArrayLike | None,
        y: ArrayLike,
        *,
        key: KeyLike | None = None,
        weights: ArrayLike | None = None,
        groups: ArrayLike | None = None,
        group_weights: ArrayLike | None = None,
    ) -> jax.Array:
        """The batch's loss from its factual logits ``(N,)``, counterfactual logits ``(N, K)``
        (None where not :attr:`needs_counterfactuals`) and labels ``(N,)``; ``groups`` and
        ``group_weights`` for ``"group_dro"``."""
        return self.loss(
            logits_obs,
            logits_cf,
            y,
            strength=self.strength,
            key=key,
            weights=weights,
            groups=groups,
            group_weights=group_weights,
        )

    def loss(
        self,
        logits_obs: ArrayLike | None,
        logits_cf: ArrayLike | None,
        y: ArrayLike,
        *,
        strength: ArrayLike,
        key: KeyLike | None = None,
        weights: ArrayLike | None = None,
        groups: ArrayLike | None = None,
        group_weights: ArrayLike | None = None,
    ) -> jax.Array:
        """:meth:`__call__` with the strength given (an array: traced in a compiled step; a
        concrete one must be finite and >= 0, as the constructor's)."""
        _check_strength("strength", strength)
        if self.name == "group_dro":
            if groups is None or group_weights is None:
                _checks.fail(
                    "groups", "each unit's group and the group weights for 'group_dro'", "None"
                )
            if logits_obs is None:  # group_dro's own check
                _checks.fail("logits_obs", "factual logits of shape (N,)", "None")
            return group_dro(logits_obs, y, groups, group_weights, strength)[0]
        if y is None:
            _checks.fail("y", "labels (N,), one per unit", "None")
        factual = self.name in ("basic",) + PENALTIES
        if factual and logits_obs is None:
            _checks.fail(
                "logits_obs", f"factual logits (N,) for the objective {self.name!r}", "None"
            )
        unpenalised = self.name == "basic" or (
            factual and _checks.is_concrete(strength) and float(np.asarray(strength)) == 0
        )
        if logits_cf is None and not unpenalised:
            _checks.fail(
                "logits_cf", f"counterfactual logits (N, K) for the objective {self.name!r}", "None"
            )
        if self.name == "augment" and key is None:
            _checks.fail("key", "a key for the augmentation's draws", "None")
        o, c, y_, q = _batch(logits_obs, logits_cf, y, weights)
        assert y_ is not None  # checked above
        if unpenalised:
            assert o is not None  # factual: checked above
            return _risk(o, y_)
        assert c is not None and q is not None  # checked above
        if self.name == "augment":
            assert key is not None  # checked above
            return _cf_augmented(c, y_, q, key)
        if self.name == "cf_risk":
            return _cf_risk(c, y_, q)
        if self.name == "cvar":
            return _cf_cvar(c, y_, q, self.alpha)
        assert o is not None  # a penalty is factual: checked above
        lam = jnp.asarray(strength, o.dtype)
        if self.name == "variance":
            return _risk(o, y_) + lam * _logit_variance(c, q)
        return _risk(o, y_) + lam * _flip_probability(o, c, q)
