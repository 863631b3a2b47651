"""Counterfactuals of an SCM by abduction–action–prediction: one function for one unit (its
noise abducted once, its K interventions predicted), vmapped over the units, so that the
result is ``{node: (N, K, *E)}``; split over devices and chunked by
:func:`cfjax.distributed.map_batch`."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from cfjax import _checks
from cfjax import distributed as _dist
from cfjax._core.keys import as_key
from cfjax.scm import _validate as V
from cfjax.scm.interventions import Shift
from cfjax.typing import KeyLike, MeshLike, PyTree

__all__ = ["abduct", "counterfactual", "counterfactual_chunks", "interventional_samples"]

Data = Mapping[str, Any]


def _split(scm, groups: tuple[dict[str, Any], ...]) -> tuple[tuple[dict, ...], tuple[dict, ...]]:
    """Each group's values split into those given per unit ``(N, K, *E)`` (split with the
    units) and those common to every unit ``(K, *E)`` (passed whole)."""
    unit = tuple({v: x for v, x in g.items() if V.per_unit(scm, v, x)} for g in groups)
    common = tuple({v: x for v, x in g.items() if not V.per_unit(scm, v, x)} for g in groups)
    return unit, common


def predict_interventions(
    scm,
    params: PyTree,
    noise: Mapping[str, Any],
    groups: tuple[dict[str, Any], ...],
    observed: Mapping[str, jax.Array] | None = None,
) -> dict[str, jax.Array]:
    """One unit's values under each of K interventions, ``{node: (K, *E)}``: every group's
    ``{node: (K_g, *E)}`` values predicted from the unit's noise (vmapped over K_g), the
    groups concatenated along K."""
    over_k = jax.vmap(scm.predict_unit, in_axes=(None, None, 0, None))
    outs = [over_k(params, noise, do, observed) for do in groups]
    if len(outs) == 1:
        return outs[0]
    return {v: jnp.concatenate([o[v] for o in outs]) for v in scm.nodes}


@dataclasses.dataclass(frozen=True)
class _Batch:
    """Counterfactuals of a batch of units, ``(units, params, common) -> (out, ok)``: hashable,
    so that :func:`cfjax.distributed.map_batch` compiles it once per model and shapes.

    ``units = (raw, keys, given, unit_groups)`` holds what has a unit axis (the observed
    values, each unit's abduction key or None, the noise given, the per-unit intervention
    values); ``common`` the values common to every unit. ``out`` is ``{node: (B, K, *E)}``,
    ``ok`` ``(B,)``: whether each unit's values (and the common ones) lie in their supports.
    """

    scm: Any

    def __call__(self, units, params, common):
        scm = self.scm
        raw, keys, given, unit_groups = units
        common_ok = [
            scm.mechanism(v).values_ok(x)
            for g in common
            for v, x in g.items()
            if v in scm.nodes and not isinstance(x, Shift)
        ]
        common = tuple(
            {
                v: x
                if isinstance(x, Shift) or v not in scm.nodes
                else jnp.asarray(x).astype(V.dtype(scm.mechanism(v)))
                for v, x in g.items()
            }
            for g in common
        )

        def one(raw, key, given, unit_groups):
            x = V.cast_data(scm, raw)
            checks = [m.values_ok(raw[v]) for v, m in zip(scm.nodes, scm.mechanisms)]
            groups = []
            for u, c in zip(unit_groups, common):
                group = {}
                for v, values in {**c, **u}.items():
                    if v not in scm.nodes:  # the null intervention's placeholder
                        group[v] = values
                        continue
                    if isinstance(values, Shift):
                        values = values.resolve(x[v])
                    elif (
                        v in u
                    ):  # given values are checked as given (a class 1.5 must not pass as 1)
                        checks.append(scm.mechanism(v).values_ok(values))
                    values = jnp.asarray(values).astype(V.dtype(scm.mechanism(v)))
                    if isinstance(c.get(v, u.get(v)), Shift):
                        checks.append(scm.mechanism(v).values_ok(values))  # shifts once resolved
                    group[v] = values
                groups.append(group)
            given = given or {}
            if all(v in given for v in scm.nodes):
                noise = dict(given)
            else:
                noise = scm.abduct_unit(params, x, key, given)
            out = predict_interventions(scm, params, noise, tuple(groups), x)
            return out, jnp.all(jnp.stack(checks))

        key_axis = None if keys is None else 0
        out, ok = jax.vmap(one, in_axes=(0, key_axis, 0, 0))(raw, keys, given, unit_groups)
        if common_ok:
            ok = ok & jnp.all(jnp.stack(common_ok))
        return out, ok


def _prepare(scm, data: Data, interventions: Any, key: KeyLike | None, noise: Data | None):
    """Structure checks on the host (values are checked inside the compiled program, in the
    same pass that reads them); returns ``(units, common, n)``."""
    raw = V.data(scm, data, "data", check=False)
    n = V.n_units(raw)
    given = None if noise is None else V.noise(scm, noise, n, convert=False)
    groups = V.intervention_groups(scm, interventions, n, check=False)
    V.check_key(scm, key, given)
    keys = None if key is None else jax.random.split(as_key(key), n)
    unit_groups, common = _split(scm, groups)
    return (raw, keys, given, unit_groups), common, n


def counterfactual(
    scm,
    params: PyTree,
    data: Data,
    interventions: Any,
    *,
    key: KeyLike | None = None,
    noise: Data | None = None,
    chunk_size: int | None = None,
    mesh: MeshLike = None,
) -> dict[str, jax.Array]:
    """:meth:`cfjax.scm.SCM.counterfactual`."""
    where = _dist.as_mesh(mesh)
    if chunk_size is not None:
        chunk_size = _checks.check_positive_int("chunk_size", chunk_size)
    units, common, n = _prepare(scm, data, interventions, key, noise)
    # chunked: N padded to its shape bucket (one program for every N of a bucket)
    out, ok = _dist.map_batch(
        _Batch(scm),
        units,
        shared=(params, common),
        mesh=where,
        chunk_size=chunk_size,
        buckets=chunk_size is not None,
    )
    if (
        _checks.is_concrete(ok) and not np.asarray(ok).all()
    ):  # (N,) flags: read on the host, no dispatch
        V.raise_value_error(scm, data, interventions, n)
    return out


def counterfactual_chunks(
    scm,
    params: PyTree,
    data: Data,
    interventions: Any,
    *,
    chunk_size: int,
    key: KeyLike | None = None,
    noise: Data | None = None,
    mesh: MeshLike = None,
) -> Iterator[tuple[int, int, dict[str, jax.Array]]]:
    """:meth:`cfjax.scm.SCM.counterfactual_chunks` (inputs validated before the first chunk)."""
    chunk_size = _checks.check_positive_int("chunk_size", chunk_size)
    where = _dist.as_mesh(mesh)
    units, common, n = _prepare(scm, data, interventions, key, noise)
    return _chunks(scm, params, units, common, n, chunk_size, (data, interventions), where)


def _chunks(scm, params, units, common, n, b, originals, where):
    size = min(
        b, _dist.bucket(n, b)
    )  # a chunk larger than the data: the data, padded to its bucket
    b = min(b, n)
    batch = _Batch(scm)
    for start in range(0, n, b):
        stop = min(start + b, n)
        idx = np.minimum(np.arange(start, start + size), stop - 1)  # pad: repeat the last unit
        chunk = jax.tree.map(functools.partial(V.take, idx=idx), units)
        out, ok = _dist.map_batch(batch, chunk, shared=(params, common), mesh=where)
        if not np.asarray(ok).all():
            V.raise_value_error(scm, *originals, n)
        if stop - start < size:
            out = {v: x[: stop - start] for v, x in out.items()}
        yield start, stop, out


@functools.partial(jax.jit, static_argnums=0)
def _abduct(scm, params, data, keys, given=None):
    key_axis = None if keys is None else 0
    return jax.vmap(scm.abduct_unit, in_axes=(None, 0, key_axis, 0))(
        params, data, keys, given or {}
    )


def abduct(scm, params: PyTree, data: Data, *, key: KeyLike | None = None) -> dict[str, Any]:
    """:meth:`cfjax.scm.SCM.abduct`."""
    data = V.data(scm, data, "data")
    V.check_key(scm, key)
    keys = None if key is None else jax.random.split(as_key(key), V.n_units(data))
    return _abduct(scm, params, data, keys)


@functools.partial(jax.jit, static_argnums=0)
def _interventional(scm, params, keys, unit_groups, common):
    def one(key, unit_groups):
        noise = scm.sample_noise_unit(key)
        return predict_interventions(
            scm, params, noise, tuple({**c, **u} for u, c in zip(unit_groups, common))
        )

    return jax.vmap(one)(keys, unit_groups)


def interventional_samples(
    scm, params: PyTree, n: int, interventions: Any, *, key: KeyLike
) -> dict[str, jax.Array]:
    """:meth:`cfjax.scm.SCM.interventional_samples`."""
    n = _checks.check_positive_int("n", n)
    groups = V.intervention_groups(scm, interventions, n)
    unit_groups, common = _split(scm, groups)
    return _interventional(scm, params, jax.random.split(as_key(key), n), unit_groups, common)
