"""Learned image mechanisms for deep structural causal models (paper 000's generative model):
a conditional hierarchical VAE that is a :mod:`cfjax.scm` mechanism like any other, its
training (:func:`train_generator`, module :mod:`cfjax.generative.train`), anti-causal parent
predictors ``q(pa | x)``, and counterfactual-quality measures."""

from cfjax.generative.anticausal import CHEST_SPEC as CHEST_SPEC
from cfjax.generative.anticausal import AntiCausal as AntiCausal
from cfjax.generative.anticausal import Head as Head
from cfjax.generative.anticausal import Imputed as Imputed
from cfjax.generative.anticausal import ParentPredictor as ParentPredictor
from cfjax.generative.anticausal import ParentSpec as ParentSpec
from cfjax.generative.anticausal import chest_spec as chest_spec
from cfjax.generative.anticausal import entropy_weight as entropy_weight
from cfjax.generative.anticausal import impute as impute
from cfjax.generative.anticausal import predict_parents as predict_parents
from cfjax.generative.anticausal import train_anticausal as train_anticausal
from cfjax.generative.hvae import HVAE as HVAE
from cfjax.generative.hvae import HVAEConfig as HVAEConfig
from cfjax.generative.hvae import HVAEOutput as HVAEOutput
from cfjax.generative.hvae import gaussian_kl as gaussian_kl
from cfjax.generative.hvae import gaussian_log_prob as gaussian_log_prob
from cfjax.generative.mechanism import ImageHVAE as ImageHVAE
from cfjax.generative.parents import impute_parents as impute_parents
from cfjax.generative.parents import parent_inputs as parent_inputs
from cfjax.generative.quality import QualityReport as QualityReport
from cfjax.generative.sources import DecodedCounterfactuals as DecodedCounterfactuals
from cfjax.generative.sources import decoded_counterfactuals as decoded_counterfactuals
from cfjax.generative.quality import composition as composition
from cfjax.generative.quality import decision_agreement as decision_agreement
from cfjax.generative.quality import effectiveness as effectiveness
from cfjax.generative.quality import effectiveness_ceiling as effectiveness_ceiling
from cfjax.generative.quality import pixel_mae as pixel_mae
from cfjax.generative.quality import quality_report as quality_report
from cfjax.generative.quality import relative_gap as relative_gap
from cfjax.generative.quality import reversibility as reversibility
from cfjax.generative.train import GeneratorFit as GeneratorFit
from cfjax.generative.train import train as train_generator
from cfjax.generative.train_config import GeneratorConfig as GeneratorConfig

__all__ = [
    "AntiCausal",
    "CHEST_SPEC",
    "DecodedCounterfactuals",
    "GeneratorConfig",
    "GeneratorFit",
    "HVAE",
    "HVAEConfig",
    "HVAEOutput",
    "Head",
    "ImageHVAE",
    "Imputed",
    "ParentPredictor",
    "ParentSpec",
    "QualityReport",
    "chest_spec",
    "composition",
    "decoded_counterfactuals",
    "decision_agreement",
    "effectiveness",
    "effectiveness_ceiling",
    "entropy_weight",
    "gaussian_kl",
    "gaussian_log_prob",
    "impute",
    "impute_parents",
    "parent_inputs",
    "pixel_mae",
    "predict_parents",
    "quality_report",
    "relative_gap",
    "reversibility",
    "train_anticausal",
    "train_generator",
]
