"""Where cfjax's arrays live when there are many devices or many processes.

One concept: a one-axis :class:`jax.sharding.Mesh` over which a batch axis is split. The pillars
take ``mesh=`` (or ``devices=``) and otherwise do not change: the unit axis N for
counterfactual generation, predictor inference and metric reductions; budgets × restarts for
the sensitivity search; members for ensemble training; resamples for the bootstrap.

On one machine, every local device (on CPU, several exist only when XLA was asked for them
before JAX started, e.g. ``XLA_FLAGS=--xla_force_host_platform_device_count=8``). Beyond one
machine, JAX's own multi-host runtime: :func:`initialize` (``jax.distributed.initialize``,
configured from environment variables) in every process, then :func:`mesh` spans every
process's devices, each process reads its own block of units (:func:`process_block`), and
:func:`global_units` / :func:`host_array` move between a process's rows and the global array.

Shapes: a batch axis of any length B is padded to a multiple of the mesh size (by repeating its
last entry, so that every padded entry is a valid input) and the padding is dropped from the
results (:func:`map_batch`); reductions that must not see the padding take the mask
:func:`valid_mask`. Where a sweep over many lengths would compile one program per length, the
axis is padded further, to its shape bucket (:func:`bucket`: a power of two times the chunk).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jax.typing import DTypeLike

from cfjax import _checks
from cfjax.typing import MeshLike, PyTree

#: What a user calls. The pillars' building blocks (:func:`as_mesh`, :func:`pad_axis`,
#: :func:`valid_mask`, :func:`shard`, :func:`head`, :func:`global_units`, :func:`host_array`,
#: :func:`is_initialized`, :data:`UNITS`) are module attributes here, outside ``__all__``.
__all__ = ["initialize", "host_devices", "mesh", "process_block", "map_batch", "bucket"]

UNITS = "units"  # the default name of the mesh axis


ENV_COORDINATOR = "CFJAX_COORDINATOR"
ENV_NUM_PROCESSES = "CFJAX_NUM_PROCESSES"
ENV_PROCESS_ID = "CFJAX_PROCESS_ID"

_initialized = False


def is_initialized() -> bool:
    """Whether :func:`initialize` has run in this process."""
    return _initialized


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
) -> None:
    """Join a multi-process JAX run (``jax.distributed.initialize``), once per process, before
    any other JAX call.

    Each argument left out is read from the environment: ``CFJAX_COORDINATOR`` (``host:port``
    of process 0), ``CFJAX_NUM_PROCESSES``, ``CFJAX_PROCESS_ID``. With none of them given
    anywhere, JAX detects the cluster itself (SLURM, Open MPI, Kubernetes, Cloud TPU). On CPU
    the cross-process collectives use gloo. A second call is a no-op.

    Args:
      coordinator_address: ``"host:port"`` of process 0's coordinator service.
      num_processes: the number of processes (≥ 1).
      process_id: this process's index in ``0 .. num_processes - 1``.

    Example (two processes on one machine, one shell each)::

        CFJAX_COORDINATOR=localhost:12355 CFJAX_NUM_PROCESSES=2 CFJAX_PROCESS_ID=0 python run.py
        CFJAX_COORDINATOR=localhost:12355 CFJAX_NUM_PROCESSES=2 CFJAX_PROCESS_ID=1 python run.py
    """
    global _initialized
    if _initialized:
        return
    coordinator_address = coordinator_address or os.environ.get(ENV_COORDINATOR) or None
    num_processes = _env_int("num_processes", num_processes, ENV_NUM_PROCESSES, 1)
    process_id = _env_int("process_id", process_id, ENV_PROCESS_ID, 0)
    if num_processes is not None and process_id is not None and process_id >= num_processes:
        _checks.fail(
            "process_id",
            f"an index in 0..{num_processes - 1} (num_processes={num_processes})",
            str(process_id),
        )
    given = [coordinator_address, num_processes, process_id]
    if any(v is not None for v in given) and any(v is None for v in given):
        names = ("coordinator_address", "num_processes", "process_id")
        missing = [n for n, v in zip(names, given) if v is None]
        _checks.fail(
            missing[0],
            f"all of coordinator_address, num_processes and process_id (or "
            f"{ENV_COORDINATOR}, {ENV_NUM_PROCESSES}, {ENV_PROCESS_ID}), or none of them "
            "for JAX's cluster detection",
            f"only {', '.join(n for n, v in zip(names, given) if v is not None)}",
        )
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
    )
    _initialized = True


def host_devices(n: int) -> int:
    """Ask for ``n`` CPU host devices (``jax_num_cpu_devices``), so that the CPU backend's work
    can be split over ``n`` cores; call it before JAX starts its backends (before the first
    computation). Returns the number of devices of the default backend afterwards (on a
    machine with an accelerator, its devices: this setting changes only the CPU backend).
    Raises ``ValidationError`` when fewer than ``n`` devices exist (the backends had already
    started with fewer)."""
    n = _checks.check_positive_int("n", n)
    try:
        if jax.config.jax_num_cpu_devices < n:  # type: ignore[attr-defined]  # a run-time flag
            jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:  # the backends have started: what exists is what there is
        pass
    available = len(jax.devices())
    if available < n:
        _checks.fail(
            "devices",
            f"at most {available} (the {jax.default_backend()} backend's devices; "
            "on a CPU, ask for host devices before the first JAX computation)",
            str(n),
        )
    return available


def _env_int(name: str, value: int | None, env: str, minimum: int) -> int | None:
    source = name
    if value is None:
        text = os.environ.get(env)
        if text is None or text == "":
            return None
        source = f"{name} (environment variable {env})"
        try:
            value = int(text)
        except ValueError:
            _checks.fail(source, "an integer", repr(text))
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        _checks.fail(source, f"an integer ≥ {minimum}", repr(value))
    return int(value)


def mesh(devices: MeshLike = None, axis: str = UNITS) -> Mesh:
    """A one-axis mesh named ``axis`` over ``devices``.

    Args:
      devices: None for every device of the default backend (across all processes after
        :func:`initialize`); an int d for the first d of them; a sequence of distinct devices
        of one platform; or a one-axis ``Mesh`` (returned as it is).
      axis: the mesh axis name.

    Example:
      >>> m = mesh(1)
      >>> m.axis_names, m.size
      (('units',), 1)
    """
    if isinstance(devices, Mesh):
        if len(devices.axis_names) != 1:
            _checks.fail(
                "devices", "a jax.sharding.Mesh with one axis", f"axes {devices.axis_names}"
            )
        return devices
    every = jax.devices()
    if devices is None:
        devs = every
    elif isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        if not 1 <= devices <= len(every):
            _checks.fail(
                "devices",
                f"a device count in 1..{len(every)} (the devices of the "
                f"{every[0].platform} backend)",
                str(devices),
            )
        devs = every[: int(devices)]
    else:
        try:
            devs = list(devices)  # type: ignore[arg-type]  # a bool raises TypeError: refused
        except TypeError:
            _checks.fail(
                "devices",
                "None, a device count, a sequence of jax devices or a one-axis jax.sharding.Mesh",
                repr(devices),
            )
        bad = [d for d in devs if not isinstance(d, jax.Device)]
        if not devs or bad:
            _checks.fail(
                "devices",
                "a non-empty sequence of jax devices (e.g. jax.devices())",
                repr(bad[0]) if bad else "an empty sequence",
            )
        if len(set(devs)) != len(devs):
            _checks.fail(
                "devices", "distinct devices", f"{len(devs)} entries, {len(set(devs))} distinct"
            )
        if len({d.platform for d in devs}) > 1:
            _checks.fail(
                "devices", "devices of one platform", str(sorted({d.platform for d in devs}))
            )
    if not isinstance(axis, str) or not axis:
        _checks.fail("axis", "a non-empty mesh axis name", repr(axis))
    return Mesh(np.asarray(devs), (axis,))


def process_block(n: int, num_processes: int | None = None, process_id: int | None = None) -> slice:
    """The contiguous block of ``n`` units that this process reads: process p of P gets
    ``ceil(n / P)`` units from ``p * ceil(n / P)`` (the last process fewer, possibly none).

    Every process pads its block to the same length with :func:`global_units`, so the blocks
    of a global array line up with the processes' devices.

    Example:
      >>> [process_block(10, 3, p) for p in range(3)]
      [slice(0, 4, None), slice(4, 8, None), slice(8, 10, None)]
    """
    n = _checks.check_positive_int("n", n)
    count = jax.process_count() if num_processes is None else num_processes
    index = jax.process_index() if process_id is None else process_id
    per = -(-n // count)
    return slice(min(index * per, n), min((index + 1) * per, n))


def pad_axis(x: PyTree, multiple: int, axis: int = 0) -> PyTree:
    """``x`` (an array or a pytree of arrays with a common axis ``axis``) padded along
    ``axis`` to a multiple of ``multiple`` by repeating its last entry (a numpy array on the
    host with numpy, compiling nothing; a JAX array in one small compiled program per shape).

    Example:
      >>> pad_axis(jnp.arange(5), 4).tolist()
      [0, 1, 2, 3, 4, 4, 4, 4]
    """

    def one(a):
        size = np.shape(a)[axis]
        pad = (-size) % multiple
        if not pad:
            return a
        if isinstance(a, np.ndarray):
            last = np.take(a, [size - 1], axis=axis)
            return np.concatenate([a, np.repeat(last, pad, axis=axis)], axis=axis)
        return _pad_last(jnp.asarray(a), pad, axis)

    return jax.tree.map(one, x)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _pad_last(a: jax.Array, pad: int, axis: int) -> jax.Array:
    size = a.shape[axis]
    last = jax.lax.slice_in_dim(a, size - 1, size, axis=axis)
    return jnp.concatenate([a, jnp.repeat(last, pad, axis=axis)], axis=axis)


def head(x: PyTree, n: int) -> PyTree:
    """The first ``n`` entries along the leading axis of every leaf of ``x`` (e.g. the padding
    of a shape bucket dropped): one compiled program for the whole pytree (not one per leaf).

    Example:
      >>> head({"a": jnp.arange(4), "b": jnp.ones((4, 2))}, 3)["a"].tolist()
      [0, 1, 2]
    """
    return _head(x, n)


@functools.partial(jax.jit, static_argnums=1)
def _head(x: PyTree, n: int) -> PyTree:
    return jax.tree.map(lambda a: a[:n], x)


def bucket(n: int, chunk: int | None = None) -> int:
    """The shape bucket of a batch of ``n`` entries processed ``chunk`` at a time: the length
    cfjax pads it to (repeating its last entry, :func:`pad_axis`) before compiling, so that a
    sweep over many N compiles a handful of programs (``docs/contract.md``, "Shape buckets").

    ``n ≤ chunk`` (or ``chunk`` None): the next power of two ``≥ n``, at most ``chunk``;
    ``n > chunk``: ``chunk`` times the next power of two ``≥ ceil(n / chunk)``, so the chunks
    are whole and their number is a power of two. The padded length is below ``2 n`` (for
    ``n > chunk`` with ``b = ceil(n / chunk)`` chunks: ``b`` a power of two gives
    ``b·chunk < n + chunk < 2n``, otherwise the next power of two is ``≤ 2(b − 1)`` and
    ``2(b − 1)·chunk < 2n``), and the N in ``[1, n_max]`` fall in at most
    ``⌈log2 n_max⌉ + 1`` buckets.

    Example:
      >>> [bucket(n, 256) for n in (1, 3, 200, 256, 257, 513, 1024, 1025)]
      [1, 4, 256, 256, 512, 1024, 1024, 2048]
      >>> bucket(90, 100), bucket(5)
      (100, 8)
    """
    n = _checks.check_positive_int("n", n)
    if chunk is not None:
        chunk = _checks.check_positive_int("chunk", chunk)
    if chunk is None or n <= chunk:
        return 1 << (n - 1).bit_length() if chunk is None else min(1 << (n - 1).bit_length(), chunk)
    return chunk << (-(-n // chunk) - 1).bit_length()


def valid_mask(n: int, padded: int, dtype: DTypeLike = jnp.float32) -> jax.Array:
    """``(padded,)`` weights: 1 for the first ``n`` entries, 0 for the padding."""
    return (jnp.arange(padded) < n).astype(dtype)


def shard(x: PyTree, where: Mesh, axis: int = 0) -> PyTree:
    """``x`` (a pytree) placed on ``where`` with axis ``axis`` split over the mesh axis (its
    length must already be a multiple of the mesh size: see :func:`pad_axis`)."""
    spec = PartitionSpec(*([None] * axis + [where.axis_names[0]]))
    return jax.device_put(x, NamedSharding(where, spec))


def as_mesh(mesh: MeshLike, axis: str = UNITS) -> Mesh | None:
    """The ``mesh=`` argument of every cfjax function, resolved: None stays None (one device,
    the default placement); an int, a sequence of devices or a one-axis ``Mesh`` become a
    one-axis mesh (:func:`mesh`), the error naming ``mesh``."""
    if mesh is None:
        return None
    try:
        return globals()["mesh"](mesh, axis)
    except _checks.ValidationError as error:
        raise _checks.ValidationError(str(error).replace("`devices`", "`mesh`", 1)) from None


def map_batch(
    fn: Callable[..., PyTree],
    *args: PyTree,
    shared: tuple[PyTree, ...] = (),
    mesh: MeshLike = None,
    chunk_size: int | None = None,
    buckets: bool = False,
    compiler_options: Mapping[str, Any] | None = None,
) -> PyTree:
    """``fn`` applied along the leading (batch) axis of ``args``, split over ``mesh``: the one
    way cfjax spreads work over devices (units, members, resamples or runs).

    ``fn(*args_block, *shared)`` maps a batch of entries to a batch of results (a pytree of
    arrays whose leading axis is the batch). Each device runs ``fn`` on its block of entries,
    ``chunk_size`` entries at a time (``lax.map`` inside the compiled program; None: the whole
    block at once), so the memory beyond inputs and outputs is one chunk's per device;
    ``shared`` (parameters, a problem's data) is passed whole to every device. The batch axis is
    padded to a multiple of the devices, and each device's block to a multiple of
    ``chunk_size``, by repeating the last entry, and the padding dropped, so the result equals
    ``fn(*args, *shared)`` for any batch length whenever ``fn`` treats entries independently.

    Args:
      fn: a traceable function of batches (compiled once per input shape; pass the same
        function object each call to reuse the compilation: a module-level function or a
        hashable callable, not a fresh closure).
      *args: pytrees of arrays with a common leading length B.
      shared: pytrees passed to every call of ``fn`` after the batch arguments.
      mesh: None (one device), a device count, a sequence of devices or a one-axis ``Mesh``.
      chunk_size: entries per step on each device, or None.
      buckets: pad each device's block further, to its :func:`bucket` (``chunk_size`` at a
        time), so that every batch length of a bucket runs the same compiled program.
      compiler_options: XLA options for the compiled program (``jax.jit``'s), e.g.
        :func:`cfjax.platform.small_kernel_options`; None: XLA's defaults.

    Returns:
      ``fn``'s outputs for the B entries: sharded over ``mesh`` along the batch axis when B is a
      multiple of the devices; otherwise (an axis JAX cannot split unevenly) gathered onto the
      mesh's first device.

    Example:
      >>> x = jnp.arange(10.0)
      >>> map_batch(lambda b, s: b * s, x, shared=(2.0,), mesh=1, chunk_size=4).tolist()[-3:]
      [14.0, 16.0, 18.0]
    """
    where = as_mesh(mesh)
    leaves = jax.tree.leaves(args)
    if not leaves:
        _checks.fail("args", "at least one array with a batch axis", "no arrays")
    n = int(np.shape(leaves[0])[0])
    for leaf in leaves:
        if np.ndim(leaf) == 0 or np.shape(leaf)[0] != n:
            _checks.fail(
                "args",
                f"arrays with a common leading (batch) axis of length {n}",
                f"an array of shape {np.shape(leaf)}",
            )
    if not isinstance(shared, tuple):
        _checks.fail("shared", "a tuple of pytrees", type(shared).__name__)
    if chunk_size is not None:
        chunk_size = _checks.check_positive_int("chunk_size", chunk_size)
    devices = 1 if where is None else where.size
    if not isinstance(buckets, bool):
        _checks.fail("buckets", "a bool", repr(buckets))
    per = -(-n // devices)
    if buckets:
        per = bucket(per, chunk_size)
    chunk = per if chunk_size is None else min(chunk_size, per)
    padded = pad_axis(args, per * devices) if buckets else pad_axis(args, devices)
    if compiler_options is not None and not isinstance(compiler_options, Mapping):
        _checks.fail(
            "compiler_options",
            "None or a mapping of XLA option names to values",
            type(compiler_options).__name__,
        )
    options = tuple(sorted((compiler_options or {}).items()))
    run = _mapped(fn, where, chunk, len(args), options)
    if where is not None:
        padded = shard(padded, where)
    out = run(*padded, *shared)
    if jax.tree.leaves(padded)[0].shape[0] == n:
        return out
    if where is not None and where.size > 1 and n % where.size:
        # An axis that does not divide evenly cannot stay split: gathered onto the first
        # device once, rather than cut into a copy on every device.
        out = jax.device_put(out, where.devices.flat[0])
    return head(out, n)


@functools.lru_cache(maxsize=64)
def _mapped(
    fn: Callable[..., PyTree],
    where: Mesh | None,
    chunk: int,
    n_split: int,
    options: tuple[tuple[str, Any], ...] = (),
) -> Callable[..., PyTree]:
    def local(*everything):
        args, shared = everything[:n_split], everything[n_split:]
        size = jax.tree.leaves(args)[0].shape[0]  # this device's block
        if chunk >= size:
            return fn(*args, *shared)
        args = pad_axis(args, chunk)  # within the block: the result keeps the block's layout
        steps = jax.tree.leaves(args)[0].shape[0] // chunk
        blocks = jax.tree.map(lambda a: a.reshape((steps, chunk) + a.shape[1:]), args)
        out = jax.lax.map(lambda b: fn(*b, *shared), blocks)
        return jax.tree.map(lambda a: a.reshape((steps * chunk,) + a.shape[2:])[:size], out)

    if where is None:
        return jax.jit(local, compiler_options=dict(options) or None)
    split, whole = PartitionSpec(where.axis_names[0]), PartitionSpec()

    def sharded(*everything):
        specs = (split,) * n_split + (whole,) * (len(everything) - n_split)
        # check_vma=False: fn is a batch function that knows nothing of the mesh (no
        # collectives), and a loop in it whose carry starts from constants (lax.while_loop,
        # lax.scan) would otherwise fail shard_map's check that the carry's device-variance
        # is the same in and out.
        return jax.shard_map(local, mesh=where, in_specs=specs, out_specs=split, check_vma=False)(
            *everything
        )

    return jax.jit(sharded, compiler_options=dict(options) or None)


def global_units(local: PyTree, where: Mesh, n: int) -> tuple[PyTree, jax.Array]:
    """A global array over all processes from each process's block of units.

    Every process calls this with its own rows (``process_block(n)`` of the data, a pytree of
    arrays with the units on axis 0); each block is padded to the common block length
    (repeating its last row, or the global data's first row for an empty block is not allowed:
    every process must hold at least one unit) and the results are laid out process by
    process. Returns ``(array, mask)``: the global array of ``P × ceil(n / P)`` rows, padded
    further to a multiple of the mesh size, and its ``(rows,)`` validity mask.

    In a single process this is :func:`shard` of the padded rows.
    """
    count = jax.process_count()
    per = -(-n // count)
    local_devices = where.local_mesh.size if count > 1 else where.size
    per = -(-per // local_devices) * local_devices
    rows = int(np.shape(jax.tree.leaves(local)[0])[0])
    if rows == 0:
        _checks.fail(
            "local", "at least one unit in every process (fewer processes than units)", "0 rows"
        )
    padded = pad_axis(local, per)
    block = process_block(n)
    mask_local = (np.arange(per) < (block.stop - block.start)).astype(np.float32)
    sharding = NamedSharding(where, PartitionSpec(where.axis_names[0]))
    if count == 1:
        return jax.device_put(padded, sharding), jax.device_put(jnp.asarray(mask_local), sharding)
    make = functools.partial(jax.make_array_from_process_local_data, sharding)
    return jax.tree.map(lambda a: make(np.asarray(a)), padded), make(mask_local)


def host_array(x: jax.Array) -> np.ndarray:
    """The whole of a (possibly multi-process, sharded) array as a numpy array in every
    process."""
    if jax.process_count() > 1 and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)
