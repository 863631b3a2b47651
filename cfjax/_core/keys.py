"""One way randomness enters cfjax: ``key=``, a typed key, raw key data or an int seed."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from cfjax._errors import ValidationError
from cfjax.typing import KeyLike

__all__ = ["as_key", "numpy_rng", "seed_of"]


def as_key(key: KeyLike, name: str = "key") -> jax.Array:
    """``key`` as one typed PRNG key.

    Accepts a typed key (``jax.random.key(0)``), raw key data (``jax.random.PRNGKey(0)``, a
    ``(2,)`` uint32 array) or a non-negative int seed (``jax.random.key(seed)``).

    Raises:
      ValidationError: anything else, naming ``name``.

    Example:
      >>> bool(jnp.all(jax.random.key_data(as_key(3)) == jax.random.key_data(jax.random.key(3))))
      True
    """
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if key < 0:
            raise ValidationError(
                f"`{name}`: expected a PRNG key or a non-negative int seed, got {key}."
            )
        return jax.random.key(int(key))
    if not isinstance(key, (jax.Array, np.ndarray)):
        raise ValidationError(
            f"`{name}`: expected a PRNG key (jax.random.key) or an int seed, "
            f"got {type(key).__name__}."
        )
    k = key if isinstance(key, jax.Array) else jnp.asarray(key)
    if jnp.issubdtype(k.dtype, jax.dtypes.prng_key):
        if k.shape != ():
            raise ValidationError(f"`{name}`: expected one PRNG key, got keys of shape {k.shape}.")
        return k
    if k.dtype == jnp.uint32 and k.shape == (2,):
        return jax.random.wrap_key_data(k)
    raise ValidationError(
        f"`{name}`: expected a PRNG key (jax.random.key), raw key data (2,) uint32 "
        f"or an int seed, got an array of dtype {k.dtype} and shape {k.shape}."
    )


def seed_of(key: KeyLike, name: str = "key") -> int:
    """One non-negative integer for ``key`` (anything :func:`as_key` takes), for code that
    needs an int seed (numpy generators, seeds offset by a count).

    An int seed is returned as it is; a key gives its data read as one unsigned integer (its
    32-bit words, most significant first), so ``jax.random.key(s)`` gives ``s`` for every
    ``s < 2**32`` (larger ints are truncated by ``jax.random.key`` itself unless 64-bit mode
    is on).

    Raises:
      ValidationError: a negative int or anything :func:`as_key` refuses, naming ``name``.

    Example:
      >>> seed_of(7), seed_of(jax.random.key(7)), seed_of(jax.random.PRNGKey(7))
      (7, 7, 7)
    """
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if key < 0:
            raise ValidationError(
                f"`{name}`: expected a PRNG key or a non-negative int seed, got {key}."
            )
        return int(key)
    seed = 0
    for word in np.asarray(jax.random.key_data(as_key(key, name))).ravel().tolist():
        seed = (seed << 32) | int(word)
    return seed


def numpy_rng(key: KeyLike, name: str = "key") -> np.random.Generator:
    """A numpy ``Generator`` seeded by ``key`` (anything :func:`as_key` takes), for draws made
    on the host (synthetic data sets, fold assignments).

    The seed is :func:`seed_of` ``(key)``, so an int seed ``s`` gives ``np.random.default_rng(s)``,
    and so does ``jax.random.key(s)`` for ``s < 2**32``.

    Example:
      >>> numpy_rng(7).random() == numpy_rng(jax.random.key(7)).random() == np.random.default_rng(7).random()
      True
    """
    return np.random.default_rng(seed_of(key, name))
