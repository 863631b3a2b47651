"""Every ensemble member on factual and counterfactual images, in one jitted call with memory
bounded by a fixed chunk of images, the members or the images optionally spread over several
devices."""

from __future__ import annotations

import functools
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from cfjax import _checks
from cfjax import distributed as _dist

__all__ = ["predict", "to_metrics_layout", "init_params", "ensemble_size", "map_members", "SHARD_MODES"]

#: what :func:`predict` spreads over several devices
SHARD_MODES = ("members", "units")


def ensemble_size(params: Any) -> int:
    """M, the leading (member) axis shared by every leaf of ``params``."""
    leaves = jax.tree.leaves(params)
    if not leaves:
        _checks.fail("params", "a parameter pytree with a leading member axis", "an empty pytree")
    sizes = {np.shape(a)[0] if np.ndim(a) else None for a in leaves}
    if len(sizes) != 1 or None in sizes:
        _checks.fail("params", "every leaf with the same leading member axis M",
                     f"leading sizes {sorted(str(s) for s in sizes)}")
    return int(sizes.pop())


def init_params(model: nn.Module, seeds: Any, image_shape: tuple[int, int],
                dtype: Any = jnp.float32) -> Any:
    """Parameters of one member per seed, stacked on a leading axis ``(M, ...)``.

    Member ``m`` is ``model.init(jax.random.key(seeds[m]), zeros((1, H, W)))`` — the same as
    :func:`cfjax.predictors.train` initialises it.

    Example:
      >>> from cfjax.predictors import EffusionCNN
      >>> p = init_params(EffusionCNN(features=(4,)), [0, 1], (16, 16))
      >>> ensemble_size(p)
      2
    """
    seeds = _check_seeds(seeds)
    if (not isinstance(image_shape, tuple) or len(image_shape) != 2
            or not all(isinstance(s, (int, np.integer)) and s >= 1 for s in image_shape)):
        _checks.fail("image_shape", "a tuple (H, W) of positive integers", repr(image_shape))
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))
    return _init(model, keys, tuple(int(s) for s in image_shape), jnp.dtype(dtype))


def default_member_chunk(m: int) -> int:
    """Members run side by side (``vmap``) by default: all of them, except on CPU, where one
    at a time (still one compiled program) is faster. Measured with jax 0.10.2 on 2 CPU cores
    (M = 4, batch 32, 32×32 images): with :class:`~cfjax.predictors.EffusionCNN`'s default
    matrix-product convolutions the ``vmap``ped members take ~1.2–1.6× longer per member-step
    than one after another (XLA's CPU batched matrix products are slower than separate ones);
    with XLA's native convolutions, ``vmap`` makes them grouped convolutions, ~3× slower."""
    return 1 if jax.default_backend() == "cpu" else m


def check_member_chunk(member_chunk: Any) -> int | None:
    if member_chunk is None:
        return None
    return _checks.check_positive_int("member_chunk", member_chunk)


def map_members(fn: Any, xs: Any, member_chunk: int | None = None) -> Any:
    """``fn`` over the leading member axis of the pytree ``xs``: ``vmap`` over groups of
    ``member_chunk`` members, ``lax.map`` (a loop inside the compiled program) over the groups.
    ``member_chunk >= M`` is one ``vmap``; ``None`` is :func:`default_member_chunk`. A member's
    result does not depend on the grouping (up to float rounding).

    Example:
      >>> map_members(lambda x: x * 2, jnp.arange(5.0), member_chunk=2).tolist()
      [0.0, 2.0, 4.0, 6.0, 8.0]
    """
    m = ensemble_size(xs)
    chunk = default_member_chunk(m) if member_chunk is None else member_chunk
    if chunk >= m:
        return jax.vmap(fn)(xs)
    if chunk == 1:
        return lax.map(fn, xs)
    return lax.map(fn, xs, batch_size=chunk)


def _check_seeds(seeds: Any) -> np.ndarray:
    s = np.asarray(seeds)
    if s.ndim != 1 or s.size == 0 or not np.issubdtype(s.dtype, np.integer) or (s < 0).any():
        _checks.fail("seeds", "a non-empty 1-d sequence of non-negative integers", repr(seeds))
    return s


def member_devices(devices: Any) -> Mesh | jax.Device | None:
    """Where the members run, from a ``devices=`` argument of :func:`predict` or
    :func:`~cfjax.predictors.train`.

    ``None`` means every device of ``jax.local_devices()`` (the default backend); an explicit
    non-empty sequence of distinct devices of one platform, or a ``jax.sharding.Mesh`` with one
    axis, names them. Returns a one-axis ``Mesh`` over two or more devices (the member axis is
    sharded over its axis), a single ``jax.Device`` (everything runs there), or ``None``
    (``devices=None`` with one local device: the default placement, no sharding).

    Example:
      >>> member_devices([jax.devices()[0]]) == jax.devices()[0]
      True
    """
    if devices is None:
        local = jax.local_devices()
        return Mesh(np.asarray(local), ("members",)) if len(local) > 1 else None
    if isinstance(devices, Mesh):
        if devices.devices.ndim != 1:
            _checks.fail("devices", "a jax.sharding.Mesh with one axis (members)",
                         f"a mesh with axes {tuple(devices.axis_names)}")
        devs = list(devices.devices.flat)
    elif isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence):
        _checks.fail("devices", "None, a sequence of jax devices or a one-axis jax.sharding.Mesh",
                     repr(devices))
    else:
        devs = list(devices)
        if not devs:
            _checks.fail("devices", "at least one device", "an empty sequence")
        bad = [d for d in devs if not isinstance(d, jax.Device)]
        if bad:
            _checks.fail("devices", "jax devices (e.g. from jax.devices())", f"{bad[0]!r}")
        if len(set(devs)) != len(devs):
            _checks.fail("devices", "distinct devices", f"repeated devices in {devs}")
        if len({d.platform for d in devs}) != 1:
            _checks.fail("devices", "devices of one platform",
                         f"platforms {sorted({d.platform for d in devs})}")
    if len(devs) == 1:
        return devs[0]
    return devices if isinstance(devices, Mesh) else Mesh(np.asarray(devs), ("members",))


def pad_members(tree: Any, pad: int, axis: int = 0, fill: Any = None) -> Any:
    """Every leaf of ``tree`` with ``pad`` more members on ``axis``: copies of the last member,
    or ``fill`` (a scalar) when given."""
    if not pad:
        return tree

    def one(a):
        a = jnp.asarray(a)
        last = lax.slice_in_dim(a, a.shape[axis] - 1, a.shape[axis], axis=axis)
        extra = jnp.repeat(last, pad, axis=axis)
        if fill is not None:
            extra = jnp.full_like(extra, fill)
        return jnp.concatenate([a, extra], axis=axis)

    return jax.tree.map(one, tree)


def gather(tree: Any, mesh: Mesh, m: int, axis: int = 0) -> Any:
    """Every leaf of ``tree``, its members sharded over ``mesh``, gathered onto the mesh's first
    device and cut to its first ``m`` members on ``axis`` (padding removed)."""
    tree = jax.device_put(tree, mesh.devices.flat[0])
    return jax.tree.map(lambda a: a if a.shape[axis] == m else lax.slice_in_dim(a, 0, m, axis=axis), tree)


@functools.partial(jax.jit, static_argnums=(0, 2, 3))
def _init(model, keys, image_shape, dtype):
    def one(key):
        return model.init(jax.random.split(key)[0], jnp.zeros((1,) + image_shape, dtype))
    return jax.vmap(one)(keys)


def predict(model: nn.Module, params: Any, images: Any, *, chunk: int = 256,
            logits: bool = False, member_chunk: int | None = None,
            devices: Sequence[jax.Device] | Mesh | None = None, shard: str = "members") -> jax.Array:
    """Every member's effusion probability (or logit) for every image.

    Args:
      model: the network (e.g. :class:`~cfjax.predictors.EffusionCNN`).
      params: member parameters with a leading axis ``(M, ...)`` (``state.best_params`` of
        :func:`~cfjax.predictors.train`, or :func:`init_params`).
      images: factual images ``(N, H, W)`` or counterfactual images ``(K, N, H, W)`` (as
        ``ChestSCM.counterfactuals(...)["image"]``), values in [0, 1].
      chunk: most images per compiled step. The images are cut into ``ceil(K·N / chunk)``
        equal chunks (the last padded with fewer copies than there are chunks) and every
        member runs on one chunk at a time (``lax.map``), so memory beyond
        the inputs and outputs is that of ``member_chunk × chunk`` images whatever N and K; a
        unit's output does not depend on the chunk size.
      logits: return logits instead of probabilities.
      member_chunk: members run side by side (see :func:`map_members`; default: all of them,
        one at a time on CPU) — on each device when they are spread over several.
      devices: the devices to spread the members over (``jax.shard_map`` over a one-axis mesh:
        each device runs its share of the members on every image). ``None``: every local
        device of the default backend when there are several (on CPU, several exist only if
        XLA was asked for them before JAX started, e.g.
        ``XLA_FLAGS=--xla_force_host_platform_device_count=2``), otherwise the default
        device as usual. Or a sequence of devices, or a ``jax.sharding.Mesh`` with one axis.
        M is padded to a multiple of the device count (copies of the last member); the result,
        gathered onto the first of the devices with the padding removed, equals the
        one-device call's.
      shard: what is spread over several ``devices``: ``"members"`` (the default, above) or
        ``"units"``: the images (the K × N images flattened into one axis) are split over the
        devices, padded to a multiple of the device count (copies of the last image), every
        device running every member on its block of images, ``chunk`` at a time (the
        parameters replicated); the ``(M, K·N)`` result is gathered onto the first of the
        devices with the padding removed and equals the one-device call's (up to float
        rounding). Spreading the units suits many images and few members; spreading the
        members, the ensembles whose members outnumber the devices.

    Returns:
      ``(M, N)`` for factual images, ``(M, K, N)`` for counterfactual ones: member first,
      intervention next, unit last. ``cfjax.metrics.evaluate`` takes one predictor's
      counterfactual predictions as ``(n, K)``: :func:`to_metrics_layout` gives ``(M, N, K)``.

    Example:
      >>> from cfjax.predictors import EffusionCNN
      >>> model = EffusionCNN(features=(4,))
      >>> p = init_params(model, [0, 1, 2], (16, 16))
      >>> predict(model, p, jnp.zeros((5, 16, 16)), chunk=4).shape
      (3, 5)
      >>> predict(model, p, jnp.zeros((2, 5, 16, 16))).shape
      (3, 2, 5)
      >>> predict(model, p, jnp.zeros((5, 16, 16)), devices=jax.devices()[:1]).shape
      (3, 5)
      >>> predict(model, p, jnp.zeros((2, 5, 16, 16)), devices=jax.devices()[:1], shard="units").shape
      (3, 2, 5)
    """
    ensemble_size(params)
    shape = _checks.shape_of(images)
    if len(shape) not in (3, 4):
        _checks.fail("images", "images (N, H, W) or counterfactual images (K, N, H, W)", f"shape {shape}")
    _checks.check_nonempty("images", images)
    chunk = _checks.check_positive_int("chunk", chunk)
    if not isinstance(logits, bool):
        _checks.fail("logits", "a bool", repr(logits))
    member_chunk = check_member_chunk(member_chunk)
    if not isinstance(shard, str) or shard not in SHARD_MODES:
        _checks.fail("shard", f"one of {list(SHARD_MODES)}", repr(shard))
    x = jnp.asarray(images)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        _checks.fail("images", "floating-point images in [0, 1]", f"dtype {x.dtype}")
    _checks.check_finite("images", x)
    where = member_devices(devices)
    lead = shape[:-2]
    flat = x.reshape((-1,) + shape[-2:])
    chunk = min(chunk, flat.shape[0])
    if isinstance(where, Mesh) and shard == "units":
        n = flat.shape[0]
        chunk = min(chunk, -(-n // where.size))
        params = jax.device_put(params, NamedSharding(where, PartitionSpec()))
        flat = _dist.shard(_dist.pad_axis(flat, where.size), where)
        out = gather(_predict_units(model, where, params, flat, chunk, member_chunk), where, n, axis=1)
    elif isinstance(where, Mesh):
        m = ensemble_size(params)
        pad = (-m) % where.size
        axis = where.axis_names[0]
        params = jax.device_put(pad_members(params, pad), NamedSharding(where, PartitionSpec(axis)))
        flat = jax.device_put(flat, NamedSharding(where, PartitionSpec()))
        out = gather(_predict_sharded(model, where, params, flat, chunk, member_chunk), where, m)
    else:
        if where is not None:
            params, flat = jax.device_put((params, flat), where)
        out = _predict(model, params, flat, chunk, member_chunk)
    if not logits:
        out = jax.nn.sigmoid(out)
    return out.reshape((out.shape[0],) + lead)


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def _predict(model, params, images, chunk, member_chunk):
    return chunked_logits(model, params, images, chunk, member_chunk)


@functools.partial(jax.jit, static_argnums=(0, 1, 4, 5))
def _predict_sharded(model, mesh, params, images, chunk, member_chunk):
    """:func:`_predict` with the members of ``params`` sharded over ``mesh``'s axis; the images
    replicated."""
    axis = PartitionSpec(mesh.axis_names[0])
    local = functools.partial(chunked_logits, model, chunk=chunk, member_chunk=member_chunk)
    return jax.shard_map(local, mesh=mesh, in_specs=(axis, PartitionSpec()), out_specs=axis)(params, images)


@functools.partial(jax.jit, static_argnums=(0, 1, 4, 5))
def _predict_units(model, mesh, params, images, chunk, member_chunk):
    """:func:`_predict` with the images sharded over ``mesh``'s axis; the parameters
    replicated."""
    axis = mesh.axis_names[0]
    local = functools.partial(chunked_logits, model, chunk=chunk, member_chunk=member_chunk)
    return jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec(axis)),
                         out_specs=PartitionSpec(None, axis))(params, images)


def chunked_logits(model: nn.Module, params: Any, images: jax.Array, chunk: int,
                   member_chunk: int | None = None) -> jax.Array:
    """Traced core of :func:`predict`: ``(M, N)`` logits of ``images (N, H, W)``: for each
    member (:func:`map_members`), ``lax.map`` over ``ceil(N / chunk)`` equal chunks of at most
    ``chunk`` images (the last padded with copies of the final image, fewer than one per chunk:
    N = 300 at ``chunk`` 256 is two chunks of 150, not 512 images)."""
    n = images.shape[0]
    blocks_n = -(-n // chunk)
    chunk = -(-n // blocks_n)
    pad = blocks_n * chunk - n
    if pad:
        images = jnp.concatenate([images, jnp.broadcast_to(images[-1:], (pad,) + images.shape[1:])])
    blocks = images.reshape((-1, chunk) + images.shape[1:])

    def one_member(p):
        return lax.map(lambda b: model.apply(p, b), blocks).reshape(-1)[:n]

    return map_members(one_member, params, member_chunk)


def to_metrics_layout(p_cf: Any) -> jax.Array:
    """Counterfactual predictions ``(M, K, N)`` of :func:`predict` as ``(M, N, K)``: row ``m``
    is predictor ``m``'s ``p_cf`` for :func:`cfjax.metrics.evaluate`.

    Example:
      >>> to_metrics_layout(jnp.zeros((3, 16, 10))).shape
      (3, 10, 16)
    """
    _checks.check_ndim("p_cf", p_cf, 3, "of counterfactual predictions (M, K, N)")
    return jnp.swapaxes(jnp.asarray(p_cf), 1, 2)
