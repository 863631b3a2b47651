"""Platform choices: what runs fastest (or at all) on each backend, decided in one place so
that no algorithm carries a backend test inline.

Each choice is a function of the default backend (or of a device list), documented with the
measurement behind it; the pillars call these functions instead of testing the platform.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from cfjax.typing import PyTree

#: What a user calls. The choices the pillars make through this module (:func:`on_cpu`,
#: :func:`default_conv`, :func:`default_member_chunk`, :func:`default_resample_batch`,
#: :func:`default_predictor_batch`, :func:`run_group`, :func:`map_runs` and their constants) are
#: module attributes here, outside ``__all__``.
__all__ = [
    "use_compilation_cache",
    "compilation_cache_dir",
    "full_precision",
    "small_kernel_options",
]

#: runs vmapped together per optimiser step of the sensitivity search on XLA:CPU
RUN_GROUP = 4
#: the XLA flag that switches off XLA:CPU's concurrency-optimised scheduler
CPU_SCHEDULER_OFF = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def on_cpu(devices: Sequence[jax.Device] | None = None) -> bool:
    """Whether ``devices`` (default: the default backend's) are CPU devices."""
    if devices is None:
        return jax.default_backend() == "cpu"
    return next(iter(devices)).platform == "cpu"


def default_conv() -> str:
    """The faster convolution on the default backend: ``"matmul"`` on CPU, ``"xla"`` elsewhere.

    XLA's CPU backend runs a convolution inside a loop (``lax.scan``, ``lax.map``) several times
    slower than outside one, and a convolution ``vmap``-ed over its kernel (an ensemble) becomes
    a grouped convolution, slower still; a matrix product has neither problem, and ``vmap``-ed
    it is a batched matrix product. GPUs and TPUs have fast native convolutions.
    """
    return "matmul" if on_cpu() else "xla"


def default_member_chunk(m: int) -> int:
    """Members run side by side (``vmap``) by default: all of them, except on CPU, where one
    at a time (still one compiled program) is faster. Measured with jax 0.10.2 on 2 CPU cores
    (M = 4, batch 32, 32×32 images): with the default matrix-product convolutions the
    ``vmap``-ped members take ~1.2–1.6× longer per member-step than one after another (XLA's CPU
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


def default_predictor_batch(devices: Sequence[jax.Device] | None) -> int | None:
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
    The same holds for the sensitivity benchmarks' 36 Model B fits on the NHS survey in float64
    (``--search benchmarks --degree 0 --x64`` in the reproducer), which stalled the bootstrap
    there: :func:`map_runs` groups such vmaps by this rule.

    The plain scheduler is not a cure for every width: with it, the sensitivity bootstrap's
    program vmapping 201 resamples of a 200-row table at once sat idle for minutes, while in
    chunks of 4 its 200 resamples took 24 s (both on 2 cores, jax 0.10.2). So the bootstrap's
    chunks of resamples are at most :data:`RUN_GROUP` on CPU whichever scheduler runs
    (:class:`cfjax.sensitivity.BootstrapConfig`).
    """
    if not on_cpu() or CPU_SCHEDULER_OFF in os.environ.get("XLA_FLAGS", ""):
        return None
    return RUN_GROUP if runs > RUN_GROUP else None


def map_runs(fn: Callable[[PyTree], PyTree], args: PyTree) -> PyTree:
    """``jax.vmap(fn)(args)``, or, where :func:`run_group` groups runs (XLA:CPU with its
    concurrency-optimised scheduler on), ``jax.lax.map`` over vmapped groups of that many runs:
    the same values, without the stall. For vmaps over runs of a full-data fit (the
    sensitivity benchmarks' Model B fits, the bootstrap's local searches). Traceable."""
    n = jax.tree.leaves(args)[0].shape[0]
    group = run_group(n)
    if group is None:
        return jax.vmap(fn)(args)
    # The last group padded with copies of the first run (their results dropped): lax.map's
    # own remainder would trace ``fn`` a second time, and compile its loops twice.
    pad = -n % group
    if pad:
        args = jax.tree.map(lambda a: jnp.concatenate([a, jnp.repeat(a[:1], pad, axis=0)]), args)
    out = jax.lax.map(fn, args, batch_size=group)
    return jax.tree.map(lambda a: a[:n], out) if pad else out


def small_kernel_options(devices: Sequence[jax.Device] | None = None) -> dict[str, Any]:
    """Per-program XLA options (``jax.jit(..., compiler_options=...)``, or
    :func:`cfjax.distributed.map_batch`'s ``compiler_options``) for programs made of many small
    kernels: loops over m × m matrices and solves of a few dozen coefficients, such as the
    sensitivity search.

    On XLA:CPU, ``xla_cpu_use_fusion_emitters=False``: its loop emitters instead of the newer
    fusion emitters, which spend most of such a program's compile time on kernels that run for
    microseconds. Measured with jax 0.10.2 on 2 cores (``bench_sensitivity --compile-only``; the
    benchmarks page gives the figures): the search's programs compile in about two thirds of the time
    and run as fast. Elsewhere, or with a jaxlib whose XLA no longer knows the option: no
    options (an empty dict).
    """
    if not on_cpu(devices):
        return {}
    return (
        {"xla_cpu_use_fusion_emitters": False}
        if _known_option("xla_cpu_use_fusion_emitters", False)
        else {}
    )


@functools.cache
def _known_option(name: str, value: Any) -> bool:
    """Whether XLA accepts the per-program option (a tiny program compiled with it, once per
    process): a jaxlib that dropped it would otherwise fail every program given it."""
    try:
        jax.jit(lambda x: x + 1, compiler_options={name: value}).lower(np.float32(0)).compile()
    except Exception:  # XLA's error for an unknown option: "No such compile option"
        return False
    return True


def full_precision():
    """A scope for matrix products at the inputs' full precision (not TF32 on GPUs, not bf16
    passes on TPUs): ``jax.default_matmul_precision("highest")``."""
    return jax.default_matmul_precision("highest")


#: The environment variable that moves the compilation cache (a path) or turns it off (``off``,
#: ``0`` or an empty value): read by :func:`use_compilation_cache`.
CACHE_ENV = "CFJAX_CACHE_DIR"
#: Programs that compile in less time than this (seconds) are not written to the cache.
CACHE_MIN_COMPILE_SECS = 0.0
_CACHE_OFF = ("off", "0", "")


def _user_cache_home() -> str:
    """The platform's per-user cache folder: ``%LOCALAPPDATA%`` on Windows, ``~/Library/Caches``
    on macOS, ``$XDG_CACHE_HOME`` (an absolute path) or ``~/.cache`` elsewhere."""
    home = os.path.expanduser("~")
    if sys.platform == "win32":
        return os.environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local")
    if sys.platform == "darwin":
        return os.path.join(home, "Library", "Caches")
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return xdg if os.path.isabs(xdg) else os.path.join(home, ".cache")


def compilation_cache_dir(directory: str | os.PathLike | bool | None = None) -> str | None:
    """The folder :func:`use_compilation_cache` would use (an absolute path), or None when the
    cache is off; changes nothing.

    Args:
      directory: a folder, used as it is; False: off; None (or True): the ``CFJAX_CACHE_DIR``
        environment variable (a path moves the cache there; ``off``, ``0`` or an empty value,
        in any case and surrounded by spaces or not, turns it off), else a folder already set
        through JAX's own configuration (``JAX_COMPILATION_CACHE_DIR``), else
        ``cfjax/compilation-cache`` in the platform's per-user cache folder (``$XDG_CACHE_HOME``
        or ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows).

    Returns:
      The folder's absolute path, or None.
    """
    if directory is False:
        return None
    if directory is None or directory is True:
        value = os.environ.get(CACHE_ENV)
        if value is not None:
            if value.strip().lower() in _CACHE_OFF:
                return None
            directory = value.strip()
        else:
            # jax's Config declares its flags at run time, not in its type stubs
            configured = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]
            directory = configured or os.path.join(_user_cache_home(), "cfjax", "compilation-cache")
    return os.path.abspath(os.path.expanduser(os.fspath(directory)))


def use_compilation_cache(directory: str | os.PathLike | bool | None = None) -> str | None:
    """Turn on JAX's persistent compilation cache, so that a program compiled once is loaded
    from disk by every later process instead of compiled again.

    The ``cfjax`` command, the experiments and the test suite call this; importing cfjax changes
    no configuration, so a script opts in with one line before its first computation::

        cfjax.platform.use_compilation_cache()

    Sets JAX's ``jax_compilation_cache_dir``, writes every program to the cache however fast it
    compiled (``jax_persistent_cache_min_compile_time_secs`` = :data:`CACHE_MIN_COMPILE_SECS`;
    JAX's default, 1 s, keeps most of cfjax's CPU programs out, though a small jitted function
    loads from the cache several times faster than it compiles) and of any size
    (``jax_persistent_cache_min_entry_size_bytes`` = -1). It is not bounded in size: JAX's
    bound (``jax_compilation_cache_max_size``) takes a file lock and lists the whole folder at
    every write, which made the test suite's workers wait on each other for minutes. When the
    cache is off it sets
    ``jax_enable_compilation_cache`` to False, so a folder set through JAX's own configuration
    is not used either. Calling it again with the same outcome changes nothing; a new outcome
    takes effect for the programs compiled after it.

    An entry JAX cannot read (a truncated or corrupt file, a half-written one) is reported with
    a warning and the program is compiled again; entries of other JAX versions or compiler
    flags are never matched (both are part of an entry's key). JAX never replaces an entry, so a
    corrupt one is compiled again on every run: delete the folder to empty the cache.

    Args:
      directory: the cache folder; False turns the cache off (the command's ``--no-cache``);
        None (the default) follows :func:`compilation_cache_dir`: ``CFJAX_CACHE_DIR`` (a path,
        or ``off``), else JAX's own setting, else the per-user cache folder.

    Returns:
      The cache folder in use (an absolute path), or None when the cache is off (also when the
      folder cannot be created, with a warning).
    """
    path = compilation_cache_dir(directory)
    if path is not None:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            warnings.warn(f"compilation cache off: cannot create {path!r} ({e})", stacklevel=2)
            path = None
    wanted: dict[str, bool | int | float | str] = {"jax_enable_compilation_cache": path is not None}
    if path is not None:
        wanted.update(
            jax_compilation_cache_dir=path,
            jax_persistent_cache_min_compile_time_secs=CACHE_MIN_COMPILE_SECS,
            jax_persistent_cache_min_entry_size_bytes=-1,
        )
    changed = {name: value for name, value in wanted.items() if getattr(jax.config, name) != value}
    for name, value in changed.items():
        jax.config.update(name, value)
    if changed.keys() & {"jax_enable_compilation_cache", "jax_compilation_cache_dir"}:
        # JAX opens the cache once per process; a new folder (or on/off) needs it reopened.
        from jax.experimental.compilation_cache import compilation_cache

        compilation_cache.reset_cache()
    return path
