"""The marginalisation report for any N: counterfactual predictions in chunks, their units
split over devices, and over the processes of a multi-host run.

The report is a reduction over the interventions, then over the units (the two stages of
``cfjax.metrics._stages``, the ones :func:`~cfjax.metrics.evaluate` runs). The first stage
keeps only sufficient statistics — sums over units of each unit's variance, flip rate,
interventional, worst-case and CVaR losses — and each unit's marginalised score ``p_bar``; so a
chunk's ``(b, K)`` predictions can be dropped once it is reduced. The second stage needs only
``(n,)`` vectors (``p_obs``, ``p_bar``, ``y``): the rank metrics, the calibration bins and the
smooth ECE are computed from them exactly as in :func:`~cfjax.metrics.evaluate`. Memory: one chunk of ``b × K`` predictions on
the devices plus four numbers per unit on the host, whatever K (``4 C`` for C class
probabilities).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax import distributed as dist
from cfjax.metrics import _arrays, _stages
from cfjax.metrics._report_types import MarginalisationReport, MulticlassReport
from cfjax.metrics._stages import UnitSums
from cfjax.typing import ArrayLike, MeshLike

__all__ = ["evaluate_chunks"]

_FIELDS = ("p_obs", "p_cf", "y", "y_cf")


def evaluate_chunks(
    chunks: Iterable[Mapping[str, ArrayLike] | Sequence[ArrayLike]],
    *,
    weights: ArrayLike | None = None,
    tau: ArrayLike = 0.5,
    alphas: Sequence[float] = (0.5, 0.25, 0.1),
    n_bins: int = 15,
    mesh: MeshLike = None,
    across_processes: bool = False,
) -> MarginalisationReport | MulticlassReport:
    """:func:`~cfjax.metrics.evaluate` given chunk by chunk, for any N: binary scores or class
    probabilities.

    Args:
      chunks: an iterable (e.g. a generator that makes counterfactuals and predicts on them
        one chunk at a time) of ``(p_obs, p_cf)``, ``(p_obs, p_cf, y)`` or
        ``(p_obs, p_cf, y, y_cf)`` tuples, or mappings with those keys: ``p_obs (b,)``,
        ``p_cf (b, K)``, ``y (b,)`` in {0, 1}, ``y_cf (b, K)``; or class probabilities
        ``p_obs (b, C)``, ``p_cf (b, K, C)`` with integer labels ``y``, ``y_cf`` in
        ``0..C-1``; the units of the chunks in order. Chunks may differ in length; K, C, the
        dtype and which of ``y``/``y_cf`` are given must not. The first chunk's length, padded
        to its shape bucket (:func:`cfjax.distributed.bucket`: the next power of two, on each
        device), sets the block that is compiled once: shorter chunks are padded, longer ones
        cut; the per-unit vectors of all N units are padded to their bucket for the reductions
        over the units, the padding masked out, so a sweep over many N compiles a handful of
        programs.
      weights, tau, alphas, n_bins: as in ``evaluate``.
      mesh: None (the default device), a device count, a sequence of devices or a one-axis
        ``Mesh``: each block's units split over its devices (:func:`cfjax.distributed.map_batch`).
      across_processes: in a multi-process run (:func:`cfjax.distributed.initialize`), each
        process passes the chunks of its own block of units (:func:`cfjax.distributed.process_block`,
        processes in order); the sums and the per-unit vectors are gathered from every
        process and every process returns the report of all units.

    Returns:
      The :class:`~cfjax.metrics.MarginalisationReport` (or, with ``y_cf``,
      ``CounterfactualLabelReport``; for class probabilities a
      :class:`~cfjax.metrics.MulticlassReport`) of all units, equal to ``evaluate`` on the
      concatenated chunks up to floating-point summation order.

    Example:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> p_cf = rng.uniform(size=(1000, 16)).astype(np.float32)
      >>> y = rng.integers(0, 2, 1000)
      >>> chunks = ((p_cf[i:i + 256, 0], p_cf[i:i + 256], y[i:i + 256]) for i in range(0, 1000, 256))
      >>> r = evaluate_chunks(chunks)
      >>> from cfjax.metrics import evaluate
      >>> full = evaluate(p_cf[:, 0], p_cf, y)
      >>> bool(abs(r.risk_ie - full.risk_ie) < 1e-5), bool(abs(r.spearman - full.spearman) < 1e-6)
      (True, True)
    """
    alphas, n_bins = _stages.check_options(alphas, n_bins, tau)
    mesh = dist.as_mesh(mesh)
    if not isinstance(across_processes, bool):
        _checks.fail("across_processes", "a bool", repr(across_processes))
    devices = 1 if mesh is None else mesh.size
    layout: dict[str, Any] | None = None
    total: UnitSums | None = None
    kept: dict[str, list[np.ndarray]] = {"p_obs": [], "p_bar": [], "y": [], "y_bar": []}
    for index, chunk in enumerate(chunks):
        parts = _prepare(_unpack(chunk, index), index, tau)
        if layout is None:
            layout = _layout(parts, weights, tau, devices)
        _check_consistent(parts, layout, index)
        for start in range(0, parts["p_obs"].shape[0], layout["block"]):
            piece = {
                f: None if v is None else v[start : start + layout["block"]]
                for f, v in parts.items()
            }
            sums, block_vectors = _reduce_block(piece, layout, mesh, alphas)
            total = sums if total is None else total + sums
            for name, v in block_vectors.items():
                kept[name].append(v)
    if layout is None:
        _checks.fail("chunks", "at least one chunk of predictions", "an empty iterable")
    assert total is not None  # summed from the first chunk on
    vectors: dict[str, np.ndarray | None] = {
        name: np.concatenate(parts) if parts else None for name, parts in kept.items()
    }
    if across_processes and jax.process_count() > 1:
        total, vectors = _gather_processes(total, vectors)
    p_obs = vectors["p_obs"]
    assert p_obs is not None  # every chunk has p_obs
    n = p_obs.shape[0]
    size = dist.bucket(
        n
    )  # the reductions over the units: one program per bucket of N, padding masked
    vectors = {name: None if v is None else dist.pad_axis(v, size) for name, v in vectors.items()}
    padded_obs, padded_bar = vectors["p_obs"], vectors["p_bar"]
    assert padded_obs is not None and padded_bar is not None  # every chunk gives both
    return _stages.finish_on_host(
        padded_obs,
        padded_bar,
        vectors["y"],
        vectors["y_bar"],
        total,
        layout["tau"],
        alphas=alphas,
        n_bins=n_bins,
        mask=np.arange(size) < n,
    )


def _unpack(chunk: Any, index: int) -> dict[str, Any]:
    name = f"chunks[{index}]"
    if isinstance(chunk, Mapping):
        unknown = sorted(set(chunk) - set(_FIELDS))
        if unknown or "p_obs" not in chunk or "p_cf" not in chunk:
            _checks.fail(
                name,
                "a mapping with keys p_obs, p_cf and optionally y, y_cf",
                f"keys {sorted(chunk)}",
            )
        return {f: chunk.get(f) for f in _FIELDS}
    if not isinstance(chunk, (tuple, list)) or not 2 <= len(chunk) <= 4:
        _checks.fail(
            name,
            "a tuple (p_obs, p_cf[, y[, y_cf]]) or a mapping with those keys",
            f"{type(chunk).__name__}"
            + (f" of length {len(chunk)}" if isinstance(chunk, (tuple, list)) else ""),
        )
    values = list(chunk) + [None] * (4 - len(chunk))
    return dict(zip(_FIELDS, values))


def _prepare(parts: dict[str, Any], index: int, tau: ArrayLike) -> dict[str, Any]:
    """Validate one chunk's values and shapes (errors name ``chunks[index].<field>``);
    scores of one float dtype."""
    try:
        return _prepare_fields(parts, index, tau)
    except _checks.ValidationError as error:
        message = str(error)
        if message.startswith("`") and not message.startswith(("`chunks", "`tau`")):
            message = f"`chunks[{index}].{message[1:]}"
        raise _checks.ValidationError(message) from None


def _prepare_fields(parts: dict[str, Any], index: int, tau: ArrayLike) -> dict[str, Any]:
    p_obs, p_cf, y, y_cf, _, _ = _stages.prepare(
        parts["p_obs"], parts["p_cf"], parts["y"], parts["y_cf"], None, tau
    )
    return dict(p_obs=p_obs, p_cf=p_cf, y=y, y_cf=y_cf)


def _layout(
    parts: dict[str, Any], weights: ArrayLike | None, tau: ArrayLike, devices: int
) -> dict[str, Any]:
    """What the first chunk fixes: K, dtype, the labels given, the compiled block length."""
    p_obs, k = parts["p_obs"], parts["p_cf"].shape[1]
    b = p_obs.shape[0]
    classes = int(p_obs.shape[1]) if p_obs.ndim == 2 else None
    return dict(
        k=k,
        classes=classes,
        dtype=p_obs.dtype,
        labels=parts["y"] is not None,
        cf_labels=parts["y_cf"] is not None,
        q=_arrays.resolve_weights(weights, k, p_obs.dtype),
        uniform=weights is None,
        tau=jnp.asarray(tau, p_obs.dtype),
        block=dist.bucket(-(-b // devices)) * devices,
    )


def _check_consistent(parts: dict[str, Any], layout: dict[str, Any], index: int) -> None:
    """A chunk's K and fields match the first chunk's; cast in place to its dtype."""
    if parts["p_cf"].shape[1] != layout["k"]:
        _checks.fail(
            f"chunks[{index}].p_cf",
            f"{layout['k']} counterfactuals per unit (K of the first chunk)",
            f"shape {parts['p_cf'].shape}",
        )
    classes = int(parts["p_obs"].shape[1]) if parts["p_obs"].ndim == 2 else None
    if classes != layout["classes"]:
        want = "binary scores (b,)" if layout["classes"] is None else f"{layout['classes']} classes"
        _checks.fail(
            f"chunks[{index}].p_obs",
            f"{want}, as in the first chunk",
            f"shape {parts['p_obs'].shape}",
        )
    for field, first in (("y", layout["labels"]), ("y_cf", layout["cf_labels"])):
        if (parts[field] is not None) != first:
            _checks.fail(
                f"chunks[{index}].{field}",
                f"{'an array' if first else 'None'}, as in the first chunk",
                "an array" if parts[field] is not None else "None",
            )
    dtype = layout["dtype"]
    for field, v in parts.items():
        if v is not None and (layout["classes"] is None or field in ("p_obs", "p_cf")):
            parts[field] = v.astype(dtype)  # class labels stay integers


def _reduce_block(
    piece: dict[str, Any], layout: dict[str, Any], mesh: MeshLike, alphas: tuple[float, ...]
) -> tuple[UnitSums, dict[str, np.ndarray]]:
    """The first stage of one block of at most ``layout["block"]`` units, padded to it (one
    compiled program for every block; ``block`` is a multiple of the devices, so
    :func:`~cfjax.distributed.map_batch` pads nothing more) and the padding masked out of the
    sums."""
    m = piece["p_obs"].shape[0]
    block = layout["block"]
    arrays = {f: v for f, v in piece.items() if v is not None}
    arrays = dist.pad_axis(arrays, block) if m < block else arrays
    p_bar, y_bar, per_unit = dist.map_batch(
        _stages.UnitStage(alphas, layout["uniform"]),
        arrays,
        shared=(layout["q"], layout["tau"]),
        mesh=mesh,
    )
    sums = _masked_sums(per_unit, dist.valid_mask(m, block, layout["dtype"]))
    vectors = {"p_obs": np.asarray(piece["p_obs"]), "p_bar": np.asarray(p_bar)[:m]}
    if piece["y"] is not None:
        vectors["y"] = np.asarray(piece["y"])
    if y_bar is not None:
        vectors["y_bar"] = np.asarray(y_bar)[:m]
    return sums, vectors


_masked_sums = jax.jit(_stages.sum_units)


def _gather_processes(
    total: UnitSums, vectors: dict[str, np.ndarray | None]
) -> tuple[UnitSums, dict[str, np.ndarray | None]]:
    """Every process's sums added and its per-unit vectors concatenated in process order."""
    from jax.experimental import multihost_utils as mh

    total = jax.tree.map(
        lambda a: np.sum(np.asarray(mh.process_allgather(np.asarray(a))), axis=0), total
    )
    p_obs = vectors["p_obs"]
    assert p_obs is not None  # every chunk has p_obs
    rows = np.asarray(mh.process_allgather(np.asarray([p_obs.shape[0]], np.int64))).reshape(-1)
    longest = int(rows.max())
    out: dict[str, np.ndarray | None] = {}
    for name, v in vectors.items():
        if v is None:
            out[name] = None
            continue
        padded = np.zeros((longest,) + v.shape[1:], v.dtype)
        padded[: v.shape[0]] = v
        every = np.asarray(mh.process_allgather(padded)).reshape((len(rows), longest) + v.shape[1:])
        out[name] = np.concatenate([every[p, : rows[p]] for p in range(len(rows))])
    return total, out
