"""The report types of :func:`~cfjax.metrics.evaluate`: one predictor's definitions §1 metrics,
binary scores (:class:`MarginalisationReport`, :class:`CounterfactualLabelReport`) or class
probabilities (:class:`MulticlassReport`)."""

from __future__ import annotations

from typing import Any

import jax
from flax import struct

__all__ = ["CounterfactualLabelReport", "LABEL_FIELDS", "MarginalisationReport", "MulticlassReport"]

#: Report fields that need labels; NaN when ``evaluate`` is called with ``y=None``.
LABEL_FIELDS = (
    "risk_orig",
    "risk_cm",
    "risk_ie",
    "risk_cvar",
    "risk_wc",
    "brier_orig",
    "ece_orig",
    "mce_orig",
    "smece_orig",
    "brier_cm",
    "ece_cm",
    "mce_cm",
    "smece_cm",
)


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


def _plain(value: Any) -> Any:
    return value.tolist() if getattr(value, "ndim", 0) else float(value)
