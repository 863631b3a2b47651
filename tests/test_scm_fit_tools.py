"""Fitting tools of the SCM: chunked fits with a progress bar equal one scan, held-out early
stopping, per-node log-likelihoods, the parameter summary and saving/loading parameters."""

import jax
import numpy as np
import optax
import pytest
from scipy import stats

from cfjax._checks import ValidationError
from cfjax._core.optim import standard_promotion
from cfjax.scm import GumbelMax, LocationScale, SCM, Spline, linear_gaussian_params
from cfjax.scm.checkpoint import load_params, save_params
from cfjax.scm.fit import AUTO_FULL_BATCH, FitInfo

PARENTS = {"a": [], "b": ["a"]}
TRUE = {"a": ([], 1.0, 2.0), "b": ([0.5], -1.0, 0.7)}


def model():
    scm = SCM(PARENTS, {v: LocationScale() for v in PARENTS})
    return scm, {v: linear_gaussian_params(*TRUE[v]) for v in PARENTS}


def coefficients(params, v):
    """``(weights, bias, scale)`` of a linear-Gaussian node's parameters."""
    net = params[v]["net"]["params"]
    if "Dense_0" in net:
        w, b = np.asarray(net["Dense_0"]["kernel"])[:, 0], float(net["Dense_0"]["bias"][0])
    else:
        w, b = np.zeros(0), float(net["bias"][0])
    return w, b, float(np.exp(params[v]["log_scale"]))


def scipy_log_prob(params, data):
    """``{node: (N,)}`` linear-Gaussian conditional log-densities with scipy."""
    out = {}
    for v in PARENTS:
        w, b, s = coefficients(params, v)
        loc = b + sum(wi * np.asarray(data[p], np.float64) for wi, p in zip(w, PARENTS[v]))
        out[v] = stats.norm.logpdf(np.asarray(data[v], np.float64), loc=loc, scale=s)
    return out


def sample(rng, n):
    scm, true = model()
    return scm, {k: np.asarray(x) for k, x in scm.sample(true, n, key=jax.random.key(int(rng.integers(1 << 30)))).items()}


@pytest.mark.parametrize("batch_size", [None, 16])
def test_chunked_fit_with_progress_equals_one_scan(rng, batch_size, capsys):
    scm, data = sample(rng, 60)
    key = jax.random.key(int(rng.integers(1 << 30)))
    one, losses_one, _ = scm.fit(data, key=key, steps=23, learning_rate=0.05, batch_size=batch_size, progress=False)
    chunked, losses, _ = scm.fit(data, key=key, steps=23, learning_rate=0.05, batch_size=batch_size, progress=True,
                              chunk_steps=5)
    assert losses.shape == losses_one.shape == (23,)
    np.testing.assert_allclose(losses, losses_one, rtol=1e-6, atol=1e-6)
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(chunked)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    capsys.readouterr()  # the bar went to stderr


def test_held_out_split_returns_the_best_parameters(rng):
    scm, data = sample(rng, 80)
    key = jax.random.key(int(rng.integers(1 << 30)))
    # A step size that grows until the fit diverges: the held-out likelihood improves, then
    # worsens, and the fit stops after `patience` chunks without improvement.
    opt = optax.sgd(optax.linear_schedule(0.01, 3.0, 400))
    params, losses, info = scm.fit(data, key=key, steps=400, optimizer=opt, validation=0.25, chunk_steps=10,
                                   patience=3)
    assert isinstance(info, FitInfo)
    held, train = info.validation_index, info.train_index
    assert len(held) == 20 and len(train) == 60
    np.testing.assert_array_equal(np.sort(np.concatenate([held, train])), np.arange(80))
    assert losses.shape == (info.steps,) and info.steps == info.validation_steps[-1]
    assert len(info.validation_nll) == info.steps // 10
    # the returned parameters' held-out NLL, by scipy, is the lowest of the curve
    held_data = {v: x[held] for v, x in data.items()}
    nll = -sum(scipy_log_prob(params, held_data).values()).mean()
    curve = info.validation_nll
    finite = curve[np.isfinite(curve)]
    assert nll == pytest.approx(finite.min(), rel=1e-4, abs=1e-4)
    assert nll == pytest.approx(info.best_nll, rel=1e-4, abs=1e-4)
    assert info.best_step == info.validation_steps[np.nanargmin(curve)]
    assert not curve[-1] < nll  # the last step's is no better (NaN once diverged)
    assert info.stopped_early and info.steps < 400
    # without a split: no curve, every step run
    _, losses, info = scm.fit(data, key=key, steps=7)
    assert info.steps == 7 and info.best_step is None and info.validation_index is None and losses.shape == (7,)
    for bad in (1.0, -0.1, "half", True):
        with pytest.raises(ValidationError, match="`validation`"):
            scm.fit(data, key=key, steps=3, validation=bad)


def test_per_node_log_prob_sums_to_the_total_and_matches_scipy(rng):
    scm, data = sample(rng, 50)
    params = {v: linear_gaussian_params(np.asarray(TRUE[v][0]) + rng.normal(size=len(TRUE[v][0])),
                                        TRUE[v][1] + rng.normal(), TRUE[v][2] * rng.uniform(0.5, 2))
              for v in PARENTS}
    per_node = scm.log_prob(params, data, per_node=True)
    want = scipy_log_prob(params, data)
    assert sorted(per_node) == sorted(PARENTS)
    for v in PARENTS:
        assert per_node[v].shape == (50,)
        np.testing.assert_allclose(per_node[v], want[v], rtol=1e-5, atol=1e-5, err_msg=v)
    np.testing.assert_allclose(sum(per_node.values()), scm.log_prob(params, data), rtol=1e-6, atol=1e-5)
    # categorical, non-linear and heteroscedastic nodes
    mixed = SCM({"r": [], "x": ["r"], "y": ["x", "r"]},
                {"r": GumbelMax(3), "x": LocationScale(hidden=(4,)),
                 "y": LocationScale(heteroscedastic=True)})
    p = mixed.init(key=jax.random.key(int(rng.integers(1 << 30))))
    p = jax.tree.map(lambda x: x + 0.3 * rng.normal(size=x.shape).astype(x.dtype), p)
    d = mixed.sample(p, 30, key=jax.random.key(int(rng.integers(1 << 30))))
    parts = mixed.log_prob(p, d, per_node=True)
    np.testing.assert_allclose(sum(parts[v] for v in mixed.nodes), mixed.log_prob(p, d), rtol=1e-5, atol=1e-5)
    probs = np.asarray(jax.nn.softmax(p["r"]["net"]["params"]["bias"]))
    np.testing.assert_allclose(parts["r"], np.log(probs[np.asarray(d["r"])]), rtol=1e-5, atol=1e-6)


def test_summary_lists_the_fitted_coefficients(rng):
    scm, data = sample(rng, 100)
    params, _, _ = scm.fit(data, key=jax.random.key(int(rng.integers(1 << 30))), steps=30, learning_rate=0.1)
    lines = scm.summary(params).splitlines()
    for v in PARENTS:
        w, b, s = coefficients(params, v)
        block = lines[lines.index(f"{v}: LocationScale, linear-Gaussian") + 1:]
        rows = {line[:-len(line.split()[-1])].strip(): float(line.split()[-1]) for line in block[:len(w) + 2]}
        assert rows["intercept"] == pytest.approx(b, rel=1e-3, abs=1e-6)
        assert rows["noise scale"] == pytest.approx(s, rel=1e-3)
        for wi, parent in zip(w, PARENTS[v]):
            assert rows[parent] == pytest.approx(wi, rel=1e-3, abs=1e-6)
    other = SCM({"r": [], "x": ["r"]}, {"r": GumbelMax(3), "x": Spline(hidden=(4,))})
    p = other.init(key=jax.random.key(0))
    count = sum(int(np.size(x)) for x in jax.tree.leaves(p["x"]))
    assert f"x: Spline, {count} parameters" in other.summary(p).splitlines()


def test_save_and_load_round_trip_exactly(rng, tmp_path):
    scm, _ = model()
    params = jax.tree.map(lambda x: x + rng.normal(size=x.shape).astype(x.dtype), scm.init(key=jax.random.key(0)))
    scm.save(tmp_path / "p", params)
    for got in (scm.load(tmp_path / "p"), load_params(tmp_path / "p"), load_params(tmp_path / "p", like=params)):
        assert jax.tree.structure(got) == jax.tree.structure(params)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(params)):
            assert np.asarray(a).dtype == np.asarray(b).dtype
            np.testing.assert_array_equal(a, b)
    # a second save replaces the first
    second = jax.tree.map(lambda x: x * 2, params)
    save_params(tmp_path / "p", second)
    for a, b in zip(jax.tree.leaves(scm.load(tmp_path / "p")), jax.tree.leaves(second)):
        np.testing.assert_array_equal(a, b)
    scm.save(tmp_path / "q", params)
    with pytest.raises(ValidationError, match="nodes"):
        SCM({"a": [], "c": ["a"]}, {"a": LocationScale(), "c": LocationScale()}).load(tmp_path / "q")
    with pytest.raises(ValidationError, match="`path`"):
        load_params(tmp_path / "missing")


def test_auto_batch_size_is_full_batch_for_small_n_and_minibatches_then_full_batch_for_large_n(rng):
    from cfjax.scm.fit import AUTO_BATCH, AUTO_FULL_BATCH, AUTO_FULL_TAIL
    key = jax.random.key(int(rng.integers(1 << 30)))
    scm, data = sample(rng, AUTO_FULL_BATCH)
    auto, losses_auto, _ = scm.fit(data, key=key, steps=3, learning_rate=0.05, progress=False)
    want, losses, _ = scm.fit(data, key=key, steps=3, learning_rate=0.05, batch_size=None, progress=False)
    np.testing.assert_array_equal(losses_auto, losses)
    for a, b in zip(jax.tree.leaves(auto), jax.tree.leaves(want)):
        np.testing.assert_array_equal(a, b)

    # Beyond the threshold: minibatches of AUTO_BATCH, then the last 1/AUTO_FULL_TAIL of the
    # steps on every unit, each part from a fresh optimizer state. Reference: a plain optax
    # loop over the same minibatches.
    n, steps = AUTO_FULL_BATCH + 1 + int(rng.integers(100)), 2 * AUTO_FULL_TAIL
    tail = steps // AUTO_FULL_TAIL
    scm, data = sample(rng, n)
    start = scm.init(key=jax.random.key(int(rng.integers(1 << 30))))
    opt = optax.adam(0.05)
    auto, losses_auto, _ = scm.fit(data, key=key, steps=steps, optimizer=opt, params=start, progress=False)
    keys = jax.random.split(jax.random.split(key)[1], steps)
    p, ref_losses = start, []
    ref = standard_promotion(opt)  # optax's own arithmetic mixes dtypes (strict promotion in the tests)
    for i in range(steps):
        batch = data
        if i < steps - tail:
            idx = np.asarray(jax.random.randint(keys[i], (AUTO_BATCH,), 0, n))
            batch = {v: x[idx] for v, x in data.items()}
        if i in (0, steps - tail):
            state = ref.init(p)
        value, grads = jax.value_and_grad(lambda q: -scm.log_prob(q, batch).mean())(p)
        updates, state = ref.update(grads, state, p)
        p = optax.apply_updates(p, updates)
        ref_losses.append(float(value))
    np.testing.assert_allclose(losses_auto, ref_losses, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(auto), jax.tree.leaves(p)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    # the minibatch part is that of batch_size=AUTO_BATCH, step for step
    _, losses_mini, _ = scm.fit(data, key=key, steps=steps, optimizer=opt, params=start, batch_size=AUTO_BATCH,
                             progress=False)
    np.testing.assert_array_equal(losses_auto[:steps - tail], losses_mini[:steps - tail])
    with pytest.raises(ValidationError, match="`batch_size`"):
        scm.fit(data, key=key, steps=1, batch_size="full")
    with pytest.raises(ValidationError, match="`learning_rate`"):
        scm.fit(data, key=key, steps=1, learning_rate=0.0)


@pytest.mark.parametrize("n", [20_000, AUTO_FULL_BATCH + 4_000])
def test_fit_with_defaults_reaches_the_ols_solution(rng, n):
    """Default arguments (full batch at 20,000 units; minibatches, then full-batch steps beyond
    the threshold): the maximum-likelihood fit of a linear-Gaussian SCM is OLS per node, its
    noise scale the residuals' RMS."""
    scm, data = sample(rng, n)
    params, _, _ = scm.fit(data, key=jax.random.key(int(rng.integers(1 << 30))), progress=False)
    for v, ps in PARENTS.items():
        design = np.column_stack([np.asarray(data[p], np.float64) for p in ps] + [np.ones(n)])
        coef, *_ = np.linalg.lstsq(design, np.asarray(data[v], np.float64), rcond=None)
        rms = np.sqrt(np.mean((data[v] - design @ coef) ** 2))
        w, b, s = coefficients(params, v)
        np.testing.assert_allclose(np.append(w, b), coef, atol=1e-3, err_msg=v)
        assert s == pytest.approx(rms, rel=1e-2), v



# slow: a replication study of the default fit's quality against an 8,000-step reference fit (about 2 minutes
# of one core); the default fit's mechanics are tested in `make test` by the tests above.
@pytest.mark.slow
def test_spline_fit_with_defaults_is_not_short_of_a_long_full_batch_fit(rng):
    """A non-linear SCM (a spline child of a Gaussian root; its noise heteroscedastic and its
    mean non-linear in the parent) fitted with default arguments: its training mean
    log-likelihood, the objective both fits maximise, is not more than 2e-3 nats per unit short
    of an 8,000-step full-batch fit's, and its held-out one not more than 3e-3. One-sided: the
    default's rounds can run longer than 8,000 steps and end above that fit. Measured with
    5,000 training units over six seeds: default minus long, training -1.1e-3 to +2.1e-3,
    held-out (20,000 units) -1.5e-3 to +2.5e-4; the short end is a default fit that stopped
    after three rounds (a round gained less than 1e-4), so "auto" does not always reach the
    maximum to 1e-3."""
    r = np.random.default_rng(int(rng.integers(1 << 30)))
    n_train, n = 5_000, 25_000
    a = r.standard_normal(n)
    b = np.sin(1.5 * a) + 0.3 * a ** 2 + (0.3 + 0.2 * np.abs(a)) * r.standard_normal(n)
    data = {"a": a.astype(np.float32), "b": b.astype(np.float32)}
    train = {v: x[:n_train] for v, x in data.items()}
    held = {v: x[n_train:] for v, x in data.items()}
    scm = SCM(PARENTS, {"a": LocationScale(), "b": Spline(num_bins=4, hidden=())})
    key = jax.random.key(int(rng.integers(1 << 30)))
    default = scm.fit(train, key=key, progress=False)
    long = scm.fit(train, key=key, steps=8000, batch_size=None, progress=False)
    fitted, reference = (float(scm.log_prob(default.params, train).mean()),
                         float(scm.log_prob(long.params, train).mean()))
    assert fitted >= reference - 2e-3, (fitted, reference, default.info.rounds)
    got, want = float(scm.log_prob(default.params, held).mean()), float(scm.log_prob(long.params, held).mean())
    assert got >= want - 3e-3, (got, want, default.info.rounds)
