"""The two stages of every marginalisation report, for binary scores and class probabilities.

One pipeline serves :func:`~cfjax.metrics.evaluate`, :func:`~cfjax.metrics.evaluate_chunks`,
:func:`~cfjax.metrics.evaluate_many` and :func:`~cfjax.metrics.evaluate_bootstrap`:

1. the unit stage (:func:`unit_stage`): one unit's K counterfactual predictions reduced to its
   marginalised prediction ``p_bar``, the soft counterfactual label ``y_bar`` and its
   contributions to the sums over units (:class:`UnitSums`), for all units at once. It takes
   the contract's layout, ``p_obs (N,)``, ``p_cf (N, K)`` (classes ``(N, C)``, ``(N, K, C)``),
   ``y (N,)``, ``y_cf (N, K)``, and returns per-unit results with a leading N, but it is *not*
   a one-unit function lifted with ``vmap``: inside, the scores are laid out intervention-major,
   ``(K, N)``, and every reduction over K is written on that layout with the units riding along
   the trailing axis. XLA:CPU turns a reduction over a leading K into one vectorised loop across
   the units, while ``vmap`` of a per-unit reduction becomes batched products it does not
   vectorise; the transpose is fused into the first consumer and never leaves the stage;
2. the finish (:func:`finish`): the report from the per-unit vectors (``p_obs``, ``p_bar``,
   ``y``, ``y_bar``) and the summed statistics (rank metrics, calibration, risks).

Binary scores and class probabilities differ only in a handful of per-prediction primitives
(the decision, the squared spread, the distance, the loss, the calibration target), chosen
statically from the array ranks (:class:`_Binary`, :class:`_Classes`); everything else is
shared.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.typing import DTypeLike

from cfjax import _checks
from cfjax.metrics import _arrays, _inputs
from cfjax.metrics._report_types import (
    LABEL_FIELDS,
    CounterfactualLabelReport,
    MarginalisationReport,
    MulticlassReport,
)
from cfjax.metrics.calibration import _bins
from cfjax.metrics.ranking import _kendall_tau_b, _spearman
from cfjax.metrics.risk import EPS, binary_bce, cvar_units_kn
from cfjax.metrics.smooth_calibration import _smooth_ece
from cfjax.metrics.stability import class_decisions, total_variation
from cfjax.typing import Array, ArrayLike

Report = MarginalisationReport | MulticlassReport


def check_options(
    alphas: Sequence[float], n_bins: int, tau: ArrayLike
) -> tuple[tuple[float, ...], int]:
    """Validate the options shared by every report function."""
    _checks.check_threshold("tau", tau)
    return _checks.check_alphas("alphas", alphas), _checks.check_positive_int("n_bins", n_bins)


def prepare(
    p_obs: ArrayLike,
    p_cf: ArrayLike,
    y: ArrayLike | None,
    y_cf: ArrayLike | None,
    weights: ArrayLike | None,
    tau: ArrayLike,
) -> tuple[Array, Array, Array | None, Array | None, Array, Array]:
    """Validate a report's inputs, binary scores or class probabilities, and convert them.

    Returns ``(p_obs, p_cf, y, y_cf, q, tau)``: scores of one float dtype, binary labels in
    that dtype or class labels as int32, the resolved weights ``q (K,)`` and ``tau``.
    """
    if y is None and y_cf is not None:
        _checks.fail(
            "y",
            "observed labels of shape (n,) when `y_cf` is given (risk_orig and "
            "the *_orig calibration use them)",
            "None",
        )
    cf_labels: Array | None = None
    if _inputs.is_multiclass(p_obs, p_cf):
        obs, cf, q, _ = _inputs.prepare_stability(p_obs, p_cf, weights, tau)
        labels, cf_labels = _inputs.prepare_class_labels(y, y_cf, cf.shape)
    else:
        obs, cf, labels, q = _inputs.prepare(p_obs=p_obs, p_cf=p_cf, y=y, weights=weights)
        if y_cf is not None:
            cf_labels = _inputs.prepare_counterfactual_labels(y_cf, cf.shape, obs.dtype)
    return obs, cf, labels, cf_labels, q, jnp.asarray(tau, obs.dtype)


# ----------------------------------------------------------------------------- the two kinds


class _Binary:
    """Primitives of binary scores: a prediction is the positive class's probability ``()``."""

    classes = False

    @staticmethod
    def decide(p, tau):
        return p >= tau

    @staticmethod
    def spread(d):
        """The squared deviation of one prediction from another, ``d = a − b``."""
        return jnp.square(d)

    @staticmethod
    def distance(a, b):
        return jnp.abs(a - b)

    @staticmethod
    def loss(p, label):
        return binary_bce(p, label)

    @staticmethod
    def soft_label(y_cf, q):
        """``Σ_k q_k y_cf[k]``, one unit's label distribution (the positive class's mass)."""
        return weighted_sum(q, y_cf)

    @staticmethod
    def target(y, dtype):
        return y.astype(dtype)

    @staticmethod
    def expected_loss(p, t):
        clipped = jnp.clip(p, EPS, 1 - EPS)
        return -(t * jnp.log(clipped) + (1 - t) * jnp.log1p(-clipped))

    @staticmethod
    def squared_error(p, t):
        return jnp.square(p - t)

    @staticmethod
    def label_spread(t):
        """The expected Brier of a soft label against itself, ``t (1 − t)``."""
        return t * (1 - t)

    @staticmethod
    def calibration_pair(p: Array, t: Array) -> tuple[Array, Array]:
        return p, t


@dataclasses.dataclass(frozen=True)
class _Classes:
    """Primitives of ``n`` class probabilities: a prediction is a vector ``(C,)`` on the simplex."""

    n: int
    classes = True

    @staticmethod
    def decide(p, tau):
        del tau  # the argmax
        return class_decisions(p)

    @staticmethod
    def spread(d):
        return 0.5 * jnp.sum(jnp.square(d), axis=-1)

    @staticmethod
    def distance(a, b):
        return total_variation(a, b)

    @staticmethod
    def loss(p, label):
        picked = jnp.take_along_axis(p, label[..., None], axis=-1)[..., 0]
        return _neg_log(picked)

    def soft_label(self, y_cf, q):
        """``Σ_k q_k 1[y_cf[k] = c]``: ``(K,) → (C,)``."""
        return weighted_sum(q, jax.nn.one_hot(y_cf, self.n, dtype=q.dtype))

    def target(self, y, dtype):
        return jax.nn.one_hot(y, self.n, dtype=dtype)

    @staticmethod
    def expected_loss(p, t):
        return jnp.sum(t * _neg_log(p), axis=-1)

    @staticmethod
    def squared_error(p, t):
        return jnp.sum(jnp.square(p - t), axis=-1)

    @staticmethod
    def label_spread(t):
        return 1 - jnp.sum(jnp.square(t), axis=-1)

    @staticmethod
    def calibration_pair(p: Array, t: Array) -> tuple[Array, Array]:
        """Top-label calibration: the confidence ``max_c p_c`` against ``t[argmax p]``."""
        top = jnp.argmax(p, axis=-1)
        return jnp.max(p, axis=-1), jnp.take_along_axis(t, top[..., None], axis=-1)[..., 0]


def _kind(n_classes: int | None) -> type[_Binary] | _Classes:
    """The primitives of binary scores (None) or of ``n_classes`` class probabilities."""
    return _Binary if n_classes is None else _Classes(n_classes)


def _neg_log(p: jax.Array) -> jax.Array:
    return -jnp.log(jnp.clip(p, EPS, 1 - EPS))


def classes_of(p_obs: jax.Array) -> int | None:
    """The class count C of ``p_obs (n, C)``, or None for binary scores ``(n,)``."""
    return int(p_obs.shape[-1]) if p_obs.ndim == 2 else None


# ----------------------------------------------------------------------------- stage 1: units


@struct.dataclass
class UnitSums:
    """The sufficient statistics of the counterfactual axis: per-unit reductions over the K
    interventions, summed over units (one unit's own contribution before summing, with
    ``count`` 1). Sums of chunks or shards add up (``+``); dividing by ``count`` gives the
    report's means. ``s_tv`` is None for binary scores, the risks None without labels."""

    count: jax.Array  # number of units summed
    s_var: jax.Array  # Σ_i Σ_k q_k spread(p_cf[i, k] − p_bar[i])
    s_flip: jax.Array  # Σ_i Σ_k q_k 1[decision flips]
    s_tv: jax.Array | None = None  # Σ_i Σ_k q_k TV(p_cf[i, k], p_obs[i]) (class probabilities)
    risk_ie: jax.Array | None = None  # Σ_i Σ_k q_k L[i, k]
    risk_wc: jax.Array | None = None  # Σ_i max_k L[i, k]
    risk_cvar: jax.Array | None = None  # (len(alphas),): Σ_i CVaR_a(L[i, :])

    def __add__(self, other: UnitSums) -> UnitSums:
        return jax.tree.map(jnp.add, self, other)


def weighted_sum(q: jax.Array, v: jax.Array) -> jax.Array:
    """``Σ_k q_k v[k]`` over the leading (intervention) axis of ``v (K, ...)``: one product
    contracting K, which XLA:CPU turns into a loop over the trailing axes (the units) when K
    leads."""
    return jax.lax.dot_general(q, v, (((0,), (0,)), ((), ())))


def _over_interventions(kind, p_obs, x, p_bar, y, y_cf, q, tau):
    """The reductions over the K interventions of every unit, written on intervention-major
    arrays: ``x (K, n)`` (classes ``(K, n, C)``) the counterfactual scores, ``p_obs``,
    ``p_bar`` ``(n,)`` (``(n, C)``), ``y (n,)`` or None, ``y_cf (K, n)`` or None.

    Returns ``(y_bar or None, UnitSums of each unit (leaves with a leading n), losses (K, n)
    or None)``; the CVaR of the losses is left to :func:`unit_stage`. Every statistic is one
    unit's reduction over K; the units ride along the trailing axis rather than under
    ``vmap``, because XLA:CPU vectorises reductions over a leading K across the units (one
    fused loop each) but not the batched products that ``vmap`` of a per-unit sum produces."""
    dtype = x.dtype
    total = functools.partial(weighted_sum, q)
    flips = (kind.decide(x, tau) != kind.decide(p_obs, tau)[None]).astype(dtype)
    sums = UnitSums(
        count=jnp.ones(p_obs.shape[:1], dtype),
        s_var=total(kind.spread(x - p_bar[None])),
        s_flip=total(flips),
        s_tv=total(kind.distance(x, p_obs[None])) if kind.classes else None,
    )
    y_bar = losses = None
    if y is not None:
        labels = jnp.broadcast_to(y, x.shape[:2]) if y_cf is None else y_cf
        if y_cf is not None:
            y_bar = kind.soft_label(y_cf, q)
        # (K, n), materialised once: the barrier keeps XLA from recomputing the logarithms
        # in each consumer (the sums here, the sort of the tail risks)
        losses = jax.lax.optimization_barrier(kind.loss(x, labels))
        sums = sums.replace(risk_ie=total(losses), risk_wc=jnp.max(losses, axis=0))
    return y_bar, sums, losses


def unit_stage(
    p_obs: jax.Array,
    p_cf: jax.Array,
    y: jax.Array | None,
    y_cf: jax.Array | None,
    q: jax.Array,
    tau: jax.Array,
    *,
    alphas: tuple[float, ...],
    uniform: bool = False,
) -> tuple[jax.Array, jax.Array | None, UnitSums]:
    """The reductions over the intervention axis of every unit (traced), of ``p_obs (n,)``,
    ``p_cf (n, K)`` (classes ``(n, C)``, ``(n, K, C)``), ``y (n,)`` or None, ``y_cf (n, K)``
    or None.

    Returns ``(p_bar, y_bar, per_unit)``: ``p_bar (n,)`` (``(n, C)``), ``y_bar`` likewise
    (only with ``y_cf``), and each unit's :class:`UnitSums` (every leaf with a leading n):
    :func:`sum_units` adds them up. Inside, the scores are laid out intervention-major
    (``(K, n)``; a transpose that XLA fuses into the first consumer)."""
    kind = _kind(classes_of(p_obs))
    p_bar = marginalise(p_cf, q)
    y_bar, per_unit, losses = _over_interventions(
        kind, p_obs, jnp.moveaxis(p_cf, 1, 0), p_bar, y, None if y_cf is None else y_cf.T, q, tau
    )
    if losses is not None:  # every unit's tail risks in one sort over K
        per_unit = per_unit.replace(risk_cvar=cvar_units_kn(losses, q, alphas, uniform=uniform).T)
    return p_bar, y_bar, per_unit


def marginalise(p_cf: jax.Array, q: jax.Array) -> jax.Array:
    """``p_bar = Σ_k q_k p_cf[:, k]`` of ``p_cf (n, K)`` or ``(n, K, C)``: one product with
    ``q``, whose every unit's value is the same however the units are batched,
    chunked or fused with other work (a per-unit reduction is vectorised differently in
    each, and a marginalised score one rounding apart can change a bin, a decision or a
    tie)."""
    if p_cf.ndim == 2:
        return q @ p_cf.T
    return jnp.einsum("nkc,k->nc", p_cf, q)


def sum_units(per_unit: UnitSums, mask: jax.Array | None = None) -> UnitSums:
    """The per-unit statistics of :func:`unit_stage` summed over the units; ``mask (n,)``
    (1 for a unit, 0 for padding) leaves padded units out."""
    if mask is None:
        return jax.tree.map(lambda v: jnp.sum(v, axis=0), per_unit)

    def total(v):
        keep = mask.reshape(mask.shape + (1,) * (v.ndim - 1)) > 0
        return jnp.sum(jnp.where(keep, v, jnp.zeros((), v.dtype)), axis=0)

    return jax.tree.map(total, per_unit)


@struct.dataclass
class UnitStage:
    """:func:`unit_stage` on a dict of per-unit arrays (``p_obs``, ``p_cf`` and optionally
    ``y``, ``y_cf``), a hashable callable for :func:`cfjax.distributed.map_batch`."""

    alphas: tuple[float, ...] = struct.field(pytree_node=False)
    uniform: bool = struct.field(pytree_node=False, default=False)

    def __call__(self, arrays, q, tau):
        return unit_stage(
            arrays["p_obs"],
            arrays["p_cf"],
            arrays.get("y"),
            arrays.get("y_cf"),
            q,
            tau,
            alphas=self.alphas,
            uniform=self.uniform,
        )


# ----------------------------------------------------------------------------- stage 2: finish


def finish(
    p_obs: jax.Array,
    p_bar: jax.Array,
    y: jax.Array | None,
    y_bar: jax.Array | None,
    sums: UnitSums,
    tau: jax.Array,
    *,
    alphas: tuple[float, ...],
    n_bins: int,
    mask: jax.Array | None = None,
) -> Report:
    """The reductions over the units (traced): the report from the per-unit vectors
    ``p_obs``, ``p_bar`` (``(n,)``, or ``(n, C)``), labels ``y (n,)`` and, with
    counterfactual labels, ``y_bar`` (``(n,)`` or ``(n, C)``), and the summed statistics of
    the intervention axis (:func:`unit_stage`, :func:`sum_units`). ``mask (n,)`` (bool):
    the units that count, the others padding (a shape bucket) that changes no field; their
    number is ``sums.count``."""
    n_classes = classes_of(p_obs)
    kind = _kind(n_classes)
    dtype = p_obs.dtype
    count = sums.count
    mean = functools.partial(_masked_mean, mask=mask, count=count)
    spearman, kendall, rank_change = _rank_fields(p_obs, p_bar, mask)
    stability = dict(
        s_var=sums.s_var / count,
        s_flip=sums.s_flip / count,
        d_obs=mean((kind.decide(p_obs, tau) != kind.decide(p_bar, tau)).astype(dtype)),
        score_shift=mean(kind.distance(p_obs, p_bar)),
        spearman=spearman,
        kendall_tau_b=kendall,
        rank_change=rank_change,
    )
    if kind.classes:
        assert sums.s_tv is not None  # summed for class probabilities
        stability["s_tv"] = sums.s_tv / count
    if y is None:
        labelled = _nan_label_fields(dtype, alphas)
    else:
        # with labels, the unit stage summed the risks
        assert sums.risk_ie is not None and sums.risk_cvar is not None and sums.risk_wc is not None
        hard = kind.target(y, dtype)
        target = hard if y_bar is None else y_bar
        risk_cm = (
            mean(kind.loss(p_bar, y)) if y_bar is None else mean(kind.expected_loss(p_bar, y_bar))
        )  # expected over the labels
        labelled = dict(
            risk_orig=mean(kind.loss(p_obs, y)),
            risk_cm=risk_cm,
            risk_ie=sums.risk_ie / count,
            risk_cvar=sums.risk_cvar / count,
            risk_wc=sums.risk_wc / count,
            brier_orig=mean(kind.squared_error(p_obs, hard)),
            # Expected Brier over the label distribution: the squared distance to the soft
            # label plus the labels' own spread (zero for invariant labels).
            brier_cm=mean(kind.squared_error(p_bar, target) + kind.label_spread(target)),
        )
        for suffix, p, t in (("orig", p_obs, hard), ("cm", p_bar, target)):
            labelled.update(
                _binned_calibration(suffix, *kind.calibration_pair(p, t), n_bins, mask, count)
            )
    if n_classes is not None:
        return MulticlassReport(
            **labelled,
            **stability,
            alphas=alphas,
            labels="invariant" if y_bar is None else "counterfactual",
            classes=n_classes,
        )
    cls = MarginalisationReport if y_bar is None else CounterfactualLabelReport
    return cls(**labelled, **stability, alphas=alphas)


def _masked_mean(v: jax.Array, *, mask: jax.Array | None, count: jax.Array) -> jax.Array:
    """The mean over the units (axis 0) of ``v``, only of the ``count`` units in ``mask``."""
    if mask is None:
        return jnp.mean(v)
    return jnp.sum(jnp.where(mask, v, jnp.zeros((), v.dtype))) / count.astype(v.dtype)


def _rank_fields(
    a: jax.Array, b: jax.Array, mask: jax.Array | None = None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Spearman, Kendall's τ_b and the mean absolute rank change of scores ``a``, ``b (n,)``;
    for class probabilities ``(n, C)`` the averages over the classes of the class-c scores'.
    With ``mask``, of the units in it: the others get the largest key in both orders, so they
    rank after every unit and tie among themselves, and are left out of every sum."""
    if a.ndim == 2:
        per_class = jax.vmap(lambda u, w: _rank_fields(u, w, mask))(a.T, b.T)
        return jnp.mean(per_class[0]), jnp.mean(per_class[1]), jnp.mean(per_class[2])
    dtype = a.dtype
    if mask is None:
        bounds_a, bounds_b = _arrays.rank_bounds(a), _arrays.rank_bounds(b)
    else:

        def masked_key(x):
            key = _arrays.sortable_key(x)
            return jnp.where(mask, key, jnp.iinfo(key.dtype).max)

        bounds_a = _arrays.key_rank_bounds(masked_key(a))
        bounds_b = _arrays.key_rank_bounds(masked_key(b))
    ranks_a = _arrays.average_ranks_from_bounds(*bounds_a, dtype)
    ranks_b = _arrays.average_ranks_from_bounds(*bounds_b, dtype)
    change = jnp.abs(ranks_a - ranks_b)
    return (
        _spearman(ranks_a, ranks_b, mask),
        _kendall_tau_b(bounds_a, bounds_b, dtype, mask),
        jnp.mean(change)
        if mask is None
        else jnp.sum(jnp.where(mask, change, 0)) / jnp.sum(mask).astype(dtype),
    )


def _nan_label_fields(dtype: DTypeLike, alphas: tuple[float, ...]) -> dict[str, jax.Array]:
    nan = jnp.full((), math.nan, dtype)
    labelled = {f: nan for f in LABEL_FIELDS}
    labelled["risk_cvar"] = jnp.full((len(alphas),), math.nan, dtype)
    return labelled


def _binned_calibration(
    suffix: str,
    p: jax.Array,
    target: jax.Array,
    n_bins: int,
    mask: jax.Array | None = None,
    units: jax.Array | None = None,
) -> dict[str, jax.Array]:
    """ECE, MCE (equal-width bins) and smooth ECE of scores ``p (n,)`` against (possibly
    soft) targets ``target (n,)`` in [0, 1]; with ``mask``, of the ``units`` units in it."""
    count, sum_p, sum_y = _bins(p, target, n_bins, mask)
    gap = jnp.abs(sum_y - sum_p)
    if mask is None:
        n: int | Array = p.shape[0]
    else:
        assert units is not None, "a mask comes with the count of its units"
        n = units.astype(p.dtype)
    return {
        f"ece_{suffix}": jnp.sum(gap) / n,
        f"mce_{suffix}": jnp.max(jnp.where(count > 0, gap / jnp.maximum(count, 1), 0)),
        f"smece_{suffix}": _smooth_ece(p, target, mask)[0],
    }


# ----------------------------------------------------------------------------- both stages


@functools.partial(jax.jit, static_argnames=("alphas", "n_bins", "uniform"))
def report(p_obs, p_cf, y, y_cf, q, tau, *, alphas, n_bins, uniform=False) -> Report:
    """The report of prepared inputs (:func:`prepare`), traced: :func:`unit_stage`,
    :func:`sum_units`, :func:`finish`. Jittable and vmappable. ``uniform``: ``q`` is ``1/K``."""
    p_bar, y_bar, per_unit = unit_stage(
        p_obs, p_cf, y, y_cf, q, tau, alphas=alphas, uniform=uniform
    )
    return finish(p_obs, p_bar, y, y_bar, sum_units(per_unit), tau, alphas=alphas, n_bins=n_bins)


@struct.dataclass
class BatchReports:
    """The reports of a batch of problems (a leading axis on every array of ``arrays``;
    ``shared`` the arrays common to all): a hashable callable for
    :func:`cfjax.distributed.map_batch`. A batch of one runs the unbatched core (XLA:CPU's
    batched kernels are slower than the plain ones)."""

    alphas: tuple[float, ...] = struct.field(pytree_node=False)
    n_bins: int = struct.field(pytree_node=False)
    uniform: bool = struct.field(pytree_node=False, default=False)

    def __call__(self, arrays: dict, shared: dict):
        def one(a):
            v = {**shared, **a}
            return report(
                v["p_obs"],
                v["p_cf"],
                v.get("y"),
                v.get("y_cf"),
                v["q"],
                v["tau"],
                alphas=self.alphas,
                n_bins=self.n_bins,
                uniform=self.uniform,
            )

        if jax.tree.leaves(arrays)[0].shape[0] == 1:
            return jax.tree.map(lambda v: v[None], one(jax.tree.map(lambda v: v[0], arrays)))
        return jax.vmap(one)(arrays)


_finish_jit = jax.jit(finish, static_argnames=("alphas", "n_bins"))


def finish_on_host(
    p_obs: ArrayLike,
    p_bar: ArrayLike,
    y: ArrayLike | None,
    y_bar: ArrayLike | None,
    sums: UnitSums,
    tau: ArrayLike,
    *,
    alphas: tuple[float, ...],
    n_bins: int,
    mask: ArrayLike | None = None,
) -> Report:
    """:func:`finish` run once on the default device: the per-unit vectors and the sums come
    back to the host first (left on a mesh they would be replicated, and the stage run on
    every device). ``mask``: as in :func:`finish`."""
    as_dev = lambda v: None if v is None else jnp.asarray(np.asarray(v))  # noqa: E731
    return _finish_jit(
        as_dev(p_obs),
        as_dev(p_bar),
        as_dev(y),
        as_dev(y_bar),
        jax.tree.map(as_dev, sums),
        as_dev(tau),
        alphas=alphas,
        n_bins=n_bins,
        mask=as_dev(mask),
    )
