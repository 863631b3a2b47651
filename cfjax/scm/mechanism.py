"""The mechanism interface: one node's structural equation ``x = f(u; pa)`` for one unit."""

from __future__ import annotations

import abc
from typing import Any

import distrax
import jax
import numpy as np

from cfjax._checks import ValidationError
from cfjax.typing import PyTree

__all__ = ["Mechanism"]


class Mechanism(abc.ABC):
    """Structural equation of one node, written for one unit.

    Subclasses are frozen dataclasses (hashable: they are static structure) holding only
    configuration; parameters live in pytrees returned by :meth:`init`. Every method acts on
    one unit: ``u`` and ``x`` are one unit's noise and value, ``pa`` the concatenation of its
    parents' encodings (:meth:`encode`; their values when :attr:`raw_parents`), shape
    ``(P,)``. Batch over units with ``jax.vmap``.

    Shapes: one unit's value ``x`` has shape :attr:`event_shape` (``()`` for a scalar node,
    ``(H, W)`` for an image node); its noise ``u`` is any pytree of arrays (a scalar, a
    ``(C,)`` vector of Gumbels, ``{"z": ..., "u": (H, W)}`` for a latent-variable image
    model), the same structure from :meth:`sample_noise` and :meth:`abduct`.

    - ``forward(params, u, pa) -> x`` and, for continuous nodes, ``inverse(params, x, pa) -> u``
      (invertible in the noise);
    - ``abduct(params, x, pa, key) -> u``: the noise given the observation (the inverse for
      invertible mechanisms, a posterior draw for discrete ones);
    - ``log_prob(params, x, pa)``: the conditional log-density (or log-mass);
    - ``sample_noise(key) -> u``: a draw from the noise prior.

    Continuous mechanisms also speak distrax: :meth:`bijector` is the map ``u -> x`` for one
    unit given its parents (a ``distrax.Bijector`` with scalar events, its log-determinants
    ``log |dx/du|``), :attr:`base_distribution` the noise prior, and
    ``distrax.Transformed(base_distribution, bijector(params, pa))`` the conditional
    distribution of ``x`` (its ``log_prob`` equals :meth:`log_prob`). The methods above share
    their code with the bijector; they stay the compiled hot paths.

    A mechanism whose noise cannot be computed from ``x`` (a simulator's renderer, whose noise
    is known from the simulation) raises from ``abduct``; its noise is then passed to
    :meth:`cfjax.scm.SCM.counterfactual` as ``noise={node: u}`` while the other nodes are
    abducted. One without a density raises from ``log_prob``.
    """

    discrete: bool = False
    #: whether ``abduct`` needs a random key (posterior sampling rather than inversion)
    stochastic_abduction: bool = False
    #: whether ``pa`` holds the parents' values themselves (each flattened, cast to float)
    #: rather than their :meth:`encode`-ings: for a simulator's renderer that takes the raw
    #: values (an age in years, not rescaled; a class index, not one-hot), so that no decoding
    #: (and no rounding in it) stands between the parents and the image
    raw_parents: bool = False

    # --- parameters and noise -------------------------------------------------------------
    @abc.abstractmethod
    def init(self, key: jax.Array, parent_dim: int) -> PyTree:
        """Fresh parameters for a node with ``parent_dim`` encoded parent inputs."""

    @abc.abstractmethod
    def sample_noise(self, key: jax.Array) -> PyTree:
        """One unit's noise drawn from its prior (an array or any pytree of arrays)."""

    # --- the structural equation -----------------------------------------------------------
    @abc.abstractmethod
    def forward(self, params: PyTree, u: PyTree, pa: jax.Array) -> jax.Array:
        """``x = f(u; pa)`` for one unit, shape :attr:`event_shape`."""

    def inverse(self, params: PyTree, x: jax.Array, pa: jax.Array) -> jax.Array:
        """``u = f⁻¹(x; pa)``; only mechanisms invertible in their noise define it."""
        raise TypeError(f"{type(self).__name__} is not invertible in its noise; use `abduct`.")

    def abduct(self, params: PyTree, x: jax.Array, pa: jax.Array, key: jax.Array | None) -> PyTree:
        """One unit's noise given its value ``x`` (shape :attr:`event_shape`) and parents."""
        return self.inverse(params, x, pa)

    @abc.abstractmethod
    def log_prob(self, params: PyTree, x: jax.Array, pa: jax.Array) -> jax.Array:
        """``log p(x | pa)`` for one unit."""

    # --- the distrax view --------------------------------------------------------------------
    def bijector(self, params: PyTree, pa: jax.Array) -> distrax.Bijector:
        """The map ``u -> x`` of one unit with parents ``pa (P,)``, as a ``distrax.Bijector``
        (``forward``, ``inverse``, ``forward_and_log_det``, ``inverse_and_log_det`` with
        ``log |dx/du|``); only mechanisms invertible in their noise define it."""
        raise NotImplementedError(
            f"{type(self).__name__} has no bijector: it is not invertible in its noise."
        )

    @property
    def base_distribution(self) -> distrax.Distribution:
        """The noise prior as a distrax distribution (what :meth:`sample_noise` draws from)."""
        raise NotImplementedError(f"{type(self).__name__} does not expose its noise prior.")

    # --- how the node appears in data and as a parent --------------------------------------
    @property
    def event_shape(self) -> tuple[int, ...]:
        """Shape of one unit's value: ``()`` for a scalar node, e.g. ``(H, W)`` for an image.
        Data of the node are ``(N, *event_shape)``."""
        return ()

    @property
    def encoded_dim(self) -> int:
        """Length of :meth:`encode`'s output (by default the number of values of one unit)."""
        return int(np.prod(self.event_shape, dtype=np.int64))

    def encode(self, x: jax.Array) -> jax.Array:
        """One unit's value as a parent input, shape ``(encoded_dim,)`` (by default the value,
        flattened)."""
        return x.reshape(-1).astype(jax.numpy.result_type(float))

    def values_ok(self, values: jax.Array) -> jax.Array:
        """Traceable twin of :meth:`check_values`: True when every value is in the support."""
        return jax.numpy.all(jax.numpy.isfinite(values))

    def check_values(self, name: str, values: Any, what: str) -> None:
        """Raise ValidationError if concrete ``values`` lie outside the node's support."""
        v = np.asarray(values)
        if not np.issubdtype(v.dtype, np.number) and v.dtype != bool:
            raise ValidationError(
                f"`{what}`: expected numbers for node {name!r}, got dtype {v.dtype}."
            )
        bad = ~np.isfinite(v.astype(np.float64))
        if bad.any():
            raise ValidationError(
                f"`{what}`: node {name!r} has {int(bad.sum())} NaN or infinite value(s)."
            )
