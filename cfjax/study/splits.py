"""Paper 000's data splits (definitions §1): the balanced test split, the sex- and age-biased
training sets, and :func:`datasets`, a site's train / validation / test records drawn with them
from a :class:`cfjax.data.ChestSCM`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from cfjax import _checks
from cfjax._core.keys import as_key, numpy_rng
from cfjax.typing import KeyLike, PyTree

if TYPE_CHECKING:
    from cfjax.data import ChestSCM

__all__ = ["age_group", "balanced_test_split", "biased_training_mask", "datasets"]

_GROUP_EDGES = (45.0, 65.0)


def age_group(age: npt.ArrayLike) -> np.ndarray:
    """0 for age < 45, 1 for 45 ≤ age ≤ 65, 2 for age > 65."""
    age = np.asarray(age, np.float64)
    return (age >= _GROUP_EDGES[0]).astype(np.int32) + (age > _GROUP_EDGES[1]).astype(np.int32)


def balanced_test_split(
    sex: npt.ArrayLike,
    age: npt.ArrayLike,
    label: npt.ArrayLike,
    per_cell: int,
    prevalence: float,
    *,
    key: KeyLike,
) -> np.ndarray:
    """Indices of a test split with equal numbers of each sex and the same disease prevalence
    in every sex × age-group cell (<45, 45–65, >65): each of the 6 cells gets ``per_cell``
    units of which exactly ``round(prevalence · per_cell)`` are positive.

    Args:
      sex, age, label: ``(N,)`` parents of the pool (sex 1 = female).
      per_cell: units per sex × age-group cell.
      prevalence: the positive fraction of every cell.
      key: a PRNG key, raw key data or an int seed ``s`` (the units are chosen with
        ``np.random.default_rng(s)``; ``jax.random.key(s)`` chooses the same).

    Returns:
      ``(6 · per_cell,)`` indices into the pool, in random order.

    Raises:
      ValidationError: naming the cell when the pool is too small for it, or a bad ``key``.

    Example:
      >>> rng = np.random.default_rng(0)
      >>> idx = balanced_test_split(rng.integers(0, 2, 5000), rng.uniform(20, 90, 5000),
      ...                           rng.integers(0, 2, 5000), per_cell=50, prevalence=0.3, key=1)
      >>> len(idx)
      300
    """
    per_cell = _checks.check_positive_int("per_cell", per_cell)
    if not (0 <= prevalence <= 1):
        _checks.fail("prevalence", "a value in [0, 1]", repr(prevalence))
    sex, label = np.asarray(sex), np.asarray(label)
    groups = age_group(age)
    rng = numpy_rng(key)
    n_pos = int(round(prevalence * per_cell))
    chosen = []
    for s in (0, 1):
        for g in (0, 1, 2):
            for y, count in ((1, n_pos), (0, per_cell - n_pos)):
                pool = np.flatnonzero((sex == s) & (groups == g) & (label == y))
                if len(pool) < count:
                    _checks.fail(
                        "per_cell",
                        f"at most {len(pool)} units with sex={s}, age group {g}, "
                        f"label={y} available",
                        f"a request for {count}",
                    )
                chosen.append(rng.choice(pool, size=count, replace=False))
    return rng.permutation(np.concatenate(chosen))


def biased_training_mask(
    kind: str,
    strength: float,
    sex: npt.ArrayLike,
    age: npt.ArrayLike,
    label: npt.ArrayLike,
    *,
    key: KeyLike,
) -> jax.Array:
    """Which training units to keep for paper 000's corrupted training sets.

    - ``kind="sex"``: drop male-with-disease and female-healthy units with probability
      ``strength`` (α ∈ {0.8, 0.9, 0.95} in the paper);
    - ``kind="age"``: drop a unit with probability ``strength · (1 − c)``,
      ``c = a·y + (1 − a)(1 − y)``, ``a`` the age rescaled from [20, 90] to [0, 1].

    ``key`` (keyword-only) is a PRNG key, raw key data or an int seed (``key=s`` and
    ``key=jax.random.key(s)`` keep the same units). Returns a boolean mask of shape ``(n,)``.

    Example:
      >>> keep = biased_training_mask("sex", 0.9, [0, 0, 1, 1], [30.0, 60.0, 40.0, 80.0], [1, 0, 1, 0], key=0)
      >>> keep.shape, keep.dtype
      ((4,), dtype('bool'))
    """
    key = as_key(key)
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


def datasets(
    chest: ChestSCM,
    *,
    key: KeyLike,
    n_train: int,
    n_val: int,
    test_per_cell: int,
    test_prevalence: float = 0.5,
    bias: tuple[str, float] | None = None,
    pool_factor: int = 20,
) -> dict[str, dict[str, PyTree]]:
    """Paper 000's train / validation / test records of one site, deterministic given ``key``
    (a PRNG key or an int seed: ``key=s`` and ``key=jax.random.key(s)`` give the same records).

    The test split is the balanced split (:func:`balanced_test_split`, 6 cells of
    ``test_per_cell`` units) chosen from the parents of a pool of fresh units;
    ``bias=("sex", 0.9)`` or ``("age", 0.9)`` corrupts the training set
    (:func:`biased_training_mask`), the number of units dropped being reported under
    ``"dropped"``. The test pool holds ``pool_factor × 6 × test_per_cell`` units; a cell it
    cannot fill raises ValidationError.

    Units are chosen from their parents before any image exists
    (:meth:`cfjax.data.ChestSCM.draw_parents`): only the kept units' noise is drawn and only
    their images rendered (:meth:`cfjax.data.ChestSCM.records`), so memory and time grow with
    the records returned, not with the pool or the dropped training units. Each kept unit is
    the same (parents, noise, image) as the unit at its place in ``chest.sample`` of the whole
    pool or training set.

    Args:
      chest: the site's :class:`cfjax.data.ChestSCM`.
      key: the key or int seed of every draw.
      n_train, n_val: training and validation units (before any corruption).
      test_per_cell: test units per sex × age-group cell.
      test_prevalence: the effusion prevalence of every test cell.
      bias: ``(kind, strength)`` of :func:`biased_training_mask`, or None.
      pool_factor: the test pool's size over the test split's.

    Returns:
      ``{"train", "validation", "test"}``, each ``{"parents": {node: (n,)}, "noise",
      "image": (n, size, size)}``.

    Example:
      >>> import cfjax as cf
      >>> d = datasets(cf.data.ChestSCM(size=32), key=0, n_train=40, n_val=8, test_per_cell=2)
      >>> d["train"]["image"].shape, len(d["test"]["parents"]["age"])
      ((40, 32, 32), 12)
    """
    n_train = _checks.check_positive_int("n_train", n_train)
    n_val = _checks.check_positive_int("n_val", n_val)
    test_per_cell = _checks.check_positive_int("test_per_cell", test_per_cell)
    pool_factor = _checks.check_positive_int("pool_factor", pool_factor)
    key = as_key(key)
    keys = jax.random.split(key, 4)
    train_parents, train_keys = chest.draw_parents(n_train, key=keys[0])
    keep = None
    if bias is not None:
        kind, strength = bias
        t = train_parents
        keep = np.asarray(
            biased_training_mask(kind, strength, t["sex"], t["age"], t["effusion"], key=keys[3])
        )
    train = chest.records(train_parents, train_keys, None if keep is None else np.flatnonzero(keep))
    if keep is not None:
        train["dropped"] = int((~keep).sum())
    val = chest.records(*chest.draw_parents(n_val, key=keys[1]))
    p, pool_keys = chest.draw_parents(pool_factor * 6 * test_per_cell, key=keys[2])
    idx = balanced_test_split(
        np.asarray(p["sex"]),
        np.asarray(p["age"]),
        np.asarray(p["effusion"]),
        test_per_cell,
        test_prevalence,
        key=key,
    )
    test = chest.records(p, pool_keys, idx)
    return {"train": train, "validation": val, "test": test}
