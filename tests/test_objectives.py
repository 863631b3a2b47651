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
