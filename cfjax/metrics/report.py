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

from collections.abc import Sequence

import jax

from cfjax import distributed as _dist
from cfjax.metrics import _stages
from cfjax.metrics._report_types import (
    _STATIC_FIELDS,
    LABEL_FIELDS,
    CounterfactualLabelReport,
    MarginalisationReport,
    MulticlassReport,
)
from cfjax.typing import ArrayLike, MeshLike

__all__ = [
    "CounterfactualLabelReport",
    "MarginalisationReport",
    "MulticlassReport",
    "evaluate",
    "LABEL_FIELDS",
    "NOTATION",
    "descriptions",
]

#: The symbols of :func:`descriptions`' one-line definitions.
NOTATION = (
    "p̄ = Σ_k q_k p_cf[k], the marginalised prediction; ℓ the cross-entropy; d(p) the decision "
    "(1[p ≥ tau] for a binary score, the argmax class for class probabilities); q the intervention "
    "weights; every 'mean' is over the n units"
)

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
    fields = (
        MulticlassReport.__dataclass_fields__
        if classes
        else MarginalisationReport.__dataclass_fields__
    )
    return {f: out[f] for f in fields if f not in _STATIC_FIELDS}


def evaluate(
    p_obs: ArrayLike,
    p_cf: ArrayLike,
    y: ArrayLike | None = None,
    *,
    y_cf: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    tau: ArrayLike = 0.5,
    alphas: Sequence[float] = (0.5, 0.25, 0.1),
    n_bins: int = 15,
    mesh: MeshLike = None,
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
      mesh: None (the default device), a device count, a sequence of devices or a one-axis
        ``Mesh``: the units split over its devices (:func:`cfjax.distributed.map_batch`), each
        device reducing its units' K counterfactuals; the sums over the units, and the rank
        and calibration fields from the per-unit vectors (``(n,)`` or ``(n, C)``), then on one
        device.

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
    alphas, n_bins = _stages.check_options(alphas, n_bins, tau)
    p_obs, p_cf, y, y_cf, q, tau = _stages.prepare(p_obs, p_cf, y, y_cf, weights, tau)
    uniform = weights is None
    if mesh is None:
        return _stages.report(
            p_obs, p_cf, y, y_cf, q, tau, alphas=alphas, n_bins=n_bins, uniform=uniform
        )
    arrays = {
        f: v
        for f, v in (("p_obs", p_obs), ("p_cf", p_cf), ("y", y), ("y_cf", y_cf))
        if v is not None
    }
    p_bar, y_bar, per_unit = _dist.map_batch(
        _stages.UnitStage(alphas, uniform), arrays, shared=(q, tau), mesh=mesh
    )
    sums = _sum_units(per_unit)
    return _stages.finish_on_host(p_obs, p_bar, y, y_bar, sums, tau, alphas=alphas, n_bins=n_bins)


_sum_units = jax.jit(_stages.sum_units)
