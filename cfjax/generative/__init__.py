"""Learned image mechanisms for deep structural causal models (paper 000's generative model):
a conditional hierarchical VAE that is a :mod:`cfjax.scm` mechanism like any other
(:class:`ImageHVAE`, :class:`HVAEConfig`), fitted to SCM data (:func:`fit_generator`,
:class:`GeneratorConfig`; module :mod:`cfjax.generative.train`), anti-causal parent predictors
``q(pa | x)`` trained on images (:func:`train_anticausal`, :class:`AntiCausalConfig`, heads
:class:`Head`, :data:`CHEST_SPEC`; :func:`predict_parents`), a learned mechanism's
counterfactuals decoded per unit (:func:`decoded_counterfactuals`), and counterfactual-quality
measures (:func:`effectiveness`, :func:`composition`, :func:`reversibility`, ...; all of them at
once: :func:`cfjax.generative.report.quality_report`).

The network (``cfjax.generative.hvae``: ``HVAE``, ``gaussian_kl``), the training step
(``cfjax.generative.train``: ``train_step``, ``parent_inputs``), the predictors' network
(``cfjax.generative.anticausal``: ``ParentPredictor``), their imputation
(``cfjax.generative.parents``: ``impute``) and the result types (``GeneratorFit``,
``AntiCausal``, ``DecodedCounterfactuals``, ``QualityReport``) are in their modules."""

from cfjax import _deprecations
from cfjax.generative import anticausal as _anticausal
from cfjax.generative import hvae as _hvae
from cfjax.generative import parents as _parents
from cfjax.generative import quality as _quality
from cfjax.generative import report as _report
from cfjax.generative import sources as _sources
from cfjax.generative import train as _train
from cfjax.generative.anticausal import CHEST_SPEC as CHEST_SPEC
from cfjax.generative.anticausal import AntiCausalConfig as AntiCausalConfig
from cfjax.generative.anticausal import Head as Head
from cfjax.generative.anticausal import train_anticausal as train_anticausal
from cfjax.generative.hvae import HVAEConfig as HVAEConfig
from cfjax.generative.mechanism import ImageHVAE as ImageHVAE
from cfjax.generative.parents import predict_parents as predict_parents
from cfjax.generative.quality import composition as composition
from cfjax.generative.quality import decision_agreement as decision_agreement
from cfjax.generative.quality import effectiveness as effectiveness
from cfjax.generative.quality import effectiveness_ceiling as effectiveness_ceiling
from cfjax.generative.quality import pixel_mae as pixel_mae
from cfjax.generative.quality import reversibility as reversibility
from cfjax.generative.sources import decoded_counterfactuals as decoded_counterfactuals
from cfjax.generative.train import fit_generator as fit_generator
from cfjax.generative.train_config import GeneratorConfig as GeneratorConfig

__all__ = [
    "AntiCausalConfig",
    "CHEST_SPEC",
    "GeneratorConfig",
    "HVAEConfig",
    "Head",
    "ImageHVAE",
    "composition",
    "decision_agreement",
    "decoded_counterfactuals",
    "effectiveness",
    "effectiveness_ceiling",
    "fit_generator",
    "pixel_mae",
    "predict_parents",
    "reversibility",
    "train_anticausal",
]

#: Names that left the package's namespace (still importable from their modules) or were
#: renamed: each warns, naming the new place, for one release.
_DEPRECATED = {
    "AntiCausal": ("cfjax.generative.anticausal.AntiCausal", _anticausal.AntiCausal),
    "chest_spec": ("cfjax.generative.anticausal.chest_spec", _anticausal.chest_spec),
    "DecodedCounterfactuals": (
        "cfjax.generative.sources.DecodedCounterfactuals",
        _sources.DecodedCounterfactuals,
    ),
    "entropy_weight": ("cfjax.generative.parents.entropy_weight", _parents.entropy_weight),
    "gaussian_kl": ("cfjax.generative.hvae.gaussian_kl", _hvae.gaussian_kl),
    "gaussian_log_prob": ("cfjax.generative.hvae.gaussian_log_prob", _hvae.gaussian_log_prob),
    "GeneratorFit": ("cfjax.generative.train.GeneratorFit", _train.GeneratorFit),
    "HVAE": ("cfjax.generative.hvae.HVAE", _hvae.HVAE),
    "HVAEOutput": ("cfjax.generative.hvae.HVAEOutput", _hvae.HVAEOutput),
    "impute": ("cfjax.generative.parents.impute", _parents.impute),
    "impute_parents": ("cfjax.generative.parents.impute_parents", _parents.impute_parents),
    "Imputed": ("cfjax.generative.parents.Imputed", _parents.Imputed),
    "parent_inputs": ("cfjax.generative.parents.parent_inputs", _parents.parent_inputs),
    "ParentPredictor": ("cfjax.generative.anticausal.ParentPredictor", _anticausal.ParentPredictor),
    "ParentSpec": ("cfjax.generative.anticausal.ParentSpec", _anticausal.ParentSpec),
    "quality_report": ("cfjax.generative.report.quality_report", _report.quality_report),
    "QualityReport": ("cfjax.generative.report.QualityReport", _report.QualityReport),
    "relative_gap": ("cfjax.generative.quality.relative_gap", _quality.relative_gap),
    "train_generator": ("cfjax.generative.fit_generator", fit_generator),
}
__getattr__ = _deprecations.getattr_for(__name__, _DEPRECATED)
