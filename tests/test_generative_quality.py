"""cfjax.generative.quality: counterfactual-quality measures against numpy references and
closed forms on toy image mechanisms (exact, biased, lossy, stochastic), and on a tiny HVAE."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cfjax._checks import ValidationError
from cfjax.generative import anticausal as ac
from cfjax.generative import parents as gp
from cfjax.generative import quality as q
from cfjax.generative.hvae import HVAEConfig
from cfjax.generative.mechanism import ImageHVAE
from cfjax.scm.mechanism import Mechanism


@dataclasses.dataclass(frozen=True)
class ToyImage(Mechanism):
    """``x = u + Σ_p pa_p w_p + bias``; abduction ``gain·(x − Σ_p pa_p w_p) + noise·ξ``:
    exact for gain 1, bias 0, noise 0."""

    size: int = 4
    gain: float = 1.0
    bias: float = 0.0
    noise: float = 0.0

    @property
    def stochastic_abduction(self):
        return self.noise > 0

    @property
    def event_shape(self):
        return (self.size, self.size)

    def init(self, key, parent_dim):
        return {"w": jax.random.normal(key, (parent_dim, self.size, self.size))}

    def sample_noise(self, key):
        return jax.random.normal(key, self.event_shape)

    def _mean(self, params, pa):
        return jnp.tensordot(pa, params["w"], axes=1)

    def forward(self, params, u, pa):
        return u + self._mean(params, pa) + self.bias

    def abduct(self, params, x, pa, key):
        u = self.gain * (x - self._mean(params, pa))
        if self.noise > 0:
            u = u + self.noise * jax.random.normal(key, x.shape)
        return u

    def log_prob(self, params, x, pa):
        return jnp.zeros(())


def _toy(rng, mech, n=6, p=3):
    params = mech.init(jax.random.key(int(rng.integers(1 << 30))), p)
    x = jnp.asarray(rng.uniform(size=(n, mech.size, mech.size)), jnp.float32)
    pa = jnp.asarray(rng.normal(size=(n, p)), jnp.float32)
    return params, x, pa


def test_exact_mechanism_composes_and_reverses_to_identity(rng):
    mech = ToyImage()
    params, x, pa = _toy(rng, mech)
    comp = q.composition(mech, params, x, pa, n_times=10)
    assert comp.shape == (10,)
    np.testing.assert_allclose(np.asarray(comp), 0.0, atol=1e-5)
    targets = jnp.asarray(rng.normal(size=(6, 4, 3)), jnp.float32)
    rev = q.reversibility(mech, params, x, pa, targets)
    assert rev.shape == (4,)
    np.testing.assert_allclose(np.asarray(rev), 0.0, atol=1e-5)


def test_bias_accumulates_linearly(rng):
    b = float(rng.uniform(0.01, 0.1)) * float(rng.choice([-1, 1]))
    mech = ToyImage(bias=b)
    params, x, pa = _toy(rng, mech)
    comp = q.composition(mech, params, x, pa, n_times=10, per_unit=True)
    assert comp.shape == (6, 10)
    np.testing.assert_allclose(np.asarray(comp), np.ones((6, 1)) * np.arange(1, 11)[None, :] * abs(b), rtol=1e-4)
    rev = q.reversibility(mech, params, x, pa, jnp.asarray(rng.normal(size=(2, 3)), jnp.float32))
    np.testing.assert_allclose(np.asarray(rev), 2 * abs(b), rtol=1e-4)


def test_lossy_abduction_matches_closed_form(rng):
    c = float(rng.uniform(0.7, 0.95))
    mech = ToyImage(gain=c)
    params, x, pa = _toy(rng, mech)
    resid = np.abs(np.asarray(x, np.float64) - np.einsum("np,phw->nhw", np.asarray(pa, np.float64),
                                                         np.asarray(params["w"], np.float64))).mean(axis=(1, 2))
    comp = q.composition(mech, params, x, pa, n_times=5, per_unit=True, chunk=4)
    ref = np.abs(c ** np.arange(1, 6)[None, :] - 1) * resid[:, None]
    np.testing.assert_allclose(np.asarray(comp), ref, rtol=1e-3, atol=1e-6)
    # chunking (the last block padded) gives the same figures
    np.testing.assert_allclose(np.asarray(q.composition(mech, params, x, pa, n_times=5, per_unit=True)),
                               np.asarray(comp), rtol=1e-5, atol=1e-6)
    targets = jnp.asarray(rng.normal(size=(6, 3, 3)), jnp.float32)
    rev = q.reversibility(mech, params, x, pa, targets, per_unit=True, chunk=4)
    np.testing.assert_allclose(np.asarray(rev), np.broadcast_to(abs(c * c - 1) * resid[:, None], (6, 3)), rtol=1e-3,
                               atol=1e-6)


def test_stochastic_abduction_uses_the_key(rng):
    s = float(rng.uniform(0.05, 0.2))
    mech = ToyImage(size=16, noise=s)
    params, x, pa = _toy(rng, mech, n=64)
    seed = int(rng.integers(1 << 30))
    key = jax.random.key(seed)
    comp = np.asarray(q.composition(mech, params, x, pa, n_times=2, key=key))
    # an int seed is the same key (docs/contract.md)
    np.testing.assert_array_equal(comp, np.asarray(q.composition(mech, params, x, pa, n_times=2, key=seed)))
    # after one cycle x + s·ξ: E|s·ξ| = s·sqrt(2/π); after two, s·sqrt(2)·sqrt(2/π)
    np.testing.assert_allclose(comp, s * np.sqrt(2 / np.pi) * np.sqrt([1.0, 2.0]), rtol=0.05)
    np.testing.assert_array_equal(comp, np.asarray(q.composition(mech, params, x, pa, n_times=2, key=key)))
    other = np.asarray(q.composition(mech, params, x, pa, n_times=2, key=jax.random.fold_in(key, 1)))
    assert not np.array_equal(comp, other)


def test_hvae_null_intervention_is_exact():
    cfg = HVAEConfig(image_size=8, channels=(4, 4), latent_dims=(2, 2))
    mech = ImageHVAE(cfg, temperature=0.0)
    params = mech.init(jax.random.key(0), 2)
    x = jax.random.uniform(jax.random.key(1), (3, 8, 8))
    pa = jnp.array([[0.0, 1.0], [1.0, 0.5], [0.0, -1.0]])
    comp = q.composition(mech, params, x, pa, n_times=2)
    np.testing.assert_allclose(np.asarray(comp), 0.0, atol=1e-4)


def test_effectiveness_matches_numpy(rng):
    spec = (ac.Head("s", "categorical", 2), ac.Head("a", "gaussian"), ac.Head("r", "categorical", 3))
    net = ac.ParentPredictor(spec, features=(4,), hidden=4)
    k, n = 3, 5
    images = rng.uniform(size=(n, k, 8, 8)).astype(np.float32)
    params = net.init(jax.random.key(int(rng.integers(1 << 30))), jnp.zeros((1, 8, 8)))
    fit = ac.AntiCausal(params=params, loc={"a": jnp.float32(50.0)}, scale={"a": jnp.float32(10.0)},
                        loss=jnp.zeros(1), model=net)
    pred = {kk: np.asarray(v, np.float64) for kk, v in gp.predict_parents(fit, images).items()}
    parents = {"s": rng.integers(0, 2, (n, k)), "a": rng.uniform(20, 90, (n, k)).astype(np.float32),
               "r": rng.integers(0, 3, (n, k))}
    parents["s"][:, 0] = pred["s"][:, 0].argmax(-1)  # intervention 0 recovered exactly for sex
    out = q.effectiveness(fit, images, parents)
    assert sorted(out) == ["a_mae", "r_accuracy", "s_accuracy"]
    np.testing.assert_allclose(float(out["s_accuracy"]), (pred["s"].argmax(-1) == parents["s"]).mean(), atol=1e-6)
    np.testing.assert_allclose(float(out["r_accuracy"]), (pred["r"].argmax(-1) == parents["r"]).mean(), atol=1e-6)
    np.testing.assert_allclose(float(out["a_mae"]), np.abs(pred["a"] - parents["a"]).mean(), rtol=1e-5)
    by = q.effectiveness(fit, images, parents, heads=("s", "a"), by_intervention=True, chunk=4)
    assert sorted(by) == ["a_mae", "s_accuracy"] and by["s_accuracy"].shape == (k,)
    assert float(by["s_accuracy"][0]) == 1.0
    np.testing.assert_allclose(np.asarray(by["a_mae"]), np.abs(pred["a"] - parents["a"]).mean(axis=0), rtol=1e-5)
    ceiling = q.effectiveness_ceiling(fit, images, parents)
    for kk in out:
        np.testing.assert_allclose(float(ceiling[kk]), float(out[kk]))
    gap = q.relative_gap(out, {kk: 2 * v for kk, v in out.items()})
    np.testing.assert_allclose([float(v) for v in gap.values()], -0.5, rtol=1e-6)


def test_pixel_mae_and_agreement_match_numpy(rng):
    a = rng.uniform(size=(3, 4, 5, 5)).astype(np.float32)
    b = rng.uniform(size=(3, 4, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(float(q.pixel_mae(a, b)), np.abs(a - b).mean(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(q.pixel_mae(a, b, by_intervention=True)),
                               np.abs(a - b).mean(axis=(0, 2, 3)), rtol=1e-5)
    assert float(q.pixel_mae(a, a)) == 0.0
    pa, pb = rng.uniform(size=(20, 3)).astype(np.float32), rng.uniform(size=(20, 3)).astype(np.float32)
    t = float(rng.uniform(0.2, 0.8))
    ref = ((pa >= t) == (pb >= t))
    np.testing.assert_allclose(float(q.decision_agreement(pa, pb, t)), ref.mean(), atol=1e-6)
    np.testing.assert_allclose(np.asarray(q.decision_agreement(pa, pb, t, by_intervention=True)),
                               ref.mean(axis=0), atol=1e-6)
    assert float(q.decision_agreement(pa, pa)) == 1.0


def test_bad_input_names_the_argument():
    rng = np.random.default_rng(0)
    mech = ToyImage()
    params, x, pa = _toy(rng, mech)
    bad_x = np.asarray(x).copy()
    bad_x[0, 0, 0] = np.nan
    spec = (ac.Head("s", "categorical", 2),)
    net = ac.ParentPredictor(spec, features=(4,), hidden=4)
    fit = ac.AntiCausal(params=net.init(jax.random.key(0), jnp.zeros((1, 8, 8))), loc={}, scale={},
                        loss=jnp.zeros(1), model=net)
    imgs = jnp.zeros((2, 3, 8, 8))
    cases = [
        ("mechanism", lambda: q.composition("toy", params, x, pa)),
        ("images", lambda: q.composition(mech, params, x[:, :3], pa)),
        ("images", lambda: q.composition(mech, params, bad_x, pa)),
        ("parents", lambda: q.composition(mech, params, x, pa[:2])),
        ("n_times", lambda: q.composition(mech, params, x, pa, n_times=0)),
        ("key", lambda: q.composition(mech, params, x, pa, key="3")),
        ("targets", lambda: q.reversibility(mech, params, x, pa, jnp.zeros((5, 2, 3)))),
        ("predictors", lambda: q.effectiveness(params, imgs, {"s": jnp.zeros((2, 3))})),
        ("parents", lambda: q.effectiveness(fit, imgs, {"s": jnp.zeros((3, 2))})),
        ("parents", lambda: q.effectiveness(fit, imgs, {})),
        ("heads", lambda: q.effectiveness(fit, imgs, {"s": jnp.zeros((2, 3))}, heads=("age",))),
        ("images", lambda: q.effectiveness(fit, jnp.zeros((8, 8)), {"s": jnp.zeros(())})),
        ("exact", lambda: q.pixel_mae(imgs, imgs[:1])),
        ("learned", lambda: q.pixel_mae(jnp.zeros((2, 3), jnp.int32), jnp.zeros((2, 3), jnp.int32))),
        ("threshold", lambda: q.decision_agreement(jnp.zeros(3), jnp.zeros(3), float("nan"))),
    ]
    for name, call in cases:
        with pytest.raises(ValidationError, match=f"`{name}`"):
            call()
