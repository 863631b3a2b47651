"""Units and resamples spread over several devices: counterfactual generation
(``SCM.counterfactual(mesh=)``), predictor inference over images (``predict(shard="units")``)
and the bootstrap's resamples (``evaluate_bootstrap(mesh=)``) equal the one-device calls;
the new arguments (also ``ChestSCM.counterfactuals(mesh=)``'s) are validated.

JAX fixes its CPU device count when it starts, so the comparisons run in one child process
started with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``; N = 37 units (and B = 13
resamples) are not multiples of 8, so the padding is exercised. The child saves both sides'
results and this process compares them, and checks the linear SCM's counterfactuals against
their closed form.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cfjax as cf
from cfjax import predictors as pr
from cfjax.data.chest import ChestSCM
from cfjax.metrics.bootstrap import evaluate_bootstrap

DEVICES, N, B = 8, 37, 13
W, BIAS, SCALE = 2.0, 0.5, 1.5  # b = BIAS + W a + SCALE u_b

CHILD = '''
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
import cfjax as cf
from cfjax import distributed as dist
from cfjax import predictors as pr
from cfjax.metrics.bootstrap import evaluate_bootstrap

seed, out = int(sys.argv[1]), sys.argv[2]
devices, n, b, w, bias, scale = {devices}, {n}, {b}, {w}, {bias}, {scale}
assert len(jax.devices()) == devices, jax.devices()
rng = np.random.default_rng(seed)
res = {{}}
key = jax.random.key(int(rng.integers(2**31)))
all_devices, three = dist.mesh(), dist.mesh(jax.devices()[2:5])

# 1. Counterfactuals: a linear pair a -> b, and c, a Gumbel-max child of a (its abduction
# samples, so each unit's key matters).
scm = cf.scm.SCM({{"a": [], "b": ["a"], "c": ["a"]}},
                 {{"a": cf.scm.LocationScale(), "b": cf.scm.LocationScale(), "c": cf.scm.GumbelMax(3)}})
params = scm.init(key=jax.random.key(int(rng.integers(2**31))))
params["a"] = cf.scm.linear_gaussian_params([], 0.0, 1.0)
params["b"] = cf.scm.linear_gaussian_params([w], bias, scale)
data = {{"a": rng.normal(size=n).astype(np.float32), "b": rng.normal(size=n).astype(np.float32),
        "c": rng.integers(0, 3, n).astype(np.int32)}}
groups = [{{"a": rng.normal(size=2).astype(np.float32)}},                 # common values, K = 2
          {{"a": rng.normal(size=(n, 2)).astype(np.float32)}},            # per-unit values
          {{"a": cf.scm.Shift(rng.normal(size=(n, 1)).astype(np.float32))}},  # per-unit shifts
          {{}}]                                                            # the null intervention
one = scm.counterfactual(params, data, groups, key=key)
sharded = scm.counterfactual(params, data, groups, key=key, mesh=all_devices)
# chunks of 10 units (the last padded), each split over 3 devices; c's noise given
noise_c = {{"c": scm.abduct(params, data, key=key)["c"]}}
chunked = scm.counterfactual(params, data, groups, key=key, noise=noise_c, mesh=three, chunk_size=10)
res["scm/a"], res["scm/b"] = data["a"], data["b"]
for name, cfs in (("one", one), ("sharded", sharded), ("chunked", chunked)):
    for v in scm.nodes:
        res[f"scm/{{name}}/{{v}}"] = np.asarray(cfs[v])

# 2. Predictions with the images spread over the devices.
model = pr.EffusionCNN(features=(4,))
weights = pr.init_params(model, (16, 16), seeds=rng.choice(1000, 3, replace=False))
images = rng.uniform(size=(2, n, 16, 16)).astype(np.float32)
for name, devs, shard in (("one", jax.devices()[:1], "members"), ("all", devices, "units"),
                          ("three", jax.devices()[2:5], "units")):
    p = pr.predict(model, weights, images, chunk=4, logits=True, mesh=devs, shard=shard)
    assert len(p.devices()) == 1
    res[f"predict/{{name}}"] = np.asarray(p)
res["predict/factual"] = np.asarray(pr.predict(model, weights, images[1], chunk=4, logits=True, shard="units"))

# 3. The bootstrap's resamples spread over the devices.
p_cf = rng.uniform(size=(50, 4)).astype(np.float32)
y = rng.integers(0, 2, 50)
boot_key = jax.random.key(int(rng.integers(2**31)))
for name, devs in (("one", None), ("sharded", devices)):
    r = evaluate_bootstrap(p_cf[:, 0], p_cf, y, key=boot_key, resamples=b,
                           alphas=(0.5,), n_bins=5, mesh=devs)
    for part in ("estimate", "low", "high", "replicates"):
        for field, x in getattr(r, part).__dict__.items():
            if isinstance(x, jax.Array):
                res[f"boot/{{name}}/{{part}}/{{field}}"] = np.asarray(x)
np.savez(out, **res)
'''


def run_child(seed: int, out: pathlib.Path) -> dict[str, np.ndarray]:
    flags = os.environ.get("XLA_FLAGS", "")  # the suite's flags (tests/conftest.py), plus the device count
    env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={DEVICES}",
           "JAX_PLATFORMS": "cpu"}
    script = CHILD.format(devices=DEVICES, n=N, b=B, w=W, bias=BIAS, scale=SCALE)
    done = subprocess.run([sys.executable, "-c", script, str(seed), str(out)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=pathlib.Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-4000:]
    with np.load(out) as saved:
        return dict(saved)


def close(a: np.ndarray, b: np.ndarray, atol: float = 1e-5, what: str = "") -> None:
    assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype, b.dtype)
    if np.issubdtype(a.dtype, np.floating):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(a, b, err_msg=what)


def test_units_over_devices_equal_one_device(rng, tmp_path):
    """Counterfactuals (over 8 devices; in chunks over 3 devices with some noise given),
    predictions with the images spread over 8 and over 3 devices, and the bootstrap's
    replicates and bounds over 8 devices equal the one-device calls."""
    saved = run_child(int(rng.integers(2**31)), tmp_path / "units.npz")

    # Counterfactuals: the linear node against its closed form b' = b + W (a' − a), then every
    # node of every sharded run against the one-device run (c, abducted by sampling, exactly).
    a, b = saved["scm/a"], saved["scm/b"]
    one_a, one_b = saved["scm/one/a"], saved["scm/one/b"]
    assert one_a.shape == (N, 2 + 2 + 1 + 1)
    np.testing.assert_allclose(one_b[:, :5], b[:, None] + W * (one_a[:, :5] - a[:, None]), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(one_a[:, 5], a, rtol=0, atol=0)  # the null intervention
    for name in ("sharded", "chunked"):
        for v in "abc":
            close(saved[f"scm/{name}/{v}"], saved[f"scm/one/{v}"], what=f"{name}/{v}")

    assert saved["predict/one"].shape == (3, 2, N)
    for name in ("all", "three"):
        close(saved[f"predict/{name}"], saved["predict/one"], atol=1e-6, what=name)
    close(saved["predict/factual"], saved["predict/one"][:, 1], atol=1e-6, what="factual")

    boot = sorted(k.split("/", 2)[2] for k in saved if k.startswith("boot/one/"))
    assert boot and boot == sorted(k.split("/", 2)[2] for k in saved if k.startswith("boot/sharded/"))
    assert saved["boot/one/replicates/risk_ie"].shape == (B,)
    for k in boot:
        close(saved[f"boot/sharded/{k}"], saved[f"boot/one/{k}"], atol=1e-6, what=k)
    # The bounds are numpy's linear percentiles of the replicates (NaN if any replicate is).
    rep = saved["boot/sharded/replicates/risk_ie"]
    np.testing.assert_allclose(saved["boot/sharded/low/risk_ie"], np.percentile(rep, 2.5), rtol=1e-6)
    np.testing.assert_allclose(saved["boot/sharded/high/risk_ie"], np.percentile(rep, 97.5), rtol=1e-6)


def _mesh_2d():
    return jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("a", "b"))


def test_bad_arguments_raise():
    """A `mesh` that is not None or a one-axis Mesh, a `shard` other than "members"/"units" and
    a `devices` that names no devices raise cf.ValidationError naming the argument."""
    scm = cf.scm.SCM({"a": []}, {"a": cf.scm.LocationScale()})
    params = {"a": cf.scm.linear_gaussian_params([], 0.0, 1.0)}
    data = {"a": np.arange(3.0, dtype=np.float32)}
    for bad in ("cpu", len(jax.devices()) + 1, [], _mesh_2d()):  # a count, devices or a Mesh are meshes
        with pytest.raises(cf.ValidationError, match="mesh"):
            scm.counterfactual(params, data, {}, mesh=bad)
        with pytest.raises(cf.ValidationError, match="mesh"):
            scm.counterfactual(params, data, {}, mesh=bad, chunk_size=2)
        with pytest.raises(cf.ValidationError, match="mesh"):
            next(scm.counterfactual_chunks(params, data, {}, chunk_size=2, mesh=bad))
    chest = ChestSCM(size=32)
    records = {"parents": {v: jnp.zeros(2) for v in ("sex", "age", "race", "lung", "effusion")}}
    with pytest.raises(cf.ValidationError, match="mesh"):
        chest.counterfactuals(records, {"age": jnp.array([30.0])}, key=jax.random.key(0), mesh="cpu")

    model = pr.EffusionCNN(features=(4,))
    weights = pr.init_params(model, (16, 16), seeds=[0])
    for bad in ("images", None, "Units"):
        with pytest.raises(cf.ValidationError, match="shard"):
            pr.predict(model, weights, np.zeros((2, 16, 16), np.float32), shard=bad)

    p_cf = np.full((4, 2), 0.5, np.float32)
    for bad in (0, len(jax.devices()) + 1, "cpu", [], True, _mesh_2d()):
        with pytest.raises(cf.ValidationError, match="mesh"):
            evaluate_bootstrap(p_cf[:, 0], p_cf, key=0, resamples=3, mesh=bad)
