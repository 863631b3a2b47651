"""cfjax.sensitivity.worst_case with its runs split over several devices: the answer equals the
one-device answer, and the ``mesh`` argument is validated.

JAX fixes its CPU device count when it starts, so the comparison runs in one child process
started with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``: 2 budgets × 2 restarts
= 4 runs (padded to 8, one per device), on 8 devices and on one; the child saves both sides'
results and this process compares them. In float64, so that the one-device and the split
programs' different roundings (which float32's discrete choices — Newton's stopping, the
backtracking — can amplify) stay far below the tolerance. (The warm-started curriculum, split
over its restarts, compiles two more searches: left out to keep the file fast.)
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

S = cf.sensitivity
DEVICES = 8
FIELDS = ("p_max", "cfu", "P", "eigenvalues", "restart_cfu", "restart_ratio", "steps", "history")

CHILD = '''
import sys
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
import cfjax.sensitivity as S

FIELDS = {fields}
seed, out = int(sys.argv[1]), sys.argv[2]
assert len(jax.devices()) == {devices}, jax.devices()
rng = np.random.default_rng(seed)
prob = S.synthetic(200, correlation=float(rng.uniform(-0.5, 0.5)), key=seed)
settings = S.FitConfig(equation_degrees=(2, 2), lam=1.0, predictor_degrees=(2,), predictor_lambdas=(1.0,))
model = S.fit(prob.graph, prob.data, settings)
budgets = np.sort(rng.uniform(0.1, 0.9, 2))
key = jax.random.key(int(rng.integers(2**31)))
common = dict(steps=4, patience=2, screen_corners=False, snap=None, warn_ratio=None)
opts = dict(restarts=2, batch_size=64, polish=0)
res = {{}}
for where, mesh in (("split", {devices}), ("one", 1)):
    wc = S.worst_case(model, budgets, key=key, config=S.SearchConfig(**common, **opts), mesh=mesh)
    assert len(wc.cfu.devices()) == 1
    for field in FIELDS:
        res[f"{{where}}/{{field}}"] = np.asarray(getattr(wc, field))
# mesh=None: one device, the default placement.
res["default/cfu"] = np.asarray(S.worst_case(model, budgets, key=key, config=S.SearchConfig(**common, **opts)).cfu)
np.savez(out, **res)
'''


def test_split_runs_equal_one_device(rng, tmp_path):
    """4 runs (2 random budgets × 2 restarts, minibatches) split over 8 devices give the
    one-device worst cases, correlations, every restart's CFU, steps and objective history
    (to 1e-6 relative), on one device and without the padding; so does mesh=None."""
    out = tmp_path / "split.npz"
    flags = os.environ.get("XLA_FLAGS", "")  # the suite's flags (tests/conftest.py), plus the device count
    env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count={DEVICES}",
           "JAX_PLATFORMS": "cpu"}
    script = CHILD.format(devices=DEVICES, fields=FIELDS)
    done = subprocess.run([sys.executable, "-c", script, str(int(rng.integers(2**31))), str(out)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=pathlib.Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-4000:]
    with np.load(out) as saved:
        saved = dict(saved)
    assert saved["one/restart_cfu"].shape == (2, 2) and saved["one/history"].shape == (2, 2, 4)
    for field in FIELDS:
        a, b = saved[f"split/{field}"], saved[f"one/{field}"]
        assert a.shape == b.shape and a.dtype == b.dtype, (field, a.shape, b.shape, a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-15, err_msg=field)
    assert np.all(saved["one/cfu"] > 0)
    np.testing.assert_allclose(saved["default/cfu"], saved["one/cfu"], rtol=1e-6, atol=1e-15)


@pytest.fixture(scope="module")
def tiny_model():
    prob = S.synthetic(40, key=0)
    return S.fit(prob.graph, prob.data, S.FitConfig(equation_degrees=(1, 1), lam=1.0, predictor_degrees=(1,),
                                                   predictor_lambdas=(1.0,)))


BAD_DEVICES = {
    "zero": lambda: 0,
    "too_many": lambda: len(jax.devices()) + 1,
    "string": lambda: "cpu",
    "empty": lambda: [],
    "not_a_device": lambda: [jax.devices()[0], "cpu"],
    "repeated": lambda: [jax.devices()[0], jax.devices()[0]],
    "mesh_2d": lambda: jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("a", "b")),
}


@pytest.mark.parametrize("bad", sorted(BAD_DEVICES))
def test_bad_devices_raise(tiny_model, bad):
    """A `mesh` that is not None, a device count within the devices, a sequence of distinct
    devices or a one-axis Mesh raises cf.ValidationError naming `mesh`, before any search."""
    with pytest.raises(cf.ValidationError, match="mesh"):
        S.worst_case(tiny_model, [0.3], key=jax.random.key(0), mesh=BAD_DEVICES[bad](),
                     config=S.SearchConfig(restarts=1, steps=2))
    with pytest.raises(cf.ValidationError, match="mesh"):
        S.inverse_budget(tiny_model, 1.0, key=jax.random.key(0), grid=1, mesh=BAD_DEVICES[bad](),
                         config=S.SearchConfig(restarts=1, steps=2))
