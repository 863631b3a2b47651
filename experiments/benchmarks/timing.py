"""Timing shared by the benchmarks: the first call (compilation included for a jitted
function), then warm-up and the median of repeated runs; and the conditions to print."""

from __future__ import annotations

import os
import platform
import statistics
import time

import jax
import numpy as np


def median_time(fn, repeats: int, warmup: int = 2) -> float:
    """Median wall time in seconds of ``fn()`` (its result waited for) over ``repeats`` runs."""
    for _ in range(warmup):
        jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def first_time(fn) -> float:
    """Wall time in seconds of one call of ``fn()`` with its result waited for: called first,
    it includes tracing and compilation."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


def conditions() -> str:
    """One line: cores, JAX/numpy versions, platform."""
    return (f"{os.cpu_count()} CPU cores ({platform.machine()}), jax {jax.__version__} on "
            f"{jax.default_backend()}, numpy {np.__version__}, python {platform.python_version()}")
