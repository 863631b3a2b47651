"""Is the study's basic classifier good enough to compare anything with? Every comparison of a
setting (the CTC, ΔAUC, the biased predictors against the basic one) rests on its basic
classifier; one near chance makes them noise.

A setting's basic classifier is flagged (:class:`WeakClassifierWarning`, and in the report)
when, with ``AUC`` its test AUC (the mean over seeds), ``[lo, hi]`` the 95% paired bootstrap
interval of that seed mean and ``AUC_val`` the mean over seeds of the best validation AUC
(the early-stopping criterion, on the training site's validation split):

- **near chance**: the interval reaches chance, ``lo ≤ 0.5`` (an AUC of 0.5 is within the
  interval, or the whole interval lies below it); or
- **far below validation**: ``AUC_val − AUC > max(FAR_BELOW, hi − lo)``, i.e. the drop exceeds
  both :data:`FAR_BELOW` (0.1) and the interval's width (so bootstrap noise alone does not
  explain it).

On the synthetic chest SCM the second often means the classifier leans on age: effusion
depends on age, so age cues score well on the natural-demographics validation split but carry
no signal on the balanced test split (the same prevalence in every sex × age-group cell).
An undefined interval (a resample with one class) counts as reaching chance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["WeakClassifierWarning", "FAR_BELOW", "basic_auc_check", "classifier_checks"]

#: "far below validation": the test AUC is lower than the validation AUC by more than this and
#: more than the width of its 95% bootstrap interval
FAR_BELOW = 0.1


class WeakClassifierWarning(UserWarning):
    """A setting's basic classifier is near chance on its test set (its AUC's bootstrap interval
    reaches 0.5) or far below its validation AUC (:func:`basic_auc_check`): the setting's
    comparisons rest on it."""


def _float(x: float | None) -> float:
    """A float, None (JSON's NaN) as NaN."""
    return math.nan if x is None else float(x)


def basic_auc_check(
    setting: str,
    auc: npt.ArrayLike,
    ci95: Sequence[float | None],
    validation_auc: npt.ArrayLike,
    validation_site: str | None = None,
) -> dict[str, Any]:
    """The check of one setting's basic classifier (module docstring).

    Args:
      setting: the setting's name (in the message).
      auc: the basic classifier's test AUC per seed, or their mean.
      ci95: ``(lo, hi)``, the 95% bootstrap interval of the seed mean (NaN: undefined).
      validation_auc: the basic classifier's best validation AUC per seed, or their mean.
      validation_site: the training site whose validation split it is (in the message).

    Returns:
      ``{"setting", "auc", "ci95", "validation_auc", "gap", "far_below_threshold",
      "near_chance", "far_below_validation", "warning"}``; ``warning`` is the message (None when
      neither flag is set).

    Example:
      >>> basic_auc_check("B", [0.668, 0.435], (0.47, 0.63), [0.797, 0.664])["near_chance"]
      True
      >>> basic_auc_check("A", 0.91, (0.86, 0.95), 0.93)["warning"] is None
      True
    """
    a = float(np.mean(np.asarray(auc, np.float64)))
    lo, hi = (_float(v) for v in ci95)
    v = float(np.mean(np.asarray(validation_auc, np.float64)))
    width = hi - lo if math.isfinite(lo) and math.isfinite(hi) else math.nan
    threshold = max(FAR_BELOW, width) if math.isfinite(width) else FAR_BELOW
    gap = v - a
    near = not lo > 0.5  # NaN (an undefined interval) counts as reaching chance
    far = bool(math.isfinite(gap) and gap > threshold)
    message = None
    if near or far:
        interval = (
            f"[{lo:.3f}, {hi:.3f}]" if math.isfinite(width) else "(bootstrap interval undefined)"
        )
        reasons = []
        if near:
            reasons.append("its 95% bootstrap interval reaches chance (0.5)")
        if far:
            where = (
                f"site {validation_site}'s validation split" if validation_site else "validation"
            )
            reasons.append(
                f"it is {gap:.3f} below its validation AUC {v:.3f} ({where}), more than "
                f"max({FAR_BELOW:g}, interval width)"
            )
        message = (
            f"setting {setting}: the basic classifier's test AUC is {a:.3f} {interval}; "
            + " and ".join(reasons)
            + f". Every comparison of setting {setting} rests on this classifier; "
            "train it longer (steps, learning rate) or on more data."
        )
    return {
        "setting": setting,
        "auc": a,
        "ci95": [lo, hi],
        "validation_auc": v,
        "gap": gap,
        "far_below_threshold": threshold,
        "near_chance": bool(near),
        "far_below_validation": far,
        "warning": message,
    }


def classifier_checks(results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """:func:`basic_auc_check` for every setting of :func:`cfjax.study.run`'s results (arrays
    indexed by predictor, as ``run`` returns them, or keyed by name, as ``results.json`` holds
    them)."""
    from cfjax.study.paper import SETTINGS

    out = {}
    for name, train_site, _ in SETTINGS:
        r = results["settings"][name]
        tr = results["training"][train_site]
        if isinstance(r["auc"], Mapping):
            auc, ci = r["auc"]["basic"], r["auc_ci95_seed_mean"]["basic"]
        else:
            i = list(r["names"]).index("basic")
            auc, ci = r["auc"][i], r["auc_ci95_seed_mean"][i]
        members = list(tr["members"])
        val = [
            float(v)
            for m, v in zip(members, np.asarray(tr["best_val_auc"], np.float64))
            if m == "basic"
        ]
        out[name] = basic_auc_check(name, auc, ci, val, train_site)
    return out
