"""cfjax.study at its boundaries (``docs/contract.md``): counterfactuals held units before
interventions, ``(N, K, ...)``, end to end (checked against each unit under each intervention
computed alone), and ``key=`` keyword-only, taking a typed key, raw key data or an int seed, in
every public function of the study that draws."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax as cf
from cfjax import study
from cfjax.study import learned as ls


def _units(rng, n):
    chest = cf.data.ChestSCM(size=32)
    return chest, chest.sample(n, key=int(rng.integers(2**31)))


def _unit(rec, i):
    """Unit ``i`` of ``rec`` alone (a batch of one)."""
    return {"parents": {v: np.asarray(x)[i:i + 1] for v, x in rec["parents"].items()},
            "noise": jax.tree.map(lambda a: a[i:i + 1], rec["noise"]), "image": np.asarray(rec["image"])[i:i + 1]}


def test_exact_counterfactuals_are_each_unit_under_each_intervention_alone(rng):
    """``exact_counterfactuals(...)["image"][i, k]`` (and every parent's ``[i, k]``) is unit i's
    counterfactual under intervention k, computed with unit i and intervention k alone."""
    n, k = 3, 4  # N != K: a transposed result cannot pass
    chest, rec = _units(rng, n)
    do = {"sex": jnp.asarray(rng.integers(0, 2, k), jnp.int32),
          "age": jnp.asarray(rng.uniform(20, 90, k), jnp.float32)}
    key = int(rng.integers(2**31))
    out = study.exact_counterfactuals(chest, rec, do, key=key, label="fixed")
    assert out["image"].shape == (n, k, 32, 32)
    for v, x in out["parents"].items():
        assert np.shape(x) == (n, k), v
    for i in range(n):
        for j in range(k):
            alone = chest.counterfactuals(_unit(rec, i), {v: x[j:j + 1] for v, x in do.items()}, key=key,
                                          label="fixed")
            np.testing.assert_allclose(np.asarray(out["image"][i, j]), np.asarray(alone["image"][0, 0]), atol=1e-6)
            for v, x in out["parents"].items():
                np.testing.assert_allclose(np.asarray(x[i, j]), np.asarray(alone["parents"][v][0, 0]), atol=1e-6)
    # do(sex, age) sets them: each unit's row is the grid itself
    np.testing.assert_array_equal(np.asarray(out["parents"]["sex"]), np.broadcast_to(np.asarray(do["sex"]), (n, k)))


class _Stop(Exception):
    """Raised by the stub source: carries the key and label evaluate_setting passed it."""


def _stub_source(chest, records, interventions, *, key, label="fixed"):
    raise _Stop(key, label)


def _setting_key(key):
    """The key evaluate_setting hands its source, with everything before the source call real."""
    fam = study.Family(("basic", "basic"), np.array([0, 1]), jnp.ones((2, 4), bool))
    test = {"parents": {"effusion": np.array([0, 1, 0, 1]), "sex": np.array([0, 1, 1, 0]),
                        "age": np.array([30.0, 40.0, 50.0, 60.0]), "race": np.array([0, 1, 2, 0])}}
    with pytest.raises(_Stop) as caught:
        study.evaluate_setting("A", None, {"family": fam, "params": None}, None, test, study.QUICK, key=key,
                               label="fixed", source=_stub_source, out=".", log=lambda line: None)
    got, label = caught.value.args
    assert label == "fixed"
    return jax.random.key_data(got)


def _calls(rng):
    """For each of the study's functions that draw: (name, call with key=, the same call with
    the key positional where it used to be)."""
    n = 40
    sex, age, y = rng.integers(0, 2, n), rng.uniform(20, 90, n), rng.integers(0, 2, n)
    y[:2] = [0, 1]
    p = rng.uniform(size=(2, 2, n)).astype(np.float32)
    chest, rec = _units(rng, 2)
    do = {"sex": jnp.array([0, 1], jnp.int32)}
    return [
        ("biased_training_mask", lambda key: study.splits.biased_training_mask("sex", 0.9, sex, age, y, key=key),
         lambda key: study.splits.biased_training_mask(key, "sex", 0.9, sex, age, y)),
        ("auc_interval", lambda key: study.evaluation.auc_interval(p, y, key=key, resamples=20),
         lambda key: study.evaluation.auc_interval(p, y, key, 20)),
        ("datasets_bias_key", lambda key: jax.random.key_data(study.families.datasets_bias_key(key=key)),
         lambda key: study.families.datasets_bias_key(key)),
        ("exact_counterfactuals", lambda key: study.exact_counterfactuals(chest, rec, do, key=key, label="follows"),
         lambda key: study.exact_counterfactuals(chest, rec, do, key, "follows")),
        ("evaluate_setting", _setting_key,
         lambda key: study.evaluate_setting("A", None, {}, None, {}, study.QUICK, key, "fixed", _stub_source,
                                            ".", print)),
    ]


def test_study_keys_are_keyword_only_and_take_an_int_seed(rng):
    """biased_training_mask, auc_interval, datasets_bias_key, evaluate_setting and
    exact_counterfactuals: ``key=s``, ``key=jax.random.key(s)`` and ``key=jax.random.PRNGKey(s)``
    give the same result; the key passed positionally (the old signatures) is a TypeError."""
    seed = int(rng.integers(2**31))
    for name, by_key, positional in _calls(rng):
        want = jax.tree.map(np.asarray, by_key(jax.random.key(seed)))
        for key in (seed, jax.random.PRNGKey(seed)):
            jax.tree.map(lambda a, b, name=name: np.testing.assert_array_equal(np.asarray(a), b, err_msg=name),
                         by_key(key), want)
        with pytest.raises(TypeError):
            positional(jax.random.key(seed))
        with pytest.raises(cf.ValidationError, match="`key`"):
            by_key(-1)


def test_every_study_function_that_draws_takes_key_keyword_only():
    """Every public function and method of cfjax.study and of its modules with a ``key``
    parameter takes it keyword-only."""
    found = []
    modules = [study] + [getattr(study, m) for m in ("families", "splits", "learned", "marginalisation",
                                                    "evaluation", "correlations", "diagnostics",
                                                    "cftraining")]
    for module, name in {(m, n) for m in modules for n in getattr(m, "__all__", ())}:
        obj = getattr(module, name)
        fns = [obj.__call__] if inspect.isclass(obj) and "__call__" in vars(obj) else [obj]
        for fn in fns:
            if callable(fn) and not inspect.isclass(fn):
                params = inspect.signature(fn).parameters
                if "key" in params:
                    found.append(name)
                    assert params["key"].kind is inspect.Parameter.KEYWORD_ONLY, name
    assert {"biased_training_mask", "datasets_bias_key", "evaluate_setting",
            "exact_counterfactuals", "learned_images", "LearnedSource"} <= set(found)


def test_learned_images_take_units_first_and_an_int_key(rng):
    """learned_images: ``pa_cf (N, K, P)`` → ``(N, K, H, W)``; ``key=s`` equals
    ``key=jax.random.key(s)``; a ``(K, N, P)`` array of other N is refused naming pa_cf."""
    from cfjax.generative.hvae import HVAEConfig
    from cfjax.generative.mechanism import ImageHVAE

    mech = ImageHVAE(HVAEConfig(image_size=16, channels=(4, 4, 4), latent_dims=(0, 2, 2)))
    params = mech.init(jax.random.key(int(rng.integers(2**31))), 3)
    n, k = 3, 2
    x = jnp.asarray(rng.uniform(size=(n, 16, 16)), jnp.float32)
    pa = jnp.asarray(rng.uniform(size=(n, 3)), jnp.float32)
    pa_cf = jnp.asarray(rng.uniform(size=(n, k, 3)), jnp.float32)
    seed = int(rng.integers(2**31))
    got = np.asarray(ls.learned_images(mech, params, x, pa, pa_cf, key=seed, chunk=2))
    assert got.shape == (n, k, 16, 16)
    np.testing.assert_array_equal(
        got, np.asarray(ls.learned_images(mech, params, x, pa, pa_cf, key=jax.random.key(seed), chunk=2)))
    with pytest.raises(cf.ValidationError, match="`pa_cf`"):
        ls.learned_images(mech, params, x, pa, jnp.swapaxes(pa_cf, 0, 1), key=seed, chunk=2)
