"""cfjax.predictors with the members spread over several devices: training, inference and
checkpoint resume equal the one-device runs, and the ``mesh`` argument is validated.

JAX fixes its CPU device count when it starts, so each comparison runs in a child process
started with ``XLA_FLAGS=--xla_force_host_platform_device_count=3`` and M = 4 members (the
members are padded to 6, two per device); the child saves both sides' results and this
process compares them.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

import cfjax as cf
from cfjax import predictors as pr

DEVICES, M = 3, 4

# Run in the child: the test configuration of tests/conftest.py, a tiny problem drawn from
# the seed given on the command line, then the test's own code (which saves its results).
CHILD = '''
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
from cfjax import predictors as pr

seed, out = int(sys.argv[1]), sys.argv[2]
assert len(jax.devices()) == {devices}, jax.devices()
rng = np.random.default_rng(seed)
n, v, m, size = 64, 32, {members}, 16

def synthetic(n):
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    yy, xx = np.mgrid[:size, :size]
    cy, cx = rng.uniform(4, size - 4, (2, n))
    blob = np.exp(-((yy - cy[:, None, None]) ** 2 + (xx - cx[:, None, None]) ** 2) / 6.0)
    x = 0.3 + 0.15 * rng.uniform(size=(n, size, size)) + (rng.uniform(0, 0.4, n) * y)[:, None, None] * blob
    return np.clip(x, 0, 1).astype(np.float32), y.astype(np.int32)

x, y = synthetic(n)
vx, vy = synthetic(v)
masks = (rng.uniform(size=(m, n)) < 0.7).astype(np.float32)
masks[-1] = rng.uniform(size=n)
seeds = rng.choice(1000, m, replace=False)
model = pr.EffusionCNN(features=(4,))
config = pr.EnsembleConfig(steps=20, batch_size=8, learning_rate=1e-2, warmup=2, eval_every=10, patience=1,
                        eval_chunk=16)
one = [jax.devices()[0]]

def fields(state, prefix):
    return {{f"{{prefix}}/{{name}}": np.asarray(getattr(state, name)) for name in
            ("best_auc", "best_step", "since_best", "active", "data_keys", "step",
             "round", "val_auc", "loss")}} | {{
            f"{{prefix}}/{{part}}/{{i}}": np.asarray(leaf) for part in ("params", "best_params", "opt_state")
            for i, leaf in enumerate(jax.tree.leaves(getattr(state, part)))}}
'''


def run_child(code: str, seed: int, out: pathlib.Path) -> dict[str, np.ndarray]:
    """Run ``code`` after :data:`CHILD` in a process with :data:`DEVICES` CPU devices; returns
    the arrays it saved with ``np.savez(out, ...)``."""
    flags = os.environ.get("XLA_FLAGS", "")  # the suite's flags (tests/conftest.py), plus the device count
    env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={DEVICES}",
           "JAX_PLATFORMS": "cpu"}
    script = CHILD.format(devices=DEVICES, members=M) + code
    done = subprocess.run([sys.executable, "-c", script, str(seed), str(out)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=pathlib.Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-4000:]
    with np.load(out) as saved:
        return dict(saved)


def assert_same_runs(saved: dict[str, np.ndarray], a: str, b: str) -> None:
    """Every field of the states saved under prefixes ``a`` and ``b`` is equal (parameters to
    1e-6; counters, flags and keys exactly; AUC histories with NaN where a round did not run)."""
    keys_a = sorted(k.split("/", 1)[1] for k in saved if k.startswith(a + "/"))
    keys_b = sorted(k.split("/", 1)[1] for k in saved if k.startswith(b + "/"))
    assert keys_a == keys_b and keys_a
    for k in keys_a:
        u, v = saved[f"{a}/{k}"], saved[f"{b}/{k}"]
        assert u.shape == v.shape and u.dtype == v.dtype, (k, u.shape, v.shape, u.dtype, v.dtype)
        if np.issubdtype(u.dtype, np.floating):
            np.testing.assert_allclose(u, v, rtol=0, atol=1e-6, err_msg=k)
        else:
            np.testing.assert_array_equal(u, v, err_msg=k)


def test_sharded_training_equals_one_device(rng, tmp_path):
    """M = 4 members over 3 devices (padded to 6) end with the parameters, best parameters,
    validation AUCs, best steps and stopping flags of the one-device run, in states of the
    same layout (M leading, no padding)."""
    saved = run_child('''
quiet = pr.TrainOptions(progress=False)
sharded = pr.train(model, x, y, masks, vx, vy, config, seeds=seeds, options=quiet, mesh=len(jax.devices()))
single = pr.train(model, x, y, masks, vx, vy, config, seeds=seeds, options=quiet, mesh=one)
assert jax.tree.structure(sharded) == jax.tree.structure(single)
np.savez(out, **fields(sharded, "sharded"), **fields(single, "single"))
''', int(rng.integers(2**31)), tmp_path / "train.npz")
    assert saved["sharded/best_auc"].shape == (M,) and saved["sharded/val_auc"].shape == (2, M)
    assert_same_runs(saved, "sharded", "single")
    assert np.isfinite(saved["sharded/val_auc"]).all()  # both rounds ran for every member


def test_sharded_predict_equals_one_device(rng, tmp_path):
    """predict over 3 devices (a count, explicit list, one-axis Mesh) equals the one-device
    call on factual and counterfactual images, and comes back on one device without padding."""
    saved = run_child('''
from jax.sharding import Mesh
params = pr.init_params(model, (size, size), seeds=seeds)
cf = jnp.asarray(rng.uniform(size=(2, 7, size, size)).astype(np.float32))
res = {}
for name, devices in (("count", len(jax.devices())), ("list", jax.devices()[1:]),
                      ("mesh", Mesh(np.asarray(jax.devices()), ("m",))), ("single", one)):
    p = pr.predict(model, params, x[:9], chunk=4, mesh=devices)
    q = pr.predict(model, params, cf, chunk=4, logits=True, mesh=devices)
    assert len(p.devices()) == 1 and len(q.devices()) == 1
    res[name + "/factual"], res[name + "/counterfactual"] = np.asarray(p), np.asarray(q)
np.savez(out, **res)
''', int(rng.integers(2**31)), tmp_path / "predict.npz")
    assert saved["single/factual"].shape == (M, 9) and saved["single/counterfactual"].shape == (M, 2, 7)
    for name in ("count", "list", "mesh"):
        for kind in ("factual", "counterfactual"):
            assert saved[f"{name}/{kind}"].shape == saved[f"single/{kind}"].shape
            np.testing.assert_allclose(saved[f"{name}/{kind}"], saved[f"single/{kind}"], rtol=0, atol=1e-6)


def test_sharded_training_resumes_from_checkpoint(rng, tmp_path):
    """A sharded run stopped after one round (max_rounds=1) and continued from its checkpoint
    ends like the uninterrupted sharded run; its checkpoint also resumes on one device."""
    saved = run_child('''
import tempfile
from cfjax.checkpoint import latest_checkpoint_step
whole = pr.train(model, x, y, masks, vx, vy, config, seeds=seeds, options=pr.TrainOptions(progress=False),
                 mesh=len(jax.devices()))
with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as d1:
    first = pr.train(model, x, y, masks, vx, vy, config, seeds=seeds,
                     options=pr.TrainOptions(progress=False, checkpoint_dir=d, max_rounds=1), mesh=len(jax.devices()))
    assert int(first.round) == 1 and latest_checkpoint_step(d) == 10
    import shutil; shutil.copytree(d, d1, dirs_exist_ok=True)
    resumed = pr.train(model, x, y, masks, vx, vy, config, seeds=seeds,
                       options=pr.TrainOptions(progress=False, checkpoint_dir=d), mesh=len(jax.devices()))
    on_one = pr.train(model, x, y, masks, vx, vy, config, seeds=seeds,
                      options=pr.TrainOptions(progress=False, checkpoint_dir=d1), mesh=one)
np.savez(out, **fields(whole, "whole"), **fields(resumed, "resumed"), **fields(on_one, "on_one"))
''', int(rng.integers(2**31)), tmp_path / "resume.npz")
    assert int(saved["resumed/round"]) == 2
    assert_same_runs(saved, "resumed", "whole")
    assert_same_runs(saved, "on_one", "whole")


def _mesh_2d():
    return jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("a", "b"))


BAD_DEVICES = {
    "string": lambda: "cpu",
    "int": lambda: 0,
    "empty": lambda: [],
    "not_a_device": lambda: [jax.devices()[0], "gpu"],
    "repeated": lambda: [jax.devices()[0], jax.devices()[0]],
    "mesh_2d": _mesh_2d,
}


@pytest.mark.parametrize("bad", sorted(BAD_DEVICES))
def test_bad_devices_raise(bad):
    """A `mesh` that is not None, a device count, a sequence of distinct devices or a one-axis
    Mesh raises cf.ValidationError naming `mesh`, in predict and train."""
    model = pr.EffusionCNN(features=(4,))
    x = np.zeros((4, 16, 16), np.float32)
    y = np.array([0, 1, 0, 1])
    with pytest.raises(cf.ValidationError, match="mesh"):
        pr.predict(model, pr.init_params(model, (16, 16), seeds=[0]), x, mesh=BAD_DEVICES[bad]())
    with pytest.raises(cf.ValidationError, match="mesh"):
        pr.train(model, x, y, np.ones((1, 4), bool), x, y, pr.EnsembleConfig(steps=2, warmup=0, eval_every=1),
                 seeds=[0], options=pr.TrainOptions(progress=False), mesh=BAD_DEVICES[bad]())
