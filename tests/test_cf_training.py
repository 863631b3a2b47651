"""Counterfactual training in the ensemble trainer: the counterfactual sources against the
evaluation code's counterfactuals, one training step of every objective against a hand-written
loss and one AdamW update, zero strength and the grouping of members by objective as basic
training bit for bit, checkpoint resume with objectives, the members over two devices, and
clear errors."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import cfjax as cf
from cfjax import predictors as cp
from cfjax.generative import HVAEConfig, ImageHVAE, decoded_counterfactuals
from cfjax.predictors import Objective
from cfjax.predictors.ensemble import _plan
from cfjax.predictors.objectives import draw_interventions
from cfjax.predictors.sources import StoredCounterfactuals, check_source
from cfjax.predictors.step import _sample
from cfjax.study.learned import learned_images

SIZE = 32
MODEL = cp.EffusionCNN(features=(4,))
# One configuration for every training test (two rounds of two steps), so that each ensemble's
# round program compiles once for all of them.
CONFIG = cp.EnsembleConfig(steps=4, batch_size=8, learning_rate=1e-2, warmup=1, eval_every=2, patience=5,
                           eval_chunk=32)
QUIET = cp.TrainOptions(progress=False)
N, V = 48, 32


def chest_problem(rng, k_age=2):
    """Chest records (N training, V validation with both classes), a sex × age grid of K
    interventions with random weights, and its exact counterfactual source."""
    chest = cf.data.ChestSCM(size=SIZE, effusion_size=0.4)
    seed = int(rng.integers(2**31))
    rec = chest.sample(N, key=seed)
    for i in range(1, 100):  # a validation set with both classes
        val = chest.sample(V, key=seed + i)
        if 0 < int(np.sum(val["parents"]["effusion"])) < V:
            break
    do, _ = cf.scm.intervention_grid({"sex": [0, 1], "age": rng.uniform(20.0, 90.0, k_age)})
    q = rng.dirichlet(np.ones(2 * k_age)).astype(np.float32)
    src = chest.counterfactual_source(rec, do, key=seed + 1000, weights=q)
    return chest, rec, val, do, src


def synthetic_problem(rng, k=3):
    """A training set (N units, labels shown by a bright band), a validation set with both
    classes, and a stored source of K noisy copies of each training image with random weights."""
    def draw(n):
        y = rng.integers(0, 2, n)
        y[:2] = [0, 1]
        band = (np.arange(SIZE) // 4 % 2)[None, :, None] * rng.uniform(0.1, 0.3, (n, 1, 1)) * y[:, None, None]
        x = 0.3 + 0.3 * rng.uniform(size=(n, SIZE, SIZE)) + band
        return np.clip(x, 0, 1).astype(np.float32), y.astype(np.int32)

    (x, y), (vx, vy) = draw(N), draw(V)
    x_cf = np.clip(x[:, None] + rng.normal(scale=0.2, size=(N, k, SIZE, SIZE)), 0, 1).astype(np.float32)
    src = StoredCounterfactuals(jnp.asarray(x_cf), jnp.asarray(rng.dirichlet(np.ones(k)), jnp.float32))
    return x, y, vx, vy, src


def tree_equal(a, b):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert np.array_equal(np.asarray(u), np.asarray(v))


def member(tree, m):
    return jax.tree.map(lambda a: a[m], tree)


# --- sources -------------------------------------------------------------------------------------------


def test_chest_source_renders_the_exact_counterfactuals(rng):
    chest, rec, _, do, _ = chest_problem(rng)
    k = do["sex"].shape[0]
    key = int(rng.integers(2**31))
    idx = jnp.asarray(rng.integers(0, N, 6))
    which = jnp.asarray(rng.integers(0, k, (6, 3)))
    for label in ("fixed", "follows"):
        src = chest.counterfactual_source(rec, do, key=key, label=label)
        assert src.num_units == N
        np.testing.assert_array_equal(np.asarray(src.weights), np.full(k, 1 / k, np.float32))  # uniform default
        want = chest.counterfactuals(rec, do, key=key, label=label)
        got = np.asarray(jax.jit(type(src).images)(src, idx, which))
        assert got.shape == (6, 3, SIZE, SIZE)
        np.testing.assert_allclose(got, np.asarray(want["image"])[np.asarray(idx)[:, None], np.asarray(which)],
                                   atol=1e-5)
        for v in src.parents:
            np.testing.assert_array_equal(np.asarray(src.parents[v]), np.asarray(want["parents"][v]))
        if label == "fixed":  # the label held at each unit's factual effusion
            np.testing.assert_array_equal(np.asarray(src.parents["effusion"]),
                                          np.repeat(np.asarray(rec["parents"]["effusion"])[:, None], k, 1))
    q = rng.dirichlet(np.ones(k))
    src = chest.counterfactual_source(rec, do, key=key, weights=q)
    np.testing.assert_allclose(np.asarray(src.weights), q, rtol=1e-6)
    with pytest.raises(ValueError, match="`label`"):
        chest.counterfactual_source(rec, do, key=key, label="free")
    for bad in (np.ones(k), np.full(k + 1, 1 / (k + 1)), np.r_[-0.5, 1.5, np.zeros(k - 2)]):
        with pytest.raises(ValueError, match="`weights`"):
            chest.counterfactual_source(rec, do, key=key, weights=bad)


def test_decoded_source_equals_learned_images(rng):
    mech = ImageHVAE(HVAEConfig(image_size=16, channels=(4, 4, 4), latent_dims=(0, 2, 2)), temperature=1.0)
    n, k, p = 5, 3, 3
    params = jax.jit(mech.init, static_argnums=1)(jax.random.key(int(rng.integers(2**31))), p)
    x = jnp.asarray(rng.uniform(size=(n, 16, 16)), jnp.float32)
    pa = jnp.asarray(rng.uniform(size=(n, p)), jnp.float32)
    pa_cf = jnp.asarray(rng.uniform(size=(n, k, p)), jnp.float32)  # (N, K, P), as both take it
    seed = int(rng.integers(2**31))
    want = np.asarray(learned_images(mech, params, x, pa, pa_cf, key=jax.random.key(seed), chunk=2))
    src = decoded_counterfactuals(mech, params, x, pa, pa_cf, key=seed, chunk=2)
    assert src.num_units == n
    np.testing.assert_allclose(np.asarray(src.weights), np.full(k, 1 / k), rtol=1e-6)
    idx = rng.integers(0, n, 4)
    which = rng.integers(0, k, (4, 2))
    got = np.asarray(jax.jit(type(src).images)(src, jnp.asarray(idx), jnp.asarray(which)))
    np.testing.assert_allclose(got, want[idx[:, None], which], atol=1e-5)
    check_source(src, n, (16, 16))
    with pytest.raises(ValueError, match="`counterfactuals`"):  # a source of other units
        check_source(src, n + 1, (16, 16))
    bad = {"mechanism": lambda: decoded_counterfactuals("hvae", params, x, pa, pa_cf, key=0),
           "images": lambda: decoded_counterfactuals(mech, params, x[0], pa, pa_cf, key=0),
           "parents": lambda: decoded_counterfactuals(mech, params, x, pa[:-1], pa_cf, key=0),
           "parents_cf": lambda: decoded_counterfactuals(mech, params, x, pa, jnp.swapaxes(pa_cf, 0, 1),
                                                         key=0),  # (K, N, P)
           "weights": lambda: decoded_counterfactuals(mech, params, x, pa, pa_cf, key=0, weights=np.ones(k)),
           "chunk": lambda: decoded_counterfactuals(mech, params, x, pa, pa_cf, key=0, chunk=0)}
    for name, call in bad.items():
        with pytest.raises(ValueError, match=f"`{name}`"):
            call()


def test_stored_source_gathers_and_bad_sources_are_named(rng):
    n, k = 7, 4
    imgs = rng.uniform(size=(n, k, 5, 6)).astype(np.float32)
    src = StoredCounterfactuals(jnp.asarray(imgs), jnp.asarray(rng.dirichlet(np.ones(k)), jnp.float32))
    idx, which = rng.integers(0, n, 9), rng.integers(0, k, (9, 3))
    got = np.asarray(src.images(jnp.asarray(idx), jnp.asarray(which)))
    want = np.stack([np.stack([imgs[idx[b], which[b, j]] for j in range(3)]) for b in range(9)])
    np.testing.assert_array_equal(got, want)
    assert src.num_units == n
    check_source(src, n, (5, 6))

    x, y, vx, vy, good = synthetic_problem(rng)
    q = jnp.full((3,), 1 / 3, jnp.float32)
    bad = {"not a source": np.zeros((N, 3, SIZE, SIZE), np.float32),
           "image shape": StoredCounterfactuals(jnp.zeros((N, 3, 16, 16)), q),
           "units": StoredCounterfactuals(jnp.zeros((N - 1, 3, SIZE, SIZE)), q),
           "units (gathered)": StoredCounterfactuals(jnp.zeros((N + 1, 3, SIZE, SIZE)), q),
           "weights": StoredCounterfactuals(jnp.zeros((N, 3, SIZE, SIZE)), jnp.ones(3)),
           "weights shape": StoredCounterfactuals(jnp.zeros((N, 3, SIZE, SIZE)), jnp.ones((1, 3)) / 3)}
    for what, source in bad.items():
        with pytest.raises(ValueError, match="`counterfactuals"):
            cp.train(MODEL, x, y, np.ones((1, N), bool), vx, vy, CONFIG, seeds=[0],
                     objectives=cp.MemberObjectives("cf_risk", counterfactuals=source), options=QUIET)
    check_source(good, N, (SIZE, SIZE))


# --- one training step of each objective against a hand-written reference --------------------------------


def bce(z, t):
    """``−t log σ(z) − (1 − t) log(1 − σ(z))`` written out (not optax's)."""
    return jnp.logaddexp(0.0, z) - t * z


def np_bce(z, t):
    return np.logaddexp(0.0, z) - t * z


def reference_loss(params, name, strength, alpha, x, y, x_cf, q, groups, group_weights, idx, key):
    """The loss of the minibatch ``idx`` as its objective's definition states it, with every
    image through the model on its own (the factual ones, then each intervention's)."""
    b, k = idx.shape[0], q.shape[0]
    xb, yb = x[idx], y[idx]
    o = MODEL.apply(params, xb)
    basic = jnp.mean(bce(o, yb))
    if name == "basic":
        return basic
    if name == "group_dro":
        g = groups[idx]
        losses = bce(o, yb)
        group_loss = jnp.stack([jnp.sum(jnp.where(g == j, losses, 0.0)) / max(int(np.sum(g == j)), 1)
                                for j in range(group_weights.shape[0])])
        return jnp.dot(jnp.asarray(group_weights, o.dtype), group_loss)  # q: the updated weights, a constant
    if name == "augment":
        kk = np.asarray(draw_interventions(b, jnp.asarray(q), key=jax.random.fold_in(key, 1)))
        return jnp.mean(bce(MODEL.apply(params, x_cf[idx, kk]), yb))
    c = jnp.stack([MODEL.apply(params, x_cf[idx, j]) for j in range(k)], axis=1)  # (B, K)
    L = bce(c, yb[:, None])
    qq = jnp.asarray(q, c.dtype)[None]
    if name == "cf_risk":
        return jnp.mean(jnp.sum(L * qq, axis=1))
    if name == "cvar":  # the worst alpha of each unit's q-mass of losses, the boundary atom split
        order = jnp.argsort(-jax.lax.stop_gradient(L), axis=1)
        Ls, qs = jnp.take_along_axis(L, order, axis=1), jnp.asarray(q, c.dtype)[order]
        before = jnp.cumsum(qs, axis=1) - qs
        take = jnp.clip(jnp.minimum(qs, alpha - before), 0.0, None)
        return jnp.mean(jnp.sum(take * Ls, axis=1) / alpha)
    if name == "variance":
        mean = jnp.sum(c * qq, axis=1, keepdims=True)
        return basic + strength * jnp.mean(jnp.sum((c - mean) ** 2 * qq, axis=1))
    assert name == "flip"
    p, pc = jax.nn.sigmoid(o)[:, None], jax.nn.sigmoid(c)
    return basic + strength * jnp.mean(jnp.sum((pc * (1 - p) + (1 - pc) * p) * qq, axis=1))


@pytest.mark.parametrize("name", ["basic", "cf_risk", "cvar", "variance", "flip", "augment", "group_dro"])
def test_member_step_is_one_adamw_step_on_the_objectives_loss(rng, name):
    n, k, b, g_count = 40, 5, 8, 4
    config = cp.EnsembleConfig(steps=50, batch_size=b, learning_rate=1e-2, warmup=0)
    x = rng.uniform(size=(n, SIZE, SIZE)).astype(np.float32)
    y = rng.integers(0, 2, n).astype(np.float32)
    x_cf = np.clip(x[:, None] + rng.normal(scale=0.3, size=(n, k, SIZE, SIZE)), 0, 1).astype(np.float32)
    q = rng.dirichlet(np.ones(k)).astype(np.float32)
    w = rng.uniform(size=n).astype(np.float32) * (rng.uniform(size=n) < 0.7)
    w[0] = 1.0
    groups = rng.integers(0, g_count, n).astype(np.int32)
    group_weights = rng.dirichlet(np.ones(g_count)).astype(np.float32)
    strength = {"variance": 0.7, "flip": float(rng.uniform(0.5, 2.0)), "group_dro": float(rng.uniform(0.5, 2.0))}.get(
        name, 0.0)
    alpha = float(rng.uniform(0.2, 0.8)) if name == "cvar" else 1.0
    objective = Objective(name, strength, alpha)
    source = StoredCounterfactuals(jnp.asarray(x_cf), jnp.asarray(q))
    data = cp.data.member_data(x, y, w, strengths=np.float32(strength), groups=groups)
    params = member(cp.init_params(MODEL, (SIZE, SIZE), seeds=[int(rng.integers(2**31))]), 0)
    opt = config.optimizer()
    key = jax.random.key(int(rng.integers(2**31)))
    # an optimiser state one step in (an update of the whole training set's basic gradient),
    # so that the step's moments and learning rate are not those of a fresh state
    g0 = jax.grad(lambda p: jnp.mean(bce(MODEL.apply(p, jnp.asarray(x)), jnp.asarray(y))))(params)
    _, opt_state = opt.update(g0, opt.init(params), params)
    step = jax.jit(cp.step.member_step, static_argnums=(0, 1), static_argnames="objective")
    out = step(MODEL, config, params, opt_state, data, key, objective=objective, source=source,
               group_weights=jnp.asarray(group_weights))
    new, new_state, loss, new_q = out.params, out.opt_state, out.loss, out.group_weights

    idx = np.asarray(_sample(key, data.cdf, b))
    assert (w[idx] > 0).all()
    want_q = group_weights
    if name == "group_dro":  # q·exp(η L_g), normalised, in numpy
        o = np.asarray(MODEL.apply(params, jnp.asarray(x[idx])), np.float64)
        losses, gb = np_bce(o, y[idx].astype(np.float64)), groups[idx]
        group_loss = np.array([losses[gb == j].mean() if (gb == j).any() else 0.0 for j in range(g_count)])
        want_q = group_weights * np.exp(strength * group_loss)
        want_q /= want_q.sum()
        np.testing.assert_allclose(np.asarray(new_q), want_q, rtol=1e-5)
        assert not np.allclose(want_q, group_weights, rtol=1e-3)  # the step moved the weights
    else:
        np.testing.assert_array_equal(np.asarray(new_q), group_weights)  # untouched
    ref, grads = jax.value_and_grad(reference_loss)(params, name, strength, alpha, x, y, x_cf, q, groups,
                                                    want_q, idx, key)
    updates, ref_state = opt.update(grads, opt_state, params)
    want = optax.apply_updates(params, updates)
    np.testing.assert_allclose(float(loss), float(ref), rtol=1e-5)
    moved = 0.0
    for u, v, p0 in zip(jax.tree.leaves(new), jax.tree.leaves(want), jax.tree.leaves(params), strict=True):
        # an update is about the learning rate (1e-2) per parameter; rounding moves it far less
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=0, atol=2e-6)
        moved = max(moved, float(np.abs(np.asarray(v) - np.asarray(p0)).max()))
    assert moved > 1e-3
    for u, v in zip(jax.tree.leaves(new_state), jax.tree.leaves(ref_state), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-4, atol=1e-7)


def test_member_step_errors_are_named(rng):
    config = cp.EnsembleConfig(steps=5, batch_size=4, warmup=0)
    data = cp.data.member_data(np.zeros((6, SIZE, SIZE), np.float32), np.array([0, 1] * 3), np.ones(6))
    params = member(cp.init_params(MODEL, (SIZE, SIZE), seeds=[0]), 0)
    state = config.optimizer().init(params)
    with pytest.raises(ValueError, match="`source`"):
        cp.step.member_step(MODEL, config, params, state, data, jax.random.key(0), objective=Objective("cf_risk"))
    with pytest.raises(ValueError, match="`group_weights`"):
        cp.step.member_step(MODEL, config, params, state, data, jax.random.key(0),
                       objective=Objective("group_dro", 0.1))


# --- training ---------------------------------------------------------------------------------------------


def test_zero_strength_and_grouping_leave_basic_members_bit_for_bit(rng):
    x, y, vx, vy, src = synthetic_problem(rng)
    s = int(rng.integers(2**20))
    masks = np.ones((2, N), bool)
    pair = cp.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=[s, s], options=QUIET,
                    objectives=[Objective(), Objective("variance", 0.0)])
    for part in ("params", "best_params", "opt_state"):
        tree_equal(member(getattr(pair, part), 0), member(getattr(pair, part), 1))
    assert pair.best_auc[0] == pair.best_auc[1] and pair.loss[0, 0] == pair.loss[0, 1]

    seeds = rng.choice(1000, 3, replace=False)
    masks = rng.uniform(size=(3, N)) < 0.8
    masks[:, 0] = True
    plain = cp.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=seeds, options=QUIET)
    mixed = cp.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=seeds, options=QUIET,
                     objectives=cp.MemberObjectives([Objective(), Objective("variance", 1.0), Objective()],
                                                    counterfactuals=src))
    for m in (0, 2):
        for part in ("params", "best_params", "opt_state"):
            tree_equal(member(getattr(mixed, part), m), member(getattr(plain, part), m))
        for part in ("best_auc", "best_step", "val_auc", "loss"):
            assert np.array_equal(np.asarray(getattr(mixed, part))[..., m], np.asarray(getattr(plain, part))[..., m],
                                  equal_nan=True)
    # the penalised member trained differently from the same seed's basic member
    assert not np.array_equal(np.asarray(jax.tree.leaves(mixed.params)[0][1]),
                              np.asarray(jax.tree.leaves(plain.params)[0][1]))
    assert np.isfinite(np.asarray(mixed.loss)).all()
    # the spelling of earlier releases (counterfactuals= beside objectives=) still works, with a warning
    with pytest.warns(DeprecationWarning, match=r"train\(progress=, counterfactuals=\).*objectives=MemberObjectives"):
        old = cp.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=seeds, progress=False, counterfactuals=src,
                       objectives=[Objective(), Objective("variance", 1.0), Objective()])
    tree_equal(old, mixed)


def test_members_are_grouped_by_objective_kind():
    """Members of one kind, whatever their strengths, are one group (in order of first
    appearance); a penalty of strength 0 is basic; an all-basic ensemble has no groups."""
    objs = (Objective(), Objective("variance", 1.0), Objective("cvar", alpha=0.5), Objective("variance", 0.2),
            Objective("variance", 0.0), Objective("cvar", alpha=0.3), Objective("cvar", alpha=0.5),
            Objective("group_dro", 0.1), Objective("group_dro", 0.02), Objective("flip", 0.0),
            Objective("flip", 2.0), Objective("flip", 0.5), Objective("cf_risk"), Objective("augment"))
    plan = _plan(objs)
    assert [idx for _, idx in plan] == [(0, 4, 9), (1, 3), (2, 6), (5,), (7, 8), (10, 11), (12,), (13,)]
    for kind, idx in plan:
        assert all(objs[i].kind == kind for i in idx)
        assert kind.kind == kind  # a kind is its own kind
    assert [k.name for k, _ in plan] == ["basic", "variance", "cvar", "cvar", "group_dro", "flip", "cf_risk",
                                         "augment"]
    assert [k.alpha for k, _ in plan][2:4] == [0.5, 0.3]
    assert plan[0][0] == Objective() and len({k for k, _ in plan}) == len(plan)
    assert all(k.needs_counterfactuals == (k.name not in ("basic", "group_dro")) for k, _ in plan)
    assert _plan((Objective(), Objective("flip", 0.0), Objective("variance", 0.0))) == ()


def test_resume_with_objectives_equals_uninterrupted(rng, tmp_path):
    _, rec, val, _, src = chest_problem(rng)
    x, y, vx, vy = rec["image"], rec["parents"]["effusion"], val["image"], val["parents"]["effusion"]
    groups = (2 * np.asarray(rec["parents"]["sex"]) + np.asarray(y)).astype(np.int32)
    seeds = rng.choice(1000, 3, replace=False)
    masks = np.ones((3, N), bool)
    objs = [Objective(), Objective("flip", 0.5), Objective("group_dro", 0.05)]
    args = (MODEL, x, y, masks, vx, vy, CONFIG)
    kw = dict(seeds=seeds, objectives=cp.MemberObjectives(objs, counterfactuals=src, groups=groups))
    full = cp.train(*args, **kw, options=QUIET)
    assert int(full.round) == 2 and full.group_weights.shape == (3, 4)
    gw = np.asarray(full.group_weights)
    np.testing.assert_array_equal(gw[:2], np.full((2, 4), 0.25, np.float32))  # only group DRO moves them
    np.testing.assert_allclose(gw[2].sum(), 1.0, rtol=1e-6)
    assert not np.allclose(gw[2], 0.25, rtol=0, atol=1e-6)
    resume = cp.TrainOptions(progress=False, checkpoint_dir=tmp_path, max_rounds=1)
    first = cp.train(*args, **kw, options=resume)
    assert int(first.round) == 1 and cf.checkpoint.latest_checkpoint_step(tmp_path) == CONFIG.eval_every
    resumed = cp.train(*args, **kw, options=resume)
    assert int(resumed.round) == 2
    tree_equal(resumed, full)
    for other in ([Objective(), Objective("flip", 0.3), Objective("group_dro", 0.05)],
                  [Objective(), Objective("flip", 0.5), Objective("group_dro", 0.5)],
                  [Objective(), Objective("variance", 0.5), Objective("group_dro", 0.05)],
                  [Objective(), Objective("flip", 0.5), Objective("flip", 0.5)]):  # no group DRO: (M, 1) weights
        with pytest.raises(ValueError, match="`checkpoint_dir`"):  # another run's checkpoint, compared first
            cp.train(*args, **{**kw, "objectives": dataclasses.replace(kw["objectives"], objectives=other)},
                     options=resume)
    with pytest.raises(ValueError, match="`checkpoint_dir`"):  # another number of members: other shapes
        cp.train(MODEL, x, y, masks[:2], vx, vy, CONFIG, seeds=seeds[:2],
                 objectives=dataclasses.replace(kw["objectives"], objectives=objs[:2]), options=resume)


# --- errors -----------------------------------------------------------------------------------------------


def test_training_arguments_are_named(rng):
    x, y, vx, vy, _ = synthetic_problem(rng)
    groups = rng.integers(0, 4, N).astype(np.int32)
    masks = np.ones((2, N), bool)

    def train(objectives, groups=None):
        return cp.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=[0, 1], options=QUIET,
                        objectives=cp.MemberObjectives(objectives, groups=groups))

    for objs in ("cf_risk", ["basic", "augment"], [Objective(), Objective("variance", 0.1)]):
        with pytest.raises(ValueError, match="`counterfactuals`: expected a counterfactual source"):
            train(objectives=objs)
    dro = [Objective(), Objective("group_dro", 0.1)]
    for bad in (None, groups[:-1], groups[None], np.where(groups == 0, -1, groups), groups.astype(np.float32),
                groups > 1):
        with pytest.raises(ValueError, match="`groups`"):
            train(objectives=dro, groups=bad)
    for objs in (["basic"] * 3, ["basic"], [], ["basic", 0.5]):
        with pytest.raises(ValueError, match="`objectives`"):
            train(objectives=objs)
    with pytest.raises(ValueError, match="`objective`"):
        train(objectives=["basic", "stable"])
    with pytest.raises(ValueError, match="`strength`"):
        train(objectives=[Objective(), Objective("flip", strength=np.float32(-1.0))])


# --- the members over two devices ----------------------------------------------------------------------------

CHILD = '''
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
from cfjax import predictors as cp
from cfjax.predictors import Objective
from cfjax.predictors.sources import StoredCounterfactuals

seed, out = int(sys.argv[1]), sys.argv[2]
assert len(jax.devices()) == 2, jax.devices()
rng = np.random.default_rng(seed)
n, v, k, size = 48, 32, 3, 32

def synthetic(n):
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    x = 0.3 + 0.3 * rng.uniform(size=(n, size, size)) + 0.2 * y[:, None, None] * (rng.uniform(size=(n, 1, 1)))
    return np.clip(x, 0, 1).astype(np.float32), y.astype(np.int32)

x, y = synthetic(n)
vx, vy = synthetic(v)
x_cf = np.clip(x[:, None] + rng.normal(scale=0.2, size=(n, k, size, size)), 0, 1).astype(np.float32)
src = StoredCounterfactuals(jnp.asarray(x_cf), jnp.asarray(rng.dirichlet(np.ones(k)), jnp.float32))
groups = (2 * rng.integers(0, 2, n) + y).astype(np.int32)
masks = rng.uniform(size=(3, n)) < 0.8
masks[:, :2] = True
# M = 3 over 2 devices: padded to 4, the padding in the last member's group
objs = [Objective("variance", 0.3), Objective("group_dro", 0.5), Objective("variance", 1.0)]
config = cp.EnsembleConfig(steps=4, batch_size=8, learning_rate=1e-2, warmup=1, eval_every=2, eval_chunk=32)
kw = dict(seeds=rng.choice(1000, 3, replace=False),
          objectives=cp.MemberObjectives(objs, counterfactuals=src, groups=groups),
          options=cp.TrainOptions(progress=False))
two = cp.train(cp.EffusionCNN(features=(4,)), x, y, masks, vx, vy, config, mesh=2, **kw)
one = cp.train(cp.EffusionCNN(features=(4,)), x, y, masks, vx, vy, config, mesh=[jax.devices()[0]], **kw)
res = {}
for name, s in (("two", two), ("one", one)):
    for f in ("best_auc", "best_step", "active", "step", "round", "val_auc", "loss", "group_weights"):
        res[f"{name}/{f}"] = np.asarray(getattr(s, f))
    for part in ("params", "best_params"):
        for i, leaf in enumerate(jax.tree.leaves(getattr(s, part))):
            res[f"{name}/{part}/{i}"] = np.asarray(leaf)
np.savez(out, **res)
'''


def test_mixed_objectives_on_two_devices_equal_one(rng, tmp_path):
    flags = os.environ.get("XLA_FLAGS", "")  # the suite's flags (tests/conftest.py), plus the device count
    env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    out = tmp_path / "mesh.npz"
    done = subprocess.run([sys.executable, "-c", CHILD, str(int(rng.integers(2**31))), str(out)], env=env,
                          capture_output=True, text=True, timeout=300,
                          cwd=pathlib.Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-4000:]
    with np.load(out) as saved:
        saved = dict(saved)
    keys = sorted(k.split("/", 1)[1] for k in saved if k.startswith("two/"))
    assert keys == sorted(k.split("/", 1)[1] for k in saved if k.startswith("one/"))
    assert saved["two/best_auc"].shape == (3,) and saved["two/group_weights"].shape == (3, 4)
    assert np.isfinite(saved["two/val_auc"]).all()
    for k in keys:
        u, v = saved[f"two/{k}"], saved[f"one/{k}"]
        assert u.shape == v.shape and u.dtype == v.dtype, k
        if np.issubdtype(u.dtype, np.floating):
            np.testing.assert_allclose(u, v, rtol=0, atol=1e-5, err_msg=k)
        else:
            np.testing.assert_array_equal(u, v, err_msg=k)


# --- the shortcut ---------------------------------------------------------------------------------------

# slow: a replication study (two members trained 400 steps on 1,500 rendered images, scored on paper 000's
# grid); every objective's loss, gradient and step are tested against references in `make test`.
@pytest.mark.slow
def test_a_stability_penalty_removes_a_sex_shortcut(rng):
    """Paper 000's sex corruption (α = 0.95: male-with-effusion and female-healthy units dropped)
    teaches the basic classifier sex as a shortcut: on a balanced test set, its mean
    p(do(female)) − p(do(male)) over the exact counterfactuals of paper 000's grid (K = 16) is
    large. A member trained on the same biased set with the logit-variance penalty over K = 4
    counterfactuals, do(sex) × 2 ages (rendered in the step), has a much smaller effect, for every data seed, at no loss of AUC against the basic
    member (at this scale, 400 steps, neither reaches the unbiased classifier's AUC every time)."""
    chest = cf.data.ChestSCM(size=SIZE, effusion_size=0.4)
    seed = int(rng.integers(2**31))
    data = cf.study.datasets(chest, key=seed, n_train=1500, n_val=200, test_per_cell=20, test_prevalence=0.5)
    train, val, test = data["train"], data["validation"], data["test"]
    p = train["parents"]
    keep = np.asarray(cf.study.splits.biased_training_mask("sex", 0.95, p["sex"], p["age"], p["effusion"],
                                                    key=jax.random.key(seed + 1)))
    do_train, q = cf.scm.intervention_grid({"sex": [0, 1], "age": [30.0, 70.0]})
    src = chest.counterfactual_source(train, do_train, key=seed + 2, weights=q)
    do, _ = cf.scm.intervention_grid({"sex": [0, 1], "age": np.linspace(20.0, 90.0, 8)})
    config = cp.EnsembleConfig(steps=400, batch_size=32, learning_rate=5e-3, warmup=20, eval_every=200, patience=5)
    model = cp.EffusionCNN(features=(8, 16))
    state = cp.train(model, train["image"], p["effusion"], np.stack([keep, keep]), val["image"],
                     val["parents"]["effusion"], config, seeds=[seed % 1000] * 2,
                     objectives=cp.MemberObjectives([Objective(), Objective("variance", 3.0)], counterfactuals=src),
                     options=cp.TrainOptions(progress=False))
    images_cf = chest.counterfactuals(test, do, key=seed + 3)["image"]  # (N, K, H, W)
    p_cf = np.asarray(cp.predict(model, state.best_params, images_cf), np.float64)  # (2, N, K)
    female = np.asarray(do["sex"]) == 1
    effect = (p_cf[..., female].mean(-1) - p_cf[..., ~female].mean(-1)).mean(-1)  # (2,)
    auc = np.asarray(jax.vmap(cf.metrics.auc, in_axes=(0, None))(
        cp.predict(model, state.best_params, test["image"]), test["parents"]["effusion"]))
    assert effect[0] > 0.2, f"the basic member learned no shortcut: effect {effect[0]:.3f}"
    assert effect[1] < min(0.1, 0.3 * effect[0]), f"penalised {effect[1]:.3f} vs basic {effect[0]:.3f}"
    assert auc[1] > auc[0] - 0.05, f"the penalised member's AUC {auc[1]:.3f} vs basic's {auc[0]:.3f}"
