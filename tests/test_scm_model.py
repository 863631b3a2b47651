"""The SCM: null interventions, the linear-Gaussian closed form, descendants-only changes,
composition and reversibility, fitting, and input validation."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import pytest
from scipy import stats

import cfjax as cf

S = cf.scm

# The 5-node linear-Gaussian SCM X0→X1→X2→X4, X0→X3→X4.
LG_PARENTS = {"X0": [], "X1": ["X0"], "X2": ["X1"], "X3": ["X0"], "X4": ["X2", "X3"]}
LG_COEF = {"X0": ([], 0.5, 1.0), "X1": ([0.8], -0.2, 0.5), "X2": ([-1.2], 0.1, 0.7),
           "X3": ([0.5], 0.0, 0.9), "X4": ([0.7, 1.3], 0.3, 0.3)}


def linear_gaussian():
    scm = S.SCM(LG_PARENTS, {v: S.LocationScale() for v in LG_PARENTS})
    params = {v: S.linear_gaussian_params(*LG_COEF[v]) for v in LG_PARENTS}
    return scm, params


def closed_form(data, do):
    """Abduct residuals and propagate: a direct transcription of the equations."""
    u = {}
    for v, (w, b, _) in LG_COEF.items():
        pa = sum(wi * data[p] for wi, p in zip(w, LG_PARENTS[v]))
        u[v] = data[v] - pa - b
    k = np.shape(next(iter(do.values())))[-1]
    out = {v: np.zeros((len(data["X0"]), k)) for v in LG_PARENTS}
    for j in range(k):
        vals = {}
        for v in ["X0", "X1", "X2", "X3", "X4"]:
            if v in do:
                val = np.asarray(do[v][:, j] if np.ndim(do[v]) == 2 else do[v][j])
                vals[v] = np.broadcast_to(val, data[v].shape)
            else:
                w, b, _ = LG_COEF[v]
                vals[v] = sum(wi * vals[p] for wi, p in zip(w, LG_PARENTS[v])) + b + u[v]
            out[v][:, j] = vals[v]
    return out


def mixed():
    """Every mechanism type in one graph, parameters perturbed away from their inits."""
    scm = S.SCM(
        {"sex": [], "age": [], "race": [], "lung": ["sex", "age"], "eff": ["age", "race"],
         "y": ["lung", "eff"], "w": []},
        {"sex": S.GumbelMax(2), "age": S.Spline(low=20.0, high=90.0, hidden=(8,)),
         "race": S.GumbelMax(3), "lung": S.LocationScale(hidden=(16,), heteroscedastic=True),
         "eff": S.GumbelMax(2, hidden=(8,)), "y": S.Spline(hidden=(8,)), "w": S.LocationScale()})
    params = scm.init(key=jax.random.key(0))
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    params = jax.tree.unflatten(tree, [l + 0.25 * jax.random.normal(k, l.shape) for l, k in zip(leaves, keys)])
    return scm, params


def assert_close_to(data, values, rtol=1e-5):
    for v, x in data.items():
        x = np.asarray(x)
        got = np.asarray(values[v])
        if np.issubdtype(x.dtype, np.integer):
            np.testing.assert_array_equal(got, x, err_msg=v)
        else:
            np.testing.assert_allclose(got, x, rtol=rtol, atol=rtol * (np.std(x) + 1e-12), err_msg=v)


def test_linear_gaussian_counterfactuals_equal_the_closed_form(rng, x64):
    scm, params = linear_gaussian()
    data = {k: np.asarray(v) for k, v in scm.sample(params, 500, key=jax.random.key(int(rng.integers(1 << 30)))).items()}
    do_x1 = np.linspace(-2, 2, 8)
    shifts = np.linspace(-1, 1, 8)
    for do in ({"X1": do_x1}, {"X3": data["X3"][:, None] + shifts[None, :]},
               {"X1": do_x1, "X3": np.linspace(0, 1, 8)}):
        got = scm.counterfactual(params, data, do)
        want = closed_form(data, do)
        for v in LG_PARENTS:
            assert got[v].shape == (500, 8)
            np.testing.assert_allclose(got[v], want[v], rtol=1e-10, atol=1e-10, err_msg=v)


def test_linear_gaussian_log_prob_is_the_joint_normal_density(rng, x64):
    scm, params = linear_gaussian()
    data = scm.sample(params, 50, key=jax.random.key(0))
    # The joint is N(mean, cov) with x = B x + b + D u  =>  x = (I − B)^-1 (b + D u).
    names = ["X0", "X1", "X2", "X3", "X4"]
    B = np.zeros((5, 5))
    for i, v in enumerate(names):
        for w, p in zip(LG_COEF[v][0], LG_PARENTS[v]):
            B[i, names.index(p)] = w
    A = np.linalg.inv(np.eye(5) - B)
    mean = A @ np.array([LG_COEF[v][1] for v in names])
    cov = A @ np.diag([LG_COEF[v][2] ** 2 for v in names]) @ A.T
    x = np.stack([np.asarray(data[v]) for v in names], axis=1)
    np.testing.assert_allclose(scm.log_prob(params, data), stats.multivariate_normal(mean, cov).logpdf(x), rtol=1e-9)


def test_null_intervention_returns_the_observation_for_every_mechanism(rng):
    scm, params = mixed()
    data = scm.sample(params, 3000, key=jax.random.key(int(rng.integers(1 << 30))))
    key = jax.random.key(2)
    assert_close_to(data, {v: x[:, 0] for v, x in scm.counterfactual(params, data, {}, key=key).items()})
    for node in scm.nodes:  # do(node = its own observed value), per unit
        out = scm.counterfactual(params, data, {node: np.asarray(data[node])[:, None]}, key=key)
        assert_close_to(data, {v: x[:, 0] for v, x in out.items()})


def test_an_intervention_changes_only_descendants(rng):
    scm, params = mixed()
    data = scm.sample(params, 1000, key=jax.random.key(3))
    do, _ = S.intervention_grid({"sex": [0, 1], "age": np.linspace(20, 90, 8)})
    out = scm.counterfactual(params, data, do, key=jax.random.key(4))
    changed = {"sex", "age"} | set(scm.graph.descendants("sex")) | set(scm.graph.descendants("age"))
    for v in scm.nodes:
        assert out[v].shape == (1000, 16)
        if v not in changed:  # non-descendants keep their values exactly
            np.testing.assert_array_equal(out[v], np.broadcast_to(np.asarray(data[v])[:, None], (1000, 16)), err_msg=v)
    np.testing.assert_array_equal(out["sex"], np.repeat(do["sex"][None, :], 1000, axis=0))
    np.testing.assert_allclose(out["age"], np.repeat(do["age"][None, :], 1000, axis=0), rtol=1e-6)
    assert not np.allclose(out["lung"], np.asarray(data["lung"])[:, None])


def test_composition_null_intervention_repeated_is_the_identity(rng):
    scm, params = mixed()
    data = scm.sample(params, 1000, key=jax.random.key(5))
    current = data
    roots = [v for v, ps in zip(scm.graph.order, scm.graph.parents) if not ps]
    for m in range(5):  # do(roots = observed roots): every other node is recomputed
        null = {v: np.asarray(current[v])[:, None] for v in roots}
        current = {v: x[:, 0] for v, x in scm.counterfactual(params, current, null, key=jax.random.key(10 + m)).items()}
    assert_close_to(data, current, rtol=5e-5)


def test_reversibility_intervene_then_intervene_back(rng):
    scm, params = mixed()
    data = scm.sample(params, 1000, key=jax.random.key(6))
    noise = scm.abduct(params, data, key=jax.random.key(7))
    there = scm.counterfactual(params, data, {"age": np.full(1, 35.0)}, noise=noise)
    there = {v: x[:, 0] for v, x in there.items()}
    back = scm.counterfactual(params, there, {"age": np.asarray(data["age"])[:, None]}, noise=noise)
    # Two predictions deep: round-off in a parent is amplified by steep spline regions.
    assert_close_to(data, {v: x[:, 0] for v, x in back.items()}, rtol=1e-4)
    # Continuous-only SCM: re-abducting from the counterfactual world recovers the noise too.
    lg, lp = linear_gaussian()
    d = lg.sample(lp, 300, key=jax.random.key(8))
    there = {v: x[:, 0] for v, x in lg.counterfactual(lp, d, {"X1": np.array([3.0])}).items()}
    back = lg.counterfactual(lp, there, {"X1": np.asarray(d["X1"])[:, None]})
    assert_close_to(d, {v: x[:, 0] for v, x in back.items()})


def test_abduction_happens_once_and_noise_can_be_reused(rng, monkeypatch):
    scm, params = mixed()
    data = scm.sample(params, 200, key=jax.random.key(9))
    noise = scm.abduct(params, data, key=jax.random.key(1))
    jax.clear_caches()  # so that the compiled program is traced (and abduction counted) anew
    calls = []
    original = S.SCM.abduct_unit
    monkeypatch.setattr(S.SCM, "abduct_unit", lambda self, *a: calls.append(1) or original(self, *a))
    do, _ = S.intervention_grid({"sex": [0, 1], "age": np.linspace(20, 90, 8)})
    out = scm.counterfactual(params, data, do, key=jax.random.key(1))
    assert len(calls) == 1
    again = scm.counterfactual(params, data, do, noise=noise)
    assert len(calls) == 1
    for v in scm.nodes:  # same noise; one program vs two only changes the rounding
        np.testing.assert_allclose(out[v], again[v], rtol=1e-4, atol=1e-5)


def test_groups_of_interventions_on_different_nodes_concatenate_along_k(rng):
    scm, params = linear_gaussian()
    data = scm.sample(params, 300, key=jax.random.key(13))
    first = {"X1": np.linspace(-2, 2, 8)}
    second = {"X3": np.asarray(data["X3"])[:, None] + np.linspace(-1, 1, 8)[None, :]}
    both = scm.counterfactual(params, data, [first, second])
    a, b = scm.counterfactual(params, data, first), scm.counterfactual(params, data, second)
    for v in scm.nodes:
        assert both[v].shape == (300, 16)
        np.testing.assert_allclose(both[v], np.concatenate([a[v], b[v]], axis=1), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"`interventions\[1\]`: unknown node 'Q'"):
        scm.counterfactual(params, data, [first, {"Q": np.zeros(1)}])


def test_shift_interventions_equal_explicit_per_unit_values(rng):
    scm, params = linear_gaussian()
    data = scm.sample(params, 200, key=jax.random.key(int(rng.integers(1 << 30))))
    x3 = np.asarray(data["X3"])
    delta = rng.normal(size=6).astype(np.float32)
    per_unit = rng.normal(size=(200, 3)).astype(np.float32)
    explicit = [{"X1": np.linspace(-2, 2, 4)}, {"X3": x3[:, None] + delta[None, :]}, {"X3": x3[:, None] + per_unit}]
    shifted = [explicit[0], {"X3": S.Shift(delta)}, {"X3": S.Shift(per_unit)}]
    want = scm.counterfactual(params, data, explicit)
    noise = scm.abduct(params, data)
    for got in (scm.counterfactual(params, data, shifted), scm.counterfactual(params, data, shifted, noise=noise),
                jax.jit(lambda p, d: scm.counterfactual(p, d, shifted))(params, data)):
        for v in scm.nodes:
            assert got[v].shape == (200, 13)
            np.testing.assert_allclose(got[v], want[v], rtol=1e-6, atol=1e-6, err_msg=v)


def test_shift_interventions_are_validated():
    scm, params = mixed()
    data = {k: np.asarray(v) for k, v in scm.sample(params, 50, key=jax.random.key(0)).items()}
    key = jax.random.key(1)
    with pytest.raises(ValueError, match="'race' is discrete"):
        scm.counterfactual(params, data, {"race": S.Shift(np.array([1]))}, key=key)
    with pytest.raises(ValueError, match=r"support \[20.0, 90.0\]"):  # some age + 80 > 90
        scm.counterfactual(params, data, {"age": S.Shift(np.array([0.0, 80.0]))}, key=key)
    with pytest.raises(ValueError, match=r"shape \(K,\) or \(50, K\)"):
        scm.counterfactual(params, data, {"age": S.Shift(np.zeros((7, 2)))}, key=key)
    with pytest.raises(ValueError, match="only defined for counterfactuals"):
        scm.interventional_samples(params, 10, {"age": S.Shift(np.array([1.0]))}, key=key)
    noise = scm.abduct(params, data, key=key)
    with pytest.raises(ValueError, match=r"`interventions\['age'\].delta`.*NaN"):
        scm.counterfactual(params, data, {"age": S.Shift(np.array([np.nan]))}, noise=noise)


def test_batched_counterfactual_equals_the_single_unit_functions(rng):
    scm, params = mixed()
    data = scm.sample(params, 20, key=jax.random.key(11))
    noise = scm.abduct(params, data, key=jax.random.key(12))
    do = {"age": np.array([25.0, 60.0]), "race": np.array([0, 2])}
    out = scm.counterfactual(params, data, do, noise=noise)
    for k in range(2):
        for i in (0, 7, 19):
            unit = scm.predict_unit(params, {v: n[i] for v, n in noise.items()},
                                    {"age": jnp.float32(do["age"][k]), "race": jnp.int32(do["race"][k])})
            for v in scm.nodes:
                np.testing.assert_allclose(out[v][i, k], unit[v], rtol=1e-5, atol=1e-6, err_msg=v)


def test_fit_recovers_a_simulated_linear_gaussian_scm(rng):
    scm, true = linear_gaussian()
    data = scm.sample(true, 20_000, key=jax.random.key(int(rng.integers(1 << 30))))
    params, losses, _ = scm.fit(data, key=jax.random.key(1), steps=600, learning_rate=0.05, batch_size=None)
    assert losses.shape == (600,) and float(losses[-1]) < float(losses[0])
    for v, (w, b, s) in LG_COEF.items():
        got = params[v]["net"]["params"]
        kernel = got["Dense_0"]["kernel"][:, 0] if w else jnp.zeros(0)
        bias = got["Dense_0"]["bias"][0] if w else got["bias"][0]
        np.testing.assert_allclose(kernel, w, atol=0.03, err_msg=v)
        assert float(bias) == pytest.approx(b, abs=0.03), v
        assert float(jnp.exp(params[v]["log_scale"])) == pytest.approx(s, rel=0.03), v


def test_fit_recovers_categorical_logits_with_minibatches(rng):
    scm = S.SCM({"a": [], "b": ["a"]}, {"a": S.GumbelMax(3), "b": S.GumbelMax(2)})
    true = scm.init(key=jax.random.key(0))
    true["a"]["net"]["params"]["bias"] = jnp.array([0.0, 1.0, -1.0])
    true["b"]["net"]["params"]["Dense_0"]["kernel"] = jnp.array([[0.0, 2.0], [0.0, -1.0], [0.0, 0.5]])
    data = scm.sample(true, 50_000, key=jax.random.key(int(rng.integers(1 << 30))))
    # Adam's minibatch noise is averaged out by a decaying step size.
    schedule = optax.exponential_decay(0.05, transition_steps=2000, decay_rate=0.05)
    params, losses, _ = scm.fit(data, key=jax.random.key(1), steps=2000, batch_size=4096,
                             optimizer=optax.adam(schedule))
    p_true = jax.nn.softmax(true["a"]["net"]["params"]["bias"])
    p_fit = jax.nn.softmax(params["a"]["net"]["params"]["bias"])
    np.testing.assert_allclose(p_fit, p_true, atol=0.02)
    onehots = jnp.eye(3)
    for c in range(3):
        want = jax.nn.softmax(scm.mechanism("b").logits(true["b"], onehots[c]))
        got = jax.nn.softmax(scm.mechanism("b").logits(params["b"], onehots[c]))
        np.testing.assert_allclose(got, want, atol=0.03)


def test_interventional_samples_follow_the_intervened_model(rng):
    scm, params = linear_gaussian()
    out = scm.interventional_samples(params, 40_000, {"X1": np.array([-1.0, 2.0])}, key=jax.random.key(2))
    # X2 | do(X1 = v) ~ N(-1.2 v + 0.1, 0.7^2); X0 is untouched.
    for k, v in enumerate([-1.0, 2.0]):
        assert float(jnp.mean(out["X2"][:, k])) == pytest.approx(-1.2 * v + 0.1, abs=0.02)
        assert float(jnp.std(out["X2"][:, k])) == pytest.approx(0.7, rel=0.02)
    np.testing.assert_array_equal(out["X0"][:, 0], out["X0"][:, 1])


def test_dataframe_input_is_accepted(rng):
    scm, params = linear_gaussian()
    data = scm.sample(params, 100, key=jax.random.key(3))
    frame = pd.DataFrame({k: np.asarray(v) for k, v in data.items()})
    a = scm.counterfactual(params, frame, {"X1": np.array([0.0])})
    b = scm.counterfactual(params, data, {"X1": np.array([0.0])})
    np.testing.assert_array_equal(a["X4"], b["X4"])
    np.testing.assert_allclose(scm.log_prob(params, frame), scm.log_prob(params, data))


def test_intervention_grid_is_the_product_with_weights():
    do, q = S.intervention_grid({"sex": [0, 1], "age": np.linspace(20, 90, 8)})
    assert do["sex"].tolist() == [0] * 8 + [1] * 8
    assert do["age"].tolist() == list(np.linspace(20, 90, 8)) * 2
    np.testing.assert_allclose(q, np.full(16, 1 / 16))
    _, q = S.intervention_grid({"sex": [0, 1], "age": [30, 60]}, weights={"sex": [1, 3], "age": [1, 1]})
    np.testing.assert_allclose(q, [0.125, 0.125, 0.375, 0.375])
    _, q = S.intervention_grid({"a": [1, 2]}, weights=np.array([0.2, 0.8]))
    np.testing.assert_allclose(q, [0.2, 0.8])
    with pytest.raises(ValueError, match="weights"):
        S.intervention_grid({"a": [1, 2]}, weights=np.array([0.2, 0.7]))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda d: ({"nope": np.zeros(2)}, d), "unknown node 'nope'"),
        (lambda d: ({"age": np.array([10.0])}, d), r"support \[20.0, 90.0\]"),
        (lambda d: ({"race": np.array([3])}, d), "classes 0..2"),
        (lambda d: ({"age": np.zeros((7, 2)) + 30}, d), r"shape \(K,\) or \(50, K\)"),
        (lambda d: ({"age": np.array([30.0, 40.0]), "sex": np.array([0])}, d), "K = 2"),
        (lambda d: ({"age": np.array([30.0])}, {k: v for k, v in d.items() if k != "age"}),
         r"missing column 'age' \(a parent of \['lung', 'eff'\]\)"),
        (lambda d: ({"age": np.array([30.0])}, {**d, "lung": np.where(np.arange(50) == 3, np.nan, d["lung"])}),
         "'lung' has 1 NaN"),
        (lambda d: ({"age": np.array([30.0])}, {**d, "w": np.asarray(d["w"])[:-1]}), "expected 50 rows"),
    ],
)
def test_bad_input_is_rejected(make, match):
    scm, params = mixed()
    data = {k: np.asarray(v) for k, v in scm.sample(params, 50, key=jax.random.key(0)).items()}
    do, data = make(data)
    with pytest.raises(ValueError, match=match):
        scm.counterfactual(params, data, do, key=jax.random.key(1))


def test_stochastic_abduction_needs_a_key():
    scm, params = mixed()
    data = scm.sample(params, 5, key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"\['sex', 'race', 'eff'\].*need a key"):
        scm.counterfactual(params, data, {"age": np.array([30.0])})


def test_mechanisms_must_cover_the_graph():
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        S.SCM({"a": [], "b": ["a"]}, {"a": S.LocationScale()})
