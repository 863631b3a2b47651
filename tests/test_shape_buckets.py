"""Shape buckets (cfjax.distributed.bucket, docs/contract.md section 5): the rule's bounds; and
for predict, evaluate_chunks and the SCM's chunked counterfactuals, results at
N = 1, at a bucket, just above one and in between equal the independent references, while a
sweep over many N compiles one program per bucket (counted from JAX's compile events).
learned_images: tests/test_study_learned.py."""

from __future__ import annotations

import contextlib
import math

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np

import cfjax as cf
from cfjax import predictors as pr
from cfjax.distributed import bucket
from tests import reference as ref
from tests.test_metrics_report import FIELDS, predictor
from tests.test_scm_arrays import MAIN, assert_close, key_of, make_main, random_data, random_params
from tests.test_scm_arrays import reference as scm_reference

_COMPILE = "/jax/core/compile/backend_compile_duration"  # one event per executable built


@contextlib.contextmanager
def compiles():
    """The names of the programs compiled inside the block (``"jit(local)"``, ...)."""
    names: list[str] = []

    def listen(event, duration, **kw):
        if event == _COMPILE:
            names.append(kw.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def test_bucket_rule_bounds():
    for chunk in (None, 1, 3, 100, 256):
        sizes = [bucket(n, chunk) for n in range(1, 5001)]
        for n, b in enumerate(sizes, start=1):
            assert n <= b < 2 * n or n == b == 1, (n, chunk, b)
            if chunk is not None:  # at most a chunk, or whole chunks, a power of two of them
                assert b <= chunk or (b % chunk == 0 and (b // chunk) & (b // chunk - 1) == 0)
            else:
                assert b & (b - 1) == 0
        assert sizes == sorted(sizes)
        assert len(set(sizes)) <= math.ceil(math.log2(5000)) + 1
    assert [bucket(n, 4) for n in (1, 3, 4, 5, 8, 9)] == [1, 4, 4, 8, 8, 16]


def test_map_batch_buckets_equal_the_plain_call(rng):
    fn = lambda b, s: jnp.sin(b) * s  # noqa: E731  (one function object: compiled once per bucket)
    for n in (1, 4, 5, 9, int(rng.integers(10, 40))):
        x = rng.normal(size=(n, 3)).astype(np.float32)
        for chunk in (None, 4):
            got = cf.distributed.map_batch(fn, x, shared=(2.0,), chunk_size=chunk, buckets=True)
            assert got.shape == (n, 3)
            np.testing.assert_allclose(got, np.sin(x) * 2.0, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ predict
TINY = pr.EffusionCNN(features=(2,))


def test_predict_in_buckets_equals_unpadded_apply(rng):
    params = pr.init_params(TINY, (8, 8), key=int(rng.integers(2**31)), members=2)
    apply = jax.jit(jax.vmap(TINY.apply, in_axes=(0, None)))
    for n in (1, 4, 5, 9, int(rng.integers(10, 16))):  # chunk 4: N = 1, a bucket, just above one
        x = rng.uniform(size=(n, 8, 8)).astype(np.float32)
        direct = apply(params, jnp.asarray(x))
        got = pr.predict(TINY, params, x, chunk=4, logits=True)
        assert got.shape == (2, n)
        np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-5)
        cfx = rng.uniform(size=(n, 3, 8, 8)).astype(np.float32)  # N·K images in one bucket
        got_cf = pr.predict(TINY, params, cfx, chunk=4)
        assert got_cf.shape == (2, n, 3)
        want = jax.nn.sigmoid(apply(params, jnp.asarray(cfx.reshape(-1, 8, 8)))).reshape(2, n, 3)
        np.testing.assert_allclose(got_cf, want, rtol=1e-5, atol=1e-6)


def test_predict_sweep_compiles_one_program_per_bucket(rng):
    params = pr.init_params(TINY, (8, 8), key=0, members=2)
    ns = sorted(rng.choice(np.arange(1, 65), size=12, replace=False).tolist())
    with compiles() as names:
        for n in ns:
            pr.predict(TINY, params, np.zeros((n, 8, 8), np.float32), chunk=4)
    programs = names.count("jit(local)")  # map_batch's program (the small programs are reshapes)
    assert programs <= len({bucket(n, 4) for n in ns}) <= math.ceil(math.log2(64)) + 1, (ns, names)


# learned_images: tests/test_study_learned.py (test_learned_images_do_not_depend_on_the_batching)


# ------------------------------------------------------------------ evaluate_chunks
def test_evaluate_chunks_in_buckets_equals_the_reference(rng, x64):
    k = 4
    for n in (1, 16, 17, int(rng.integers(18, 33))):  # N = 1, a bucket (16), just above it, in the next
        p_obs, p_cf, y = predictor(rng, n=n, k=k)
        stop = min(n, 7)  # chunks of 7 and the rest, the compiled block 8: the first chunk's bucket
        chunks = [(p_obs[:stop], p_cf[:stop], y[:stop])] + ([(p_obs[stop:], p_cf[stop:], y[stop:])] if n > 1 else [])
        with np.errstate(all="ignore"):  # N = 1: the reference's rank correlations are NaN
            expected = ref.report(p_obs, p_cf, y, np.full(k, 1 / k))
        r = cf.metrics.evaluate_chunks(chunks)
        for f in FIELDS:
            tol = dict(rtol=1e-4, atol=1e-7) if f.startswith("smece") else dict(rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(np.asarray(getattr(r, f)), expected[f], err_msg=f"{f}, N = {n}", **tol)


def test_evaluate_chunks_sweep_compiles_one_program_per_bucket(rng):
    ns = sorted(rng.choice(np.arange(65, 129), size=12, replace=False).tolist())  # one bucket: 128
    with compiles() as names:
        for n in ns:
            p_cf = rng.uniform(size=(n, 4)).astype(np.float32)
            cf.metrics.evaluate_chunks([(p_cf[:, 0], p_cf, (p_cf[:, 1] > 0.5).astype(np.int32))])
    for program in ("jit(local)", "jit(finish)", "jit(sum_units)"):
        assert names.count(program) <= 1, (program, names)


# ------------------------------------------------------------------ SCM chunked counterfactuals
def test_chunked_counterfactuals_in_buckets_equal_a_numpy_loop(rng):
    scm, params = make_main(), random_params(rng)
    k = 2
    for n in (1, 2, 3, 4, 5, int(rng.integers(6, 12))):  # chunk 2: N = 1, buckets 2 and 4, just above
        data = random_data(rng, n)
        do = {"a": rng.normal(size=k).astype(np.float32)}
        key = key_of(rng)
        out = scm.counterfactual(params, data, do, key=key, chunk_size=2)
        assert {v: out[v].shape[:2] for v in MAIN} == {v: (n, k) for v in MAIN}
        assert_close(out, scm_reference(params, data, do))
        # one chunk of fewer units than chunk_size: padded to its bucket, cut back
        (start, stop, chunk), = scm.counterfactual_chunks(params, data, do, key=key, chunk_size=16)
        assert (start, stop) == (0, n)
        for v in MAIN:
            np.testing.assert_allclose(chunk[v], out[v], rtol=0, atol=1e-5, err_msg=v)


def test_chunked_counterfactual_sweep_compiles_one_program_per_bucket(rng):
    scm, params = make_main(), random_params(rng)
    do = {"a": np.asarray([0.0, 1.0], np.float32)}
    ns = sorted(rng.choice(np.arange(9, 17), size=6, replace=False).tolist())  # chunk 2: one bucket, 16
    with compiles() as names:
        for n in ns:
            scm.counterfactual(params, random_data(rng, n), do, key=key_of(rng), chunk_size=2)
    assert names.count("jit(local)") <= 1, names
