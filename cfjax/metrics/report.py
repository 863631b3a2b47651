"""The full counterfactual-marginalisation report of one predictor (paper 000, definitions §1), for
binary scores or class probabilities, with observed or counterfactual labels.

Binary scores: ``p_obs (n,)``, ``p_cf (n, K)`` → :class:`MarginalisationReport`. Class
probabilities: ``p_obs (n, C)``, ``p_cf (n, K, C)`` with integer labels in ``0..C-1`` →
:class:`MulticlassReport` (the same fields, cross-entropy ``−log p[y]`` in place of the binary
cross-entropy, top-label calibration, argmax decisions, total-variation shifts).

Labels. By default the label of a unit is assumed not to change under the interventions: every
counterfactual prediction ``p_cf[i, k]`` is scored against the observed ``y[i]``
(``labels == "invariant"``). When the intervened attribute is a cause of the label, pass
``y_cf (n, K)``, the label of unit i under intervention k: the counterfactual losses then use
``y_cf[i, k]``, and the marginalised prediction ``p_bar[i]`` is scored against the label
distribution over the interventions, ``Σ_k q_k 1[y_cf[i, k] = c]``, i.e. by its expected loss
``Σ_k q_k loss(p_bar[i], y_cf[i, k])`` (``labels == "counterfactual"``). ``risk_orig`` and the
``*_orig`` calibration always use the observed ``y``. With changing labels ``R_CM ≤ R_IE`` no
longer holds in general (a predictor that follows the label can beat its own average).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax

from cfjax import _checks
from cfjax.metrics import _arrays, _inputs
from cfjax.metrics.calibration import _bins, _brier
from cfjax.metrics.ranking import _kendall_tau_b, _spearman
from cfjax.metrics.risk import EPS, binary_bce, cvar_units_kn, losses_kn
from cfjax.metrics.smooth_calibration import _smooth_ece
from cfjax.metrics.stability import (
    class_decisions,
    d_obs,
    decisions_agree,
    mean_abs_shift,
    p_bar_classes,
    total_variation,
)

__all__ = [
    "CounterfactualLabelReport", "MarginalisationReport", "MulticlassReport", "evaluate",
    "LABEL_FIELDS", "NOTATION", "descriptions",
]

#: Report fields that need labels; NaN when ``evaluate`` is called with ``y=None``.
LABEL_FIELDS = (
    "risk_orig", "risk_cm", "risk_ie", "risk_cvar", "risk_wc",
    "brier_orig", "ece_orig", "mce_orig", "smece_orig", "brier_cm", "ece_cm", "mce_cm", "smece_cm",
)


#: The symbols of :func:`descriptions`' one-line definitions.
NOTATION = ("p̄ = Σ_k q_k p_cf[k], the marginalised prediction; ℓ the cross-entropy; d(p) the decision "
            "(1[p ≥ tau] for a binary score, the argmax class for class probabilities); q the intervention "
            "weights; every 'mean' is over the n units")

# One line per report field, as definitions §1 defines it (binary scores, invariant labels) ...
_DESCRIPTIONS = {
    "risk_orig": "R_orig: mean ℓ(p_obs, y), the observed prediction's cross-entropy",
    "risk_cm": "R_CM: mean ℓ(p̄, y), the marginalised prediction's cross-entropy",
    "risk_ie": "R_IE: mean Σ_k q_k ℓ(p_cf[k], y), the cross-entropy averaged over the interventions",
    "risk_cvar": "R_CVaR: mean of each unit's CVaR at level alpha of its losses ℓ(p_cf[k], y) under q",
    "risk_wc": "R_WC: mean max_k ℓ(p_cf[k], y), each unit's worst intervention",
    "brier_orig": "Brier score of p_obs: mean (p_obs − y)²",
    "ece_orig": "ECE of p_obs: Σ_b (n_b / n) |mean y − mean p_obs| over equal-width bins b",
    "mce_orig": "MCE of p_obs: max over non-empty equal-width bins of |mean y − mean p_obs|",
    "smece_orig": "smooth ECE of p_obs (kernel-smoothed residuals y − p_obs, no bins)",
    "brier_cm": "Brier score of p̄: mean (p̄ − y)²",
    "ece_cm": "ECE of p̄: Σ_b (n_b / n) |mean y − mean p̄| over equal-width bins b",
    "mce_cm": "MCE of p̄: max over non-empty equal-width bins of |mean y − mean p̄|",
    "smece_cm": "smooth ECE of p̄ (kernel-smoothed residuals y − p̄, no bins)",
    "s_var": "S_var: mean Σ_k q_k (p_cf[k] − p̄)², the spread of the predictions over the interventions",
    "s_flip": "S_flip: mean Σ_k q_k 1[d(p_cf[k]) ≠ d(p_obs)], the share of counterfactual decisions "
              "that differ from the observed one",
    "d_obs": "mean 1[d(p_obs) ≠ d(p̄)], the share of units whose observed and marginalised decisions differ",
    "score_shift": "mean |p_obs − p̄|, the observed prediction's distance from the marginalised one",
    "spearman": "Spearman correlation of p_obs and p̄",
    "kendall_tau_b": "Kendall tau-b of p_obs and p̄",
    "rank_change": "mean |rank(p_obs) − rank(p̄)|, ranks 1..n with ties averaged",
}
# ... what differs for class probabilities (definitions §1.4, "Class probabilities") ...
_CLASS_DESCRIPTIONS = {
    "brier_orig": "Brier score of p_obs: mean Σ_c (p_obs[c] − 1[y = c])²",
    "ece_orig": "top-label ECE of p_obs: Σ_b (n_b / n) |mean 1[argmax p_obs = y] − mean max_c p_obs[c]| "
                "over equal-width bins b",
    "mce_orig": "top-label MCE of p_obs: max over non-empty equal-width bins of "
                "|mean 1[argmax p_obs = y] − mean max_c p_obs[c]|",
    "smece_orig": "top-label smooth ECE of p_obs (confidence max_c p_obs[c] against 1[argmax p_obs = y])",
    "brier_cm": "Brier score of p̄: mean Σ_c (p̄[c] − 1[y = c])²",
    "ece_cm": "top-label ECE of p̄: Σ_b (n_b / n) |mean 1[argmax p̄ = y] − mean max_c p̄[c]| over equal-width bins b",
    "mce_cm": "top-label MCE of p̄: max over non-empty equal-width bins of |mean 1[argmax p̄ = y] − mean max_c p̄[c]|",
    "smece_cm": "top-label smooth ECE of p̄ (confidence max_c p̄[c] against 1[argmax p̄ = y])",
    "s_var": "S_var: mean Σ_k q_k ½‖p_cf[k] − p̄‖², the spread of the predictions over the interventions",
    "score_shift": "mean ½‖p_obs − p̄‖₁, the total variation between the observed and marginalised predictions",
    "s_tv": "mean Σ_k q_k ½‖p_cf[k] − p_obs‖₁, the total variation an intervention moves the prediction",
    "spearman": "Spearman correlation of p_obs[c] and p̄[c], averaged over the classes c",
    "kendall_tau_b": "Kendall tau-b of p_obs[c] and p̄[c], averaged over the classes c",
    "rank_change": "mean |rank(p_obs[c]) − rank(p̄[c])| (ranks 1..n, ties averaged), averaged over the classes c",
}
# ... and with counterfactual labels y_cf (n, K): ȳ = Σ_k q_k y_cf[k] (for classes, the label distribution).
_COUNTERFACTUAL_LABEL_DESCRIPTIONS = {
    "risk_cm": "R_CM: mean Σ_k q_k ℓ(p̄, y_cf[k]), the marginalised prediction's expected cross-entropy",
    "risk_ie": "R_IE: mean Σ_k q_k ℓ(p_cf[k], y_cf[k]), each counterfactual against its own label",
    "risk_cvar": "R_CVaR: mean of each unit's CVaR at level alpha of its losses ℓ(p_cf[k], y_cf[k]) under q",
    "risk_wc": "R_WC: mean max_k ℓ(p_cf[k], y_cf[k]), each unit's worst intervention",
    "brier_cm": "Brier score of p̄: mean Σ_k q_k (p̄ − y_cf[k])²",
    "ece_cm": "ECE of p̄: Σ_b (n_b / n) |mean ȳ − mean p̄| over equal-width bins b, ȳ = Σ_k q_k y_cf[k]",
    "mce_cm": "MCE of p̄: max over non-empty equal-width bins of |mean ȳ − mean p̄|, ȳ = Σ_k q_k y_cf[k]",
    "smece_cm": "smooth ECE of p̄ (kernel-smoothed residuals ȳ − p̄, ȳ = Σ_k q_k y_cf[k])",
}
_COUNTERFACTUAL_CLASS_DESCRIPTIONS = {
    "brier_cm": "Brier score of p̄: mean Σ_k q_k Σ_c (p̄[c] − 1[y_cf[k] = c])²",
    "ece_cm": "top-label ECE of p̄: Σ_b (n_b / n) |mean ȳ[argmax p̄] − mean max_c p̄[c]| over equal-width bins b, "
              "ȳ[c] = Σ_k q_k 1[y_cf[k] = c]",
    "mce_cm": "top-label MCE of p̄: max over non-empty equal-width bins of |mean ȳ[argmax p̄] − mean max_c p̄[c]|, "
              "ȳ[c] = Σ_k q_k 1[y_cf[k] = c]",
    "smece_cm": "top-label smooth ECE of p̄ (confidence max_c p̄[c] against ȳ[argmax p̄], "
                "ȳ[c] = Σ_k q_k 1[y_cf[k] = c])",
}


def descriptions(*, classes: bool = False, counterfactual_labels: bool = False) -> dict[str, str]:
    """One line per field of :func:`evaluate`'s report, as definitions §1 defines it, in the
    symbols of :data:`NOTATION` (what the ``cfjax evaluate`` report prints beside each number).

    Args:
      classes: the fields of class probabilities (:class:`MulticlassReport`, with ``s_tv``).
      counterfactual_labels: the fields computed with counterfactual labels ``y_cf``.

    Returns:
      ``{field: description}``, the report's fields in its order.

    Example:
      >>> print(descriptions()["score_shift"])
      mean |p_obs − p̄|, the observed prediction's distance from the marginalised one
      >>> sorted(set(descriptions(classes=True)) - set(descriptions()))
      ['s_tv']
    """
    out = dict(_DESCRIPTIONS)
    if classes:
        out.update(_CLASS_DESCRIPTIONS)
    if counterfactual_labels:
        out.update(_COUNTERFACTUAL_LABEL_DESCRIPTIONS)
        if classes:
            out.update(_COUNTERFACTUAL_CLASS_DESCRIPTIONS)
    fields = MulticlassReport.__dataclass_fields__ if classes else MarginalisationReport.__dataclass_fields__
    return {f: out[f] for f in fields if f not in _STATIC_FIELDS}


@struct.dataclass
class MarginalisationReport:
    """Every definitions §1 metric of one predictor (or of a batch, with a leading axis, under vmap).

    Scalars, except ``risk_cvar`` which has shape ``(len(alphas),)``, aligned with the static
    field ``alphas``. ``ece_*``/``mce_*`` use equal-width bins; ``smece_*`` is the smooth ECE
    (:func:`~cfjax.metrics.smooth_ece`, its bandwidth chosen automatically) of ``p_obs``
    (``orig``) and of the marginalised ``p_bar`` (``cm``).

    ``labels`` (a class attribute, not a field) says how the counterfactual predictions were
    scored: ``"invariant"`` here (against the observed labels ``y``);
    :class:`CounterfactualLabelReport`, the same fields computed with counterfactual labels
    ``y_cf``, says ``"counterfactual"`` and writes it into :meth:`to_dict`.
    """

    risk_orig: jax.Array
    risk_cm: jax.Array
    risk_ie: jax.Array
    risk_cvar: jax.Array
    risk_wc: jax.Array
    brier_orig: jax.Array
    ece_orig: jax.Array
    mce_orig: jax.Array
    smece_orig: jax.Array
    brier_cm: jax.Array
    ece_cm: jax.Array
    mce_cm: jax.Array
    smece_cm: jax.Array
    s_var: jax.Array
    s_flip: jax.Array
    d_obs: jax.Array
    score_shift: jax.Array
    spearman: jax.Array
    kendall_tau_b: jax.Array
    rank_change: jax.Array
    alphas: tuple[float, ...] = struct.field(pytree_node=False, default=(0.5, 0.25, 0.1))

    # A class attribute, deliberately not annotated: not a dataclass field, so the fields stay
    # the metrics, and the value survives jit/vmap with the class.
    labels = "invariant"

    def to_dict(self) -> dict[str, Any]:
        """Plain Python numbers: floats for scalar fields, ``{alpha: float}`` for
        ``risk_cvar``. For a batched report (leading predictor axis) each float becomes a
        list of floats."""
        return _plain_fields(self)


@struct.dataclass
class CounterfactualLabelReport(MarginalisationReport):
    """:class:`MarginalisationReport` of binary scores computed with counterfactual labels
    ``y_cf (n, K)`` (what :func:`evaluate` returns when given ``y_cf``): ``risk_ie``,
    ``risk_cvar`` and ``risk_wc`` score ``p_cf[i, k]`` against ``y_cf[i, k]``; ``risk_cm``,
    ``brier_cm``, ``ece_cm``, ``mce_cm`` and ``smece_cm`` score ``p_bar[i]`` against the soft
    label ``ȳ[i] = Σ_k q_k y_cf[i, k]`` (``risk_cm`` and ``brier_cm`` as the expected loss
    ``Σ_k q_k loss(p_bar[i], y_cf[i, k])``; the calibration bins average ``ȳ``). ``labels`` is
    ``"counterfactual"``, and :meth:`to_dict` carries it.
    """

    labels = "counterfactual"

    def to_dict(self) -> dict[str, Any]:
        """As :meth:`MarginalisationReport.to_dict`, plus ``"labels": "counterfactual"``."""
        return {**_plain_fields(self), "labels": self.labels}


@struct.dataclass
class MulticlassReport:
    """The marginalisation report of class probabilities ``p_obs (n, C)``, ``p_cf (n, K, C)``.

    The fields of :class:`MarginalisationReport`, defined for C classes, plus ``s_tv``:

    * risks: the cross-entropy ``−log p[y]`` (``p[y]`` clipped to ``[1e-7, 1 − 1e-7]``, as the
      binary one) of ``p_obs`` (``risk_orig``), of ``p_bar = Σ_k q_k p_cf[:, k]``
      (``risk_cm``), and its mean, CVaR and maximum over the interventions (``risk_ie``,
      ``risk_cvar``, ``risk_wc``). For C = 2 and the class vectors ``(1 − p, p)`` they equal
      the binary risks.
    * ``brier_*``: ``mean_i Σ_c (p[i, c] − 1[y_i = c])²`` (twice the binary Brier for C = 2).
    * ``ece_*``, ``mce_*``, ``smece_*``: top-label calibration: the confidence ``max_c p[i, c]``
      against whether the argmax is the label, in equal-width bins (ECE, MCE) or by the
      smooth ECE.
    * ``s_var``, ``s_flip``, ``d_obs``, ``score_shift``: :mod:`cfjax.metrics.stability`'s
      class-probability definitions (argmax decisions; ``score_shift = mean_i TV(p_obs[i],
      p_bar[i])``, with ``TV(a, b) = ½ Σ_c |a_c − b_c|``).
    * ``s_tv = mean_i Σ_k q_k TV(p_cf[i, k], p_obs[i])``: the expected total-variation change
      of the class probabilities under an intervention.
    * ``spearman``, ``kendall_tau_b``, ``rank_change``: one-vs-rest macro averages, the binary
      rank statistic of the class-c scores ``p_obs[:, c]`` against ``p_bar[:, c]`` averaged
      over the C classes (NaN if any class's scores are constant, as the binary ones).

    Static fields: ``alphas`` (the CVaR levels), ``labels`` (``"invariant"`` or
    ``"counterfactual"``, as for the binary reports: with counterfactual labels ``y_cf`` the
    ``cm`` fields use the label distribution ``ȳ[i, c] = Σ_k q_k 1[y_cf[i, k] = c]``:
    ``risk_cm = mean_i Σ_c ȳ[i, c] (−log p_bar[i, c])``, ``brier_cm`` the expected Brier over
    the labels, the top-label correctness ``ȳ[i, argmax p_bar[i]]``) and ``classes`` (C).
    """

    risk_orig: jax.Array
    risk_cm: jax.Array
    risk_ie: jax.Array
    risk_cvar: jax.Array
    risk_wc: jax.Array
    brier_orig: jax.Array
    ece_orig: jax.Array
    mce_orig: jax.Array
    smece_orig: jax.Array
    brier_cm: jax.Array
    ece_cm: jax.Array
    mce_cm: jax.Array
    smece_cm: jax.Array
    s_var: jax.Array
    s_flip: jax.Array
    d_obs: jax.Array
    score_shift: jax.Array
    s_tv: jax.Array
    spearman: jax.Array
    kendall_tau_b: jax.Array
    rank_change: jax.Array
    alphas: tuple[float, ...] = struct.field(pytree_node=False, default=(0.5, 0.25, 0.1))
    labels: str = struct.field(pytree_node=False, default="invariant")
    classes: int = struct.field(pytree_node=False, default=2)

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers as :meth:`MarginalisationReport.to_dict`, plus ``"labels"`` and
        ``"classes"``."""
        return {**_plain_fields(self), "labels": self.labels, "classes": self.classes}


_STATIC_FIELDS = ("alphas", "labels", "classes")


def _plain_fields(report: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in report.__dataclass_fields__:
        if name in _STATIC_FIELDS:
            continue
        value = jax.device_get(getattr(report, name))
        if name == "risk_cvar":
            cols = [value[..., j] for j in range(len(report.alphas))]
            out[name] = {a: _plain(c) for a, c in zip(report.alphas, cols)}
        else:
            out[name] = _plain(value)
    return out


def check_options(alphas: Sequence[float], n_bins: int, tau: Any) -> tuple[tuple[float, ...], int]:
    """Validate the options shared by ``evaluate`` and ``evaluate_many``."""
    _checks.check_threshold("tau", tau)
    return _checks.check_alphas("alphas", alphas), _checks.check_positive_int("n_bins", n_bins)


def _plain(value: Any) -> Any:
    return value.tolist() if getattr(value, "ndim", 0) else float(value)


def evaluate(
    p_obs: Any,
    p_cf: Any,
    y: Any = None,
    *,
    y_cf: Any = None,
    weights: Any = None,
    tau: Any = 0.5,
    alphas: Sequence[float] = (0.5, 0.25, 0.1),
    n_bins: int = 15,
    mesh: Any = None,
) -> MarginalisationReport | MulticlassReport:
    """Evaluate a predictor by counterfactual marginalisation over K interventions.

    Args:
      p_obs: ``(n,)`` predictions on the observed images, ``g(x_i)``; or ``(n, C)`` class
        probabilities (rows summing to 1).
      p_cf: ``(n, K)`` predictions on the counterfactuals, ``g(x̃_i(ã_k))``; or
        ``(n, K, C)`` class probabilities.
      y: ``(n,)`` observed labels: in {0, 1} for binary scores, integers in ``0..C-1`` for
        class probabilities; or None for the label-free stability fields only.
      y_cf: ``(n, K)`` counterfactual labels, ``y_cf[i, k]`` the label of unit i under
        intervention k (same values as ``y``; needs ``y``). None (default): labels are
        assumed invariant, every ``p_cf[i, k]`` is scored against ``y[i]``.
      weights: ``(K,)`` intervention weights q (non-negative, sum 1); uniform when None.
      tau: decision threshold for ``s_flip`` and ``d_obs`` (binary scores; class
        probabilities decide by the argmax and need the default 0.5).
      alphas: CVaR levels in (0, 1].
      n_bins: number of equal-width calibration bins.
      mesh: a one-axis mesh (:func:`cfjax.distributed.mesh`) to split the units over its
        devices: each device reduces its units' K counterfactuals, the sums
        are added over the devices, and the per-unit scores (``(n,)`` or ``(n, C)``) give the
        rank and calibration fields (:func:`~cfjax.metrics.evaluate_chunks` with one chunk). None:
        the default device.

    Shapes:
      binary: ``p_obs (n,)``, ``p_cf (n, K)``, ``y (n,)``, ``y_cf (n, K)``; classes:
      ``p_obs (n, C)``, ``p_cf (n, K, C)``, ``y (n,)``, ``y_cf (n, K)``.

    Returns:
      Binary scores: a :class:`MarginalisationReport` (a :class:`CounterfactualLabelReport`,
      the same fields, when ``y_cf`` is given). Class probabilities: a
      :class:`MulticlassReport`. ``report.labels`` is ``"invariant"`` or
      ``"counterfactual"``. Label fields are NaN when ``y`` is None.

    Jittable and vmappable: ``jax.vmap(lambda po, pc: evaluate(po, pc, y))(P_obs, P_cf)``
    evaluates many predictors at once (value checks are skipped on traced inputs; shape
    checks always run).

    Example:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> p_cf = rng.uniform(size=(100, 16)).astype(np.float32)
      >>> r = evaluate(p_cf[:, 0], p_cf, rng.integers(0, 2, 100))
      >>> bool(r.risk_cm <= r.risk_ie <= r.risk_wc), r.labels
      (True, 'invariant')

      Three classes, labels that change under the interventions:

      >>> p_cf = rng.dirichlet(np.ones(3), (100, 4)).astype(np.float32)
      >>> y_cf = rng.integers(0, 3, (100, 4))
      >>> r = evaluate(p_cf[:, 0], p_cf, y_cf[:, 0], y_cf=y_cf)
      >>> r.classes, r.labels, r.risk_cvar.shape, bool(0 <= r.s_tv <= 1)
      (3, 'counterfactual', (3,), True)
    """
    alphas, n_bins = check_options(alphas, n_bins, tau)
    if y is None and y_cf is not None:
        _checks.fail("y", "observed labels of shape (n,) when `y_cf` is given (risk_orig and "
                     "the *_orig calibration use them)", "None")
    if mesh is not None:
        from cfjax.metrics.streaming import evaluate_chunks
        return evaluate_chunks([(p_obs, p_cf, y, y_cf)], weights=weights, tau=tau, alphas=alphas,
                               n_bins=n_bins, mesh=mesh)
    if _inputs.is_multiclass(p_obs, p_cf):
        p_obs, p_cf, q, _ = _inputs.prepare_stability(p_obs, p_cf, weights, tau)
        y, y_cf = _inputs.prepare_class_labels(y, y_cf, p_cf.shape)
        return _evaluate_classes(p_obs, p_cf, y, q, y_cf=y_cf, alphas=alphas, n_bins=n_bins,
                                 uniform=weights is None)
    p_obs, p_cf, y, q = _inputs.prepare(p_obs=p_obs, p_cf=p_cf, y=y, weights=weights)
    if y_cf is not None:
        y_cf = _inputs.prepare_counterfactual_labels(y_cf, p_cf.shape, p_obs.dtype)
    tau = jnp.asarray(tau, p_obs.dtype)
    return _evaluate(p_obs, p_cf, y, q, tau, alphas=alphas, n_bins=n_bins,
                     uniform=weights is None, y_cf=y_cf)


@functools.partial(jax.jit, static_argnames=("alphas", "n_bins", "uniform"))
def _evaluate(p_obs, p_cf, y, q, tau, *, alphas, n_bins, uniform,
              y_cf=None) -> MarginalisationReport:
    """Traced core of binary :func:`evaluate`: the reductions over K (:func:`unit_stage`),
    then over the units (:func:`finish`)."""
    y_cf_kn = None if y_cf is None else y_cf.T
    p_bar, y_bar, sums = unit_stage(p_obs, p_cf.T, y, q, tau, y_cf_kn, alphas=alphas, uniform=uniform)
    return finish(p_obs, p_bar, y, y_bar, sums, tau, alphas=alphas, n_bins=n_bins)


@struct.dataclass
class UnitSums:
    """The sufficient statistics of the counterfactual axis: per-unit reductions over the K
    interventions, summed over units. Sums of chunks or shards add up (``+``); dividing by
    ``count`` gives the report's means. Label sums are 0 without labels."""

    count: jax.Array  # number of units summed
    s_var: jax.Array  # Σ_i Σ_k q_k (p_cf[i, k] − p_bar[i])²
    s_flip: jax.Array  # Σ_i Σ_k q_k 1[decision flips]
    risk_ie: jax.Array  # Σ_i Σ_k q_k L[i, k]
    risk_wc: jax.Array  # Σ_i max_k L[i, k]
    risk_cvar: jax.Array  # (len(alphas),): Σ_i CVaR_a(L[i, :])

    def __add__(self, other: "UnitSums") -> "UnitSums":
        return jax.tree.map(jnp.add, self, other)


def unit_stage(p_obs: jax.Array, x: jax.Array, y: jax.Array | None, q: jax.Array, tau: jax.Array,
               y_cf_kn: jax.Array | None = None, mask: jax.Array | None = None, *,
               alphas: tuple[float, ...], uniform: bool) -> tuple[jax.Array, jax.Array | None, UnitSums]:
    """The reductions over the intervention axis (traced): ``p_obs (n,)``, ``x = p_cf.T (K, n)``
    (the intervention-major layout of the kernels), labels ``y (n,)`` or None, counterfactual
    labels ``y_cf_kn (K, n)`` or None, and ``mask (n,)`` (1 for a unit, 0 for padding; None:
    every unit counts).

    Returns ``(p_bar (n,), y_bar (n,) or None, UnitSums)``: the marginalised scores, the soft
    counterfactual labels ``Σ_k q_k y_cf[i, k]`` (only with ``y_cf_kn``) and the sums over the
    (unmasked) units. Everything :func:`finish` needs beyond the ``(n,)`` vectors."""
    dtype = p_obs.dtype
    total = (lambda v: jnp.sum(v, axis=-1)) if mask is None else (lambda v: v @ mask)  # noqa: E731
    p_bar = q @ x
    flips = ((x >= tau) != (p_obs >= tau)[None, :]).astype(dtype)
    zero = jnp.zeros((), dtype)
    sums = dict(
        count=jnp.asarray(x.shape[1], dtype) if mask is None else jnp.sum(mask),
        s_var=total(q @ jnp.square(x - p_bar[None, :])),
        s_flip=total(q @ flips),
        risk_ie=zero, risk_wc=zero, risk_cvar=jnp.zeros((len(alphas),), dtype),
    )
    y_bar = None
    if y is not None:
        if y_cf_kn is None:
            losses = losses_kn(x, y)  # (K, n)
        else:
            losses = lax.optimization_barrier(binary_bce(x, y_cf_kn))
            y_bar = q @ y_cf_kn
        sums.update(
            risk_ie=total(q @ losses),
            risk_wc=total(jnp.max(losses, axis=0)),
            risk_cvar=total(cvar_units_kn(losses, q, alphas, uniform=uniform)),
        )
    return p_bar, y_bar, UnitSums(**sums)


def finish(p_obs: jax.Array, p_bar: jax.Array, y: jax.Array | None, y_bar: jax.Array | None,
           sums: UnitSums, tau: jax.Array, *, alphas: tuple[float, ...],
           n_bins: int) -> MarginalisationReport:
    """The reductions over the units (traced): the report from the ``(n,)`` vectors of every
    unit (``p_obs``, ``p_bar``, ``y``, and ``y_bar`` with counterfactual labels) and the
    summed statistics of the intervention axis (:func:`unit_stage`)."""
    dtype = p_obs.dtype
    count = sums.count
    bounds_obs = _arrays.rank_bounds(p_obs)
    bounds_bar = _arrays.rank_bounds(p_bar)
    ranks_obs = _arrays.average_ranks_from_bounds(*bounds_obs, dtype)
    ranks_bar = _arrays.average_ranks_from_bounds(*bounds_bar, dtype)
    stability = dict(
        s_var=sums.s_var / count,
        s_flip=sums.s_flip / count,
        d_obs=d_obs(p_obs, p_bar, tau),
        score_shift=mean_abs_shift(p_obs, p_bar),
        spearman=_spearman(ranks_obs, ranks_bar),
        kendall_tau_b=_kendall_tau_b(bounds_obs, bounds_bar, dtype),
        rank_change=jnp.mean(jnp.abs(ranks_obs - ranks_bar)),
    )
    if y is None:
        labelled = _nan_label_fields(dtype, alphas)
    else:
        if y_bar is None:
            risk_cm = jnp.mean(binary_bce(p_bar, y))
            target, brier_cm = y, _brier(p_bar, y)
        else:
            # Counterfactual labels: p_bar against the soft label y_bar by its expected loss
            # over the interventions.
            clipped = jnp.clip(p_bar, EPS, 1 - EPS)
            risk_cm = jnp.mean(-(y_bar * jnp.log(clipped) + (1 - y_bar) * jnp.log1p(-clipped)))
            target = y_bar
            brier_cm = jnp.mean(jnp.square(p_bar - y_bar) + y_bar * (1 - y_bar))
        labelled = dict(
            risk_orig=jnp.mean(binary_bce(p_obs, y)),
            risk_cm=risk_cm,
            risk_ie=sums.risk_ie / count,
            risk_cvar=sums.risk_cvar / count,
            risk_wc=sums.risk_wc / count,
            brier_orig=_brier(p_obs, y),
            brier_cm=brier_cm,
        )
        for suffix, p, t in (("orig", p_obs, y), ("cm", p_bar, target)):
            labelled.update(_binned_calibration(suffix, p, t, n_bins))
    cls = MarginalisationReport if y_bar is None else CounterfactualLabelReport
    return cls(**labelled, **stability, alphas=alphas)


def _nan_label_fields(dtype: Any, alphas: tuple[float, ...]) -> dict[str, jax.Array]:
    nan = jnp.full((), math.nan, dtype)
    labelled = {f: nan for f in LABEL_FIELDS}
    labelled["risk_cvar"] = jnp.full((len(alphas),), math.nan, dtype)
    return labelled


def _binned_calibration(suffix: str, p: jax.Array, target: jax.Array,
                        n_bins: int) -> dict[str, jax.Array]:
    """ECE, MCE (equal-width bins) and smooth ECE of scores ``p (n,)`` against (possibly
    soft) targets ``target (n,)`` in [0, 1]."""
    count, sum_p, sum_y = _bins(p, target, n_bins)
    gap = jnp.abs(sum_y - sum_p)
    return {
        f"ece_{suffix}": jnp.sum(gap) / p.shape[0],
        f"mce_{suffix}": jnp.max(jnp.where(count > 0, gap / jnp.maximum(count, 1), 0)),
        f"smece_{suffix}": _smooth_ece(p, target)[0],
    }


def _neg_log(p: jax.Array) -> jax.Array:
    return -jnp.log(jnp.clip(p, EPS, 1 - EPS))


def _rank_fields(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Spearman, Kendall's τ_b and the mean absolute rank change of scores ``a``, ``b (n,)``."""
    dtype = a.dtype
    bounds_a, bounds_b = _arrays.rank_bounds(a), _arrays.rank_bounds(b)
    ranks_a = _arrays.average_ranks_from_bounds(*bounds_a, dtype)
    ranks_b = _arrays.average_ranks_from_bounds(*bounds_b, dtype)
    return (_spearman(ranks_a, ranks_b), _kendall_tau_b(bounds_a, bounds_b, dtype),
            jnp.mean(jnp.abs(ranks_a - ranks_b)))


@functools.partial(jax.jit, static_argnames=("alphas", "n_bins", "uniform"))
def _evaluate_classes(p_obs, p_cf, y, q, *, alphas, n_bins, uniform,
                      y_cf=None) -> MulticlassReport:
    """Traced core for class probabilities ``p_obs (n, C)``, ``p_cf (n, K, C)``, integer labels
    ``y (n,)`` (or None) and ``y_cf (n, K)`` (or None): :func:`unit_stage_classes`, then
    :func:`finish_classes`."""
    p_bar, y_bar, sums = unit_stage_classes(p_obs, p_cf, y, q, y_cf, alphas=alphas, uniform=uniform)
    return finish_classes(p_obs, p_bar, y, y_bar, sums, alphas=alphas, n_bins=n_bins)


@struct.dataclass
class ClassUnitSums(UnitSums):
    """:class:`UnitSums` of class probabilities, plus ``s_tv``: Σ_i Σ_k q_k TV(p_cf[i, k], p_obs[i])."""

    s_tv: jax.Array


def unit_stage_classes(p_obs: jax.Array, p_cf: jax.Array, y: jax.Array | None, q: jax.Array,
                       y_cf: jax.Array | None = None, mask: jax.Array | None = None, *,
                       alphas: tuple[float, ...], uniform: bool
                       ) -> tuple[jax.Array, jax.Array | None, ClassUnitSums]:
    """The reductions over the intervention axis for class probabilities (traced):
    ``p_obs (n, C)``, ``p_cf (n, K, C)``, integer labels ``y (n,)`` or None, ``y_cf (n, K)``
    or None, ``mask (n,)`` (1 for a unit, 0 for padding, whose values are never read; None:
    every unit counts).

    Returns ``(p_bar (n, C), y_bar (n, C) or None, ClassUnitSums)``: the marginalised class
    probabilities, the label distribution over the interventions ``Σ_k q_k 1[y_cf[i, k] = c]``
    (only with ``y_cf``) and the sums over the (unmasked) units."""
    dtype = p_obs.dtype
    n_classes = p_cf.shape[2]
    if mask is None:
        total = lambda v: jnp.sum(v, axis=-1)  # noqa: E731
    else:  # padded units may hold zeros (log 0): selected away, not multiplied by 0
        total = lambda v: jnp.sum(jnp.where(mask > 0, v, jnp.zeros((), v.dtype)), axis=-1)  # noqa: E731
    p_bar = p_bar_classes(p_cf, q)  # (n, C)
    flips = (class_decisions(p_cf) != class_decisions(p_obs)[:, None]).astype(dtype)
    zero = jnp.zeros((), dtype)
    sums = dict(
        count=jnp.asarray(p_cf.shape[0], dtype) if mask is None else jnp.sum(mask),
        s_var=total((0.5 * jnp.sum(jnp.square(p_cf - p_bar[:, None, :]), axis=-1)) @ q),
        s_flip=total(flips @ q),
        s_tv=total(total_variation(p_cf, p_obs[:, None, :]) @ q),
        risk_ie=zero, risk_wc=zero, risk_cvar=jnp.zeros((len(alphas),), dtype),
    )
    y_bar = None
    if y is not None:
        labels_nk = jnp.broadcast_to(y[:, None], p_cf.shape[:2]) if y_cf is None else y_cf
        picked = jnp.take_along_axis(p_cf, labels_nk[..., None], axis=-1)[..., 0]  # (n, K)
        losses = lax.optimization_barrier(_neg_log(picked.T))  # (K, n)
        if y_cf is not None:  # the label distribution over the interventions, (n, C)
            y_bar = jnp.einsum("nkc,k->nc", jax.nn.one_hot(y_cf, n_classes, dtype=dtype), q)
        sums.update(
            risk_ie=total(q @ losses),
            risk_wc=total(jnp.max(losses, axis=0)),
            risk_cvar=total(cvar_units_kn(losses, q, alphas, uniform=uniform)),
        )
    return p_bar, y_bar, ClassUnitSums(**sums)


def finish_classes(p_obs: jax.Array, p_bar: jax.Array, y: jax.Array | None, y_bar: jax.Array | None,
                   sums: ClassUnitSums, *, alphas: tuple[float, ...], n_bins: int) -> MulticlassReport:
    """The reductions over the units for class probabilities (traced): the report from
    ``p_obs (n, C)``, ``p_bar (n, C)``, ``y (n,)``, the label distribution ``y_bar (n, C)``
    with counterfactual labels, and the sums of :func:`unit_stage_classes`."""
    dtype = p_obs.dtype
    n_classes = p_obs.shape[1]
    count = sums.count
    spearman, kendall, rank_change = jax.vmap(_rank_fields)(p_obs.T, p_bar.T)  # per class
    stability = dict(
        s_var=sums.s_var / count,
        s_flip=sums.s_flip / count,
        d_obs=jnp.mean(~decisions_agree(p_obs, p_bar), dtype=dtype),
        score_shift=jnp.mean(total_variation(p_obs, p_bar)),
        s_tv=sums.s_tv / count,
        spearman=jnp.mean(spearman),
        kendall_tau_b=jnp.mean(kendall),
        rank_change=jnp.mean(rank_change),
    )
    if y is None:
        labelled = _nan_label_fields(dtype, alphas)
    else:
        onehot = jax.nn.one_hot(y, n_classes, dtype=dtype)  # (n, C)
        target = onehot if y_bar is None else y_bar
        p_y = jnp.take_along_axis(p_obs, y[:, None], axis=-1)[:, 0]
        labelled = dict(
            risk_orig=jnp.mean(_neg_log(p_y)),
            risk_cm=jnp.mean(jnp.sum(target * _neg_log(p_bar), axis=-1)),
            risk_ie=sums.risk_ie / count,
            risk_cvar=sums.risk_cvar / count,
            risk_wc=sums.risk_wc / count,
            brier_orig=jnp.mean(jnp.sum(jnp.square(p_obs - onehot), axis=-1)),
            # Expected Brier over the label distribution: the squared distance to y_bar plus
            # the labels' own spread 1 − Σ_c y_bar_c² (zero for invariant labels).
            brier_cm=jnp.mean(jnp.sum(jnp.square(p_bar - target), axis=-1)
                              + 1 - jnp.sum(jnp.square(target), axis=-1)),
        )
        for suffix, p, t in (("orig", p_obs, onehot), ("cm", p_bar, target)):
            top = jnp.argmax(p, axis=-1)
            confidence = jnp.max(p, axis=-1)
            correct = jnp.take_along_axis(t, top[:, None], axis=-1)[:, 0]
            labelled.update(_binned_calibration(suffix, confidence, correct, n_bins))
    return MulticlassReport(**labelled, **stability, alphas=alphas,
                            labels="invariant" if y_bar is None else "counterfactual",
                            classes=n_classes)
