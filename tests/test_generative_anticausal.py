"""cfjax.generative.anticausal and its predictions (cfjax.generative.parents): losses and
predictions against numpy references, label masks, chunked prediction, entropy weights,
imputation, input validation (tiny 8×8 networks)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfjax._checks import ValidationError
from cfjax.generative import anticausal as ac
from cfjax.generative import parents as gp

SPEC = (ac.Head("s", "categorical", 3), ac.Head("a", "gaussian"))
NET = ac.ParentPredictor(SPEC, features=(4,), hidden=4)
TINY = dict(features=(4,), hidden=4)


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _data(rng, n=12, size=8):
    x = rng.uniform(size=(n, size, size)).astype(np.float32)
    pa = {"s": rng.integers(0, 3, n).astype(np.int32), "a": rng.normal(50.0, 10.0, n).astype(np.float32)}
    return x, pa


def test_loss_matches_numpy_reference(rng):
    x, pa = _data(rng)
    n = len(x)
    params = NET.init(jax.random.key(int(rng.integers(1 << 30))), jnp.asarray(x[:1]))
    mask = rng.uniform(size=(n, 2)) < 0.6
    mask[0] = True  # every head sees at least one label
    loc, scale = {"a": jnp.float32(48.0)}, {"a": jnp.float32(9.0)}
    labels = {"s": np.where(mask[:, 0], pa["s"], -1), "a": np.where(mask[:, 1], pa["a"], np.nan)}
    total, per_head = ac.anticausal_loss(params, NET, loc, scale, jnp.asarray(x),
                                         {k: jnp.asarray(v) for k, v in labels.items()}, jnp.asarray(mask))
    out = {k: np.asarray(v, np.float64) for k, v in NET.apply(params, jnp.asarray(x)).items()}
    # categorical cross-entropy, averaged over observed labels
    ce = -_log_softmax(out["s"])[np.arange(n), np.clip(labels["s"], 0, 2)]
    ref_s = ce[mask[:, 0]].mean()
    # Gaussian NLL of the standardised target
    z = (pa["a"].astype(np.float64) - 48.0) / 9.0
    mu, log_s = out["a"][:, 0], np.clip(out["a"][:, 1], -7, 7)
    nll = 0.5 * ((z - mu) / np.exp(log_s)) ** 2 + log_s + 0.5 * np.log(2 * np.pi)
    ref_a = nll[mask[:, 1]].mean()
    np.testing.assert_allclose(np.asarray(per_head), [ref_s, ref_a], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(total), ref_s + ref_a, rtol=1e-5, atol=1e-6)
    # a head with no observed label in the batch contributes 0
    m0 = mask.copy()
    m0[:, 1] = False
    _, ph = ac.anticausal_loss(params, NET, loc, scale, jnp.asarray(x),
                               {k: jnp.asarray(v) for k, v in labels.items()}, jnp.asarray(m0))
    assert float(ph[1]) == 0.0 and np.isfinite(np.asarray(ph)).all()


def _fit_from_params(rng, x):
    params = NET.init(jax.random.key(int(rng.integers(1 << 30))), jnp.asarray(x[:1]))
    return ac.AntiCausal(params=params, loc={"a": jnp.float32(rng.normal(40, 5))},
                         scale={"a": jnp.float32(rng.uniform(2, 10))}, loss=jnp.zeros(1), model=NET)


def test_predictions_match_reference_and_chunking(rng):
    x, _ = _data(rng, n=10)
    fit = _fit_from_params(rng, x)
    imgs = x.reshape(2, 5, 8, 8)
    pred = gp.predict_parents(fit, imgs, chunk=3)
    out = {k: np.asarray(v, np.float64) for k, v in NET.apply(fit.params, jnp.asarray(x)).items()}
    probs = np.exp(_log_softmax(out["s"]))
    loc, sc = float(fit.loc["a"]), float(fit.scale["a"])
    assert sorted(pred) == ["a", "a_scale", "s"]
    np.testing.assert_allclose(np.asarray(pred["s"]).reshape(10, 3), probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(pred["a"]).reshape(10), loc + sc * out["a"][:, 0], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.asarray(pred["a_scale"]).reshape(10),
                               sc * np.exp(np.clip(out["a"][:, 1], -7, 7)), rtol=1e-5)
    whole = gp.predict_parents(fit, imgs, chunk=256)
    for k in pred:
        assert pred[k].shape == whole[k].shape
        np.testing.assert_allclose(np.asarray(pred[k]), np.asarray(whole[k]), rtol=1e-5, atol=1e-5)


def test_masked_labels_are_ignored_in_training(rng):
    x, pa = _data(rng, n=16)
    mask = rng.uniform(size=(16, 2)) < 0.5
    mask[:2] = True
    seed = int(rng.integers(1 << 30))
    other = {"s": np.where(mask[:, 0], pa["s"], rng.integers(0, 3, 16)).astype(np.int32),
             "a": np.where(mask[:, 1], pa["a"], np.nan).astype(np.float32)}
    config = ac.AntiCausalConfig(steps=3, batch_size=4, chunk_steps=3, **TINY)
    kw = dict(mask=mask, progress=False)
    f1 = ac.train_anticausal(x, pa, SPEC, config, key=jax.random.key(seed), **kw)
    f2 = ac.train_anticausal(x, other, SPEC, config, key=jax.random.key(seed), **kw)
    assert np.isfinite(np.asarray(f1.loss)).all()
    for a, b in zip(jax.tree.leaves(f1.params), jax.tree.leaves(f2.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the Gaussian head's normalisation uses the observed labels only
    seen = pa["a"][mask[:, 1]].astype(np.float64)
    np.testing.assert_allclose(float(f1.loc["a"]), seen.mean(), rtol=1e-5)
    np.testing.assert_allclose(float(f1.scale["a"]), seen.std(), rtol=1e-5)
    # a mapping mask is the same as the array
    f3 = ac.train_anticausal(x, other, SPEC, config, key=jax.random.key(seed),
                             **{**kw, "mask": {"s": mask[:, 0], "a": mask[:, 1]}})
    for a, b in zip(jax.tree.leaves(f1.params), jax.tree.leaves(f3.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the keyword arguments of earlier releases: the same fit, and a warning naming the config
    with pytest.warns(DeprecationWarning, match=r"train_anticausal\(steps=, batch_size=, chunk_steps=, features=, "
                                                r"hidden=\).*config=AntiCausalConfig\("):
        f4 = ac.train_anticausal(x, pa, SPEC, key=jax.random.key(seed), steps=3, batch_size=4, chunk_steps=3,
                                 **TINY, **kw)
    for a, b in zip(jax.tree.leaves(f1.params), jax.tree.leaves(f4.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_training_learns_an_easy_task(rng):
    # 8 channels, 16 hidden units, 100 steps of 1e-2: with 4 channels, 4 hidden units and 60
    # steps of 3e-2 about 1 seed in 10 kept too few live ReLUs to separate the classes (0 in
    # 3,000 seeds now).
    n = 64
    s = rng.integers(0, 2, n)
    x = (rng.uniform(0, 0.2, (n, 8, 8)) + 0.6 * s[:, None, None]).astype(np.float32)
    spec = (ac.Head("s", "categorical", 2),)
    config = ac.AntiCausalConfig(steps=100, batch_size=16, learning_rate=1e-2, features=(8,), hidden=16)
    fit = ac.train_anticausal(x, {"s": s}, spec, config, key=jax.random.key(int(rng.integers(1 << 30))),
                              progress=False)
    acc = (np.asarray(gp.predict_parents(fit, x)["s"]).argmax(-1) == s).mean()
    assert acc >= 0.95


def test_entropy_weight_matches_numpy(rng):
    c = int(rng.integers(2, 6))
    p = rng.dirichlet(np.full(c, 0.5), size=(4, 3))
    p[0, 0] = np.eye(c)[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=-1)
    np.testing.assert_allclose(np.asarray(gp.entropy_weight(jnp.asarray(p, jnp.float32))),
                               1 - h / np.log(c), atol=1e-5)
    assert float(gp.entropy_weight(jnp.full((c,), 1.0 / c))) == pytest.approx(0.0, abs=1e-6)


def test_impute_keeps_observed_and_fills_missing(rng):
    x, pa = _data(rng, n=10)
    fit = _fit_from_params(rng, x)
    mask = rng.uniform(size=(10, 2)) < 0.5
    labels = {"s": np.where(mask[:, 0], pa["s"], -1), "a": np.where(mask[:, 1], pa["a"], np.nan)}
    out = gp.impute(fit, x, labels, mask)
    pred = gp.predict_parents(fit, x)
    p = np.asarray(pred["s"], np.float64)
    w_ref = 1 + np.sum(p * np.log(p), axis=-1) / np.log(3)
    np.testing.assert_array_equal(np.asarray(out.parents["s"]), np.where(mask[:, 0], pa["s"], p.argmax(-1)))
    np.testing.assert_allclose(np.asarray(out.weights["s"]), np.where(mask[:, 0], 1.0, w_ref), atol=1e-5)
    np.testing.assert_allclose(np.asarray(out.parents["a"]),
                               np.where(mask[:, 1], pa["a"], np.asarray(pred["a"])), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(out.weights["a"]), 1.0)
    assert out.parents["s"].dtype == jnp.int32 and out.parents["a"].dtype == jnp.float32


def test_bad_input_names_the_argument():
    rng = np.random.default_rng(0)
    x, pa = _data(rng, n=6)
    fit = _fit_from_params(rng, x)
    def train(*a, config=ac.AntiCausalConfig(steps=2, **TINY), **k):  # noqa: B008 (frozen)
        return ac.train_anticausal(*a, config, key=jax.random.key(0), progress=False, **k)

    cases = [
        ("images", lambda: train(x[0], pa, SPEC)),
        ("images", lambda: train(np.where(np.arange(6)[:, None, None] == 0, np.nan, x), pa, SPEC)),
        ("images", lambda: train((x * 10).astype(np.int32), pa, SPEC)),
        ("parents", lambda: train(x, {"s": pa["s"]}, SPEC)),
        ("parents", lambda: train(x, {**pa, "s": pa["s"] + 3}, SPEC)),
        ("parents", lambda: train(x, {**pa, "a": pa["a"][:5]}, SPEC)),
        ("mask", lambda: train(x, pa, SPEC, mask=np.ones((6, 3), bool))),
        ("mask", lambda: train(x, pa, SPEC, mask={"zz": np.ones(6, bool)})),
        ("mask", lambda: train(x, pa, SPEC, mask=np.zeros((6, 2), bool))),
        ("spec", lambda: train(x, pa, (SPEC[0], SPEC[0]))),
        ("steps", lambda: ac.AntiCausalConfig(steps=0)),
        ("warmup", lambda: ac.AntiCausalConfig(steps=2, warmup=5)),
        ("learning_rate", lambda: ac.AntiCausalConfig(learning_rate=float("nan"))),
        ("features", lambda: ac.AntiCausalConfig(features=())),
        ("features", lambda: train(x, pa, SPEC, config=ac.AntiCausalConfig(steps=2, features=(4, 4, 4, 4, 4)))),
        ("config", lambda: train(x, pa, SPEC, config={"steps": 2})),
        ("steps", lambda: ac.train_anticausal(x, pa, SPEC, key=0, steps=0)),  # an old keyword, checked alike
        ("classes", lambda: ac.Head("s", "categorical", 1)),
        ("kind", lambda: ac.Head("s", "poisson")),
        ("result", lambda: gp.predict_parents({"params": None}, x)),
        ("chunk", lambda: gp.predict_parents(fit, x, chunk=0)),
        ("images", lambda: gp.predict_parents(fit, x[0])),
        ("probs", lambda: gp.entropy_weight(jnp.array([[0.5, 1.5]]))),
        ("probs", lambda: gp.entropy_weight(jnp.array([[1.0]]))),
        ("mask", lambda: gp.impute(fit, x, pa, np.ones((6,), bool))),
    ]
    for name, call in cases:
        with pytest.raises(ValidationError, match=f"`{name}`"):
            call()
