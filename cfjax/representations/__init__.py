"""Counterfactual representations: building and evaluating them in embedding space (paper 002;
definitions §4).

Embeddings and concept codes → :func:`concept_subspace` (``orth`` or LEACE) → :func:`fit_cfr`
(per-concept-value regressions from the orthogonal part to the concept coordinates) →
:func:`counterfactuals` ``(n, k, d)`` (deterministic), :func:`sample_counterfactuals`
``(n, k, draws, d)`` or :func:`stochastic_proba` ``(n, k, C)`` (Gaussian residuals,
probabilities averaged over draws; per-unit targets give ``(n, d)``, ``(n, draws, d)`` and
``(n, C)``): units first, as everywhere in cfjax (docs/contract.md) → a classifier
(:func:`train_logistic` or any callable ``(n, d) -> (n, C)``) → :func:`score` (PIP, ATV, the
paper's per-unit ATE and its CFR estimate, with the no-intervention baseline; the aggregate
:func:`mean_effect`) and :func:`tpr_gap`; :func:`augmentation_effect` retrains on data plus CFRs.
:func:`analyse_embeddings` does it all for one set of embeddings (``cfjax cfr``'s numbers) and
:func:`cfjax.representations.report.embeddings_report` writes its report.
Data: :func:`synthetic_embeddings` (exact counterfactual embeddings),
:func:`template_corpus` (sentences with true counterfactual sentences), :func:`embed_texts`
(all-MiniLM-L6-v2, optional extra ``text``), :func:`load_bios`.

The steps beneath (``cfjax.representations.cfr``: ``counterfactual`` of one unit,
``fit_regressions``, ``class_moments``; ``.subspace``: ``cross_covariance``,
``ledoit_wolf_shrinkage``; ``.classifiers``: ``predict_classes``) and the results the functions
return (``CFRModel``, ``CFRScores``, ``ConceptSubspace``, ``LinearClassifier``,
``EmbeddingData``, ``TextCorpus``, ...) are in their modules.
"""

from cfjax import _deprecations
from cfjax.representations import augment as _augment
from cfjax.representations import cfr as _cfr
from cfjax.representations import classifiers as _classifiers
from cfjax.representations import corpus as _corpus
from cfjax.representations import metrics as _metrics
from cfjax.representations import report as _report
from cfjax.representations import subspace as _subspace
from cfjax.representations import synthetic as _synthetic
from cfjax.representations import text as _text
from cfjax.representations.augment import augment as augment
from cfjax.representations.augment import augmentation_effect as augmentation_effect
from cfjax.representations.cfr import counterfactuals as counterfactuals
from cfjax.representations.cfr import fit_cfr as fit_cfr
from cfjax.representations.cfr import sample_counterfactuals as sample_counterfactuals
from cfjax.representations.cfr import stochastic_proba as stochastic_proba
from cfjax.representations.classifiers import train_logistic as train_logistic
from cfjax.representations.corpus import template_corpus as template_corpus
from cfjax.representations.metrics import ate as ate
from cfjax.representations.metrics import atv as atv
from cfjax.representations.metrics import mean_effect as mean_effect
from cfjax.representations.metrics import pip as pip
from cfjax.representations.metrics import score as score
from cfjax.representations.metrics import tpr_gap as tpr_gap
from cfjax.representations.report import analyse_embeddings as analyse_embeddings
from cfjax.representations.subspace import concept_subspace as concept_subspace
from cfjax.representations.synthetic import synthetic_embeddings as synthetic_embeddings
from cfjax.representations.text import embed_texts as embed_texts
from cfjax.representations.text import load_bios as load_bios

__all__ = [
    "analyse_embeddings",
    "ate",
    "atv",
    "augment",
    "augmentation_effect",
    "concept_subspace",
    "counterfactuals",
    "embed_texts",
    "fit_cfr",
    "load_bios",
    "mean_effect",
    "pip",
    "sample_counterfactuals",
    "score",
    "stochastic_proba",
    "synthetic_embeddings",
    "template_corpus",
    "tpr_gap",
    "train_logistic",
]

#: Names that left the package's namespace (still importable from their modules) or were
#: renamed: each warns, naming the new place, for one release.
_DEPRECATED = {
    "AugmentationResult": (
        "cfjax.representations.augment.AugmentationResult",
        _augment.AugmentationResult,
    ),
    "BiosRecords": ("cfjax.representations.text.BiosRecords", _text.BiosRecords),
    "CFRModel": ("cfjax.representations.cfr.CFRModel", _cfr.CFRModel),
    "CFRScores": ("cfjax.representations.metrics.CFRScores", _metrics.CFRScores),
    "class_moments": ("cfjax.representations.cfr.class_moments", _cfr.class_moments),
    "ClassMoments": ("cfjax.representations.cfr.ClassMoments", _cfr.ClassMoments),
    "ConceptSubspace": (
        "cfjax.representations.subspace.ConceptSubspace",
        _subspace.ConceptSubspace,
    ),
    "counterfactual": ("cfjax.representations.cfr.counterfactual", _cfr.counterfactual),
    "cross_covariance": (
        "cfjax.representations.subspace.cross_covariance",
        _subspace.cross_covariance,
    ),
    "EmbeddingData": ("cfjax.representations.synthetic.EmbeddingData", _synthetic.EmbeddingData),
    "embeddings_report": (
        "cfjax.representations.report.embeddings_report",
        _report.embeddings_report,
    ),
    "EMOTIONS": ("cfjax.representations.corpus.EMOTIONS", _corpus.EMOTIONS),
    "fit_logistic": ("cfjax.representations.train_logistic", train_logistic),
    "fit_regressions": ("cfjax.representations.cfr.fit_regressions", _cfr.fit_regressions),
    "ledoit_wolf_shrinkage": (
        "cfjax.representations.subspace.ledoit_wolf_shrinkage",
        _subspace.ledoit_wolf_shrinkage,
    ),
    "LinearClassifier": (
        "cfjax.representations.classifiers.LinearClassifier",
        _classifiers.LinearClassifier,
    ),
    "other_values": ("cfjax.representations.augment.other_values", _augment.other_values),
    "predict_classes": (
        "cfjax.representations.classifiers.predict_classes",
        _classifiers.predict_classes,
    ),
    "splits_section": ("cfjax.representations.report.splits_section", _report.splits_section),
    "TextCorpus": ("cfjax.representations.corpus.TextCorpus", _corpus.TextCorpus),
    "tpr": ("cfjax.representations.metrics.tpr", _metrics.tpr),
}
__getattr__ = _deprecations.getattr_for(__name__, _DEPRECATED)
