"""Test configuration: strict shapes and dtypes, float32 by default, fresh random inputs.

Silent broadcasting and implicit dtype promotion fail loudly under pytest (as in equinox's
test suite). Each test that takes ``rng`` gets a fresh seed, printed so that a failure can be
replayed with ``CFJAX_TEST_SEED=<seed>``.
"""

from __future__ import annotations

import os
import secrets

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

settings.register_profile(
    "cfjax", deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("cfjax")


@pytest.fixture
def rng():
    seed = int(os.environ.get("CFJAX_TEST_SEED", secrets.randbits(32)))
    print(f"CFJAX_TEST_SEED={seed}")
    return np.random.default_rng(seed)


@pytest.fixture
def x64():
    """Run the test body with 64-bit JAX types (for tight comparisons with references)."""
    with jax.enable_x64(True):
        yield
