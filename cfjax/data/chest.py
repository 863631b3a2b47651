"""A synthetic chest-radiograph SCM with exact counterfactuals (paper 000's graph).

Parents: sex, age (20–90), race (3 groups), lung size (a child of sex and age) and pleural
effusion (a child of age); their mechanisms are :mod:`cfjax.scm` mechanisms, so parent
counterfactuals use the same abduction as any other SCM. The image is
:func:`cfjax.data.render.render` of the parents and explicit image noise, so a counterfactual
image is exact: same noise, counterfactual parents, rendered again.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax import scm as cfscm
from cfjax.data.render import Acquisition, ImageNoise, render, sample_image_noise

__all__ = ["ChestSCM", "PARENTS", "AGE_GROUPS"]

#: paper 000's parent graph (the image is a child of all of them)
PARENTS = {"sex": [], "age": [], "race": [], "lung": ["sex", "age"], "effusion": ["age"]}
#: age groups of the balanced test split: <45, 45–65, >65
AGE_GROUPS = (45.0, 65.0)


@dataclasses.dataclass(frozen=True)
class ChestSCM:
    """The synthetic chest-radiograph SCM.

    Args:
      prevalence: effusion prevalence at the mean age (the age effect moves it up with age).
      size: image side in pixels, 32 to 192.
      site: acquisition settings (a second site differs in contrast, gamma, noise).

    Example:
      >>> chest = ChestSCM(size=32)
      >>> rec = chest.sample(jax.random.key(0), 4)
      >>> rec["image"].shape, sorted(rec["parents"])
      ((4, 32, 32), ['age', 'effusion', 'lung', 'race', 'sex'])
    """

    prevalence: float = 0.3
    size: int = 64
    site: Acquisition = Acquisition()

    def __post_init__(self):
        if not (0 < self.prevalence < 1):
            _checks.fail("prevalence", "a value in (0, 1)", repr(self.prevalence))
        if not (isinstance(self.size, int) and 32 <= self.size <= 192):
            _checks.fail("size", "an integer in [32, 192]", repr(self.size))

    # ---------------------------------------------------------------- the parent SCM
    @property
    def scm(self) -> cfscm.SCM:
        return cfscm.SCM(PARENTS, {
            "sex": cfscm.GumbelMax(2), "age": cfscm.Spline(low=20.0, high=90.0, hidden=()),
            "race": cfscm.GumbelMax(3), "lung": cfscm.LocationScale(),
            "effusion": cfscm.GumbelMax(2)})

    def params(self) -> dict[str, Any]:
        """The fixed, known parameters of the parent mechanisms (built once per prevalence)."""
        return jax.tree.map(lambda a: a, _parent_params(self.prevalence))  # fresh containers

    # ---------------------------------------------------------------- images
    def render(self, parents: Mapping[str, jax.Array], noise: ImageNoise) -> jax.Array:
        """Images of units with parents ``{node: (N,)}`` and noise, ``(N, size, size)``."""
        return _render_many(parents["sex"], parents["age"], parents["race"], parents["lung"],
                            parents["effusion"], noise, self.size, self.site)

    def sample(self, key: jax.Array, n: int) -> dict[str, Any]:
        """``n`` records: ``{"parents": {node: (n,)}, "noise": ImageNoise (n, ...),
        "image": (n, size, size)}``. Deterministic given ``key``."""
        n = _checks.check_positive_int("n", n)
        k_parents, k_image = jax.random.split(key)
        parents = self.scm.sample(self.params(), k_parents, n)
        noise = jax.vmap(sample_image_noise)(jax.random.split(k_image, n))
        return {"parents": parents, "noise": noise, "image": self.render(parents, noise)}

    def counterfactuals(self, records: Mapping[str, Any], interventions: Any,
                        key: jax.Array) -> dict[str, Any]:
        """Exact counterfactuals of every record under K interventions on the parents.

        Returns ``{"parents": {node: (K, N)}, "image": (K, N, size, size)}``: the parents by
        abduction–action–prediction in the parent SCM, the images re-rendered with each
        unit's own image noise.
        """
        parents = self.scm.counterfactual(self.params(), records["parents"], interventions, key=key)
        k, n = parents["sex"].shape
        # One flat batch of K·N renders through the same compiled renderer as the factual
        # images, so a null intervention reproduces them bit for bit.
        flat = {v: x.reshape(k * n) for v, x in parents.items()}
        noise = jax.tree.map(lambda a: jnp.broadcast_to(a, (k,) + a.shape).reshape((k * n,) + a.shape[1:]),
                             records["noise"])
        images = self.render(flat, noise).reshape(k, n, self.size, self.size)
        return {"parents": parents, "image": images}


    def datasets(self, seed: int, *, n_train: int, n_val: int, test_per_cell: int,
                 test_prevalence: float = 0.5, bias: tuple[str, float] | None = None,
                 pool_factor: int = 20) -> dict[str, dict[str, Any]]:
        """Train / validation / test records, deterministic given ``seed``.

        The test split is paper 000's balanced split (:func:`balanced_test_split`, 6 cells of
        ``test_per_cell`` units) drawn from a pool of fresh units; ``bias=("sex", 0.9)`` or
        ``("age", 0.9)`` corrupts the training set (:func:`biased_training_mask`), the number
        of units dropped being reported under ``"dropped"``. The test pool holds
        ``pool_factor × 6 × test_per_cell`` units; a cell it cannot fill raises ValueError.
        """
        from cfjax.data.splits import balanced_test_split, biased_training_mask

        keys = jax.random.split(jax.random.key(seed), 4)
        train = self.sample(keys[0], n_train)
        val = self.sample(keys[1], n_val)
        pool = self.sample(keys[2], pool_factor * 6 * test_per_cell)
        p = pool["parents"]
        idx = balanced_test_split(np.asarray(p["sex"]), np.asarray(p["age"]), np.asarray(p["effusion"]),
                                  test_per_cell, test_prevalence, seed)
        test = _take(pool, idx)
        out = {"train": train, "validation": val, "test": test}
        if bias is not None:
            kind, strength = bias
            t = train["parents"]
            keep = np.asarray(biased_training_mask(keys[3], kind, strength, t["sex"], t["age"], t["effusion"]))
            out["train"] = _take(train, np.flatnonzero(keep))
            out["train"]["dropped"] = int((~keep).sum())
        return out


@functools.lru_cache(maxsize=32)
def _parent_params(prevalence: float) -> dict[str, Any]:
    """Built once per prevalence: ``ChestSCM.params`` is on every sampling path."""
    p = ChestSCM(prevalence=prevalence).scm.init(jax.random.key(0))  # age = 20 + 70·sigmoid(u)
    p["sex"]["net"]["params"]["bias"] = jnp.zeros(2)
    p["race"]["net"]["params"]["bias"] = jnp.log(jnp.array([0.6, 0.25, 0.15]))
    # lung = 1.05 − 0.12·female − 0.15·age01 + 0.04·u  (age enters rescaled to [0, 1])
    p["lung"] = cfscm.linear_gaussian_params([-0.12, -0.15], 1.05, 0.04)
    # effusion: logit = logit(prevalence) + 2.5·(age01 − 0.5)
    base = float(np.log(prevalence / (1 - prevalence)))
    p["effusion"]["net"]["params"]["Dense_0"]["kernel"] = jnp.array([[0.0, 2.5]])
    p["effusion"]["net"]["params"]["Dense_0"]["bias"] = jnp.array([0.0, base - 1.25])
    return p


def _take(records: Mapping[str, Any], idx: np.ndarray) -> dict[str, Any]:
    idx = jnp.asarray(idx)
    return {"parents": {v: x[idx] for v, x in records["parents"].items()},
            "noise": jax.tree.map(lambda a: a[idx], records["noise"]),
            "image": records["image"][idx]}


@functools.partial(jax.jit, static_argnums=(6, 7))
def _render_many(sex, age, race, lung, effusion, noise, size, site):
    one = functools.partial(render, size=size, site=site)
    return jax.vmap(one)(sex, age, race, lung, effusion, noise)
