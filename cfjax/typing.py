"""Type aliases used in cfjax's signatures (as ``jax.typing`` does for arrays).

- :data:`Array`: a JAX array; :data:`ArrayLike`: anything ``jnp.asarray`` takes.
- :data:`KeyLike`: a typed PRNG key (``jax.random.key``), a raw ``uint32`` key, or an int seed:
  what every ``key=`` argument accepts.
- :data:`Mesh`: the device mesh a ``mesh=`` argument takes.
- :data:`PyTree`: a pytree of arrays (parameters, results).
"""

from __future__ import annotations

from typing import Any, Union

import jax
import jax.typing

__all__ = ["Array", "ArrayLike", "KeyLike", "Mesh", "PyTree"]

#: a JAX array
Array = jax.Array
#: anything ``jax.numpy.asarray`` accepts
ArrayLike = jax.typing.ArrayLike
#: a typed PRNG key, a raw ``uint32`` key or an int seed
KeyLike = Union[jax.Array, int]
#: the device mesh of a ``mesh=`` argument
Mesh = jax.sharding.Mesh
#: a pytree of arrays
PyTree = Any
