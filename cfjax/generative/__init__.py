"""Learned image mechanisms for deep structural causal models (paper 000's generative model):
a conditional hierarchical VAE that is a :mod:`cfjax.scm` mechanism like any other, its
training, anti-causal parent predictors, and counterfactual-quality measures."""

from cfjax.generative.hvae import HVAE as HVAE
from cfjax.generative.hvae import HVAEConfig as HVAEConfig
from cfjax.generative.hvae import HVAEOutput as HVAEOutput
from cfjax.generative.hvae import gaussian_kl as gaussian_kl
from cfjax.generative.mechanism import ImageHVAE as ImageHVAE

__all__ = [
    "HVAE",
    "HVAEConfig",
    "HVAEOutput",
    "ImageHVAE",
    "gaussian_kl",
]
