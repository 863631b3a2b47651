"""Scores of counterfactual representations against true counterfactual texts (paper 002; definitions §4).

Inputs are class probabilities ``(n, C)`` of one classifier on three versions of each couple
``(s_i, z_i')`` (a text and a counterfactual concept value):

* ``p_obs``: the original embedding ``X(s_i)``;
* ``p_true``: the embedding of the true counterfactual text ``X(s_{i, Z←z'})``;
* ``p_cfr``: the counterfactual representation ``X(s_i)_{Z←z'}``.

PIP and ATV compare ``p_true`` with ``p_cfr``; the no-intervention baseline compares ``p_true``
with ``p_obs``: a CFR is useful only where it beats it.

The ATE is the paper's per-unit one: the mean over couples of the total-variation distance
between the classifier's outputs after and before the intervention, ``mean_i ½‖p_true_i −
p_obs_i‖₁`` (its CFR estimate puts ``p_cfr`` in place of ``p_true``). It is not the total
variation of the mean change, ``½‖mean_i (p_true_i − p_obs_i)‖₁``: on balanced data the shifts
of units sent one way and the other cancel there, leaving about 0 however strongly the
classifier reads the concept. That aggregate is :func:`mean_effect` (per class, signed). Every
function is pure JAX and vmappable over a leading classifier axis.

The per-unit kernels are ``cfjax.metrics``' multi-class stability core
(``cfjax.metrics.stability``): PIP is the mean agreement of argmax decisions, ATV and the ATE
means of the total variation ``½‖a − b‖₁``; against the marginalisation metrics, ATV/ATE of
``(p_obs, p_cf)`` is ``cfjax.metrics.score_shift(p_obs, p_cf[:, None])`` and
``1 − PIP`` is ``cfjax.metrics.decision_disagreement`` with K = 1.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from cfjax import _checks, _results
from cfjax.metrics.stability import decisions_agree, total_variation
from cfjax.typing import ArrayLike

__all__ = ["CFRScores", "ate", "atv", "mean_effect", "pip", "score", "tpr", "tpr_gap"]


def _pair(name_a: str, a: ArrayLike, name_b: str, b: ArrayLike, *, check_a: bool = True) -> None:
    _checks.check_ndim(name_a, a, 2, "of class probabilities (n, C)")
    _checks.warn_if_downcast(name_a, a)
    _checks.warn_if_downcast(name_b, b)
    if _checks.shape_of(a) != _checks.shape_of(b):
        _checks.fail(
            name_b,
            f"shape {_checks.shape_of(a)} matching `{name_a}`",
            f"shape {_checks.shape_of(b)}",
        )
    _checks.check_nonempty(name_a, a)
    if check_a:
        _checks.check_probabilities(name_a, a)
    _checks.check_probabilities(name_b, b)


def _pip(a: jax.Array, b: jax.Array) -> jax.Array:
    a = jnp.asarray(a)  # its (canonical) dtype for the proportion
    return jnp.mean(decisions_agree(a, b), dtype=a.dtype)


def _atv(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.mean(total_variation(a, b))


def _mean_effect(p_cf: jax.Array, p_obs: jax.Array) -> jax.Array:
    return jnp.mean(p_cf - p_obs, axis=0)


def pip(p_true: jax.Array, p_cfr: jax.Array) -> jax.Array:
    """Proportion of identical predictions: ``mean_i 1[argmax p_true_i = argmax p_cfr_i]``."""
    _pair("p_true", p_true, "p_cfr", p_cfr)
    return _pip(p_true, p_cfr)


def atv(p_true: jax.Array, p_cfr: jax.Array) -> jax.Array:
    """Average total variation: ``mean_i ½ ‖p_true_i − p_cfr_i‖₁``."""
    _pair("p_true", p_true, "p_cfr", p_cfr)
    return _atv(p_true, p_cfr)


def ate(p_obs: jax.Array, p_cf: jax.Array) -> jax.Array:
    """Average treatment effect of the intervention on the classifier (paper 002): the mean over
    units of the total-variation distance between its outputs after and before,
    ``mean_i ½‖p_cf_i − p_obs_i‖₁``, a scalar in [0, 1]. With ``p_cf = p_true`` (true
    counterfactuals) it is the ATE; with ``p_cf = p_cfr`` its CFR estimate.

    Example:
        >>> import numpy as np
        >>> p_obs = np.array([[0.9, 0.1], [0.1, 0.9]], np.float32)  # two units sent to opposite values:
        >>> p_cf = np.array([[0.1, 0.9], [0.9, 0.1]], np.float32)   # each moves by 0.8, the mean by 0
        >>> round(float(ate(p_obs, p_cf)), 3), np.round(np.asarray(mean_effect(p_obs, p_cf)), 3).tolist()
        (0.8, [0.0, 0.0])
    """
    _pair("p_obs", p_obs, "p_cf", p_cf)
    return _atv(p_cf, p_obs)


def mean_effect(p_obs: jax.Array, p_cf: jax.Array) -> jax.Array:
    """Mean change of the predicted probabilities, per class: ``mean_i (p_cf_i − p_obs_i)``,
    shape ``(C,)``.

    An aggregate, not the paper's ATE (:func:`ate`): ``½‖mean_effect‖₁ <= ate``, with near
    equality only when every unit moves the same way; on balanced data, where units are sent
    both ways, the shifts cancel and it is close to 0.
    """
    _pair("p_obs", p_obs, "p_cf", p_cf)
    return _mean_effect(p_cf, p_obs)


def tpr(y: jax.Array, y_pred: jax.Array, mask: jax.Array, n_classes: int) -> jax.Array:
    """True-positive rate per class within ``mask``: ``P[Ŷ = y | Y = y, mask]``, ``(C,)``
    (NaN for a class absent from the masked units)."""
    onehot = jax.nn.one_hot(y, n_classes)
    onehot = onehot * mask[:, None].astype(onehot.dtype)
    hits = jnp.sum(onehot * (y_pred == y)[:, None].astype(onehot.dtype), axis=0)
    total = jnp.sum(onehot, axis=0)
    return jnp.where(total > 0, hits / jnp.where(total > 0, total, 1), jnp.nan)


def tpr_gap(
    y: ArrayLike, y_pred: ArrayLike, z: ArrayLike, *, value: int = 1, n_classes: int | None = None
) -> jax.Array:
    """TPR-gap per class: ``P[Ŷ=y | Z=value, Y=y] − P[Ŷ=y | Z≠value, Y=y]``, shape ``(C,)``.

    Args:
        y, y_pred: true and predicted classes ``(n,)``.
        z: concept codes ``(n,)``; the gap is between ``Z = value`` and every other value.
        value: the concept value whose TPR comes first (e.g. female).
        n_classes: C (default ``max(y, y_pred) + 1``).

    Example:
        >>> import numpy as np
        >>> y = np.array([0, 0, 1, 1, 0, 0, 1, 1]); z = np.array([1, 1, 1, 1, 0, 0, 0, 0])
        >>> y_pred = np.array([0, 0, 1, 0, 0, 1, 1, 1])
        >>> tpr_gap(y, y_pred, z).tolist()   # class 0: 1 - 0.5; class 1: 0.5 - 1
        [0.5, -0.5]
    """
    y, y_pred, z = (jnp.asarray(v) for v in (y, y_pred, z))
    for name, v in (("y", y), ("y_pred", y_pred), ("z", z)):
        _checks.check_ndim(name, v, 1, "of codes (n,)")
        if not jnp.issubdtype(v.dtype, jnp.integer):
            _checks.fail(name, "integer codes", f"dtype {v.dtype}")
    _checks.check_same_len("y", y, "y_pred", y_pred)
    _checks.check_same_len("y", y, "z", z)
    C = int(max(int(jnp.max(y)), int(jnp.max(y_pred)))) + 1 if n_classes is None else int(n_classes)
    in_group = z == value
    if _checks.is_concrete(z) and (bool(jnp.all(in_group)) or not bool(jnp.any(in_group))):
        _checks.fail("z", f"units both with and without concept value {value}", "only one side")
    return tpr(y, y_pred, in_group, C) - tpr(y, y_pred, ~in_group, C)


class CFRScores(NamedTuple):
    """PIP, ATV, ATE and its CFR estimate, with the no-intervention baseline.

    ``pip``/``atv``: CFR vs true counterfactual; ``pip_baseline``/``atv_baseline``: original
    embedding vs true counterfactual; ``ate`` (scalar): :func:`ate` from true counterfactuals
    (the same number as ``atv_baseline``: both are ``mean_i ½‖p_true_i − p_obs_i‖₁``, read
    once as the effect of the intervention and once as the distance a CFR must beat);
    ``ate_cfr`` (scalar): :func:`ate` from CFRs; ``ate_error``: ``|ate − ate_cfr|``;
    ``mean_effect``/``mean_effect_cfr``: :func:`mean_effect` ``(C,)`` from true counterfactuals
    and from CFRs.
    """

    pip: jax.Array
    atv: jax.Array
    pip_baseline: jax.Array
    atv_baseline: jax.Array
    ate: jax.Array
    ate_cfr: jax.Array
    ate_error: jax.Array
    mean_effect: jax.Array
    mean_effect_cfr: jax.Array

    def to_dict(self) -> dict[str, Any]:
        """Plain Python numbers for ``json.dumps``: a float per scalar score, a list of C
        floats for ``mean_effect`` and ``mean_effect_cfr`` (one more list level per leading
        axis of a batched result, e.g. scores ``vmap``-ed over classifiers)."""
        return {name: _results.plain(getattr(self, name)) for name in self._fields}

    def __repr__(self) -> str:
        return _results.fields_repr(
            type(self).__name__, ((f, getattr(self, f)) for f in self._fields)
        )


def score(p_obs: jax.Array, p_true: jax.Array, p_cfr: jax.Array) -> CFRScores:
    """Every score of one classifier's probabilities on original, true-counterfactual and CFR
    embeddings (each ``(n, C)``, row i the same couple); each input is validated once.

    Example:
        >>> import numpy as np
        >>> p_obs = np.array([[0.8, 0.2], [0.3, 0.7]], np.float32)
        >>> p_true = np.array([[0.4, 0.6], [0.7, 0.3]], np.float32)
        >>> p_cfr = np.array([[0.5, 0.5], [0.6, 0.4]], np.float32)
        >>> s = score(p_obs, p_true, p_cfr)
        >>> [round(float(v), 3) for v in (s.pip, s.atv, s.pip_baseline, s.ate, s.ate_cfr, s.ate_error)]
        [0.5, 0.1, 0.0, 0.4, 0.3, 0.1]
        >>> bool(np.allclose(s.mean_effect, 0.0, atol=1e-6))  # the two units' shifts cancel
        True
        >>> s.to_dict()["ate_cfr"] == float(s.ate_cfr)
        True
    """
    _pair("p_obs", p_obs, "p_true", p_true)
    _pair("p_obs", p_obs, "p_cfr", p_cfr, check_a=False)
    effect, effect_cfr = _atv(p_true, p_obs), _atv(p_cfr, p_obs)
    return CFRScores(
        pip=_pip(p_true, p_cfr),
        atv=_atv(p_true, p_cfr),
        pip_baseline=_pip(p_true, p_obs),
        atv_baseline=effect,
        ate=effect,
        ate_cfr=effect_cfr,
        ate_error=jnp.abs(effect - effect_cfr),
        mean_effect=_mean_effect(p_true, p_obs),
        mean_effect_cfr=_mean_effect(p_cfr, p_obs),
    )
