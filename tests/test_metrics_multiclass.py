"""The multi-class stability core: class probabilities (n, C) / (n, K, C) against numpy loops,
C = 2 equal to the binary API, the representation scores built on the same kernels, and
validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax as cf
import cfjax.representations as R


def classes(rng, n, k, c):
    p_obs = rng.dirichlet(np.ones(c), n)
    p_cf = rng.dirichlet(np.ones(c), (n, k))
    return p_obs, p_cf


def loops(p_obs, p_cf, q):
    """S_var, S_flip, D_obs, score shift by explicit loops over units, interventions, classes."""
    n, k, c = p_cf.shape
    s_var = s_flip = d_obs = shift = 0.0
    for i in range(n):
        p_bar = [sum(q[j] * p_cf[i, j, a] for j in range(k)) for a in range(c)]
        s_var += sum(q[j] * 0.5 * sum((p_cf[i, j, a] - p_bar[a]) ** 2 for a in range(c))
                     for j in range(k))
        decided = max(range(c), key=lambda a: (p_obs[i, a], -a))  # first maximal class
        s_flip += sum(q[j] * (max(range(c), key=lambda a: (p_cf[i, j, a], -a)) != decided)
                      for j in range(k))
        d_obs += max(range(c), key=lambda a: (p_bar[a], -a)) != decided
        shift += 0.5 * sum(abs(p_obs[i, a] - p_bar[a]) for a in range(c))
    return s_var / n, s_flip / n, d_obs / n, shift / n


def four(p_obs, p_cf, q=None, **kw):
    M = cf.metrics
    return (M.stability_variance(p_cf, q), M.flip_rate(p_obs, p_cf, q, **kw),
            M.decision_disagreement(p_obs, p_cf, q, **kw), M.score_shift(p_obs, p_cf, q))


def test_class_probability_fields_match_loops(rng, x64):
    p_obs, p_cf = classes(rng, 60, 5, 4)
    p_cf[:10, :2] = p_obs[:10, None]  # some interventions leave the decision alone
    q = rng.dirichlet(np.ones(5))
    np.testing.assert_allclose(four(p_obs, p_cf, q), loops(p_obs, p_cf, q), rtol=1e-10, atol=1e-14)


def test_argmax_ties_go_to_the_first_class(x64):
    p_obs = np.array([[0.4, 0.4, 0.2]])
    p_cf = np.array([[[0.3, 0.3, 0.4], [0.2, 0.4, 0.4]]])
    q = np.array([0.5, 0.5])
    np.testing.assert_allclose(four(p_obs, p_cf, q), loops(p_obs, p_cf, q), rtol=1e-12)
    assert float(cf.metrics.flip_rate(p_obs, p_cf)) == 1.0  # class 0 → 2 and 0 → 1


def test_two_classes_equal_the_binary_api(rng, x64):
    n, k = 80, 6
    p1 = rng.uniform(size=(n, k))
    p1[:5] = np.round(p1[:5], 1)  # ties between units, but no score exactly 0.5:
    p1[np.isclose(p1, 0.5)] = 0.55  # there 1[p >= 0.5] = 1 and argmax(0.5, 0.5) = 0
    p_obs1 = p1[:, 0]
    q = rng.dirichlet(np.ones(k))
    as_classes = lambda p: np.stack([1 - p, p], axis=-1)  # noqa: E731
    binary = four(p_obs1, p1, q)
    multi = four(as_classes(p_obs1), as_classes(p1), q)
    np.testing.assert_allclose(multi, binary, rtol=1e-12, atol=1e-15)
    # The documented exception: a score of exactly 0.5.
    half = np.array([0.5])
    assert float(cf.metrics.flip_rate(half, np.array([[0.4]]))) == 1.0
    assert float(cf.metrics.flip_rate(as_classes(half), as_classes(np.array([[0.4]])))) == 0.0


def test_float32_two_classes_close_to_binary(rng):
    p1 = rng.uniform(0.01, 0.99, size=(200, 4)).astype(np.float32)
    as_classes = lambda p: np.stack([1 - p, p], axis=-1)  # noqa: E731
    np.testing.assert_allclose(four(as_classes(p1[:, 0]), as_classes(p1)),
                               four(p1[:, 0], p1), rtol=2e-6, atol=1e-7)


def test_representation_scores_are_the_same_kernels(rng):
    # ATV/ATE is the score shift against a single (K = 1) counterfactual; 1 − PIP the decision
    # disagreement; identical floating-point operations, so equal to the last bit.
    n, c = 300, 3
    p_obs, p_true, p_cfr = (rng.dirichlet(np.ones(c), n).astype(np.float32) for _ in range(3))
    p_cfr[:20] = 1 / c  # ties
    s = R.score(p_obs, p_true, p_cfr)
    assert float(s.atv) == float(cf.metrics.score_shift(p_cfr, p_true[:, None]))
    assert float(s.ate) == float(cf.metrics.score_shift(p_obs, p_true[:, None]))
    disagreement = float(cf.metrics.decision_disagreement(p_true, p_cfr[:, None]))
    assert float(s.pip) == pytest.approx(1 - disagreement, abs=1e-6)


def test_vmap_over_predictors(rng):
    P_obs, P_cf = zip(*(classes(rng, 40, 3, 5) for _ in range(4)))
    P_obs, P_cf = np.stack(P_obs).astype(np.float32), np.stack(P_cf).astype(np.float32)
    batched = jax.jit(jax.vmap(four))(jnp.asarray(P_obs), jnp.asarray(P_cf))
    for j in range(4):
        np.testing.assert_allclose([b[j] for b in batched], four(P_obs[j], P_cf[j]), rtol=1e-6)


p3 = np.full((4, 3), 1 / 3, np.float32)
p3cf = np.full((4, 2, 3), 1 / 3, np.float32)


@pytest.mark.parametrize("call, name", [
    (lambda: cf.metrics.flip_rate(p3, p3cf[..., :2] * 1.5), "p_cf"),  # C mismatch
    (lambda: cf.metrics.flip_rate(p3[:3], p3cf), "p_cf"),  # n mismatch
    (lambda: cf.metrics.flip_rate(p3[:, 0], p3cf), "p_obs"),  # binary p_obs, classes p_cf
    (lambda: cf.metrics.flip_rate(p3, p3cf[:, :, 0]), "p_obs"),  # classes p_obs, binary p_cf
    (lambda: cf.metrics.flip_rate(p3, p3cf, tau=0.3), "tau"),
    (lambda: cf.metrics.score_shift(p3 * 0.9, p3cf), "p_obs"),  # rows not on the simplex
    (lambda: cf.metrics.stability_variance(p3cf * 1.2), "p_cf"),
    (lambda: cf.metrics.stability_variance(p3cf[None]), "p_cf"),  # 4-d
    (lambda: cf.metrics.decision_disagreement(p3, p3cf, weights=np.ones(3) / 3), "weights"),
    (lambda: cf.metrics.score_shift(p3, np.where(np.arange(3) == 0, np.nan, p3cf)), "p_cf"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(cf.ValidationError, match=f"`{name}`"):
        call()
