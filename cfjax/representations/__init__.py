"""Counterfactual representations: building and evaluating them in embedding space (paper 002;
definitions §4).

Embeddings and concept codes → :func:`concept_subspace` (``orth`` or LEACE) → :func:`fit_cfr`
(per-concept-value regressions from the orthogonal part to the concept coordinates) →
:func:`counterfactuals` ``(n, k, d)`` (deterministic), :func:`sample_counterfactuals`
``(n, k, draws, d)`` or :func:`stochastic_proba` ``(n, k, C)`` (Gaussian residuals,
probabilities averaged over draws; per-unit targets give ``(n, d)``, ``(n, draws, d)`` and
``(n, C)``): units first, as everywhere in cfjax (docs/contract.md) → a classifier
(:func:`fit_logistic` or any callable ``(n, d) -> (n, C)``) → :func:`score` (PIP, ATV, the
paper's per-unit ATE and its CFR estimate, with the no-intervention baseline; the aggregate
:func:`mean_effect`) and :func:`tpr_gap`; :func:`augmentation_effect` retrains on data plus CFRs.
:func:`analyse_embeddings` does it all for one set of embeddings (``cfjax cfr``'s numbers) and
:func:`embeddings_report` writes its report.
Data: :func:`synthetic_embeddings` (exact counterfactual embeddings),
:func:`template_corpus` (sentences with true counterfactual sentences), :func:`embed_texts`
(all-MiniLM-L6-v2, optional extra ``text``), :func:`load_bios`.
"""

from cfjax.representations.augment import AugmentationResult as AugmentationResult
from cfjax.representations.augment import augment as augment
from cfjax.representations.augment import augmentation_effect as augmentation_effect
from cfjax.representations.augment import other_values as other_values
from cfjax.representations.cfr import CFRModel as CFRModel
from cfjax.representations.cfr import ClassMoments as ClassMoments
from cfjax.representations.cfr import class_moments as class_moments
from cfjax.representations.cfr import counterfactual as counterfactual
from cfjax.representations.cfr import counterfactuals as counterfactuals
from cfjax.representations.cfr import fit_cfr as fit_cfr
from cfjax.representations.cfr import fit_regressions as fit_regressions
from cfjax.representations.cfr import sample_counterfactuals as sample_counterfactuals
from cfjax.representations.cfr import stochastic_proba as stochastic_proba
from cfjax.representations.classifiers import LinearClassifier as LinearClassifier
from cfjax.representations.classifiers import fit_logistic as fit_logistic
from cfjax.representations.classifiers import predict_classes as predict_classes
from cfjax.representations.corpus import EMOTIONS as EMOTIONS
from cfjax.representations.corpus import TextCorpus as TextCorpus
from cfjax.representations.corpus import template_corpus as template_corpus
from cfjax.representations.metrics import CFRScores as CFRScores
from cfjax.representations.metrics import ate as ate
from cfjax.representations.metrics import atv as atv
from cfjax.representations.metrics import mean_effect as mean_effect
from cfjax.representations.metrics import pip as pip
from cfjax.representations.metrics import score as score
from cfjax.representations.metrics import tpr as tpr
from cfjax.representations.metrics import tpr_gap as tpr_gap
from cfjax.representations.report import analyse_embeddings as analyse_embeddings
from cfjax.representations.report import embeddings_report as embeddings_report
from cfjax.representations.report import splits_section as splits_section
from cfjax.representations.subspace import ConceptSubspace as ConceptSubspace
from cfjax.representations.subspace import concept_subspace as concept_subspace
from cfjax.representations.subspace import cross_covariance as cross_covariance
from cfjax.representations.subspace import ledoit_wolf_shrinkage as ledoit_wolf_shrinkage
from cfjax.representations.synthetic import EmbeddingData as EmbeddingData
from cfjax.representations.synthetic import synthetic_embeddings as synthetic_embeddings
from cfjax.representations.text import BiosRecords as BiosRecords
from cfjax.representations.text import embed_texts as embed_texts
from cfjax.representations.text import load_bios as load_bios

__all__ = [
    "AugmentationResult",
    "BiosRecords",
    "CFRModel",
    "CFRScores",
    "ClassMoments",
    "ConceptSubspace",
    "EMOTIONS",
    "EmbeddingData",
    "LinearClassifier",
    "TextCorpus",
    "analyse_embeddings",
    "ate",
    "atv",
    "augment",
    "augmentation_effect",
    "class_moments",
    "concept_subspace",
    "counterfactual",
    "counterfactuals",
    "cross_covariance",
    "embed_texts",
    "embeddings_report",
    "fit_cfr",
    "fit_logistic",
    "fit_regressions",
    "ledoit_wolf_shrinkage",
    "load_bios",
    "mean_effect",
    "other_values",
    "pip",
    "predict_classes",
    "sample_counterfactuals",
    "score",
    "splits_section",
    "stochastic_proba",
    "synthetic_embeddings",
    "template_corpus",
    "tpr",
    "tpr_gap",
]
