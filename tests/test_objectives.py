"""Counterfactual training objectives: values against numpy references, gradients against
central differences in float64, the zero-strength penalty as the basic objective bit for bit,
the augmentation's expectation, and clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax as cf

O = cf.predictors.objectives


def np_bce(c, y):
    """``−y log σ(c) − (1 − y) log(1 − σ(c))`` in numpy (log1p/exp form, stable)."""
    return np.logaddexp(0.0, c) - y * c


def np_cvar(losses, q, alpha):
    """Worst ``alpha`` of the q-mass of one unit's losses, the boundary atom split (reference)."""
    order = np.argsort(-losses)
    total, mass = 0.0, 0.0
    for i in order:
        take = min(q[i], alpha - mass)
        if take <= 0:
            break
        total += take * losses[i]
        mass += take
    return total / alpha


def references(o, c, y, q, alpha, strength):
    L = np_bce(c, y[:, None])
    p, pc = 1 / (1 + np.exp(-o)), 1 / (1 + np.exp(-c))
    mean = c @ q
    basic = np.mean(np_bce(o, y))
    return {
        "cf_risk": np.mean(L @ q),
        "cvar": np.mean([np_cvar(L[i], q, alpha) for i in range(len(y))]),
        "variance": basic + strength * np.mean(((c - mean[:, None]) ** 2) @ q),
        "flip": basic + strength * np.mean((pc * (1 - p[:, None]) + (1 - pc) * p[:, None]) @ q),
        "basic": basic,
    }


def random_batch(rng, n=6, k=5):
    o = rng.normal(scale=2.0, size=n)
    c = o[:, None] + rng.normal(scale=1.5, size=(n, k))
    y = (rng.random(n) < 0.5).astype(float)
    q = rng.dirichlet(np.ones(k))
    return o, c, y, q


@pytest.mark.parametrize("name", ["basic", "cf_risk", "cvar", "variance", "flip"])
def test_objectives_match_numpy_and_their_gradients_match_central_differences(rng, x64, name):
    o, c, y, q = random_batch(rng)
    alpha, strength = float(rng.uniform(0.2, 0.9)), float(rng.uniform(0.1, 2.0))
    obj = cf.predictors.Objective(name, strength=strength if name in ("variance", "flip") else 0.0, alpha=alpha)
    ours = float(obj(jnp.asarray(o), jnp.asarray(c), jnp.asarray(y), weights=jnp.asarray(q)))
    assert ours == pytest.approx(references(o, c, y, q, alpha, strength)[name], rel=1e-12)

    def ref(o, c):
        return references(o, c, y, q, alpha, strength)[name]

    grad_o, grad_c = jax.grad(lambda o, c: obj(o, c, jnp.asarray(y), weights=jnp.asarray(q)), argnums=(0, 1))(
        jnp.asarray(o), jnp.asarray(c))
    h = 1e-6
    fd_o = np.array([(ref(o + h * e, c) - ref(o - h * e, c)) / (2 * h) for e in np.eye(o.size)])
    fd_c = np.array([(ref(o, c + h * e.reshape(c.shape)) - ref(o, c - h * e.reshape(c.shape))) / (2 * h)
                     for e in np.eye(c.size)]).reshape(c.shape)
    np.testing.assert_allclose(grad_o, fd_o, atol=1e-7)
    np.testing.assert_allclose(grad_c, fd_c, atol=1e-7)


def test_cvar_at_one_is_the_counterfactual_risk_and_grows_as_alpha_falls(rng, x64):
    o, c, y, q = random_batch(rng)
    c, y, q = jnp.asarray(c), jnp.asarray(y), jnp.asarray(q)
    assert float(O.cf_cvar(c, y, 1.0, q)) == pytest.approx(float(O.cf_risk(c, y, q)), rel=1e-12)
    levels = [1.0, 0.7, 0.4, 0.1]
    values = [float(O.cf_cvar(c, y, a, q)) for a in levels]
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:]))


def test_a_penalty_of_zero_strength_trains_as_basic_bit_for_bit(rng):
    # A linear classifier's loss and gradient: the penalised objective at strength 0 is the
    # basic objective's program, so both are equal to the last bit.
    x = jnp.asarray(rng.normal(size=(32, 4)), jnp.float32)
    x_cf = jnp.asarray(rng.normal(size=(32, 16, 4)), jnp.float32)
    y = jnp.asarray(rng.random(32) < 0.5, jnp.float32)
    w = jnp.asarray(rng.normal(size=4), jnp.float32)

    def loss(obj, w):
        return obj(x @ w, x_cf @ w, y)

    for name in ("variance", "flip"):
        zero = cf.predictors.Objective(name, strength=0.0)
        basic = cf.predictors.Objective("basic")
        assert not zero.needs_counterfactuals
        a, ga = jax.value_and_grad(lambda w: loss(zero, w))(w)
        b, gb = jax.value_and_grad(lambda w: loss(basic, w))(w)
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
        assert np.asarray(ga).tobytes() == np.asarray(gb).tobytes()
        positive = cf.predictors.Objective(name, strength=1.0)
        assert float(loss(positive, w)) > float(b)


def test_augmentation_draws_one_counterfactual_per_unit_and_averages_to_the_risk(rng, x64):
    o, c, y, q = random_batch(rng, n=8, k=4)
    c, y, q = jnp.asarray(c), jnp.asarray(y), jnp.asarray(q)
    # All the weight on one intervention: that column's loss, exactly.
    for j in range(4):
        onehot = jnp.eye(4)[j]
        want = float(jnp.mean(jnp.asarray(np_bce(np.asarray(c[:, j]), np.asarray(y)))))
        assert float(O.cf_augmented(c, y, key=int(rng.integers(1 << 30)), weights=onehot)) == pytest.approx(want,
                                                                                                         rel=1e-12)
    # Over many draws, the mean is the counterfactual risk (within 5 standard errors).
    keys = jax.random.split(jax.random.key(int(rng.integers(1 << 30))), 4000)
    draws = np.asarray(jax.vmap(lambda k: O.cf_augmented(c, y, key=k, weights=q))(keys))
    se = draws.std() / np.sqrt(draws.size)
    assert abs(draws.mean() - float(O.cf_risk(c, y, q))) < 5 * se + 1e-12
    # The draws follow q.
    k = np.asarray(O.draw_interventions(20000, q, key=int(rng.integers(1 << 30))))
    freq = np.bincount(k, minlength=4) / k.size
    np.testing.assert_allclose(freq, np.asarray(q), atol=5 * np.sqrt(0.25 / k.size))


def test_bad_objectives_and_inputs_are_named():
    Objective = cf.predictors.Objective
    with pytest.raises(ValueError, match=r"`objective`: expected one of 'basic', .*got 'stable'"):
        Objective("stable")
    for bad in (-0.1, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match=r"`strength`: expected a finite penalty strength >= 0"):
            Objective("variance", strength=bad)
    for bad in (0.0, 1.5, -0.2, float("nan"), True):
        with pytest.raises(ValueError, match=r"`alpha`: expected a CVaR level in \(0, 1\]"):
            Objective("cvar", alpha=bad)
    with pytest.raises(ValueError, match=r"`alpha`: expected a CVaR level"):
        O.cf_cvar(jnp.zeros((2, 3)), jnp.zeros(2), 0.0)
    with pytest.raises(ValueError, match=r"`logits_cf`: expected counterfactual logits of shape \(N, K\)"):
        O.cf_risk(jnp.zeros(3), jnp.zeros(3))
    with pytest.raises(ValueError, match=r"`y`: expected labels of shape \(2,\)"):
        O.cf_risk(jnp.zeros((2, 3)), jnp.zeros(3))
    with pytest.raises(ValueError, match=r"`weights`: expected weights summing to 1"):
        O.cf_risk(jnp.zeros((2, 3)), jnp.zeros(2), weights=jnp.ones(3))
    with pytest.raises(ValueError, match=r"`logits_obs`: expected factual logits of shape \(2,\)"):
        O.flip_probability(jnp.zeros(3), jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"`logits_cf`: expected counterfactual logits .* for the objective 'cf_risk'"):
        Objective("cf_risk")(jnp.zeros(2), None, jnp.zeros(2))
    with pytest.raises(ValueError, match=r"`key`: expected a key for the augmentation's draws"):
        Objective("augment")(jnp.zeros(2), jnp.zeros((2, 3)), jnp.zeros(2))
    assert hash(Objective("cvar", alpha=0.5)) == hash(Objective("cvar", alpha=0.5))


# --- validation at the boundary: shapes against each other, labels, weights, strengths ---------------------------

N, K = 4, 3
NAMES = ["basic", "variance", "flip", "cf_risk", "cvar", "augment"]
PENALTIES = ("variance", "flip")
# (what is wrong, the argument named, (logits_obs, logits_cf, y) of the batch)
SHAPE_CASES = [
    ("labels of N + 1 units", "y", (np.zeros(N), np.zeros((N, K)), np.zeros(N + 1))),
    ("labels of shape (1,)", "y", (np.zeros(N), np.zeros((N, K)), np.zeros(1))),
    ("labels of shape (N, 1)", "y", (np.zeros(N), np.zeros((N, K)), np.zeros((N, 1)))),
    ("factual logits of N + 1 units", "logits_obs", (np.zeros(N + 1), np.zeros((N, K)), np.zeros(N))),
    ("factual logits of shape (N, 1)", "logits_obs", (np.zeros((N, 1)), np.zeros((N, K)), np.zeros(N))),
    ("factual logits of shape (1,)", "logits_obs", (np.zeros(1), np.zeros((N, K)), np.zeros(N))),
    ("counterfactual logits of N - 1 units", "logits_cf", (np.zeros(N), np.zeros((N - 1, K)), np.zeros(N))),
    ("counterfactual logits of N + 1 units", "logits_cf", (np.zeros(N), np.zeros((N + 1, K)), np.zeros(N))),
]


def objective(name, strength=0.5):
    return cf.predictors.Objective(name, strength=strength if name in ("variance", "flip") else 0.0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("what, arg, batch", SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_objective_compares_the_shapes_of_its_arrays(name, what, arg, batch):
    o, c, y = (jnp.asarray(v, jnp.float32) for v in batch)
    with pytest.raises(cf._checks.ValidationError, match=f"`{arg}`: expected"):
        objective(name)(o, c, y, key=0)
    # Shapes are static: the same check holds inside a compiled step, with every array traced.
    with pytest.raises(cf._checks.ValidationError, match=f"`{arg}`: expected"):
        jax.jit(lambda o, c, y: objective(name).loss(o, c, y, strength=jnp.float32(0.5), key=0))(o, c, y)


def test_a_penalty_without_counterfactuals_still_compares_factual_logits_and_labels():
    obj = objective("variance", 0.0)  # strength 0: the basic objective, logits_cf unused
    with pytest.raises(cf._checks.ValidationError, match=r"`y`: expected labels of shape \(4,\), one per unit of "
                                                         r"logits_obs, got shape \(1,\)"):
        obj(jnp.zeros(N), None, jnp.zeros(1))
    with pytest.raises(cf._checks.ValidationError, match=r"`logits_obs`: expected 1-d array of factual logits"):
        obj(jnp.zeros((N, 1)), None, jnp.zeros((N, 1)))


@pytest.mark.parametrize("bad", [2.0, -1.0, 0.5, float("nan")])
def test_labels_outside_zero_one_are_refused_by_every_objective(bad):
    o, c = jnp.zeros(N), jnp.zeros((N, K))
    y = jnp.array([0.0, 1.0, bad, 0.0])
    calls = [lambda: objective(name)(o, c, y, key=0) for name in NAMES] + [
        lambda: O.cf_risk(c, y), lambda: O.cf_cvar(c, y, 0.5), lambda: O.cf_augmented(c, y, key=0),
        lambda: O.group_dro(o, y, jnp.array([0, 1, 0, 1]), jnp.array([0.5, 0.5]), 0.1),
        lambda: cf.predictors.Objective("group_dro", 0.1)(o, None, y, groups=jnp.array([0, 1, 0, 1]),
                                                        group_weights=jnp.array([0.5, 0.5]))]
    for call in calls:
        with pytest.raises(cf._checks.ValidationError, match=r"`y`: expected labels in \{0, 1\}"):
            call()


def test_traced_labels_pass_through_unchecked(rng, x64):
    # Inside a compiled step the labels are data: no host check, the loss of a soft label is
    # the cross-entropy's own value.
    o, c, _, q = random_batch(rng)
    y = rng.uniform(size=o.size)
    for name in ("basic", "variance", "flip", "cf_risk", "cvar"):
        obj = cf.predictors.Objective(name, strength=0.7 if name in PENALTIES else 0.0, alpha=0.4)
        got = jax.jit(lambda o, c, y: obj(o, c, y, weights=jnp.asarray(q)))(jnp.asarray(o), jnp.asarray(c),
                                                                             jnp.asarray(y))
        assert float(got) == pytest.approx(references(o, c, y, q, 0.4, 0.7)[name], rel=1e-12)


@pytest.mark.parametrize("weights, match", [
    (np.full(3, 0.3), "weights summing to 1"),
    (np.array([-0.1, 0.6, 0.5]), "non-negative weights"),
    (np.array([np.nan, 0.5, 0.5]), "weights without NaN"),
    (np.array([[0.2, 0.4, 0.4]]), r"intervention weights of shape \(K,\)"),
    (np.zeros(0), r"intervention weights of shape \(K,\)"),
], ids=["sum 0.9", "negative", "NaN", "shape (1, K)", "empty"])
def test_draw_interventions_refuses_bad_weights(weights, match):
    with pytest.raises(cf._checks.ValidationError, match=f"`weights`: expected {match}"):
        O.draw_interventions(5, jnp.asarray(weights, jnp.float32), key=0)


@pytest.mark.parametrize("n", [0, -1, 2.0, True, None])
def test_draw_interventions_refuses_a_bad_unit_count(n):
    with pytest.raises(cf._checks.ValidationError, match=r"`n`: expected an integer >= 1"):
        O.draw_interventions(n, jnp.full(3, 1 / 3), key=0)


def test_draw_interventions_takes_integer_one_hot_weights():
    assert O.draw_interventions(6, np.array([0, 0, 1]), key=3).tolist() == [2] * 6


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("strength", [-1.0, -1e-9, float("nan"), float("inf"), np.float32(-2.0),
                                      jnp.asarray(-0.5), jnp.ones(2)], ids=lambda s: repr(s)[:20])
def test_loss_refuses_a_concrete_bad_strength(name, strength):
    o, c, y = jnp.zeros(N), jnp.zeros((N, K)), jnp.array([0.0, 1.0, 1.0, 0.0])
    with pytest.raises(cf._checks.ValidationError, match=r"`strength`: expected a (finite|scalar) penalty strength"):
        objective(name).loss(o, c, y, strength=strength, key=0)


def test_a_traced_strength_is_data(rng, x64):
    # The trainer vmaps the members of one objective over their strengths: the strengths are
    # traced and each member's loss is its own objective's.
    o, c, y, q = random_batch(rng)
    strengths = np.array([0.0, 0.3, 2.5])
    for name in PENALTIES:
        kind = cf.predictors.Objective(name, strength=1.0)
        got = jax.vmap(lambda s: kind.loss(jnp.asarray(o), jnp.asarray(c), jnp.asarray(y), strength=s,
                                           weights=jnp.asarray(q)))(jnp.asarray(strengths))
        want = [references(o, c, y, q, 1.0, s)[name] for s in strengths]
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("arg, batch", [
    ("logits_obs", (np.array([0.0, np.nan, 1.0, 0.0]), np.zeros((N, K)))),
    ("logits_obs", (np.array([0.0, np.inf, 1.0, 0.0]), np.zeros((N, K)))),
    ("logits_cf", (np.zeros(N), np.where(np.eye(N, K) > 0, np.nan, 0.0))),
    ("logits_cf", (np.zeros(N), np.where(np.eye(N, K) > 0, -np.inf, 0.0))),
    ("logits_cf", (np.zeros(0), np.zeros((0, K)))),
    ("logits_cf", (np.zeros(N), np.zeros((N, 0)))),
], ids=["NaN factual", "inf factual", "NaN counterfactual", "inf counterfactual", "no units", "no interventions"])
def test_non_finite_or_empty_logits_are_named(arg, batch):
    o, c = (jnp.asarray(v, jnp.float32) for v in batch)
    y = jnp.zeros(o.shape[0])
    for name in ("variance", "flip"):
        with pytest.raises(cf._checks.ValidationError, match=f"`{arg}`: expected"):
            objective(name)(o, c, y)
    with pytest.raises(cf._checks.ValidationError, match=f"`{arg}`: expected"):
        O.flip_probability(o, c)


@pytest.mark.parametrize("kwargs, arg", [
    (dict(groups=jnp.array([0, 1, 2, 0])), "groups"),
    (dict(groups=jnp.array([0, -1, 1, 0])), "groups"),
    (dict(groups=jnp.array([0.0, 1.0, 1.0, 0.0])), "groups"),
    (dict(groups=jnp.array([0, 1, 1])), "groups"),
    (dict(group_weights=jnp.array([0.6, 0.6])), "group_weights"),
    (dict(group_weights=jnp.array([-0.5, 1.5])), "group_weights"),
    (dict(group_weights=jnp.array([[0.5, 0.5]])), "group_weights"),
    (dict(step_size=-0.1), "step_size"),
    (dict(step_size=float("nan")), "step_size"),
    (dict(y=jnp.zeros(5)), "y"),
    (dict(y=None), "y"),
], ids=["group past G", "negative group", "float groups", "N - 1 groups", "weights sum 1.2", "negative weight",
        "weights (1, G)", "negative step", "NaN step", "N + 1 labels", "no labels"])
def test_group_dro_refuses_bad_inputs(kwargs, arg):
    args = dict(logits_obs=jnp.zeros(N), y=jnp.array([0.0, 1.0, 1.0, 0.0]), groups=jnp.array([0, 1, 1, 0]),
                group_weights=jnp.array([0.5, 0.5]), step_size=0.1) | kwargs
    with pytest.raises(cf._checks.ValidationError, match=f"`{arg}`: expected"):
        O.group_dro(**args)
