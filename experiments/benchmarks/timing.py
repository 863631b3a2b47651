"""Timing shared by the benchmarks: warm up, then the median of repeated runs."""

from __future__ import annotations

import statistics
import time

import jax


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
