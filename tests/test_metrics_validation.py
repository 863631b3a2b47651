"""Bad input raises a ValidationError (a ValueError) naming the argument and the problem."""

import jax
import numpy as np
import pytest

import cfjax as cf

N, K = 20, 4


def ok(rng):
    return (rng.uniform(size=N).astype(np.float32), rng.uniform(size=(N, K)).astype(np.float32),
            rng.integers(0, 2, N))


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda a: dict(p_cf=a["p_cf"][:-1]), r"`p_cf`: expected 20 rows"),
        (lambda a: dict(p_cf=a["p_cf"][:, 0]), r"`p_cf`: expected 2-d"),
        (lambda a: dict(p_obs=a["p_obs"][:, None]), r"`p_obs`: expected 1-d"),
        (lambda a: dict(y=a["y"][:-2]), r"`y`: expected 20 rows"),
        (lambda a: dict(p_obs=a["p_obs"] + 1.5), r"`p_obs`: expected probabilities in \[0, 1\]"),
        (lambda a: dict(p_cf=-a["p_cf"]), r"`p_cf`: expected probabilities in \[0, 1\]"),
        (lambda a: dict(p_cf=np.where(np.eye(N, K) > 0, np.nan, a["p_cf"]).astype(np.float32)),
         r"`p_cf`: expected probabilities without NaN, got 4 NaN"),
        (lambda a: dict(y=a["y"] + 1), r"`y`: expected labels in \{0, 1\}"),
        (lambda a: dict(y=np.where(np.arange(N) == 3, np.nan, a["y"])), r"`y`: .*NaN"),
        (lambda a: dict(weights=np.array([0.5, 0.5, 0.5, -0.5])), r"`weights`: expected non-negative"),
        (lambda a: dict(weights=np.full(K, 0.3)), r"`weights`: expected weights summing to 1"),
        (lambda a: dict(weights=np.full(K + 1, 1 / (K + 1))), r"`weights`: expected shape \(4,\)"),
        (lambda a: dict(alphas=(0.5, 0.0)), r"`alphas`: expected levels in \(0, 1\]"),
        (lambda a: dict(alphas=(1.5,)), r"`alphas`"),
        (lambda a: dict(alphas=()), r"`alphas`"),
        (lambda a: dict(n_bins=0), r"`n_bins`: expected an integer >= 1"),
        (lambda a: dict(tau=2.0), r"`tau`"),
        (lambda a: dict(p_obs=np.zeros(0, np.float32), p_cf=np.zeros((0, K), np.float32),
                        y=np.zeros(0)), r"non-empty"),
        (lambda a: dict(p_obs=np.arange(N), ), r"`p_obs`: expected a floating-point"),
    ],
)
def test_evaluate_rejects_bad_input(rng, change, match):
    p_obs, p_cf, y = ok(rng)
    args = dict(p_obs=p_obs, p_cf=p_cf, y=y)
    args.update(change(args))
    kwargs = {k: args.pop(k) for k in list(args) if k not in ("p_obs", "p_cf", "y")}
    with pytest.raises(cf.ValidationError, match=match):
        cf.metrics.evaluate(args["p_obs"], args["p_cf"], args["y"], **kwargs)


def test_validation_error_is_a_value_error():
    assert issubclass(cf.ValidationError, ValueError)


def test_building_blocks_validate_too(rng):
    p_obs, p_cf, y = ok(rng)
    with pytest.raises(ValueError, match="`y`"):
        cf.metrics.interventional_risk(p_cf, None)
    with pytest.raises(ValueError, match="`alpha`"):
        cf.metrics.cvar_risk(p_cf, y, 0.0)
    with pytest.raises(ValueError, match="`b`: expected 20 rows"):
        cf.metrics.spearman(p_obs, p_obs[:5])
    with pytest.raises(ValueError, match="finite"):
        cf.metrics.kendall_tau_b(p_obs, np.where(np.arange(N) == 0, np.inf, p_obs))
    with pytest.raises(ValueError, match="both classes"):
        cf.metrics.auc(p_obs, np.zeros(N))
    with pytest.raises(ValueError, match="`a`"):
        cf.metrics.subgroup_means(p_obs, np.full(N, 5), p_cf)
    with pytest.raises(ValueError, match="`p_cf`"):
        cf.metrics.evaluate_many(p_obs[None], p_cf[None, :-1], y)
    with pytest.raises(ValueError, match="`p_cf`: expected probabilities"):
        cf.metrics.evaluate_many(p_obs[None], 2 * p_cf[None], y)


def test_traced_inputs_skip_value_checks_but_not_shape_checks(rng):
    p_obs, p_cf, y = ok(rng)
    with pytest.raises(ValueError, match="rows"):
        jax.jit(lambda a, b: cf.metrics.evaluate(a, b, y))(p_obs, p_cf[:-1])
    # Values cannot be inspected under jit; the caller validated them outside.
    out = jax.jit(lambda a, b: cf.metrics.evaluate(a, b, y))(p_obs, p_cf)
    assert np.isfinite(float(out.risk_ie))


def test_jax_array_inputs_are_checked_on_device(rng):
    p_obs, p_cf, y = ok(rng)
    with pytest.raises(ValueError, match=r"`p_obs`: expected probabilities in \[0, 1\], got values in"):
        cf.metrics.evaluate(jax.numpy.asarray(p_obs) * 2 + 0.0, p_cf, y)
