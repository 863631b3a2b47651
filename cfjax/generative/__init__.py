"""Learned image mechanisms for deep structural causal models (paper 000's generative model):
a conditional hierarchical VAE that is a :mod:`cfjax.scm` mechanism like any other, its
training, anti-causal parent predictors, and counterfactual-quality measures."""

__all__: list[str] = []
