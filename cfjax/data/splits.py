"""Paper 000's data splits (definitions §1): the balanced test split and the sex- and age-biased
training sets."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks

__all__ = ["age_group", "balanced_test_split", "biased_training_mask"]

_GROUP_EDGES = (45.0, 65.0)


def age_group(age: Any) -> np.ndarray:
    """0 for age < 45, 1 for 45 ≤ age ≤ 65, 2 for age > 65."""
    age = np.asarray(age, np.float64)
    return (age >= _GROUP_EDGES[0]).astype(np.int32) + (age > _GROUP_EDGES[1]).astype(np.int32)


def balanced_test_split(sex: Any, age: Any, label: Any, per_cell: int, prevalence: float,
                        seed: int) -> np.ndarray:
    """Indices of a test split with equal numbers of each sex and the same disease prevalence
    in every sex × age-group cell (<45, 45–65, >65): each of the 6 cells gets ``per_cell``
    units of which exactly ``round(prevalence · per_cell)`` are positive.

    Raises ValidationError naming the cell when the pool is too small for it.

    Example:
      >>> rng = np.random.default_rng(0)
      >>> idx = balanced_test_split(rng.integers(0, 2, 5000), rng.uniform(20, 90, 5000),
      ...                           rng.integers(0, 2, 5000), per_cell=50, prevalence=0.3, seed=1)
      >>> len(idx)
      300
    """
    per_cell = _checks.check_positive_int("per_cell", per_cell)
    if not (0 <= prevalence <= 1):
        _checks.fail("prevalence", "a value in [0, 1]", repr(prevalence))
    sex, label = np.asarray(sex), np.asarray(label)
    groups = age_group(age)
    rng = np.random.default_rng(seed)
    n_pos = int(round(prevalence * per_cell))
    chosen = []
    for s in (0, 1):
        for g in (0, 1, 2):
            for y, count in ((1, n_pos), (0, per_cell - n_pos)):
                pool = np.flatnonzero((sex == s) & (groups == g) & (label == y))
                if len(pool) < count:
                    _checks.fail("per_cell", f"at most {len(pool)} units with sex={s}, age group {g}, "
                                 f"label={y} available", f"a request for {count}")
                chosen.append(rng.choice(pool, size=count, replace=False))
    return rng.permutation(np.concatenate(chosen))


def biased_training_mask(key: jax.Array, kind: str, strength: float, sex: Any, age: Any,
                         label: Any) -> jax.Array:
    """Which training units to keep for paper 000's corrupted training sets.

    - ``kind="sex"``: drop male-with-disease and female-healthy units with probability
      ``strength`` (α ∈ {0.8, 0.9, 0.95} in the paper);
    - ``kind="age"``: drop a unit with probability ``strength · (1 − c)``,
      ``c = a·y + (1 − a)(1 − y)``, ``a`` the age rescaled from [20, 90] to [0, 1].

    Returns a boolean mask of shape ``(n,)``.
    """
    if kind not in ("sex", "age"):
        _checks.fail("kind", "'sex' or 'age'", repr(kind))
    if not (0 <= strength <= 1):
        _checks.fail("strength", "a probability in [0, 1]", repr(strength))
    sex = jnp.asarray(sex)
    y = jnp.asarray(label).astype(jnp.result_type(float))
    if kind == "sex":
        drop = strength * (((sex == 0) & (y == 1)) | ((sex == 1) & (y == 0))).astype(y.dtype)
    else:
        a = (jnp.asarray(age).astype(y.dtype) - 20) / 70
        drop = strength * (1 - (a * y + (1 - a) * (1 - y)))
    return jax.random.uniform(key, y.shape) >= drop
