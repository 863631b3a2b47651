"""cfjax.predictors: ensemble training against single-member runs, checkpoint resume, divergence
errors, chunked inference, paper 000's predictor family, and argument validation."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

import cfjax as cf
from cfjax import predictors as pr
from cfjax.predictors.step import MemberUpdate

MODEL = pr.EffusionCNN(features=(4, 8))
# One configuration, ensemble size and data shape for every training test, so that the round
# program compiles once for M = 3 (and once for the single-member runs).
LR = 1e-2
CONFIG = pr.EnsembleConfig(steps=40, batch_size=8, learning_rate=LR, weight_decay=1e-4, warmup=3,
                        eval_every=5, patience=2, eval_chunk=16)
QUIET = pr.TrainOptions(progress=False)
N, V, M = 64, 32, 3


def synthetic(rng, n, size=16):
    """Images in [0, 1] whose label is a faint bright blob of random strength and place."""
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    yy, xx = np.mgrid[:size, :size]
    cy, cx = rng.uniform(4, size - 4, (2, n))
    blob = np.exp(-((yy - cy[:, None, None]) ** 2 + (xx - cx[:, None, None]) ** 2) / 6.0)
    strength = rng.uniform(0.0, 0.4, n) * y
    x = 0.3 + 0.15 * rng.uniform(size=(n, size, size)) + strength[:, None, None] * blob
    return np.clip(x, 0, 1).astype(np.float32), y.astype(np.int32)


def problem(rng):
    """Training and validation sets, masks (one row of per-unit weights) and distinct seeds."""
    x, y = synthetic(rng, N)
    vx, vy = synthetic(rng, V)
    masks = (rng.uniform(size=(M, N)) < 0.7).astype(np.float32)
    masks[-1] = rng.uniform(size=N)  # per-unit weights, not a mask
    seeds = rng.choice(1000, M, replace=False)
    return x, y, vx, vy, masks, seeds


def tree_close(a, b, rtol=1e-4, atol=1e-5):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol, atol=atol)


def tree_distance(a, b):
    """The largest absolute difference between two pytrees' leaves."""
    return max(float(np.max(np.abs(np.asarray(u) - np.asarray(v)))) for u, v in
               zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def tree_equal(a, b):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def member(tree, m):
    return jax.tree.map(lambda a: a[m], tree)


def test_ensemble_member_equals_member_trained_alone(rng):
    """Member m of an M = 3 ensemble — all members vmapped together, or one after another
    inside the program (the CPU default) — ends like the same seed and mask trained alone."""
    x, y, vx, vy, masks, seeds = problem(rng)
    alone = [pr.train(MODEL, x, y, masks[m:m + 1], vx, vy, CONFIG, seeds=seeds[m:m + 1], options=QUIET)
             for m in range(M)]
    for member_chunk in (M, 1):
        config = dataclasses.replace(CONFIG, member_chunk=member_chunk)
        ens = pr.train(MODEL, x, y, masks, vx, vy, config, seeds=seeds, options=QUIET)
        for m in range(M):
            # float tolerance: the batched and single-member programs round differently, and
            # Adam's m/√v turns a rounding difference in a near-zero gradient into up to a
            # learning-rate-sized step (1e-2 here). Over seeds the differences are mostly ~1e-7,
            # now and then 1e-5 to 6e-4 (CFJAX_TEST_SEED=668064635); two members trained apart
            # differ by more than 1 (0.2 below): so a few steps' size, and each member nearest
            # its own run.
            tree_close(member(ens.best_params, m), member(alone[m].best_params, 0), rtol=0, atol=2 * LR)
            tree_close(member(ens.params, m), member(alone[m].params, 0), rtol=0, atol=2 * LR)
            for other in set(range(M)) - {m}:
                assert tree_distance(member(ens.params, m), member(alone[other].params, 0)) > 0.2
            # a rounding difference may at most reorder one pair of validation scores
            positives = int(vy.sum())
            np.testing.assert_allclose(ens.best_auc[m], alone[m].best_auc[0],
                                       atol=1.01 / (positives * (V - positives)))
            assert int(ens.best_step[m]) == int(alone[m].best_step[0])


def test_minibatches_respect_masks(rng):
    n = 50
    w = (rng.uniform(size=n) < 0.3).astype(np.float32) * rng.uniform(0.5, 2.0, n)
    w[0] = 1.0
    cdf = jnp.cumsum(jnp.asarray(w))
    keys = jax.random.split(jax.random.key(int(rng.integers(2**31))), 400)
    from cfjax.predictors.step import _sample
    idx = np.asarray(jax.vmap(lambda k: _sample(k, cdf, 64))(keys)).ravel()
    assert (w[idx] > 0).all()
    freq = np.bincount(idx, minlength=n) / idx.size
    np.testing.assert_allclose(freq, w / w.sum(), atol=0.01)


def test_early_stopping_keeps_best_validation_auc(rng, tmp_path):
    """Round by round (one round per call, resumed from the checkpoint): the recorded AUC is
    sklearn's on the members' current parameters, the kept parameters are those of the first
    best round, and a member stops (frozen) `patience` rounds after it."""
    x, y, vx, vy, masks, seeds = problem(rng)
    params_by_round, state = [], None
    for _ in range(CONFIG.rounds):
        state = pr.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=seeds,
                         options=pr.TrainOptions(progress=False, checkpoint_dir=tmp_path, max_rounds=1))
        params_by_round.append(state.params)
        if state.finished:
            break
    rounds = int(state.round)
    assert rounds == len(params_by_round)
    for m in range(M):
        aucs = [roc_auc_score(vy, np.asarray(pr.predict(MODEL, p, vx, logits=True)[m])) for p in params_by_round]
        hist = np.asarray(state.val_auc[:rounds, m])
        np.testing.assert_allclose(hist, aucs, atol=1e-6)
        best = int(np.argmax(hist))  # the first maximum: a later tie does not replace it
        assert float(state.best_auc[m]) == hist[best]
        assert int(state.best_step[m]) == CONFIG.eval_every * (best + 1)
        tree_equal(member(state.best_params, m), member(params_by_round[best], m))
        stop = min(best + 1 + CONFIG.patience, CONFIG.rounds)  # rounds this member ran
        assert not bool(state.active[m])
        assert (hist[:stop - 1] < hist[best]).sum() == stop - 1 - (hist[:stop - 1] == hist[best]).sum()
        assert (hist[best + 1:stop] <= hist[best]).all()
        tree_equal(member(params_by_round[-1], m), member(params_by_round[stop - 1], m))  # frozen since


def test_checkpoint_round_trip(rng, tmp_path):
    x, y, vx, vy, masks, seeds = problem(rng)
    state = pr.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=seeds,
                     options=pr.TrainOptions(progress=False, max_rounds=1))
    cf.checkpoint.save_checkpoint(tmp_path, 7, state, {"note": "x"})
    assert cf.checkpoint.latest_checkpoint_step(tmp_path) == 7
    template = pr.state.init_state(MODEL, CONFIG, (16, 16), seeds=seeds + 1)
    restored, meta = cf.checkpoint.restore_checkpoint(tmp_path, template)
    assert meta["note"] == "x" and meta["format"] == cf.checkpoint.FORMAT_VERSION and meta["step"] == 7
    assert jax.tree.structure(restored) == jax.tree.structure(state)
    tree_equal(restored, state)


def test_resume_equals_uninterrupted(rng, tmp_path):
    x, y, vx, vy, masks, seeds = problem(rng)
    full = pr.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=seeds, options=QUIET)
    part = pr.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=seeds,
                    options=pr.TrainOptions(progress=False, checkpoint_dir=tmp_path, max_rounds=2))
    assert int(part.step) == 2 * CONFIG.eval_every
    assert cf.checkpoint.latest_checkpoint_step(tmp_path) == 2 * CONFIG.eval_every
    resumed = pr.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=seeds,
                       options=pr.TrainOptions(progress=False, checkpoint_dir=tmp_path))
    assert resumed.finished and int(resumed.round) == int(full.round)
    tree_equal(resumed, full)
    with pytest.raises(cf.ValidationError, match="`checkpoint_dir`"):  # another run's checkpoint
        pr.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=seeds + 1,
                 options=pr.TrainOptions(progress=False, checkpoint_dir=tmp_path))


def test_the_old_keyword_arguments_and_tuple_still_work_with_a_warning(rng):
    """``train``'s ``names=``, ``progress=``, ``max_rounds=`` (now :class:`TrainOptions`) and
    ``member_step``'s tuple (now a :class:`MemberUpdate`) keep working for one release, with a
    DeprecationWarning naming the new spelling; the run is the same."""
    x, y, vx, vy, masks, seeds = problem(rng)
    new = pr.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=seeds,
                   options=pr.TrainOptions(progress=False, max_rounds=1))
    with pytest.warns(DeprecationWarning, match=r"train\(progress=, max_rounds=, names=\).*options=TrainOptions\("):
        old = pr.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=seeds, progress=False, max_rounds=1,
                       names=[str(m) for m in range(M)])
    tree_equal(old, new)
    p, o = member(new.params, 0), member(new.opt_state, 0)
    out = pr.step.member_step(MODEL, CONFIG, p, o, pr.data.member_data(x, y, masks[0]), jax.random.key(0))
    assert isinstance(out, MemberUpdate) and out.group_weights is None
    with pytest.warns(DeprecationWarning, match=r"\.params, \.opt_state, \.loss"):
        p1, o1, loss = out
    assert p1 is out.params and o1 is out.opt_state and loss is out.loss


def test_nonfinite_loss_names_member_and_step(rng):
    """Member 1 alone may draw unit 0, whose pixels overflow float32 in the first convolution:
    its loss is NaN at the first step whose minibatch holds unit 0 (recomputed here from its
    minibatch stream); member 0 never draws it. The pixels are ±3e38 with random signs: a
    uniform image overflows only where a kernel's weights sum past ~1.13, which some seeds'
    kernels never do, while hundreds of distinct sign patterns overflow some channel surely."""
    x, y, vx, vy, masks, seeds = problem(rng)
    x[0] = np.float32(3e38) * rng.choice(np.array([-1.0, 1.0], np.float32), size=x[0].shape)
    masks[:, 0] = 0.0
    masks[1] = 1.0
    masks[1, 0] = 3.0  # drawn with probability ~0.3 a step
    state = pr.state.init_state(MODEL, CONFIG, (16, 16), seeds=seeds)
    cdf = jnp.cumsum(jnp.asarray(masks[1]))
    key = jax.random.wrap_key_data(state.data_keys[1])
    from cfjax.predictors.step import _sample
    drawn = [int(t) for t in range(CONFIG.steps)
             if 0 in np.asarray(_sample(jax.random.fold_in(key, t), cdf, CONFIG.batch_size))]
    names = ["basic", "sex0.80", "age0.95"]
    with pytest.raises(cf.TrainingError, match=rf"member 1 \('sex0.80'\).* step {drawn[0]}\b"):
        pr.train(MODEL, x, y, masks, vx, vy, CONFIG, seeds=seeds, options=pr.TrainOptions(progress=False, names=names))
    # the public single-member step agrees: finite before that step, NaN at it
    step = jax.jit(lambda p, o, d, k: pr.step.member_step(MODEL, CONFIG, p, o, d, k))
    p, o = member(state.params, 1), member(state.opt_state, 1)
    data = pr.data.member_data(x, y, masks[1])
    for t in range(drawn[0] + 1):
        out = step(p, o, data, jax.random.fold_in(key, t))
        p, o = out.params, out.opt_state
        assert np.isfinite(float(out.loss)) == (t < drawn[0])


def test_chunked_inference_matches_unchunked_apply(rng):
    params = pr.init_params(MODEL, (16, 16), seeds=[0, 1, 2])
    x, _ = synthetic(rng, 10)
    cfx = np.stack([synthetic(rng, 10)[0] for _ in range(3)], axis=1)  # (N, K, H, W)
    direct = jax.vmap(lambda p: MODEL.apply(p, jnp.asarray(x)))(params)
    direct_cf = jnp.stack([jax.vmap(lambda p: MODEL.apply(p, jnp.asarray(cfx[:, k])))(params) for k in range(3)],
                          axis=2)  # (M, N, K)
    for chunk, member_chunk in ((3, 1), (10, 3)):  # N = 10: 4 chunks of 3, 2 padded / one chunk; K·N = 30: 10 chunks of 3 / 3 of 10
        got = pr.predict(MODEL, params, x, chunk=chunk, logits=True, member_chunk=member_chunk)
        np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(pr.predict(MODEL, params, x, chunk=chunk), jax.nn.sigmoid(direct),
                                   rtol=1e-5, atol=1e-6)
        got_cf = pr.predict(MODEL, params, cfx, chunk=chunk, logits=True, member_chunk=member_chunk)
        assert got_cf.shape == (3, 10, 3)
        np.testing.assert_allclose(got_cf, direct_cf, rtol=1e-5, atol=1e-5)
    # row m is member m's p_cf (N, K), as one predictor alone scores the images
    alone = pr.predict(MODEL, jax.tree.map(lambda a: a[1:2], params), cfx, chunk=10, logits=True)
    np.testing.assert_allclose(got_cf[1], alone[0], rtol=1e-5, atol=1e-5)


def test_logit_offset_closed_form(rng):
    logits = rng.normal(0, 3, (2, 4, 6)).astype(np.float32)
    sex = rng.integers(0, 2, (4, 6))
    beta = float(rng.choice([0.5, 1.0, 2.0]))
    ref = 1 / (1 + np.exp(-(logits.astype(np.float64) + beta * sex)))
    np.testing.assert_allclose(cf.study.families.logit_offset(logits, sex, beta), ref, rtol=1e-5)


def test_paper_predictions_against_numpy(rng):
    seeds = [4, 7]
    names = [n for n in cf.study.families.TRAINED_NAMES for _ in seeds]
    member_seeds = seeds * len(cf.study.families.TRAINED_NAMES)
    perm = rng.permutation(len(names))  # any member order
    names, member_seeds = [names[i] for i in perm], [member_seeds[i] for i in perm]
    logits = rng.normal(0, 2, (len(names), 3, 5)).astype(np.float32)
    sex = rng.integers(0, 2, (3, 5))
    got_names, p = cf.study.families.paper_predictions(names, member_seeds, logits, sex)
    assert got_names == cf.study.families.PAPER_NAMES == ("basic", "logit+0.5", "logit+1", "logit+2", "sex0.80", "sex0.90",
                                           "sex0.95", "age0.80", "age0.90", "age0.95")
    assert p.shape == (10, 2, 3, 5)
    basic_order = [s for n, s in zip(names, member_seeds) if n == "basic"]
    for i, name in enumerate(cf.study.families.PAPER_NAMES):
        beta = {"logit+0.5": 0.5, "logit+1": 1.0, "logit+2": 2.0}.get(name, 0.0)
        source = "basic" if beta else name
        for j, s in enumerate(basic_order):
            row = next(r for r, (n, t) in enumerate(zip(names, member_seeds)) if n == source and t == s)
            ref = 1 / (1 + np.exp(-(logits[row].astype(np.float64) + beta * sex)))
            np.testing.assert_allclose(p[i, j], ref, rtol=1e-5)


def test_paper_family_masks_are_the_corrupted_training_sets():
    """Masks over the unbiased training set of cf.study.datasets(chest, key=seed) keep exactly the units of
    datasets(seed, bias=...)'s training set."""
    chest = cf.data.ChestSCM(size=32)
    seed = 3
    kw = dict(n_train=8, n_val=4, test_per_cell=1, pool_factor=40)  # every render in one chunk size
    full = cf.study.datasets(chest, key=seed, **kw)["train"]["parents"]
    fam = cf.study.paper_family(full["sex"], full["age"], full["effusion"], key=cf.study.families.datasets_bias_key(key=seed),
                                seeds=(0, 1))
    assert fam.names == tuple(n for n in cf.study.families.TRAINED_NAMES for _ in (0, 1))
    np.testing.assert_array_equal(fam.seeds, [0, 1] * 7)
    assert np.asarray(fam.masks[0]).all()
    for kind, strength in (("sex", 0.9), ("age", 0.8)):
        biased = cf.study.datasets(chest, key=seed, bias=(kind, strength), **kw)["train"]
        row = fam.names.index(f"{kind}{strength:.2f}")
        mask = np.asarray(fam.masks[row])
        assert biased["dropped"] == int((~mask).sum())
        for node in ("sex", "age", "effusion", "lung", "race"):
            np.testing.assert_array_equal(np.asarray(full[node])[mask], np.asarray(biased["parents"][node]))


@pytest.mark.parametrize("bad", [2.0, -1.0, 0.5, np.nan, np.inf])
@pytest.mark.parametrize("where", ["labels", "val_labels"])
def test_train_refuses_labels_outside_0_1(rng, where, bad):
    """Training and validation labels are checked at the boundary (cfjax._checks), the error
    naming the argument, whatever the members' objectives."""
    x = np.full((8, 16, 16), 0.5, np.float32)
    y = np.array([0.0, 1.0] * 4, np.float32)
    wrong = y.copy()
    wrong[int(rng.integers(8))] = bad
    labels, val_labels = (wrong, y) if where == "labels" else (y, wrong)
    for objectives in (None, "flip"):
        with pytest.raises(cf.ValidationError, match=rf"^`{where}`: expected labels in \{{0, 1\}}, got "
                                                     + ("NaN" if np.isnan(bad) else "other values")):
            pr.train(MODEL, x, labels, np.ones((1, 8), bool), x, val_labels, CONFIG, seeds=[0], objectives=objectives,
                     options=QUIET)


def test_validation_errors():
    x = np.full((8, 16, 16), 0.5, np.float32)
    y = np.array([0, 1] * 4)
    ok = np.ones((1, 8), bool)
    params = pr.init_params(MODEL, (16, 16), seeds=[0])
    cases = [
        ("steps", lambda: pr.EnsembleConfig(steps=0)),
        ("warmup", lambda: pr.EnsembleConfig(steps=10, warmup=10)),
        ("learning_rate", lambda: pr.EnsembleConfig(learning_rate=float("nan"))),
        ("weight_decay", lambda: pr.EnsembleConfig(weight_decay=-1.0)),
        ("eval_every", lambda: pr.EnsembleConfig(eval_every=0)),
        ("images", lambda: pr.train(MODEL, x[0], y, ok, x, y, CONFIG, seeds=[0])),
        ("images", lambda: pr.train(MODEL, x.astype(np.int32), y, ok, x, y, CONFIG, seeds=[0])),
        ("labels", lambda: pr.train(MODEL, x, y + 1, ok, x, y, CONFIG, seeds=[0])),
        ("masks", lambda: pr.train(MODEL, x, y, np.ones((1, 7), bool), x, y, CONFIG, seeds=[0])),
        ("masks", lambda: pr.train(MODEL, x, y, np.zeros((1, 8), bool), x, y, CONFIG, seeds=[0])),
        ("masks", lambda: pr.train(MODEL, x, y, -np.ones((1, 8)), x, y, CONFIG, seeds=[0])),
        ("seeds", lambda: pr.train(MODEL, x, y, ok, x, y, CONFIG, seeds=[0, 1])),
        ("seeds", lambda: pr.train(MODEL, x, y, ok, x, y, CONFIG, seeds=[-1])),
        ("val_images", lambda: pr.train(MODEL, x, y, ok, x[:, :8], y, CONFIG, seeds=[0])),
        ("val_labels", lambda: pr.train(MODEL, x, y, ok, x, np.zeros(8, int), CONFIG, seeds=[0])),
        ("config", lambda: pr.train(MODEL, x, y, ok, x, y, {"steps": 3}, seeds=[0])),
        ("names", lambda: pr.train(MODEL, x, y, ok, x, y, CONFIG, seeds=[0],
                                   options=pr.TrainOptions(names=["a", "b"]))),
        ("max_rounds", lambda: pr.train(MODEL, x, y, ok, x, y, CONFIG, seeds=[0],
                                        options=pr.TrainOptions(max_rounds=0))),
        ("options", lambda: pr.train(MODEL, x, y, ok, x, y, CONFIG, seeds=[0], options={"progress": False})),
        ("model", lambda: pr.train("cnn", x, y, ok, x, y, CONFIG, seeds=[0])),
        ("images", lambda: pr.predict(MODEL, params, x[0])),
        ("images", lambda: pr.predict(MODEL, params, np.full((8, 16, 16), np.nan, np.float32))),
        ("chunk", lambda: pr.predict(MODEL, params, x, chunk=0)),
        ("member_chunk", lambda: pr.predict(MODEL, params, x, member_chunk=0)),
        ("member_chunk", lambda: pr.EnsembleConfig(member_chunk=1.5)),
        ("logits", lambda: pr.predict(MODEL, params, x, logits="yes")),
        ("params", lambda: pr.predict(MODEL, {}, x)),
        ("image_shape", lambda: pr.init_params(MODEL, (16,), seeds=[0])),
        ("seeds", lambda: pr.init_params(MODEL, (16, 16), seeds=[])),
        ("seeds", lambda: pr.state.init_state(MODEL, CONFIG, (16, 16), seeds=[[0]])),
        ("config", lambda: pr.state.init_state(MODEL, None, (16, 16), seeds=[0])),
        ("key", lambda: pr.train(MODEL, x, y, ok, x, y, CONFIG)),  # neither key nor seeds
        ("key", lambda: pr.init_params(MODEL, (16, 16), key=0, seeds=[0])),  # both
        ("weights", lambda: pr.data.member_data(x, y, np.ones(7))),
        ("sex", lambda: cf.study.families.logit_offset(np.zeros(3), np.array([0, 2, 1]), 1.0)),
        ("sex", lambda: cf.study.families.logit_offset(np.zeros(3), np.array([0, 1]), 1.0)),
        ("beta", lambda: cf.study.families.logit_offset(np.zeros(3), np.array([0, 1, 1]), float("inf"))),
        ("logits", lambda: cf.study.families.logit_offset(np.zeros(3, int), np.array([0, 1, 1]), 1.0)),
        ("key", lambda: cf.study.paper_family(y, np.full(8, 50.0), y, key="0")),
        ("seeds", lambda: cf.study.paper_family(y, np.full(8, 50.0), y, key=jax.random.key(0), seeds=(1, 1))),
        ("age", lambda: cf.study.paper_family(y, np.full(7, 50.0), y, key=jax.random.key(0))),
        ("effusion", lambda: cf.study.paper_family(y, np.full(8, 50.0), y + 1, key=jax.random.key(0))),
        ("key", lambda: cf.study.families.datasets_bias_key(key=-1)),
        ("names", lambda: cf.study.families.paper_predictions(["basic"], [0], np.zeros((1, 3), np.float32), np.zeros(3, int))),
        ("logits", lambda: cf.study.families.paper_predictions(["basic"], [0], np.zeros((2, 3), np.float32), np.zeros(3, int))),
        ("sex", lambda: cf.study.families.paper_predictions(["basic"], [0], np.zeros((1, 3), np.float32), np.zeros(4, int))),
        ("directory", lambda: cf.checkpoint.restore_checkpoint("/nonexistent/cfjax-ckpt", {})),
        ("keep", lambda: cf.checkpoint.CheckpointStore(".", keep=0)),
    ]
    for name, call in cases:
        with pytest.raises(cf.ValidationError, match=f"`{name}`"):
            call()


def _cnn_numpy(params, images, blocks):
    """EffusionCNN's logits by loops in float64: 3×3 'SAME' convolutions, ReLU, 2×2 means over
    the even part of each map, then the global mean and max and the dense head."""
    h = images.astype(np.float64)[..., None] - 0.5
    for i in range(blocks):
        kernel = np.asarray(params[f"conv{i}"]["kernel"], np.float64)
        b, rows, cols, _ = h.shape
        hp = np.pad(h, ((0, 0), (1, 1), (1, 1), (0, 0)))
        out = np.zeros((b, rows, cols, kernel.shape[-1])) + np.asarray(params[f"conv{i}"]["bias"], np.float64)
        for dy in range(3):
            for dx in range(3):
                out += hp[:, dy:dy + rows, dx:dx + cols] @ kernel[dy, dx]
        h = np.maximum(out, 0)
        if i < blocks - 1:
            r2, c2 = rows // 2, cols // 2
            h = np.array([[[h[:, 2 * y:2 * y + 2, 2 * x:2 * x + 2].mean(axis=(1, 2)) for x in range(c2)]
                           for y in range(r2)]]).squeeze(0).transpose(2, 0, 1, 3)
    pooled = np.concatenate([h.mean(axis=(1, 2)), h.max(axis=(1, 2))], axis=-1)
    return (pooled @ np.asarray(params["head"]["kernel"], np.float64))[:, 0] + float(params["head"]["bias"][0])


def test_matmul_convolution_equals_xla_convolution(rng):
    """The im2col matrix-product convolution (the CPU default) and XLA's native one give the
    same outputs for the same parameters, channels last or first, and a 3×3 'SAME' convolution
    equals a numpy loop; the whole network (channels first, odd map sizes pooled) equals a
    float64 numpy forward pass."""
    from cfjax.predictors.cnn import Conv3x3
    h, w = rng.integers(3, 9, 2)
    x = rng.normal(size=(2, h, w, 3)).astype(np.float32)
    params = Conv3x3(5).init(jax.random.key(int(rng.integers(1000))), x)
    kernel = np.asarray(params["params"]["kernel"], np.float64)
    bias = rng.normal(size=5)
    params = {"params": {"kernel": params["params"]["kernel"], "bias": jnp.asarray(bias, jnp.float32)}}
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.zeros((2, h, w, 5)) + bias
    for dy in range(3):
        for dx in range(3):
            ref += np.einsum("bhwc,cf->bhwf", xp[:, dy:dy + h, dx:dx + w], kernel[dy, dx])
    for conv in ("matmul", "xla"):
        np.testing.assert_allclose(np.asarray(Conv3x3(5, conv=conv).apply(params, x)), ref, rtol=1e-5, atol=1e-5)
        channels_first = Conv3x3(5, conv=conv, layout="CNHW").apply(params, x.transpose(3, 0, 1, 2))
        np.testing.assert_allclose(np.asarray(channels_first).transpose(1, 2, 3, 0), ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="`layout`"):
        Conv3x3(5, layout="NCHW").apply(params, x)
    images = rng.uniform(size=(4, 20, 18)).astype(np.float32)
    model = pr.EffusionCNN(features=(4, 8, 6))
    p = model.init(jax.random.key(int(rng.integers(1000))), images[:1])
    got = {conv: np.asarray(pr.EffusionCNN(features=(4, 8, 6), conv=conv).apply(p, images))
           for conv in ("matmul", "xla", "auto")}
    np.testing.assert_allclose(got["matmul"], got["xla"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got["auto"], got["matmul" if jax.default_backend() == "cpu" else "xla"])
    np.testing.assert_allclose(got["matmul"], _cnn_numpy(p["params"], images, 3), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="conv"):
        pr.EffusionCNN(features=(4,), conv="fft").apply(p, images)
