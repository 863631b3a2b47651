"""Platform choices: what runs fastest (or at all) on each backend, decided in one place so
that no algorithm carries a backend test inline.

Each choice is a function of the default backend (or of a device list), documented with the
measurement behind it; the pillars call these functions instead of testing the platform.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import jax

__all__ = ["full_precision", "on_cpu", "default_conv", "default_member_chunk", "default_resample_batch",
           "default_predictor_batch", "run_group", "RUN_GROUP", "CPU_SCHEDULER_OFF"]

#: runs vmapped together per optimiser step of the sensitivity search on XLA:CPU
RUN_GROUP = 4
#: the XLA flag that switches off XLA:CPU's concurrency-optimised scheduler
CPU_SCHEDULER_OFF = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def on_cpu(devices: Sequence[Any] | None = None) -> bool:
    """Whether ``devices`` (default: the default backend's) are CPU devices."""
    if devices is None:
        return jax.default_backend() == "cpu"
    return next(iter(devices)).platform == "cpu"


def default_conv() -> str:
    """The faster convolution on the default backend: ``"matmul"`` on CPU, ``"xla"`` elsewhere.

    XLA's CPU backend runs a convolution inside a loop (``lax.scan``, ``lax.map``) several times
    slower than outside one, and a convolution ``vmap``ped over its kernel (an ensemble) becomes
    a grouped convolution, slower still; a matrix product has neither problem, and ``vmap``ped
    it is a batched matrix product. GPUs and TPUs have fast native convolutions.
    """
    return "matmul" if on_cpu() else "xla"


def default_member_chunk(m: int) -> int:
    """Members run side by side (``vmap``) by default: all of them, except on CPU, where one
    at a time (still one compiled program) is faster. Measured with jax 0.10.2 on 2 CPU cores
    (M = 4, batch 32, 32×32 images): with the default matrix-product convolutions the
    ``vmap``ped members take ~1.2–1.6× longer per member-step than one after another (XLA's CPU
    batched matrix products are slower than separate ones); with XLA's native convolutions,
    ``vmap`` makes them grouped convolutions, ~3× slower."""
    return 1 if on_cpu() else m


def default_resample_batch(n_elements: int, resamples: int, chunk_elements: int) -> int:
    """Bootstrap resamples evaluated per vmapped step: one at a time on CPU (a ``lax.map``
    over resamples is as fast there and needs one resample's memory); elsewhere as many as
    fit in ``chunk_elements`` elements of ``n_elements`` each."""
    if on_cpu():
        return 1
    return max(1, min(resamples, chunk_elements // max(1, n_elements)))


def default_predictor_batch(devices: Sequence[Any]) -> int | None:
    """Predictors evaluated per vmapped step of a metric sweep: one at a time on CPU, all at
    once (None) elsewhere."""
    return 1 if on_cpu(devices) else None


def run_group(runs: int) -> int | None:
    """How many runs of the sensitivity search one optimiser step (and the polish) vmaps at
    once (None: all of them).

    XLA:CPU stalls, idle and never finishing, when the whole search vmaps 8 or more runs at
    once on large data, unless its concurrency-optimised scheduler is switched off with
    ``XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false`` before JAX starts (a
    per-program compiler option does not help). Still so with jax 0.10.2: the reproducer
    ``python -m experiments.benchmarks.xla_cpu_stall`` (its docstring has the numbers) runs 8
    runs of the search on the 209,112-row NHS survey in a child process, and with the
    scheduler on it sat idle until its timeout, while with the scheduler off, or in groups of
    4 with it on, it finished in under a minute. The polish (full-data CFU and its gradient in
    a while loop, vmapped over the runs) is what stalls there; the optimiser steps alone, on
    minibatches, finished with 64 runs at once, but steps on the full data are the same kind
    of program. So on CPU with that scheduler on the runs go in vmapped groups of 4, one group
    after another; otherwise (the scheduler off, other backends) every run is vmapped at once.
    """
    if not on_cpu() or CPU_SCHEDULER_OFF in os.environ.get("XLA_FLAGS", ""):
        return None
    return RUN_GROUP if runs > RUN_GROUP else None


def full_precision():
    """A scope for matrix products at the inputs' full precision (not TF32 on GPUs, not bf16
    passes on TPUs): ``jax.default_matmul_precision("highest")``."""
    return jax.default_matmul_precision("highest")
