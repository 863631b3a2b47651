"""Counterfactual unfairness over two error correlations at once: a CFU surface, for contour
plots (paper 001, definitions §3.5).

:func:`cfu_grid` scans the single correlation of a two-feature model; with m ≥ 3 features a
user asks how CFU moves with *two* chosen correlations, say ``P[O, M]`` and ``P[M, J]``, the
others held at a base value. :func:`cfu_surface` evaluates CFU (of the scored predictor,
:meth:`~cfjax.sensitivity.FairModel.scoring`) at every point of the product grid in one jitted
program, vmapped over grid points (in chunks, so that memory stays bounded for large data).
A point whose P is not positive definite with smallest eigenvalue at least ``min_eig`` is not
evaluated: its CFU is NaN and ``Surface.feasible`` marks it (the eigenvalues are taken in
float64 numpy, at the public boundary). :func:`~cfjax.sensitivity.plot_contour` draws a Surface.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cfjax import _checks, platform
from cfjax._results import headline
from cfjax._results import strict_plain as plain
from cfjax.sensitivity.cfu import cfu_of
from cfjax.sensitivity.correlation import check_correlation
from cfjax.sensitivity.diagnostics import ConvergenceWarning
from cfjax.sensitivity.fitting import FairModel
from cfjax.sensitivity.linear import fit_model_b

__all__ = ["Surface", "cfu_surface"]

_UNITS_PER_CHUNK = 2**20  # grid points x units evaluated at once (memory bound of one chunk)


@struct.dataclass
class Surface:
    """CFU over a grid of two error correlations; the result of :func:`cfu_surface`.

    ``x (nx,)``: the values of ``P[pairs[0]]``; ``y (ny,)``: the values of ``P[pairs[1]]``;
    ``cfu (ny, nx)``: ``cfu[i, j]`` is the CFU at ``P[pairs[0]] = x[j]``, ``P[pairs[1]] = y[i]``
    (rows follow y, columns x: matplotlib's ``contourf(x, y, cfu)`` orientation), NaN where the
    point is not feasible; ``feasible (ny, nx)``: whether that P is positive definite with
    smallest eigenvalue ≥ ``min_eig`` (only those points are evaluated); ``base (m, m)``: the
    correlation matrix whose other off-diagonal entries every point shares; ``pairs``: the two
    feature pairs, by name; ``features``: the model's features (the order of ``base``'s rows);
    ``min_eig``: the eigenvalue margin; ``predictor``: the scored predictor (one of
    :data:`~cfjax.sensitivity.PREDICTORS`); ``rounding``: a CFU at or below which a value is
    rounding, not a number (the float's machine epsilon times the scored predictor's mean
    squared prediction, as :func:`~cfjax.sensitivity.cfu.negligible_cfu`).

    A pytree (the arrays are leaves); :meth:`to_dict` gives plain Python, the ``repr`` one line.
    """

    x: jax.Array
    y: jax.Array
    cfu: jax.Array
    feasible: jax.Array
    base: jax.Array
    pairs: tuple[tuple[str, str], tuple[str, str]] = struct.field(pytree_node=False)
    features: tuple[str, ...] = struct.field(pytree_node=False)
    min_eig: float = struct.field(pytree_node=False)
    predictor: str = struct.field(pytree_node=False, default="fair")
    rounding: float = struct.field(pytree_node=False, default=0.0)

    def correlation(self, i: int, j: int) -> np.ndarray:
        """The correlation matrix ``(m, m)`` of grid point ``(i, j)`` (``y[i]``, ``x[j]``), in
        float64."""
        return _point(
            np.asarray(self.base, np.float64), self._index(), float(self.x[j]), float(self.y[i])
        )

    def _index(self) -> tuple[tuple[int, int], tuple[int, int]]:
        (a, b), (c, d) = self.pairs
        return (self.features.index(a), self.features.index(b)), (
            self.features.index(c),
            self.features.index(d),
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-serialisable plain Python: ``x``, ``y``, ``cfu`` (nested lists,
        rows along y; infeasible points as None), ``feasible``, ``base``, ``pairs``,
        ``features``, ``min_eig``, ``predictor`` and ``rounding``."""
        return {
            "x": plain(self.x),
            "y": plain(self.y),
            "cfu": plain(self.cfu),
            "feasible": plain(self.feasible),
            "base": plain(self.base),
            "pairs": [list(p) for p in self.pairs],
            "features": list(self.features),
            "min_eig": float(self.min_eig),
            "predictor": self.predictor,
            "rounding": float(self.rounding),
        }

    def __repr__(self) -> str:
        (a, b), (c, d) = self.pairs
        try:
            cfu, ok = np.asarray(self.cfu, np.float64), np.asarray(self.feasible, bool)
            finite = np.isfinite(cfu)
            values = (
                f"cfu in [{headline(cfu[finite].min())}, {headline(cfu[finite].max())}]"
                if finite.any()
                else "no finite cfu"
            ) + f", feasible {int(ok.sum())}/{ok.size}"
        except Exception:  # traced or batched: shapes only
            values = f"cfu {tuple(np.shape(self.cfu))}"
        return (
            f"Surface(predictor={self.predictor}, x=P[{a},{b}] ({np.shape(self.x)[-1]}), "
            f"y=P[{c},{d}] ({np.shape(self.y)[-1]}), {values}, min_eig={self.min_eig:g})"
        )


def cfu_surface(
    model: FairModel,
    pairs: Sequence[Sequence[str]],
    grid: Any = 39,
    *,
    base: Any = None,
    min_eig: float = 1e-3,
    newton_steps: int = 30,
) -> Surface:
    """CFU of the scored predictor over a grid of two error correlations (definitions §3.5).

    Every point sets ``P[pairs[0]] = x`` and ``P[pairs[1]] = y`` (both entries of each
    symmetric pair), the other off-diagonal entries fixed at ``base``'s, and evaluates
    :func:`~cfjax.sensitivity.cfu` there; one jitted program for the whole grid, vmapped over
    its points (in chunks of bounded memory).

    Args:
      model: the fitted working model (:func:`~cfjax.sensitivity.fit`), with m ≥ 3 features
        (two features have a single correlation: use :func:`~cfjax.sensitivity.cfu_grid`);
        ``model.scoring(name)`` scores a baseline instead of the fair predictor.
      pairs: two distinct pairs of distinct features, by name, e.g. ``(("O", "M"), ("M", "J"))``:
        the x and y axes.
      grid: the correlations along each axis: a strictly increasing 1-d array in (−1, 1), or
        an int n ≥ 2: ``n`` values equally spaced strictly inside (−1, 1)
        (``linspace(−1, 1, n + 2)[1:-1]``; 39: steps of 0.05 from −0.95 to 0.95).
      base: the other correlations: an ``(m, m)`` correlation matrix (symmetric, unit diagonal,
        off-diagonal entries in (−1, 1); its entries at ``pairs`` are ignored) over
        ``model.graph.features``; default None: 0 (the identity).
      min_eig: the eigenvalue margin: points whose P has smallest eigenvalue below it are not
        evaluated (NaN, marked in ``feasible``).
      newton_steps: Model B's σ solve (:func:`~cfjax.sensitivity.linear.fit_model_b`).

    Returns:
      A :class:`Surface`, ``cfu`` of shape ``(len(y), len(x))`` (rows along y). A feasible
      point whose CFU is not finite warns (:class:`~cfjax.sensitivity.ConvergenceWarning`).

    Example::

        surface = cfu_surface(model, (("O", "M"), ("M", "J")), 21)
        fig = plot_contour(surface, worst=worst_case(model, [0.3, 0.6], key=0))
    """
    if not isinstance(model, FairModel):
        _checks.fail("model", "a FairModel from cfjax.sensitivity.fit", type(model).__name__)
    g = model.graph
    if g.m < 3:
        _checks.fail(
            "model",
            "at least 3 features (two correlations to vary); with two features there is "
            "a single correlation: use cfu_grid",
            f"{g.m} feature(s) {list(g.features)}",
        )
    index = _check_pairs(pairs, g.features)
    xs = _check_grid(grid)
    min_eig = float(min_eig)
    if not np.isfinite(min_eig) or not 0.0 < min_eig < 1.0:
        _checks.fail("min_eig", "a number in (0, 1)", repr(min_eig))
    newton_steps = _checks.check_positive_int("newton_steps", newton_steps)
    B = _check_base(base, g.features)

    # Feasibility in float64 at the boundary: the grid points are concrete.
    Ps = np.stack([_point(B, index, x, y) for y in xs for x in xs])  # (ny * nx, m, m), x fastest
    feasible = np.linalg.eigvalsh(Ps)[:, 0] >= min_eig
    n = int(model.data.X.shape[0])
    chunk = max(1, min(len(Ps), _UNITS_PER_CHUNK // max(n, 1)))
    dtype = model.data.X.dtype
    values = _surface(model, jnp.asarray(Ps, dtype), jnp.asarray(feasible), newton_steps, chunk)
    shape = (len(xs), len(xs))
    cfu = np.asarray(values).reshape(shape)
    bad = feasible.reshape(shape) & ~np.isfinite(cfu)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        warnings.warn(
            f"cfu_surface: {int(bad.sum())} feasible point(s) without a finite CFU (Model B's fit "
            f"failed), e.g. at P{list(pairs[0])} = {xs[j]:.4g}, P{list(pairs[1])} = {xs[i]:.4g}; "
            f"they are NaN",
            ConvergenceWarning,
            stacklevel=2,
        )
    pred = np.asarray(model.scored_pred)
    rounding = float(np.finfo(pred.dtype).eps * np.mean(pred.astype(np.float64) ** 2))
    return Surface(
        x=jnp.asarray(xs, dtype),
        y=jnp.asarray(xs, dtype),
        cfu=jnp.asarray(cfu, dtype),
        feasible=jnp.asarray(feasible.reshape(shape)),
        base=jnp.asarray(B, dtype),
        pairs=(
            (g.features[index[0][0]], g.features[index[0][1]]),
            (g.features[index[1][0]], g.features[index[1][1]]),
        ),
        features=tuple(g.features),
        min_eig=min_eig,
        predictor=model.scored,
        rounding=rounding,
    )


@functools.partial(jax.jit, static_argnums=(3, 4))
def _surface(model, Ps, feasible, newton_steps, chunk):
    """CFU at every feasible ``Ps[k] (m, m)``, NaN elsewhere (the identity is evaluated there
    instead and discarded, so no non-PD P ever reaches Model B)."""
    eye = jnp.eye(Ps.shape[-1], dtype=Ps.dtype)
    safe = jnp.where(feasible[:, None, None], Ps, eye)

    def one(P):
        return cfu_of(model, fit_model_b(model.design, P, model.lam, newton_steps=newton_steps))

    # Vmapped Model B fits, at most platform.run_group of them at once: with XLA:CPU's
    # concurrency-optimised scheduler on, wider vmaps of such fits can stall it (a contour of
    # 49 points sat idle for minutes).
    group = platform.run_group(chunk)
    values = jax.lax.map(one, safe, batch_size=chunk if group is None else group)
    return jnp.where(feasible, values, jnp.nan)


def _point(base: np.ndarray, index, x: float, y: float) -> np.ndarray:
    (a, b), (c, d) = index
    P = np.array(base, np.float64)
    P[a, b] = P[b, a] = x
    P[c, d] = P[d, c] = y
    return P


def _check_pairs(pairs: Any, features: Sequence[str]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The two pairs as index pairs, or ValidationError naming ``pairs``."""
    expected = (
        f"two distinct pairs of distinct features among {list(features)}, e.g. (({features[0]!r}, "
        f"{features[1]!r}), ({features[1]!r}, {features[2]!r}))"
    )
    try:
        items = (
            None
            if isinstance(pairs, str) or any(isinstance(p, str) for p in pairs)
            else [tuple(p) for p in pairs]
        )
    except TypeError:
        items = None
    if items is None or len(items) != 2 or any(len(p) != 2 for p in items):
        _checks.fail("pairs", expected, repr(pairs))
    for p in items:
        for v in p:
            if not isinstance(v, str) or v not in features:
                _checks.fail("pairs", expected, f"unknown feature {v!r}")
        if p[0] == p[1]:
            _checks.fail(
                "pairs", expected, f"the pair {p!r} of one feature (a variance, not a correlation)"
            )
    if set(items[0]) == set(items[1]):
        _checks.fail("pairs", expected, f"the same pair twice: {items!r}")
    (a, b), (c, d) = items
    return (features.index(a), features.index(b)), (features.index(c), features.index(d))


def _check_grid(grid: Any) -> np.ndarray:
    """The axis' correlations as a float64 array, or ValidationError naming ``grid``."""
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
        if grid < 2:
            _checks.fail(
                "grid", "an int number of points >= 2, or a 1-d array of correlations", repr(grid)
            )
        return np.linspace(-1.0, 1.0, int(grid) + 2)[1:-1]
    try:
        xs = np.asarray(grid, np.float64)
    except (TypeError, ValueError):
        _checks.fail(
            "grid",
            "an int number of points >= 2, or a 1-d array of correlations in (-1, 1)",
            repr(grid),
        )
    if xs.ndim != 1 or xs.size < 2:
        _checks.fail(
            "grid", "a 1-d array of at least 2 correlations in (-1, 1)", f"shape {xs.shape}"
        )
    if not (np.isfinite(xs).all() and (np.abs(xs) < 1).all()):
        _checks.fail(
            "grid", "correlations strictly inside (-1, 1)", f"values from {xs.min()} to {xs.max()}"
        )
    if not (np.diff(xs) > 0).all():
        _checks.fail("grid", "strictly increasing values", repr(xs.tolist()))
    return xs


def _check_base(base: Any, features: Sequence[str]) -> np.ndarray:
    """The base correlation matrix (identity by default), or ValidationError naming ``base``."""
    m = len(features)
    if base is None:
        return np.eye(m)
    if not _checks.is_concrete(base):
        _checks.fail(
            "base", "a concrete (m, m) correlation matrix (not a traced value)", "a tracer"
        )
    try:
        B = np.asarray(base, np.float64)
    except (TypeError, ValueError):
        _checks.fail("base", f"a {m} x {m} correlation matrix over {list(features)}", repr(base))
    if B.shape != (m, m):
        _checks.fail(
            "base", f"a {m} x {m} correlation matrix over {list(features)}", f"shape {B.shape}"
        )
    check_correlation(
        B, min_eig=-np.inf, name="base"
    )  # symmetric, unit diagonal, finite; PD is per point
    off = np.abs(B - np.eye(m)).max()
    if off >= 1:
        _checks.fail("base", "off-diagonal correlations in (-1, 1)", f"|P_jk| up to {off:.6g}")
    return B


# ----------------------------------------------------------------------------- marks on a surface (plot_contour)
def _benchmark_points(surface: Surface, benchmarks: Any) -> dict[str, tuple[float, float]]:
    """label → ``(x, y)`` of :func:`~cfjax.sensitivity.plot_contour`'s ``benchmarks``."""
    if benchmarks is not None and not isinstance(benchmarks, Mapping):
        _checks.fail(
            "benchmarks",
            "a mapping label -> (x, y) or an (m, m) correlation matrix",
            type(benchmarks).__name__,
        )
    index, m = surface._index(), len(surface.features)
    return {str(k): _read_pair(k, v, index, m) for k, v in (benchmarks or {}).items()}


def _read_pair(label, value, index, m) -> tuple[float, float]:
    """``(x, y)`` of a benchmark: a pair, or the two entries of an ``(m, m)`` matrix."""
    try:
        v = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        v = np.asarray([np.nan])
    if v.shape == (m, m):
        (a, b), (c, d) = index
        v = np.asarray([v[a, b], v[c, d]])
    if v.shape != (2,) or not np.isfinite(v).all():
        _checks.fail(
            "benchmarks",
            f"label -> (x, y) finite numbers or an ({m}, {m}) correlation matrix",
            f"{label!r}: {value!r}",
        )
    return float(v[0]), float(v[1])


def _worst_points(surface: Surface, worst: Any, budgets: Any) -> list[tuple[str, float, float]]:
    """``(label, x, y)`` per budget of :func:`~cfjax.sensitivity.plot_contour`'s ``worst``, in
    order of budget."""
    from cfjax.sensitivity.search import WorstCase

    index, m = surface._index(), len(surface.features)
    if worst is None:
        if budgets is not None:
            _checks.fail("budgets", "None without a WorstCase", repr(budgets))
        return []
    (a, b), (c, d) = index
    if isinstance(worst, WorstCase):
        P, p = np.asarray(worst.P, np.float64), np.asarray(worst.p_max, np.float64).reshape(-1)
        if P.shape[-2:] != (m, m):
            _checks.fail("worst", f"a WorstCase over {m} features", f"P of shape {P.shape}")
        keep: list[int] = list(range(p.size))
        if budgets is not None:
            want = np.atleast_1d(np.asarray(budgets, np.float64))
            keep = [int(np.argmin(np.abs(p - q))) for q in want]
            missing = [
                float(q) for q, k in zip(want, keep) if not np.isclose(p[k], q, rtol=0, atol=1e-9)
            ]
            if missing or want.ndim != 1:
                _checks.fail(
                    "budgets", f"budgets among the WorstCase's p_max {p.tolist()}", repr(budgets)
                )
        keep = sorted(set(keep), key=lambda k: p[k])
        rows = [(f"p_max = {p[k]:.3g}", P[k, a, b], P[k, c, d]) for k in keep]
        return [(s, float(x), float(y)) for s, x, y in rows if np.isfinite(x) and np.isfinite(y)]
    if budgets is not None:
        _checks.fail("budgets", "None unless worst is a WorstCase", repr(budgets))
    try:
        P = np.asarray(worst, np.float64)
    except (TypeError, ValueError):
        P = np.zeros(0)
    if P.shape == (m, m):
        P = P[None]
    if P.ndim != 3 or P.shape[1:] != (m, m) or not np.isfinite(P).all():
        _checks.fail(
            "worst",
            f"a WorstCase, an ({m}, {m}) correlation matrix or a stack (B, {m}, {m})",
            f"shape {P.shape}" if P.size else repr(worst),
        )
    return [("", float(Pk[a, b]), float(Pk[c, d])) for Pk in P]
