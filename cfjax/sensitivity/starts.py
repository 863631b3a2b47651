"""Where the search's restarts start: screened points on the boundary of the usable set.

The objective has several local maxima, on the boundary of the usable set, so before the ascent
candidate starts on that boundary (:mod:`cfjax.sensitivity.projection`: sign corners pulled onto
the margin, the margin's corners, random rays from I and along the budget's edge faces) are
screened by their full-data CFU, and each budget's restarts start from the best distinct ones
(the rest from the paper's random initialisation, or near the best ones again). The budgets are
split over devices by :func:`cfjax.distributed.map_batch`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from cfjax import distributed
from cfjax.sensitivity.cfu import cfu_of
from cfjax.sensitivity.correlation import correlation_margin
from cfjax.sensitivity.linear import fit_model_b
from cfjax.sensitivity.parameterisation import _init_L
from cfjax.sensitivity.problem import FairModel
from cfjax.sensitivity.projection import _face_ray, _faces, _margin_vertices, _on_boundary
from cfjax.sensitivity.search_config import _Config, _options

_DISTINCT = 0.1  # restarts' starts differ by more than this fraction of p_max in some entry


def _directions(cfg: _Config, key: jax.Array, dtype) -> tuple[jax.Array | None, jax.Array | None]:
    """The screened candidates' directions ``(k, m, m)``: the sign patterns, and random symmetric
    directions with zero diagonal and off-diagonals uniform in [−1, 1] (None where none)."""
    m = cfg.shape[0]
    signs = jnp.asarray(np.asarray(cfg.corners).reshape(-1, m, m), dtype) if cfg.corners else None
    if not cfg.boundary_starts:
        return signs, None
    U = jnp.triu(jax.random.uniform(key, (cfg.boundary_starts, m, m), dtype, -1.0, 1.0), 1)
    return signs, U + jnp.swapaxes(U, 1, 2)


def _initial_L(cfg: _Config, model: FairModel, budgets: jax.Array, count: int, restarts: int, key: jax.Array,
               mesh: Mesh | None) -> jax.Array:
    """Every budget's restarts' starting L, ``(B', R', ...)`` for ``budgets (B',)`` padded to
    their slots (the first ``count`` in use) and ``R' = cfg.restart_slots`` (the first
    ``restarts`` in use): the best distinct screened boundary points (when screening), then the
    paper's random initialisation; the budgets split over the devices of ``mesh``
    (:func:`cfjax.distributed.map_batch`; with ``warm_start`` only the first budget's, on one
    device). The counts are data: a new count within the slots compiles nothing.

    Also returns the CFU at zero correlation (P = I, the curve's floor), evaluated among the
    screened points so that it costs no program of its own; NaN when nothing is screened."""
    restarts = jnp.asarray(restarts, jnp.int32)
    if cfg.warm_start:  # only the first budget starts afresh
        first, zero = distributed.map_batch(_Starts(cfg), budgets[:1], jnp.ones((1,), bool),
                                            shared=(model, key, restarts), compiler_options=_options(None))
        return jnp.broadcast_to(first[0], (budgets.shape[0],) + first.shape[1:]), zero[0]
    used = jnp.arange(budgets.shape[0]) < count
    inits, zero = distributed.map_batch(_Starts(cfg), budgets, used, shared=(model, key, restarts), mesh=mesh,
                                        compiler_options=_options(mesh))
    return inits, zero[0]  # the first budget is always in use


@dataclasses.dataclass(frozen=True)
class _Starts:
    """:func:`_starts` for a block of budgets, hashable by its settings (the compiled program
    of :func:`cfjax.distributed.map_batch` is cached on it)."""

    cfg: Any

    def __call__(self, budgets: jax.Array, used: jax.Array, model: FairModel, key: jax.Array,
                 restarts: jax.Array) -> jax.Array:
        return _starts(self.cfg, model, key, budgets, used, restarts)


def _starts(cfg: _Config, model: FairModel, key: jax.Array, budgets: jax.Array, used: jax.Array,
            restarts: jax.Array) -> jax.Array:
    """:func:`_initial_L` for ``budgets``, one budget after another (the slots not ``used``
    skipped: their starts are the random ones); ``restarts`` of the ``cfg.restart_slots``
    in use. Returns the starts ``(B, R', ...)`` and each budget's CFU at P = I ``(B,)``
    (NaN where nothing was screened)."""
    dtype = budgets.dtype
    mask = np.asarray(cfg.mask)
    keys = jax.random.split(key, cfg.restart_slots)  # key i is the same whatever the count
    random_inits = jax.vmap(lambda k: _init_L(jax.random.fold_in(k, 0), cfg.shape, mask, cfg.init_scale, dtype))(keys)
    signs, rays = _directions(cfg, jax.random.fold_in(key, 2), dtype)

    def full_cfu(P):
        return cfu_of(model, fit_model_b(model.design, P, model.lam, newton_steps=30))

    def usable(P):
        return correlation_margin(P, cfg.min_eig) >= 0

    def candidates(p):
        """Points on the boundary ``(k, m, m)`` and whether each is usable ``(k,)``: the sign
        corners (pulled onto the margin), the margin's corners, random rays from I and along
        the budget's edge faces (the faces in turn)."""
        Ps, oks = [], []
        for D in (signs, rays):
            if D is not None:
                Ps.append(jax.vmap(lambda D: _on_boundary(D, p, cfg.min_eig))(D))
                oks.append(jax.vmap(usable)(Ps[-1]))
        if rays is not None and cfg.shape[0] > 1:
            E, sign = (np.take(a, np.arange(rays.shape[0]) % a.shape[0], axis=0) for a in _faces(cfg.shape[0]))
            P, ok = jax.vmap(lambda D, E, s: _face_ray(D, E, s, p, cfg.min_eig))(
                rays, jnp.asarray(E, dtype), jnp.asarray(sign, dtype))
            Ps.append(P)
            oks.append(ok & jax.vmap(usable)(P))
        if cfg.margin_corners:
            S0, E = (jnp.asarray(np.asarray(a), dtype) for a in zip(*cfg.margin_corners))
            lower, upper, ok = jax.vmap(lambda S, E: _margin_vertices(S, E, p, cfg.min_eig))(S0, E)
            Ps, oks = Ps + [lower, upper], oks + [ok & jax.vmap(usable)(lower), ok & jax.vmap(usable)(upper)]
        return jnp.concatenate(Ps), jnp.concatenate(oks)

    def inits_for(p):
        """The restarts' starting L for budget p: the best distinct boundary points, then random."""
        Ps, ok = candidates(p)  # (k, m, m), (k,)
        eye = jnp.eye(Ps.shape[1], dtype=dtype)
        # Candidates one after another (nested vmaps of full-data CFU stalled XLA:CPU on large
        # data), and P = I after them: the floor, reported beside the curve, never a start.
        values = jax.lax.map(lambda a: jnp.where(a[1], full_cfu(jnp.where(a[1], a[0], eye)), -jnp.inf),
                             (jnp.concatenate([Ps, eye[None]]), jnp.append(ok, True)))
        zero, values = values[-1], values[:-1]
        values = jnp.where(jnp.isfinite(values), values, -jnp.inf)
        def pick(left, _):
            # The best candidate left; then drop every candidate within 0.1 p_max of it.
            i = jnp.argmax(left)
            found = jnp.isfinite(left[i])
            near = jnp.max(jnp.abs(Ps - Ps[i][None]), axis=(1, 2)) <= _DISTINCT * p
            return jnp.where(near, -jnp.inf, left), (i, found)

        _, (chosen, found) = jax.lax.scan(pick, values, None, length=cfg.restart_slots)
        # Fewer distinct candidates than restarts: the rest start near the best ones again (the
        # paper's random spread added to their L), so that the best two restarts can agree.
        in_use = jnp.arange(cfg.restart_slots) < restarts
        n = jnp.maximum(jnp.sum(found & in_use), 1)  # found is a prefix: picks go best first
        again = chosen[jnp.arange(cfg.restart_slots) % n]
        spread = random_inits - jnp.where(mask, jnp.eye(*cfg.shape, dtype=dtype), 0)[None]
        L = jax.vmap(lambda P: cfg.P_fn.seed(P, p))(Ps[again]) + jnp.where(found[:, None, None], 0.0, spread)
        take = jnp.isfinite(values[again]) & jax.vmap(lambda L: usable(cfg.P_fn(L, p)))(L) & jnp.all(
            jnp.isfinite(L), axis=(1, 2))
        return jnp.where(take[:, None, None], L, random_inits), zero

    nothing = (random_inits, jnp.asarray(jnp.nan, dtype))
    if signs is None and rays is None and not cfg.margin_corners:
        return jax.tree.map(lambda a: jnp.broadcast_to(a, budgets.shape + a.shape), nothing)
    return jax.lax.map(lambda a: jax.lax.cond(a[1], inits_for, lambda _: nothing, a[0]), (budgets, used))


