"""Bootstrap intervals for the sensitivity analysis (paper 001; definitions §3), as one vmapped
program over resamples of the units.

Each resample refits the whole analysis on its units with every choice fixed at the full
data's (:func:`~cfjax.sensitivity.resample.refit`; no cross-validation), then computes, in the
same compiled program, its worst-case CFU at each budget (a local search from the full data's
maximisers), the CFU at the benchmark correlations and the budgets they imply, and the inverse
budget of each level (:mod:`cfjax.sensitivity.resample` describes each step).

The resamples are split into chunks (``lax.map`` over chunks, ``vmap`` within one) so that
memory stays bounded for large data, and over devices with ``mesh=``
(:func:`cfjax.distributed.map_batch`). :func:`bootstrap` returns :class:`Intervals`: the
full-data estimates (the same program on the identity resample), percentile intervals and every
resample's values.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from cfjax import _checks, distributed, platform
from cfjax._core.keys import as_key
from cfjax._results import headline
from cfjax._results import strict_plain as plain
from cfjax.sensitivity.fitting import FairModel
from cfjax.sensitivity.resample import _prepare, _Resamples
from cfjax.sensitivity.search_config import SearchConfig
from cfjax.typing import ArrayLike, KeyLike, Mesh, MeshLike

__all__ = ["BootstrapConfig", "Intervals", "bootstrap"]


# ------------------------------------------------------------------------------------- result
@struct.dataclass
class Intervals:
    """Result of :func:`bootstrap`: percentile intervals of every quantity over the resamples.

    Each mapping is keyed by quantity: ``"worst_case"`` ``(K,)`` (the worst-case CFU at each
    budget of ``p_max``), ``"benchmark_budget"`` and ``"benchmark_cfu"`` ``(V, k)`` (each
    yardstick variable's benchmark correlation's budget, its largest ``|P_jk|``, and the CFU there,
    per multiple in ``benchmarks``), ``"inverse/<name>"`` ``()`` (the smallest budget whose
    worst case reaches level ``<name>``, to within ``resolution``; +inf when not reached
    within the largest budget), ``"level/<name>"`` ``()`` (that level, per resample for a
    baseline's) and ``"baseline_unfairness/<name>"`` ``()``.

    ``estimate``: the full data's value (the same program on all units: the local search
    reproduces :func:`~cfjax.sensitivity.worst_case`'s answer); ``low``, ``high``: the
    ``(1 ∓ level)/2`` percentiles of the resamples' values (linear interpolation; NaN dropped,
    +inf kept: a high end of +inf says that more than that share did not reach the level);
    ``values``: every resample's value, ``(resamples, ...)``; ``not_finite``: per entry, the
    resamples whose value is NaN or −inf (no finite CFU found, a degenerate refit), left out of
    the percentiles; ``not_reached``: per inverse budget, the resamples that did not reach the
    level (+inf, counted in the percentiles). ``resamples``, ``level`` (the intervals'
    coverage), ``resolution`` (the inverse budgets' bisection bracket, at most), ``p_max``
    ``(K,)`` and ``levels`` (name → the level: a number, or the baseline's name).
    """

    p_max: jax.Array
    estimate: dict
    low: dict
    high: dict
    values: dict
    not_finite: dict
    not_reached: dict
    resamples: int = struct.field(pytree_node=False)
    level: float = struct.field(pytree_node=False)
    resolution: float = struct.field(pytree_node=False)
    levels: tuple = struct.field(
        pytree_node=False, default=()
    )  # ((name, level or baseline name), ...)

    @property
    def lower(self) -> dict:
        """The interval's low ends (deprecated spelling of :attr:`low`)."""
        warnings.warn(
            "cfjax.sensitivity.Intervals.lower is deprecated and will be removed in the next release: use "
            "cfjax.sensitivity.Intervals.low",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.low

    @property
    def upper(self) -> dict:
        """The interval's high ends (deprecated spelling of :attr:`high`)."""
        warnings.warn(
            "cfjax.sensitivity.Intervals.upper is deprecated and will be removed in the next release: use "
            "cfjax.sensitivity.Intervals.high",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.high

    def to_dict(self, values: bool = False) -> dict[str, Any]:
        """JSON-ready plain Python (non-finite numbers as None: an unreached inverse budget's
        +inf too, with ``not_reached`` saying so); every resample's ``values`` only when asked."""
        out = {
            "p_max": plain(self.p_max),
            "resamples": int(self.resamples),
            "level": float(self.level),
            "resolution": float(self.resolution),
            "levels": {k: plain(v) for k, v in self.levels},
            "estimate": plain(self.estimate),
            "low": plain(self.low),
            "high": plain(self.high),
            "not_finite": plain(self.not_finite),
            "not_reached": plain(self.not_reached),
        }
        if values:
            out["values"] = plain(self.values)
        return out

    def __repr__(self) -> str:
        try:
            i = int(np.nanargmax(np.asarray(self.p_max)))
            worst = (
                f"worst_case at p_max={headline(self.p_max[i])}: {headline(self.estimate['worst_case'][i])} "
                f"[{headline(self.low['worst_case'][i])}, {headline(self.high['worst_case'][i])}]"
            )
        except Exception:  # traced or batched
            worst = f"p_max {tuple(np.shape(self.p_max))}"
        missing = sum(int(np.sum(v)) for v in self.not_finite.values()) if self.not_finite else 0
        return (
            f"Intervals(resamples={self.resamples}, level={self.level:g}, {worst}, "
            f"quantities={len(self.estimate)}, not_finite={missing})"
        )


def _percentiles(values: np.ndarray, q: float) -> np.ndarray:
    """The q-quantile over axis 0 (linear interpolation), NaN and −inf dropped, +inf kept (an
    endpoint at +inf gives +inf); NaN where nothing is left."""
    v = np.where(np.isneginf(values), np.nan, values)
    s = np.sort(v, axis=0)  # NaN last
    count = np.sum(~np.isnan(v), axis=0)
    h = (np.maximum(count, 1) - 1) * q
    lo = np.floor(h).astype(int)
    hi = np.minimum(lo + 1, np.maximum(count - 1, 0))
    a = np.take_along_axis(s, lo[None], axis=0)[0]
    b = np.take_along_axis(s, hi[None], axis=0)[0]
    with np.errstate(invalid="ignore"):
        out = np.where(np.isinf(b) | np.isinf(a), np.maximum(a, b), a + (h - lo) * (b - a))
    return np.where(count > 0, out, np.nan)


# ------------------------------------------------------------------------------------ bootstrap
@dataclasses.dataclass(frozen=True)
class BootstrapConfig:
    """How :func:`bootstrap` computes each resample's numbers, frozen and hashable.

    Attributes:
      steps: the most local search steps per start (each a CFU and its gradient on the
        resample's distinct rows); a search stops sooner once its step size is spent.
      bisect: bisection steps per inverse budget.
      chunk: resamples vmapped at once (``lax.map`` over chunks; memory is one chunk's); None:
        as many as fit in about 512 MB of per-unit arrays, at most
        :data:`cfjax.platform.RUN_GROUP` (4) on CPU, whichever XLA:CPU scheduler runs (wider
        chunks stall there: :func:`cfjax.platform.run_group`). With the concurrency-optimised
        scheduler on, each resample's local searches and benchmark fits also go in vmapped
        groups of 4 (:func:`cfjax.platform.map_runs`).
      model_a: how the model's Model A was fitted (``FitConfig.model_a``: ``"paper"`` or
        ``"ml"``; the model does not record it).
    """

    steps: int = 10
    bisect: int = 6
    chunk: int | None = None
    model_a: str = "paper"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "steps", _checks.check_positive_int("BootstrapConfig.steps", self.steps)
        )
        object.__setattr__(
            self, "bisect", _checks.check_positive_int("BootstrapConfig.bisect", self.bisect)
        )
        if self.chunk is not None:
            object.__setattr__(
                self, "chunk", _checks.check_positive_int("BootstrapConfig.chunk", self.chunk)
            )
        if self.model_a not in ("paper", "ml"):
            _checks.fail("BootstrapConfig.model_a", "'paper' or 'ml'", repr(self.model_a))


_OLD_OPTIONS = (
    "steps",
    "bisect",
    "chunk",
    "model_a",
)  # bootstrap's keyword arguments before BootstrapConfig


def _fold_deprecated(
    config: SearchConfig, options: BootstrapConfig, deprecated: dict[str, Any]
) -> tuple[SearchConfig, BootstrapConfig]:
    """:func:`bootstrap`'s options passed the old way folded in: ``search={...}`` into
    ``config``, ``steps=`` and the others into ``options``, each with a ``DeprecationWarning``
    naming the new spelling."""
    import warnings

    deprecated = dict(deprecated)
    search = deprecated.pop("search", None)
    unknown = sorted(set(deprecated) - set(_OLD_OPTIONS))
    if unknown:
        raise TypeError(f"bootstrap() got an unexpected keyword argument {unknown[0]!r}")
    if deprecated:
        shown = ", ".join(f"{k}={v!r}" for k, v in deprecated.items())
        warnings.warn(
            f"bootstrap({shown}) is deprecated and will be removed in the next release: pass "
            f"options=BootstrapConfig({shown})",
            DeprecationWarning,
            stacklevel=3,
        )
        options = dataclasses.replace(options, **deprecated)
    if search is not None:
        if not isinstance(search, Mapping):
            _checks.fail(
                "search",
                "a mapping of worst_case's options (deprecated: pass config=SearchConfig(...))",
                type(search).__name__,
            )
        shown = ", ".join(f"{k}={v!r}" for k, v in search.items())
        warnings.warn(
            f"bootstrap(search={{...}}) is deprecated and will be removed in the next release: pass "
            f"config=SearchConfig({shown})",
            DeprecationWarning,
            stacklevel=3,
        )
        config = dataclasses.replace(
            config, **{k: v for k, v in search.items() if not (k == "optimizer" and v is None)}
        )
    return config, options


def bootstrap(
    model: FairModel,
    p_max: ArrayLike,
    *,
    key: KeyLike,
    resamples: int = 200,
    worst: Any = None,
    benchmarks: Any = (1, 2, 3),
    levels: Mapping[str, Any] | None = None,
    level: float = 0.95,
    config: SearchConfig = SearchConfig(),
    options: BootstrapConfig = BootstrapConfig(),
    mesh: MeshLike = None,
    **deprecated: Any,
) -> Intervals:
    """Percentile bootstrap intervals of the sensitivity analysis: the worst-case CFU at each
    budget, the benchmarks' budgets and CFU, and the inverse budgets, over ``resamples``
    resamples of the units, as one compiled program vmapped over resamples.

    Every resample refits Models A and B, the fair predictor and the baselines with the full
    data's choices (:func:`~cfjax.sensitivity.resample.refit`), then searches its worst case
    *locally*, from the full data's maximisers (``worst``; see
    :mod:`cfjax.sensitivity.resample`'s docstring): ``options.steps`` steps of the polish's
    projected ascent along the boundary from the full data's worst P at that budget and from
    its neighbouring budgets' (projected into it), the best kept. A resample's worst case that
    sits near another local maximum is not found; the identity resample reproduces
    ``worst.cfu`` (to ~1e-6 relative). Each level's inverse budget is bisected ``options.bisect``
    times between the two budgets of ``p_max`` that bracket it, so it is known to within
    ``resolution`` = the widest gap of the grid (from 0) over ``2^options.bisect``.

    Args:
      model: the full data's fit (:func:`~cfjax.sensitivity.fit`); the scored predictor
        (:meth:`~cfjax.sensitivity.FairModel.scoring`) is the one whose CFU is bootstrapped.
      p_max: the budgets, one or a 1-d grid in [0, 1) (sorted; repeats dropped).
      key: the resamples' randomness (a typed key, raw key data or an int seed); resample b
        draws its units with ``jax.random.split(key, resamples)[b]``.
      resamples: how many bootstrap resamples (≥ 2).
      worst: the full data's :class:`~cfjax.sensitivity.WorstCase` at these budgets (its
        ``min_eig`` is used); None: computed with :func:`~cfjax.sensitivity.worst_case`
        (options ``config``, the key folded with 1).
      benchmarks: the benchmark multiples (:mod:`cfjax.sensitivity.benchmarks`); ``()``: none.
      levels: name → a CFU level (a number) or ``"blind"`` / ``"unconstrained"`` (each
        resample's own baseline unfairness, ``mean (fair_pred − baseline)²``); None: no inverse
        budgets.
      level: the intervals' coverage, in (0, 1).
      config: the options of :func:`~cfjax.sensitivity.worst_case` when ``worst`` is None
        (:class:`~cfjax.sensitivity.SearchConfig`).
      options: how each resample is computed (:class:`BootstrapConfig`: local search steps
        ``steps``, bisection steps ``bisect``, resamples per chunk ``chunk``, how Model A was
        fitted ``model_a``).
      mesh: devices to split the resamples over (:func:`cfjax.distributed.map_batch`): None
        (one device), a count, devices or a one-axis Mesh.
      **deprecated: the old spellings, folded in with a ``DeprecationWarning``: ``steps``,
        ``bisect``, ``chunk`` and ``model_a`` (now ``options``'s), ``search={...}`` (now
        ``config``).

    Returns:
      :class:`Intervals`.
    """
    config, options = _fold_deprecated(config, options, deprecated)
    if not (isinstance(level, (int, float)) and 0 < level < 1):
        _checks.fail("level", "a coverage in (0, 1)", repr(level))
    resamples = _checks.check_positive_int("resamples", resamples)
    if resamples < 2:
        _checks.fail("resamples", "at least 2 resamples", repr(resamples))
    key = as_key(key)
    cfg, names, budgets, shared = _prepare(
        model,
        p_max,
        worst,
        benchmarks,
        levels,
        options.steps,
        options.bisect,
        options.model_a,
        jax.random.fold_in(key, 1),
        config,
    )
    kinds, fixed = cfg.level_kinds, np.asarray(shared[-1])
    n, D = shared[2].n, sum(model.design.sizes)  # the distinct rows a resample's refit reads
    chunk = options.chunk
    if chunk is None:
        per = 8 * (
            n * (D + 3 * model.graph.m + 4) + 3 * budgets.size * min(n, 8192) * 12 * model.graph.m
        )
        chunk = max(1, min(resamples + 1, (512 << 20) // per))
        if platform.on_cpu():
            chunk = min(chunk, platform.RUN_GROUP)
    chunk = _checks.check_positive_int("chunk", chunk)
    keys = jax.random.split(key, resamples)
    keys = jnp.concatenate([keys[:1], keys])  # entry 0: the identity resample (its key unused)
    identity = jnp.asarray(np.arange(resamples + 1) == 0)
    out = distributed.map_batch(
        _Resamples(cfg),
        keys,
        identity,
        shared=shared,
        mesh=mesh,
        chunk_size=chunk,
        compiler_options=platform.small_kernel_options(
            None if mesh is None else list(cast(Mesh, distributed.as_mesh(mesh)).devices.flat)
        ),
    )
    out = {k: np.asarray(v, np.float64) for k, v in jax.device_get(out).items()}
    rename = {f"inverse/{i}": f"inverse/{name}" for i, name in enumerate(names)}
    rename.update({f"level/{i}": f"level/{name}" for i, name in enumerate(names)})
    out = {rename.get(k, k): v for k, v in out.items()}
    estimate = {k: v[0] for k, v in out.items()}
    values = {k: v[1:] for k, v in out.items()}
    low = {k: _percentiles(v, (1 - level) / 2) for k, v in values.items()}
    high = {k: _percentiles(v, (1 + level) / 2) for k, v in values.items()}
    not_finite = {k: np.sum(np.isnan(v) | np.isneginf(v), axis=0) for k, v in values.items()}
    not_reached = {
        k: np.sum(np.isposinf(v), axis=0) for k, v in values.items() if k.startswith("inverse/")
    }
    gaps = np.diff(np.concatenate([[0.0], budgets]))
    resolution = float(gaps.max() / 2**options.bisect)
    return Intervals(
        budgets,
        estimate,
        low,
        high,
        values,
        not_finite,
        not_reached,
        resamples,
        float(level),
        resolution,
        tuple(zip(names, [k or float(v) for k, v in zip(kinds, fixed)])),
    )
