"""Where the search's restarts start: screened points on the boundary of the usable set.

The objective has several local maxima, on the boundary of the usable set, so before the ascent
candidate starts on that boundary (:mod:`cfjax.sensitivity.projection`: sign corners pulled onto
the margin, the margin's corners, random rays from I and along the budget's edge faces) are
screened by their full-data CFU, and each budget's restarts start from the best distinct ones
(the rest from the paper's random initialisation, or near the best ones again).

The candidates depend only on the budgets and the settings, so they are found on the host (numpy)
before any program runs; their CFU comes from the search's own program (``evaluate``: the runs
program in its screening phase, so the screening compiles nothing of its own); the choice of the
best distinct ones, a few small arrays, is numpy again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import cast

import jax
import numpy as np

from cfjax.sensitivity.correlation import _slack
from cfjax.sensitivity.parameterisation import _init_L
from cfjax.sensitivity.projection import _face_ray, _faces, _margin_vertices, _on_boundary, _scale
from cfjax.sensitivity.search_config import _Program

_DISTINCT = 0.1  # restarts' starts differ by more than this fraction of p_max in some entry
_PERTURB = 0.05  # an adaptive round's starts near the best answer: noise of this fraction of p_max


def _rng(key: jax.Array, stream: int) -> np.random.Generator:
    """A numpy generator for the host's draws, determined by the search's ``key`` and a stream."""
    return np.random.default_rng(
        [int(x) for x in np.asarray(jax.random.key_data(key)).ravel()] + [stream]
    )


def random_starts(cfg: _Program, key: jax.Array) -> np.ndarray:
    """The paper's random initial L of each restart slot, ``(R', ...)`` (the same for every
    budget; slot i's draw is the same whatever the number of restarts)."""
    return _init_L(_rng(key, 0), cfg.restart_slots, cfg.shape, np.asarray(cfg.mask), cfg.init_scale)


def candidates(
    cfg: _Program, budgets: np.ndarray, key: jax.Array, dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Every budget's candidate starts on the boundary, ``(B, k, m, m)``, and whether each is
    usable ``(B, k)``: the sign corners (pulled onto the margin), random rays from I and as
    many along the budget's edge faces (the faces in turn), the margin's corners. ``k = 0``
    when nothing is screened."""
    m = cfg.shape[0]
    slack = _slack(np.dtype(dtype), m)
    B = budgets.shape[0]
    p = np.asarray(budgets, np.float64)[:, None]
    Ps, oks = [np.zeros((B, 0, m, m))], [np.zeros((B, 0), bool)]

    def add(P, ok):
        Ps.append(P)
        oks.append(ok & (np.linalg.eigvalsh(P)[..., 0] - cfg.min_eig >= 0))

    directions = []
    if cfg.corners:
        directions.append(np.asarray(cfg.corners, np.float64).reshape(-1, m, m))
    rays = None
    if cfg.boundary_starts:
        U = np.triu(_rng(key, 2).uniform(-1.0, 1.0, (cfg.boundary_starts, m, m)), 1)
        rays = U + np.swapaxes(U, 1, 2)
        directions.append(rays)
    for D in directions:
        P = _on_boundary(D[None], np.broadcast_to(p, (B, D.shape[0])), cfg.min_eig, slack)
        add(P, np.ones(P.shape[:2], bool))
    if rays is not None and m > 1:
        E, sign = (np.take(a, np.arange(rays.shape[0]) % a.shape[0], axis=0) for a in _faces(m))
        P, ok = _face_ray(
            rays[None],
            E[None],
            sign[None],
            np.broadcast_to(p, (B, rays.shape[0])),
            cfg.min_eig,
            slack,
        )
        add(P, ok)
    if cfg.margin_corners:
        S0, E = (np.asarray(a, np.float64) for a in zip(*cfg.margin_corners))
        lower, upper, ok = _margin_vertices(
            S0[None], E[None], np.broadcast_to(p, (B, S0.shape[0])), cfg.min_eig, slack
        )
        add(lower, ok)
        add(upper, ok)
    return np.concatenate(Ps, axis=1), np.concatenate(oks, axis=1)


def initial_L(
    cfg: _Program,
    budgets: np.ndarray,
    restarts: int,
    key: jax.Array,
    dtype,
    evaluate: Callable[[np.ndarray], np.ndarray],
    spare: int = 0,
) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """Every budget's restarts' starting L, ``(B, R', ...)`` for the budgets in use ``(B,)`` and
    ``R' = cfg.restart_slots`` (the first ``restarts`` in use): the best distinct screened
    boundary points (when screening), then the paper's random initialisation; the random
    starts ``(R', ...)`` (the runs' fallback where a start is not usable); the CFU at zero
    correlation (P = I, the curve's floor), evaluated with the candidates so that it costs no
    program of its own (NaN when nothing is screened); and the ``spare`` next-best distinct
    candidates after the restarts' own, ``(B, spare, ...)`` as L, NaN where there are fewer
    (the adaptive rounds' starts, :func:`round_starts`; none with ``warm_start``).

    ``evaluate(P (K, m, m)) -> (K,)`` is the full-data CFU at each P (Model B from scratch).
    """
    random = random_starts(cfg, key)
    B, R = budgets.shape[0], cfg.restart_slots
    none = np.full((B, spare) + tuple(cfg.shape), np.nan)
    if cfg.warm_start:  # only the first budget starts afresh: screen it alone
        first, _, zero, _ = initial_L(
            dataclasses.replace(cfg, warm_start=False), budgets[:1], restarts, key, dtype, evaluate
        )
        return np.broadcast_to(first, (B,) + first.shape[1:]), random, zero, none
    Ps, ok = candidates(cfg, budgets, key, dtype)
    if Ps.shape[1] == 0:
        return np.broadcast_to(random, (B,) + random.shape), random, float("nan"), none
    m = cfg.shape[0]
    k = Ps.shape[1]
    points = np.concatenate(
        [np.where(ok[..., None, None], Ps, np.eye(m)).reshape(-1, m, m), np.eye(m)[None]]
    )
    values = np.asarray(evaluate(points), np.float64)
    zero, values = float(values[-1]), values[:-1].reshape(B, k)
    values = np.where(ok & np.isfinite(values), values, -np.inf)
    # Greedy, best first: each pick is the best candidate left, and drops every candidate within
    # 0.1 p_max of it in every entry.
    left = values.copy()
    picks = max(R, restarts + spare)
    chosen, found = np.zeros((B, picks), int), np.zeros((B, picks), bool)
    near_scale = _DISTINCT * budgets[:, None]
    for r in range(
        picks
    ):  # the restart slots, then the spares: each pick depends on the ones before
        i = np.argmax(left, axis=1)
        chosen[:, r], found[:, r] = i, np.isfinite(left[np.arange(B), i])
        picked = Ps[np.arange(B), i]
        near = np.max(np.abs(Ps - picked[:, None]), axis=(2, 3)) <= near_scale
        left = np.where(near, -np.inf, left)
    # Fewer distinct candidates than restarts: the rest start near the best ones again (the
    # paper's random spread added to their L), so that the best two restarts can agree.
    rows = np.arange(B)[:, None]
    later = chosen[:, restarts : restarts + spare]
    seed = cast(Callable[[np.ndarray, np.ndarray], np.ndarray], cfg.P_fn.seed)  # candidates need it
    spares = np.where(
        found[:, restarts : restarts + spare, None, None],
        seed(Ps[rows, later], np.broadcast_to(budgets[:, None], later.shape)),
        np.nan,
    )
    chosen, found = chosen[:, :R], found[:, :R]
    in_use = np.arange(R) < restarts
    n = np.maximum(np.sum(found & in_use, axis=1), 1)  # found is a prefix: picks go best first
    again = np.take_along_axis(chosen, np.arange(R)[None] % n[:, None], axis=1)
    spread = random - np.where(np.asarray(cfg.mask), np.eye(*cfg.shape), 0)[None]
    seeds = seed(Ps[np.arange(B)[:, None], again], np.broadcast_to(budgets[:, None], (B, R)))
    L = seeds + np.where(found[..., None, None], 0.0, spread[None])
    take = np.isfinite(np.take_along_axis(values, again, axis=1)) & np.all(
        np.isfinite(L), axis=(2, 3)
    )
    return np.where(take[..., None, None], L, random[None]), random, zero, spares


def round_starts(
    cfg: _Program,
    budgets: np.ndarray,
    best: np.ndarray,
    spares: np.ndarray,
    count: int,
    key: jax.Array,
    round_: int,
    dtype,
) -> np.ndarray:
    """The starting L of an adaptive round's ``count`` restarts at each of the budgets ``(b,)``
    not yet confirmed, ``(b, count, ...)``: the first half from the budget's spare screened
    candidates ``spares (b, k, ...)`` (:func:`initial_L`; round i takes the i-th share of them,
    where there are any left), the rest near its best answer so far ``best (b, m, m)``: that P
    with symmetric off-diagonal noise of ``0.05 p_max`` (clipped to the budget, and pulled back
    along its ray from I onto the boundary where it left the usable set), as L
    (``cfg.P_fn.seed``). Without a seed (cliques), the paper's random initialisation, drawn
    afresh each round. Numpy, on the host."""
    rng = _rng(key, 10 + round_)
    b, m = best.shape[0], cfg.shape[0]
    if cfg.P_fn.seed is None:
        return _init_L(rng, b * count, cfg.shape, np.asarray(cfg.mask), cfg.init_scale).reshape(
            (b, count) + cfg.shape
        )
    p = np.broadcast_to(np.asarray(budgets, np.float64)[:, None], (b, count))
    eye = np.eye(m)
    U = np.triu(rng.standard_normal((b, count, m, m)), 1)
    D = np.clip(
        np.asarray(best, np.float64)[:, None]
        - eye
        + _PERTURB * p[..., None, None] * (U + np.swapaxes(U, -1, -2)),
        -p[..., None, None],
        p[..., None, None],
    ) * (1 - eye)
    scale = _scale(D, p, cfg.min_eig, _slack(np.dtype(dtype), m))
    L = cfg.P_fn.seed(eye + np.minimum(1.0, scale)[..., None, None] * D, p)
    half = count // 2
    share = spares[:, round_ * half : (round_ + 1) * half]
    ok = np.all(np.isfinite(share), axis=tuple(range(2, share.ndim)))
    L[:, : share.shape[1]] = np.where(ok[..., None, None], share, L[:, : share.shape[1]])
    return L
