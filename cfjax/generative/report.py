"""Every quality measure of an image mechanism in one result (:func:`quality_report` →
:class:`QualityReport`): the measures of :mod:`cfjax.generative.quality` that its arguments
allow, the learned counterfactuals and what they are compared with given as one
:class:`LearnedImages`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from cfjax import _checks, _results
from cfjax._core import training as _training
from cfjax._core.keys import as_key
from cfjax.generative.anticausal import AntiCausal
from cfjax.generative.quality import (
    composition,
    decision_agreement,
    effectiveness,
    effectiveness_ceiling,
    pixel_mae,
    relative_gap,
    reversibility,
)
from cfjax.scm import Mechanism
from cfjax.typing import ArrayLike, KeyLike, MeshLike, PyTree

__all__ = ["LearnedImages", "QualityReport", "quality_report"]


@struct.dataclass
class QualityReport:
    """The quality figures of one image mechanism, each ``None`` where it was not measured.

    Attributes:
      composition: ``(n_times,)`` mean L1 after ``1 … n_times`` null interventions
        (:func:`~cfjax.generative.quality.composition`).
      reversibility: ``(K,)`` mean L1 after ``do(pa*)`` then ``do(pa)`` back, per intervention
        (:func:`~cfjax.generative.quality.reversibility`).
      effectiveness: ``{head + "_accuracy" | head + "_mae": value}`` on the learned
        counterfactuals (:func:`~cfjax.generative.quality.effectiveness`); scalars, or ``(K,)`` per intervention.
      effectiveness_ceiling: the same on exact counterfactuals (:func:`~cfjax.generative.quality.effectiveness_ceiling`).
      pixel_mae: mean absolute pixel error against exact counterfactuals (:func:`~cfjax.generative.quality.pixel_mae`).
      decision_agreement: a fixed classifier's agreement on learned and exact counterfactuals
        (:func:`~cfjax.generative.quality.decision_agreement`).

    A pytree (``None`` fields are empty subtrees). :meth:`to_dict` gives plain Python for
    ``json.dumps``.
    """

    composition: Any = None
    reversibility: Any = None
    effectiveness: Any = None
    effectiveness_ceiling: Any = None
    pixel_mae: Any = None
    decision_agreement: Any = None

    @property
    def relative_gap(self) -> dict[str, jax.Array] | None:
        """:func:`~cfjax.generative.quality.relative_gap` of the effectiveness against its ceiling (None unless both)."""
        if self.effectiveness is None or self.effectiveness_ceiling is None:
            return None
        return relative_gap(self.effectiveness, self.effectiveness_ceiling)

    def to_dict(self) -> dict[str, Any]:
        """Plain Python for ``json.dumps``: each measured field as a float or a list of floats
        (effectiveness as ``{name: value}``), ``relative_gap`` when both effectiveness figures
        are there; fields not measured are left out."""
        out = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value is not None:
                out[name] = _results.plain(value)
        gap = self.relative_gap
        if gap is not None:
            out["relative_gap"] = _results.plain(gap)
        return out

    def __repr__(self) -> str:
        items = []
        if self.composition is not None:
            c = self.composition
            items += (
                [("composition_after_1", c[0]), (f"composition_after_{c.shape[0]}", c[-1])]
                if getattr(c, "ndim", 0) == 1
                else [("composition", c)]
            )
        if self.reversibility is not None:
            items.append(("reversibility_mean", jnp.mean(jnp.asarray(self.reversibility))))
        for name in ("effectiveness", "effectiveness_ceiling"):
            if getattr(self, name) is not None:
                items += [
                    (f"{name}.{k}", jnp.mean(jnp.asarray(v)))
                    for k, v in getattr(self, name).items()
                ]
        for name in ("pixel_mae", "decision_agreement"):
            if getattr(self, name) is not None:
                items.append((name, jnp.mean(jnp.asarray(getattr(self, name)))))
        text = _results.fields_repr(type(self).__name__, items)
        return text if len(text) < 400 else text[:392] + ", ...)"


@dataclasses.dataclass(frozen=True, eq=False)
class LearnedImages:
    """A learned mechanism's counterfactuals and what :func:`quality_report` compares them with.

    Attributes:
      images: ``(N, K, H, W)`` learned counterfactual images.
      parents: ``{name: (N, K)}`` the parents they were generated for (effectiveness).
      exact: ``(N, K, H, W)`` exact counterfactual images of the same units and interventions
        (the effectiveness ceiling and pixel MAE).
      p_learned, p_exact: a fixed classifier's probabilities on the learned and on the exact
        counterfactuals (decision agreement); ``threshold`` its decision threshold.
    """

    images: Any = None
    parents: Mapping[str, Any] | None = None
    exact: ArrayLike | None = None
    p_learned: Any = None
    p_exact: Any = None
    threshold: float = 0.5


_QUALITY_REPORT_LEGACY = {
    "counterfactuals": ("learned", "images"),
    "counterfactual_parents": ("learned", "parents"),
    "exact": ("learned", "exact"),
    "p_learned": ("learned", "p_learned"),
    "p_exact": ("learned", "p_exact"),
    "threshold": ("learned", "threshold"),
}


def _fold_quality_report(old: dict[str, Any], kwargs: dict[str, Any]) -> str:
    """:func:`quality_report`'s old keywords: the learned images and what they are compared
    with are one :class:`LearnedImages`."""
    return _training.regroup(
        "quality_report", old, kwargs, _QUALITY_REPORT_LEGACY, {"learned": LearnedImages}
    )


@_training.legacy_keywords(_fold_quality_report)
def quality_report(
    mechanism: Mechanism | None = None,
    params: PyTree | None = None,
    images: Any = None,
    parents: Any = None,
    *,
    targets: ArrayLike | None = None,
    n_times: int = 10,
    key: KeyLike | None = None,
    predictors: AntiCausal | None = None,
    learned: LearnedImages | None = None,
    by_intervention: bool = False,
    chunk: int = 256,
    mesh: MeshLike = None,
) -> QualityReport:
    """Every quality figure the arguments allow, in one :class:`QualityReport`.

    - composition: with ``mechanism``, ``params``, ``images (N, H, W)`` and ``parents (N, P)``
      (``n_times`` null interventions);
    - reversibility: with those and ``targets`` (``(N, K, P)`` or ``(K, P)``);
    - effectiveness: with ``predictors`` and ``learned`` images and parents (a
      :class:`LearnedImages`); its ceiling with ``learned.exact`` images too;
    - pixel MAE: with ``learned.images`` and ``learned.exact``;
    - decision agreement: with a classifier's probabilities ``learned.p_learned`` and
      ``learned.p_exact``.

    ``key`` (stochastic abduction: a typed key, raw key data or an int seed) is split in two,
    for composition and reversibility; ``mesh`` splits their units over devices.
    ``by_intervention`` gives effectiveness, pixel MAE and agreement per intervention ``(K,)``.

    Example:
      >>> import cfjax as cf
      >>> mech, p = cf.scm.LocationScale(), cf.scm.linear_gaussian_params([2.0], 0.5, 1.5)
      >>> r = quality_report(mech, p, jnp.array([1.0, 2.0]), jnp.ones((2, 1)), n_times=2,
      ...                    targets=jnp.array([[0.0], [4.0]]))
      >>> r.to_dict()
      {'composition': [0.0, 0.0], 'reversibility': [0.0, 0.0]}
    """
    k_comp, k_rev = (None, None) if key is None else tuple(jax.random.split(as_key(key)))
    if learned is None:
        learned = LearnedImages()
    elif not isinstance(learned, LearnedImages):
        _checks.fail("learned", "a LearnedImages (or None)", type(learned).__name__)
    counterfactuals, counterfactual_parents, exact = learned.images, learned.parents, learned.exact
    p_learned, p_exact, threshold = learned.p_learned, learned.p_exact, learned.threshold
    fields: dict[str, Any] = {}
    if mechanism is not None:
        fields["composition"] = composition(
            mechanism, params, images, parents, n_times=n_times, key=k_comp, chunk=chunk, mesh=mesh
        )
        if targets is not None:
            fields["reversibility"] = reversibility(
                mechanism, params, images, parents, targets, key=k_rev, chunk=chunk, mesh=mesh
            )
    if predictors is not None:
        if counterfactuals is None or counterfactual_parents is None:
            _checks.fail(
                "learned",
                "learned counterfactual images and their parents (LearnedImages(images, parents))"
                " with `predictors`",
                "None",
            )
        fields["effectiveness"] = effectiveness(
            predictors,
            counterfactuals,
            counterfactual_parents,
            by_intervention=by_intervention,
            chunk=chunk,
        )
        if exact is not None:
            fields["effectiveness_ceiling"] = effectiveness_ceiling(
                predictors,
                exact,
                counterfactual_parents,
                by_intervention=by_intervention,
                chunk=chunk,
            )
    if counterfactuals is not None and exact is not None:
        fields["pixel_mae"] = pixel_mae(counterfactuals, exact, by_intervention=by_intervention)
    if (p_learned is None) != (p_exact is None):
        _checks.fail(
            "learned.p_exact" if p_exact is None else "learned.p_learned",
            "the classifier's probabilities on both learned and exact counterfactuals",
            "only one of them",
        )
    if p_learned is not None:
        fields["decision_agreement"] = decision_agreement(
            p_learned, p_exact, threshold, by_intervention=by_intervention
        )
    return QualityReport(**fields)
