"""Discrete nodes by the Gumbel-max trick ``x = argmax_c (logit_c(pa) + G_c)``."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import distrax
import jax
import jax.numpy as jnp
import numpy as np

from cfjax._checks import ValidationError
from cfjax.scm.mechanism import Mechanism
from cfjax.scm.nets import Conditioner
from cfjax.typing import PyTree

__all__ = ["GumbelMax", "gumbel_posterior"]


@dataclasses.dataclass(frozen=True)
class GumbelMax(Mechanism):
    """A categorical node with ``num_classes`` classes: ``x = argmax_c (logit_c(pa) + G_c)``,
    ``G_c`` i.i.d. standard Gumbel (Oberst & Sontag 2019). A root (no parents) has free
    logits; abduction followed by prediction always returns the observed class, so a root
    keeps its value unless intervened on.

    Noise per unit: ``G`` of shape ``(num_classes,)``. Abduction samples G from its exact
    posterior given the observed class (:func:`gumbel_posterior`). Values are int32 class
    indices; as a parent a binary node enters as 0/1, a larger one one-hot.

    Discrete, so not a bijection of its noise: :meth:`bijector` raises; the noise prior is
    :attr:`base_distribution`, ``num_classes`` independent ``distrax.Gumbel(0, 1)``.
    """

    num_classes: int = 2
    hidden: tuple[int, ...] = ()

    discrete = True
    stochastic_abduction = True

    def __post_init__(self):
        if not isinstance(self.num_classes, int) or self.num_classes < 2:
            raise ValidationError(
                f"`num_classes`: expected an integer >= 2, got {self.num_classes!r}."
            )

    def _net(self) -> Conditioner:
        return Conditioner(self.num_classes, self.hidden)

    def init(self, key: jax.Array, parent_dim: int) -> PyTree:
        return {"net": self._net().init(key, jnp.zeros((parent_dim,)))}

    def logits(self, params: PyTree, pa: jax.Array) -> jax.Array:
        return cast(jax.Array, self._net().apply(params["net"], pa))  # no mutable state: the output

    def sample_noise(self, key: jax.Array) -> jax.Array:
        return jax.random.gumbel(key, (self.num_classes,))

    @property
    def base_distribution(self) -> distrax.Independent:
        """The noise prior: ``num_classes`` i.i.d. standard Gumbels, event shape ``(num_classes,)``."""
        dtype = jnp.result_type(float)
        return distrax.Independent(
            distrax.Gumbel(
                jnp.zeros((self.num_classes,), dtype), jnp.ones((self.num_classes,), dtype)
            ),
            1,
        )

    def bijector(self, params: PyTree, pa: jax.Array) -> distrax.Bijector:
        raise NotImplementedError(
            "GumbelMax has no bijector: x = argmax_c (logit_c(pa) + G_c) maps the noise G "
            f"({self.num_classes},) onto {self.num_classes} classes, not one-to-one; its noise "
            "given x is a posterior draw (`abduct`), and `base_distribution` is its prior."
        )

    def forward(self, params: PyTree, u: jax.Array, pa: jax.Array) -> jax.Array:
        return jnp.argmax(self.logits(params, pa) + u).astype(jnp.int32)

    def abduct(
        self, params: PyTree, x: jax.Array, pa: jax.Array, key: jax.Array | None
    ) -> jax.Array:
        if key is None:
            raise ValidationError(
                "`key`: a Gumbel-max node needs a random key for abduction, got None."
            )
        logits = self.logits(params, pa)
        return gumbel_posterior(key, logits, x) - logits

    def log_prob(self, params: PyTree, x: jax.Array, pa: jax.Array) -> jax.Array:
        return jax.nn.log_softmax(self.logits(params, pa))[x]

    @property
    def encoded_dim(self) -> int:
        return 1 if self.num_classes == 2 else self.num_classes

    def encode(self, x: jax.Array) -> jax.Array:
        dtype = jnp.result_type(float)
        if self.num_classes == 2:
            return x.reshape(1).astype(dtype)
        return jax.nn.one_hot(x, self.num_classes, dtype=dtype)

    def values_ok(self, values: jax.Array) -> jax.Array:
        v = values
        integral = (
            v == jnp.round(v) if jnp.issubdtype(v.dtype, jnp.floating) else jnp.ones(v.shape, bool)
        )
        return jnp.all(integral & (v >= 0) & (v < self.num_classes))

    def check_values(self, name: str, values: Any, what: str) -> None:
        super().check_values(name, values, what)
        v = np.asarray(values)
        bad = (v != np.round(v)) | (v < 0) | (v >= self.num_classes)
        if bad.any():
            raise ValidationError(
                f"`{what}`: node {name!r} takes classes 0..{self.num_classes - 1}, got "
                f"{np.unique(v[bad])[:5].tolist()}."
            )


def gumbel_posterior(key: jax.Array, logits: jax.Array, observed: jax.Array) -> jax.Array:
    """Perturbed logits ``g = logits + G`` drawn from their posterior given
    ``argmax g = observed``, for one unit (top-down truncated Gumbel).

    The maximum ``M = g_observed`` is Gumbel with location ``logsumexp(logits)``; every other
    ``g_c`` is Gumbel with location ``logit_c`` truncated below M, sampled as
    ``M − softplus(M − h_c)`` with ``h_c ~ Gumbel(logit_c)``. (Truncating at a different value,
    e.g. at a fresh Gumbel rather than at the shared M, breaks the posterior and lets the
    factual class change.) The others are kept a few ulps below M, so that rounding in
    ``logits + (g − logits)`` can never produce a tie: the observed class is recovered every
    time, at a cost of a perturbation of order 1e-6 relative.
    """
    k_max, k_rest = jax.random.split(key)
    top = jax.nn.logsumexp(logits) + jax.random.gumbel(k_max, (), logits.dtype)
    h = logits + jax.random.gumbel(k_rest, logits.shape, logits.dtype)
    below = top - jax.nn.softplus(top - h)
    eps = jnp.finfo(logits.dtype).eps
    margin = 16 * eps * (1 + jnp.abs(top) + jnp.max(jnp.abs(logits)))
    below = jnp.minimum(below, top - margin)
    return jnp.where(
        jnp.arange(logits.shape[0], dtype=jnp.asarray(observed).dtype) == observed, top, below
    )
