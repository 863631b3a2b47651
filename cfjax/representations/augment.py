"""CFR augmentation (paper 002): retrain a classifier on the data plus every unit's CFRs to the
other concept values (labels kept), and measure what it does to TPR-gaps and accuracy."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks, _results
from cfjax.representations.cfr import CFRModel, counterfactuals
from cfjax.representations.classifiers import LinearClassifier, predict_classes, train_logistic
from cfjax.representations.metrics import tpr_gap

__all__ = ["AugmentationResult", "augment", "augmentation_effect", "other_values"]


def other_values(z: jax.Array, k: int) -> jax.Array:
    """Every concept value but each unit's own: ``(n, k - 1)``, row i the values after ``z_i``
    in cyclic order (``z_i + 1, ..., z_i + k - 1`` modulo k)."""
    return (z[:, None] + 1 + jnp.arange(k - 1, dtype=z.dtype)[None, :]) % k


def augment(model: CFRModel, X: Any, y: Any, z: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Data plus CFRs: ``(X_aug (n k, d), y_aug (n k,), z_aug (n k,))``, unit by unit.

    Rows ``i k, ..., i k + k - 1`` are unit i: its original embedding, then its CFRs to the
    k − 1 other values (:func:`other_values`' order), each with the unit's own label. The CFRs
    of all k values are generated in one call (``(n, k, d)``) and the k − 1 others gathered.
    """
    _checks.warn_if_downcast("X", X)
    X = jnp.asarray(X)
    y, z = jnp.asarray(y), jnp.asarray(z)
    _checks.check_same_len("X", X, "y", y)
    _checks.check_same_len("X", X, "z", z)
    k = model.n_values
    every = counterfactuals(model, X)  # (n, k, d)
    others = other_values(z, k)  # (n, k - 1)
    cfr = jnp.take_along_axis(every, others[:, :, None], axis=1)  # (n, k - 1, d)
    X_aug = jnp.concatenate([X[:, None], cfr], axis=1).reshape(-1, X.shape[1])
    y_aug = jnp.repeat(y, k)
    z_aug = jnp.concatenate([z[:, None], others], axis=1).reshape(-1)
    return X_aug, y_aug, z_aug


class AugmentationResult(NamedTuple):
    """Test accuracy and per-class TPR-gaps of the classifier trained on the data alone and on
    the data plus CFRs; both classifiers."""

    accuracy: float
    accuracy_augmented: float
    tpr_gap: np.ndarray
    tpr_gap_augmented: np.ndarray
    classifier: LinearClassifier
    classifier_augmented: LinearClassifier

    def to_dict(self, *, classifiers: bool = False) -> dict[str, Any]:
        """Plain Python for ``json.dumps``: the two accuracies (floats) and TPR-gaps (lists of
        C floats, NaN for a class absent from a group), and the largest absolute gap of each.
        ``classifiers=True`` adds both classifiers' :meth:`LinearClassifier.to_dict`
        (their weights); by default only their sizes are recorded."""
        out = {
            name: _results.plain(getattr(self, name))
            for name in ("accuracy", "accuracy_augmented", "tpr_gap", "tpr_gap_augmented")
        }
        out["max_abs_tpr_gap"] = _max_abs(self.tpr_gap)
        out["max_abs_tpr_gap_augmented"] = _max_abs(self.tpr_gap_augmented)
        for name in ("classifier", "classifier_augmented"):
            clf = getattr(self, name)
            out[name] = (
                clf.to_dict()
                if classifiers
                else {"n_features": int(clf.W.shape[0]), "n_classes": int(clf.W.shape[1])}
            )
        return out

    def __repr__(self) -> str:
        return _results.fields_repr(
            type(self).__name__,
            [
                ("accuracy", self.accuracy),
                ("accuracy_augmented", self.accuracy_augmented),
                ("max_abs_tpr_gap", _max_abs(self.tpr_gap)),
                ("max_abs_tpr_gap_augmented", _max_abs(self.tpr_gap_augmented)),
                ("tpr_gap", self.tpr_gap),
                ("tpr_gap_augmented", self.tpr_gap_augmented),
                ("classifier", self.classifier),
            ],
        )


def _max_abs(gaps: Any) -> float:
    """The largest absolute TPR-gap over the classes present in both groups (NaN if none)."""
    g = np.abs(np.asarray(gaps, dtype=np.float64))
    return float(np.nanmax(g)) if np.isfinite(g).any() else float("nan")


def augmentation_effect(
    model: CFRModel,
    train: tuple,
    test: tuple,
    *,
    value: int = 1,
    l2: float = 1e-4,
    n_classes: int | None = None,
) -> AugmentationResult:
    """Train on ``train = (X, y, z)`` with and without CFR augmentation, score on
    ``test = (X, y, z)``: accuracy and TPR-gaps (``Z = value`` vs the rest)."""
    X, y, z = train
    Xt, yt, zt = test
    C = int(max(np.max(y), np.max(yt))) + 1 if n_classes is None else int(n_classes)
    plain = train_logistic(X, y, n_classes=C, l2=l2)
    X_aug, y_aug, _ = augment(model, X, y, z)
    augmented = train_logistic(X_aug, np.asarray(y_aug), n_classes=C, l2=l2)
    out = []
    for clf in (plain, augmented):
        pred = predict_classes(clf, jnp.asarray(Xt))
        out.append(
            (
                float(jnp.mean(pred == jnp.asarray(yt))),
                np.asarray(tpr_gap(yt, pred, zt, value=value, n_classes=C)),
            )
        )
    return AugmentationResult(
        accuracy=out[0][0],
        accuracy_augmented=out[1][0],
        tpr_gap=out[0][1],
        tpr_gap_augmented=out[1][1],
        classifier=plain,
        classifier_augmented=augmented,
    )
