"""Test configuration: strict shapes and dtypes, float32 by default, fresh random inputs.

Silent broadcasting and implicit dtype promotion fail loudly under pytest (as in equinox's
test suite). Each test that takes ``rng`` gets a fresh seed, printed so that a failure can be
replayed with ``CFJAX_TEST_SEED=<seed>``. ``pytest --seeds N`` (``make seeds``) runs only the
randomized tests, each under N consecutive seeds, so a flaky reference or tolerance shows up
before CI meets it.

The run's processes share one persistent compilation cache (:func:`cfjax.platform.use_compilation_cache`),
so a program one test worker compiled is loaded, not compiled again, by the others: a temporary
folder made for the run and removed at its end, or the folder ``CFJAX_CACHE_DIR`` names (kept;
``CFJAX_CACHE_DIR=off`` runs the suite without a cache).
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import tempfile

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from cfjax import platform

from tests import tiers

_HEAVY = frozenset(tiers.read_heavy())

# The suite's programs are tiny and each is compiled about once, so compilation dominates its
# time. They are compiled for compile speed, not run speed: LLVM's optimisation off (XLA's
# backend optimisation level 0), XLA:CPU's older loop emitters for fusions instead of its MLIR
# fusion emitters, and its plain scheduler instead of the concurrency-optimised one. Measured on
# one worker (2 cores, no cache), six files that compile a lot (metrics, SCM mechanisms, chest
# images, promotion, counterfactual training and tests/test_sensitivity_cfu.py) took 523 s with
# XLA's defaults and 375 s with these flags. The plain scheduler also keeps XLA:CPU from
# stalling: with the concurrency-optimised one, a run of the suite sat idle for minutes inside
# a cfjax.sensitivity.cfu_surface call (tests/test_cli_sensitivity.py's contour test), the
# stall platform.run_group documents. No fast math in any of them; only the order of vectorised
# sums and fused multiply-adds may differ, so results move by float rounding: against XLA's
# defaults, the metrics report was identical, a tiny ensemble's trained parameters moved by at
# most 1.2e-7 and rendered chest images by 3.3e-7, inside every test's tolerance. A flag set in
# XLA_FLAGS is left as it is; the commands, experiments and benchmarks keep XLA's defaults.
#
# And LLVM's code generation in one piece (xla_cpu_parallel_codegen_split_count=1), not split into
# parts compiled on a thread pool: both workers keep both cores busy, so the split only adds work
# (tests/test_scm_model.py, test_data_chest.py and test_promotion.py on one worker, no cache:
# 117 s split, 106 s in one piece).
_COMPILE_FAST = {"xla_backend_optimization_level": "0", "xla_cpu_use_fusion_emitters": "false",
                 "xla_cpu_enable_concurrency_optimized_scheduler": "false",
                 "xla_cpu_parallel_codegen_split_count": "1"}
_flags = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = " ".join([_flags] + [f"--{k}={v}" for k, v in _COMPILE_FAST.items() if k not in _flags]).strip()

# The exception: the programs given platform.small_kernel_options (the sensitivity search's and
# the bootstrap's) are loops of thousands of small steps, whose code at level 0 costs more run
# time than it saves compile time. They keep XLA's optimisation level, per program: with it
# tests/test_sensitivity_cfu.py ran in 92 s instead of 155 s on one worker (its inverse-budget
# test in 21 s instead of 50 s), with the same results to float rounding.
@functools.wraps(platform.small_kernel_options)
def _optimised_small_kernel_options(devices=None):
    options = _optimised_small_kernel_options.__wrapped__(devices)
    return {**options, "xla_backend_optimization_level": 2} if platform.on_cpu(devices) else options


if "xla_backend_optimization_level" not in _flags:
    platform.small_kernel_options = _optimised_small_kernel_options

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

settings.register_profile(
    "cfjax", deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("cfjax")


def pytest_addoption(parser):
    parser.addoption(
        "--seeds", type=int, default=0, metavar="N",
        help="run only the randomized tests (those taking `rng`), each under N seeds: "
        "CFJAX_TEST_SEED, CFJAX_TEST_SEED + 1, ... (a random start when it is unset)")


def pytest_configure(config):
    # With --seeds, every test process (pytest-xdist's workers too) must draw the same seeds:
    # the controller fixes the first one before the workers start, and they inherit it.
    if config.getoption("seeds") > 0 and not hasattr(config, "workerinput"):
        os.environ.setdefault("CFJAX_TEST_SEED", str(secrets.randbits(31)))
    # One compilation cache for the run: the controller makes the folder before the workers
    # start, they inherit it through CFJAX_CACHE_DIR (so do the commands tests run as
    # subprocesses), and the controller removes it at the end (pytest_unconfigure).
    if not hasattr(config, "workerinput") and platform.CACHE_ENV not in os.environ:
        config._cfjax_cache = os.environ[platform.CACHE_ENV] = tempfile.mkdtemp(prefix="cfjax-test-cache-")
    platform.use_compilation_cache()


def pytest_unconfigure(config):
    if getattr(config, "_cfjax_cache", None):
        shutil.rmtree(config._cfjax_cache, ignore_errors=True)
        del os.environ[platform.CACHE_ENV]


def _seeds(config) -> list[int]:
    n = config.getoption("seeds")
    if n <= 0:
        return []
    if not hasattr(config, "_cfjax_seeds"):
        start = int(os.environ.get("CFJAX_TEST_SEED", secrets.randbits(31)))
        config._cfjax_seeds = [(start + i) % 2**32 for i in range(n)]
    return config._cfjax_seeds


def pytest_generate_tests(metafunc):
    seeds = _seeds(metafunc.config)
    if seeds and "cfjax_seed" in metafunc.fixturenames:
        metafunc.parametrize("cfjax_seed", seeds, ids=[f"seed{s}" for s in seeds])


def pytest_collection_modifyitems(config, items):
    # The quick tier: the functions measured heavy (tests/heavy_tests.txt, written by tests/tiers.py)
    # are marked `heavy`; `make quick` leaves them out.
    for it in items:
        if tiers.is_heavy(it.nodeid, _HEAVY):
            it.add_marker(pytest.mark.heavy)
    if not _seeds(config):
        return
    randomized = [it for it in items if "cfjax_seed" in getattr(it, "fixturenames", ())]
    config.hook.pytest_deselected(items=[it for it in items if it not in randomized])
    items[:] = randomized


@pytest.fixture
def cfjax_seed():
    """The seed of this test's random inputs: ``CFJAX_TEST_SEED`` or a fresh one."""
    return int(os.environ.get("CFJAX_TEST_SEED", secrets.randbits(32)))


@pytest.fixture
def rng(cfjax_seed):
    print(f"CFJAX_TEST_SEED={cfjax_seed}")
    return np.random.default_rng(cfjax_seed)


@pytest.fixture
def x64():
    """Run the test body with 64-bit JAX types (for tight comparisons with references)."""
    with jax.enable_x64(True):
        yield


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module. A whole-suite run compiles
    thousands of programs, and every loaded executable holds memory mappings: without this,
    the process nears the kernel's map limit (``vm.max_map_count``) late in the run and XLA
    crashes while compiling. Modules share few programs, so little is recompiled."""
    yield
    jax.clear_caches()
