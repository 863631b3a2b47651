"""Type aliases used in cfjax's signatures (as ``jax.typing`` does for arrays).

- :data:`Array`: a JAX array; :data:`ArrayLike`: anything ``jnp.asarray`` takes.
- :data:`KeyLike`: a typed PRNG key (``jax.random.key``), a raw ``uint32`` key, or an int seed:
  what every ``key=`` argument accepts.
- :data:`Mesh`: a device mesh; :data:`MeshLike`: what every ``mesh=`` argument accepts (None: one
  device; an int: the first that many devices; a sequence of devices; a one-axis mesh; see
  docs/contract.md §4).
- :data:`PyTree`: a pytree of arrays (parameters, results).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.typing

__all__ = ["Array", "ArrayLike", "KeyLike", "Mesh", "MeshLike", "PyTree"]

#: a JAX array
Array = jax.Array
#: anything ``jax.numpy.asarray`` accepts
ArrayLike = jax.typing.ArrayLike
#: a typed PRNG key, a raw ``uint32`` key or an int seed
KeyLike = jax.Array | int
#: a device mesh
Mesh = jax.sharding.Mesh
#: what a ``mesh=`` argument accepts: None, a device count, a sequence of devices or a mesh
MeshLike = Mesh | int | Sequence[jax.Device] | None
#: a pytree of arrays
PyTree = Any
