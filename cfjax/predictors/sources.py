"""Counterfactual sources: where a training step gets the counterfactual images of its minibatch.

A *source* is a pytree (a ``flax.struct.dataclass``: arrays as leaves, settings as static
fields) that holds what each of the N training units needs to produce its counterfactual
images under the K interventions, and produces them on demand inside the compiled step:

- ``source.weights``: ``(K,)`` the intervention weights q (sum 1);
- ``source.images(idx, which)``: ``idx (B,)`` unit indices and ``which (B, J)`` intervention
  indices in ``[0, K)`` → ``(B, J, H, W)`` images: unit ``idx[b]`` under intervention
  ``which[b, j]`` (the contract's unit, intervention order). A step that needs all K passes
  ``which = arange(K)`` for every unit; one that augments passes one drawn intervention.

Pure and deterministic: the same ``(idx, which)`` give the same images (any randomness, such as
a learned mechanism's abduction, is done once when the source is built). Three sources:

- :class:`StoredCounterfactuals` (here): images computed beforehand, ``(N, K, H, W)``, gathered;
- :class:`cfjax.data.chest.ChestCounterfactuals`: the chest SCM's exact counterfactuals, the
  counterfactual parents ``(N, K)`` and each unit's image noise kept, rendered in the step;
- :class:`cfjax.generative.sources.DecodedCounterfactuals`: a learned image mechanism's, the noise
  abducted once per unit and decoded under the counterfactual parents in the step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from cfjax import _checks
from cfjax.typing import PyTree

__all__ = ["StoredCounterfactuals", "check_source", "all_interventions"]


@struct.dataclass
class StoredCounterfactuals:
    """Counterfactual images computed beforehand: ``images_cf (N, K, H, W)`` and the weights
    ``q (K,)``. Memory grows with N·K; the rendering sources hold a few numbers per unit
    instead.

    Example:
      >>> src = StoredCounterfactuals(jnp.arange(24.0).reshape(2, 3, 2, 2), jnp.full((3,), 1 / 3))
      >>> src.images(jnp.array([1]), jnp.array([[2, 0]]))[:, :, 0, 0].tolist()
      [[20.0, 12.0]]
    """

    images_cf: jax.Array
    weights: jax.Array

    @property
    def num_units(self) -> int:
        return int(jnp.shape(self.images_cf)[0])

    def images(self, idx: jax.Array, which: jax.Array) -> jax.Array:
        return self.images_cf[idx[:, None], which]


def all_interventions(batch: int, k: int) -> jax.Array:
    """``which`` for every intervention of every unit: ``(batch, k)`` rows of ``arange(k)``."""
    return jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (batch, k))


def check_source(source: PyTree, n: int, image_shape: tuple[int, ...]) -> None:
    """A ValueError naming ``counterfactuals`` unless ``source`` is a source of ``n`` units' images
    of ``image_shape`` (checked by tracing one image of one unit: nothing is computed)."""
    if not hasattr(source, "images") or not hasattr(source, "weights"):
        _checks.fail(
            "counterfactuals",
            "a counterfactual source (a pytree with `weights` (K,) and "
            "`images(idx, which)`, e.g. cfjax.data.chest.ChestCounterfactuals)",
            repr(type(source).__name__),
        )
    q = source.weights
    if len(_checks.shape_of(q)) != 1 or _checks.shape_of(q)[0] == 0:
        _checks.fail(
            "counterfactuals", "weights of shape (K,), K >= 1", f"shape {_checks.shape_of(q)}"
        )
    _checks.check_weights("counterfactuals.weights", q, _checks.shape_of(q)[0])
    units = getattr(source, "num_units", None)
    if units is not None and units != n:
        _checks.fail(
            "counterfactuals", f"a source of the {n} training units", f"one of {units} units"
        )
    out = jax.eval_shape(
        lambda s: s.images(jnp.zeros((1,), jnp.int32), jnp.zeros((1, 1), jnp.int32)), source
    )
    if tuple(out.shape) != (1, 1) + tuple(image_shape):
        _checks.fail(
            "counterfactuals",
            f"images of shape (B, J, {', '.join(map(str, image_shape))})",
            f"shape {tuple(out.shape)} for one unit and one intervention",
        )
