"""cfjax.distributed and the metrics over several devices and processes: a report whose units
are split over 8 devices (in memory and in chunks) equals the one-device report; map_batch
equals the plain call for any N; two processes on localhost (JAX's multi-host runtime) give
the one-process report; bad arguments are named.

JAX fixes its CPU device count when it starts, so the device comparisons run in one child
process started with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

import cfjax as cf

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHILD = '''
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
import cfjax as cf
seed, out = int(sys.argv[1]), sys.argv[2]
assert len(jax.devices()) == 8, jax.devices()
rng = np.random.default_rng(seed)
n = int(rng.integers(50, 120))  # rarely a multiple of 8: the padding is exercised
y = rng.integers(0, 2, n)
p_cf = (1 / (1 + np.exp(-(rng.normal(size=(n, 16)) + y[:, None])))).astype(np.float32)
p_obs = np.clip(p_cf[:, 0] + 0.05 * rng.normal(size=n), 0, 1).astype(np.float32)
y_cf = np.where(rng.uniform(size=(n, 16)) < 0.1, 1 - y[:, None], y[:, None])
q = rng.dirichlet(np.ones(16)).astype(np.float32)
mesh8, mesh3 = cf.distributed.mesh(), cf.distributed.mesh(jax.devices()[2:5])
res = {}
def put(name, r):
    for f, v in r.to_dict().items():
        if f != "labels":
            res[name + "/" + f] = np.asarray(list(v.values()) if isinstance(v, dict) else v, np.float64)
put("single", cf.metrics.evaluate(p_obs, p_cf, y, weights=q))
put("mesh8", cf.metrics.evaluate(p_obs, p_cf, y, weights=q, mesh=mesh8))
cut = [0, 13, 40, n]
chunks = [(p_obs[a:b], p_cf[a:b], y[a:b], y_cf[a:b]) for a, b in zip(cut[:-1], cut[1:])]
put("cf_single", cf.metrics.evaluate(p_obs, p_cf, y, y_cf=y_cf))
put("cf_chunks3", cf.metrics.evaluate_chunks(chunks, mesh=mesh3))
put("free_single", cf.metrics.evaluate(p_obs, p_cf))
put("free_mesh8", cf.metrics.evaluate(p_obs, p_cf, mesh=mesh8))
pc = rng.dirichlet(np.ones(3), (n, 16)).astype(np.float32)  # class probabilities, C = 3
po, yc = rng.dirichlet(np.ones(3), n).astype(np.float32), rng.integers(0, 3, n)
ycf = np.where(rng.uniform(size=(n, 16)) < 0.1, rng.integers(0, 3, (n, 16)), yc[:, None])
put("cls_single", cf.metrics.evaluate(po, pc, yc, weights=q))
put("cls_mesh8", cf.metrics.evaluate(po, pc, yc, weights=q, mesh=mesh8))
put("clscf_single", cf.metrics.evaluate(po, pc, yc, y_cf=ycf))
put("clscf_chunks3", cf.metrics.evaluate_chunks([(po[a:b], pc[a:b], yc[a:b], ycf[a:b])
                                                 for a, b in zip(cut[:-1], cut[1:])], mesh=mesh3))
x = rng.normal(size=(n, 3)).astype(np.float32)
fn = lambda b: {"s": jnp.sum(b ** 2, axis=1), "t": jnp.tanh(b)}
plain = fn(jnp.asarray(x))
for name, m, c in (("map8", mesh8, None), ("map8c", mesh8, 5), ("map3c", mesh3, 4)):
    got = cf.distributed.map_batch(fn, x, mesh=m, chunk_size=c)
    res[name + "/s"], res[name + "/t"] = np.asarray(got["s"]), np.asarray(got["t"])
res["plain/s"], res["plain/t"] = np.asarray(plain["s"]), np.asarray(plain["t"])
np.savez(out, **res)
'''


def test_units_over_eight_devices_equal_one_device(rng, tmp_path):
    flags = os.environ.get("XLA_FLAGS", "")  # the suite's flags (tests/conftest.py), plus the device count
    env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    out = tmp_path / "child.npz"
    done = subprocess.run([sys.executable, "-c", CHILD, str(int(rng.integers(2**31))), str(out)], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    saved = dict(np.load(out))
    pairs = [("mesh8", "single"), ("cf_chunks3", "cf_single"), ("free_mesh8", "free_single"),
             ("cls_mesh8", "cls_single"), ("clscf_chunks3", "clscf_single")]
    for a, b in pairs:
        fields = sorted(k.split("/", 1)[1] for k in saved if k.startswith(b + "/"))
        assert len(fields) == (22 if a.startswith("cls") else 20)  # + s_tv and classes for class probabilities
        for f in fields:
            np.testing.assert_allclose(saved[f"{a}/{f}"], saved[f"{b}/{f}"], rtol=2e-6, atol=1e-7,
                                       err_msg=f"{a}/{f}")
    for name in ("map8", "map8c", "map3c"):
        for part in ("s", "t"):
            np.testing.assert_allclose(saved[f"{name}/{part}"], saved[f"plain/{part}"], rtol=1e-6, atol=0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_processes_give_the_one_process_report(tmp_path):
    """experiments/multihost.py run by two processes over JAX's distributed runtime on
    localhost (each reading its block of units) writes the report of the one-process run."""
    command = [sys.executable, "-m", "experiments.multihost", "--units", "1501", "--chunk-size", "256"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CFJAX_")}
    env["JAX_PLATFORMS"] = "cpu"
    single = subprocess.run(command + ["--out", str(tmp_path / "one")], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr[-3000:]
    port = free_port()
    procs = [subprocess.Popen(command + ["--out", str(tmp_path / "two")], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**env, "CFJAX_COORDINATOR": f"localhost:{port}", "CFJAX_NUM_PROCESSES": "2",
                                   "CFJAX_PROCESS_ID": str(p)}) for p in range(2)]
    try:
        outputs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    two = json.loads((tmp_path / "two" / "results.json").read_text())
    assert (one["processes"], two["processes"]) == (1, 2) and two["block"] == [0, 751]
    for field, value in one["report"].items():
        a = list(value.values()) if isinstance(value, dict) else value
        b = two["report"][field]
        b = list(b.values()) if isinstance(b, dict) else b
        np.testing.assert_allclose(b, a, rtol=2e-6, atol=1e-7, err_msg=field)
    assert "1501 units over 2 process(es)" in outputs[0][0]


def test_blocks_cover_the_units_once():
    for n in (1, 7, 10, 1001):
        for count in (1, 2, 3, 8):
            blocks = [cf.distributed.process_block(n, count, p) for p in range(count)]
            covered = np.concatenate([np.arange(n)[b] for b in blocks])
            np.testing.assert_array_equal(covered, np.arange(n))


def test_bad_arguments_are_named(monkeypatch):
    with pytest.raises(ValueError, match=r"`devices`: expected a device count in 1\.\.1"):
        cf.distributed.mesh(3)
    with pytest.raises(ValueError, match=r"`devices`: expected a non-empty sequence of jax devices"):
        cf.distributed.mesh(["cpu"])
    with pytest.raises(ValueError, match=r"`chunk_size`: expected an integer >= 1"):
        cf.distributed.map_batch(lambda b: b, np.zeros(3), chunk_size=0)
    with pytest.raises(ValueError, match=r"`args`: expected arrays with a common leading"):
        cf.distributed.map_batch(lambda a, b: a, np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match=r"`compiler_options`: expected None or a mapping of XLA option names"):
        cf.distributed.map_batch(lambda b: b, np.zeros(3), compiler_options=["xla_cpu_use_fusion_emitters"])
    monkeypatch.setenv("CFJAX_NUM_PROCESSES", "two")
    with pytest.raises(ValueError, match=r"`num_processes \(environment variable CFJAX_NUM_PROCESSES\)`: "
                                         r"expected an integer"):
        cf.distributed.initialize()
    monkeypatch.setenv("CFJAX_NUM_PROCESSES", "2")
    with pytest.raises(ValueError, match=r"`coordinator_address`: expected all of"):
        cf.distributed.initialize(process_id=1)
    with pytest.raises(ValueError, match=r"`process_id`: expected an index in 0\.\.1"):
        cf.distributed.initialize(coordinator_address="localhost:1", process_id=2)
    assert not cf.distributed.is_initialized()


def test_map_batch_shared_arguments_and_mesh_forms(rng):
    """Shared arguments reach every device whole; ``mesh=`` takes a count, a device list or a
    Mesh, and the result equals the one-device call for any batch length."""
    x = rng.normal(size=(13, 3)).astype(np.float32)
    w = rng.normal(size=(3, 2)).astype(np.float32)
    want = x @ w
    devices = jax.devices()
    for mesh in (None, 1, len(devices), devices, cf.distributed.mesh(len(devices))):
        got = cf.distributed.map_batch(_matmul, x, shared=(w,), mesh=mesh, chunk_size=4)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(cf.ValidationError, match="`mesh`"):
        cf.distributed.map_batch(_matmul, x, shared=(w,), mesh=len(devices) + 1)


def test_map_batch_compiles_with_the_options_given(rng):
    """``compiler_options`` reach XLA (an unknown option is XLA's error, so they are not
    dropped) and change nothing in the result; :func:`cfjax.platform.small_kernel_options`
    names options of the running backend (the library's function: the suite's conftest wraps it)."""
    x = rng.normal(size=(9, 3))
    w = rng.normal(size=(3, 2))
    small_kernel_options = getattr(cf.platform.small_kernel_options, "__wrapped__", cf.platform.small_kernel_options)
    options = small_kernel_options()
    assert options == ({"xla_cpu_use_fusion_emitters": False} if jax.default_backend() == "cpu" else {})
    got = cf.distributed.map_batch(_matmul, x, shared=(w,), chunk_size=4, compiler_options=options)
    np.testing.assert_allclose(np.asarray(got), np.asarray(cf.distributed.map_batch(_matmul, x, shared=(w,))),
                               rtol=1e-6)
    with pytest.raises(Exception, match="xla_no_such_option"):
        cf.distributed.map_batch(_matmul, x, shared=(w,), compiler_options={"xla_no_such_option": True})
    # An option this XLA does not know is never handed out (a newer jaxlib may drop one).
    assert cf.platform._known_option("xla_no_such_option", True) is False


def _matmul(b, w):
    return b @ w
