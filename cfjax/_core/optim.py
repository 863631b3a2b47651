"""optax transformations that work whatever dtype promotion the caller has chosen.

JAX's dtype promotion is the caller's setting (``jax.config.update("jax_numpy_dtype_promotion",
"strict")`` or the ``jax.numpy_dtype_promotion`` context), and cfjax's own code is written with
explicit dtypes, so it computes the same under ``"standard"`` and ``"strict"``. optax's is not:
Adam's bias correction raises a Python float to the int32 step count (``b1 ** count``), and
L-BFGS mixes weak and integer types, both a ``TypePromotionError`` under strict promotion. So
every optimiser cfjax runs, its own or one a caller passes in, goes through
:func:`standard_promotion`, the one place in cfjax that touches the promotion mode: it scopes
JAX's standard promotion around optax's own ``init`` and ``update`` and nothing else (the loss,
its gradients and the training loop run under the caller's mode). optax's arithmetic is then
what optax means it to be in either mode, so a training run gives the same result under both.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax

__all__ = ["standard_promotion"]


@dataclasses.dataclass(frozen=True)
class _Init:
    """``tx.init`` under standard promotion (equal for equal ``tx``: a jit cache key)."""

    tx: optax.GradientTransformation

    def __call__(self, params: optax.Params) -> optax.OptState:
        with jax.numpy_dtype_promotion("standard"):
            return self.tx.init(params)


@dataclasses.dataclass(frozen=True)
class _Update:
    """``tx.update`` under standard promotion (equal for equal ``tx``: a jit cache key)."""

    tx: optax.GradientTransformation

    def __call__(
        self,
        updates: optax.Updates,
        state: optax.OptState,
        params: optax.Params | None = None,
        **extra_args: Any,
    ) -> tuple[optax.Updates, optax.OptState]:
        with jax.numpy_dtype_promotion("standard"):
            return self.tx.update(updates, state, params, **extra_args)


def standard_promotion(tx: optax.GradientTransformation) -> optax.GradientTransformation:
    """``tx`` with its ``init`` and ``update`` run under JAX's standard dtype promotion.

    The result is an optax transformation of ``tx``'s kind (a
    ``GradientTransformationExtraArgs`` stays one, so L-BFGS still takes ``value=``, ``grad=``,
    ``value_fn=``); it equals (and hashes as) another wrapping of the same ``tx``, so a step
    holding it compiles once; wrapping twice changes nothing.

    Example:
      >>> import jax.numpy as jnp
      >>> tx = standard_promotion(optax.adam(0.1))
      >>> params = jnp.ones(3)
      >>> with jax.numpy_dtype_promotion("strict"):
      ...     updates, state = tx.update(params, tx.init(params), params)
      >>> updates.dtype, tx == standard_promotion(tx)
      (dtype('float32'), True)
    """
    if isinstance(tx.init, _Init):
        return tx
    kind = (
        optax.GradientTransformationExtraArgs
        if isinstance(tx, optax.GradientTransformationExtraArgs)
        else optax.GradientTransformation
    )
    return kind(_Init(tx), _Update(tx))
