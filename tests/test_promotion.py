"""The library runs under the caller's dtype promotion, strict or standard, with the same results.

Every trainer is called here without the caller scoping anything, once under
``jax.numpy_dtype_promotion("strict")`` and once under ``("standard")``, and the two results
must be equal bit for bit: cfjax's own code is explicitly typed, and optax's mixed-type
arithmetic is scoped by the one helper that may touch the promotion mode,
``cfjax._core.optim.standard_promotion``.
"""

import dataclasses
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import cfjax as cf
from cfjax import predictors as pr
from cfjax._core import training
from cfjax._core.optim import standard_promotion
from cfjax.representations import train_logistic
from cfjax.scm import SCM, LocationScale, linear_gaussian_params

MODES = ("strict", "standard")
PACKAGE = pathlib.Path(cf.__file__).resolve().parent


def in_both_modes(fn):
    """``fn()`` under strict and under standard promotion, as host arrays."""
    out = []
    for mode in MODES:
        with jax.numpy_dtype_promotion(mode):
            out.append(jax.tree.map(np.asarray, fn()))
    return out


def assert_same(a, b):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b) > 0
    for u, v in zip(leaves_a, leaves_b, strict=True):
        assert u.dtype == v.dtype
        np.testing.assert_array_equal(u, v)


def test_only_the_optimiser_helper_touches_the_promotion_mode():
    """No module of the library scopes or sets dtype promotion except cfjax._core.optim."""
    pattern = re.compile(r"numpy_dtype_promotion")
    found = sorted(str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
                   if pattern.search(p.read_text()))
    assert found == ["cfjax/_core/optim.py"]


def test_the_helper_wraps_any_optax_transformation(rng):
    params = {"w": jnp.asarray(rng.normal(size=3), jnp.float32)}
    grads = {"w": jnp.asarray(rng.normal(size=3), jnp.float32)}
    raw = optax.adam(0.1)
    tx = standard_promotion(raw)
    with jax.numpy_dtype_promotion("strict"), pytest.raises(jax.dtypes.TypePromotionError):
        raw.update(grads, raw.init(params), params)  # optax alone fails under strict promotion
    with jax.numpy_dtype_promotion("standard"):
        want = raw.update(grads, raw.init(params), params)
    strict, standard = in_both_modes(lambda: tx.update(grads, tx.init(params), params))
    assert_same(strict, standard)
    assert_same(strict, jax.tree.map(np.asarray, want))
    assert tx == standard_promotion(raw) and hash(tx) == hash(standard_promotion(raw))
    assert standard_promotion(tx) is tx
    assert isinstance(tx, optax.GradientTransformationExtraArgs)


def test_member_step(rng):
    model, config = pr.EffusionCNN(features=(4,)), pr.EnsembleConfig(steps=10, batch_size=4, warmup=0)
    params = jax.tree.map(lambda a: a[0], pr.init_params(model, (16, 16), seeds=[int(rng.integers(2**31))]))
    y = np.array([0, 1] * 4)
    data = pr.data.member_data(rng.uniform(size=(8, 16, 16)).astype(np.float32), y, np.ones(8, np.float32))
    key = jax.random.key(int(rng.integers(2**31)))

    def two_steps():
        p, o = params, config.optimizer().init(params)
        for t in range(2):
            out = pr.step.member_step(model, config, p, o, data, jax.random.fold_in(key, t))
            p, o = out.params, out.opt_state
        return p, o, out.loss

    strict, standard = in_both_modes(two_steps)
    assert_same(strict, standard)
    assert np.isfinite(strict[2])


def test_ensemble_training(rng):
    y = np.array([0, 1] * 16)
    x = (rng.uniform(size=(32, 16, 16)) * 0.5 + 0.5 * y[:, None, None]).astype(np.float32)
    config = pr.EnsembleConfig(steps=4, batch_size=4, warmup=1, eval_every=2)
    key = int(rng.integers(2**31))
    strict, standard = in_both_modes(lambda: pr.train(pr.EffusionCNN(features=(4,)), x, y, np.ones((2, 32), bool),
                                                      x, y, config, key=key,
                                                      options=pr.TrainOptions(progress=False)))
    assert_same(strict, standard)


@dataclasses.dataclass(frozen=True)
class _Regression:
    """Minibatch least squares with AdamW: a step of the core loop."""

    tx: optax.GradientTransformation

    def __call__(self, state, data, key):
        w, opt_state = state
        idx = jax.random.randint(key, (8,), 0, data["x"].shape[0])
        value, grad = jax.value_and_grad(lambda w: jnp.mean((data["x"][idx] @ w - data["y"][idx]) ** 2))(w)
        updates, opt_state = self.tx.update(grad, opt_state, w)
        return (optax.apply_updates(w, updates), opt_state), {"loss": value}


def test_core_training_loop(rng):
    x = jnp.asarray(rng.normal(size=(64, 3)), jnp.float32)
    data = {"x": x, "y": x @ jnp.asarray(rng.normal(size=3), jnp.float32)}
    step = _Regression(standard_promotion(optax.adamw(0.05)))
    w0 = jnp.zeros(3, jnp.float32)
    key = int(rng.integers(2**31))

    def fit():
        out = training.run(step, (w0, step.tx.init(w0)), data, key=key, steps=12,
                           chunk_steps=5, reporter=training.Reporter(progress=False),
                           validation=training.Validation(lambda s: jnp.mean((x @ s[0] - data["y"]) ** 2),
                                                          patience=10))
        return out.state, out.best, out.history, out.validation

    strict, standard = in_both_modes(fit)
    assert_same(strict, standard)


def test_scm_fit(rng):
    scm = SCM({"a": [], "b": ["a"]}, {"a": LocationScale(), "b": LocationScale()})
    true = {"a": linear_gaussian_params([], 1.0, 2.0), "b": linear_gaussian_params([0.5], -1.0, 0.7)}
    data = scm.sample(true, 50, key=int(rng.integers(2**31)))
    key = int(rng.integers(2**31))
    strict, standard = in_both_modes(lambda: scm.fit(data, key=key, steps=15, learning_rate=0.05, progress=False)[:2])
    assert_same(strict, standard)
    # a caller's own optax optimizer too
    strict, standard = in_both_modes(lambda: scm.fit(data, key=key, steps=15, optimizer=optax.adam(0.05),
                                                     batch_size=16, progress=False)[:2])
    assert_same(strict, standard)


def test_worst_case_search(rng):
    S = cf.sensitivity
    n = 200
    a = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    e = rng.normal(size=(n, 2))
    o = 0.5 * a + e[:, 0]
    m = 0.3 * a + 0.4 * o + e[:, 1]
    y = o + m + rng.normal(size=n)
    graph = S.FairnessGraph({"O": ["A"], "M": ["A", "O"]})
    settings = S.FitConfig(equation_degrees=(1, 1), lam=1.0, predictor_degrees=(1,), predictor_lambdas=(1.0,))
    model = S.fit(graph, S.make_data(a.astype(np.float32), np.stack([o, m], 1).astype(np.float32),
                                     y.astype(np.float32)), settings)
    key = int(rng.integers(2**31))
    strict, standard = in_both_modes(lambda: S.worst_case(model, 0.5, key=key, config=S.SearchConfig(restarts=2, steps=20, max_rounds=0, warn_ratio=None)).cfu)
    assert_same(strict, standard)


def test_generative_trainers(rng):
    """The HVAE image mechanism's trainer and the anti-causal parent predictors'."""
    from cfjax.generative import anticausal as ac
    from cfjax.generative import train as gt
    from cfjax.generative.hvae import HVAEConfig
    from cfjax.generative.mechanism import ImageHVAE

    n = 16
    sex = rng.integers(0, 2, n).astype(np.int32)
    image = np.clip(0.3 + 0.4 * sex[:, None, None] + 0.05 * rng.normal(size=(n, 16, 16)), 0, 1).astype(np.float32)
    hvae = HVAEConfig(image_size=16, channels=(4, 4, 4), latent_dims=(0, 2, 2), sigma_min=0.05)
    config = gt.GeneratorConfig(hvae, steps=4, batch_size=8, warmup=1, chunk_steps=2)
    scm = cf.scm.SCM({"sex": [], "image": ["sex"]}, {"sex": cf.scm.GumbelMax(2), "image": ImageHVAE(hvae)})
    key = int(rng.integers(2**31))
    strict, standard = in_both_modes(lambda: gt.fit_generator({"sex": sex, "image": image}, config, scm=scm, key=key,
                                                              progress=False)[1:])
    assert_same(strict, standard)

    spec = (ac.Head("s", "categorical", 2),)
    strict, standard = in_both_modes(lambda: ac.train_anticausal(
        image[:, :8, :8], {"s": sex}, spec, ac.AntiCausalConfig(steps=3, batch_size=4, features=(4,), hidden=4),
        key=key, progress=False))
    assert_same((strict.params, strict.loss), (standard.params, standard.loss))


def test_representation_classifier(rng):
    X = rng.normal(size=(120, 3)).astype(np.float32)
    y = (X[:, 0] + 0.3 * rng.normal(size=120) > 0).astype(np.int32)
    strict, standard = in_both_modes(lambda: train_logistic(X, y, max_steps=30))
    assert_same(strict, standard)
