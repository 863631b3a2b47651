"""Every ensemble member on factual and counterfactual images, in one jitted call with memory
bounded by a fixed chunk of images, the members or the images optionally spread over several
devices (:func:`cfjax.distributed.map_batch`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec
from jax.typing import DTypeLike

from cfjax import _checks
from cfjax import distributed as _dist
from cfjax._core.keys import as_key
from cfjax.platform import default_member_chunk
from cfjax.typing import Array, ArrayLike, KeyLike, Mesh, MeshLike, PyTree

__all__ = ["predict", "init_params", "member_keys", "ensemble_size", "map_members", "SHARD_MODES"]

#: what :func:`predict` spreads over several devices
SHARD_MODES = ("members", "units")


def ensemble_size(params: PyTree) -> int:
    """M, the leading (member) axis shared by every leaf of ``params``."""
    leaves = jax.tree.leaves(params)
    if not leaves:
        _checks.fail("params", "a parameter pytree with a leading member axis", "an empty pytree")
    sizes: set[int | None] = {np.shape(a)[0] if np.ndim(a) else None for a in leaves}
    if len(sizes) != 1 or None in sizes:
        _checks.fail(
            "params",
            "every leaf with the same leading member axis M",
            f"leading sizes {sorted(str(s) for s in sizes)}",
        )
    size = sizes.pop()
    assert size is not None  # checked above
    return int(size)


def member_keys(
    members: int | None = None, *, key: KeyLike | None = None, seeds: npt.ArrayLike | None = None
) -> jax.Array:
    """The ``(M,)`` typed keys of M members: ``jax.random.split(key, members)``, or
    ``jax.random.key(seeds[m])`` for explicit per-member seeds (exactly one of ``key`` and
    ``seeds``; ``members``, when given with ``seeds``, must equal their number).

    Per-member seeds exist for paper 000's family (:func:`cfjax.study.paper_family`):
    its predictors are compared seed by seed, and the members of one seed — the basic
    classifier and each biased one — start from the same weights and draw their minibatches
    from the same stream, differing only by their training masks; a member is also reproduced
    alone (an ensemble of one) from its seed.

    Example:
      >>> member_keys(3, key=0).shape
      (3,)
      >>> bool(jnp.all(jax.random.key_data(member_keys(seeds=[5])[0]) == jax.random.key_data(jax.random.key(5))))
      True
    """
    if (key is None) == (seeds is None):
        _checks.fail(
            "key",
            "a PRNG key or an int seed (or per-member `seeds` instead)",
            "both" if key is not None else "neither",
        )
    if seeds is not None:
        s = np.asarray(seeds)
        if s.ndim != 1 or s.size == 0 or not np.issubdtype(s.dtype, np.integer) or (s < 0).any():
            _checks.fail("seeds", "a non-empty 1-d sequence of non-negative integers", repr(seeds))
        if members is not None and members != len(s):
            _checks.fail("seeds", f"{members} seeds, one per member", f"{len(s)}")
        return jax.vmap(jax.random.key)(jnp.asarray(s, jnp.uint32))
    members = _checks.check_positive_int("members", members)
    assert key is not None  # exactly one of key and seeds: checked above
    return jax.random.split(as_key(key), members)


def _check_image_shape(image_shape: tuple[int, int]) -> tuple[int, int]:
    if (
        not isinstance(image_shape, tuple)
        or len(image_shape) != 2
        or not all(isinstance(s, (int, np.integer)) and s >= 1 for s in image_shape)
    ):
        _checks.fail("image_shape", "a tuple (H, W) of positive integers", repr(image_shape))
    h, w = image_shape
    return int(h), int(w)


def init_params(
    model: nn.Module,
    image_shape: tuple[int, int],
    dtype: DTypeLike = jnp.float32,
    *,
    key: KeyLike | None = None,
    members: int | None = None,
    seeds: npt.ArrayLike | None = None,
) -> PyTree:
    """Parameters of M members stacked on a leading axis ``(M, ...)``.

    Member ``m`` is ``model.init`` from the first half of its key split in two
    (:func:`member_keys`: ``split(key, members)[m]``, or ``jax.random.key(seeds[m])``) — as
    :func:`cfjax.predictors.train` initialises it.

    Example:
      >>> from cfjax.predictors import EffusionCNN
      >>> p = init_params(EffusionCNN(features=(4,)), (16, 16), key=0, members=2)
      >>> ensemble_size(p)
      2
    """
    keys = member_keys(members, key=key, seeds=seeds)
    return _init(model, keys, _check_image_shape(image_shape), jnp.dtype(dtype))


def check_member_chunk(member_chunk: int | None) -> int | None:
    if member_chunk is None:
        return None
    return _checks.check_positive_int("member_chunk", member_chunk)


def map_members(
    fn: Callable[[PyTree], PyTree], xs: PyTree, member_chunk: int | None = None
) -> PyTree:
    """``fn`` over the leading member axis of the pytree ``xs``: ``vmap`` over groups of
    ``member_chunk`` members, ``lax.map`` (a loop inside the compiled program) over the groups.
    ``member_chunk >= M`` is one ``vmap``; ``None`` is
    :func:`cfjax.platform.default_member_chunk`. A member's result does not depend on the
    grouping (up to float rounding).

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


@functools.partial(jax.jit, static_argnums=(0, 2, 3))
def _init(model: nn.Module, keys: Array, image_shape: tuple[int, int], dtype: DTypeLike) -> PyTree:
    def one(key):
        return model.init(jax.random.split(key)[0], jnp.zeros((1,) + image_shape, dtype))

    return jax.vmap(one)(keys)


@dataclasses.dataclass(frozen=True)
class MemberLogits:
    """``(params (M', ...), images (B, H, W)) -> (M', B)`` logits (:func:`chunked_logits`): what
    :func:`cfjax.distributed.map_batch` runs on each device's members (hashable: compiled once)."""

    model: nn.Module
    chunk: int
    member_chunk: int | None

    def __call__(self, params: PyTree, images: jax.Array) -> jax.Array:
        return chunked_logits(
            self.model, params, images, min(self.chunk, images.shape[0]), self.member_chunk
        )


@dataclasses.dataclass(frozen=True)
class _UnitLogits:
    """``(images (B, H, W), params (M, ...)) -> (B, M)``: every member on a device's block of
    images, units first (the axis :func:`cfjax.distributed.map_batch` splits)."""

    model: nn.Module
    chunk: int
    member_chunk: int | None

    def __call__(self, images: jax.Array, params: PyTree) -> jax.Array:
        return chunked_logits(
            self.model, params, images, min(self.chunk, images.shape[0]), self.member_chunk
        ).T


def predict(
    model: nn.Module,
    params: PyTree,
    images: ArrayLike,
    *,
    chunk: int = 256,
    logits: bool = False,
    member_chunk: int | None = None,
    mesh: MeshLike = None,
    shard: str = "members",
    buckets: bool = True,
) -> jax.Array:
    """Every member's effusion probability (or logit) for every image.

    Args:
      model: the network (e.g. :class:`~cfjax.predictors.EffusionCNN`).
      params: member parameters with a leading axis ``(M, ...)`` (``state.best_params`` of
        :func:`~cfjax.predictors.train`, or :func:`init_params`).
      images: factual images ``(N, H, W)`` or counterfactual images ``(N, K, H, W)`` (unit
        first, as the array contract orders them), values in [0, 1].
      chunk: most images per compiled step. The images (padded to their bucket, see
        ``buckets``: whole chunks) are cut into equal chunks — without buckets
        ``ceil(N·K / chunk)`` of them, the last padded with fewer copies than there are
        chunks — and every member runs on one chunk at a time (``lax.map``), so memory beyond
        the inputs and outputs is that of ``member_chunk × chunk`` images whatever N and K; a
        unit's output does not depend on the chunk size.
      logits: return logits instead of probabilities.
      member_chunk: members run side by side (see :func:`map_members`; default: all of them,
        one at a time on CPU) — on each device when they are spread over several.
      mesh: the devices to spread the work over (:func:`cfjax.distributed.map_batch`): None
        (one device, the default placement), a device count, a sequence of devices or a
        one-axis ``jax.sharding.Mesh``. The result is gathered onto the mesh's first device
        and equals the one-device call's (up to float rounding).
      shard: what is spread over the mesh: ``"members"`` (the default: each device runs its
        share of the members on every image, the images passed whole to every device) or
        ``"units"`` (the N·K images are split over the devices, each running every member on
        its block, the parameters passed whole). Spreading the units suits many images and few
        members; spreading the members, the ensembles whose members outnumber the devices.
      buckets: pad the N·K images to their shape bucket (:func:`cfjax.distributed.bucket`
        with ``chunk``: whole chunks, a power of two of them; fewer than twice the images) by
        repeating the last one, so that a sweep over many N compiles a handful of programs;
        the padding is dropped from the result. False: compile for the exact N·K (no padded
        work: for one large N called many times).

    Returns:
      ``(M, N)`` for factual images, ``(M, N, K)`` for counterfactual ones: row ``m`` is
      member ``m``'s ``p_obs`` or ``p_cf``, the input of :func:`cfjax.metrics.evaluate`.

    Example:
      >>> from cfjax.predictors import EffusionCNN
      >>> model = EffusionCNN(features=(4,))
      >>> p = init_params(model, (16, 16), key=0, members=3)
      >>> predict(model, p, jnp.zeros((5, 16, 16)), chunk=4).shape
      (3, 5)
      >>> predict(model, p, jnp.zeros((5, 2, 16, 16))).shape
      (3, 5, 2)
      >>> predict(model, p, jnp.zeros((5, 2, 16, 16)), mesh=1, shard="units").shape
      (3, 5, 2)
    """
    ensemble_size(params)
    shape = _checks.shape_of(images)
    if len(shape) not in (3, 4):
        _checks.fail(
            "images", "images (N, H, W) or counterfactual images (N, K, H, W)", f"shape {shape}"
        )
    _checks.check_nonempty("images", images)
    chunk = _checks.check_positive_int("chunk", chunk)
    if not isinstance(logits, bool):
        _checks.fail("logits", "a bool", repr(logits))
    member_chunk = check_member_chunk(member_chunk)
    if not isinstance(buckets, bool):
        _checks.fail("buckets", "a bool", repr(buckets))
    if not isinstance(shard, str) or shard not in SHARD_MODES:
        _checks.fail("shard", f"one of {list(SHARD_MODES)}", repr(shard))
    where = _dist.as_mesh(mesh)
    # images on the host stay there until padded (numpy: no program compiled per N)
    x = images if isinstance(images, jax.Array) else np.asarray(images)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        _checks.fail("images", "floating-point images in [0, 1]", f"dtype {x.dtype}")
    if isinstance(x, np.ndarray):
        x = x.astype(jax.dtypes.canonicalize_dtype(x.dtype), copy=False)
    _checks.check_finite("images", x)
    lead = shape[:-2]
    flat = x.reshape((-1,) + shape[-2:])
    count = flat.shape[0]
    if buckets:
        flat = _dist.pad_axis(flat, _dist.bucket(count, chunk))
    chunk = min(chunk, flat.shape[0])
    if where is not None and shard == "units":
        chunk = min(chunk, -(-flat.shape[0] // where.size))
        out = _dist.map_batch(
            _UnitLogits(model, chunk, member_chunk),
            flat,
            shared=(replicate(params, where),),
            mesh=where,
        )
        out = jax.device_put(out, where.devices.flat[0]).T
    else:
        shared = flat if where is None else replicate(flat, where)
        out = _dist.map_batch(
            MemberLogits(model, chunk, member_chunk), params, shared=(shared,), mesh=where
        )
        if where is not None:
            out = jax.device_put(out, where.devices.flat[0])
    if not logits:
        out = jax.nn.sigmoid(out)
    if out.shape[1] != count or len(lead) > 1:  # cut and shaped on the host: no program per N
        device = next(iter(out.devices()))
        out = jax.device_put(np.asarray(out)[:, :count].reshape((out.shape[0],) + lead), device)
    return out


def replicate(tree: PyTree, where: Mesh) -> PyTree:
    """``tree`` whole on every device of the mesh ``where`` (an argument ``map_batch`` passes
    whole, wherever it was)."""
    return jax.device_put(tree, NamedSharding(where, PartitionSpec()))


def chunked_logits(
    model: nn.Module, params: PyTree, images: jax.Array, chunk: int, member_chunk: int | None = None
) -> jax.Array:
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
