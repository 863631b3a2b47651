"""Training the HVAE image mechanism (cfjax.generative.train): the loss falls, a run resumed
from its checkpoint equals an uninterrupted one, the NaN guard names the step, the EMA is the
numpy recursion of the raw parameters, missing labels are imputed with entropy weights, the
parent inputs are the SCM's encoding, bad input is rejected."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax as cf
from cfjax._checks import ValidationError
from cfjax.generative import anticausal as ac
from cfjax.generative import parents as gp
from cfjax.generative import train as gt
from cfjax.generative.hvae import HVAEConfig
from cfjax.generative.mechanism import ImageHVAE

HVAE = HVAEConfig(image_size=16, channels=(4, 4, 4), latent_dims=(0, 2, 2), sigma_min=0.05)
# One configuration (one compiled chunk) for every training run below.
CONFIG = gt.GeneratorConfig(HVAE, steps=60, batch_size=16, learning_rate=2e-3, warmup=2, ema_decay=0.9,
                            kl_warmup=10, free_bits=0.01, chunk_steps=30)
N = 32
_STEP = jax.jit(gt.train_step, static_argnums=0)  # one compiled step shared by the tests


def _scm() -> cf.scm.SCM:
    return cf.scm.SCM({"sex": [], "age": [], "image": ["sex", "age"]},
                      {"sex": cf.scm.GumbelMax(2), "age": cf.scm.LocationScale(), "image": ImageHVAE(HVAE)})


def _data(rng, n=N):
    sex = rng.integers(0, 2, n).astype(np.int32)
    age = rng.normal(size=n).astype(np.float32)
    mean = 0.3 + 0.4 * sex[:, None, None] + 0.05 * age[:, None, None]
    image = np.clip(mean + 0.05 * rng.normal(size=(n, 16, 16)), 0, 1).astype(np.float32)
    return {"sex": sex, "age": age, "image": image}


def _key(rng):
    return jax.random.key(int(rng.integers(2**31)))


def _leaves(tree):
    return [np.asarray(a) for a in jax.tree.leaves(tree)]


def test_loss_decreases(rng):
    fit = gt.fit_generator(_data(rng), CONFIG, scm=_scm(), progress=False, key=_key(rng))
    h = fit.history
    assert set(h) == {"step", "loss", "rec", "kl"}
    np.testing.assert_array_equal(h["step"], np.arange(CONFIG.steps))
    for name in ("loss", "rec", "kl"):
        assert h[name].shape == (CONFIG.steps,) and np.isfinite(h[name]).all()
    # medians: with a learned pixel scale a minibatch of badly fitted units makes a spike
    for name in ("rec", "loss"):
        assert np.median(h[name][-20:]) < np.median(h[name][:10]) - 0.05, h[name]
    assert (h["kl"] >= -1e-6).all()
    assert fit.mechanism == ImageHVAE(HVAE, CONFIG.temperature)
    assert any(not np.array_equal(a, b) for a, b in zip(_leaves(fit.params), _leaves(fit.raw_params)))


def test_resume_after_an_interruption_equals_an_uninterrupted_run(rng, tmp_path, monkeypatch):
    key, data, scm = _key(rng), _data(rng), _scm()
    whole = gt.fit_generator(data, CONFIG, scm=scm, progress=True, key=key)

    original = gt._ckpt.CheckpointStore.save

    def save_then_crash(self, step, state, meta):
        original(self, step, state, meta)
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(gt._ckpt.CheckpointStore, "save", save_then_crash)
    with pytest.raises(KeyboardInterrupt):
        gt.fit_generator(data, CONFIG, scm=scm, checkpoint_dir=tmp_path, progress=False, key=key)
    monkeypatch.setattr(gt._ckpt.CheckpointStore, "save", original)
    assert gt._ckpt.latest_checkpoint_step(tmp_path) == CONFIG.chunk_length

    resumed = gt.fit_generator(data, CONFIG, scm=scm, checkpoint_dir=tmp_path, progress=False, key=key)
    for a, b in zip(_leaves((whole.params, whole.raw_params)), _leaves((resumed.params, resumed.raw_params))):
        np.testing.assert_array_equal(a, b)
    for name in ("loss", "rec", "kl"):
        np.testing.assert_array_equal(whole.history[name], resumed.history[name])
    # a finished run's checkpoint gives the result back without training
    again = gt.fit_generator(data, CONFIG, scm=scm, checkpoint_dir=tmp_path, progress=False, max_chunks=1, key=key)
    for a, b in zip(_leaves(whole.params), _leaves(again.params)):
        np.testing.assert_array_equal(a, b)
    # another run (another key) does not resume from it
    with pytest.raises(ValidationError, match="`checkpoint_dir`"):
        gt.fit_generator(data, CONFIG, scm=scm, checkpoint_dir=tmp_path, progress=False, key=jax.random.fold_in(key, 1))


def test_nan_guard_names_the_step(rng):
    key, data = _key(rng), _data(rng)
    # Step t draws its minibatch from fold_in(data_key, t) (init_key, data_key = split(key)):
    # give a unit first drawn at step t* pixels so large that its likelihood overflows.
    _, data_key = jax.random.split(key)
    drawn = [set(np.asarray(jax.random.randint(jax.random.split(jax.random.fold_in(data_key, t))[0],
                                               (CONFIG.batch_size,), 0, N)).tolist()) for t in range(CONFIG.steps)]
    target = next(t for t in range(3, CONFIG.steps) if drawn[t] - set().union(*drawn[:t]))
    unit = min(drawn[target] - set().union(*drawn[:target]))
    image = data["image"].copy()
    image[unit] = 1e30
    with pytest.raises(cf.TrainingError, match=rf"NaN or infinite at step {target}\b"):
        gt.fit_generator({**data, "image": image}, CONFIG, scm=_scm(), progress=False, key=key)


def test_ema_is_the_recursion_of_the_raw_parameters(rng):
    key, data, scm = _key(rng), _data(rng), _scm()
    pa = gt.parent_inputs(scm, "image", data)
    train_data = gt.GeneratorData(jnp.asarray(data["image"]), pa, jnp.ones((N,), jnp.float32))
    init_key, data_key = jax.random.split(key)
    state = gt.init_state(CONFIG, 2, key=init_key)
    raw = [_leaves(state.params)]
    losses = []
    for t in range(4):
        state, metrics = _STEP(CONFIG, state, train_data, jax.random.fold_in(data_key, t))
        raw.append(_leaves(state.params))
        losses.append(float(metrics["loss"]))
    ema = [a.astype(np.float64) for a in raw[0]]
    for t, leaves in enumerate(raw[1:]):
        d = min(CONFIG.ema_decay, (1 + t) / (10 + t))  # the warmed-up decay
        ema = [d * e + (1 - d) * a for e, a in zip(ema, leaves)]
    for got, want in zip(_leaves(state.ema_params), ema):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert int(state.step) == 4
    # train() runs the same steps (its first losses are these, to float rounding)
    fit = gt.fit_generator(data, CONFIG, scm=scm, progress=False, key=key)
    np.testing.assert_allclose(fit.history["loss"][:4], losses, rtol=1e-4, atol=1e-5)


def test_loss_terms_are_linear_in_the_unit_weights(rng):
    """With the same minibatch and posterior draws (same state and key), the reconstruction and
    KL terms are weighted means: linear in the unit weights, a unit of weight 0 drops out."""
    data, scm = _data(rng), _scm()  # N units: the shapes of the EMA test's compiled step
    pa = gt.parent_inputs(scm, "image", data)
    state = gt.init_state(CONFIG, 2, key=_key(rng))
    state = state.replace(params=_perturbed(state.params, rng))
    key = _key(rng)

    def metrics(w, images=data["image"]):
        _, m = _STEP(CONFIG, state, gt.GeneratorData(jnp.asarray(images), pa, jnp.asarray(w, jnp.float32)), key)
        return {k: float(v) for k, v in m.items()}

    w1, w2 = rng.uniform(size=N), rng.uniform(size=N)
    m1, m2, m12, m3 = metrics(w1), metrics(w2), metrics(w1 + w2), metrics(3 * w1)
    for k in ("rec", "kl"):
        np.testing.assert_allclose(m12[k], m1[k] + m2[k], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(m3[k], 3 * m1[k], rtol=1e-4, atol=1e-6)
    assert m1["kl"] >= 0
    zero = np.zeros(N)
    np.testing.assert_allclose([metrics(zero)[k] for k in ("rec", "kl")], 0, atol=0)
    # a unit of weight 0 does not count, whatever its image
    w = w1.copy()
    w[3] = 0.0
    other = data["image"].copy()
    other[3] = rng.uniform(size=(16, 16))
    a, b = metrics(w), metrics(w, other)
    np.testing.assert_allclose([a["rec"], a["loss"]], [b["rec"], b["loss"]], rtol=1e-6, atol=1e-7)


def _perturbed(params, rng, scale=0.05):
    return jax.tree.map(lambda a: a + jnp.asarray(scale * rng.normal(size=a.shape), a.dtype), params)


def test_missing_labels_are_imputed_with_entropy_weights(rng):
    data, scm = _data(rng), _scm()
    spec = (ac.Head("sex", "categorical", 2), ac.Head("age", "gaussian"))
    q = ac.train_anticausal(data["image"], {"sex": data["sex"], "age": data["age"]}, spec,
                            ac.AntiCausalConfig(steps=3, batch_size=8, features=(4,), hidden=4),
                            progress=False, key=_key(rng))
    seen_sex = rng.uniform(size=N) < 0.5
    seen_age = rng.uniform(size=N) < 0.7
    seen_sex[0], seen_age[0] = True, True
    hidden = {**data, "sex": np.where(seen_sex, data["sex"], -1).astype(np.int32),
              "age": np.where(seen_age, data["age"], np.nan).astype(np.float32)}
    mask = {"sex": seen_sex, "age": seen_age}
    completed, weights = gt.impute_parents(scm, "image", hidden, mask, q)

    pred = gp.predict_parents(q, data["image"])
    probs = np.asarray(pred["sex"], np.float64)
    entropy = -np.sum(np.where(probs > 0, probs * np.log(np.where(probs > 0, probs, 1)), 0), axis=-1)
    want = np.where(seen_sex, 1.0, 1.0 - entropy / np.log(2))
    np.testing.assert_allclose(np.asarray(weights), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(completed["sex"]),
                                  np.where(seen_sex, data["sex"], probs.argmax(axis=-1)))
    np.testing.assert_allclose(np.asarray(completed["age"]),
                               np.where(seen_age, data["age"], np.asarray(pred["age"])), rtol=1e-6, atol=1e-6)
    # without a mask every unit weighs 1; training with the mask runs on the imputed parents
    _, ones = gt.impute_parents(scm, "image", data)
    np.testing.assert_array_equal(np.asarray(ones), np.ones(N))
    fit = gt.fit_generator(hidden, CONFIG, scm=scm, mask=mask, anticausal=q, progress=False, key=_key(rng))
    assert np.isfinite(fit.history["loss"]).all()


def test_imputed_values_stay_in_a_bounded_parents_support(rng):
    """A Gaussian head's predicted mean outside a bounded parent's support is clipped into it
    (a bounded spline rejects such data): here the predictor is shifted to predict about ±50."""
    data = _data(rng)
    low, high = -1.5, 2.0
    scm = cf.scm.SCM({"sex": [], "age": [], "image": ["sex", "age"]},
                     {"sex": cf.scm.GumbelMax(2), "age": cf.scm.Spline(low=low, high=high), "image": ImageHVAE(HVAE)})
    data["age"] = np.clip(data["age"], low, high)
    spec = (ac.Head("age", "gaussian"),)
    q = ac.train_anticausal(data["image"], {"age": data["age"]}, spec,
                            ac.AntiCausalConfig(steps=2, batch_size=8, features=(4,), hidden=4),
                            progress=False, key=_key(rng))
    shift = float(rng.choice([-50.0, 50.0]))
    q = q.replace(loc={"age": jnp.asarray(shift, jnp.float32)})
    seen = rng.uniform(size=N) < 0.5
    seen[0] = True
    hidden = {**data, "age": np.where(seen, data["age"], np.nan).astype(np.float32)}
    pred = np.asarray(gp.predict_parents(q, data["image"])["age"])
    assert np.all((pred < low) | (pred > high))  # every prediction leaves the support
    completed, weights = gt.impute_parents(scm, "image", hidden, {"age": seen}, q)
    want = np.where(seen, data["age"], np.clip(pred, low, high))
    np.testing.assert_allclose(np.asarray(completed["age"]), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(weights), np.ones(N))
    gt.parent_inputs(scm, "image", completed)  # accepted by the SCM's checks


def test_parent_inputs_match_a_numpy_encoding(rng):
    scm = cf.scm.SCM({"sex": [], "race": [], "age": [], "image": ["race", "sex", "age"]},
                     {"sex": cf.scm.GumbelMax(2), "race": cf.scm.GumbelMax(3), "age": cf.scm.LocationScale(),
                      "image": ImageHVAE(HVAE)})
    n = 7
    sex, race, age = rng.integers(0, 2, n), rng.integers(0, 3, n), rng.normal(size=n).astype(np.float32)
    got = np.asarray(gt.parent_inputs(scm, "image", {"sex": sex, "race": race, "age": age}))
    want = np.concatenate([np.eye(3)[race], sex[:, None], age[:, None]], axis=1)
    np.testing.assert_allclose(got, want, rtol=0, atol=0)


def test_bad_input_names_the_argument(rng):
    data, scm = _data(rng, 8), _scm()
    key = jax.random.key(0)
    with pytest.raises(ValidationError, match=r"`data\['image'\]`.*\(N, 16, 16\)"):
        gt.fit_generator({**data, "image": data["image"][:, :8, :8]}, CONFIG, scm=scm, key=key)
    bad = data["image"].copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValidationError, match=r"`data\['image'\]`.*NaN"):
        gt.fit_generator({**data, "image": bad}, CONFIG, scm=scm, key=key)
    with pytest.raises(ValidationError, match=r"`data`: missing column 'age'"):
        gt.fit_generator({"sex": data["sex"], "image": data["image"]}, CONFIG, scm=scm, key=key)
    with pytest.raises(ValidationError, match="`anticausal`"):
        gt.fit_generator(data, CONFIG, scm=scm, mask={"sex": np.ones(8, bool)}, key=key)
    with pytest.raises(ValidationError, match="`node`"):
        gt.fit_generator(data, CONFIG, scm=scm, node="sex", key=key)
    with pytest.raises(ValidationError, match="`scm`"):
        gt.fit_generator(data, CONFIG, scm="not an scm", key=key)
    with pytest.raises(ValidationError, match="`config`"):
        gt.fit_generator(data, "config", scm=scm, key=key)
    for field, value in (("steps", 0), ("warmup", 40), ("ema_decay", 1.0), ("free_bits", -1.0),
                         ("temperature", -0.1), ("clip_norm", 0.0), ("kl_warmup", -1), ("hvae", None),
                         ("learning_rate", float("nan")), ("chunk_steps", 0)):
        kwargs = {"steps": 40, "warmup": 2, field: value}
        with pytest.raises(ValidationError, match=f"`{field}`"):
            gt.GeneratorConfig(**kwargs)
    assert hash(CONFIG) == hash(gt.GeneratorConfig(**{f: getattr(CONFIG, f) for f in CONFIG.__dataclass_fields__}))


# ----------------------------------------------------------------------- counterfactual regulariser
def _cf_scm():
    return cf.scm.SCM({"sex": [], "race": [], "age": [], "image": ["sex", "age", "race"]},
                      {"sex": cf.scm.GumbelMax(2), "race": cf.scm.GumbelMax(3), "age": cf.scm.LocationScale(),
                       "image": ImageHVAE(HVAE)})


# a smaller network for the regulariser's own compiled programs
SMALL = HVAEConfig(image_size=16, channels=(4, 4), latent_dims=(2, 2), sigma_min=0.05)
SMALL_CONFIG = gt.GeneratorConfig(SMALL, steps=4, batch_size=8, warmup=1, kl_warmup=0, chunk_steps=4)
_CF_SPEC = (ac.Head("race", "categorical", 3), ac.Head("sex", "categorical", 2), ac.Head("age", "gaussian"))


def _frozen_predictor(rng, spec=_CF_SPEC):
    net = ac.ParentPredictor(spec, features=(4,), hidden=4)
    params = _perturbed(jax.jit(net.init)(_key(rng), jnp.zeros((1, 16, 16))), rng, 0.3)
    # positive biases: the ReLUs are live, the outputs depend on the image (no zero gradient)
    params = jax.tree_util.tree_map_with_path(
        lambda path, v: v + 2.0 if getattr(path[-1], "key", None) == "bias" else v, params)
    return ac.AntiCausal(params, {"age": jnp.float32(rng.normal())}, {"age": jnp.float32(rng.uniform(0.5, 2))},
                         jnp.zeros((1,), jnp.float32), net)


def _np_head_losses(outputs, targets, q):
    """Per unit, the sum over heads of cross-entropy / Gaussian NLL (numpy, float64)."""
    total = 0.0
    for j, h in enumerate(_CF_SPEC):
        out = np.asarray(outputs[h.name], np.float64)[0]
        if h.kind == "categorical":
            m = out.max()
            total += m + np.log(np.exp(out - m).sum()) - out[int(targets[j])]
        else:
            z = (targets[j] - float(q.loc["age"])) / float(q.scale["age"])
            log_s = np.clip(out[1], -7, 7)
            total += 0.5 * ((z - out[0]) * np.exp(-log_s)) ** 2 + log_s + 0.5 * np.log(2 * np.pi)
    return total


def test_counterfactual_regulariser_matches_a_per_unit_loop(rng):
    scm, q, b = _cf_scm(), _frozen_predictor(rng), 5
    n = 12
    data = {"sex": rng.integers(0, 2, n).astype(np.int32), "race": rng.integers(0, 3, n).astype(np.int32),
            "age": rng.normal(size=n).astype(np.float32)}
    reg = gt.make_regulariser(scm, "image", q, data)
    assert reg.slots == ((2, 3), (0, 1), (1, 1))  # parent vector [sex, age, one-hot race]
    pa = gt.parent_inputs(scm, "image", data)
    labels = np.stack([data["race"], data["sex"], data["age"]], axis=1).astype(np.float32)

    # the interventions: one head per unit, a new class or an observed value, the rest held
    draw = jax.jit(gt.counterfactual_targets)
    pa_star, targets, head = draw(reg, _key(rng), jnp.asarray(labels), pa)
    pa_star, targets, head = np.asarray(pa_star), np.asarray(targets), np.asarray(head)
    for i in range(n):
        j = head[i]
        held = [k for k in range(3) if k != j]
        np.testing.assert_array_equal(targets[i, held], labels[i, held])
        if j < 2:
            assert targets[i, j] != labels[i, j] and targets[i, j] in range(_CF_SPEC[j].classes)
        else:
            assert targets[i, j] in data["age"]
        race = int(targets[i, 0])
        want = np.concatenate([[targets[i, 1], targets[i, 2]], np.eye(3)[race]])
        np.testing.assert_allclose(pa_star[i], want, rtol=0, atol=0)
    many = [np.asarray(draw(reg, jax.random.fold_in(_key(rng), t), jnp.asarray(labels), pa)[2]) for t in range(20)]
    assert set(np.concatenate(many).tolist()) == {0, 1, 2}

    # the loss: abduct (one posterior draw), decode with pa*, score with q; a loop over units
    params = _perturbed(gt.init_state(SMALL_CONFIG, 5, key=_key(rng)).params, rng)
    images = jnp.asarray(rng.uniform(0.2, 0.8, size=(b, 16, 16)).astype(np.float32))
    key = _key(rng)
    # (value and gradients in one compiled call: in the HVAE's parameters and the predictors')
    loss = jax.jit(jax.value_and_grad(lambda p, r: gt.counterfactual_loss(
        SMALL_CONFIG, p, r, images, pa[:b], jnp.asarray(pa_star[:b]), jnp.asarray(targets[:b]), key), argnums=(0, 1)))
    got, (g_hvae, g_q) = loss(params, reg)
    shapes = SMALL.latent_shapes
    xi = [jax.random.normal(k, (b,) + s, jnp.float32) for k, s in zip(jax.random.split(key, len(shapes)), shapes)]
    model = gt.HVAE(SMALL)

    @jax.jit
    def one_unit(p, x, n, p_star):  # batches of one
        out = model.apply(params, p, x, n, 1.0)
        eps = (x - out.loc) / jnp.exp(out.log_scale)
        dec = model.apply(params, p_star, None, out.eps)
        return q.model.apply(q.params, dec.loc + jnp.exp(dec.log_scale) * eps)

    per_unit = [_np_head_losses(one_unit(pa[i:i + 1], images[i:i + 1], tuple(x[i:i + 1] for x in xi),
                                         jnp.asarray(pa_star[i:i + 1])), targets[i], q) for i in range(b)]
    np.testing.assert_allclose(float(got), np.mean(per_unit), rtol=1e-4)
    # differentiable in the HVAE's parameters, frozen in the predictors'
    assert any(np.abs(a).max() > 0 for a in _leaves(g_hvae))
    assert all(np.abs(a).max() == 0 for a in _leaves(g_q.predictor.params))


def test_cf_weight_zero_is_the_plain_elbo_and_positive_adds_the_term(rng):
    scm, q = _scm(), _frozen_predictor(rng, _CF_SPEC[1:])
    data, key = _data(rng), _key(rng)
    plain = gt.fit_generator(data, CONFIG, scm=scm, progress=False, key=key)  # (the other tests' compiled chunk)
    ignored = gt.fit_generator(data, CONFIG, scm=scm, regulariser=q, progress=False, key=key)
    for a, b in zip(_leaves((plain.params, plain.raw_params)), _leaves((ignored.params, ignored.raw_params))):
        np.testing.assert_array_equal(a, b)
    assert set(ignored.history) == {"step", "loss", "rec", "kl"}
    # with the regulariser (no free bits, KL weight 1 from the start): loss = rec + kl + w·cf
    config = dataclasses.replace(SMALL_CONFIG, cf_weight=0.5, cf_warmup=2)
    fit = gt.fit_generator(data, config, scm=scm, regulariser=q, progress=False, key=key)
    h = fit.history
    w = 0.5 * np.minimum(np.arange(4) / 2, 1)
    np.testing.assert_allclose(h["loss"], h["rec"] + h["kl"] + w * h["cf"], rtol=1e-5, atol=1e-6)
    assert (h["cf"] > 0).all()


def test_regulariser_bad_input_names_the_argument(rng):
    data, scm = _data(rng, 8), _scm()
    key = jax.random.key(0)
    config = gt.GeneratorConfig(HVAE, steps=4, warmup=1, cf_weight=1.0)
    with pytest.raises(ValidationError, match="`regulariser`"):
        gt.fit_generator(data, config, scm=scm, key=key)
    with pytest.raises(ValidationError, match="`regulariser`"):
        gt.fit_generator(data, config, scm=scm, regulariser="q", key=key)
    with pytest.raises(ValidationError, match="`regulariser`.*head 'race'"):  # not a parent of the image
        gt.fit_generator(data, config, scm=scm, regulariser=_frozen_predictor(rng), key=key)
    for field, value in (("cf_weight", -1.0), ("cf_weight", float("inf")), ("cf_warmup", -1)):
        with pytest.raises(ValidationError, match=f"`{field}`"):
            gt.GeneratorConfig(steps=40, warmup=2, **{field: value})
